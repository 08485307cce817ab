/**
 * NaN and the infinities in JSON tensor data, as Triton's L0_nan_inf checks them: Triton's JSON writer
 * (rapidjson with kWriteNanAndInfFlag) writes them as `NaN`, `Infinity` and `-Infinity`, and its parser
 * takes them back; JSON.stringify would write `null`, which a client cannot tell from anything else.
 * Through the real server, and read back by tsi's own HTTP client.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['add_sub'] });
});
afterAll(async () => s?.stop());

describe('NaN and infinities in JSON (Triton L0_nan_inf)', () => {
  const values = [NaN, Infinity, -Infinity, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];

  it('takes them in a request and writes them as NaN, Infinity and -Infinity in the response', async () => {
    const body = `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[NaN,Infinity,-Infinity,${values.slice(3).join(',')}]},`
      + `{"name":"INPUT1","datatype":"FP32","shape":[1,16],"data":[${Array(16).fill(0).join(',')}]}]}`;
    const r = await fetch(`${s.url}/v2/models/add_sub/infer`, { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
    const text = await r.text();
    expect(r.status, text).toBe(200);
    expect(text).toContain('"data":[NaN,Infinity,-Infinity,1,2,3,4,5,6,7,8,9,10,11,12,13]');
    expect(text).not.toContain('null');
  });

  it("is read back by tsi's client (JSON outputs)", async () => {
    const client = new HttpClient(s.url);
    const out = await client.infer('add_sub', [
      { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: new Float32Array(values) },
      { name: 'INPUT1', datatype: 'FP32', shape: [1, 16], data: new Float32Array(16) },
    ], { binaryOutputs: false });
    expect(Array.from(out.data<Float32Array>('OUTPUT0').subarray(0, 4))).toEqual([NaN, Infinity, -Infinity, 1]);
  });
});
