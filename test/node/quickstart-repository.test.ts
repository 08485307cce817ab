/**
 * Triton's quick-start repository (server repository, docs/examples/model_repository) as a Triton
 * user brings it: ONNX models whose batch dimension is present but unset (neither dim_value nor
 * dim_param, as Triton's example files are written), Triton's configs for them, and the Python
 * simple_identity. Served by the real server, every model must load and answer. Then ONNX models with
 * unknown, named and fixed dimensions, auto-completed and hand-configured: unknown and named dims
 * both read as -1, fixed ones keep their size (an unset dim read as 0 refused these models).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_MODELS } from '../../scripts/gen-models.js';
import { GraphBuilder, unsetBatchDims, type Dim } from '../../graph/onnx-builder.js';
import { readOnnxIo } from '../../runtime-node/onnx/info.js';
import { readOnnxIo as readOnnxIoInPage } from '../../runtime-browser/onnx-io.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const io = (name: string, type: string, dims: string) => `{ name: "${name}" data_type: ${type} dims: ${dims} }`;
const addSubConfig = (name: string, type: string) => `
name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ ${io('INPUT0', type, '[ 16 ]')}, ${io('INPUT1', type, '[ 16 ]')} ]
output [ ${io('OUTPUT0', type, '[ 16 ]')}, ${io('OUTPUT1', type, '[ 16 ]')} ]
`;
const control = (name: string, kind: string) =>
  `{ name: "${name}" control [ { kind: ${kind} int32_false_true: [ 0, 1 ] } ] }`;

/** Triton's quick-start configs, field for field. */
const QUICKSTART_CONFIGS: Record<string, string> = {
  simple: addSubConfig('simple', 'TYPE_INT32'),
  simple_int8: addSubConfig('simple_int8', 'TYPE_INT8'),
  simple_string: addSubConfig('simple_string', 'TYPE_STRING'),
  simple_sequence: `
name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [ ${control('START', 'CONTROL_SEQUENCE_START')}, ${control('READY', 'CONTROL_SEQUENCE_READY')} ]
}
input [ ${io('INPUT', 'TYPE_INT32', '[ 1 ]')} ]
output [ ${io('OUTPUT', 'TYPE_INT32', '[ 1 ]')} ]
instance_group [ { kind: KIND_CPU } ]
`,
  simple_dyna_sequence: `
name: "simple_dyna_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }
  control_input [
    ${control('START', 'CONTROL_SEQUENCE_START')}, ${control('END', 'CONTROL_SEQUENCE_END')},
    ${control('READY', 'CONTROL_SEQUENCE_READY')},
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ ${io('INPUT', 'TYPE_INT32', '[ 1 ]')} ]
output [ ${io('OUTPUT', 'TYPE_INT32', '[ 1 ]')} ]
parameters [ { key: "execute_delay_ms" value: { string_value: "3" } } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
`,
  simple_identity: `
name: "simple_identity"
backend: "python"
max_batch_size: 8
input [ ${io('INPUT0', 'TYPE_STRING', '[ -1 ]')} ]
output [ ${io('OUTPUT0', 'TYPE_STRING', '[ -1 ]')} ]
`,
};

const IDENTITY_PY = `
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
`;

function quickstartFiles(): Record<string, string | Uint8Array> {
  const files: Record<string, string | Uint8Array> = {};
  for (const [name, config] of Object.entries(QUICKSTART_CONFIGS)) {
    files[`${name}/config.pbtxt`] = config;
    if (name === 'simple_identity') files[`${name}/1/model.py`] = IDENTITY_PY;
    else files[`${name}/1/model.onnx`] = unsetBatchDims(DEFAULT_MODELS[name]!());
  }
  return files;
}

describe("Triton's quick-start repository", () => {
  let repo: ReturnType<typeof tempRepo>;
  let server: TestServer;
  beforeAll(async () => {
    repo = tempRepo(quickstartFiles());
    server = await startTestServer({ modelRepositories: [repo.path] });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    repo?.cleanup();
  });

  const infer = (model: string, body: object) => postJson(`${server.url}/v2/models/${model}/infer`, body);
  const range = Array.from({ length: 16 }, (_, i) => i);

  it('writes the batch dimension unset, and both ONNX readers (Node, page) read it as -1', () => {
    const bytes = quickstartFiles()['simple/1/model.onnx'] as Uint8Array;
    expect(readOnnxIo(bytes).inputs[0]!.shape).toEqual([-1, 16]);
    expect(readOnnxIoInPage(bytes)).toEqual(readOnnxIo(bytes));
  });

  it('loads every model', async () => {
    const index = await postJson(`${server.url}/v2/repository/index`, {});
    const states = Object.fromEntries((index.body as { name: string; state: string; reason?: string }[]).map((m) => [m.name, `${m.state} ${m.reason ?? ''}`.trim()]));
    expect(states).toEqual(Object.fromEntries(Object.keys(QUICKSTART_CONFIGS).map((n) => [n, 'READY'])));
  });

  it('simple and simple_int8 add and subtract', async () => {
    for (const [model, datatype] of [['simple', 'INT32'], ['simple_int8', 'INT8']] as const) {
      const r = await infer(model, {
        inputs: [
          { name: 'INPUT0', shape: [1, 16], datatype, data: range },
          { name: 'INPUT1', shape: [1, 16], datatype, data: new Array(16).fill(1) },
        ],
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const out = Object.fromEntries(r.body.outputs.map((o: { name: string; data: number[] }) => [o.name, o.data]));
      expect(out.OUTPUT0).toEqual(range.map((x) => x + 1));
      expect(out.OUTPUT1).toEqual(range.map((x) => x - 1));
    }
  });

  it('simple_string adds and subtracts decimal strings', async () => {
    const r = await infer('simple_string', {
      inputs: [
        { name: 'INPUT0', shape: [1, 16], datatype: 'BYTES', data: range.map(String) },
        { name: 'INPUT1', shape: [1, 16], datatype: 'BYTES', data: new Array(16).fill('1') },
      ],
      outputs: [{ name: 'OUTPUT0' }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0].data).toEqual(range.map((x) => String(x + 1)));
  });

  it('simple_sequence and simple_dyna_sequence run a sequence', async () => {
    for (const model of ['simple_sequence', 'simple_dyna_sequence']) {
      const answers: number[] = [];
      const values = [0, 1, 2];
      for (const [i, v] of values.entries()) {
        const r = await infer(model, {
          parameters: { sequence_id: 1000, sequence_start: i === 0, sequence_end: i === values.length - 1 },
          inputs: [{ name: 'INPUT', shape: [1, 1], datatype: 'INT32', data: [v] }],
        });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        answers.push(r.body.outputs[0].data[0]);
      }
      // The first answer adds START; the dyna model's last adds END * CORRID.
      expect(answers, model).toEqual(model === 'simple_sequence' ? [1, 1, 2] : [1, 1, 1002]);
    }
  });

  it('simple_identity echoes bytes', async () => {
    const r = await infer('simple_identity', { inputs: [{ name: 'INPUT0', shape: [1, 2], datatype: 'BYTES', data: ['a', 'bc'] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0]).toMatchObject({ name: 'OUTPUT0', shape: [1, 2], data: ['a', 'bc'] });
  });
});

/** `X` → Identity → `Y`, FP32, both with `shape`. */
function identity(shape: Dim[]): Uint8Array {
  const g = new GraphBuilder('dims');
  g.op('Identity', [g.input('X', 'FLOAT', shape)], undefined, g.output('Y', 'FLOAT', shape));
  return g.encode();
}

describe('unknown, named and fixed ONNX dimensions', () => {
  const explicit = (name: string, mbs: number, dims: string) => `
name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${mbs}
input [ ${io('X', 'TYPE_FP32', dims)} ]
output [ ${io('Y', 'TYPE_FP32', dims)} ]
`;
  // name → [model shape, auto-completed max_batch_size, auto-completed dims]
  const CASES: Record<string, [Dim[], number, number[]]> = {
    unknown_batch: [[null, 4], 4, [4]],
    named_batch: [['batch', 4], 4, [4]],
    unknown_inner: [[null, null, 3], 4, [-1, 3]],
    named_inner: [['batch', 'n', 3], 4, [-1, 3]],
    fixed: [[2, 4], 0, [2, 4]],
    fixed_then_unknown: [[2, null], 0, [2, -1]],
  };
  let repo: ReturnType<typeof tempRepo>;
  let server: TestServer;
  beforeAll(async () => {
    const files: Record<string, string | Uint8Array> = {};
    for (const [name, [shape, mbs, dims]] of Object.entries(CASES)) {
      files[`auto_${name}/1/model.onnx`] = identity(shape);
      files[`cfg_${name}/1/model.onnx`] = identity(shape);
      files[`cfg_${name}/config.pbtxt`] = explicit(`cfg_${name}`, mbs === 0 ? 0 : 8, `[ ${dims.join(', ')} ]`);
    }
    // A ragged input has no batch dimension in the model, which sees the batch's elements end to end.
    const g = new GraphBuilder('ragged_sum');
    const total = g.op('ReduceSum', [g.input('X', 'FLOAT', ['n'])], { keepdims: 1 });
    g.op('Reshape', [total, g.initializer('rows', 'INT64', [2], BigInt64Array.of(-1n, 1n))], undefined, g.output('Y', 'FLOAT', ['b', 1]));
    files['ragged_sum/1/model.onnx'] = g.encode();
    files['ragged_sum/config.pbtxt'] = `name: "ragged_sum"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\noutput [ ${io('Y', 'TYPE_FP32', '[ 1 ]')} ]\n`;
    repo = tempRepo(files);
    server = await startTestServer({ modelRepositories: [repo.path] });
  }, 120_000);

  it('a ragged input without a batch dimension in the model loads and answers', async () => {
    const r = await postJson(`${server.url}/v2/models/ragged_sum/infer`, { inputs: [{ name: 'X', shape: [1, 5], datatype: 'FP32', data: [1, 2, 3, 4, 5] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0]).toMatchObject({ shape: [1, 1], data: [15] });
  });
  afterAll(async () => {
    await server?.stop();
    repo?.cleanup();
  });

  for (const [name, [, mbs, dims]] of Object.entries(CASES)) {
    it(`${name}: auto-completed, and hand-configured`, async () => {
      const auto = await getJson(`${server.url}/v2/models/auto_${name}/config`);
      expect(auto.status, JSON.stringify(auto.body)).toBe(200);
      expect(auto.body.max_batch_size).toBe(mbs);
      expect(auto.body.input[0]).toMatchObject({ name: 'X', data_type: 'TYPE_FP32', dims });
      expect(auto.body.output[0]).toMatchObject({ name: 'Y', data_type: 'TYPE_FP32', dims });
      const meta = await getJson(`${server.url}/v2/models/cfg_${name}`);
      expect(meta.status, JSON.stringify(meta.body)).toBe(200);
      expect(meta.body.inputs[0].shape).toEqual(mbs > 0 ? [-1, ...dims] : dims);
      // Every -1 is sent as 2; the answer keeps the shape.
      const shape = (mbs > 0 ? [1, ...dims] : dims).map((d) => (d < 0 ? 2 : d));
      const n = shape.reduce((a, b) => a * b, 1);
      for (const model of [`auto_${name}`, `cfg_${name}`]) {
        const r = await postJson(`${server.url}/v2/models/${model}/infer`, {
          inputs: [{ name: 'X', shape, datatype: 'FP32', data: Array.from({ length: n }, (_, i) => i) }],
        });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        expect(r.body.outputs[0].shape).toEqual(shape);
      }
    });
  }
});

describe("shapes Triton's qa configures: scalars under dims of ones (L0_scalar_io), variable-size reshapes (L0_infer_reshape)", () => {
  /** `X` → Identity → `Y`, FP32 scalars, configured with `dims`. */
  const scalar = (name: string, dims: string) => ({
    [`${name}/1/model.onnx`]: identity([]),
    [`${name}/config.pbtxt`]: `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0
input [ ${io('X', 'TYPE_FP32', dims)} ]\noutput [ ${io('Y', 'TYPE_FP32', dims)} ]\n`,
  });
  let repo: ReturnType<typeof tempRepo>;
  let server: TestServer;
  beforeAll(async () => {
    // L0_infer_reshape's onnx_zero_1_int32: the model sees [8, n, 1, 6] where requests carry [2, 4, n, 6].
    const g = new GraphBuilder('var_reshape');
    g.op('Identity', [g.input('X', 'INT32', ['b', 8, 'n', 1, 6])], undefined, g.output('Y', 'INT32', ['b', 8, 'n', 1, 6]));
    const tensor = (n: string) => `{ name: "${n}" data_type: TYPE_INT32 dims: [ 2, 4, -1, 6 ] reshape: { shape: [ 8, -1, 1, 6 ] } }`;
    repo = tempRepo({
      ...scalar('scalar_1dim', '[ 1 ]'), ...scalar('scalar_2dim', '[ 1, 1 ]'), ...scalar('scalar_2', '[ 2 ]'),
      'var_reshape/1/model.onnx': g.encode(),
      'var_reshape/config.pbtxt': `name: "var_reshape"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\ninput [ ${tensor('X')} ]\noutput [ ${tensor('Y')} ]\n`,
    });
    server = await startTestServer({ modelRepositories: [repo.path], exitOnError: false });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    repo?.cleanup();
  });

  for (const [name, shape] of [['scalar_1dim', [1]], ['scalar_2dim', [1, 1]]] as const) {
    it(`${name}: loads, takes and answers shape [${shape.join(', ')}]`, async () => {
      const r = await postJson(`${server.url}/v2/models/${name}/infer`, { inputs: [{ name: 'X', shape, datatype: 'FP32', data: [2.5] }] });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.outputs[0]).toMatchObject({ name: 'Y', shape, data: [2.5] });
    });
  }

  it('dims of more than one element do not load, with the model and tensor named', async () => {
    const index = await postJson(`${server.url}/v2/repository/index`, {});
    const row = (index.body as { name: string; state: string; reason: string }[]).find((m) => m.name === 'scalar_2');
    expect(row?.state).toBe('UNAVAILABLE');
    expect(row?.reason).toContain("model 'scalar_2', tensor 'X': the model expects 0 dimensions (shape []) but the model configuration specifies 1 dimensions (shape [2])");
  });

  it("a reshape with -1 takes the request's variable dim, and gives it back in the answer", async () => {
    for (const n of [3, 5]) {
      const data = Array.from({ length: 2 * 48 * n }, (_, i) => i - 7);
      const r = await postJson(`${server.url}/v2/models/var_reshape/infer`, { inputs: [{ name: 'X', shape: [2, 2, 4, n, 6], datatype: 'INT32', data }] });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.outputs[0]).toMatchObject({ name: 'Y', shape: [2, 2, 4, n, 6], data });
    }
  });
});
