/**
 * Ready means ready: while `tsi-node serve` starts, /v2/health/ready (and gRPC ServerReady) stays 503
 * until every model the repository scan found is loaded or has failed, although the listeners are
 * open and live answers from the start. Loads run four at a time, so with six slow models a server that
 * registered models only as their load began would call itself ready between two loads; from the first
 * 200 on, every model must answer. The same after start-up: a load request, or a poll that finds new
 * models (even while it first unloads removed ones), makes the server not ready until they serve.
 */

import { describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RepositoryPoller, createLogger } from '../../core/index.js';
import { startServer } from '../../runtime-node/index.js';
import { postJson, tempRepo } from '../helpers/server.js';

const slowModel = (ms: number) => `
  export default class {
    async initialize() { await new Promise((r) => setTimeout(r, ${ms})); }
    execute(requests) { return requests.map((r) => ({ outputs: { Y: r.input('X').data } })); }
  }`;

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

describe('readiness at start-up', () => {
  it('answers ready only once every model serves', async () => {
    const files: Record<string, string> = {};
    const names = ['m1', 'm2', 'm3', 'm4', 'm5', 'm6'];
    names.forEach((n, i) => {
      files[`${n}/config.pbtxt`] = `name: "${n}"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n`;
      // Staggered: the last loads start only when earlier ones end.
      files[`${n}/1/model.js`] = slowModel(150 + 100 * i);
    });
    const repo = tempRepo(files);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const starting = startServer({ modelRepositories: [repo.path], httpPort: port, httpAddress: '127.0.0.1', log: createLogger(() => {}, 0) });
    try {
      let live = false;
      let notReadyWhileLoading = 0;
      for (;;) {
        const r = await fetch(`${url}/v2/health/ready`).catch(() => undefined);
        if (r) {
          if ((await fetch(`${url}/v2/health/live`)).status === 200) live = true;
          if (r.status === 200) break;
          notReadyWhileLoading++;
        }
        await new Promise((res) => setTimeout(res, 5));
      }
      expect(live).toBe(true);
      expect(notReadyWhileLoading).toBeGreaterThan(0);
      const answers = await Promise.all(names.map((n) => postJson(`${url}/v2/models/${n}/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [3] }] })));
      expect(answers.map((a) => a.status)).toEqual(names.map(() => 200));
    } finally {
      await (await starting).stop();
      repo.cleanup();
    }
  });
});

describe('readiness while models a scan found are still to load', () => {
  const config = (n: string) => `name: "${n}"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n`;

  it('is not ready from the moment a load request is made until that model serves', async () => {
    const repo = tempRepo({ 'a/config.pbtxt': config('a'), 'a/1/model.js': slowModel(0), 'b/config.pbtxt': config('b'), 'b/1/model.js': slowModel(300) });
    const s = await startServer({ modelRepositories: [repo.path], httpPort: 0, httpAddress: '127.0.0.1', modelControlMode: 'explicit', loadModels: ['a'], log: createLogger(() => {}, 0) });
    try {
      expect(s.server.isReady()).toBe(true);
      const loading = s.server.loadModel('b');
      // Before the load's turn has come (its repository scan is still ahead).
      expect(s.server.isReady()).toBe(false);
      await loading;
      expect(s.server.isReady()).toBe(true);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });

  it('is not ready while a poll loads a new model, also while it first unloads a removed one', async () => {
    const marker = join(tmpdir(), `tsi-readiness-finalized-${process.pid}-${Date.now()}`);
    const slowFinalize = `
      import { writeFileSync } from 'node:fs';
      export default class {
        execute(requests) { return requests.map((r) => ({ outputs: { Y: r.input('X').data } })); }
        async finalize() { await new Promise((r) => setTimeout(r, 400)); writeFileSync(${JSON.stringify(marker)}, 'done'); }
      }`;
    const repo = tempRepo({ 'old/config.pbtxt': config('old'), 'old/1/model.js': slowFinalize });
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // Never polls by itself: the test runs the one poll.
    const s = await startServer({ modelRepositories: [repo.path], httpPort: port, httpAddress: '127.0.0.1', modelControlMode: 'poll', repositoryPollSecs: 0, log: createLogger(() => {}, 0) });
    try {
      expect((await fetch(`${url}/v2/health/ready`)).status).toBe(200);
      rmSync(join(repo.path, 'old'), { recursive: true });
      mkdirSync(join(repo.path, 'new', '1'), { recursive: true });
      writeFileSync(join(repo.path, 'new', 'config.pbtxt'), config('new'));
      writeFileSync(join(repo.path, 'new', '1', 'model.js'), slowModel(300));
      let polled = false;
      const poll = new RepositoryPoller(s.server, 0).pollOnce().then(() => (polled = true));
      // The poll's scan of the folder comes first (ready until it has found what changed); from the
      // first "not ready" on, the server must stay not ready until the poll is over.
      let checks = 0;
      while (!polled) {
        const r = await fetch(`${url}/v2/health/ready`);
        if (!polled && (checks > 0 || r.status !== 200)) {
          expect(r.status).toBe(400);
          // Not ready from before the removed model's finalize (400 ms) is over, not only after it.
          if (checks === 0) expect(existsSync(marker)).toBe(false);
          checks++;
        }
        await new Promise((res) => setTimeout(res, 5));
      }
      await poll;
      expect(checks).toBeGreaterThan(5);
      expect((await fetch(`${url}/v2/health/ready`)).status).toBe(200);
      expect((await postJson(`${url}/v2/models/new/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [3] }] })).body.outputs[0].data).toEqual([3]);
      // The removed model's finalize really ran (the marker is what the check above relies on).
      expect(existsSync(marker)).toBe(true);
    } finally {
      await s.stop();
      repo.cleanup();
      rmSync(marker, { force: true });
    }
  });
});
