/**
 * Ensemble load-time validation, one rule per test, through a real InferenceServer over an in-memory
 * repository: each broken ensemble must end UNAVAILABLE with Triton's message (naming the ensemble,
 * the model and the tensor) while every other model still serves; and a step's config is read once.
 */

import { describe, expect, it } from 'vitest';
import { BackendRegistry, InferenceServer, type RepositorySource } from '../../core/index.js';
import { ToyLab, ensemble, memorySource, toy, toyServer, type Io } from '../helpers/toy.js';

const F = 'TYPE_FP32';
const v4: Io = ['IN', F, [4]];
const doubler = toy('doubler', 'double', [['X', F, [4]]], [['Y', F, [4]]]);

/** Loads `ens` beside `doubler` (and `more`), returns the ensemble's index reason. */
async function reasonFor(ens: Record<string, unknown>, more: Record<string, Record<string, unknown>> = {}): Promise<string> {
  const t = await toyServer({ doubler, ...more, [ens.name as string]: ens });
  const r = await t.reason(ens.name as string);
  expect((await t.infer('doubler', { X: [1, 2, 3, 4] })).status).toBe(200);
  await t.server.stop();
  return r;
}

describe('ensemble validation (Triton rules and texts)', () => {
  it('accepts a well-formed ensemble', async () => {
    const ok = ensemble('ok', [v4], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(ok)).toBe('');
  });

  it('every ensemble input must be used', async () => {
    const e = ensemble('e', [v4, ['SPARE', F, [4]]], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(e)).toContain("ensemble input 'SPARE' for ensemble e' is not used");
  });

  it('every ensemble tensor must be consumed', async () => {
    const two = toy('two', 'double', [['X', F, [4]]], [['Y', F, [4]], ['Z', F, [4]]]);
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'two', inputs: { X: 'IN' }, outputs: { Y: 'OUT', Z: 'dangling' } }]);
    expect(await reasonFor(e, { two })).toContain("ensemble tensor 'dangling' is unused in ensemble 'e'");
  });

  it('a tensor appears in an output map only once', async () => {
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [
      { model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } },
      { model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } },
    ]);
    expect(await reasonFor(e)).toContain("ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1");
  });

  it('mapped inputs must exist in the composing model', async () => {
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN', NOPE: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(e)).toBe('in ensemble e, ensemble tensor IN is mapping to non-existing input NOPE in model doubler');
  });

  it('every composing input must be mapped', async () => {
    const adder = toy('adder', 'add', [['A', F, [4]], ['B', F, [4]]], [['S', F, [4]]]);
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'adder', inputs: { A: 'IN' }, outputs: { S: 'OUT' } }]);
    expect(await reasonFor(e, { adder })).toBe('in ensemble e, input B in model adder is not mapped to any ensemble tensors');
  });

  it('mapped outputs must exist in the composing model', async () => {
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { NOPE: 'OUT' } }]);
    expect(await reasonFor(e)).toBe('in ensemble e, ensemble tensor OUT is mapped from non-existing output NOPE in model doubler');
  });

  it('datatypes must agree', async () => {
    const e = ensemble('e', [['IN', 'TYPE_INT32', [4]]], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(e)).toBe('in ensemble e, ensemble tensor IN: inconsistent data type: TYPE_INT32 is inferred from model e while TYPE_FP32 is inferred from model doubler');
  });

  it('shapes must agree (-1 matches anything)', async () => {
    const bad = ensemble('e', [['IN', F, [5]]], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(bad)).toBe('in ensemble e, ensemble tensor IN: inconsistent shape: [5] is inferred from model e while [4] is inferred from model doubler');
    const wild = ensemble('w', [['IN', F, [-1]]], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(wild)).toBe('');
  });

  it("the ensemble's max_batch_size must not exceed a step's", async () => {
    const small = toy('small', 'double', [['X', F, [4]]], [['Y', F, [4]]], { max_batch_size: 2 });
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'small', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }], { max_batch_size: 8 });
    expect(await reasonFor(e, { small })).toBe('ensemble e allows maximum batch size 8, but it contains model small which only allows maximum batch size to be 2');
  });

  it('refuses cycles between ensembles, and an ensemble containing itself', async () => {
    const a = ensemble('a', [v4], [['OUT', F, [4]]], [{ model: 'b', inputs: { IN: 'IN' }, outputs: { OUT: 'OUT' } }]);
    const b = ensemble('b', [v4], [['OUT', F, [4]]], [{ model: 'a', inputs: { IN: 'IN' }, outputs: { OUT: 'OUT' } }]);
    const t = await toyServer({ doubler, a, b });
    const reasons = [await t.reason('a'), await t.reason('b')].join('\n');
    expect(reasons).toMatch(/circular dependency between ensembles: (a -> \.\.\. -> b -> a|b -> \.\.\. -> a -> b)/);
    await t.server.stop();
    const self = ensemble('self', [v4], [['OUT', F, [4]]], [{ model: 'self', inputs: { IN: 'IN' }, outputs: { OUT: 'OUT' } }]);
    expect(await reasonFor(self)).toBe('circular dependency between ensembles: self -> ... -> self -> self');
  });

  it('names composing models that are missing or failed to load', async () => {
    const missing = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'ghost', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(missing)).toBe('ensemble e contains models that are not available or ambiguous: ghost');
    const broken = toy('broken', 'broken', [['X', F, [4]]], [['Y', F, [4]]]);
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'broken', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(e, { broken })).toBe(
      "ensemble 'e' depends on 'broken' which has no loaded version. Model 'broken' loading failed with error: toy model refuses to load",
    );
  });

  it('a step pinned to a version needs that version loaded', async () => {
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [{ model: 'doubler', version: 3, inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    expect(await reasonFor(e)).toBe("ensemble 'e' depends on 'doubler' whose required version 3 is not loaded.");
  });

  it('nor may the response: outputs from two runs of a decoupled model (autofill ensemble/invalid_decoupled_branching_2)', async () => {
    const rep = toy('rep', 'stream', [['X', F, [4]]], [['Y', F, [4]], ['Z', F, [4]]], { model_transaction_policy: { decoupled: true } });
    const e = ensemble('e', [v4], [['OUT', F, [4]], ['IDX', F, [4]]], [
      { model: 'rep', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } },
      { model: 'rep', inputs: { X: 'IN' }, outputs: { Z: 'IDX' } },
    ]);
    expect(await reasonFor(e, { rep })).toBe("in ensemble e, step of model 'e' receives inputs originated from different decoupled models");
    // Both outputs from one run are one response: fine.
    const one = ensemble('one', [v4], [['OUT', F, [4]], ['IDX', F, [4]]], [
      { model: 'rep', inputs: { X: 'IN' }, outputs: { Y: 'OUT', Z: 'IDX' } },
    ]);
    expect(await reasonFor(one, { rep })).toBe('');
  });

  it('no step may pair the responses of two decoupled models', async () => {
    const s1 = toy('s1', 'stream', [['X', F, [4]]], [['Y', F, [4]]], { model_transaction_policy: { decoupled: true } });
    const s2 = toy('s2', 'stream', [['X', F, [4]]], [['Y', F, [4]]], { model_transaction_policy: { decoupled: true } });
    const adder = toy('adder', 'add', [['A', F, [4]], ['B', F, [4]]], [['S', F, [4]]]);
    const e = ensemble('e', [v4], [['OUT', F, [4]]], [
      { model: 's1', inputs: { X: 'IN' }, outputs: { Y: 'p' } },
      { model: 's2', inputs: { X: 'IN' }, outputs: { Y: 'q' } },
      { model: 'adder', inputs: { A: 'p', B: 'q' }, outputs: { S: 'OUT' } },
    ]);
    expect(await reasonFor(e, { s1, s2, adder })).toBe("in ensemble e, step of model 'adder' receives inputs originated from different decoupled models");
  });
});

describe('ensemble checks before loading', () => {
  it("read each step's config once: the check's result is handed to the step's own load", async () => {
    const ok = ensemble('ok', [v4], [['OUT', F, [4]]], [{ model: 'doubler', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]);
    const inner = memorySource({ doubler, ok });
    const reads = new Map<string, number>();
    // A source that can tell an unchanged folder (as the Node one does), counting config reads.
    const source: RepositorySource = {
      ...inner,
      fingerprint: async () => 'unchanged',
      files: (m) => {
        const f = inner.files(m);
        return { ...f, read: (p) => (p === 'config.json' && reads.set(m, (reads.get(m) ?? 0) + 1), f.read(p)) };
      },
    };
    const lab = new ToyLab();
    const backends = new BackendRegistry();
    backends.register('toy', () => lab.backend());
    const server = new InferenceServer({ sources: [source], backends });
    await server.start();
    expect(server.repository.readyVersions('ok')).toHaveLength(1);
    expect(Object.fromEntries(reads)).toEqual({ doubler: 1, ok: 1 });
    await server.stop();
  });
});
