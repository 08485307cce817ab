/**
 * Every kind of bad request gets a 4xx (or Triton's 5xx where Triton uses one) with a message naming
 * the model, tensor and what was expected — and the server keeps serving correct answers afterwards.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, bytesOf, postBinary, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], maxInputSize: 64 * 1024 });
});
afterAll(async () => s?.stop());

const row = Array.from({ length: 16 }, (_, i) => i);
const good = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: row },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: row },
  ],
};
const infer = (body: unknown, model = 'simple', headers?: Record<string, string>) => postJson(`${s.url}/v2/models/${model}/infer`, body, headers);
const withInput = (i: number, patch: Record<string, unknown>) => ({
  inputs: good.inputs.map((x, j) => (j === i ? { ...x, ...patch } : x)),
});

describe('bad requests', () => {
  const cases: [string, () => Promise<{ status: number; body: any }>, number, RegExp][] = [
    ['unknown model', () => infer(good, 'nope'), 404, /^Request for unknown model: 'nope' is not found$/],
    ['unknown model, unparsable body', () => infer('{"inputs": [', 'nope'), 404, /^Request for unknown model: 'nope' is not found$/],
    ['unknown version', () => postJson(`${s.url}/v2/models/simple/versions/9/infer`, good), 404, /'simple' version 9 is not found/],
    ['wrong shape', () => infer(withInput(0, { shape: [1, 8], data: row.slice(0, 8) })), 400,
      /unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[1,8\]/],
    ['missing batch dimension', () => infer(withInput(0, { shape: [16] })), 400, /Expected \[-1,16\], got \[16\]\. NOTE: Setting a non-zero max_batch_size/],
    ['wrong datatype', () => infer(withInput(1, { datatype: 'FP32' })), 400,
      /inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'/],
    ['element count mismatch', () => infer(withInput(0, { data: row.slice(0, 15) })), 400, /input byte size mismatch for input 'INPUT0' for model 'simple'\. Expected 64, got 60/],
    ['missing input', () => infer({ inputs: [good.inputs[0]] }), 400,
      /expected 2 inputs but got 1 inputs for model 'simple'\. Got input\(s\) \['INPUT0'\], but missing required input\(s\) \['INPUT1'\]/],
    ['unknown input', () => infer({ inputs: [...good.inputs, { name: 'EXTRA', datatype: 'INT32', shape: [1, 16], data: row }] }), 400,
      /unexpected inference input 'EXTRA' for model 'simple'/],
    ['unknown output', () => infer({ ...good, outputs: [{ name: 'OUTPUT9' }] }), 400, /unexpected inference output 'OUTPUT9' for model 'simple'/],
    ['batch over max_batch_size', () => infer({
      inputs: good.inputs.map((x) => ({ ...x, shape: [9, 16], data: Array(9 * 16).fill(1) })),
    }), 400, /inference request batch-size must be <= 8 for 'simple'/],
    ['malformed JSON', () => infer('{"inputs": [', 'simple'), 400, /failed to parse the request JSON buffer/],
    ['non-array inputs', () => infer({ inputs: 3 }), 400, /'inputs'/],
    ['bad datatype name', () => infer(withInput(0, { datatype: 'FLOAT' })), 400, /input 'INPUT0': invalid datatype "FLOAT"/],
    ['data of the wrong type', () => infer(withInput(0, { data: row.map(String) })), 400, /input 'INPUT0': element 0 is "0", expected an integer for datatype INT32/],
    ['out-of-range integer', () => infer(withInput(0, { data: row.map(() => 2 ** 40) })), 400, /expected a value in \[-2147483648, 2147483647\]/],
    ['both data and binary_data_size', () => infer(withInput(0, { parameters: { binary_data_size: 64 } })), 400,
      /Input 'INPUT0' must set only one of the following fields/],
    ['reserved triton_ parameter', () => infer({ ...good, parameters: { triton_x: 1 } }), 400, /parameter keys starting with 'triton_' are reserved/],
    ['FP16 via JSON', () => postJson(`${s.url}/v2/models/simple/infer`, withInput(0, { datatype: 'FP16' })), 400, /receiving FP16 data via JSON is not supported/],
  ];
  for (const [name, send, status, message] of cases) {
    it(`rejects ${name}`, async () => {
      const r = await send();
      expect(r.status, JSON.stringify(r.body)).toBe(status);
      expect(r.body.error).toMatch(message);
    });
  }

  it('rejects bad binary headers and sizes', async () => {
    const a = bytesOf(Int32Array.from(row));
    const header = {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
    };
    const body = new TextEncoder().encode(JSON.stringify(header));
    for (const [value, msg] of [['abc', /Unable to parse Inference-Header-Content-Length, got: abc/], ['99999', /inference header size should be in range \(0, \d+\), got: 99999/]] as const) {
      const r = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body, headers: { 'Inference-Header-Content-Length': value } });
      expect(r.status).toBe(400);
      expect((await r.json()).error).toMatch(msg);
    }
    const short = await postBinary(`${s.url}/v2/models/simple/infer`, header, [a, a.subarray(0, 32)]);
    expect(short.status).toBe(400);
    expect(short.json.error).toMatch(/unexpected end of binary data for input 'INPUT1'/);
    const extra = await postBinary(`${s.url}/v2/models/simple/infer`, header, [a, a, a]);
    expect(extra.status).toBe(400);
    expect(extra.json.error).toMatch(/unexpected additional input data for model 'simple'/);
    const wrongSize = await postBinary(`${s.url}/v2/models/simple/infer`, {
      inputs: [header.inputs[0], { ...header.inputs[1], parameters: { binary_data_size: 60 } }],
    }, [a, a.subarray(0, 60)]);
    expect(wrongSize.status).toBe(400);
    expect(wrongSize.json.error).toMatch(/input byte size mismatch for input 'INPUT1' for model 'simple'\. Expected 64, got 60/);
    const badStrings = await postBinary(`${s.url}/v2/models/simple_identity/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 1], parameters: { binary_data_size: 6 } }],
    }, [new Uint8Array([200, 0, 0, 0, 65, 66])]);
    expect(badStrings.status).toBe(400);
    expect(badStrings.json.error).toMatch(/BYTES element 0 claims 200 bytes but only 2 remain/);
  });

  it('rejects bodies over --http-max-input-size, also after decompression', async () => {
    const big = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(40000).fill(1) }] });
    const r = await infer(big);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/exceeds the maximum allowed value of 65536 bytes/);
    const { gzipSync } = await import('node:zlib');
    const bomb = gzipSync(Buffer.from(' '.repeat(1 << 20)));
    const z = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body: bomb, headers: { 'Content-Encoding': 'gzip' } });
    expect(z.status).toBe(400);
    expect((await z.json()).error).toMatch(/exceeds the maximum allowed value/);
  });

  it('refuses an oversized chunked body (no Content-Length) and survives clients that hang up mid-body', async () => {
    const { request } = await import('node:http');
    const { connect } = await import('node:net');
    const url = new URL(`${s.url}/v2/models/simple/infer`);
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST' }, (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      for (let i = 0; i < 20; i++) req.write(' '.repeat(8192));
      req.end();
    });
    expect(chunked.status).toBe(400);
    expect(JSON.parse(chunked.body).error).toMatch(/Request JSON size of 163840 bytes exceeds the maximum allowed value of 65536 bytes/);
    for (let i = 0; i < 20; i++) {
      const sock = connect(Number(url.port), url.hostname);
      await new Promise((r) => sock.once('connect', r));
      sock.write(`POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"inputs": [`);
      sock.destroy();
    }
  });

  it('keeps serving correct answers after all of that', async () => {
    const r = await infer(good);
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].data).toEqual(row.map((v) => v * 2));
    expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(200);
  });
});
