/**
 * The rate limiter through the real Node server: two real ONNX models share one resource under
 * `--rate-limit execution_count`, answer correctly while taking turns, and report the time their
 * executions waited in the statistics API and on /metrics; too few copies of a resource fail a load;
 * and the CLI's --rate-limit, --rate-limit-resource and --allow-dashboard flags reach the server.
 */

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, ROOT, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const onnx = readFileSync(join(MODELS, 'simple', '1', 'model.onnx'));
const config = (name: string, limiter: string) => `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU ${limiter} } ]
`;
const shared = 'rate_limiter { resources [ { name: "R" count: 1 } ] priority: 1 }';

const infer = (url: string, model: string, k: number) => postJson(`${url}/v2/models/${model}/infer`, {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i + k) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => k) },
  ],
});

describe('rate limiter in the Node server', () => {
  let repo: ReturnType<typeof tempRepo>;
  let s: TestServer;
  beforeAll(async () => {
    repo = tempRepo({
      'a/config.pbtxt': config('a', shared), 'a/1/model.onnx': onnx,
      'b/config.pbtxt': config('b', shared), 'b/1/model.onnx': onnx,
      'big/config.pbtxt': config('big', 'rate_limiter { resources [ { name: "G" global: true count: 3 } ] }'), 'big/1/model.onnx': onnx,
      'elsewhere/config.pbtxt': config('elsewhere', 'rate_limiter { resources [ { name: "D" count: 1 } ] }'), 'elsewhere/1/model.onnx': onnx,
    });
    s = await startTestServer({
      modelRepositories: [repo.path], rateLimit: 'execution_count', rateLimitResources: ['G:2', 'D:10:10'], metricsPort: 0,
      modelControlMode: 'explicit', loadModels: ['a', 'b'],
    });
  });
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  it('serves two models sharing one resource, each execution granted and the waits counted', async () => {
    const answers = await Promise.all(Array.from({ length: 24 }, (_, k) => infer(s.url, k % 2 ? 'b' : 'a', k)));
    answers.forEach((r, k) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.outputs[0].data).toEqual(Array.from({ length: 16 }, (_, i) => i + 2 * k));
    });
    let waitedNs = 0;
    for (const m of ['a', 'b']) {
      const st = (await getJson(`${s.url}/v2/models/${m}/stats`)).body.model_stats[0];
      expect(st.inference_count).toBe(12);
      // Every execution asked the limiter; the waits are part of the queue time.
      expect(st.rate_limiter.wait.count).toBe(st.execution_count);
      expect(st.rate_limiter.wait.ns).toBeLessThanOrEqual(st.inference_stats.queue.ns);
      waitedNs += st.rate_limiter.wait.ns;
    }
    // 24 requests at once over one shared copy of R: some executions had to wait for the other model.
    expect(waitedNs).toBeGreaterThan(0);
    const metrics = await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text();
    expect(metrics).toMatch(/^tsi_rate_limiter_wait_count\{model="a",version="1"\} [1-9]\d*$/m);
    expect(metrics).toMatch(/^tsi_rate_limiter_wait_duration_us\{model="b",version="1"\} \d+$/m);
  });

  it('refuses to load a model that needs more of a resource than --rate-limit-resource gives', async () => {
    const r = await postJson(`${s.url}/v2/repository/models/big/load`, {});
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/Resource count for "G" is limited to 2 which will prevent scheduling of one or more model instances, the minimum required count is 3/);
    // The others keep running.
    expect((await infer(s.url, 'a', 1)).status).toBe(200);
  });

  it('gives a resource named only for another device none on this one (L0_rate_limiter resource1:10:10)', async () => {
    const r = await postJson(`${s.url}/v2/repository/models/elsewhere/load`, {});
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/Resource count for "D" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 1/);
  });
});

/** Runs `tsi-node serve <args>` from the TypeScript sources; resolves with its exit code and stderr, or with the HTTP port once it listens. */
function serve(args: string[]): { done: Promise<{ code: number | null; err: string }>; port: Promise<number>; stop(): void } {
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', 'serve', ...${JSON.stringify(args)}]))`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  let onPort: (p: number) => void;
  const port = new Promise<number>((r) => (onPort = r));
  child.stderr.on('data', (d) => {
    err += d;
    const m = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
    if (m) onPort(Number(m[1]));
  });
  const done = new Promise<{ code: number | null; err: string }>((r) => child.on('exit', (c) => r({ code: c, err })));
  return { done, port, stop: () => child.kill('SIGTERM') };
}

describe('rate limiter and dashboard flags of tsi-node serve', () => {
  it('refuses bad --rate-limit and --rate-limit-resource values with what was expected', async () => {
    const bad = await serve(['--rate-limit', 'sometimes']).done;
    expect(bad.code).not.toBe(0);
    expect(bad.err).toMatch(/--rate-limit <mode>' argument 'sometimes' is invalid\. expected off or execution_count, got 'sometimes'/);
    const res = await serve(['--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false', '--allow-metrics', 'false', '--rate-limit-resource', 'R:many']).done;
    expect(res.code).not.toBe(0);
    expect(res.err).toMatch(/--rate-limit-resource 'R:many': count 'many' is not a non-negative integer; expected <name>:<count>\[:<device>\]/);
  });

  it('serves a rate-limited model and the dashboard when asked to', async () => {
    const repo = tempRepo({ 'a/config.pbtxt': config('a', shared), 'a/1/model.onnx': onnx });
    const s = serve([
      '--model-repository', repo.path, '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false', '--allow-metrics', 'false',
      '--rate-limit', 'execution_count', '--rate-limit-resource', 'R:2', '--allow-dashboard',
    ]);
    try {
      const url = `http://127.0.0.1:${await s.port}`;
      expect((await infer(url, 'a', 3)).status).toBe(200);
      expect((await getJson(`${url}/v2/models/a/stats`)).body.model_stats[0].rate_limiter.wait.count).toBe(1);
      expect((await fetch(`${url}/dashboard/`)).status).toBe(200);
    } finally {
      s.stop();
      await s.done;
      repo.cleanup();
    }
  });
});
