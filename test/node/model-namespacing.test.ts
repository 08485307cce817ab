/**
 * `--model-namespacing` (tritonserver's flag; Triton's SageMaker entry script passes `=true`): taken,
 * and with unique names across repositories every model serves as without it; a name found in two
 * repositories is still refused (tsi keys models by name alone), the error saying so under the flag.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServeArgs } from '../helpers/cli.js';
import { addSubModel } from '../../scripts/gen-models.js';
import { startTestServer, tempRepo } from '../helpers/server.js';

const onnx = addSubModel('FP32', [4]);
const config = (name: string) => `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n`;
const model = (name: string) => ({ [`${name}/config.pbtxt`]: config(name), [`${name}/1/model.onnx`]: onnx });

describe('--model-namespacing', () => {
  let a: ReturnType<typeof tempRepo>, b: ReturnType<typeof tempRepo>;
  beforeAll(() => {
    a = tempRepo({ ...model('only_a'), ...model('shared') });
    b = tempRepo({ ...model('only_b'), ...model('shared') });
  });
  afterAll(() => (a.cleanup(), b.cleanup()));

  it('is a tritonserver boolean', async () => {
    expect((await parseServeArgs(['serve', '--model-namespacing=true'])).modelNamespacing).toBe(true);
    expect((await parseServeArgs(['serve', '--model-namespacing=false'])).modelNamespacing).toBe(false);
    expect((await parseServeArgs(['serve'])).modelNamespacing).toBe(false);
  });

  for (const namespacing of [false, true]) {
    it(`${namespacing ? 'on' : 'off'}: unique names serve; a name in both repositories is refused${namespacing ? ', saying tsi does not namespace it' : ''}`, async () => {
      const s = await startTestServer({ modelRepositories: [a.path, b.path], modelNamespacing: namespacing, exitOnError: false });
      try {
        const index = s.server.repositoryIndex(false);
        const state = (name: string) => index.filter((e) => e.name === name).map((e) => e.state);
        expect([state('only_a'), state('only_b')]).toEqual([['READY'], ['READY']]);
        const shared = index.find((e) => e.name === 'shared')!;
        expect(shared.state).not.toBe('READY');
        expect(shared.reason).toMatch(/appears in multiple repositories/);
        expect(/--model-namespacing/.test(shared.reason ?? '')).toBe(namespacing);
      } finally {
        await s.stop();
      }
    });
  }
});
