/**
 * The decode batch's member changes (core/llm/kv-batch.ts): a sequence that leaves becomes a hole, a
 * new one is copied into a hole or appended, and the batch is laid out anew only when that would
 * waste too much. Driven here through KvBatch with the real onnxruntime-node session of tiny_gpt,
 * sequences joining and leaving at different steps; every sequence's greedy tokens must equal the
 * reference decoder's for its prompt alone (test/node/llm-reference.ts), so a row read from the wrong
 * slot, a hole that leaks into a row, or logits handed back in the wrong order fail it.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { layoutOf, type DecoderLayout } from '../../core/llm/decoder.js';
import { KvBatch, type KvArray, type TensorKit } from '../../core/llm/kv-batch.js';
import { argmax } from '../../core/llm/sampling.js';
import { readOnnxIo } from '../../runtime-node/onnx/info.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

const DIR = join(import.meta.dirname, '../../models/tiny_gpt');
let session: ort.InferenceSession;
let layout: DecoderLayout;
let ref: ReferenceDecoder;
let kit: TensorKit<ort.Tensor>;

beforeAll(async () => {
  const bytes = readFileSync(join(DIR, '1', 'model.onnx'));
  layout = layoutOf(readOnnxIo(bytes), JSON.parse(readFileSync(join(DIR, '1', 'config.json'), 'utf8')));
  session = await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1 });
  ref = await referenceDecoder(DIR, 1);
  kit = {
    int64: (d, dims) => new ort.Tensor('int64', d, dims),
    bool: (d, dims) => new ort.Tensor('bool', d, dims),
    kv: (d: KvArray, dims) => new ort.Tensor(layout.kvType, d, dims),
    data: (t) => t.data as Float32Array,
    dims: (t) => t.dims,
    run: (f, fe) => session.run(f, fe) as Promise<Record<string, ort.Tensor>>,
  };
});
afterAll(async () => {
  await session?.release();
  await ref?.release();
});

const PROMPTS = ['once upon a time', 'the quick brown fox jumps over the lazy dog and', 'hello', 'a b c d e f', 'in the beginning there was', 'why', 'seven wizards quietly hex', 'jovial sphinx of black quartz judge my vow'];

/**
 * Sequences (prompt index, the step it joins at, tokens it makes) decoded in one KvBatch: each joins
 * with a prefill of its own and leaves when it has its tokens; returns each one's tokens.
 */
async function churn(plan: { p: number; at: number; n: number }[], batch = new KvBatch(layout)): Promise<number[][]> {
  const out = plan.map(() => [] as number[]);
  const live: number[] = [];
  let free: number[] = [];
  for (let step = 0; out.some((o, i) => o.length < plan[i]!.n); step++) {
    const joining = plan.map((x, i) => ({ ...x, i })).filter((x) => x.at === step);
    for (const j of joining) {
      const r = await batch.step({ kind: 'prefill', free: [], rows: [{ seq: j.i, tokens: ref.tokenizer.encode(PROMPTS[j.p]!) }] }, kit);
      out[j.i]!.push(argmax(r.logits!.subarray(0, r.vocab)));
      live.push(j.i);
    }
    for (let k = live.length - 1; k >= 0; k--) {
      const i = live[k]!;
      if (out[i]!.length >= plan[i]!.n) {
        live.splice(k, 1);
        free.push(i);
      }
    }
    if (live.length === 0) continue;
    const r = await batch.step({ kind: 'decode', free, rows: live.map((i) => ({ seq: i, token: out[i]!.at(-1)! })) }, kit);
    free = [];
    live.forEach((i, k) => out[i]!.push(argmax(r.logits!.subarray(k * r.vocab, (k + 1) * r.vocab))));
  }
  return out;
}

describe('llm KV batch: holes and in-place joins', () => {
  it('gives every sequence its reference tokens while others join and leave at different steps', async () => {
    const plan = [
      { p: 0, at: 0, n: 12 }, { p: 1, at: 0, n: 5 }, { p: 2, at: 0, n: 9 }, { p: 3, at: 0, n: 14 },
      // These join where earlier ones left (holes), one beside a hole left empty, one appended.
      { p: 4, at: 6, n: 6 }, { p: 5, at: 9, n: 7 }, { p: 6, at: 10, n: 4 }, { p: 7, at: 11, n: 8 },
      // A long prompt joins late: longer than the live length, so the batch is laid out anew.
      { p: 1, at: 13, n: 3 },
    ];
    const batch = new KvBatch(layout);
    const got = await churn(plan, batch);
    for (const [i, x] of plan.entries()) {
      expect(got[i], `sequence ${i} (prompt ${x.p}, joins at step ${x.at})`).toEqual(await ref.greedy(PROMPTS[x.p]!, x.n, { ignoreEos: true }));
    }
    // Both ways of changing members were taken.
    expect(batch.holeFills).toBeGreaterThan(0);
    expect(batch.relayouts).toBeGreaterThan(0);
  });
});
