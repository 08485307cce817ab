/**
 * Triton's SageMaker and Vertex AI endpoints on the real server (ports of their own, port 0 here),
 * spoken to as L0_sagemaker and L0_vertex_ai speak to them: `/ping`, `/invocations` with JSON and with
 * the json-header-size Content-Type, the multi-model load / list / get / invoke / unload under a models
 * root, and Vertex AI's health, predict and redirect rules (reads pass, state changes are 403).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODELS, binaryBody, startTestServer, type TestServer } from '../helpers/server.js';

const SM_BINARY = 'application/vnd.sagemaker-triton.binary+json;json-header-size=';
const VA_BINARY = 'application/vnd.vertex-ai-triton.binary+json;json-header-size=';
const data = Array.from({ length: 16 }, (_, i) => i);
const jsonBody = { inputs: [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data },
] };
const expected = (model: string) => ({
  model_name: model, model_version: '1',
  outputs: [
    { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: data.map((x) => 2 * x) },
    { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: data.map(() => 0) },
  ],
});
/** INPUT0 as binary data after the JSON header, INPUT1 as JSON, OUTPUT0 asked for as binary. */
function binaryRequest() {
  const header = {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data },
    ],
    outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1', parameters: { binary_data: false } }],
  };
  return binaryBody(header, [new Uint8Array(Int32Array.from(data).buffer)]);
}
const post = (url: string, body: string | Uint8Array | object, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST', body: body instanceof Uint8Array ? (body as BodyInit) : typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'Content-Type': 'application/json', ...headers },
  });

describe('SageMaker (--allow-sagemaker)', () => {
  let s: TestServer;
  let sm: string;
  let root: string;
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'tsi-sagemaker-'));
    // A multi-model archive as SageMaker lays it out: <root>/<hash>/model is the model, whatever its config calls it.
    cpSync(join(MODELS, 'simple'), join(root, 'abc123', 'model'), { recursive: true });
    // And one whose model/ holds the model's folder.
    mkdirSync(join(root, 'def456', 'model'), { recursive: true });
    cpSync(join(MODELS, 'simple'), join(root, 'def456', 'model', 'inner'), { recursive: true });
    s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      sagemaker: { port: 0, address: '127.0.0.1', defaultModel: 'simple', modelsRoot: root },
    });
    sm = `http://127.0.0.1:${s.sagemaker!.port}`;
  });
  afterAll(async () => {
    await s?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('answers /ping and /invocations on its own port, as v2 infer on the default model', async () => {
    expect((await fetch(`${sm}/ping`)).status).toBe(200);
    const r = await post(`${sm}/invocations`, jsonBody);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual(expected('simple'));
    // Anything else is Triton's bare 400.
    expect((await fetch(`${sm}/v2/models/simple`)).status).toBe(400);
  });

  it('reads the JSON header size from the Content-Type and writes it there for binary outputs', async () => {
    const { body, headerLength } = binaryRequest();
    const r = await post(`${sm}/invocations`, body, { 'Content-Type': SM_BINARY + headerLength });
    expect(r.status).toBe(200);
    const type = r.headers.get('content-type')!;
    expect(type.startsWith(SM_BINARY)).toBe(true);
    expect(r.headers.get('inference-header-content-length')).toBeNull();
    const bytes = new Uint8Array(await r.arrayBuffer());
    const n = Number(type.slice(SM_BINARY.length));
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(0, n)));
    expect(header.outputs[1].data).toEqual(data.map(() => 0));
    expect([...new Int32Array(bytes.slice(n).buffer)]).toEqual(data.map((x) => 2 * x));
  });

  it('refuses malformed json-header-size values with 400 and Triton\'s texts, and serves on', async () => {
    const { body, headerLength } = binaryRequest();
    const cases: [string, RegExp][] = [
      [`additional/${SM_BINARY}${headerLength}`, /expect MIME type for binary data starts with/],
      [`${SM_BINARY}x${headerLength}`, /Unable to parse inference header size, got: x/],
      [`${SM_BINARY}-123`, /inference header size should be in range \(0, \d+\), got: -123/],
      [`${SM_BINARY}12345`, /should be in range/],
      [`${SM_BINARY}99999999999`, /value is out of range/],
    ];
    for (const [type, text] of cases) {
      const r = await post(`${sm}/invocations`, body, { 'Content-Type': type });
      expect(r.status, type).toBe(400);
      expect((await r.json()).error).toMatch(text);
    }
    expect((await fetch(`${sm}/ping`)).status).toBe(200);
  });

  it('loads, lists, gets, invokes and unloads multi-model archives under the models root', async () => {
    const load = (name: string, url: string) => post(`${sm}/models`, { model_name: name, url });
    const first = await load('mme_one', join(root, 'abc123', 'model'));
    expect(first.status, await first.clone().text()).toBe(200);
    expect(s.logs.some((l) => l.includes('Loading SageMaker TargetModel: mme_one'))).toBe(true);
    expect((await load('mme_one', join(root, 'abc123', 'model'))).status).toBe(409);
    expect((await load('mme_two', join(root, 'def456', 'model'))).status).toBe(200);
    // Outside the root, or not <hash>/model: 400, nothing registered.
    expect((await load('mme_bad', join(tmpdir(), 'x', 'model'))).status).toBe(400);
    expect((await load('mme_bad', join(root, 'abc123'))).status).toBe(400);

    const list = await (await fetch(`${sm}/models`)).json();
    expect(list.models).toEqual(expect.arrayContaining([
      { modelName: 'mme_one', modelUrl: join(root, 'abc123') },
      { modelName: 'mme_two', modelUrl: join(root, 'def456', 'model') },
    ]));
    expect(await (await fetch(`${sm}/models/mme_one`)).json()).toEqual({ modelName: 'mme_one', modelUrl: join(root, 'abc123') });
    expect((await fetch(`${sm}/models/nope`)).status).toBe(404);

    for (const name of ['mme_one', 'mme_two']) {
      const r = await post(`${sm}/models/${name}/invoke`, jsonBody);
      expect(r.status).toBe(200);
      expect(await r.json()).toEqual(expected(name));
    }
    expect((await post(`${sm}/models/nope/invoke`, jsonBody)).status).toBe(404);

    expect((await fetch(`${sm}/models/mme_one`, { method: 'DELETE' })).status).toBe(200);
    expect(s.server.isModelReady('mme_one')).toBe(false);
    expect((await fetch(`${sm}/models/mme_one`, { method: 'DELETE' })).status).toBe(404);
    expect((await post(`${sm}/models/mme_one/invoke`, jsonBody)).status).toBe(404);
    // Unregistered: the same archive loads again.
    expect((await load('mme_one', join(root, 'abc123', 'model'))).status).toBe(200);
  });

  it('answers a load body that is not JSON as Triton\'s parser does', async () => {
    const r = await post(`${sm}/models`, 'AAAA', { 'Content-Type': 'application/octet-stream' });
    expect(r.status).toBe(400);
    expect((await r.json()).error).toBe('failed to parse the request JSON buffer: Invalid value. at 0');
  });
});

describe('SageMaker with --http-restricted-api', () => {
  it('restricts the multi-model API by model-repository and inference by inference, never /ping', async () => {
    const s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      httpRestrictedApi: ['model-repository:X-SM-Auth=secret', 'inference:X-Auth=secret'],
      sagemaker: { port: 0, address: '127.0.0.1', defaultModel: 'simple' },
    });
    try {
      const sm = `http://127.0.0.1:${s.sagemaker!.port}`;
      expect((await fetch(`${sm}/ping`)).status).toBe(200);
      const listed = await fetch(`${sm}/models`);
      expect(listed.status).toBe(403);
      expect((await listed.json()).error).toBe("This API is restricted, expecting header 'X-SM-Auth'");
      expect((await fetch(`${sm}/models`, { headers: { 'X-SM-Auth': 'secret' } })).status).toBe(200);
      expect((await post(`${sm}/invocations`, jsonBody)).status).toBe(403);
      expect((await post(`${sm}/invocations`, jsonBody, { 'X-Auth': 'secret' })).status).toBe(200);
    } finally {
      await s.stop();
    }
  });
});

describe('Vertex AI (--allow-vertex-ai)', () => {
  let s: TestServer;
  let va: string;
  beforeAll(async () => {
    s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      vertexAi: { port: 0, address: '127.0.0.1', predictRoute: '/predict', healthRoute: '/health' },
    });
    va = `http://127.0.0.1:${s.vertexAi!.port}`;
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('answers health and predicts on the only model loaded', async () => {
    expect((await fetch(`${va}/health`)).status).toBe(200);
    const r = await post(`${va}/predict`, jsonBody);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual(expected('simple'));
    expect((await fetch(`${va}/predict`)).status).toBe(405);
    expect((await fetch(`${va}/other`)).status).toBe(400);
  });

  it('takes binary bodies by its Content-Type and answers with Inference-Header-Content-Length', async () => {
    const { body, headerLength } = binaryRequest();
    const r = await post(`${va}/predict`, body, { 'Content-Type': VA_BINARY + headerLength });
    expect(r.status).toBe(200);
    const n = Number(r.headers.get('inference-header-content-length'));
    const bytes = new Uint8Array(await r.arrayBuffer());
    expect([...new Int32Array(bytes.slice(n).buffer)]).toEqual(data.map((x) => 2 * x));
  });

  it('redirects reads and inference to the v2 routes, and refuses state changes with 403', async () => {
    const redirect = (path: string, body?: object) => post(`${va}/predict`, body ?? {}, { 'X-Vertex-Ai-Triton-Redirect': path });
    const config = await redirect('v2/models/simple/config');
    expect(config.status).toBe(200);
    expect((await config.json()).version_policy).toBeDefined();
    expect((await redirect('v2/models/simple/ready')).status).toBe(200);
    expect((await redirect('v2')).status).toBe(200);
    expect((await (await redirect('v2/repository/index')).json())).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'simple', state: 'READY' })]));
    expect(await (await redirect('metrics')).text()).toContain('nv_inference_request_success');
    const inferred = await redirect('v2/models/simple/infer', jsonBody);
    expect(await inferred.json()).toEqual(expected('simple'));
    for (const path of ['v2/repository/models/simple/unload', 'v2/repository/models/simple/load', 'v2/systemsharedmemory/region/r/register']) {
      expect((await redirect(path)).status, path).toBe(403);
    }
    expect(s.server.isModelReady('simple')).toBe(true);
  });

  it('does not start without its routes or with a default model that is not loaded (Triton\'s texts)', async () => {
    await expect(startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      vertexAi: { port: 0, address: '127.0.0.1', healthRoute: '/health' },
    })).rejects.toThrow('API_PREDICT_ROUTE is not defined for Vertex AI endpoint');
    await expect(startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      vertexAi: { port: 0, address: '127.0.0.1', predictRoute: '/p', healthRoute: '/h', defaultModel: 'add_sub' },
    })).rejects.toThrow("Expect the default model 'add_sub' is loaded");
  });
});
