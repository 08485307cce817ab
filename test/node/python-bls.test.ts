/**
 * Business Logic Scripting from Python models, through the real server: `InferenceRequest.exec()`
 * from a sync execute and `async_exec()` (several awaited together) from `async def execute`,
 * calling an ONNX model (simple), a JavaScript model, another Python model, an ensemble
 * (image_pipeline: JavaScript → ONNX → JavaScript) and a decoupled Python model
 * (`exec(decoupled=True)` iterating its responses); a call to a missing model answers a response
 * whose `has_error()` is true with Triton's error, and BLS during initialize is refused as in Triton.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import type { TestServer } from '../helpers/server.js';
import { pythonRepo, startPythonServer } from '../helpers/python-server.js';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;
let http: HttpClient;

beforeAll(async () => {
  repo = pythonRepo(
    ['bls_py', 'bls_async_py', 'js_add_sub', 'add_sub_int32', 'repeat_py'],
    ['simple', 'image_pipeline', 'image_preprocess', 'image_classifier', 'image_postprocess'],
  );
  s = await startPythonServer({ modelRepositories: [repo.path] });
  http = new HttpClient(s.url);
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const a = Int32Array.from({ length: 16 }, (_, i) => i * 7 - 20);
const b = Int32Array.from({ length: 16 }, (_, i) => 100 - i);
const sum = Array.from(a, (v, i) => v + b[i]!);
const diff = Array.from(a, (v, i) => v - b[i]!);

async function call(model: string, target: string) {
  const r = await http.infer(model, [{ name: 'A', shape: [16], data: a }, { name: 'B', shape: [16], data: b }], { parameters: { target } });
  return { sum: Array.from(r.data<Int32Array>('SUM')), diff: Array.from(r.data<Int32Array>('DIFF')), info: JSON.parse(r.strings('INFO')[0]!) };
}

describe.each([['bls_py', 'exec()'], ['bls_async_py', 'async_exec()']])('%s: BLS with %s', (model) => {
  it('calls an ONNX model', async () => {
    expect(await call(model, 'onnx')).toEqual({ sum, diff, info: {} });
  });

  it('calls a JavaScript model', async () => {
    expect(await call(model, 'js')).toEqual({ sum, diff, info: {} });
  });

  it('calls another Python model, which sees the BLS request\'s parameters', async () => {
    const r = await call(model, 'python');
    expect(r.sum).toEqual(sum);
    expect(r.diff).toEqual(diff);
    expect(JSON.parse(r.info.callee_params.args).model_name).toBe('add_sub_int32');
    expect(r.info.callee_params.requested).toBe('OUTPUT0,OUTPUT1');
  });

  it('calls an ensemble (JavaScript → ONNX → JavaScript) like the client would', async () => {
    const r = await call(model, 'ensemble');
    const image = new Uint8Array(16 * 16 * 3).map((_, i) => a[i % 16]! & 0xff);
    const direct = await http.infer('image_pipeline', [{ name: 'IMAGE', shape: [1, 16, 16, 3], data: image }]);
    expect(r.info.label).toBe(direct.strings('LABEL')[0]);
    expect(r.info.probability).toBeCloseTo(direct.data<Float32Array>('PROBABILITY')[0]!, 5);
  });

  it('iterates every response of a decoupled Python model, the empty final one included', async () => {
    const r = await call(model, 'decoupled');
    expect(r.info).toEqual({ streamed: Array.from(a.subarray(0, 4)), responses: 5 });
  });

  it('cancels a decoupled call from its response iterator: the callee sees it and ends early', async () => {
    const r = await call(model, 'cancel');
    expect(r.info.responses).toBeLessThan(16);
    expect(r.info.last_error).toMatch(/^repeat_py cancelled at \d+$/);
    expect(r.info.last_code).toBe(7);
  });

  it('answers a call to a missing model with an error response, as Triton does', async () => {
    expect((await call(model, 'missing')).info).toEqual({ has_error: true, code: 2, message: "Request for unknown model: 'no_such_model' is not found" });
  });
});

it('refuses BLS during initialize with Triton\'s message', async () => {
  expect((await call('bls_py', 'init_bls')).info.message).toBe("BLS is only supported during the 'execute' function.");
});

it('serves concurrent BLS callers without mixing their answers', async () => {
  const got = await Promise.all(Array.from({ length: 8 }, (_, k) => http.infer(k % 2 ? 'bls_py' : 'bls_async_py', [
    { name: 'A', shape: [16], data: a.map((v) => v + k) }, { name: 'B', shape: [16], data: b },
  ], { parameters: { target: ['onnx', 'js', 'python'][k % 3]! } })));
  got.forEach((r, k) => expect(Array.from(r.data<Int32Array>('SUM'))).toEqual(sum.map((v) => v + k)));
});
