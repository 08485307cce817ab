/**
 * Model control on the real server: explicit mode (start-up models, HTTP and gRPC load/unload, config
 * overrides, `file:` overrides staged in a fresh temp folder, the traversal attempts refused, reload
 * under load), none mode's refusal, and poll mode (new, changed, broken, removed models and versions,
 * hot reload under concurrent load with zero failed requests, draining a removed version) with strict
 * readiness throughout.
 */

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { existsSync, mkdtempSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addSubModel, slowModel } from '../../scripts/gen-models.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient } from '../helpers/grpc.js';

const addSub = addSubModel('FP32', [4]);
const cfg = (name: string, extra = '') =>
  `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n${extra}\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`;
const body = { inputs: [
  { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
  { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
] };
/** For the default repository's add_sub (FP32 [16]). */
const body16 = { inputs: [
  { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
  { name: 'INPUT1', datatype: 'FP32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
] };
const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');
const ready = async (url: string) => (await fetch(`${url}/v2/health/ready`)).status;
const stagedFolders = (model: string) => readdirSync(tmpdir()).filter((n) => n.startsWith(`tsi-model-${model}-`));

/** Sends requests from `workers` loops until stopped; records every non-200 answer. */
function loadLoop(url: string, workers = 4, req: unknown = body) {
  let stop = false;
  const failures: string[] = [];
  const versions = new Set<string>();
  let count = 0;
  const loops = Array.from({ length: workers }, async () => {
    while (!stop) {
      const r = await postJson(url, req).catch((e) => ({ status: -1, body: String(e) }));
      count++;
      if (r.status !== 200) failures.push(`${r.status} ${JSON.stringify(r.body)}`);
      else versions.add(r.body.model_version);
    }
  });
  return {
    failures, versions, get count() { return count; },
    async stop() {
      stop = true;
      await Promise.all(loops);
    },
  };
}

describe('explicit mode', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], grpcPort: 0, grpcAddress: '127.0.0.1' });
  });
  afterAll(async () => s?.stop());

  it('loads only the start-up models; the index lists the rest by name; the server is ready', async () => {
    const idx = (await postJson(`${s.url}/v2/repository/index`, {})).body;
    expect(idx).toContainEqual({ name: 'simple', version: '1', state: 'READY', reason: '' });
    expect(idx).toContainEqual({ name: 'add_sub' });
    expect(await ready(s.url)).toBe(200);
    expect((await postJson(`${s.url}/v2/repository/index`, { ready: true })).body.map((e: any) => e.name)).toEqual(['simple']);
  });

  it('loads and unloads over HTTP with Triton\'s answers', async () => {
    const load = await postJson(`${s.url}/v2/repository/models/add_sub/load`, '');
    expect(load.status).toBe(200);
    expect(load.body).toBeUndefined();
    expect((await postJson(`${s.url}/v2/models/add_sub/infer`, body16)).status).toBe(200);
    const unload = await postJson(`${s.url}/v2/repository/models/add_sub/unload`, { parameters: { unload_dependents: false } });
    expect(unload.status).toBe(200);
    const idx = (await postJson(`${s.url}/v2/repository/index`, {})).body;
    expect(idx).toContainEqual({ name: 'add_sub', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
    expect((await postJson(`${s.url}/v2/models/add_sub/infer`, body16)).status).toBe(503);
    expect(await ready(s.url)).toBe(200); // unloaded on purpose: still ready under strict readiness
    const unknown = await postJson(`${s.url}/v2/repository/models/nope/load`, {});
    expect(unknown).toMatchObject({ status: 500, body: { error: "failed to load 'nope', failed to poll from model repository" } });
    // ' ..' is '..' once trimmed, as Triton reads it ('..evil' is a plain name, for Triton too).
    const badName = await postJson(`${s.url}/v2/repository/models/%20../load`, {});
    expect(badName).toMatchObject({ status: 400, body: { error: "invalid model name ' ..', model name must not contain path traversal characters" } });
    const badDep = await postJson(`${s.url}/v2/repository/models/simple/unload`, { parameters: { unload_dependents: 'yes' } });
    expect(badDep.status).toBe(400);
    expect((await postJson(`${s.url}/v2/repository/other/models/simple/load`, {})).status).toBe(501);
  });

  it('loads with a config override', async () => {
    const config = JSON.stringify({ name: 'add_sub', backend: 'onnxruntime', max_batch_size: 2, dynamic_batching: { max_queue_delay_microseconds: 100 } });
    const r = await postJson(`${s.url}/v2/repository/models/add_sub/load`, { parameters: { config } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const c = (await getJson(`${s.url}/v2/models/add_sub/config`)).body;
    expect(c.max_batch_size).toBe(2);
    expect(c.dynamic_batching.max_queue_delay_microseconds).toBe(100);
    const bad = await postJson(`${s.url}/v2/repository/models/add_sub/load`, { parameters: { config: '{"max_batch_size": "lots"' } });
    expect(bad.status).toBe(400);
    expect((await getJson(`${s.url}/v2/models/add_sub/config`)).body.max_batch_size).toBe(2); // the old one still serves
  });

  it('loads a model from file overrides in a fresh temp folder, and removes it on unload', async () => {
    const r = await postJson(`${s.url}/v2/repository/models/uploaded/load`, {
      parameters: { config: JSON.stringify({ name: 'uploaded', backend: 'onnxruntime', max_batch_size: 4 }), 'file:1/model.onnx': b64(addSub) },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(stagedFolders('uploaded')).toHaveLength(1);
    const inf = await postJson(`${s.url}/v2/models/uploaded/infer`, body);
    expect(inf.body.outputs[0].data).toEqual([2, 3, 4, 5]);
    expect((await getJson(`${s.url}/v2/models/uploaded/config`)).body.input.map((i: any) => i.name)).toEqual(['INPUT0', 'INPUT1']);
    expect((await postJson(`${s.url}/v2/repository/models/uploaded/unload`, {})).status).toBe(200);
    expect(stagedFolders('uploaded')).toHaveLength(0);
    const noConfig = await postJson(`${s.url}/v2/repository/models/uploaded/load`, { parameters: { 'file:1/model.onnx': b64(addSub) } });
    expect(noConfig).toMatchObject({ status: 400, body: { error: "Load parameter 'config' must be specified for model file override" } });
  });

  it('refuses every file name that would leave the model folder, writing nothing', async () => {
    const canary = mkdtempSync(join(tmpdir(), 'tsi-canary-'));
    const attempts = [
      'file:../evil.onnx', 'file:1/../../evil.onnx', 'file:/../evil.onnx', 'file:1\\..\\..\\evil.onnx',
      'file:..', 'file:1//model.onnx', 'file:./1/model.onnx', 'file:', 'file:/', 'file:C:/evil',
    ];
    try {
      for (const key of attempts) {
        const r = await postJson(`${s.url}/v2/repository/models/trav/load`, {
          parameters: { config: JSON.stringify({ name: 'trav', backend: 'onnxruntime' }), 'file:1/model.onnx': b64(addSub), [key]: b64(addSub) },
        });
        expect(r.status, key).toBe(400);
        expect(r.body.error, key).toMatch(new RegExp(`^failed to load 'trav', failed to poll from model repository: Invalid file parameter '${key.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}'`));
      }
      expect(existsSync(join(tmpdir(), 'evil.onnx'))).toBe(false);
      expect(stagedFolders('trav')).toHaveLength(0);
      expect((await getJson(`${s.url}/v2/models/trav`)).status).toBe(404);
      // A leading slash names the model folder's root, as Triton joins the path to it
      // (L0_backend_python model_control sends `file:/1/model.py`): what looks absolute lands inside.
      const inside = await postJson(`${s.url}/v2/repository/models/trav/load`, {
        parameters: { config: JSON.stringify({ name: 'trav', backend: 'onnxruntime' }), 'file:/1/model.onnx': b64(addSub), [`file:${canary}/evil.onnx`]: b64(addSub) },
      });
      expect(inside.status, JSON.stringify(inside.body)).toBe(200);
      expect(readdirSync(canary)).toEqual([]);
      const [staged] = stagedFolders('trav');
      expect(existsSync(join(tmpdir(), staged!, '1', 'model.onnx'))).toBe(true);
      expect(existsSync(join(tmpdir(), staged!, canary.slice(1), 'evil.onnx'))).toBe(true);
      expect((await postJson(`${s.url}/v2/repository/models/trav/unload`, {})).status).toBe(200);
    } finally {
      rmSync(canary, { recursive: true, force: true });
    }
  });

  it('loads and unloads over gRPC, with raw file bytes, and refuses traversal there too', async () => {
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      const config = { string_param: JSON.stringify({ name: 'via_grpc', backend: 'onnxruntime', max_batch_size: 4 }) };
      await c.call('RepositoryModelLoad', { model_name: 'via_grpc', parameters: { config, 'file:1/model.onnx': { bytes_param: Buffer.from(addSub) } } });
      expect((await postJson(`${s.url}/v2/models/via_grpc/infer`, body)).status).toBe(200);
      await expect(c.call('RepositoryModelLoad', {
        model_name: 'via_grpc', parameters: { config, 'file:../x.onnx': { bytes_param: Buffer.from(addSub) } },
      })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/^failed to load 'via_grpc', failed to poll from model repository: Invalid file parameter 'file:\.\.\/x\.onnx'/) });
      await expect(c.call('RepositoryModelLoad', { model_name: 'via_grpc', parameters: { config, 'file:1/model.onnx': { string_param: 'x' } } }))
        .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: "File parameter 'file:1/model.onnx' must have bytes type for its value" });
      await c.call('RepositoryModelUnload', { model_name: 'via_grpc', parameters: { unload_dependents: { bool_param: true } } });
      expect((await postJson(`${s.url}/v2/models/via_grpc/infer`, body)).status).toBe(503);
      expect(stagedFolders('via_grpc')).toHaveLength(0);
    } finally {
      c.close();
    }
  });

  it('unloads an ensemble\'s composing models only with unload_dependents', async () => {
    const state = async (m: string) => (await postJson(`${s.url}/v2/repository/index`, {})).body.find((e: any) => e.name === m)?.state;
    expect((await postJson(`${s.url}/v2/repository/models/image_pipeline/load`, {})).status).toBe(200);
    expect(await state('image_classifier')).toBe('READY');
    expect((await postJson(`${s.url}/v2/repository/models/image_pipeline/unload`, {})).status).toBe(200);
    expect(await state('image_classifier')).toBe('READY');
    expect((await postJson(`${s.url}/v2/repository/models/image_pipeline/load`, {})).status).toBe(200);
    const r = await postJson(`${s.url}/v2/repository/models/image_pipeline/unload`, { parameters: { unload_dependents: true } });
    expect(r.status).toBe(200);
    for (const m of ['image_pipeline', 'image_preprocess', 'image_classifier', 'image_postprocess']) expect(await state(m), m).toBe('UNAVAILABLE');
    expect(await ready(s.url)).toBe(200);
  });

  it('reloads a model under concurrent load without failing a request', async () => {
    await postJson(`${s.url}/v2/repository/models/add_sub/load`, {});
    const loop = loadLoop(`${s.url}/v2/models/add_sub/infer`, 4, body16);
    for (const mbs of [2, 4, 3]) {
      const config = JSON.stringify({ name: 'add_sub', backend: 'onnxruntime', max_batch_size: mbs });
      expect((await postJson(`${s.url}/v2/repository/models/add_sub/load`, { parameters: { config } })).status).toBe(200);
    }
    await loop.stop();
    expect(loop.count).toBeGreaterThan(10);
    expect(loop.failures).toEqual([]);
    expect((await getJson(`${s.url}/v2/models/add_sub/config`)).body.max_batch_size).toBe(3);
  });
});

describe('none mode', () => {
  it('refuses load and unload with Triton\'s (misleading) text', async () => {
    const s = await startTestServer({ modelRepositories: [MODELS] });
    try {
      for (const op of ['load', 'unload']) {
        const r = await postJson(`${s.url}/v2/repository/models/simple/${op}`, {});
        expect(r).toMatchObject({ status: 503, body: { error: 'explicit model load / unload is not allowed if polling is enabled' } });
      }
    } finally {
      await s.stop();
    }
  });
});

describe('poll mode', () => {
  let s: TestServer | undefined;
  let repo: ReturnType<typeof tempRepo> | undefined;
  afterEach(async () => {
    await s?.stop();
    repo?.cleanup();
    s = undefined;
    repo = undefined;
  });

  /** Writes a folder elsewhere, then renames it into place, so a poll never sees half a model. */
  const place = (dest: string, files: Record<string, string | Uint8Array>) => {
    const staging = mkdtempSync(join(tmpdir(), 'tsi-stage-'));
    for (const [rel, content] of Object.entries(files)) {
      mkdirSync(join(staging, rel, '..'), { recursive: true });
      writeFileSync(join(staging, rel), content);
    }
    renameSync(staging, dest);
  };
  const waitFor = async (what: () => Promise<boolean>, ms = 15_000) => {
    const end = Date.now() + ms;
    while (!(await what())) {
      if (Date.now() > end) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it('hot-reloads a changed model under concurrent load with zero failed requests', async () => {
    repo = tempRepo({ 'm/config.pbtxt': cfg('m'), 'm/1/model.onnx': addSub });
    s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'poll', repositoryPollSecs: 0.2 });
    const loop = loadLoop(`${s.url}/v2/models/m/infer`);
    await waitFor(async () => loop.count > 20);
    place(join(repo.path, 'm', '2'), { 'model.onnx': addSub });
    await waitFor(async () => loop.versions.has('2'));
    // A config change (new batching settings) is a change too.
    writeFileSync(join(repo.path, 'm', 'config.pbtxt'), cfg('m', 'dynamic_batching { max_queue_delay_microseconds: 500 }'));
    await waitFor(async () => (await getJson(`${s!.url}/v2/models/m/config`)).body.dynamic_batching?.max_queue_delay_microseconds === 500);
    const at = loop.count;
    await waitFor(async () => loop.count > at + 20);
    await loop.stop();
    expect(loop.failures).toEqual([]);
    expect((await getJson(`${s.url}/v2/models/m`)).body.versions).toEqual(['2']);
    expect(await ready(s.url)).toBe(200);
  });

  it('adds new models, keeps serving through a broken change, and unloads removed models', async () => {
    repo = tempRepo({ 'm/config.pbtxt': cfg('m'), 'm/1/model.onnx': addSub });
    s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'poll', repositoryPollSecs: 0.2 });
    place(join(repo.path, 'n'), { 'config.pbtxt': cfg('n'), '1/model.onnx': addSub });
    await waitFor(async () => (await postJson(`${s!.url}/v2/models/n/infer`, body)).status === 200);

    // A broken new model: strict readiness says not ready until it is fixed or removed.
    place(join(repo.path, 'bad'), { 'config.pbtxt': 'name: "bad"\nmax_batch_size: [\n', '1/model.onnx': addSub });
    await waitFor(async () => (await ready(s!.url)) === 400);
    // Readiness turns 400 as soon as 'bad' is LOADING; its failed load shows in the index a moment later.
    const badEntry = async () => (await postJson(`${s!.url}/v2/repository/index`, {})).body.find((e: any) => e.name === 'bad');
    await waitFor(async () => (await badEntry())?.state !== 'LOADING');
    expect(await badEntry()).toMatchObject({ state: 'UNAVAILABLE' });

    // A broken change to a serving model keeps the old version serving.
    writeFileSync(join(repo.path, 'm', 'config.pbtxt'), 'name: "m"\nmax_batch_size: nonsense\n');
    await waitFor(async () => s!.logs.some((l) => l.includes("failed to load 'm'")));
    expect((await postJson(`${s.url}/v2/models/m/infer`, body)).status).toBe(200);

    rmSync(join(repo.path, 'bad'), { recursive: true });
    await waitFor(async () => (await ready(s!.url)) === 200);
    rmSync(join(repo.path, 'n'), { recursive: true });
    await waitFor(async () => (await getJson(`${s!.url}/v2/models/n`)).status === 404);
    expect((await postJson(`${s.url}/v2/repository/index`, {})).body.map((e: any) => e.name)).toEqual(['m']);
    expect(s.logs.some((l) => l.includes("model 'n' was removed from the repository"))).toBe(true);
    expect((await postJson(`${s.url}/v2/repository/models/m/load`, {})).status).toBe(503);
  });

  it('lets requests on a removed version finish, then refuses that version', async () => {
    const slow = slowModel(400);
    const slowCfg = 'name: "slow"\nbackend: "onnxruntime"\nmax_batch_size: 4\nversion_policy: { all: {} }\ninput [{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }]\noutput [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n';
    repo = tempRepo({ 'slow/config.pbtxt': slowCfg, 'slow/1/model.onnx': slow, 'slow/2/model.onnx': slow });
    s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'poll', repositoryPollSecs: 0.2 });
    const req = { inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1], data: [0.5] }] };
    const inflight = Promise.all([1, 2, 3].map(() => postJson(`${s!.url}/v2/models/slow/versions/1/infer`, req)));
    await new Promise((r) => setTimeout(r, 100));
    const moved = mkdtempSync(join(tmpdir(), 'tsi-removed-'));
    renameSync(join(repo.path, 'slow', '1'), join(moved, '1'));
    const answers = await inflight;
    rmSync(moved, { recursive: true, force: true });
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    await waitFor(async () => (await getJson(`${s!.url}/v2/models/slow`)).body.versions?.join() === '2');
    const gone = await postJson(`${s.url}/v2/models/slow/versions/1/infer`, req);
    expect([404, 503]).toContain(gone.status);
    expect((await postJson(`${s.url}/v2/models/slow/versions/2/infer`, req)).status).toBe(200);
  });
});
