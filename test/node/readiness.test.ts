/**
 * Ready means ready: while `tsi-node serve` starts, /v2/health/ready (and gRPC ServerReady) stays 503
 * until every model the repository scan found is loaded or has failed, although the listeners are
 * open and live answers from the start. Loads run four at a time, so with six slow models a server that
 * registered models only as their load began would call itself ready between two loads; from the first
 * 200 on, every model must answer.
 */

import { describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import { createLogger } from '../../core/index.js';
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
