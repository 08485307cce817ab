/**
 * Pipelines over the real HTTP server with real backends: the default image_pipeline ensemble
 * (JavaScript pre-processing → ONNX classifier → JavaScript post-processing) end to end and under
 * concurrent load (its composing models batch across ensemble requests), and the JavaScript backend:
 * batching, instances in parallel, sequences, request parameters, per-request errors, thrown errors,
 * and BLS calls (one, several in parallel, to a missing model) from inside `execute`.
 */

import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE_CLASSIFIER_LABELS, addSubModel, imageClassifierModel } from '../../scripts/gen-models.js';
import { expectComputeOverlap } from '../helpers/overlap.js';
import { MODELS, blockingJsModel, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const fp32 = (name: string, dims: number[]) => `{ name: "${name}" data_type: TYPE_FP32 dims: [ ${dims.join(', ')} ] }`;
const jsModel = (name: string, io: { inputs: string[]; outputs: string[] }, extra = '') =>
  `name: "${name}"\nbackend: "javascript"\ninput [ ${io.inputs.join(', ')} ]\noutput [ ${io.outputs.join(', ')} ]\n${extra}\n`;

const FILES: Record<string, string | Uint8Array> = {
  'image_classifier/1/model.onnx': imageClassifierModel(),
  'addsub4/config.pbtxt': `name: "addsub4"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninput [ ${fp32('INPUT0', [4])}, ${fp32('INPUT1', [4])} ]\noutput [ ${fp32('OUTPUT0', [4])}, ${fp32('OUTPUT1', [4])} ]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`,
  'addsub4/1/model.onnx': addSubModel('FP32', [4], true),
  // Echo with a twist per request: `scale` multiplies, `fail_with` fails just that request.
  'js_echo/config.pbtxt': jsModel('js_echo', { inputs: [fp32('X', [4])], outputs: [fp32('Y', [4])] },
    'max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 50000 }'),
  'js_echo/1/model.js': `
    export default class {
      initialize(args) { this.name = args.model_name; this.batches = []; }
      execute(requests) {
        this.batches.push(requests.length);
        return requests.map((r) => {
          if (r.parameters.fail_with) return { error: String(r.parameters.fail_with) };
          const k = Number(r.parameters.scale ?? 1);
          return { outputs: { Y: r.input('X').data.map((v) => v * k) }, parameters: { batch: requests.length } };
        });
      }
    }`,
  // A one-step ensemble over js_echo (whose queue delay lets concurrent requests batch).
  'echo_pipe/config.pbtxt': `name: "echo_pipe"\nplatform: "ensemble"\nmax_batch_size: 8\ninput [ ${fp32('IN', [4])} ]\noutput [ ${fp32('OUT', [4])} ]
    ensemble_scheduling { step [{ model_name: "js_echo" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } }] }\n`,
  'echo_pipe/1/README.txt': 'ensemble',
  // classify_pipe: pre-processing → classifier, its SCORES labelled by the classifier's labels.txt;
  // classify_outer: an ensemble over that ensemble.
  'classify_pipe/config.pbtxt': `name: "classify_pipe"\nplatform: "ensemble"\nmax_batch_size: 16
    input [{ name: "IMAGE" data_type: TYPE_UINT8 dims: [ 16, 16, 3 ] }]\noutput [ ${fp32('SCORES', [10])} ]
    ensemble_scheduling { step [
      { model_name: "image_preprocess" model_version: -1 input_map { key: "IMAGE" value: "IMAGE" } output_map { key: "image" value: "pre" } },
      { model_name: "image_classifier" model_version: -1 input_map { key: "image" value: "pre" } output_map { key: "scores" value: "SCORES" } }
    ] }\n`,
  'classify_pipe/1/README.txt': 'ensemble',
  'classify_outer/config.pbtxt': `name: "classify_outer"\nplatform: "ensemble"\nmax_batch_size: 16
    input [{ name: "IMAGE" data_type: TYPE_UINT8 dims: [ 16, 16, 3 ] }]\noutput [ ${fp32('TOP', [10])} ]
    ensemble_scheduling { step [{ model_name: "classify_pipe" model_version: -1 input_map { key: "IMAGE" value: "IMAGE" } output_map { key: "SCORES" value: "TOP" } }] }\n`,
  'classify_outer/1/README.txt': 'ensemble',
  // A non-batching ensemble over a batching model (Triton's ensemble tests have these).
  'nobatch_pipe/config.pbtxt': `name: "nobatch_pipe"\nplatform: "ensemble"\nmax_batch_size: 0
    input [ ${fp32('A', [4])}, ${fp32('B', [4])} ]\noutput [ ${fp32('SUM', [4])}, ${fp32('DIFF', [4])} ]
    ensemble_scheduling { step [{ model_name: "addsub4" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } }] }\n`,
  'nobatch_pipe/1/README.txt': 'ensemble',
  'js_throw/config.pbtxt': jsModel('js_throw', { inputs: [fp32('X', [4])], outputs: [fp32('Y', [4])] }),
  'js_throw/1/model.mjs': `export default class { execute() { throw new Error('the model broke: ' + 42); } }`,
  // Blocks its thread for 300 ms per batch; two instances must serve two requests at once.
  'js_busy/config.pbtxt': jsModel('js_busy', { inputs: [fp32('X', [4])], outputs: [fp32('Y', [4])] },
    'instance_group [{ kind: KIND_CPU count: 2 }]'),
  'js_busy/1/model.js': blockingJsModel(300),
  // A running sum per sequence: the sequence batcher's START/READY controls arrive as inputs.
  'js_acc/config.pbtxt': jsModel('js_acc', { inputs: [fp32('X', [1])], outputs: [fp32('SUM', [1])] }, `
    sequence_batching {
      control_input [
        { name: "START" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] }] },
        { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] }] }
      ]
    }`),
  'js_acc/1/model.js': `
    export default class {
      execute(requests) {
        return requests.map((r) => {
          if (r.input('START').data[0] === 1) this.sum = 0;
          this.sum += r.input('X').data[0];
          return { outputs: { SUM: [this.sum] } };
        });
      }
    }`,
  // BLS: calls addsub4 once, or `n` times in parallel, or a model named by `target`.
  'js_bls/config.pbtxt': jsModel('js_bls', { inputs: [fp32('A', [4]), fp32('B', [4])], outputs: [fp32('SUM', [4]), fp32('DIFF', [4])] }),
  'js_bls/1/model.js': `
    export default class {
      initialize(args) { this.server = args.server; }
      async execute(requests) {
        return Promise.all(requests.map(async (r) => {
          const target = r.parameters.target ?? 'addsub4';
          const call = (k) => this.server.infer({
            model_name: target,
            inputs: { INPUT0: { data: r.input('A').data.map((v) => v * k), shape: [1, 4] }, INPUT1: { data: r.input('B').data, shape: [1, 4] } },
          });
          const n = Number(r.parameters.n ?? 1);
          const answers = await Promise.all(Array.from({ length: n }, (_, i) => call(i + 1)));
          const sum = new Float32Array(4);
          const diff = new Float32Array(4);
          for (const a of answers) for (let i = 0; i < 4; i++) {
            sum[i] += a.outputs.OUTPUT0.data[i];
            diff[i] += a.outputs.OUTPUT1.data[i];
          }
          return { outputs: { SUM: sum, DIFF: diff } };
        }));
      }
    }`,
};

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo(FILES);
  for (const m of ['image_preprocess', 'image_postprocess', 'image_pipeline', 'image_classifier']) {
    cpSync(join(MODELS, m), join(repo.path, m), { recursive: true, filter: (src) => !src.endsWith('.onnx') });
  }
  s = await startTestServer({ modelRepositories: [repo.path], trace: { file: join(repo.path, 'trace.json') } });
});
afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const stats = async (m: string) => (await getJson(`${s.url}/v2/models/${m}/stats`)).body.model_stats[0];
const f32 = (name: string, data: number[], shape = [1, data.length]) => ({ name, datatype: 'FP32', shape, data });

/** 16x16 RGB pixels with 255 in 4x4 block k (the image the classifier maps to class k). */
function pattern(k: number): number[] {
  const px = new Array<number>(16 * 16 * 3).fill(0);
  const by = Math.floor(k / 4) * 4;
  const bx = (k % 4) * 4;
  for (let y = by; y < by + 4; y++) for (let x = bx; x < bx + 4; x++) for (let c = 0; c < 3; c++) px[(y * 16 + x) * 3 + c] = 255;
  return px;
}

describe('image_pipeline (JavaScript → ONNX → JavaScript ensemble)', () => {
  it('is loaded with its composing models and classifies a batch end to end', async () => {
    const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as any[];
    for (const m of ['image_pipeline', 'image_preprocess', 'image_classifier', 'image_postprocess']) {
      expect(index.find((e) => e.name === m)?.state, m).toBe('READY');
    }
    const images = Array.from({ length: 10 }, (_, k) => pattern(k)).flat();
    const r = await postJson(`${s.url}/v2/models/image_pipeline/infer`, {
      inputs: [{ name: 'IMAGE', datatype: 'UINT8', shape: [10, 16, 16, 3], data: images }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const label = r.body.outputs.find((o: any) => o.name === 'LABEL');
    expect(label.shape).toEqual([10, 1]);
    expect(label.data).toEqual([...IMAGE_CLASSIFIER_LABELS]);
    const p = r.body.outputs.find((o: any) => o.name === 'PROBABILITY').data as number[];
    for (const v of p) expect(v).toBeGreaterThan(0.3);
  });

  it('answers concurrent pipeline requests, each with its own result', async () => {
    const n = 48;
    const rs = await Promise.all(Array.from({ length: n }, (_, i) => postJson(`${s.url}/v2/models/image_pipeline/infer`, {
      inputs: [{ name: 'IMAGE', datatype: 'UINT8', shape: [1, 16, 16, 3], data: pattern(i % 10) }],
    })));
    rs.forEach((r, i) => expect(r.body.outputs.find((o: any) => o.name === 'LABEL').data).toEqual([IMAGE_CLASSIFIER_LABELS[i % 10]]));
    const pipeline = await stats('image_pipeline');
    expect(pipeline.inference_stats.success.count).toBe(n + 1);
    expect((await stats('image_preprocess')).inference_count).toBe(n + 10);
  });

  it('batches a composing model across concurrent ensemble requests', async () => {
    const before = await stats('js_echo');
    const n = 24;
    const rs = await Promise.all(Array.from({ length: n }, (_, i) => postJson(`${s.url}/v2/models/echo_pipe/infer`, {
      inputs: [f32('IN', [i, i, i, i])],
    })));
    rs.forEach((r, i) => expect(r.body.outputs[0].data).toEqual([i, i, i, i]));
    const after = await stats('js_echo');
    expect(after.inference_count - before.inference_count).toBe(n);
    expect(after.execution_count - before.execution_count).toBeLessThan(n / 2);
    expect((await stats('echo_pipe')).inference_count).toBe(n);
  });
});

describe('ensembles shaped as Triton shapes them', () => {
  it("classification on an ensemble's output names the labels of the model that produced it, nested too", async () => {
    for (const [model, output] of [['classify_pipe', 'SCORES'], ['classify_outer', 'TOP'], ['image_classifier', 'scores']] as const) {
      const body = model === 'image_classifier'
        ? { inputs: [f32('image', new Array(3 * 16 * 16).fill(0).map((_, i) => (pattern(2)[(i % 256) * 3]! / 255)), [1, 3, 16, 16])] }
        : { inputs: [{ name: 'IMAGE', datatype: 'UINT8', shape: [1, 16, 16, 3], data: pattern(2) }] };
      const r = await postJson(`${s.url}/v2/models/${model}/infer`, { ...body, outputs: [{ name: output, parameters: { classification: 2 } }] });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const top = r.body.outputs[0].data as string[];
      expect(top, model).toHaveLength(2);
      expect(top[0], model).toMatch(new RegExp(`^[0-9.]+:2:${IMAGE_CLASSIFIER_LABELS[2]}$`));
      expect(top[1], model).toMatch(/^[0-9.-]+:\d+:\w+$/);
    }
  });

  it('a non-batching ensemble over a batching model: the step gets a batch of 1, the answer loses it', async () => {
    const r = await postJson(`${s.url}/v2/models/nobatch_pipe/infer`, { inputs: [f32('A', [1, 2, 3, 4], [4]), f32('B', [1, 1, 1, 1], [4])] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const out = Object.fromEntries(r.body.outputs.map((o: any) => [o.name, o]));
    expect(out.SUM).toMatchObject({ shape: [4], data: [2, 3, 4, 5] });
    expect(out.DIFF).toMatchObject({ shape: [4], data: [0, 1, 2, 3] });
  });
});

describe('JavaScript backend', () => {
  it('batches requests, reads their parameters and fails only the request that asked for it', async () => {
    const before = await stats('js_echo');
    const [a, b, c] = await Promise.all([
      postJson(`${s.url}/v2/models/js_echo/infer`, { inputs: [f32('X', [1, 2, 3, 4])], parameters: { scale: 10 } }),
      postJson(`${s.url}/v2/models/js_echo/infer`, { inputs: [f32('X', [1, 1, 1, 1])], parameters: { fail_with: 'no thanks' } }),
      postJson(`${s.url}/v2/models/js_echo/infer`, { inputs: [f32('X', [5, 6, 7, 8])] }),
    ]);
    expect(a.status).toBe(200);
    expect(a.body.outputs[0].data).toEqual([10, 20, 30, 40]);
    expect(b.status).toBe(500);
    expect(b.body.error).toBe('no thanks');
    expect(c.body.outputs[0]).toMatchObject({ shape: [1, 4], data: [5, 6, 7, 8] });
    expect(a.body.parameters.batch).toBeGreaterThanOrEqual(1);
    const st = await stats('js_echo');
    expect(st.inference_count - before.inference_count).toBe(3);
    expect(st.execution_count - before.execution_count).toBeLessThan(3);
  });

  it('turns an error thrown by execute into an error for each request of the batch', async () => {
    const r = await postJson(`${s.url}/v2/models/js_throw/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [4], data: [1, 2, 3, 4] }] });
    expect(r.status).toBe(500);
    expect(r.body.error).toBe('the model broke: 42');
    expect((await stats('js_throw')).inference_stats.fail.count).toBe(1);
  });

  it('runs instances in parallel, each in its own worker thread', async () => {
    const one = () => postJson(`${s.url}/v2/models/js_busy/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [4], data: [1, 2, 3, 4] }] });
    await one();
    // Each blocks its worker thread for 300 ms; the main thread still answers meanwhile.
    await expectComputeOverlap(s.url, join(repo.path, 'trace.json'), 'js_busy', 2, async () => {
      const [a, b, live] = await Promise.all([one(), one(), getJson(`${s.url}/v2/health/live`)]);
      expect([a.status, b.status, live.status]).toEqual([200, 200, 200]);
    });
  });

  it('keeps sequence state through the sequence batcher', async () => {
    const step = (x: number, flags: Record<string, unknown>) => postJson(`${s.url}/v2/models/js_acc/infer`, {
      inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [x] }], parameters: { sequence_id: 77, ...flags },
    });
    const sums = [];
    sums.push((await step(3, { sequence_start: true })).body.outputs[0].data[0]);
    sums.push((await step(4, {})).body.outputs[0].data[0]);
    sums.push((await step(5, { sequence_end: true })).body.outputs[0].data[0]);
    expect(sums).toEqual([3, 7, 12]);
  });

  it('calls other models from execute (BLS): one call, calls in parallel, a missing model', async () => {
    const body = (params: Record<string, unknown>) => ({
      inputs: [{ name: 'A', datatype: 'FP32', shape: [4], data: [1, 2, 3, 4] }, { name: 'B', datatype: 'FP32', shape: [4], data: [1, 1, 1, 1] }],
      parameters: params,
    });
    const one = await postJson(`${s.url}/v2/models/js_bls/infer`, body({}));
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.outputs.find((o: any) => o.name === 'SUM').data).toEqual([2, 3, 4, 5]);
    expect(one.body.outputs.find((o: any) => o.name === 'DIFF').data).toEqual([0, 1, 2, 3]);
    const before = (await stats('addsub4')).inference_count;
    const par = await postJson(`${s.url}/v2/models/js_bls/infer`, body({ n: 3 }));
    // (1+2+3)·A + 3·B
    expect(par.body.outputs.find((o: any) => o.name === 'SUM').data).toEqual([9, 15, 21, 27]);
    expect((await stats('addsub4')).inference_count - before).toBe(3);
    const missing = await postJson(`${s.url}/v2/models/js_bls/infer`, body({ target: 'nope' }));
    expect(missing.status).toBe(500);
    expect(missing.body.error).toBe("Request for unknown model: 'nope' is not found");
  });
});
