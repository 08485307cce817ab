/**
 * Request rescheduling (`request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`) with
 * `sequence_batching { iterative_sequence: true }`, through the real servers: clients send no
 * correlation ID, the sequence batcher assigns one (START on the first run only) and runs a released
 * request again until the model answers it for good — a decoupled model streamed over gRPC
 * ModelStreamInfer and HTTP generate_stream, a non-decoupled one over HTTP infer — and Triton's
 * errors for a response returned for a rescheduled request and for a model that cannot take a
 * request back.
 */

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcClient, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { postJson, type TestServer } from '../helpers/server.js';
import { pythonRepo, startPythonServer } from '../helpers/python-server.js';

const REFUSED = 'Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;
let raw: GrpcTestClient;

beforeAll(async () => {
  repo = pythonRepo(['iterative_py', 'reschedule_py']);
  // The same model without iterative sequences: Triton refuses the RESCHEDULE release.
  const plain = join(repo.path, 'reschedule_plain_py');
  mkdirSync(join(plain, '1'), { recursive: true });
  writeFileSync(join(plain, '1', 'model.py'), readFileSync(join(repo.path, 'reschedule_py', '1', 'model.py')));
  writeFileSync(join(plain, 'config.pbtxt'), readFileSync(join(repo.path, 'reschedule_py', 'config.pbtxt'), 'utf8')
    .replace('name: "reschedule_py"', 'name: "reschedule_plain_py"').replace(/^sequence_batching.*$/m, ''));
  // iterative_py with an `async def execute`.
  const asyncDir = join(repo.path, 'iterative_async_py');
  mkdirSync(join(asyncDir, '1'), { recursive: true });
  writeFileSync(join(asyncDir, '1', 'model.py'), readFileSync(join(repo.path, 'iterative_py', '1', 'model.py')));
  writeFileSync(join(asyncDir, 'config.pbtxt'), `${readFileSync(join(repo.path, 'iterative_py', 'config.pbtxt'), 'utf8')
    .replace('name: "iterative_py"', 'name: "iterative_async_py"')}\nparameters { key: "ASYNC" value { string_value: "1" } }\n`);
  s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  raw = grpcClient(`127.0.0.1:${s.grpc!.port}`);
}, 60_000);

afterAll(async () => {
  raw?.close();
  await s?.stop();
  repo?.cleanup();
});

const int32 = (values: number[]) => Buffer.from(Int32Array.from(values).buffer);
const streamRequest = (model: string, n: number): Obj => ({
  model_name: model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1] }], raw_input_contents: [int32([n])],
});
/** OUT, FLAGS and CORRID of one streamed response. */
function step(m: Obj): [number, number, bigint] {
  const raw = (k: number) => new Uint8Array(m.infer_response.raw_output_contents[k]).slice().buffer;
  const names: string[] = m.infer_response.outputs.map((o: Obj) => o.name);
  const at = (n: string) => raw(names.indexOf(n));
  return [new Int32Array(at('OUT'))[0]!, new Int32Array(at('FLAGS'))[0]!, new BigInt64Array(at('CORRID'))[0]!];
}
const infer = (model: string, n: number, parameters: Obj = {}) =>
  postJson(`${s.url}/v2/models/${model}/infer`, { inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [n] }], parameters });

describe('iterative sequences', () => {
  it('run a decoupled request again until its final response (also from an async execute), over gRPC ModelStreamInfer', async () => {
    for (const model of ['iterative_py', 'iterative_async_py']) await decoupledRuns(model);
  });

  /** Two requests to a decoupled iterative model, each run until its final response. */
  async function decoupledRuns(model: string): Promise<void> {
    const out = await streamAll(raw, [streamRequest(model, 3), streamRequest(model, 2)]);
    expect(out.every((m) => m.error_message === '')).toBe(true);
    const steps = out.map(step);
    const ids = [...new Set(steps.map((x) => x[2]))];
    // Each request is a sequence of its own, with an ID the batcher assigned.
    expect(ids).toHaveLength(2);
    for (const id of ids) expect(id).toBeGreaterThan(0n);
    const runs = ids.map((id) => steps.filter((x) => x[2] === id).map(([o, f]) => [o, f]));
    // START (flag 1) on the first run only; a rescheduled run carries neither START nor END.
    expect(runs.sort((a, b) => b.length - a.length), model).toEqual([[[2, 1], [1, 0], [0, 0]], [[1, 1], [0, 0]]]);
  }

  it('stream each run over HTTP generate_stream', async () => {
    const r = await fetch(`${s.url}/v2/models/iterative_py/generate_stream`, { method: 'POST', body: JSON.stringify({ IN: 4 }) });
    expect(r.status).toBe(200);
    const events = (await r.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
    expect(events.map((e) => e.OUT)).toEqual([3, 2, 1, 0]);
    expect(events.map((e) => e.FLAGS)).toEqual([1, 0, 0, 0]);
    expect(new Set(events.map((e) => e.CORRID)).size).toBe(1);
  });

  it('answer a non-decoupled request after its last run, over HTTP infer, without a correlation ID', async () => {
    const r = await infer('reschedule_py', 4);
    expect(r.status).toBe(200);
    expect(r.body.outputs[0]).toMatchObject({ name: 'RUNS', data: [4] });
    const [a, b] = await Promise.all([infer('reschedule_py', 3), infer('reschedule_py', 2)]);
    expect([a.body.outputs[0].data, b.body.outputs[0].data]).toEqual([[3], [2]]);
  });

  it("refuse a response returned for a rescheduled request with Triton's text", async () => {
    const r = await infer('reschedule_py', 2, { answer_rescheduled: true });
    expect(r.status).toBe(500);
    expect(r.body.error).toContain("Expected a None object in the execute function return list for reschduled request, found type '");
    expect((await infer('reschedule_py', 2)).body.outputs[0].data).toEqual([2]);
  });

  it('refuse RESCHEDULE where the model has no iterative sequences, and keep serving', async () => {
    const r = await infer('reschedule_plain_py', 2);
    expect(r.status).toBe(400);
    expect(r.body.error).toBe(REFUSED);
    expect(s.logs.some((l) => l.includes(`Failed to release request: ${REFUSED}`))).toBe(true);
    // The model still counts the refused run (correlation ID 0 for both), so this one is its second.
    const next = await infer('reschedule_plain_py', 1);
    expect([next.status, next.body.outputs[0].data]).toEqual([200, [2]]);
  });
});
