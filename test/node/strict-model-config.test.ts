/**
 * `--strict-model-config=<bool>`, Triton's older spelling of `--disable-auto-complete-config`: true
 * refuses a model that has no config.pbtxt, false completes it from its model file. Runs the
 * TypeScript CLI through tsx on a repository whose only model has no config.
 */

import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, postJson, tempRepo } from '../helpers/server.js';
import { addSubModel } from '../../scripts/gen-models.js';

/** Starts `tsi-node serve` with `flag`, returns the index once HTTP is up, then stops it. */
async function indexWith(repo: string, flag: string): Promise<{ name: string; state?: string; reason?: string }[]> {
  const args = ['serve', '--model-repository', repo, '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false',
    '--allow-metrics', 'false', '--exit-on-error', 'false', '--strict-readiness', 'false', flag];
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start-up line; stderr: ${err}`)), 60_000);
      child.stderr.on('data', (d) => {
        err += d;
        const h = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
        if (h) {
          clearTimeout(timer);
          resolve(Number(h[1]));
        }
      });
      child.on('exit', (c) => reject(new Error(`exited early with ${c}: ${err}`)));
    });
    return (await postJson(`http://127.0.0.1:${port}/v2/repository/index`, {})).body;
  } finally {
    child.kill('SIGKILL');
  }
}

describe('--strict-model-config', () => {
  it('true refuses a model without config.pbtxt; false completes it from the model file', async () => {
    const repo = tempRepo({ 'm/1/model.onnx': addSubModel('FP32', [4]) });
    try {
      const strict = await indexWith(repo.path, '--strict-model-config=true');
      expect(strict).toHaveLength(1);
      expect(strict[0]).toMatchObject({ name: 'm', state: 'UNAVAILABLE' });
      expect(strict[0]!.reason).toContain('auto-complete is disabled');
      const lenient = await indexWith(repo.path, '--strict-model-config=false');
      expect(lenient).toEqual([{ name: 'm', version: '1', state: 'READY', reason: '' }]);
    } finally {
      repo.cleanup();
    }
  }, 120_000);
});
