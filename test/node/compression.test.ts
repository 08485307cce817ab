/**
 * The response compression policy. Browsers and Node's fetch send `Accept-Encoding: gzip, deflate` on
 * every request; by default (`auto`) tsi compresses only JSON infer responses of at least
 * --http-compression-min-bytes and never binary tensor data, so a small answer costs a fetch client no
 * more than it costs curl. `always` is Triton's behaviour, `off` never compresses. Compressed answers
 * carry Content-Encoding and decompress to the same bytes.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

interface Answer { status: number; encoding?: string; body: Buffer }

/** POSTs with node:http (which, unlike fetch, does not decompress), asking for gzip like a browser. */
function post(url: string, body: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'Accept-Encoding': 'gzip, deflate', ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, encoding: res.headers['content-encoding'] as string | undefined, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const simple = (binary: boolean) => JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
  ],
  ...(binary ? { parameters: { binary_data_output: true } } : {}),
});

// mlp_batch answers 1024 floats a row: 32 rows as JSON are ~600 KB.
const big = (binary: boolean) => JSON.stringify({
  inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [32, 1024], data: Array.from({ length: 32 * 1024 }, (_, i) => (i % 7) / 7) }],
  ...(binary ? { parameters: { binary_data_output: true } } : {}),
});

describe('response compression', () => {
  const servers: Record<string, TestServer> = {};
  beforeAll(async () => {
    servers.auto = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple', 'mlp_batch'] });
    servers.always = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], httpCompression: { mode: 'always', minBytes: 0 } });
    servers.off = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['mlp_batch'], httpCompression: { mode: 'off', minBytes: 0 } });
  }, 60_000);
  afterAll(async () => {
    for (const s of Object.values(servers)) await s.stop();
  });

  it('auto: a small JSON answer goes out as it is, although the client accepts gzip', async () => {
    const r = await post(`${servers.auto!.url}/v2/models/simple/infer`, simple(false));
    expect(r.status).toBe(200);
    expect(r.encoding).toBeUndefined();
    expect(JSON.parse(r.body.toString()).outputs[0].data[1]).toBe(2);
  });

  it('auto: a large JSON answer is gzipped, and decompresses to the answer', async () => {
    const input = await (await fetch(`${servers.auto!.url}/v2/models/mlp_batch/config`)).json() as { input: { name: string }[] };
    const body = big(false).replace('"INPUT"', JSON.stringify(input.input[0]!.name));
    const r = await post(`${servers.auto!.url}/v2/models/mlp_batch/infer`, body);
    expect(r.status).toBe(200);
    expect(r.encoding).toBe('gzip');
    const plain = gunzipSync(r.body);
    expect(plain.byteLength).toBeGreaterThan(64 * 1024);
    expect(r.body.byteLength).toBeLessThan(plain.byteLength);
    expect(JSON.parse(plain.toString()).outputs[0].shape[0]).toBe(32);
  });

  it('auto: binary tensor data is never compressed', async () => {
    const input = await (await fetch(`${servers.auto!.url}/v2/models/mlp_batch/config`)).json() as { input: { name: string }[] };
    const body = big(true).replace('"INPUT"', JSON.stringify(input.input[0]!.name));
    const r = await post(`${servers.auto!.url}/v2/models/mlp_batch/infer`, body);
    expect(r.status).toBe(200);
    expect(r.encoding).toBeUndefined();
    expect(r.body.byteLength).toBeGreaterThan(32 * 1024 * 4);
  });

  it("always: Triton's way, whatever the client accepts", async () => {
    const r = await post(`${servers.always!.url}/v2/models/simple/infer`, simple(true));
    expect(r.encoding).toBe('gzip');
    expect(gunzipSync(r.body).byteLength).toBeGreaterThan(0);
  });

  it('off: never, even for large JSON', async () => {
    const input = await (await fetch(`${servers.off!.url}/v2/models/mlp_batch/config`)).json() as { input: { name: string }[] };
    const r = await post(`${servers.off!.url}/v2/models/mlp_batch/infer`, big(false).replace('"INPUT"', JSON.stringify(input.input[0]!.name)));
    expect(r.status).toBe(200);
    expect(r.encoding).toBeUndefined();
  });
});
