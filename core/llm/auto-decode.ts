/**
 * Greedy decode steps back to back where the model is (a session with `autoDecode`, decoder.ts): the
 * loop a runtime runs beside its KvBatch, on whatever thread holds the caches. Each step's argmaxes
 * are posted as the step ends; a row leaves at one of its end tokens or when its tokens are made,
 * or when the engine drops it (a stop string, a cancellation); the loop ends when no row is left or
 * the engine says stop (new rows want to join). Between steps `turn` lets the steering the engine
 * sent while the step ran arrive. Platform-neutral: the Node decoding worker runs it; a test runs it
 * in-process against the engine's own step-by-step loop.
 */

import type { StepRequest, StepResult } from './decoder.js';
import type { KvBatch, TensorKit } from './kv-batch.js';
import { argmax } from './sampling.js';

/** What the engine said to the running loop since its last step. */
export interface Steering {
  free: number[];
  stop: boolean;
}

export async function autoDecode<T>(
  batch: KvBatch, kit: TensorKit<T>, req: Extract<StepRequest, { kind: 'decode' }>, steer: Steering,
  post: (seqs: number[], tokens: Int32Array, step: StepResult) => void, turn: () => Promise<void>,
): Promise<StepResult> {
  const auto = req.auto!;
  const rows = req.rows.map((r, k) => ({ seq: r.seq, token: r.token, remaining: auto.remaining[k]!, end: new Set(auto.endIds[k]) }));
  let free = req.free;
  let vocab = 0;
  while (rows.length > 0) {
    const r = await batch.step({ kind: 'decode', free, rows: rows.map((x) => ({ seq: x.seq, token: x.token })) }, kit);
    free = [];
    vocab = r.vocab;
    const tokens = argmaxRows(r.logits!, r.vocab);
    post(rows.map((x) => x.seq), tokens, r);
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

/** Each row's argmax of rows × vocab logits. */
export function argmaxRows(logits: Float32Array, vocab: number): Int32Array {
  const out = new Int32Array(logits.length / vocab);
  for (let r = 0; r < out.length; r++) out[r] = argmax(logits.subarray(r * vocab, (r + 1) * vocab));
  return out;
}
