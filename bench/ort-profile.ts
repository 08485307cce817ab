/**
 * Where a decoder's time goes, op by op: onnxruntime's own profile (`enableProfiling`) of a decoder
 * model run through core's KvBatch as the decoding worker runs it, its kernel time summed by operator
 * type for each kind of run asked for — decode steps at a number of rows, or one long prompt (where a
 * time to first token is spent). Runs are told apart by their order: the i-th `model_run` event of the
 * profile is the i-th run the kit made, and each run is labelled as it is made. The benches that
 * compare layouts (llm-layouts.ts) and tsi with llama.cpp (llm-llamacpp.ts) print it.
 */

import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { layoutOf } from '../core/llm/decoder.js';
import { argmaxRows } from '../core/llm/auto-decode.js';
import { KvBatch, type KvArray, type TensorKit } from '../core/llm/kv-batch.js';
import { readOnnxIo } from '../runtime-node/onnx/info.js';

/** One operator type's kernel time: ms and calls per run of its kind. */
export interface OpTime { op: string; ms: number; calls: number }

/** What to profile: `decodeRows` decode steps after ~20-token prompts at each row count, and a prompt of `prefillTokens`. */
export interface ProfileAsk {
  decodeRows?: number[];
  steps?: number;
  prefillTokens?: number;
  threads: number;
  /** Whether the session's idle pool threads spin (the server's decoder does not on cores it takes whole). */
  spinning?: boolean;
}

export interface DecoderProfile {
  /** Per row count: kernel time by operator, per decode step. */
  decode: Map<number, OpTime[]>;
  /** Kernel time by operator of the prompt's prefill. */
  prefill?: OpTime[];
}

interface ProfileEvent { cat: string; name: string; ts: number; dur: number; args?: { op_name?: string } }

/** Profiles `modelPath` (its Hugging Face config.json given) as `ask` says. */
export async function profileDecoder(modelPath: string, hfConfig: Record<string, unknown>, ask: ProfileAsk): Promise<DecoderProfile> {
  const dir = mkdtempSync(join(tmpdir(), 'tsi-ort-profile-'));
  try {
    const session = await ort.InferenceSession.create(modelPath, {
      intraOpNumThreads: ask.threads, enableProfiling: true, profileFilePrefix: join(dir, 'profile'),
      extra: { session: { intra_op: { allow_spinning: ask.spinning ? '1' : '0' } } },
    });
    const lay = layoutOf(readOnnxIo(readFileSync(modelPath)), hfConfig);
    // Each run's label, in the order the runs were made.
    const labels: string[] = [];
    let label = '';
    const kit: TensorKit<ort.Tensor> = {
      int64: (d, dims) => new ort.Tensor('int64', d, dims),
      bool: (d, dims) => new ort.Tensor('bool', d, dims),
      kv: (d, dims) => new ort.Tensor(lay.kvType, d as KvArray, dims),
      data: (t) => t.data as Float32Array,
      dims: (t) => t.dims,
      run: (f, fe) => (labels.push(label), session.run(f, fe) as Promise<Record<string, ort.Tensor>>),
    };
    const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, k) => 3 + ((k * 7 + salt * 13) % 30000));
    for (const B of ask.decodeRows ?? []) {
      const batch = new KvBatch(lay);
      const rows = Array.from({ length: B }, (_, i) => ({ seq: i, tokens: tokens(20 + (i % 5) * 3, i) }));
      label = 'prompt';
      let next = await batch.step({ kind: 'prefill', free: [], rows, greedy: true }, kit);
      label = `decode ${B}`;
      for (let k = 0; k < (ask.steps ?? 16); k++) {
        const picks = argmaxRows(next.logits!, next.vocab);
        next = await batch.step({ kind: 'decode', free: [], rows: rows.map((r, b) => ({ seq: r.seq, token: picks[b]! })), greedy: true }, kit);
      }
      batch.dispose();
    }
    if (ask.prefillTokens) {
      const batch = new KvBatch(lay);
      label = 'prefill';
      await batch.step({ kind: 'prefill', free: [], rows: [{ seq: 0, tokens: tokens(ask.prefillTokens, 99) }], greedy: true }, kit);
      batch.dispose();
    }
    session.endProfiling();
    await session.release();
    // onnxruntime-node names the file itself (the prefix, then a timestamp) and does not return it.
    const events = JSON.parse(readFileSync(join(dir, readdirSync(dir)[0]!), 'utf8')) as ProfileEvent[];
    const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').sort((a, b) => a.ts - b.ts);
    if (runs.length !== labels.length) throw new Error(`the profile holds ${runs.length} runs, ${labels.length} were made`);
    const of = (want: string) => opTimes(events, runs.filter((_, i) => labels[i] === want));
    return {
      decode: new Map((ask.decodeRows ?? []).map((B) => [B, of(`decode ${B}`)])),
      prefill: ask.prefillTokens ? of('prefill') : undefined,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Kernel time by operator type over `runs`, per run. */
function opTimes(events: ProfileEvent[], runs: ProfileEvent[]): OpTime[] {
  const by = new Map<string, { us: number; n: number }>();
  // Both sorted by time: one pass.
  const nodes = events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time')).sort((a, b) => a.ts - b.ts);
  let r = 0;
  for (const e of nodes) {
    while (r < runs.length && e.ts > runs[r]!.ts + runs[r]!.dur) r++;
    if (r === runs.length) break;
    if (e.ts < runs[r]!.ts) continue;
    const op = e.args?.op_name ?? '?';
    const cur = by.get(op) ?? { us: 0, n: 0 };
    cur.us += e.dur;
    cur.n++;
    by.set(op, cur);
  }
  const n = Math.max(1, runs.length);
  return [...by].map(([op, { us, n: calls }]) => ({ op, ms: us / 1000 / n, calls: calls / n })).sort((a, b) => b.ms - a.ms);
}

/** The split in words: the total, then the top operators with their share of kernel time and calls a run. */
export function opCell(times: OpTime[], digits: number, top = 7): string {
  const total = times.reduce((a, t) => a + t.ms, 0);
  const calls = times.reduce((a, t) => a + t.calls, 0);
  const ops = times.slice(0, top).map((t) => `${t.op} ${t.ms.toFixed(digits)} (${((100 * t.ms) / total).toFixed(0)} %, ×${t.calls.toFixed(0)})`);
  return `${total.toFixed(digits)} ms of kernels over ${calls.toFixed(0)} calls: ${ops.join(', ')}`;
}
