/**
 * `--model-namespacing` (tritonserver's flag; Triton's SageMaker entry script passes `=true`): a model is
 * (repository, name). Real servers on port 0 over three repositories: `composing` is an add-sub ONNX
 * model in A and a sub-add one in B; each repository's ensemble runs its own `composing`; the ensemble
 * in C (which has none) cannot choose, while C's ensemble over `only_a` (in A alone) runs it; `twin` is
 * an ensemble in A (over `composing`) and in B (over `only_b`). Checked over HTTP and gRPC as clients
 * see it: the ambiguity error (text and code), ensembles resolving to their own step, the index listing
 * both models, a model leaving its repository (POLL) making the name unambiguous and re-linking the
 * ensemble, explicit load and unload by name. Without the flag a name in two repositories is refused.
 */

import { renameSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GraphBuilder } from '../../graph/onnx-builder.js';
import { addSubModel } from '../../scripts/gen-models.js';
import { parseServeArgs } from '../helpers/cli.js';
import { grpcClient, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const X = [1, 2, 3, 4];
const Y = [10, 20, 30, 40];
const ADD = [11, 22, 33, 44];
const SUB = [-9, -18, -27, -36];

/** OUTPUT0 = INPUT0 − INPUT1, OUTPUT1 = INPUT0 + INPUT1: addSubModel's outputs the other way round. */
function subAddModel(): Uint8Array {
  const g = new GraphBuilder('sub_add_int32');
  const a = g.input('INPUT0', 'INT32', [4]);
  const b = g.input('INPUT1', 'INT32', [4]);
  g.op('Sub', [a, b], undefined, g.output('OUTPUT0', 'INT32', [4]));
  g.op('Add', [a, b], undefined, g.output('OUTPUT1', 'INT32', [4]));
  return g.encode();
}

const io = `input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [4] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [4] }]\n`;
const onnx = (name: string, model: Uint8Array) => ({
  [`${name}/config.pbtxt`]: `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n${io}`, [`${name}/1/model.onnx`]: model,
});
const ensemble = (name: string, step: string) => ({
  [`${name}/1/.keep`]: '',
  [`${name}/config.pbtxt`]: `name: "${name}"\nplatform: "ensemble"\nmax_batch_size: 0\n${io}ensemble_scheduling { step [{ model_name: "${step}" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }] }\n`,
});

const AMBIGUOUS = (name: string) => `There are 2 identifiers of model '${name}' in global map, model namespace must be provided to resolve ambiguity.`;

async function httpInfer(s: TestServer, model: string): Promise<{ status: number; out?: number[][]; error?: string }> {
  const r = await postJson(`${s.url}/v2/models/${model}/infer`, {
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [4], data: X }, { name: 'INPUT1', datatype: 'INT32', shape: [4], data: Y }],
  });
  if (r.status !== 200) return { status: r.status, error: r.body.error };
  const byName = new Map((r.body.outputs as Obj[]).map((o) => [o.name, o.data]));
  return { status: 200, out: [byName.get('OUTPUT0'), byName.get('OUTPUT1')] };
}

async function grpcInfer(c: GrpcTestClient, model: string): Promise<number[][]> {
  const raw = (v: number[]) => Buffer.from(Int32Array.from(v).buffer);
  const r = await c.call('ModelInfer', {
    model_name: model,
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [4] }, { name: 'INPUT1', datatype: 'INT32', shape: [4] }],
    raw_input_contents: [raw(X), raw(Y)],
  });
  const at = (name: string) => {
    const i = (r.outputs as Obj[]).findIndex((o) => o.name === name);
    const b = Buffer.from(r.raw_output_contents[i]);
    return [...new Int32Array(b.buffer, b.byteOffset, b.length / 4)];
  };
  return [at('OUTPUT0'), at('OUTPUT1')];
}

/** `name`'s index rows as state (reason where there is one). */
const rows = (index: Obj[], name: string) => index.filter((e) => e.name === name).map((e) => (e.reason ? `${e.state} (${e.reason})` : e.state));

describe('--model-namespacing', () => {
  const repos = () => ({
    a: tempRepo({
      ...onnx('composing', addSubModel('INT32', [4], false)), ...onnx('only_a', addSubModel('INT32', [4], false)),
      ...ensemble('ens_a', 'composing'), ...ensemble('twin', 'composing'),
    }),
    b: tempRepo({ ...onnx('composing', subAddModel()), ...onnx('only_b', subAddModel()), ...ensemble('ens_b', 'composing'), ...ensemble('twin', 'only_b') }),
    c: tempRepo({ ...ensemble('ens_c', 'composing'), ...ensemble('ens_c_only_a', 'only_a') }),
  });
  let r: ReturnType<typeof repos>;
  let s: TestServer | undefined;
  let grpc: GrpcTestClient | undefined;
  beforeEach(() => {
    r = repos();
  });
  afterEach(async () => {
    grpc?.close();
    await s?.stop();
    s = grpc = undefined;
    for (const t of Object.values(r)) t.cleanup();
  });
  const start = async (opts: Parameters<typeof startTestServer>[0]) => {
    s = await startTestServer({ grpcPort: 0, grpcAddress: '127.0.0.1', exitOnError: false, strictReadiness: false, ...opts });
    grpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    return s;
  };

  it('is a tritonserver boolean', async () => {
    expect((await parseServeArgs(['serve', '--model-namespacing=true'])).modelNamespacing).toBe(true);
    expect((await parseServeArgs(['serve', '--model-namespacing=false'])).modelNamespacing).toBe(false);
    expect((await parseServeArgs(['serve'])).modelNamespacing).toBe(false);
  });

  it('off: a name in two repositories is refused and the others serve', async () => {
    await start({ modelRepositories: [r.a.path, r.b.path] });
    const index = (await postJson(`${s!.url}/v2/repository/index`, {})).body as Obj[];
    expect(rows(index, 'composing')).toEqual([expect.stringMatching(/^UNAVAILABLE \(model 'composing' appears in multiple repositories/)]);
    expect(rows(index, 'ens_a')).toEqual([expect.stringMatching(/^UNAVAILABLE \(ensemble ens_a contains models that are not available or ambiguous: composing/)]);
    expect((await httpInfer(s!, 'composing')).status).not.toBe(200);
  });

  it('on: same-named models load from each repository; a request by that name is ambiguous; ensembles run their own repository\'s step', async () => {
    await start({ modelRepositories: [r.a.path, r.b.path, r.c.path], modelNamespacing: true, metricsPort: 0 });
    const index = (await postJson(`${s!.url}/v2/repository/index`, {})).body as Obj[];
    expect(rows(index, 'composing')).toEqual(['READY', 'READY']);
    expect(rows(index, 'twin')).toEqual(['READY', 'READY']);
    expect(rows(index, 'ens_c')).toEqual(['UNAVAILABLE (ensemble ens_c contains models that are not available or ambiguous: composing)']);
    // A step its own repository lacks and one other repository has: that one.
    expect(rows(index, 'ens_c_only_a')).toEqual(['READY']);
    expect(await grpcInfer(grpc!, 'ens_c_only_a')).toEqual([ADD, SUB]);

    // The shared names, over HTTP (400) and gRPC (INVALID_ARGUMENT), with Triton's text.
    for (const name of ['composing', 'twin']) {
      expect(await httpInfer(s!, name)).toEqual({ status: 400, error: AMBIGUOUS(name) });
      await expect(grpcInfer(grpc!, name)).rejects.toMatchObject({ code: 3, details: AMBIGUOUS(name) });
    }
    for (const path of ['', '/config', '/ready', '/stats']) {
      const got = await getJson(`${s!.url}/v2/models/composing${path}`);
      expect([path, got.status, got.body.error]).toEqual([path, 400, AMBIGUOUS('composing')]);
    }
    await expect(grpc!.call('ModelConfig', { name: 'composing' })).rejects.toMatchObject({ code: 3, details: AMBIGUOUS('composing') });

    // Each ensemble runs the `composing` of its own repository: add-sub in A, sub-add in B.
    expect(await httpInfer(s!, 'ens_a')).toEqual({ status: 200, out: [ADD, SUB] });
    expect(await httpInfer(s!, 'ens_b')).toEqual({ status: 200, out: [SUB, ADD] });
    expect(await grpcInfer(grpc!, 'ens_a')).toEqual([ADD, SUB]);
    expect(await grpcInfer(grpc!, 'ens_b')).toEqual([SUB, ADD]);

    // Statistics of every model list both; the composing models counted their own ensemble's requests.
    const stats = ((await getJson(`${s!.url}/v2/models/stats`)).body.model_stats as Obj[]).filter((m) => m.name === 'composing');
    expect(stats.map((m) => m.inference_stats.success.count).sort()).toEqual([2, 2]);
    // Metrics tell them apart by Triton's `namespace` label.
    const metrics = await (await fetch(`http://127.0.0.1:${s!.metrics!.port}/metrics`)).text();
    for (const repo of [r.a, r.b]) expect(metrics).toContain(`nv_inference_count{namespace="${repo.path}",model="composing",version="1"} 2`);
  });

  it('on, POLL: a model leaving its repository leaves the name to the other, and the ensemble follows it there and back', async () => {
    await start({ modelRepositories: [r.a.path, r.b.path], modelNamespacing: true, modelControlMode: 'poll', repositoryPollSecs: 0.2 });
    expect(await httpInfer(s!, 'ens_a')).toEqual({ status: 200, out: [ADD, SUB] });
    const away = join(r.a.path, '..', `${r.a.path.split('/').pop()}-composing`);
    renameSync(join(r.a.path, 'composing'), away);
    try {
      await expect.poll(async () => (await httpInfer(s!, 'composing')).status, { timeout: 10_000, interval: 100 }).toBe(200);
      expect(await httpInfer(s!, 'composing')).toEqual({ status: 200, out: [SUB, ADD] });
      expect(await grpcInfer(grpc!, 'composing')).toEqual([SUB, ADD]);
      expect(await httpInfer(s!, 'ens_a')).toEqual({ status: 200, out: [SUB, ADD] });
      expect(rows((await postJson(`${s!.url}/v2/repository/index`, {})).body, 'composing')).toEqual(['READY']);
    } finally {
      renameSync(away, join(r.a.path, 'composing'));
    }
    // Ambiguous from the moment the poll finds it; the ensemble keeps to B's until A's has loaded.
    await expect.poll(async () => (await httpInfer(s!, 'composing')).error, { timeout: 10_000, interval: 100 }).toBe(AMBIGUOUS('composing'));
    await expect.poll(() => httpInfer(s!, 'ens_a'), { timeout: 10_000, interval: 100 }).toEqual({ status: 200, out: [ADD, SUB] });
    expect(await grpcInfer(grpc!, 'ens_a')).toEqual([ADD, SUB]);
    expect(await grpcInfer(grpc!, 'ens_b')).toEqual([SUB, ADD]);
  });

  it('on, EXPLICIT: loading an ensemble loads its step\'s name from every repository; unload by name unloads each, with their ensembles', async () => {
    await start({ modelRepositories: [r.a.path, r.b.path], modelNamespacing: true, modelControlMode: 'explicit' });
    expect((await postJson(`${s!.url}/v2/repository/models/ens_a/load`, {})).status).toBe(200);
    const index = () => postJson(`${s!.url}/v2/repository/index`, {}).then((x) => x.body as Obj[]);
    expect(rows(await index(), 'composing')).toEqual(['READY', 'READY']);
    expect(await httpInfer(s!, 'ens_a')).toEqual({ status: 200, out: [ADD, SUB] });
    expect(await httpInfer(s!, 'composing')).toEqual({ status: 400, error: AMBIGUOUS('composing') });
    // Loading `twin` loads both ensembles of that name, each on its own step (`composing` in A, `only_b` in B).
    await grpc!.call('RepositoryModelLoad', { model_name: 'twin' });
    expect(rows(await index(), 'twin')).toEqual(['READY', 'READY']);
    await expect(grpcInfer(grpc!, 'twin')).rejects.toMatchObject({ code: 3, details: AMBIGUOUS('twin') });

    // Unload by name: both `composing`, and the ensembles that run one (B's `twin` does not, and stays).
    expect((await postJson(`${s!.url}/v2/repository/models/composing/unload`, {})).status).toBe(200);
    const after = await index();
    expect(rows(after, 'composing')).toEqual(['UNAVAILABLE (unloaded)', 'UNAVAILABLE (unloaded)']);
    expect(rows(after, 'ens_a')).toEqual(['UNAVAILABLE (unloaded)']);
    expect(rows(after, 'twin')).toEqual(['UNAVAILABLE (unloaded)', 'READY']);
    expect(await httpInfer(s!, 'composing')).toEqual({ status: 503, error: "Request for unknown model: 'composing' has no available versions" });
    expect(await grpcInfer(grpc!, 'twin')).toEqual([SUB, ADD]);
    // Unloaded models are no identifiers: loading the name back makes it serve from both again.
    expect((await postJson(`${s!.url}/v2/repository/models/ens_b/load`, {})).status).toBe(200);
    expect(await grpcInfer(grpc!, 'ens_b')).toEqual([SUB, ADD]);
    expect(await httpInfer(s!, 'composing')).toEqual({ status: 400, error: AMBIGUOUS('composing') });
  });
});
