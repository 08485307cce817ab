/**
 * A large JSON answer leaves the Node server as several pieces (the JSON header around a `data` array
 * formatted 4,096 elements at a time); on the wire it must be exactly JSON.stringify of the answer,
 * plain or gzipped. The reference is built from the same model's binary answer to the same request.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }

/** POSTs with node:http, which leaves the body as it came (fetch would decompress it). */
function post(url: string, body: string, acceptGzip: boolean): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: acceptGzip ? { 'Accept-Encoding': 'gzip' } : {} }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('large JSON answers over HTTP', () => {
  let server: TestServer;
  let input: string;
  beforeAll(async () => {
    server = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['mlp_batch'] });
    input = ((await (await fetch(`${server.url}/v2/models/mlp_batch/config`)).json()) as { input: { name: string }[] }).input[0]!.name;
  }, 60_000);
  afterAll(() => server?.stop());

  it('are byte for byte JSON.stringify of the answer, plain and gzipped', async () => {
    // 9 rows of 1024 outputs: 9,216 elements, three pieces; values with long decimal forms.
    const request = (binary: boolean) => JSON.stringify({
      id: 'big "one"',
      inputs: [{ name: input, datatype: 'FP32', shape: [9, 1024], data: Array.from({ length: 9 * 1024 }, (_, i) => Math.sin(i) * 3) }],
      ...(binary ? { parameters: { binary_data_output: true } } : {}),
    });
    const url = `${server.url}/v2/models/mlp_batch/infer`;
    const bin = await post(url, request(true), false);
    expect(bin.status).toBe(200);
    const headerLength = Number(bin.headers['inference-header-content-length']);
    const head = JSON.parse(bin.body.subarray(0, headerLength).toString()) as { outputs: { name: string; datatype: string; shape: number[]; parameters: Record<string, unknown> }[] };
    const bytes = bin.body.subarray(headerLength);
    let at = 0;
    const expected = JSON.stringify({
      id: 'big "one"', model_name: 'mlp_batch', model_version: '1',
      outputs: head.outputs.map(({ parameters: { binary_data_size: size, ...rest }, ...o }) => {
        const data = Array.from(new Float32Array(bytes.buffer.slice(bytes.byteOffset + at, bytes.byteOffset + at + (size as number))));
        at += size as number;
        return { ...o, data, ...(Object.keys(rest).length > 0 ? { parameters: rest } : {}) };
      }),
    });
    expect(expected.length).toBeGreaterThan(9 * 1024 * 4);

    const plain = await post(url, request(false), false);
    expect(plain.status).toBe(200);
    expect(plain.headers['content-length']).toBe(String(plain.body.byteLength));
    expect(plain.body.toString()).toBe(expected);

    const gzipped = await post(url, request(false), true);
    expect(gzipped.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gzipped.body).toString()).toBe(expected);
  });
});
