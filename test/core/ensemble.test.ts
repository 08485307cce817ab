/**
 * Ensemble execution through core's HTTP handler over toy models: dataflow order with parallel
 * branches, pruning by requested outputs, tensors passed by reference, failures that name the step,
 * request parameters reaching the steps, batching of a composing model across ensemble requests,
 * statistics on both levels, decoupled steps (and max_inflight_requests), and explicit loading.
 */

import { describe, expect, it } from 'vitest';
import type { InferResponse, PendingRequest, TsiError } from '../../core/index.js';
import { ensemble, toy, toyServer, type Io } from '../helpers/toy.js';

const F = 'TYPE_FP32';
const t4 = (n: string): Io => [n, F, [4]];

// IN ─▶ slow(double) ─▶ a ─┐
//    └▶ fast(double) ─▶ B ─┴▶ adder ─▶ SUM ;  B is also an output
const diamond = {
  slow: toy('slow', 'double', [t4('X')], [t4('Y')], { parameters: { delay_ms: '60' } }),
  fast: toy('fast', 'double', [t4('X')], [t4('Y')]),
  adder: toy('adder', 'add', [t4('A'), t4('B')], [t4('S')]),
  diamond: ensemble('diamond', [t4('IN')], [t4('SUM'), t4('B')], [
    { model: 'slow', inputs: { X: 'IN' }, outputs: { Y: 'a' } },
    { model: 'fast', inputs: { X: 'IN' }, outputs: { Y: 'B' } },
    { model: 'adder', inputs: { A: 'a', B: 'B' }, outputs: { S: 'SUM' } },
  ]),
};

const out = (body: any, name: string) => body.outputs.find((o: any) => o.name === name)?.data;

describe('ensemble dataflow', () => {
  it('runs parallel branches concurrently and a step once all its inputs exist', async () => {
    const t = await toyServer(diamond);
    const r = await t.infer('diamond', { IN: [1, 2, 3, 4] });
    expect(r.status, r.text).toBe(200);
    expect(out(r.body, 'SUM')).toEqual([4, 8, 12, 16]);
    expect(out(r.body, 'B')).toEqual([2, 4, 6, 8]);
    const order = t.lab.events.map((e) => `${e.model}:${e.what}`);
    // Both branches start before the slow one ends; the join starts only after both ended.
    expect(order.indexOf('fast:start')).toBeLessThan(order.indexOf('slow:end'));
    expect(order.indexOf('fast:end')).toBeLessThan(order.indexOf('slow:end'));
    expect(order.indexOf('adder:start')).toBeGreaterThan(order.indexOf('slow:end'));
    await t.server.stop();
  });

  it('prunes steps that feed no requested output', async () => {
    const t = await toyServer(diamond);
    const r = await t.infer('diamond', { IN: [1, 1, 1, 1] }, { outputs: [{ name: 'B' }] });
    expect(r.status).toBe(200);
    expect(r.body.outputs.map((o: any) => o.name)).toEqual(['B']);
    expect([...t.lab.seen.keys()]).toEqual(['fast']);
    await t.server.stop();
  });

  it('passes intermediate tensors by reference', async () => {
    const t = await toyServer({
      first: toy('first', 'double', [t4('X')], [t4('Y')]),
      second: toy('second', 'copy', [t4('X')], [t4('Y')]),
      chain: ensemble('chain', [t4('IN')], [t4('OUT')], [
        { model: 'first', inputs: { X: 'IN' }, outputs: { Y: 'mid' } },
        { model: 'second', inputs: { X: 'mid' }, outputs: { Y: 'OUT' } },
      ]),
    });
    expect((await t.infer('chain', { IN: [1, 2, 3, 4] })).body.outputs[0].data).toEqual([2, 4, 6, 8]);
    const produced = t.lab.produced.get('first')![0]!.data;
    expect(t.lab.seen.get('second')![0]!.inputs.get('X')!.data).toBe(produced);
    await t.server.stop();
  });

  it("fails with Triton's text (the ensemble's name, then the step's message), and counts the failure on both models", async () => {
    const t = await toyServer({
      ok: toy('ok', 'double', [t4('X')], [t4('Y')]),
      bad: toy('bad', 'fail', [t4('X')], [t4('Y')]),
      e: ensemble('e', [t4('IN')], [t4('OUT')], [
        { model: 'ok', inputs: { X: 'IN' }, outputs: { Y: 'mid' } },
        { model: 'bad', inputs: { X: 'mid' }, outputs: { Y: 'OUT' } },
      ]),
    });
    const r = await t.infer('e', { IN: [1, 2, 3, 4] });
    expect(r.status).toBe(500);
    expect(r.body.error).toBe("in ensemble 'e', toy model 'bad' failed on purpose");
    // As Triton fills it once the steps are checked (L0_model_config's ensemble autofill cases).
    expect((await t.call('GET', '/v2/models/e/config')).body.model_transaction_policy).toEqual({ decoupled: false });
    const stats = (await t.call('GET', '/v2/models/stats')).body.model_stats as any[];
    const of = (n: string) => stats.find((s) => s.name === n).inference_stats;
    // Triton counts a failed ensemble request twice (as its error goes out, and as it is released).
    expect(of('e').fail.count).toBe(2);
    expect(of('bad').fail.count).toBe(1);
    expect(of('ok').success.count).toBe(1);
    await t.server.stop();
  });

  it("a sequence step's refusal reaches the client as Triton words it (L0_sequence_batcher's ensembles)", async () => {
    const t = await toyServer({
      s: toy('s', 'double', [t4('X')], [t4('Y')], { sequence_batching: {} }),
      e: ensemble('e', [t4('IN')], [t4('OUT')], [{ model: 's', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]),
    });
    const r = await t.infer('e', { IN: [1, 2, 3, 4] }, { parameters: { sequence_id: 37469245 } });
    expect(r.status).toBe(400);
    expect(r.body.error).toBe(
      "in ensemble 'e', inference request for sequence 37469245 to model 's' must specify the START flag on the first request of the sequence");
    await t.server.stop();
  });

  it('passes request parameters, priority, timeout and sequence flags to every step', async () => {
    const t = await toyServer({
      m: toy('m', 'double', [t4('X')], [t4('Y')]),
      e: ensemble('e', [t4('IN')], [t4('OUT')], [{ model: 'm', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }]),
    });
    const r = await t.infer('e', { IN: [1, 2, 3, 4] }, {
      id: 'req-7', parameters: { temperature: 0.5, priority: 2, timeout: 5000, sequence_id: 42, sequence_start: true },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.body.id).toBe('req-7');
    const seen = t.lab.seen.get('m')![0] as PendingRequest;
    expect(seen.parameters).toEqual({ temperature: 0.5 });
    expect(seen.id).toBe('req-7');
    expect(seen.priority).toBe(2);
    expect(seen.timeoutUs).toBe(5000);
    expect(seen.sequence).toEqual({ id: 42n, start: true, end: false });
    await t.server.stop();
  });

  it("batches a composing model's requests across concurrent ensemble requests", async () => {
    const t = await toyServer({
      m: toy('m', 'double', [t4('X')], [t4('Y')], {
        max_batch_size: 8, dynamic_batching: { max_queue_delay_microseconds: 20000 }, parameters: { delay_ms: '5' },
      }),
      e: ensemble('e', [t4('IN')], [t4('OUT')], [{ model: 'm', inputs: { X: 'IN' }, outputs: { Y: 'OUT' } }], { max_batch_size: 8 }),
    });
    const rs = await Promise.all(Array.from({ length: 16 }, (_, i) => t.call('POST', '/v2/models/e/infer', {
      inputs: [{ name: 'IN', datatype: 'FP32', shape: [1, 4], data: [i, i, i, i] }],
    })));
    rs.forEach((r, i) => expect(r.body.outputs[0].data).toEqual([2 * i, 2 * i, 2 * i, 2 * i]));
    const m = (await t.call('GET', '/v2/models/m/stats')).body.model_stats[0];
    const e = (await t.call('GET', '/v2/models/e/stats')).body.model_stats[0];
    expect(m.inference_count).toBe(16);
    expect(m.execution_count).toBeLessThan(16);
    expect(e.inference_count).toBe(16);
    expect(e.inference_stats.success.count).toBe(16);
    await t.server.stop();
  });

  it('loads the composing models of an ensemble loaded explicitly', async () => {
    const t = await toyServer(diamond, { explicit: [] });
    expect((await t.index()).filter((e) => e.state === 'READY')).toEqual([]);
    expect((await t.call('POST', '/v2/repository/models/diamond/load')).status).toBe(200);
    const ready = (await t.index()).filter((e) => e.state === 'READY').map((e) => e.name).sort();
    expect(ready).toEqual(['adder', 'diamond', 'fast', 'slow']);
    await t.server.stop();
  });
});

describe('ensembles with a decoupled step', () => {
  // `post` has 4 instances, so without a limit several of its requests run at once.
  const configs = (opts: { max_inflight?: number } = {}) => ({
    gen: toy('gen', 'stream', [t4('X')], [t4('Y')], { model_transaction_policy: { decoupled: true } }),
    post: toy('post', 'double', [t4('X')], [t4('Y')], { parameters: { delay_ms: '10' }, instance_group: [{ count: 4, kind: 'KIND_CPU' }] }),
    e: ensemble('e', [t4('IN')], [t4('OUT')], [
      { model: 'gen', inputs: { X: 'IN' }, outputs: { Y: 'tok' } },
      { model: 'post', inputs: { X: 'tok' }, outputs: { Y: 'OUT' } },
    ], opts.max_inflight ? { max_inflight: opts.max_inflight } : {}),
  });

  const stream = async (t: Awaited<ReturnType<typeof toyServer>>, count: number) => {
    const got: (InferResponse | TsiError)[] = [];
    const finals: boolean[] = [];
    await t.server.inferStream({
      model_name: 'e', inputs: [{ name: 'IN', datatype: 'FP32', shape: [4], data: Float32Array.of(1, 1, 1, 1) }], parameters: { count },
    }, (r, final) => {
      got.push(r);
      finals.push(final);
    });
    return { got, finals };
  };

  it('becomes decoupled and answers once per response of the decoupled step', async () => {
    const t = await toyServer(configs());
    expect((await t.call('GET', '/v2/models/e/config')).body.model_transaction_policy).toEqual({ decoupled: true });
    expect((await t.infer('e', { IN: [1, 1, 1, 1] })).body.error).toBe("HTTP end point doesn't support models with decoupled transaction policy");
    const { got, finals } = await stream(t, 3);
    const data = got.slice(0, 3).map((r) => Array.from((r as InferResponse).outputs[0]!.data as Float32Array));
    expect(data.sort((a, b) => a[0]! - b[0]!)).toEqual([[2, 2, 2, 2], [4, 4, 4, 4], [6, 6, 6, 6]]);
    // `gen` sent its final flag long before `post` (10 ms a request) made the last answer, which is
    // then the last event of the run: it carries the final flag, as Triton's ensemble sends it.
    expect(finals).toEqual([false, false, true]);
    const none = await stream(t, 0);
    expect(none.finals).toEqual([true]);
    await t.server.stop();
  });

  it('max_inflight_requests bounds the requests in flight at each step', async () => {
    const free = await toyServer(configs());
    await stream(free, 5);
    expect(free.lab.maxRunning.get('post')).toBeGreaterThan(1);
    await free.server.stop();
    const limited = await toyServer(configs({ max_inflight: 1 }));
    const { got, finals } = await stream(limited, 5);
    expect(got.filter((r) => (r as InferResponse).outputs.length > 0)).toHaveLength(5);
    expect(finals.indexOf(true)).toBe(finals.length - 1);
    expect(limited.lab.maxRunning.get('post')).toBe(1);
    expect(limited.lab.seen.get('post')).toHaveLength(5);
    await limited.server.stop();
  });

  it('max_inflight_requests is one limit over every request to the ensemble, as Triton shares it', async () => {
    const limited = await toyServer(configs({ max_inflight: 1 }));
    const runs = await Promise.all([stream(limited, 4), stream(limited, 4), stream(limited, 4)]);
    for (const { got, finals } of runs) {
      expect(got.filter((r) => (r as InferResponse).outputs.length > 0)).toHaveLength(4);
      expect(finals.indexOf(true)).toBe(finals.length - 1);
    }
    expect(limited.lab.maxRunning.get('post')).toBe(1);
    expect(limited.lab.seen.get('post')).toHaveLength(12);
    await limited.server.stop();
  });
});
