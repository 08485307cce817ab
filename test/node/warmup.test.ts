/**
 * model_warmup through the real server: a JavaScript model records what its instances were sent before
 * the model became READY (zero data, random data, an input_data_file from the model's warmup/ folder,
 * batch_size N as one batch of N requests, count iterations), and says so in its first real answer;
 * every instance warms up; bad settings and a failing sample leave the model UNAVAILABLE with the
 * reason while the other models serve. ONNX models warm up on onnxruntime (the GPU suite does the same
 * on WebGPU).
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSubModel } from '../../scripts/gen-models.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { lengthPrefixed } from '../helpers/server.js';

const fileX = Float32Array.of(1.5, -2, 3.25, 4);
const fileY = Int32Array.of(7, -9);

const recorder = `
  export default class {
    initialize(args) { this.instance = args.model_instance_name; this.seen = []; }
    execute(requests) {
      if (requests[0].id.startsWith('warmup_')) {
        this.seen.push(requests.map((r) => ({
          id: r.id,
          X: { shape: r.input('X').shape, data: Array.from(r.input('X').data) },
          Y: { shape: r.input('Y').shape, data: Array.from(r.input('Y').data) },
          Z: { shape: r.input('Z').shape, data: r.input('Z').data },
        })));
        return requests.map(() => ({ outputs: { OUT: ['warm'] } }));
      }
      return requests.map(() => ({ outputs: { OUT: [JSON.stringify({ instance: this.instance, seen: this.seen })] } }));
    }
  }`;

const io = `max_batch_size: 4
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "Y" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "Z" data_type: TYPE_STRING dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]`;

const addSub = (name: string, warmup: string) => `name: "${name}"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
${warmup}`;

describe('model_warmup', () => {
  let server: TestServer;
  let repo: ReturnType<typeof tempRepo>;

  beforeAll(async () => {
    repo = tempRepo({
      'recorder/config.pbtxt': `name: "recorder"\nbackend: "javascript"\n${io}
instance_group [ { kind: KIND_CPU count: 2 } ]
model_warmup [
  {
    name: "zeros"
    batch_size: 3
    count: 2
    inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    inputs { key: "Y" value: { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } }
    inputs { key: "Z" value: { data_type: TYPE_STRING dims: [ 1 ] zero_data: true } }
  },
  {
    name: "random"
    batch_size: 1
    inputs [
      { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } },
      { key: "Y" value: { data_type: TYPE_INT32 dims: [ 2 ] random_data: true } },
      { key: "Z" value: { data_type: TYPE_STRING dims: [ 1 ] random_data: true } }
    ]
  },
  {
    name: "from files"
    batch_size: 1
    inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x.bin" } }
    inputs { key: "Y" value: { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "y.bin" } }
    inputs { key: "Z" value: { data_type: TYPE_STRING dims: [ 1 ] input_data_file: "z.bin" } }
  },
  { name: "skipped" batch_size: 0 }
]`,
      'recorder/1/model.js': recorder,
      'recorder/warmup/x.bin': new Uint8Array(fileX.buffer),
      'recorder/warmup/y.bin': new Uint8Array(fileY.buffer),
      'recorder/warmup/z.bin': lengthPrefixed(['hello warmup']),
      'addsub_warm/config.pbtxt': addSub('addsub_warm', `model_warmup [{ name: "ones" batch_size: 8 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } }]`),
      'addsub_warm/1/model.onnx': addSubModel('FP32', [16], true),
      // L0_warmup's last sample: `zero_data: false` sets the oneof (zeros), as Triton reads it.
      'addsub_zero_false/config.pbtxt': addSub('addsub_zero_false', ['INPUT0', 'INPUT1'].reduce((w, k) => `${w} inputs { key: "${k}" value: { data_type: TYPE_FP32 dims: 16 zero_data: false } }`, 'model_warmup [{ name: "sample" batch_size: 1') + ' }]'),
      'addsub_zero_false/1/model.onnx': addSubModel('FP32', [16], true),
      // The model takes [16]; the sample sends [3]: onnxruntime refuses it, so the load fails.
      'addsub_bad_dims/config.pbtxt': addSub('addsub_bad_dims', `model_warmup [{ name: "wrong shape" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } }]`),
      'addsub_bad_dims/1/model.onnx': addSubModel('FP32', [16], true),
      'addsub_no_file/config.pbtxt': addSub('addsub_no_file', `model_warmup [{ name: "missing" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "nope.bin" } } inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } }]`),
      'addsub_no_file/1/model.onnx': addSubModel('FP32', [16], true),
      'addsub_short_file/config.pbtxt': addSub('addsub_short_file', `model_warmup [{ name: "short" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "short.bin" } } inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } }]`),
      'addsub_short_file/1/model.onnx': addSubModel('FP32', [16], true),
      'addsub_short_file/warmup/short.bin': new Uint8Array(10),
      'addsub_variable/config.pbtxt': addSub('addsub_variable', `model_warmup [{ name: "variable" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ -1 ] zero_data: true } } }]`),
      'addsub_variable/1/model.onnx': addSubModel('FP32', [16], true),
      // L0_warmup's sequence sample: its control tensors (START, READY) named in the sample as [1],
      // batched like any input (the model takes [-1, 1]).
      'seq_warm/config.pbtxt': readFileSync(join(MODELS, 'simple_sequence', 'config.pbtxt'), 'utf8').replace('name: "simple_sequence"', 'name: "seq_warm"')
        + ['INPUT', 'START', 'READY'].reduce((w, k) => `${w} inputs { key: "${k}" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }`, 'model_warmup [{ name: "sequence sample" count: 2 batch_size: 8')
        + ' }]\n',
      'seq_warm/1/model.onnx': readFileSync(join(MODELS, 'simple_sequence', '1', 'model.onnx')),
    });
    server = await startTestServer({ modelRepositories: [repo.path] });
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
    repo?.cleanup();
  });

  it('runs every sample on an instance before the model is READY, as the config describes', async () => {
    const r = await postJson(`${server.url}/v2/models/recorder/infer`, {
      inputs: [
        { name: 'X', datatype: 'FP32', shape: [1, 4], data: [0, 0, 0, 0] },
        { name: 'Y', datatype: 'INT32', shape: [1, 2], data: [0, 0] },
        { name: 'Z', datatype: 'BYTES', shape: [1, 1], data: ['real'] },
      ],
    });
    expect(r.status).toBe(200);
    const { seen } = JSON.parse(r.body.outputs[0].data[0]) as { seen: { id: string; X: { shape: number[]; data: number[] }; Y: { data: number[] }; Z: { data: string[] } }[][] };
    // zeros ×2 (batches of 3), random ×1, from files ×1; the batch_size 0 sample is skipped.
    expect(seen.map((b) => b.length)).toEqual([3, 3, 1, 1]);
    for (const b of seen.slice(0, 2)) {
      for (const req of b) {
        expect(req.X).toEqual({ shape: [1, 4], data: [0, 0, 0, 0] });
        expect(req.Y.data).toEqual([0, 0]);
        expect(req.Z.data).toEqual(['']);
      }
    }
    const random = seen[2]![0]!;
    expect(random.X.data.some((v) => v !== 0)).toBe(true);
    expect(random.X.data.every((v) => v >= -1 && v < 1)).toBe(true);
    expect(random.Z.data).toEqual(['']);
    const files = seen[3]![0]!;
    expect(files.X.data).toEqual(Array.from(fileX));
    expect(files.Y.data).toEqual(Array.from(fileY));
    expect(files.Z.data).toEqual(['hello warmup']);
  });

  it('warms up every instance, and logs it', () => {
    for (const inst of ['recorder_0_0', 'recorder_0_1']) {
      expect(server.logs.some((l) => l.includes(`model 'recorder' instance ${inst} is running warmup sample 'from files' for iteration 1`))).toBe(true);
    }
    expect(server.logs.some((l) => /model 'addsub_warm' version 1: 1 warmup sample\(s\) ran on 2 instance\(s\)/.test(l))).toBe(true);
  });

  it('serves an ONNX model that warmed up, and counts no warmup in its statistics', async () => {
    const r = await postJson(`${server.url}/v2/models/addsub_warm/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: Array(16).fill(2) },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 16], data: Array(16).fill(1) },
      ],
    });
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].data).toEqual(Array(16).fill(3));
    const stats = await getJson(`${server.url}/v2/models/addsub_warm/stats`);
    expect(stats.body.model_stats[0].inference_count).toBe(1);
  });

  it("takes a sample input whose oneof is set to false (L0_warmup's `zero_data: false`)", async () => {
    expect((await getJson(`${server.url}/v2/models/addsub_zero_false/ready`)).status).toBe(200);
    expect(server.logs.some((l) => l.includes("model 'addsub_zero_false' instance addsub_zero_false_0_0 is running warmup sample 'sample' for iteration 1"))).toBe(true);
  });

  it("warms up a sequence model with its control tensors in the sample (L0_warmup's sequence sample)", async () => {
    const ready = await getJson(`${server.url}/v2/models/seq_warm/ready`);
    expect(ready.status).toBe(200);
    expect(server.logs.some((l) => l.includes("is running warmup sample 'sequence sample' for iteration 2"))).toBe(true);
  });

  it('leaves a model whose warmup fails UNAVAILABLE with the reason, and serves the others', async () => {
    const index = (await postJson(`${server.url}/v2/repository/index`, {})).body as { name: string; state: string; reason: string }[];
    const reason = (n: string) => index.find((e) => e.name === n)?.reason ?? '';
    expect(index.find((e) => e.name === 'addsub_bad_dims')?.state).toBe('UNAVAILABLE');
    expect(reason('addsub_bad_dims')).toMatch(/failed to run warmup sample 'wrong shape': .*INPUT0/);
    expect(reason('addsub_no_file')).toContain("input_data_file 'warmup/nope.bin' not found");
    expect(reason('addsub_short_file')).toContain('warmup setting expects 64 bytes, but the data provided from short.bin only has 10 bytes');
    expect(reason('addsub_variable')).toContain("warmup setting expects all variable-size dimensions are specified for input 'INPUT0'");
    expect(index.find((e) => e.name === 'addsub_warm')?.state).toBe('READY');
    const ready = await fetch(`${server.url}/v2/models/addsub_bad_dims/ready`);
    expect(ready.status).not.toBe(200);
  });
});
