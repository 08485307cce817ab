/**
 * Rules Triton's qa suites check (L0_optional_input, L0_simple_ensemble, L0_model_queue,
 * L0_grpc_state_cleanup), over the real HTTP and gRPC servers with JavaScript models:
 * - a step may leave out a mapped output: it is absent downstream (an optional input there, or an
 *   ensemble output left out of the response, logged as Triton logs it); a required input is refused;
 * - every ensemble response carries `sequence_id`, `sequence_start` and `sequence_end`, the request's
 *   or those a step answered with;
 * - a failed ensemble request counts twice in the ensemble's failures, as Triton counts it;
 * - on a gRPC stream, a model that is not decoupled but answers several times has its first answer
 *   sent (HTTP and unary gRPC fail the request), and such models' answers go out in request order.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcClient, parsePrometheus, streamAll, type GrpcTestClient } from '../helpers/grpc.js';
import { blockingJsModel, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const fp32 = (name: string, optional = false) => `{ name: "${name}" data_type: TYPE_FP32 dims: [ 2 ]${optional ? ' optional: true' : ''} }`;
const steps = (...s: string[]) => `ensemble_scheduling { step [ ${s.join(', ')} ] }\n`;
const step = (model: string, inputs: Record<string, string>, outputs: Record<string, string>) =>
  `{ model_name: "${model}" model_version: -1 ${Object.entries(inputs).map(([k, v]) => `input_map { key: "${k}" value: "${v}" }`).join(' ')} ${
    Object.entries(outputs).map(([k, v]) => `output_map { key: "${k}" value: "${v}" }`).join(' ')} }`;

const FILES: Record<string, string> = {
  // Echoes each optional input it was given, and only those (Triton's qa `optional_identity`).
  'opt_echo/config.pbtxt': `backend: "javascript"\ninput [ ${fp32('A', true)}, ${fp32('B', true)} ]\noutput [ ${fp32('A_OUT')}, ${fp32('B_OUT')} ]\n`,
  'opt_echo/1/model.js': `
    export default class {
      execute(requests) {
        return requests.map((r) => {
          const outputs = {};
          for (const n of ['A', 'B']) if (r.input(n)) outputs[n + '_OUT'] = r.input(n).data;
          return { outputs };
        });
      }
    }`,
  // B is required here.
  'req_echo/config.pbtxt': `backend: "javascript"\ninput [ ${fp32('A', true)}, ${fp32('B')} ]\noutput [ ${fp32('A_OUT')}, ${fp32('B_OUT')} ]\n`,
  'req_echo/1/model.js': `export default class { execute(rs) { return rs.map((r) => ({ outputs: { A_OUT: r.input('A').data, B_OUT: r.input('B').data } })); } }`,
  // Echoes X (times 10 in a request flagged sequence_end); a request's `end_here` parameter makes it
  // answer with sequence_end of its own.
  'seq_echo/config.pbtxt': `backend: "javascript"\ninput [ ${fp32('X')} ]\noutput [ ${fp32('Y')} ]\n`,
  'seq_echo/1/model.js': `
    export default class {
      execute(rs) {
        return rs.map((r) => {
          if (r.parameters.fail) return { error: 'seq_echo failed on purpose' };
          const k = r.sequence && r.sequence.end ? 10 : 1;
          return { outputs: { Y: r.input('X').data.map((v) => v * k) }, parameters: r.parameters.end_here ? { sequence_end: true } : {} };
        });
      }
    }`,
  // Triton's repeat test backend under decoupled: false: it still answers once per IN element.
  'chatty/config.pbtxt': `backend: "repeat"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: false }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }, { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }]\n`,
  'chatty/1/README.txt': 'a built-in backend',
  // Two instances: a quick request overtakes a slow one sent before it.
  'busy2/config.pbtxt': `backend: "javascript"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU count: 2 }]\n`,
  'busy2/1/model.js': blockingJsModel(0),
  // A decoupled producer (N answers, then the final flag on its own, as Triton's python models send
  // it) feeding a slower consumer: the ensemble L0_simple_ensemble's backpressure tests run.
  'producer/config.pbtxt': `backend: "javascript"\ninput [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ ${fp32('P')} ]
model_transaction_policy { decoupled: true }\n`,
  'producer/1/model.js': `
    export default class {
      execute(requests) {
        for (const r of requests) {
          const sender = r.responseSender();
          const n = r.input('N').data[0];
          for (let i = 0; i < n; i++) sender.send({ outputs: { P: [i, i] } }, false);
          sender.send(null, true);
        }
      }
    }`,
  'consumer/config.pbtxt': `backend: "javascript"\ninput [ ${fp32('X')} ]\noutput [ ${fp32('Y')} ]\n`,
  'consumer/1/model.js': `export default class { async execute(rs) { await new Promise((r) => setTimeout(r, 20)); return rs.map((r) => ({ outputs: { Y: r.input('X').data } })); } }`,
  'produce_consume/config.pbtxt': `platform: "ensemble"\ninput [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ ${fp32('OUT')} ]\n${steps(
    step('producer', { N: 'N' }, { P: 'mid' }),
    step('consumer', { X: 'mid' }, { Y: 'OUT' }),
  )}`,
  'produce_consume/1/README.txt': 'ensemble',
  // Both steps of opt_chain take A and B optional; the first answers only what it was given.
  'opt_chain/config.pbtxt': `platform: "ensemble"\ninput [ ${fp32('A', true)}, ${fp32('B', true)} ]\noutput [ ${fp32('OUT_A')}, ${fp32('OUT_B')} ]\n${steps(
    step('opt_echo', { A: 'A', B: 'B' }, { A_OUT: 'mid_a', B_OUT: 'mid_b' }),
    step('opt_echo', { A: 'mid_a', B: 'mid_b' }, { A_OUT: 'OUT_A', B_OUT: 'OUT_B' }),
  )}`,
  'opt_chain/1/README.txt': 'ensemble',
  'req_chain/config.pbtxt': `platform: "ensemble"\ninput [ ${fp32('A', true)}, ${fp32('B', true)} ]\noutput [ ${fp32('OUT_A')} ]\n${steps(
    step('opt_echo', { A: 'A', B: 'B' }, { A_OUT: 'mid_a', B_OUT: 'mid_b' }),
    step('req_echo', { A: 'mid_a', B: 'mid_b' }, { A_OUT: 'OUT_A' }),
  )}`,
  'req_chain/1/README.txt': 'ensemble',
  // seq_echo twice: the second step runs in the sequence the first answered with.
  'seq_pipe/config.pbtxt': `platform: "ensemble"\ninput [ ${fp32('X')} ]\noutput [ ${fp32('Y')}, ${fp32('Z')} ]\n${steps(
    step('seq_echo', { X: 'X' }, { Y: 'mid' }),
    step('seq_echo', { X: 'mid' }, { Y: 'Y' }),
    step('seq_echo', { X: 'X' }, { Y: 'Z' }),
  )}`,
  'seq_pipe/1/README.txt': 'ensemble',
};

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;
let grpc: GrpcTestClient;

beforeAll(async () => {
  repo = tempRepo(FILES);
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', metricsPort: 0 });
  grpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  grpc?.close();
  await s?.stop();
  repo?.cleanup();
});

const f32 = (name: string, data: number[]) => ({ name, datatype: 'FP32', shape: [2], data });
const infer = (model: string, body: object) => postJson(`${s.url}/v2/models/${model}/infer`, body);

describe('a step that leaves out a mapped output (L0_optional_input, L0_simple_ensemble)', () => {
  it('passes it on as absent: the next step runs without that optional input', async () => {
    const r = await infer('opt_chain', { inputs: [f32('A', [1, 2])], outputs: [{ name: 'OUT_A' }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs).toEqual([{ name: 'OUT_A', datatype: 'FP32', shape: [2], data: [1, 2] }]);
  });

  it('leaves an ensemble output no step produced out of the response, and logs it in Triton\'s words', async () => {
    const r = await infer('opt_chain', { inputs: [f32('B', [3, 4])] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs.map((o: { name: string }) => o.name)).toEqual(['OUT_B']);
    expect(s.logs.some((l) => l.endsWith('] Composing models did not output tensor OUT_A'))).toBe(true);
  });

  it('refuses it where the next step requires that input, naming the model and the input', async () => {
    const r = await infer('req_chain', { inputs: [f32('A', [1, 2])] });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/^in ensemble 'req_chain', .*model 'req_echo'.*missing required input\(s\) \['B'\]/);
    // The server keeps serving.
    expect((await infer('opt_chain', { inputs: [f32('A', [5, 6])], outputs: [{ name: 'OUT_A' }] })).status).toBe(200);
  });

  it('is still an error for a request straight to the model', async () => {
    const r = await infer('opt_echo', { inputs: [f32('A', [1, 2])] });
    expect(r.status).toBe(500);
    expect(r.body.error).toBe("model 'opt_echo' did not produce requested output 'B_OUT'");
  });
});

describe('sequence parameters on ensemble responses (L0_simple_ensemble test_ensemble_sequence_flags)', () => {
  it("carry the request's sequence id and flags over HTTP, and id 0 with both flags off outside a sequence", async () => {
    const r = await infer('seq_pipe', { inputs: [f32('X', [1, 2])], outputs: [{ name: 'Z' }], parameters: { sequence_id: 42, sequence_start: true } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.parameters).toEqual({ sequence_id: 42, sequence_start: true, sequence_end: false });
    const plain = await infer('seq_pipe', { inputs: [f32('X', [1, 2])], outputs: [{ name: 'Z' }] });
    expect(plain.body.parameters).toEqual({ sequence_id: 0, sequence_start: false, sequence_end: false });
  });

  it('carry the flags of each request of a gRPC stream, as the qa test reads them (bool_param)', async () => {
    const req = (i: number) => ({
      model_name: 'seq_pipe', id: `r${i}`,
      inputs: [{ name: 'X', datatype: 'FP32', shape: [2], contents: { fp32_contents: [i, i] } }],
      outputs: [{ name: 'Z' }],
      parameters: { sequence_id: { int64_param: 7 }, sequence_start: { bool_param: i === 0 }, sequence_end: { bool_param: i === 2 } },
    });
    const msgs = await streamAll(grpc, [req(0), req(1), req(2)]);
    const flags = msgs.map((m) => [m.infer_response.parameters.sequence_start.bool_param, m.infer_response.parameters.sequence_end.bool_param]);
    expect(flags).toEqual([[true, false], [false, false], [false, true]]);
    expect(msgs.map((m) => Number(m.infer_response.parameters.sequence_id.int64_param))).toEqual([7, 7, 7]);
  });

  it("follow a step that answers with its own flags, downstream and in the response", async () => {
    const r = await infer('seq_pipe', { inputs: [f32('X', [1, 2])], parameters: { sequence_id: 9, sequence_start: true, end_here: true } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    // The first step answered sequence_end, so the second ran flagged END (times 10); the third read
    // the request's X and ran in the request's sequence.
    expect(r.body.outputs.map((o: { data: number[] }) => o.data)).toEqual([[10, 20], [1, 2]]);
    expect(r.body.parameters).toEqual({ sequence_id: 9, sequence_start: false, sequence_end: true });
  });
});

describe('failure counting (L0_model_queue test_policy_reject)', () => {
  it("counts a failed ensemble request twice in its nv_inference_request_failure{reason=OTHER}, and once in the step's", async () => {
    const read = async () => parsePrometheus(await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text());
    const failures = (m: Awaited<ReturnType<typeof read>>, model: string) =>
      m.samples.filter((x) => x.name === 'nv_inference_request_failure' && x.labels.model === model).reduce((n, x) => n + x.value, 0);
    const before = await read();
    for (let i = 0; i < 2; i++) {
      const r = await infer('seq_pipe', { inputs: [f32('X', [1, 2])], outputs: [{ name: 'Z' }], parameters: { fail: true } });
      expect(r.status).toBe(500);
      expect(r.body.error).toBe("in ensemble 'seq_pipe', seq_echo failed on purpose");
    }
    const after = await read();
    expect(failures(after, 'seq_pipe') - failures(before, 'seq_pipe')).toBe(4);
    expect(after.samples.find((x) => x.name === 'nv_inference_request_failure' && x.labels.model === 'seq_pipe' && x.labels.reason === 'OTHER')!.value).toBe(4);
    expect(failures(after, 'seq_echo') - failures(before, 'seq_echo')).toBe(2);
  });
});

describe("a model that is not decoupled but answers several times (L0_grpc_state_cleanup)", () => {
  const count = (n: number) => ({
    model_name: 'chatty', id: `c${n}`,
    inputs: [
      { name: 'IN', datatype: 'INT32', shape: [n], contents: { int_contents: Array.from({ length: n }, (_, i) => 100 + i) } },
      { name: 'DELAY', datatype: 'UINT32', shape: [n], contents: { uint_contents: new Array(n).fill(0) } },
      { name: 'WAIT', datatype: 'UINT32', shape: [1], contents: { uint_contents: [0] } },
    ],
  });

  it('has its first answer sent on a gRPC stream, once, as the final one', async () => {
    const msgs = await streamAll(grpc, [count(4)]);
    expect(msgs).toHaveLength(1);
    expect(msgs[0]!.error_message).toBe('');
    const r = msgs[0]!.infer_response;
    expect(r.id).toBe('c4');
    expect(r.parameters.triton_final_response.bool_param).toBe(true);
    const idx = r.outputs.findIndex((o: { name: string }) => o.name === 'IDX');
    expect(Buffer.from(r.raw_output_contents[idx]).readUInt32LE(0)).toBe(0);
    expect(s.logs.some((l) => l.includes("model 'chatty' is not decoupled but sent 4 responses"))).toBe(true);
  });

  it('fails the request over unary gRPC and HTTP, in Triton\'s words', async () => {
    await expect(grpc.call('ModelInfer', count(4))).rejects.toThrow('expected a single response, got 4');
    const r = await infer('chatty', {
      inputs: [
        { name: 'IN', datatype: 'INT32', shape: [3], data: [1, 2, 3] },
        { name: 'DELAY', datatype: 'UINT32', shape: [3], data: [0, 0, 0] },
        { name: 'WAIT', datatype: 'UINT32', shape: [1], data: [0] },
      ],
    });
    expect(r.status).toBe(500);
    expect(r.body.error).toBe('expected a single response, got 3');
  });
});

describe('answers on a gRPC stream (L0_simple_ensemble test_ensemble_sequence_flags)', () => {
  it("go out in request order for models that are not decoupled, as Triton's stream queues them", async () => {
    const req = (id: string, ms: number) => ({
      model_name: 'busy2', id, parameters: { ms: { int64_param: ms } },
      inputs: [{ name: 'X', datatype: 'FP32', shape: [1], contents: { fp32_contents: [ms] } }],
    });
    const msgs = await streamAll(grpc, [req('slow', 400), req('quick', 0), req('quick2', 0)]);
    expect(msgs.map((m) => m.infer_response.id)).toEqual(['slow', 'quick', 'quick2']);
  });
});

describe('a decoupled ensemble on a gRPC stream (L0_simple_ensemble test_step1_max_queue_size, EnsembleBackpressureTest)', () => {
  it("ends with its last answer flagged final, for a client that did not ask for empty final responses", async () => {
    const req = (n: number) => ({ model_name: 'produce_consume', id: `n${n}`, inputs: [{ name: 'N', datatype: 'INT32', shape: [1], contents: { int_contents: [n] } }] });
    for (const n of [1, 3]) {
      const msgs = await streamAll(grpc, [req(n)]);
      expect(msgs.map((m) => m.infer_response.outputs.length)).toEqual(new Array(n).fill(1));
      expect(msgs.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([...new Array(n - 1).fill(false), true]);
    }
  });
});
