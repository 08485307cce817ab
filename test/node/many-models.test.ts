/**
 * Many models on one server: the onnxruntime worker pool and parallel loading. Each copy of the tiny
 * offset model answers its own input plus its own number, so a request served by another model's
 * session shows. Threads are counted in /proc/self/task (the server runs in this process): with one
 * thread per instance, as before the pool, 30 models added 60 or more.
 */

import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { offsetModel } from '../../scripts/gen-models.js';
import { requireCapability } from '../helpers/capability.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const N = 30;
const HAS_PROC = (() => {
  try {
    return readdirSync('/proc/self/task').length > 0;
  } catch {
    return false;
  }
})();
const threads = () => readdirSync('/proc/self/task').length;
const needProc = (ctx: TestContext) => requireCapability(ctx, !!process.env.CI, '/proc/self/task', HAS_PROC ? undefined : 'no /proc/self/task to count threads in');

function offsetConfig(name: string, count = 1): string {
  return `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n`
    + `input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n`
    + `instance_group [{ count: ${count} kind: KIND_CPU }]\n`;
}

/** `m0`..`m<n-1>` answering x + i, and `wide` (x + 1000) with four instances. */
function manyRepo(n: number) {
  const files: Record<string, string | Uint8Array> = {
    'wide/config.pbtxt': offsetConfig('wide', 4),
    'wide/1/model.onnx': offsetModel(1000),
  };
  for (let i = 0; i < n; i++) {
    files[`m${i}/config.pbtxt`] = offsetConfig(`m${i}`);
    files[`m${i}/1/model.onnx`] = offsetModel(i);
  }
  return tempRepo(files);
}

async function infer(url: string, model: string, x: number): Promise<number> {
  const r = await postJson(`${url}/v2/models/${model}/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: [x] }] });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.outputs[0].data[0];
}

describe('the onnxruntime worker pool', () => {
  let repo: ReturnType<typeof tempRepo>;
  let s: TestServer;
  let before = 0;

  beforeAll(async () => {
    repo = manyRepo(N);
    before = HAS_PROC ? threads() : 0;
    s = await startTestServer({ modelRepositories: [repo.path], backendConfig: { onnxruntime: { 'worker-count': '2' } }, logVerbose: 2 });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  it('hosts every model on a few threads, whatever the number of models', async (ctx) => {
    expect((await getJson(`${s.url}/v2/health/ready`)).status).toBe(200);
    needProc(ctx);
    // 2 pool threads (4 while `wide` needs them) and the intra-op threads the budget grants; 31 models.
    expect(threads() - before).toBeLessThan(16);
  });

  it('gives every model its own answers under concurrent requests across all of them', async () => {
    const asks = Array.from({ length: 4 * N }, (_, k) => ({ model: `m${k % N}`, x: k, want: k + (k % N) }));
    const got = await Promise.all(asks.map((a) => infer(s.url, a.model, a.x)));
    expect(got).toEqual(asks.map((a) => a.want));
  }, 60_000);

  it('spreads one model\'s instances over different threads, starting more when it needs them', () => {
    const placed = s.logs.map((l) => /wide \(wide_0_(\d)\): session \d+ on onnxruntime pool thread (\d+)/.exec(l)).filter((m) => m !== null);
    expect(placed).toHaveLength(4);
    expect(new Set(placed.map((m) => m![2])).size).toBe(4);
  });

  it('ends every thread once the models are unloaded', async (ctx) => {
    await s.stop();
    needProc(ctx);
    for (let i = 0; i < 50 && threads() > before; i++) await new Promise((r) => setTimeout(r, 100));
    // Within 2 of before: libuv's pool and Node's own helpers start threads on first use and keep them.
    expect(threads() - before).toBeLessThanOrEqual(2);
  });
});

describe('parallel loading (--model-load-thread-count)', () => {
  it('gives the same configs and readiness with 8 loads at a time as with 1', async () => {
    const repo = manyRepo(20);
    const configs: Record<string, unknown>[] = [];
    try {
      for (const count of [1, 8]) {
        const s = await startTestServer({ modelRepositories: [repo.path], modelLoadThreadCount: count });
        try {
          expect((await getJson(`${s.url}/v2/health/ready`)).status).toBe(200);
          const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string; state: string }[];
          expect(index.filter((e) => e.state === 'READY')).toHaveLength(21);
          const all: Record<string, unknown> = {};
          for (const e of index) all[e.name] = (await getJson(`${s.url}/v2/models/${e.name}/config`)).body;
          configs.push(all);
        } finally {
          await s.stop();
        }
      }
      expect(configs[1]).toEqual(configs[0]);
    } finally {
      repo.cleanup();
    }
  }, 120_000);

  // The same readiness would come from a flag that is ignored: this shows the loads overlap. Each model's
  // initialize holds its worker 400 ms and writes when it started and ended; with one load at a time no
  // two intervals overlap, with 8 several do (Triton loads that many models at once).
  it('loads that many models at once, and one at a time with 1', async () => {
    const scratch = mkdtempSync(join(tmpdir(), 'tsi-load-overlap-'));
    const slow = (name: string) => `import { writeFileSync } from 'node:fs';
      export default class {
        initialize() {
          const start = Date.now();
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 400);
          writeFileSync(${JSON.stringify(join(scratch, name))}, start + ' ' + Date.now());
        }
        execute(requests) { return requests.map((r) => ({ outputs: { Y: r.input('X').data } })); }
      }`;
    const files: Record<string, string> = {};
    for (let i = 0; i < 8; i++) {
      files[`s${i}/config.pbtxt`] = `name: "s${i}"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n`;
      files[`s${i}/1/model.js`] = slow(`s${i}`);
    }
    const repo = tempRepo(files);
    /** The most initialize calls running at one moment. */
    const mostAtOnce = () => {
      const spans = readdirSync(scratch).map((f) => readFileSync(join(scratch, f), 'utf8').split(' ').map(Number));
      expect(spans).toHaveLength(8);
      return Math.max(...spans.map(([start]) => spans.filter(([s0, e0]) => s0 <= start && start < e0).length));
    };
    try {
      const most: number[] = [];
      for (const count of [1, 8]) {
        for (const f of readdirSync(scratch)) rmSync(join(scratch, f));
        const s = await startTestServer({ modelRepositories: [repo.path], modelLoadThreadCount: count });
        try {
          expect((await getJson(`${s.url}/v2/health/ready`)).status).toBe(200);
          most.push(mostAtOnce());
        } finally {
          await s.stop();
        }
      }
      expect(most[0]).toBe(1);
      expect(most[1]).toBeGreaterThanOrEqual(3);
    } finally {
      repo.cleanup();
      rmSync(scratch, { recursive: true, force: true });
    }
  }, 120_000);
});
