/**
 * The v2 HTTP API of the real Node server over the default repository: health, metadata, config,
 * JSON and binary inference on real ONNX models, BYTES tensors, classification, compression and CORS.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { gunzipSync, gzipSync, deflateSync, inflateSync } from 'node:zlib';
import { MODELS, binaryOutputs, bytesOf, getJson, lengthPrefixed, postBinary, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { classifierPattern } from '../../scripts/gen-models.js';

let s: TestServer;
beforeAll(async () => {
  // Compression as Triton does it (whatever the client accepts); test/node/compression.test.ts covers tsi's default.
  s = await startTestServer({ modelRepositories: [MODELS], corsOrigin: 'http://app.example', httpCompression: { mode: 'always', minBytes: 0 } });
});
afterAll(async () => s?.stop());

const seq = <T = number>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));

describe('health and metadata', () => {
  it('answers live and ready with empty 200 bodies', async () => {
    for (const p of ['/v2/health/live', '/v2/health/ready']) {
      const r = await fetch(s.url + p);
      expect(r.status).toBe(200);
      expect(await r.text()).toBe('');
    }
  });

  it('serves server metadata with extensions', async () => {
    const r = await getJson(s.url + '/v2');
    expect(r.status).toBe(200);
    expect(r.body.name).toBe('triton');
    expect(r.body.extensions).toContain('binary_tensor_data');
    expect(r.body.extensions).toContain('classification');
  });

  it('serves model metadata with a batch dimension', async () => {
    const r = await getJson(s.url + '/v2/models/simple');
    expect(r.body).toEqual({
      name: 'simple', versions: ['1'], platform: 'onnxruntime_onnx',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] }],
      outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] }],
    });
    const v = await getJson(s.url + '/v2/models/simple/versions/1');
    expect(v.body.versions).toEqual(['1']);
  });

  it('reports readiness per model and version', async () => {
    expect((await fetch(s.url + '/v2/models/simple/ready')).status).toBe(200);
    expect((await fetch(s.url + '/v2/models/simple/versions/1/ready')).status).toBe(200);
    const unknown = await getJson(s.url + '/v2/models/nope/ready');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe("Request for unknown model: 'nope' is not found");
    const badVersion = await getJson(s.url + '/v2/models/simple/versions/7/ready');
    expect(badVersion.status).toBe(404);
    expect(badVersion.body.error).toBe("Request for unknown model: 'simple' version 7 is not found");
  });

  it('serves the normalised config as Triton JSON', async () => {
    const r = await getJson(s.url + '/v2/models/simple/config');
    expect(r.status).toBe(200);
    expect(r.body.name).toBe('simple');
    expect(r.body.backend).toBe('onnxruntime');
    expect(r.body.max_batch_size).toBe(8);
    expect(r.body.input[0]).toMatchObject({ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16], format: 'FORMAT_NONE', allow_ragged_batch: false });
    expect(r.body.version_policy).toEqual({ latest: { num_versions: 1 } });
    expect(r.body.instance_group[0]).toMatchObject({ kind: 'KIND_CPU', count: 1 });
    expect(r.body.default_model_filename).toBe('model.onnx');
  });

  it('auto-completes a model without config.pbtxt', async () => {
    const r = await getJson(s.url + '/v2/models/autocomplete_add/config');
    expect(r.body.max_batch_size).toBe(4);
    expect(r.body.dynamic_batching).toBeDefined();
    expect(r.body.input.map((i: any) => [i.name, i.data_type, i.dims])).toEqual([['A', 'TYPE_FP32', [4]], ['B', 'TYPE_FP32', [4]]]);
    expect(r.body.output.map((i: any) => [i.name, i.data_type, i.dims])).toEqual([['SUM', 'TYPE_FP32', [4]]]);
    const inf = await postJson(s.url + '/v2/models/autocomplete_add/infer', {
      inputs: [
        { name: 'A', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
        { name: 'B', datatype: 'FP32', shape: [1, 4], data: [10, 20, 30, 40] },
      ],
    });
    expect(inf.body.outputs[0].data).toEqual([11, 22, 33, 44]);
  });

  it('gives Triton-shaped 404 and 405 answers', async () => {
    const nf = await getJson(s.url + '/v2/nothing');
    expect(nf.status).toBe(404);
    expect(nf.body).toEqual({ error: 'Not Found' });
    expect((await getJson(s.url + '/v2/models/simple/versions/abc')).status).toBe(404);
    const r = await fetch(s.url + '/v2/models/simple/infer');
    expect(r.status).toBe(405);
    expect(await r.json()).toEqual({ error: 'Method Not Allowed' });
  });
});

describe('inference', () => {
  const in0 = seq(16, (i) => i);
  const in1 = seq(16, () => 1);

  it('runs simple with JSON tensors and echoes the id', async () => {
    const r = await postJson(s.url + '/v2/models/simple/infer', {
      id: 'req-1',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: in0 },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: in1 },
      ],
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('application/json');
    expect(r.body).toEqual({
      id: 'req-1', model_name: 'simple', model_version: '1',
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: in0.map((v) => v + 1) },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: in0.map((v) => v - 1) },
      ],
    });
  });

  it('accepts nested JSON arrays and a batch of 3, returning only requested outputs', async () => {
    const rows = [0, 1, 2].map((r) => seq(16, (i) => r * 100 + i));
    const r = await postJson(s.url + '/v2/models/simple/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [3, 16], data: rows },
        { name: 'INPUT1', datatype: 'INT32', shape: [3, 16], data: rows },
      ],
      outputs: [{ name: 'OUTPUT1' }],
    });
    expect(r.body.outputs).toHaveLength(1);
    expect(r.body.outputs[0]).toEqual({ name: 'OUTPUT1', datatype: 'INT32', shape: [3, 16], data: seq(48, () => 0) });
    expect(r.body.id).toBeUndefined();
  });

  it('runs simple with binary tensors in and out', async () => {
    const a = Int32Array.from(in0);
    const b = Int32Array.from(seq(16, (i) => i * 2));
    const r = await postBinary(s.url + '/v2/models/simple/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1', parameters: { binary_data: false } }],
    }, [bytesOf(a), bytesOf(b)]);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('application/octet-stream');
    expect(r.json.outputs[0].parameters).toEqual({ binary_data_size: 64 });
    expect(r.json.outputs[0].data).toBeUndefined();
    const out0 = new Int32Array(binaryOutputs(r.json, r.binary).get('OUTPUT0')!.buffer);
    expect([...out0]).toEqual(in0.map((v, i) => v + i * 2));
    expect(r.json.outputs[1].data).toEqual(in0.map((v, i) => v - i * 2));
  });

  it('honours binary_data_output for all outputs', async () => {
    const r = await postBinary(s.url + '/v2/models/add_sub/infer', {
      parameters: { binary_data_output: true },
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 16], data: seq(16, () => 0.5) },
      ],
    }, [bytesOf(Float32Array.from(seq(16, (i) => i / 4)))]);
    const outs = binaryOutputs(r.json, r.binary);
    expect([...new Float32Array(outs.get('OUTPUT0')!.buffer)]).toEqual(seq(16, (i) => i / 4 + 0.5));
    expect([...new Float32Array(outs.get('OUTPUT1')!.buffer)]).toEqual(seq(16, (i) => i / 4 - 0.5));
  });

  it('runs simple_string on BYTES tensors, JSON and binary', async () => {
    const a = seq(16, (i) => String(i));
    const b = seq(16, () => '3');
    const j = await postJson(s.url + '/v2/models/simple_string/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: a },
        { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: b },
      ],
    });
    expect(j.status).toBe(200);
    expect(j.body.outputs[0].data).toEqual(seq(16, (i) => String(i + 3)));
    expect(j.body.outputs[1].data).toEqual(seq(16, (i) => String(i - 3)));
    const pa = lengthPrefixed(a);
    const pb = lengthPrefixed(b);
    const r = await postBinary(s.url + '/v2/models/simple_string/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: pa.byteLength } },
        { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: pb.byteLength } },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }, [pa, pb]);
    expect(Buffer.from(binaryOutputs(r.json, r.binary).get('OUTPUT0')!)).toEqual(Buffer.from(lengthPrefixed(seq(16, (i) => String(i + 3)))));
  });

  it('echoes BYTES through simple_identity, including non-ASCII text', async () => {
    const words = ['héllo', '', 'wörld 🌍'];
    const r = await postJson(s.url + '/v2/models/simple_identity/infer', {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 3], data: words }],
    });
    expect(r.body.outputs[0]).toEqual({ name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 3], data: words });
  });

  it('classifies with labels', async () => {
    const img = classifierPattern(7);
    const r = await postJson(s.url + '/v2/models/image_classifier/infer', {
      inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 3, 16, 16], data: Array.from(img) }],
      outputs: [{ name: 'scores', parameters: { classification: 3 } }],
    });
    expect(r.status).toBe(200);
    const out = r.body.outputs[0];
    expect(out.datatype).toBe('BYTES');
    expect(out.shape).toEqual([1, 3]);
    expect(out.data).toHaveLength(3);
    expect(out.data[0]).toMatch(/^-?\d+\.\d{6}:7:horse$/);
    const values = out.data.map((d: string) => Number(d.split(':')[0]));
    expect(values[0]).toBeGreaterThanOrEqual(values[1]);
    expect(values[1]).toBeGreaterThanOrEqual(values[2]);
  });

  it('accepts a raw binary body for a single-input model', async () => {
    const img = classifierPattern(2);
    const r = await fetch(s.url + '/v2/models/image_classifier/infer', {
      method: 'POST', body: bytesOf(img) as BodyInit, headers: { 'Inference-Header-Content-Length': '0' },
    });
    expect(r.status).toBe(200);
    const buf = new Uint8Array(await r.arrayBuffer());
    const hl = Number(r.headers.get('Inference-Header-Content-Length'));
    const json = JSON.parse(new TextDecoder().decode(buf.subarray(0, hl)));
    expect(json.outputs[0].shape).toEqual([1, 10]);
    const scores = new Float32Array(buf.slice(hl).buffer);
    expect(scores.indexOf(Math.max(...scores))).toBe(2);
  });

  it("refuses raw binary bodies Triton refuses, with Triton's texts", async () => {
    const raw = async (model: string) => {
      const r = await fetch(`${s.url}/v2/models/${model}/infer`, { method: 'POST', body: new Uint8Array(64), headers: { 'Inference-Header-Content-Length': '0' } });
      return { status: r.status, error: (await r.json()).error as string };
    };
    expect(await raw('simple')).toEqual({
      status: 400, error: "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple' model configuration",
    });
    // simple_identity's BYTES input is [-1]: Triton wants shape [1] for a raw BYTES body.
    expect(await raw('simple_identity')).toEqual({
      status: 400, error: "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
    });
  });

  it('decompresses gzip and deflate requests and compresses responses on request', async () => {
    const body = JSON.stringify({
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: in0 },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: in1 },
      ],
    });
    for (const [enc, zip, unzip] of [['gzip', gzipSync, gunzipSync], ['deflate', deflateSync, inflateSync]] as const) {
      const res = await new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
        const req = httpRequest(s.url + '/v2/models/simple/infer', {
          method: 'POST', headers: { 'Content-Encoding': enc, 'Accept-Encoding': `${enc};q=0.9, identity;q=0.1` },
        }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        });
        req.on('error', reject);
        req.end(zip(Buffer.from(body)));
      });
      expect(res.status).toBe(200);
      expect(res.headers['content-encoding']).toBe(enc);
      const json = JSON.parse(unzip(res.body).toString());
      expect(json.outputs[0].data).toEqual(in0.map((v) => v + 1));
    }
    const bad = await postJson(s.url + '/v2/models/simple/infer', body, { 'Content-Encoding': 'br' });
    expect(bad.status).toBe(501);
    expect(bad.body.error).toBe('Unsupported compression type');
    expect(bad.headers.get('accept-encoding')).toBe('gzip, deflate');
  });

  it('sends CORS headers for the configured origin', async () => {
    const pre = await fetch(s.url + '/v2/models/simple/infer', {
      method: 'OPTIONS', headers: { Origin: 'http://app.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' },
    });
    expect(pre.status).toBeLessThan(300);
    expect(pre.headers.get('access-control-allow-origin')).toBe('http://app.example');
    const r = await fetch(s.url + '/v2/health/live', { headers: { Origin: 'http://app.example' } });
    expect(r.headers.get('access-control-allow-origin')).toBe('http://app.example');
  });

  it('sends CORS headers on inference from the configured origin', async () => {
    const r = await postJson(s.url + '/v2/models/simple/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: seq(16, (i) => i) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: seq(16, () => 1) },
      ],
    }, { Origin: 'http://app.example' });
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBe('http://app.example');
    expect(r.headers.get('access-control-expose-headers')).toMatch(/Inference-Header-Content-Length/i);
    expect(r.body.outputs[0].data).toEqual(seq(16, (i) => i + 1));
  });
});

// The Node server answers POST .../infer from its own socket handler and every other route through
// hono; a percent-encoded model name takes the hono route, so the two can be compared byte for byte.
describe('the direct infer route and the hono route', () => {
  const raw = (path: string, body: Uint8Array | string, headers: Record<string, string>) =>
    new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
      const url = new URL(s.url + path);
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.end(body);
    });
  const same = async (body: Uint8Array | string, headers: Record<string, string>, model = 'simple') => {
    const direct = await raw(`/v2/models/${model}/infer`, body, headers);
    const viaHono = await raw(`/v2/models/${model.replace('s', '%73')}/infer`, body, headers);
    expect(direct.status).toBe(viaHono.status);
    for (const h of ['content-type', 'content-length', 'inference-header-content-length', 'content-encoding', 'accept-encoding']) {
      expect([h, direct.headers[h]]).toEqual([h, viaHono.headers[h]]);
    }
    expect(direct.body.equals(viaHono.body)).toBe(true);
    return direct;
  };

  it('answer binary, JSON, compressed and failed requests identically', async () => {
    const in0 = Int32Array.from(seq(16, (i) => i * 3));
    const in1 = Int32Array.from(seq(16, () => 2));
    const header = {
      id: 'cmp-1',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1' }],
    };
    const json = new TextEncoder().encode(JSON.stringify(header));
    const body = new Uint8Array(json.byteLength + 128);
    body.set(json);
    body.set(bytesOf(in0), json.byteLength);
    body.set(bytesOf(in1), json.byteLength + 64);
    const bin = await same(body, { 'Inference-Header-Content-Length': String(json.byteLength) });
    expect(bin.status).toBe(200);
    const hl = Number(bin.headers['inference-header-content-length']);
    expect(JSON.parse(bin.body.subarray(0, hl).toString()).outputs[1].data).toEqual([...in0].map((v) => v - 2));
    expect([...new Int32Array(bin.body.buffer.slice(bin.body.byteOffset + hl, bin.body.byteOffset + hl + 64))]).toEqual([...in0].map((v) => v + 2));

    const plain = JSON.stringify({ inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [...in0] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: [...in1] },
    ] });
    expect((await same(plain, { 'Content-Type': 'application/json' })).status).toBe(200);
    const zipped = await same(gzipSync(Buffer.from(plain)), { 'Content-Encoding': 'gzip', 'Accept-Encoding': 'deflate' });
    expect(zipped.headers['content-encoding']).toBe('deflate');
    expect(JSON.parse(inflateSync(zipped.body).toString()).outputs[0].data).toEqual([...in0].map((v) => v + 2));

    expect((await same(plain.replace('INT32', 'FP32'), {})).status).toBe(400);
    expect((await same('{"inputs": [', {})).status).toBe(400);
    expect((await same(plain, { 'Content-Encoding': 'br' })).status).toBe(501);
    expect((await same(plain, {}, 'simple_sequence')).status).toBe(400);
    expect((await same(body, { 'Inference-Header-Content-Length': '9999' })).status).toBe(400);
  });
});
