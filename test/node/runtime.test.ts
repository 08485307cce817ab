/**
 * Node-runtime behaviour: inference runs off the main thread (health answers while a slow model
 * computes), shutdown drains in-flight requests, and the `tsi-node` CLI serves, prints its model
 * table, stops on SIGTERM with exit 0, and has working `--help` and `doctor`.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { slowModel } from '../../scripts/gen-models.js';
import { MODELS, ROOT, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { probeWebGpu } from '../../runtime-node/gpu/index.js';

const slowConfig = `name: "slow"\nbackend: "onnxruntime"\nmax_batch_size: 4\ninput [{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }]\noutput [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\nparameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`;
const slowBody = (rows: number) => ({ inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [rows, 1], data: Array(rows).fill(1) }] });

describe('off the main thread', () => {
  let s: TestServer;
  let repo: ReturnType<typeof tempRepo>;
  beforeAll(async () => {
    repo = tempRepo({ 'slow/config.pbtxt': slowConfig, 'slow/1/model.onnx': slowModel(300) });
    s = await startTestServer({ modelRepositories: [repo.path] });
  });
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  it('answers health checks while a slow model computes', async () => {
    let inferDone = false;
    const infer = postJson(`${s.url}/v2/models/slow/infer`, slowBody(2)).then((r) => {
      inferDone = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 50));
    let answered = 0;
    for (let i = 0; i < 10; i++) {
      const r = await fetch(`${s.url}/v2/health/ready`);
      expect(r.status).toBe(200);
      if (!inferDone) answered++;
    }
    const r = await infer;
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].shape).toEqual([2, 1]);
    // Every health check came back while the inference (≈600 ms) was still running.
    expect(answered).toBe(10);
  });

  it('drains in-flight requests on stop and then refuses new ones', async () => {
    const inflight = postJson(`${s.url}/v2/models/slow/infer`, slowBody(1));
    await new Promise((r) => setTimeout(r, 50));
    const stopping = s.stop(10_000);
    await new Promise((r) => setTimeout(r, 20));
    expect(s.server.isReady()).toBe(false);
    await expect(s.server.infer({ model_name: 'slow', inputs: [] })).rejects.toThrow(/Server is stopping/);
    const r = await inflight;
    expect(r.status).toBe(200);
    await stopping;
    await expect(fetch(`${s.url}/v2/health/live`)).rejects.toThrow();
  });
});

describe('execution providers', () => {
  it('skips the GPU providers this machine lacks for a KIND_GPU model, says why, and names the one used in the config as loaded', async () => {
    const cfg = slowConfig.replace('name: "slow"', 'name: "gpu_model"').replace('kind: KIND_CPU', 'kind: KIND_GPU');
    const repo = tempRepo({ 'gpu_model/config.pbtxt': cfg, 'gpu_model/1/model.onnx': slowModel(5) });
    const s = await startTestServer({ modelRepositories: [repo.path] });
    try {
      const mv = s.server.model('gpu_model');
      expect(mv.config.instance_group![0]!.kind).toBe('KIND_GPU');
      // WebGPU where Dawn finds an adapter (CI installs a software one), else the CPU (gpu-no-adapter.test.ts).
      const webgpu = (await probeWebGpu()).adapters.length > 0;
      expect(mv.instances[0]!.placement?.provider).toBe(webgpu ? 'webgpu' : 'cpu');
      const logs = s.logs.join('\n');
      expect(logs).toMatch(/no gpu_execution_accelerator named: the default order for an onnx model, cuda, webgpu/);
      expect(logs).toMatch(/cuda not available: provider library not installed: tsi-node gpu install cuda/);
      // The config as loaded names the provider in Triton's field (none on the CPU fallback).
      const config = await (await fetch(`${s.url}/v2/models/gpu_model/config`)).json() as { optimization?: { execution_accelerators?: { gpu_execution_accelerator?: { name: string }[] } } };
      expect(config.optimization?.execution_accelerators?.gpu_execution_accelerator?.map((a) => a.name) ?? []).toEqual(webgpu ? ['webgpu'] : []);
      const r = await postJson(`${s.url}/v2/models/gpu_model/infer`, slowBody(1));
      expect(r.status).toBe(200);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });

  it('fails the load of a model that names a provider not installed here, or one tsi does not know, and says the fix', async () => {
    const gpu = (name: string, accel: string) => slowConfig.replace('name: "slow"', `name: "${name}"`).replace('kind: KIND_CPU', 'kind: KIND_GPU')
      + `optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "${accel}" } ] } }\n`;
    const repo = tempRepo({
      'on_cuda/config.pbtxt': gpu('on_cuda', 'cuda'), 'on_cuda/1/model.onnx': slowModel(5),
      'on_trt/config.pbtxt': gpu('on_trt', 'tensorrt'), 'on_trt/1/model.onnx': slowModel(5),
      'on_npu/config.pbtxt': gpu('on_npu', 'unknown_gpu'), 'on_npu/1/model.onnx': slowModel(5),
      'slow/config.pbtxt': slowConfig, 'slow/1/model.onnx': slowModel(5),
    });
    const s = await startTestServer({ modelRepositories: [repo.path], strictReadiness: false });
    try {
      const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string; state: string; reason: string }[];
      const reason = (m: string) => index.find((e) => e.name === m)!;
      expect(reason('on_cuda')).toMatchObject({ state: 'UNAVAILABLE' });
      expect(reason('on_cuda').reason).toContain("model 'on_cuda': its config names gpu_execution_accelerator 'cuda', but the cuda provider is not installed here: provider library not installed: tsi-node gpu install cuda");
      expect(reason('on_trt').reason).toContain("model 'on_trt': its config names gpu_execution_accelerator 'tensorrt', but the tensorrt provider is not installed here");
      expect(reason('on_npu').reason).toContain("unknown Execution Accelerator 'unknown_gpu' is requested for model 'on_npu'");
      expect(reason('slow').state).toBe('READY');
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });

  it('serves while a model is broken when strict readiness is off', async () => {
    const repo = tempRepo({ 'bad/config.pbtxt': 'name: "bad"\nmax_batch_size: -3\n', 'slow/config.pbtxt': slowConfig, 'slow/1/model.onnx': slowModel(5) });
    const strict = await startTestServer({ modelRepositories: [repo.path] });
    const lax = await startTestServer({ modelRepositories: [repo.path], strictReadiness: false });
    try {
      expect((await fetch(`${strict.url}/v2/health/ready`)).status).toBe(400);
      expect((await fetch(`${lax.url}/v2/health/ready`)).status).toBe(200);
    } finally {
      await strict.stop();
      await lax.stop();
      repo.cleanup();
    }
  });
});

describe('tsi-node CLI', () => {
  const bin = join(ROOT, 'bin', 'tsi-node.js');

  it('prints help for every command', () => {
    const top = spawnSync(process.execPath, [bin, '--help'], { encoding: 'utf8' });
    expect(top.status).toBe(0);
    expect(top.stdout).toMatch(/serve/);
    expect(top.stdout).toMatch(/doctor/);
    const serve = spawnSync(process.execPath, [bin, 'serve', '--help'], { encoding: 'utf8' });
    expect(serve.stdout).toMatch(/--model-repository/);
    expect(serve.stdout).toMatch(/--http-port/);
    expect(serve.stdout).toMatch(/--strict-readiness/);
  });

  it('doctor lists the execution providers', () => {
    const r = spawnSync(process.execPath, [bin, 'doctor'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/onnxruntime-node 1\.\d+\.\d+/);
    expect(r.stdout).toMatch(/\| cpu +\| yes/);
    expect(r.stdout).toMatch(/cuda/);
  });

  it('refuses --load-model without explicit mode, as tritonserver does', () => {
    const r = spawnSync(process.execPath, [bin, 'serve', '--load-model', 'simple', '--http-port', '0'], { encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/Use of '--load-model' requires setting '--model-control-mode=explicit' as well/);
  });

  it('reads --model-control-mode in any case, as tritonserver does (Triton qa passes POLL and EXPLICIT)', () => {
    // POLL is taken as poll: what refuses the run is then --load-model outside explicit mode.
    const poll = spawnSync(process.execPath, [bin, 'serve', '--model-control-mode=POLL', '--load-model', 'simple', '--http-port', '0'], { encoding: 'utf8' });
    expect(poll.status).toBe(1);
    expect(poll.stderr).toMatch(/Use of '--load-model' requires setting '--model-control-mode=explicit' as well/);
    const bad = spawnSync(process.execPath, [bin, 'serve', '--model-control-mode=sometimes', '--http-port', '0'], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/Allowed choices are none, poll, explicit/);
  });

  it('serves the default repository, then stops cleanly on SIGTERM', async () => {
    // No drain delay: nothing balances over this server (the delay is test/node/shutdown-cli.test.ts's).
    const child = spawn(process.execPath, [bin, 'serve', '--http-port', '0', '--http-address', '127.0.0.1', '--grpc-port', '0', '--metrics-port', '0', '--drain-delay-secs', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start-up line; stderr: ${err}`)), 30_000);
      child.stderr.on('data', (d) => {
        err += d;
        const m = /Started HTTPService at [^:]+:(\d+)/.exec(err);
        if (m) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      child.on('exit', (code) => reject(new Error(`exited early with ${code}: ${err}`)));
    });
    expect(err).toMatch(/\| Model +\| Version \| Status/);
    expect(err).toMatch(/\| simple +\| 1 +\| READY/);
    expect(err).toMatch(/\| autocomplete_add +\| 1 +\| READY/);
    const r = await postJson(`http://127.0.0.1:${port}/v2/models/simple/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(3) },
      ],
    });
    expect(r.body.outputs[0].data).toEqual(Array(16).fill(5));
    const code = await new Promise<number | null>((resolve) => {
      child.once('exit', (c) => resolve(c));
      child.kill('SIGTERM');
    });
    expect(code).toBe(0);
    expect(err).toMatch(/SIGTERM received/);
  });

  it('exits non-zero when a model fails and --exit-on-error is on', () => {
    const repo = tempRepo({ 'bad/config.pbtxt': 'name: "bad"\nmax_batch_sise: 4\n' });
    try {
      const r = spawnSync(process.execPath, [bin, 'serve', '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--model-repository', repo.path], { encoding: 'utf8', timeout: 30_000 });
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/did you mean 'max_batch_size'/);
      expect(r.stderr).toMatch(/failed to load all models/);
    } finally {
      repo.cleanup();
    }
  });
});
void MODELS;
