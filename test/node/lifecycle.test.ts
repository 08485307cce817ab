/**
 * Model control as Triton's L0_lifecycle suite expects it, on the real server over HTTP and gRPC:
 * unloading an unknown model is a no-op, a version that fails to load answers Triton's `load failed
 * for model '<m>': version <v> is at UNAVAILABLE state: ...`, a specific version policy naming a
 * missing version serves the others, "successfully loaded '<m>'" is logged once per load however many
 * versions, a reload without override keeps a config override until the folder changes, instances of
 * one model initialise at once, and --model-load-retry-count tries a failed version again.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { addSubModel } from '../../scripts/gen-models.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient } from '../helpers/grpc.js';
import { parseServeArgs } from '../helpers/cli.js';

const js = (name: string, extra = '') =>
  `name: "${name}"\nbackend: "javascript"\n${extra}\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\n`;
const echo = (init = '') => `
  import { existsSync, writeFileSync } from 'node:fs';
  export default class {
    initialize(args) { ${init} }
    execute(requests) { return requests.map((r) => ({ outputs: { Y: r.input('X').data } })); }
  }`;
const onnxCfg = (name: string, maxBatch: number) =>
  `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: ${maxBatch}\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n`;

/**
 * Each instance writes its marker and waits (up to 60 s) until the other's exists: created one after
 * another, the first never sees the second and the load fails; created at once, both pass.
 */
const rendezvous = (dir: string) => echo(`
  const me = ${JSON.stringify(dir)} + '/' + args.model_instance_name;
  writeFileSync(me, '');
  const other = ${JSON.stringify(dir)} + '/' + (args.model_instance_name.endsWith('_0') ? args.model_instance_name.replace(/_0$/, '_1') : args.model_instance_name.replace(/_1$/, '_0'));
  const deadline = Date.now() + 60000;
  while (!existsSync(other)) {
    if (Date.now() > deadline) throw new Error('the other instance never started initializing');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
  args.log.info('initialized ' + args.model_instance_name + ' beside the other');`);

/** The same rendezvous in a Python model's initialize (Triton's test uses Python models). */
const rendezvousPy = (dir: string) => `
import os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        me = args["model_instance_name"]
        open(os.path.join(${JSON.stringify(dir)}, me), "w").close()
        other = me[:-1] + ("1" if me.endswith("0") else "0")
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(${JSON.stringify(dir)}, other)):
            if time.time() > deadline:
                raise Exception("the other instance never started initializing")
            time.sleep(0.02)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
`;

/** Writes `<dir>/started`, then waits until the test writes `<dir>/go`. */
const gated = (dir: string) => echo(`
  writeFileSync(${JSON.stringify(dir)} + '/started', '');
  const deadline = Date.now() + 60000;
  while (!existsSync(${JSON.stringify(dir)} + '/go')) {
    if (Date.now() > deadline) throw new Error('never released');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }`);

/** Waits for a condition the server reports (a file it wrote, a line it logged). */
async function until(what: string, check: () => boolean): Promise<void> {
  for (let i = 0; i < 3000 && !check(); i++) await new Promise((r) => setTimeout(r, 20));
  if (!check()) throw new Error(`timed out waiting for ${what}`);
}

/** Fails the first initialize (leaving a marker file), succeeds afterwards: Triton's retry_model. */
const failsOnce = (marker: string) => echo(`
  if (!existsSync(${JSON.stringify(marker)})) {
    writeFileSync(${JSON.stringify(marker)}, '');
    throw new Error('failing first load attempt');
  }`);

describe('model control as Triton does it', () => {
  let s: TestServer;
  let retrying: TestServer;
  let repo: ReturnType<typeof tempRepo>;
  let scratch: string;
  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'tsi-lifecycle-'));
    repo = tempRepo({
      'm/config.pbtxt': onnxCfg('m', 4),
      'm/1/model.onnx': addSubModel('FP32', [4]),
      'broken/config.pbtxt': js('broken'),
      'broken/1/model.js': echo(`throw new Error('no weights here');`),
      'specific/config.pbtxt': js('specific', 'version_policy: { specific: { versions: [1, 3] } }'),
      'specific/3/model.js': echo(),
      'two/config.pbtxt': js('two', 'version_policy: { all: {} }'),
      'two/1/model.js': echo(),
      'two/2/model.js': echo(),
      'par/config.pbtxt': js('par', 'instance_group [{ kind: KIND_CPU count: 2 }]'),
      'par/1/model.js': rendezvous(scratch),
      'par_py/config.pbtxt': js('par_py', 'instance_group [{ kind: KIND_CPU count: 2 }]').replace('backend: "javascript"', 'backend: "python"'),
      'par_py/1/model.py': rendezvousPy(scratch),
      'retry_once/config.pbtxt': js('retry_once'),
      'retry_once/1/model.js': failsOnce(join(scratch, 'retry_once')),
      'slowstep/config.pbtxt': js('slowstep'),
      'slowstep/1/model.js': gated(scratch),
      'ens/config.pbtxt': 'name: "ens"\nplatform: "ensemble"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\n'
        + 'ensemble_scheduling { step [{ model_name: "slowstep" model_version: -1 input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } }] }\n',
      'ens/1/.keep': '',
      'no_retry/config.pbtxt': js('no_retry'),
      'no_retry/1/model.js': failsOnce(join(scratch, 'no_retry')),
    });
    s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', grpcPort: 0, grpcAddress: '127.0.0.1' });
    retrying = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', modelLoadRetryCount: 1 });
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
    await retrying?.stop();
    repo?.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });

  const load = (name: string, parameters?: Record<string, unknown>, server = s) =>
    postJson(`${server.url}/v2/repository/models/${name}/load`, parameters ? { parameters } : {});

  it('unloading a model it does not know succeeds and changes nothing, over HTTP and gRPC', async () => {
    const r = await postJson(`${s.url}/v2/repository/models/unknown_model/unload`, {});
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      await expect(c.call('RepositoryModelUnload', { model_name: 'unknown_model' })).resolves.toBeDefined();
    } finally {
      c.close();
    }
    const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string }[];
    expect(index.map((e) => e.name)).not.toContain('unknown_model');
    expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(200);
  });

  it("a version that fails to load answers Triton's 'load failed for model', over HTTP and gRPC", async () => {
    const r = await load('broken');
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/^load failed for model 'broken': version 1 is at UNAVAILABLE state: .*no weights here.*;$/);
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      await expect(c.call('RepositoryModelLoad', { model_name: 'broken' }))
        .rejects.toMatchObject({ details: expect.stringMatching(/^load failed for model 'broken': version 1 is at UNAVAILABLE state: /) });
    } finally {
      c.close();
    }
  });

  it('a specific version policy naming a missing version serves the versions that exist, and logs the missing one', async () => {
    const r = await load('specific');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((await fetch(`${s.url}/v2/models/specific/versions/3/ready`)).status).toBe(200);
    expect((await fetch(`${s.url}/v2/models/specific/versions/1/ready`)).status).not.toBe(200);
    expect(s.logs.filter((l) => l.startsWith('E') && l.endsWith("version 1 is specified for model 'specific', but the version directory is not present"))).toHaveLength(1);
  });

  it("logs \"successfully loaded '<model>'\" once per load, however many versions it has", async () => {
    const count = () => s.logs.filter((l) => l.includes("successfully loaded 'two'")).length;
    expect((await load('two')).status).toBe(200);
    expect((await fetch(`${s.url}/v2/models/two/versions/1/ready`)).status).toBe(200);
    expect((await fetch(`${s.url}/v2/models/two/versions/2/ready`)).status).toBe(200);
    expect(count()).toBe(1);
    writeFileSync(join(repo.path, 'two', '2', 'model.js'), echo('/* changed */'));
    expect((await load('two')).status).toBe(200);
    expect(count()).toBe(2);
  });

  it('a reload without override keeps a config override until config.pbtxt changes on disk, then uses the file', async () => {
    expect((await load('m')).status).toBe(200);
    const maxBatch = async () => (await getJson(`${s.url}/v2/models/m/config`)).body.max_batch_size;
    expect(await maxBatch()).toBe(4);
    const config = JSON.stringify({ name: 'm', backend: 'onnxruntime', max_batch_size: 2 });
    expect((await load('m', { config })).status).toBe(200);
    expect(await maxBatch()).toBe(2);
    // Nothing changed on disk: as in Triton, the override stays.
    expect((await load('m')).status).toBe(200);
    expect(await maxBatch()).toBe(2);
    writeFileSync(join(repo.path, 'm', 'config.pbtxt'), onnxCfg('m', 3));
    expect((await load('m')).status).toBe(200);
    expect(await maxBatch()).toBe(3);
  });

  it('initialises the instances of one model at once (each waits to see the other start)', async () => {
    const r = await load('par');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(s.logs.filter((l) => /initialized par_0_[01] beside the other/.test(l))).toHaveLength(2);
  }, 120_000);

  it('initialises the instances of a Python model at once too, and they serve', async () => {
    const r = await load('par_py');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const inf = await postJson(`${s.url}/v2/models/par_py/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [3, 4] }] });
    expect(inf.body.outputs?.[0]?.data, JSON.stringify(inf.body)).toEqual([3, 4]);
  }, 120_000);

  it('unloading a composing model while its ensemble loads waits for that load, then unloads the ensemble with it', async () => {
    const loading = load('ens');
    await until('the step to start initializing', () => existsSync(join(scratch, 'started')));
    const unloading = postJson(`${s.url}/v2/repository/models/slowstep/unload`, {});
    await until('the unload to wait', () => s.logs.some((l) => l.includes("unloading 'slowstep' once the loads in progress of 'ens' are over")));
    writeFileSync(join(scratch, 'go'), '');
    const loaded = await loading;
    expect(loaded.status, JSON.stringify(loaded.body)).toBe(200);
    expect((await unloading).status).toBe(200);
    expect((await fetch(`${s.url}/v2/models/slowstep/ready`)).status).not.toBe(200);
    expect((await fetch(`${s.url}/v2/models/ens/ready`)).status).not.toBe(200);
    // Unloaded on purpose, both: no obstacle to strict readiness.
    const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string; reason?: string }[];
    expect(index.filter((e) => e.name === 'ens' || e.name === 'slowstep').map((e) => e.reason)).toEqual(['unloaded', 'unloaded']);
    // Both load again, and the ensemble answers.
    expect((await load('ens')).status).toBe(200);
    const r = await postJson(`${s.url}/v2/models/ens/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [1, 2] }] });
    expect(r.body.outputs?.[0]?.data, JSON.stringify(r.body)).toEqual([1, 2]);
  }, 120_000);

  it('--model-load-retry-count tries a version that failed again; without it the load fails', async () => {
    const once = await load('no_retry');
    expect(once.status).toBe(400);
    expect(once.body.error).toMatch(/^load failed for model 'no_retry': version 1 is at UNAVAILABLE state: .*failing first load attempt/);
    const retried = await load('retry_once', undefined, retrying);
    expect(retried.status, JSON.stringify(retried.body)).toBe(200);
    expect((await fetch(`${retrying.url}/v2/models/retry_once/ready`)).status).toBe(200);
    expect(retrying.logs.some((l) => l.startsWith('W') && l.includes("failed to load 'retry_once' version 1") && l.includes('retrying (1 of 1)'))).toBe(true);
    expect((await parseServeArgs(['serve', '--model-load-retry-count', '1'])).modelLoadRetryCount).toBe(1);
    expect((await parseServeArgs(['serve'])).modelLoadRetryCount).toBe(0);
  });
});

describe('model repository paths as tritonserver takes them', () => {
  it('--exit-on-error=false with a repository folder missing: serves metadata, neither live nor ready, no models (HTTP and gRPC)', async () => {
    const repo = tempRepo({ 'm/config.pbtxt': onnxCfg('m', 4), 'm/1/model.onnx': addSubModel('FP32', [4]) });
    const missing = join(repo.path, 'xyzx');
    const s = await startTestServer({ modelRepositories: [missing, repo.path], exitOnError: false, grpcPort: 0, grpcAddress: '127.0.0.1' });
    try {
      expect((await fetch(`${s.url}/v2/health/live`)).status).toBe(400);
      expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(400);
      expect((await getJson(`${s.url}/v2`)).body).toMatchObject({ name: 'triton' });
      const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
      try {
        expect(await c.call('ServerLive', {})).toMatchObject({ live: false });
        expect(await c.call('ServerReady', {})).toMatchObject({ ready: false });
        expect(await c.call('ServerMetadata', {})).toMatchObject({ name: 'triton' });
      } finally {
        c.close();
      }
      expect((await postJson(`${s.url}/v2/repository/index`, {})).body).toEqual([]);
      expect(s.logs.filter((l) => l.startsWith('E') && l.includes(`failed to stat file ${missing}`))).toHaveLength(1);
    } finally {
      await s.stop();
      repo.cleanup();
    }
    // Without the flag the start is refused, as before.
    await expect(startTestServer({ modelRepositories: [missing] })).rejects.toThrow(`failed to stat file ${missing}`);
  });

  it('the same repository given twice (even spelled differently) is one repository, not a clash of every model', async () => {
    const repo = tempRepo({ 'm/config.pbtxt': onnxCfg('m', 4), 'm/1/model.onnx': addSubModel('FP32', [4]) });
    const s = await startTestServer({ modelRepositories: [repo.path, repo.path, `${repo.path}/`] });
    try {
      expect((await postJson(`${s.url}/v2/repository/index`, {})).body).toEqual([{ name: 'm', version: '1', state: 'READY', reason: '' }]);
      expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(200);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });

  // L0_lifecycle starts a second server on a taken port and greps its log for Triton's text.
  it("a taken gRPC or HTTP port fails the start with Triton's 'failed to start <service> service: ... already in use'", async () => {
    const empty = tempRepo({});
    const holder = createNetServer();
    await new Promise<void>((done) => holder.listen(0, '127.0.0.1', done));
    try {
      const grpcPort = (holder.address() as AddressInfo).port;
      await expect(startTestServer({ modelRepositories: [empty.path], grpcPort, grpcAddress: '127.0.0.1' }))
        .rejects.toThrow(`failed to start GRPC service: Unavailable - Socket '127.0.0.1:${grpcPort}' already in use`);
      const httpPort = grpcPort;
      await expect(startTestServer({ modelRepositories: [empty.path], httpPort }))
        .rejects.toThrow(`failed to start HTTP service: Unavailable - Socket '127.0.0.1:${httpPort}' already in use`);
      // The CLI logs it as it is, as tritonserver's main does, and exits 1.
      const bin = join(fileURLToPath(new URL('../..', import.meta.url)), 'bin', 'tsi-node.js');
      const cli = spawnSync(process.execPath, [bin, 'serve', '--model-repository', empty.path, '--http-port', '0',
        '--grpc-address', '127.0.0.1', '--grpc-port', String(grpcPort), '--metrics-port', '0'], { encoding: 'utf8', timeout: 30_000 });
      expect(cli.status).toBe(1);
      expect(cli.stderr + cli.stdout).toMatch(new RegExp(`\\] failed to start GRPC service: Unavailable - Socket '127\\.0\\.0\\.1:${grpcPort}' already in use`));
    } finally {
      holder.close();
      empty.cleanup();
    }
  });

  it('tsi-node serve takes --exit-on-error=false (default true)', async () => {
    expect((await parseServeArgs(['serve', '--exit-on-error=false'])).exitOnError).toBe(false);
    expect((await parseServeArgs(['serve'])).exitOnError).toBe(true);
  });
});
