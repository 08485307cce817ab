/**
 * Triton's identity and repeat test backends as core serves them (no runtime registers them): the
 * identity model answers its inputs with Triton's response parameters, zeros for a left-out optional
 * input, and refuses configs with the texts of Triton's backend; the repeat model streams one
 * response per element of IN after its DELAY, releases its instance after WAIT so that responses of
 * two requests interleave, and answers an empty IN with the final flag alone.
 */

import { describe, expect, it } from 'vitest';
import type { InferResponse } from '../../core/index.js';
import { toyServer } from '../helpers/toy.js';

const io = (name: string, type: string, dims: number[], extra: Record<string, unknown> = {}) => ({ name, data_type: type, dims, ...extra });

const identity = (name: string, extra: Record<string, unknown> = {}) => ({
  name, backend: 'identity', max_batch_size: 8,
  input: [io('INPUT0', 'TYPE_INT32', [-1]), io('INPUT1', 'TYPE_STRING', [2]), io('INPUT2', 'TYPE_FP32', [3], { optional: true })],
  output: [io('OUTPUT0', 'TYPE_INT32', [-1]), io('OUTPUT1', 'TYPE_STRING', [2]), io('OUTPUT2', 'TYPE_FP32', [3])],
  ...extra,
});

const repeat = (name: string, extra: Record<string, unknown> = {}) => ({
  name, backend: 'repeat', max_batch_size: 0, model_transaction_policy: { decoupled: true },
  input: [io('IN', 'TYPE_INT32', [-1]), io('DELAY', 'TYPE_UINT32', [-1]), io('WAIT', 'TYPE_UINT32', [1])],
  output: [io('OUT', 'TYPE_INT32', [1]), io('IDX', 'TYPE_UINT32', [1])],
  ...extra,
});

describe('identity backend', () => {
  it('answers each INPUT<i> as OUTPUT<i>, zeros for a left-out optional input, with Triton\'s parameters', async () => {
    const t = await toyServer({ id: identity('id') });
    const r = await t.call('POST', '/v2/models/id/infer', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [2, 3], data: [1, 2, 3, -4, -5, -6] },
        { name: 'INPUT1', datatype: 'BYTES', shape: [2, 2], data: ['a', 'bc', '', 'def'] },
      ],
    });
    expect(r.status, r.text).toBe(200);
    expect(r.body.parameters).toEqual({ param0: 'an example string parameter', param1: 42, param2: false, param3: 123.123 });
    const byName = Object.fromEntries((r.body.outputs as { name: string }[]).map((o) => [o.name, o]));
    expect(byName.OUTPUT0).toEqual({ name: 'OUTPUT0', datatype: 'INT32', shape: [2, 3], data: [1, 2, 3, -4, -5, -6] });
    expect(byName.OUTPUT1).toEqual({ name: 'OUTPUT1', datatype: 'BYTES', shape: [2, 2], data: ['a', 'bc', '', 'def'] });
    expect(byName.OUTPUT2).toEqual({ name: 'OUTPUT2', datatype: 'FP32', shape: [2, 3], data: [0, 0, 0, 0, 0, 0] });
    await t.server.stop();
  });

  it('refuses configs with the texts of Triton\'s identity backend', async () => {
    const t = await toyServer({
      pairs: identity('pairs', { output: [io('OUTPUT0', 'TYPE_INT32', [-1])] }),
      named: identity('named', { input: [io('X', 'TYPE_INT32', [-1])], output: [io('OUTPUT0', 'TYPE_INT32', [-1])] }),
      types: identity('types', { input: [io('INPUT0', 'TYPE_INT32', [-1])], output: [io('OUTPUT0', 'TYPE_FP32', [-1])] }),
      shapes: identity('shapes', { input: [io('INPUT0', 'TYPE_INT32', [2])], output: [io('OUTPUT0', 'TYPE_INT32', [3])] }),
    });
    expect(await t.reason('pairs')).toBe('model configuration must have equal input/output pairs');
    expect(await t.reason('named')).toBe("expected input name to follow INPUT<index> pattern, got 'X'");
    expect(await t.reason('types')).toBe('expected input and output datatype to match, got TYPE_INT32 and TYPE_FP32');
    expect(await t.reason('shapes')).toBe('expected input and output shape to match, got [2] and [3]');
    await t.server.stop();
  });
});

describe('repeat backend', () => {
  /** Every response of one streamed request, with the time it came. */
  async function stream(t: Awaited<ReturnType<typeof toyServer>>, values: number[], delays: number[], wait: number) {
    const got: { out?: number; idx?: number; final: boolean; at: number }[] = [];
    await t.server.inferStream({
      model_name: 'rep',
      inputs: [
        { name: 'IN', datatype: 'INT32', shape: [values.length], data: Int32Array.from(values) },
        { name: 'DELAY', datatype: 'UINT32', shape: [delays.length], data: Uint32Array.from(delays) },
        { name: 'WAIT', datatype: 'UINT32', shape: [1], data: Uint32Array.of(wait) },
      ],
    }, (r, final) => {
      if (r instanceof Error) throw r;
      const res = r as InferResponse;
      const num = (n: string) => (res.outputs.find((o) => o.name === n)?.data as ArrayLike<number> | undefined)?.[0];
      got.push({ out: num('OUT'), idx: num('IDX'), final, at: performance.now() });
    });
    return got;
  }

  it('sends one response per element of IN, then the final flag; none for an empty IN', async () => {
    const t = await toyServer({ rep: repeat('rep') });
    const got = await stream(t, [4, 5, 6], [0, 20, 0], 0);
    expect(got.filter((g) => g.out !== undefined).map((g) => [g.out, g.idx])).toEqual([[4, 0], [5, 1], [6, 2]]);
    expect(got.at(-1)!.final).toBe(true);
    const empty = await stream(t, [], [], 0);
    expect(empty.map((g) => [g.out, g.final])).toEqual([[undefined, true]]);
    await t.server.stop();
  });

  it('takes the next request after WAIT, so the responses of two requests interleave on one instance', async () => {
    const t = await toyServer({ rep: repeat('rep', { instance_group: [{ kind: 'KIND_CPU', count: 1 }] }) });
    const order: string[] = [];
    const slow = stream(t, [1, 2], [0, 400], 0).then((g) => g.forEach((x) => x.out !== undefined && order.push(`slow${x.idx}`)));
    await new Promise((r) => setTimeout(r, 50));
    const fast = stream(t, [9], [0], 0).then((g) => g.forEach((x) => x.out !== undefined && order.push(`fast${x.idx}`)));
    await Promise.all([slow, fast]);
    // Collected when each stream ends: the fast one ended while the slow one still had a response to send.
    expect(order).toEqual(['fast0', 'slow0', 'slow1']);
    await t.server.stop();
  });

  it('refuses configs with the texts of Triton\'s repeat backend', async () => {
    const t = await toyServer({
      batching: repeat('batching', { max_batch_size: 4 }),
      count: repeat('count', { input: [io('IN', 'TYPE_INT32', [-1])] }),
      intype: repeat('intype', { input: [io('IN', 'TYPE_FP32', [-1]), io('DELAY', 'TYPE_UINT32', [-1]), io('WAIT', 'TYPE_UINT32', [1])] }),
    });
    expect(await t.reason('batching')).toBe('repeat backend only supports models with max_batch_size == 0');
    expect(await t.reason('count')).toBe('expected 3 inputs, got 1');
    expect(await t.reason('intype')).toBe('expected IN datatype to be INT32, got TYPE_FP32');
    await t.server.stop();
  });
});
