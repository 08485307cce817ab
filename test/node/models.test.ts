/**
 * Checks the generated model repository and the fixture builders against onnxruntime-node directly,
 * without the server: every default model is generated into a temp folder, loaded with ORT, and its
 * outputs compared with exact values (integer/string/add-sub models) or float64 JS references (the
 * MLPs). It also checks determinism of generation and that the hand-written config.pbtxt files in
 * `models/` name only tensors the generated models really have.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_MODELS, FOLDER_MODELS, IMAGE_CLASSIFIER_LABELS, addSubModel, classifierPattern, generateModels, identityModel,
  referenceImageClassifier, referenceMlpBatch, referenceSequenceStep, referenceSimpleSequence, slowModel, type Datatype,
} from '../../scripts/gen-models.js';
import { decodeModel, fillUniform } from '../../graph/onnx-builder.js';
import { crossEncoderFiles } from '../../scripts/cross-encoder-model.js';

const COMMITTED = fileURLToPath(new URL('../../models/', import.meta.url));
let repo: string;
let genLog: string[] = [];
let genMs = 0;

beforeAll(async () => {
  repo = await mkdtemp(join(tmpdir(), 'tsi-models-'));
  const t0 = performance.now();
  await generateModels(repo, { log: (s) => genLog.push(s) });
  genMs = performance.now() - t0;
});
afterAll(async () => {
  await rm(repo, { recursive: true, force: true });
});

type Source = string | Uint8Array;
const open = (m: Source) => {
  const opts = { intraOpNumThreads: 1, interOpNumThreads: 1 };
  return typeof m === 'string'
    ? ort.InferenceSession.create(join(repo, m, '1', 'model.onnx'), opts)
    : ort.InferenceSession.create(m, opts);
};
const i32 = (v: number[], dims: number[]) => new ort.Tensor('int32', Int32Array.from(v), dims);
const str = (v: string[], dims: number[]) => new ort.Tensor('string', v, dims);

describe('generateModels', () => {
  it('writes every default model, one log line each', async () => {
    expect(genLog).toHaveLength(Object.keys(DEFAULT_MODELS).length + Object.keys(FOLDER_MODELS).length);
    for (const name of Object.keys(DEFAULT_MODELS)) expect(existsSync(join(repo, name, '1', 'model.onnx'))).toBe(true);
    // How long it took is printed, not asserted: a timing says nothing on a loaded machine.
    console.log(`generated ${genLog.length} models in ${genMs.toFixed(0)} ms`);
  });

  it('is deterministic: a second run writes the same bytes', async () => {
    const again = await mkdtemp(join(tmpdir(), 'tsi-models-'));
    try {
      await generateModels(again);
      for (const name of Object.keys(DEFAULT_MODELS)) {
        const a = await readFile(join(repo, name, '1', 'model.onnx'));
        const b = await readFile(join(again, name, '1', 'model.onnx'));
        expect(a.equals(b), name).toBe(true);
      }
    } finally {
      await rm(again, { recursive: true, force: true });
    }
  });

  it('honours `only` and rejects unknown names', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tsi-models-'));
    try {
      await generateModels(dir, { only: ['simple'] });
      expect(await readdir(dir)).toEqual(['simple']);
      await expect(generateModels(dir, { only: ['nope'] })).rejects.toThrow(/unknown default model/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('encodes IR 8, opset 13 and a symbolic batch dim', async () => {
    const m = decodeModel(await readFile(join(repo, 'simple', '1', 'model.onnx'))) as {
      ir_version: string; opset_import: { version: string }[];
      graph: { input: { type: { tensor_type: { shape: { dim: object[] } } } }[] };
    };
    expect(m.ir_version).toBe('8');
    expect(m.opset_import[0]!.version).toBe('13');
    expect(m.graph.input[0]!.type.tensor_type.shape.dim).toEqual([{ dim_param: 'batch' }, { dim_value: '16' }]);
    const s = await open('simple');
    expect(s.inputMetadata[0]).toMatchObject({ name: 'INPUT0', type: 'int32', shape: ['batch', 16] });
  });
});

describe('committed configs match the generated models', () => {
  for (const name of Object.keys(DEFAULT_MODELS)) {
    it(name, async () => {
      const cfgPath = join(COMMITTED, name, 'config.pbtxt');
      if (name === 'autocomplete_add') {
        expect(existsSync(cfgPath)).toBe(false);
        return;
      }
      const text = (await readFile(cfgPath, 'utf8')).replace(/#.*$/gm, '');
      if (/backend:\s*"llm"/.test(text)) {
        // An llm model's config names its text API; its graph is the decoder layout core/llm reads.
        const d = await open(name);
        expect(d.inputNames).toEqual(expect.arrayContaining(['input_ids', 'attention_mask', 'position_ids', 'past_key_values.0.key']));
        expect(d.outputNames).toEqual(expect.arrayContaining(['logits', 'present.0.key']));
        return;
      }
      if (/backend:\s*"embedding"/.test(text)) {
        // An embedding model's config names its text API; its graph is the encoder layout core/encoders/embedding.ts reads.
        const e = await open(name);
        expect(e.inputNames).toEqual(['input_ids', 'attention_mask', 'token_type_ids']);
        expect(e.outputNames).toEqual(['last_hidden_state']);
        return;
      }
      if (/backend:\s*"classifier"/.test(text)) {
        // A classifier's config names its text API; its graph is an encoder with a head (core/encoders/classifier.ts).
        const c = await open(name);
        expect(c.inputNames).toEqual(name.endsWith('_xlmr') ? ['input_ids', 'attention_mask'] : ['input_ids', 'attention_mask', 'token_type_ids']);
        expect(c.outputNames).toEqual(['logits']);
        return;
      }
      const names = [...text.matchAll(/\b(?:name|input_name|output_name): "([^"]+)"/g)].map((m) => m[1]!);
      expect(names[0]).toBe(name);
      const s = await open(name);
      const tensors = new Set([...s.inputNames, ...s.outputNames]);
      for (const n of names.slice(1)) expect(tensors.has(n), `${name}: ${n}`).toBe(true);
      // Every model input must be fed by the config: a listed input, a control input or state.
      for (const n of s.inputNames) expect(names, `${name}: ${n}`).toContain(n);
    });
  }
});

describe('committed cross-encoder files are what scripts/cross-encoder-model.ts writes', () => {
  for (const [model, files] of Object.entries(crossEncoderFiles())) {
    it(model, async () => {
      for (const [name, json] of Object.entries(files)) {
        expect(JSON.parse(await readFile(join(COMMITTED, model, '1', name), 'utf8')), `${model}/1/${name}`).toEqual(JSON.parse(JSON.stringify(json)));
      }
    });
  }
});

describe('default models compute the documented values', () => {
  it('simple: INT32 add/sub, exact with wrap-around', async () => {
    const a = Array.from({ length: 32 }, (_, i) => i * 1000 - 7);
    const b = Array.from({ length: 32 }, (_, i) => 3 - i * i);
    a[0] = 2147483647; b[0] = 1;
    const r = await (await open('simple')).run({ INPUT0: i32(a, [2, 16]), INPUT1: i32(b, [2, 16]) });
    expect([...(r.OUTPUT0!.data as Int32Array)]).toEqual(a.map((x, i) => (x + b[i]!) | 0));
    expect([...(r.OUTPUT1!.data as Int32Array)]).toEqual(a.map((x, i) => (x - b[i]!) | 0));
    expect(r.OUTPUT0!.dims).toEqual([2, 16]);
  });

  it('add_sub: FP32 add/sub, exact', async () => {
    const a = fillUniform(new Float32Array(48), 1, -100, 100);
    const b = fillUniform(new Float32Array(48), 2, -100, 100);
    const r = await (await open('add_sub')).run({
      INPUT0: new ort.Tensor('float32', a, [3, 16]), INPUT1: new ort.Tensor('float32', b, [3, 16]),
    });
    expect([...(r.OUTPUT0!.data as Float32Array)]).toEqual([...a].map((x, i) => Math.fround(x + b[i]!)));
    expect([...(r.OUTPUT1!.data as Float32Array)]).toEqual([...a].map((x, i) => Math.fround(x - b[i]!)));
  });

  it('simple_string: decimal strings are added and subtracted exactly', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i * 37 - 100);
    const b = Array.from({ length: 16 }, (_, i) => 5 - i * 1234567);
    const r = await (await open('simple_string')).run({
      INPUT0: str(a.map(String), [1, 16]), INPUT1: str(b.map(String), [1, 16]),
    });
    expect(r.OUTPUT0!.data).toEqual(a.map((x, i) => String(x + b[i]!)));
    expect(r.OUTPUT1!.data).toEqual(a.map((x, i) => String(x - b[i]!)));
  });

  it('image_classifier: classifierPattern(k) is classified as class k', async () => {
    const batch = IMAGE_CLASSIFIER_LABELS.length;
    const images = new Float32Array(batch * 768);
    for (let k = 0; k < batch; k++) images.set(classifierPattern(k), k * 768);
    const s = await open('image_classifier');
    const r = await s.run({ image: new ort.Tensor('float32', images, [batch, 3, 16, 16]) });
    const scores = r.scores!.data as Float32Array;
    expect(r.scores!.dims).toEqual([batch, 10]);
    const ref = referenceImageClassifier(images, batch);
    for (let i = 0; i < scores.length; i++) expect(Math.abs(scores[i]! - ref[i]!)).toBeLessThan(1e-5);
    for (let k = 0; k < batch; k++) expect(argmax(scores.subarray(k * 10, k * 10 + 10))).toBe(k);

    // Robust to noise and intensity: the same blocks at 0.6 plus ±0.1 noise still win.
    const noisy = fillUniform(new Float32Array(batch * 768), 7, -0.1, 0.1);
    for (let k = 0; k < batch; k++) {
      const p = classifierPattern(k, 0.6);
      for (let i = 0; i < 768; i++) noisy[k * 768 + i]! += p[i]!;
    }
    const n = (await s.run({ image: new ort.Tensor('float32', noisy, [batch, 3, 16, 16]) })).scores!.data as Float32Array;
    for (let k = 0; k < batch; k++) expect(argmax(n.subarray(k * 10, k * 10 + 10))).toBe(k);

    const labels = (await readFile(join(COMMITTED, 'image_classifier', 'labels.txt'), 'utf8')).trimEnd().split('\n');
    expect(labels).toEqual([...IMAGE_CLASSIFIER_LABELS]);
  });

  it('autocomplete_add: SUM = A + B with dynamic first dims', async () => {
    const s = await open('autocomplete_add');
    expect(s.inputMetadata.map((m) => (m.isTensor ? m.shape : []))).toEqual([['batch', 4], ['batch', 4]]);
    const a = Float32Array.from([1.5, -2, 3, 4, 5, 6, 7, 8]);
    const b = Float32Array.from([0.25, 2, -3, 1e-3, 1, 1, 1, 1]);
    const r = await s.run({ A: new ort.Tensor('float32', a, [2, 4]), B: new ort.Tensor('float32', b, [2, 4]) });
    expect([...(r.SUM!.data as Float32Array)]).toEqual([...a].map((x, i) => Math.fround(x + b[i]!)));
  });

  it('simple_sequence_state: accumulates per slot, resets on START, holds when not READY', async () => {
    const s = await open('simple_sequence_state');
    // Two slots stepped together; the output state is fed back as the next input state.
    const steps = [
      { input: [5, 100], start: [1, 1], ready: [1, 1] },
      { input: [3, -1], start: [0, 0], ready: [1, 1] },
      { input: [7, 9], start: [0, 0], ready: [0, 1] },
      { input: [2, 4], start: [0, 1], ready: [1, 1] },
      { input: [2147483647, 0], start: [0, 0], ready: [1, 0] },
    ];
    let state = [0, 0];
    for (const st of steps) {
      const r = await s.run({
        INPUT: i32(st.input, [2, 1]), START: i32(st.start, [2, 1]), READY: i32(st.ready, [2, 1]),
        INPUT_STATE: i32(state, [2, 1]),
      });
      const want = [0, 1].map((j) => referenceSequenceStep({
        input: st.input[j]!, start: st.start[j]!, ready: st.ready[j]!, state: state[j]!,
      }));
      expect([...(r.OUTPUT!.data as Int32Array)]).toEqual(want.map((w) => w.output));
      state = [...(r.OUTPUT_STATE!.data as Int32Array)];
      expect(state).toEqual(want.map((w) => w.state));
    }
    expect(state).toEqual([(10 + 2147483647) | 0, 4]);
  });

  it('simple_sequence / simple_dyna_sequence: READY * (INPUT + START [+ END * int32(CORRID)]), no state', async () => {
    const rows = [
      { input: 5, start: 1, end: 0, ready: 1, corrid: 17n },
      { input: 5, start: 0, end: 0, ready: 1, corrid: 17n },
      { input: -3, start: 0, end: 1, ready: 1, corrid: (1n << 32n) + 5n },
      { input: 9, start: 1, end: 1, ready: 0, corrid: 18446744073709551615n },
      { input: 2147483647, start: 1, end: 1, ready: 1, corrid: 18446744073709551615n },
    ];
    const col = (k: 'input' | 'start' | 'end' | 'ready') => i32(rows.map((r) => r[k]), [rows.length, 1]);
    const plain = await (await open('simple_sequence')).run({ INPUT: col('input'), START: col('start'), READY: col('ready') });
    expect([...(plain.OUTPUT!.data as Int32Array)]).toEqual(rows.map(({ input, start, ready }) => referenceSimpleSequence({ input, start, ready })));
    expect([...(plain.OUTPUT!.data as Int32Array)]).toEqual([6, 5, -3, 0, -2147483648]);
    const dyna = await (await open('simple_dyna_sequence')).run({
      INPUT: col('input'), START: col('start'), END: col('end'), READY: col('ready'),
      CORRID: new ort.Tensor('uint64', BigUint64Array.from(rows.map((r) => r.corrid)), [rows.length, 1]),
    });
    expect([...(dyna.OUTPUT!.data as Int32Array)]).toEqual(rows.map((r) => referenceSimpleSequence(r)));
    // int32(CORRID) wraps: 2^32+5 → 5, 2^64−1 → −1.
    expect([...(dyna.OUTPUT!.data as Int32Array)]).toEqual([6, 5, 2, 0, 2147483647]);
  });

  it('mlp_batch: matches the float64 reference within 1e-4 relative, activations O(1)', async () => {
    const rows = 3;
    const x = fillUniform(new Float32Array(rows * 1024), 99, -1, 1);
    const r = await (await open('mlp_batch')).run({ INPUT: new ort.Tensor('float32', x, [rows, 1024]) });
    const y = r.OUTPUT!.data as Float32Array;
    const ref = referenceMlpBatch(x, rows);
    let maxAbs = 0;
    for (let i = 0; i < y.length; i++) {
      expect(Math.abs(y[i]! - ref[i]!)).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(ref[i]!)));
      maxAbs = Math.max(maxAbs, Math.abs(ref[i]!));
    }
    expect(maxAbs).toBeGreaterThan(0.1);
    expect(maxAbs).toBeLessThan(10);
  });
});

describe('fixture builders', () => {
  const cases: { dt: Datatype; ort: ort.Tensor.Type; data: ort.Tensor.DataType }[] = [
    { dt: 'BOOL', ort: 'bool', data: Uint8Array.from([1, 0, 1, 1, 0, 0]) },
    { dt: 'UINT8', ort: 'uint8', data: Uint8Array.from([0, 1, 127, 128, 254, 255]) },
    { dt: 'UINT16', ort: 'uint16', data: Uint16Array.from([0, 1, 32767, 32768, 65534, 65535]) },
    { dt: 'UINT32', ort: 'uint32', data: Uint32Array.from([0, 1, 2 ** 31, 2 ** 32 - 1, 7, 8]) },
    { dt: 'UINT64', ort: 'uint64', data: BigUint64Array.from([0n, 1n, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 1n, 9n]) },
    { dt: 'INT8', ort: 'int8', data: Int8Array.from([-128, -1, 0, 1, 126, 127]) },
    { dt: 'INT16', ort: 'int16', data: Int16Array.from([-32768, -1, 0, 1, 32766, 32767]) },
    { dt: 'INT32', ort: 'int32', data: Int32Array.from([-(2 ** 31), -1, 0, 1, 2 ** 31 - 2, 2 ** 31 - 1]) },
    { dt: 'INT64', ort: 'int64', data: BigInt64Array.from([-(2n ** 63n), -(2n ** 53n) - 1n, 0n, 2n ** 53n + 1n, 2n ** 40n, 2n ** 63n - 1n]) },
    // float16 as raw bits: 1.0, -2.0, +inf, a NaN payload, the smallest subnormal, 65504.
    { dt: 'FP16', ort: 'float16', data: Uint16Array.from([0x3c00, 0xc000, 0x7c00, 0x7e01, 0x0001, 0x7bff]) },
    { dt: 'FP32', ort: 'float32', data: Float32Array.from([0, -0, 1.5, -3.25e-30, 3.4e38, Infinity]) },
    { dt: 'FP64', ort: 'float64', data: Float64Array.from([0, Number.MIN_VALUE, Math.PI, -1e300, Number.MAX_VALUE, -Infinity]) },
    { dt: 'BYTES', ort: 'string', data: ['', 'a', 'ßü', 'long '.repeat(50), '\u{1F600}', 'z'] },
  ];
  for (const c of cases) {
    it(`identityModel(${c.dt}) round-trips exact values`, async () => {
      const shapes: [{ batch?: boolean; dims?: number[] }, number[]][] = [
        [{}, [2, 3]], [{ batch: false, dims: [6] }, [6]], [{ batch: true, dims: [3] }, [2, 3]],
      ];
      for (const [opts, dims] of shapes) {
        const s = await open(identityModel(c.dt, opts));
        const r = await s.run({ INPUT0: new ort.Tensor(c.ort, c.data, dims) });
        expect(r.OUTPUT0!.type).toBe(c.ort);
        expect(r.OUTPUT0!.dims).toEqual(dims);
        const got = r.OUTPUT0!.data;
        expect(ArrayBuffer.isView(got) ? bitsOf(got) : got).toEqual(ArrayBuffer.isView(c.data) ? bitsOf(c.data) : c.data);
      }
    });
  }

  it('addSubModel works on INT64, FP64 and UINT8 without a batch dim', async () => {
    const s64 = await open(addSubModel('INT64', [3], false));
    const a = BigInt64Array.from([2n ** 62n, -5n, 2n ** 53n + 1n]);
    const b = BigInt64Array.from([2n ** 62n, 7n, 1n]);
    const r = await s64.run({ INPUT0: new ort.Tensor('int64', a, [3]), INPUT1: new ort.Tensor('int64', b, [3]) });
    expect([...(r.OUTPUT0!.data as BigInt64Array)]).toEqual([-(2n ** 63n), 2n, 2n ** 53n + 2n]);
    expect([...(r.OUTPUT1!.data as BigInt64Array)]).toEqual([0n, -12n, 2n ** 53n]);

    const u8 = await open(addSubModel('UINT8', [-1], false));
    const ru = await u8.run({ INPUT0: new ort.Tensor('uint8', Uint8Array.from([250, 3]), [2]), INPUT1: new ort.Tensor('uint8', Uint8Array.from([10, 4]), [2]) });
    expect([...(ru.OUTPUT0!.data as Uint8Array)]).toEqual([4, 7]);
    expect([...(ru.OUTPUT1!.data as Uint8Array)]).toEqual([240, 255]);

    const f64 = await open(addSubModel('FP64', [2, 2], true));
    const x = Float64Array.from([0.1, 0.2, 1e300, -3]);
    const rf = await f64.run({ INPUT0: new ort.Tensor('float64', x, [1, 2, 2]), INPUT1: new ort.Tensor('float64', x, [1, 2, 2]) });
    expect([...(rf.OUTPUT0!.data as Float64Array)]).toEqual([...x].map((v) => v + v));
    expect(() => addSubModel('BYTES', [1], true)).toThrow();
  });

  it('slowModel(300) keeps one thread busy for ≥ 100 ms and returns ≈ INPUT', async () => {
    const s = await open(slowModel(300));
    const feeds = { INPUT: new ort.Tensor('float32', Float32Array.from([0.7]), [1, 1]) };
    await s.run(feeds);
    const t0 = performance.now();
    const r = await s.run(feeds);
    const ms = performance.now() - t0;
    console.log(`slowModel(300): ${ms.toFixed(0)} ms for a batch of 1`);
    expect(ms).toBeGreaterThanOrEqual(100);
    expect(Math.abs((r.OUTPUT!.data as Float32Array)[0]! - 0.7)).toBeLessThan(1e-4);
  });
});

function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

/** Byte-exact view for comparing typed arrays (NaN payloads and −0 included). */
function bitsOf(v: ArrayBufferView): number[] {
  return [...new Uint8Array(v.buffer, v.byteOffset, v.byteLength)];
}
