/**
 * Decode steps back to back where the model is (a session with `autoDecode`, decoder.ts): the loop a
 * runtime runs beside its KvBatch, on whatever thread holds the caches. Each step's tokens are posted
 * as the step ends: a greedy row's argmax, or a sampled row's draw made here exactly as the engine's
 * Generation would make it (min_tokens' end tokens masked, the penalties over the row's own copy of
 * its history, its own copy of the seeded PRNG), with each sampled row's PRNG state after it, so the
 * engine's copy is the loop's whenever the loop stops; a row leaves at one of its end tokens or when its tokens are made,
 * or when the engine drops it (a stop string, a cancellation); the loop ends when no row is left or
 * the engine says stop (new rows want to join). Between steps `turn` lets the steering the engine
 * sent while the step ran arrive. Platform-neutral: the Node decoding worker runs it; a test runs it
 * in-process against the engine's own step-by-step loop.
 */

import type { AutoSample, StepRequest, StepResult } from './decoder.js';
import type { KvBatch, TensorKit } from './kv-batch.js';
import { argmax, maskIds, recordToken, sampleToken, seededRandom, type SamplingParams, type SeededRandom, type TokenHistory } from './sampling.js';

/** What the engine said to the running loop since its last step. */
export interface Steering {
  free: number[];
  stop: boolean;
}

export async function autoDecode<T>(
  batch: KvBatch, kit: TensorKit<T>, req: Extract<StepRequest, { kind: 'decode' }>, steer: Steering,
  post: (seqs: number[], tokens: Int32Array, step: StepResult, random?: Uint32Array) => void, turn: () => Promise<void>,
): Promise<StepResult> {
  const auto = req.auto!;
  const rows = req.rows.map((r, k) => ({
    seq: r.seq, token: r.token, remaining: auto.remaining[k]!, end: new Set(auto.endIds[k]), sample: samplerOf(auto.sample?.[k]),
  }));
  const sampled = rows.some((x) => x.sample);
  let free = req.free;
  let vocab = 0;
  while (rows.length > 0) {
    // Without a sampled row, a session whose logits stay on the device sends only each row's argmax.
    const r = await batch.step({ kind: 'decode', free, greedy: !sampled, rows: rows.map((x) => ({ seq: x.seq, token: x.token })) }, kit);
    free = [];
    vocab = r.vocab;
    let tokens: Int32Array;
    let random: Uint32Array | undefined;
    if (sampled) {
      tokens = new Int32Array(rows.length);
      random = new Uint32Array(rows.length);
      for (let k = 0; k < rows.length; k++) {
        const row = r.logits!.subarray(k * r.vocab, (k + 1) * r.vocab);
        const s = rows[k]!.sample;
        if (!s) tokens[k] = argmax(row);
        else {
          tokens[k] = s.choose(row, rows[k]!.end);
          random[k] = s.random.state;
        }
      }
    } else tokens = r.tokens ?? argmaxRows(r.logits!, r.vocab);
    post(rows.map((x) => x.seq), tokens, r, random);
    for (let k = rows.length - 1; k >= 0; k--) {
      const x = rows[k]!;
      x.token = tokens[k]!;
      if (--x.remaining <= 0 || x.end.has(x.token)) {
        rows.splice(k, 1);
        free.push(x.seq);
      }
    }
    await turn();
    if (steer.free.length > 0) {
      const drop = new Set(steer.free);
      steer.free = [];
      for (let k = rows.length - 1; k >= 0; k--) if (drop.has(rows[k]!.seq)) free.push(rows.splice(k, 1)[0]!.seq);
    }
    if (steer.stop) break;
  }
  // Rows that left at the last step: their caches go now, not with the next step.
  batch.free(free);
  return { vocab, kvBytes: batch.bytes(), inferNs: 0, inputNs: 0 };
}

/** A sampled row's chooser over its own copies of the engine's state. */
function samplerOf(a: AutoSample | null | undefined): { random: SeededRandom; choose(row: Float32Array, end: Set<number>): number } | undefined {
  if (!a) return undefined;
  const params: SamplingParams = a.params;
  const history: TokenHistory = { seen: new Set(a.seen), counts: new Map(a.counts) };
  const random = seededRandom(0);
  random.state = a.random;
  let suppress = a.suppressEnd;
  return {
    random,
    choose(row, end) {
      // Generation.choose's order: end tokens masked (min_tokens), then the penalties and the draw.
      if (suppress > 0) {
        suppress--;
        maskIds(row, end);
      }
      const t = sampleToken(row, params, history, random);
      recordToken(history, t);
      return t;
    },
  };
}

/** Each row's argmax of rows × vocab logits. */
export function argmaxRows(logits: Float32Array, vocab: number): Int32Array {
  const out = new Int32Array(logits.length / vocab);
  for (let r = 0; r < out.length; r++) out[r] = argmax(logits.subarray(r * vocab, (r + 1) * vocab));
  return out;
}
