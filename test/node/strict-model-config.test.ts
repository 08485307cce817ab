/**
 * `--strict-model-config=<bool>`, Triton's older spelling of `--disable-auto-complete-config`: true
 * refuses a model that has no config.pbtxt, false completes it from its model file. Runs the
 * TypeScript CLI through tsx on a repository whose only model has no config.
 */

import { describe, expect, it } from 'vitest';
import { postJson, tempRepo } from '../helpers/server.js';
import { serveChild } from '../helpers/serve-child.js';
import { addSubModel } from '../../scripts/gen-models.js';

/** Starts `tsi-node serve` with `flag`, returns the index once HTTP is up, then stops it. */
async function indexWith(repo: string, flag: string): Promise<{ name: string; state?: string; reason?: string }[]> {
  const args = ['serve', '--model-repository', repo, '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false',
    '--allow-metrics', 'false', '--exit-on-error', 'false', '--strict-readiness', 'false', flag];
  const { child, port } = await serveChild(args);
  try {
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
