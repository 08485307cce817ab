/**
 * The per-request paths of the ensemble scheduler that its precomputed plan serves: outputs requested
 * in another order than the config's (the precomputed pruning, answered in the request's order), a
 * step with several outputs feeding one consumer, a consumer reached by two tensors of one response,
 * an optional ensemble input left out, a diamond whose join is requested alone (per-request pruning),
 * plain request parameters reaching a step, and a server stop that drains a running ensemble.
 */

import { describe, expect, it } from 'vitest';
import type { PendingRequest } from '../../core/index.js';
import { ensemble, toy, toyServer, type Io } from '../helpers/toy.js';

const F = 'TYPE_FP32';
const t4 = (n: string): Io => [n, F, [4]];
const names = (body: any) => body.outputs.map((o: any) => o.name);
const out = (body: any, name: string) => body.outputs.find((o: any) => o.name === name)?.data;

// IN ─▶ pair(double, two outputs) ─▶ p, q ─▶ adder ─▶ SUM ;  P (= p) is also an output, via copy
const configs = {
  pair: toy('pair', 'double', [t4('X')], [t4('Y1'), t4('Y2')]),
  adder: toy('adder', 'add', [t4('A'), t4('B')], [t4('S')]),
  copy: toy('copy', 'copy', [t4('X')], [t4('Y')]),
  opt: toy('opt', 'copy', [t4('X'), t4('Z')], [t4('Y')], {
    input: [{ name: 'X', data_type: F, dims: [4] }, { name: 'Z', data_type: F, dims: [4], optional: true }],
  }),
  e: ensemble('e', [t4('IN')], [t4('SUM'), t4('P')], [
    { model: 'pair', inputs: { X: 'IN' }, outputs: { Y1: 'p', Y2: 'q' } },
    { model: 'adder', inputs: { A: 'p', B: 'q' }, outputs: { S: 'SUM' } },
    { model: 'copy', inputs: { X: 'p' }, outputs: { Y: 'P' } },
  ]),
  o: ensemble('o', [t4('IN'), t4('EXTRA')], [t4('OUT')], [{ model: 'opt', inputs: { X: 'IN', Z: 'EXTRA' }, outputs: { Y: 'OUT' } }], {
    input: [{ name: 'IN', data_type: F, dims: [4] }, { name: 'EXTRA', data_type: F, dims: [4], optional: true }],
  }),
};

describe('ensemble plan', () => {
  it('answers every output in the order the request names them, and joins two outputs of one step', async () => {
    const t = await toyServer(configs);
    const all = await t.infer('e', { IN: [1, 2, 3, 4] });
    expect(all.status, all.text).toBe(200);
    expect(names(all.body)).toEqual(['SUM', 'P']);
    expect(out(all.body, 'SUM')).toEqual([4, 8, 12, 16]);
    expect(out(all.body, 'P')).toEqual([2, 4, 6, 8]);
    const reversed = await t.infer('e', { IN: [1, 2, 3, 4] }, { outputs: [{ name: 'P' }, { name: 'SUM' }] });
    expect(reversed.status, reversed.text).toBe(200);
    expect(names(reversed.body)).toEqual(['P', 'SUM']);
    expect(out(reversed.body, 'SUM')).toEqual([4, 8, 12, 16]);
    // Each step ran once per request; the adder got both outputs of the one `pair` response.
    expect(t.lab.seen.get('pair')).toHaveLength(2);
    expect(t.lab.seen.get('adder')).toHaveLength(2);
    expect(t.lab.seen.get('copy')).toHaveLength(2);
    await t.server.stop();
  });

  it('prunes per request, asking a step only for the outputs something reads', async () => {
    const t = await toyServer(configs);
    const r = await t.infer('e', { IN: [1, 1, 1, 1] }, { outputs: [{ name: 'P' }] });
    expect(r.status, r.text).toBe(200);
    expect(names(r.body)).toEqual(['P']);
    expect([...t.lab.seen.keys()].sort()).toEqual(['copy', 'pair']);
    expect(t.lab.seen.get('pair')![0]!.requestedOutputs).toEqual(['Y1']);
    await t.server.stop();
  });

  it('leaves an optional input the client left out absent for the step reading it', async () => {
    const t = await toyServer(configs);
    const without = await t.infer('o', { IN: [1, 2, 3, 4] });
    expect(without.status, without.text).toBe(200);
    expect([...t.lab.seen.get('opt')![0]!.inputs.keys()]).toEqual(['X']);
    const withIt = await t.infer('o', { EXTRA: [5, 5, 5, 5], IN: [1, 2, 3, 4] });
    expect(withIt.status, withIt.text).toBe(200);
    expect([...t.lab.seen.get('opt')![1]!.inputs.keys()].sort()).toEqual(['X', 'Z']);
    await t.server.stop();
  });

  it('passes plain request parameters to the steps', async () => {
    const t = await toyServer(configs);
    const r = await t.infer('e', { IN: [1, 2, 3, 4] }, { parameters: { temperature: 0.5 } });
    expect(r.status, r.text).toBe(200);
    for (const m of ['pair', 'adder', 'copy']) {
      const seen = t.lab.seen.get(m)![0] as PendingRequest;
      expect(seen.parameters).toEqual({ temperature: 0.5 });
      expect(seen.sequence).toBeUndefined();
    }
    await t.server.stop();
  });

  it('drains a running ensemble request on stop, with its statistics', async () => {
    const t = await toyServer({
      slow: toy('slow', 'double', [t4('X')], [t4('Y')], { parameters: { delay_ms: '50' } }),
      s: ensemble('s', [t4('IN')], [t4('OUT')], [{ model: 'slow', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]),
    });
    const pending = t.infer('s', { IN: [1, 2, 3, 4] });
    await new Promise((r) => setTimeout(r, 10));
    const stats = t.server.statistics('s').model_stats[0] as any;
    expect(stats.inference_stats.success.count).toBe(0);
    await t.server.stop();
    const r = await pending;
    expect(r.status, r.text).toBe(200);
    expect(r.body.outputs[0].data).toEqual([2, 4, 6, 8]);
  });
});
