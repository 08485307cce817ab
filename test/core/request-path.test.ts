/**
 * The per-request path's bookkeeping that its fast paths must keep exact: validation's count of
 * required inputs (optional ones may be left out; the message for a missing one is Triton's), the
 * shared default list of requested outputs, and the server's count of in-flight requests that a
 * graceful stop waits for.
 */

import { describe, expect, it } from 'vitest';
import type { ModelConfig } from '../../core/config/model-config.js';
import { validateRequest } from '../../core/request.js';
import type { InferRequest } from '../../core/types.js';
import { toy, toyServer } from '../helpers/toy.js';

const config: ModelConfig = {
  name: 'm', max_batch_size: 4,
  input: [
    { name: 'A', data_type: 'TYPE_FP32', dims: [2] },
    { name: 'B', data_type: 'TYPE_FP32', dims: [2], optional: true },
    { name: 'C', data_type: 'TYPE_FP32', dims: [2] },
  ],
  output: [{ name: 'X', data_type: 'TYPE_FP32', dims: [2] }, { name: 'Y', data_type: 'TYPE_FP32', dims: [2] }],
} as ModelConfig;

const t = (name: string) => ({ name, datatype: 'FP32' as const, shape: [1, 2], data: new Float32Array(2) });
const validate = (req: Partial<InferRequest>) =>
  validateRequest({ model_name: 'm', inputs: [], ...req }, { modelName: 'm', config, sink: () => {} });

describe('request validation fast paths', () => {
  it('accepts a request without its optional input, and with it', () => {
    expect([...validate({ inputs: [t('A'), t('C')] }).inputs.keys()]).toEqual(['A', 'C']);
    expect([...validate({ inputs: [t('C'), t('B'), t('A')] }).inputs.keys()]).toEqual(['C', 'B', 'A']);
  });

  it('names the missing required inputs, optional ones supplied or not', () => {
    expect(() => validate({ id: 'r1', inputs: [t('B'), t('A')] })).toThrow(
      "[request id: r1] expected number of inputs between 2 and 3 but got 2 inputs for model 'm'. Got input(s) ['B','A'], but missing required input(s) ['C']. Please provide all required input(s).",
    );
    expect(() => validate({ inputs: [] })).toThrow(
      "[request id: <id_unknown>] expected number of inputs between 2 and 3 but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['A','C']. Please provide all required input(s).",
    );
  });

  it("uses Triton's exact count when no input is optional", () => {
    const all = { ...config, input: config.input!.map((i) => ({ ...i, optional: false })) } as ModelConfig;
    expect(() => validateRequest({ model_name: 'm', inputs: [t('A')] }, { modelName: 'm', config: all, sink: () => {} })).toThrow(
      "[request id: <id_unknown>] expected 3 inputs but got 1 inputs for model 'm'. Got input(s) ['A'], but missing required input(s) ['B','C']. Please provide all required input(s).",
    );
  });

  it('keeps the first error when several things are wrong', () => {
    expect(() => validate({ inputs: [t('A'), t('A')] })).toThrow("input 'A' already exists in request (model 'm')");
    expect(() => validate({ inputs: [t('A'), { ...t('C'), shape: [1, 3] }] })).toThrow(
      "unexpected shape for input 'C' for model 'm'. Expected [-1,2], got [1,3].",
    );
    expect(() => validate({ inputs: [t('A'), t('C')], parameters: { priority: -1 } })).toThrow(
      "[request id: <id_unknown>] parameter 'priority' must be a non-negative integer, got \"-1\"",
    );
  });

  it('asks for every output by default, and a request cannot change that list for the next one', () => {
    const a = validate({ inputs: [t('A'), t('C')] });
    expect(a.requestedOutputs).toEqual(['X', 'Y']);
    expect(() => a.requestedOutputs.push('Z')).toThrow();
    expect(validate({ inputs: [t('A'), t('C')] }).requestedOutputs).toEqual(['X', 'Y']);
    expect(validate({ inputs: [t('A'), t('C')], outputs: [{ name: 'Y' }] }).requestedOutputs).toEqual(['Y']);
  });

  it('passes custom parameters on and reads the reserved ones', () => {
    const r = validate({ inputs: [t('A'), t('C')], parameters: { k: 'v', priority: 2, timeout: 5, triton_enable_empty_final_response: true } });
    expect(r.parameters).toEqual({ k: 'v' });
    expect([r.priority, r.timeoutUs]).toEqual([2, 5]);
  });
});

describe('in-flight requests and graceful stop', () => {
  const slow = toy('slow', 'copy', [['X', 'TYPE_FP32', [2]]], [['Y', 'TYPE_FP32', [2]]], { parameters: { delay_ms: '150' } });
  const req = { model_name: 'slow', inputs: [{ name: 'X', datatype: 'FP32' as const, shape: [2], data: new Float32Array(2) }] };

  it('waits for requests in flight, then refuses new ones', async () => {
    const { server } = await toyServer({ slow });
    const inflight = [server.infer(req), server.infer(req)];
    expect(await server.stop(5000)).toBe(0);
    for (const p of inflight) expect((await p).outputs[0]!.name).toBe('Y');
    await expect(server.infer(req)).rejects.toThrow('Server is stopping');
  });

  it('reports what is still running at the deadline, and a refused request is not counted', async () => {
    const { server } = await toyServer({ slow });
    await expect(server.infer({ ...req, inputs: [] })).rejects.toThrow('missing required input');
    const inflight = server.infer(req);
    expect(await server.stop(10)).toBe(1);
    await inflight.catch(() => {});
  });
});

describe('readiness at start-up', () => {
  it('is not ready until the start-up load is over, even while the repository is still being listed', async () => {
    const { BackendRegistry, InferenceServer } = await import('../../core/index.js');
    const { ToyLab, memorySource } = await import('../helpers/toy.js');
    const lab = new ToyLab();
    const backends = new BackendRegistry();
    backends.register('toy', () => lab.backend());
    const mem = memorySource({ m: { name: 'm', backend: 'toy', input: [{ name: 'X', data_type: 'TYPE_FP32', dims: [1] }], output: [{ name: 'Y', data_type: 'TYPE_FP32', dims: [1] }] } });
    let release!: () => void;
    const listed = new Promise<void>((r) => (release = r));
    // A slow listing (a network file system, a big repository): no model is registered yet.
    const source = { ...mem, listModels: async () => { await listed; return mem.listModels(); } };
    const server = new InferenceServer({ sources: [source], backends });
    const starting = server.start();
    await new Promise((r) => setTimeout(r, 20));
    expect(server.isLive()).toBe(true);
    expect(server.isReady()).toBe(false);
    release();
    await starting;
    expect(server.isReady()).toBe(true);
    await server.stop();
  });
});
