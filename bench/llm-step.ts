/**
 * One decode step of mid_gpt taken apart, in this thread, no server: KvBatch's step split into the
 * model's run and the inputs laid out around it, at several batch sizes and intra-op thread counts,
 * and what a member change costs (a row joining: copied into a hole; a row leaving). With the decoding
 * worker's own clock in bench:llm this is the profile docs/llm.md ("Benchmark") reads what bounds tsi
 * from: how much of a step is the model, and how a step's time grows with its rows.
 *
 * Run:  npx tsx bench/llm-step.ts   (env: ROWS=1,8,32  THREADS=1,2  STEPS=32)
 */
import * as ort from 'onnxruntime-node';
import { KvBatch, type KvArray, type TensorKit } from '../core/llm/kv-batch.js';
import { layoutOf } from '../core/llm/decoder.js';
import { readOnnxIo } from '../runtime-node/onnx/info.js';
import { decoderModel, hfConfigJson } from '../scripts/llm-model.js';
import { MID_GPT } from './llm-common.js';

const model = decoderModel(MID_GPT);
const io = readOnnxIo(model);
const layout = layoutOf(io, JSON.parse(hfConfigJson(MID_GPT)));
const STEPS = Number(process.env.STEPS ?? 32);
console.log('(times from this machine as it is: on a shared one, compare rows of one run)');
for (const threads of (process.env.THREADS ?? '1,2').split(',').map(Number)) {
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: threads });
  const kit: TensorKit<ort.Tensor> = {
    int64: (d, dims) => new ort.Tensor('int64', d, dims),
    bool: (d, dims) => new ort.Tensor('bool', d, dims),
    kv: (d: KvArray, dims) => new ort.Tensor('float32', d, dims),
    data: (t) => t.data as Float32Array,
    dims: (t) => t.dims,
    run: (f, fe) => session.run(f, fe) as Promise<Record<string, ort.Tensor>>,
  };
  for (const B of (process.env.ROWS ?? '1,8,32').split(',').map(Number)) {
    const batch = new KvBatch(layout);
    const rows = Array.from({ length: B }, (_, i) => ({ seq: i, tokens: Array.from({ length: 20 + (i % 5) * 5 }, (_, k) => (k * 7 + i) % 2000) }));
    for (const r of rows) await batch.step({ kind: 'prefill', free: [], rows: [r] }, kit);
    let infer = 0;
    let input = 0;
    let wall = 0;
    let first = 0;
    for (let s = 0; s < STEPS; s++) {
      const t0 = performance.now();
      const res = await batch.step({ kind: 'decode', free: [], rows: rows.map((r) => ({ seq: r.seq, token: 5 })) }, kit);
      const dt = performance.now() - t0;
      if (s === 0) first = dt;
      else {
        wall += dt;
        infer += res.inferNs / 1e6;
        input += res.inputNs / 1e6;
      }
    }
    const n = STEPS - 1;
    // A join: one more prompt prefilled, then the step that lays the batch out again with it.
    await batch.step({ kind: 'prefill', free: [], rows: [{ seq: B, tokens: [1, 2, 3, 4, 5, 6, 7, 8] }] }, kit);
    const j = await batch.step({ kind: 'decode', free: [], rows: [...rows, { seq: B, tokens: [] }].map((r) => ({ seq: r.seq, token: 5 })) }, kit);
    // A leave: the step after one row was freed.
    const l = await batch.step({ kind: 'decode', free: [0], rows: [...rows.slice(1), { seq: B, tokens: [] }].map((r) => ({ seq: r.seq, token: 5 })) }, kit);
    console.log(`  join: run ${(j.inferNs / 1e6).toFixed(2)} ms, inputs ${(j.inputNs / 1e6).toFixed(2)} ms; leave: run ${(l.inferNs / 1e6).toFixed(2)}, inputs ${(l.inputNs / 1e6).toFixed(2)} ms`);
    console.log(`threads ${threads} rows ${B}: step ${(wall / n).toFixed(2)} ms (run ${(infer / n).toFixed(2)}, inputs+outputs ${(input / n).toFixed(2)}), first step with re-layout ${first.toFixed(2)} ms; ${((B * 1000) / (wall / n)).toFixed(0)} tokens/s`);
  }
  await session.release();
}
