/**
 * The dynamic batcher: the pure decision (preferred sizes, delay, max batch, request batch sizes,
 * shape rules) on hand-made queues, then the scheduler on fake instances and a fake clock (batches
 * formed while instances are busy, delay honoured to the microsecond, no cross-request mixing,
 * ordering preserved, instances overlapping, the default scheduler).
 */

import { describe, expect, it } from 'vitest';
import { batchPolicy, decideBatch, type BatchCandidate, type BatchPolicy } from '../../core/scheduling/batcher.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import type { Tensor } from '../../core/types.js';
import { batchInputTensors } from '../../core/tensor.js';
import { flush, harness, request, values } from '../helpers/fake-backend.js';

const policy = (p: Partial<BatchPolicy>): BatchPolicy => ({
  maxBatchSize: 8, preferredSizes: [], maxQueueDelayNs: 0, equalShapeInputs: [], hasOptionalInputs: false, ...p,
});
const cand = (batchSize = 1, enqueuedNs = 0, inputs: Record<string, number[]> = {}): BatchCandidate => ({
  batchSize, enqueuedNs,
  inputs: new Map(Object.entries(inputs).map(([n, shape]) => [n, { name: n, datatype: 'FP32', shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) } as Tensor])),
});
const many = (n: number, batchSize = 1, t = 0) => Array.from({ length: n }, () => cand(batchSize, t));

describe('decideBatch (Triton GetDynamicBatch)', () => {
  it('takes the largest preferred size that fits, else whatever is queued when delay is 0', () => {
    const p = policy({ preferredSizes: [4, 8] });
    expect(decideBatch(many(5), 0, p)).toEqual({ kind: 'execute', count: 4, rows: 4 });
    expect(decideBatch(many(9), 0, p)).toEqual({ kind: 'execute', count: 8, rows: 8 });
    expect(decideBatch(many(3), 0, p)).toEqual({ kind: 'execute', count: 3, rows: 3 });
    expect(decideBatch([], 0, p)).toEqual({ kind: 'empty' });
  });

  it('defaults the preferred size to max_batch_size and never exceeds it', () => {
    expect(decideBatch(many(20), 0, policy({}))).toEqual({ kind: 'execute', count: 8, rows: 8 });
  });

  it('waits for the oldest request\'s delay, then sends what is pending', () => {
    const p = policy({ preferredSizes: [4], maxQueueDelayNs: 1_000_000 });
    const q = [cand(1, 500), cand(1, 100), cand(1, 900)];
    expect(decideBatch(q, 600_000, p)).toEqual({ kind: 'wait', untilNs: 1_000_100 });
    expect(decideBatch(q, 1_000_100, p)).toEqual({ kind: 'execute', count: 3, rows: 3 });
    // A preferred size is sent at once, delay or not.
    expect(decideBatch([...q, cand(1, 950)], 1000, p)).toEqual({ kind: 'execute', count: 4, rows: 4 });
  });

  it('sends everything pending (up to max) once the delay is exceeded, even past the preferred size', () => {
    const p = policy({ preferredSizes: [4], maxQueueDelayNs: 1000 });
    expect(decideBatch(many(6), 0, p)).toEqual({ kind: 'execute', count: 4, rows: 4 });
    expect(decideBatch(many(6), 1000, p)).toEqual({ kind: 'execute', count: 6, rows: 6 });
    expect(decideBatch(many(6), 0, p, true)).toEqual({ kind: 'execute', count: 6, rows: 6 });
  });

  it('counts requests by their own batch size', () => {
    expect(decideBatch(many(3, 3), 0, policy({ preferredSizes: [6] }))).toEqual({ kind: 'execute', count: 2, rows: 6 });
    expect(decideBatch(many(2, 5), 0, policy({}))).toEqual({ kind: 'execute', count: 1, rows: 5 });
    expect(decideBatch([cand(2), cand(8)], 0, policy({}))).toEqual({ kind: 'execute', count: 1, rows: 2 });
  });

  it('closes a batch at a shape change of a variable-dim input unless ragged', () => {
    const config: ModelConfig = {
      max_batch_size: 8, dynamic_batching: {},
      input: [{ name: 'V', data_type: 'TYPE_FP32', dims: [-1] }, { name: 'F', data_type: 'TYPE_FP32', dims: [2] }],
    };
    const q = [cand(1, 0, { V: [1, 3], F: [1, 2] }), cand(1, 0, { V: [1, 3], F: [1, 2] }), cand(1, 0, { V: [1, 4], F: [1, 2] })];
    expect(decideBatch(q, 0, batchPolicy(config))).toEqual({ kind: 'execute', count: 2, rows: 2 });
    // A client batch of 2 with the same per-row shape still matches.
    expect(decideBatch([cand(1, 0, { V: [1, 3] }), cand(2, 0, { V: [2, 3] })], 0, batchPolicy(config))).toEqual({ kind: 'execute', count: 2, rows: 3 });
    const ragged = { ...config, input: [{ ...config.input![0]!, allow_ragged_batch: true }, config.input![1]!] };
    expect(batchPolicy(ragged).equalShapeInputs).toEqual([]);
    expect(decideBatch(q, 0, batchPolicy(ragged))).toEqual({ kind: 'execute', count: 3, rows: 3 });
  });

  it('does not mix requests supplying different optional inputs', () => {
    const config: ModelConfig = {
      max_batch_size: 8, input: [{ name: 'A', dims: [1] }, { name: 'B', dims: [1], optional: true }],
    };
    const q = [cand(1, 0, { A: [1, 1] }), cand(1, 0, { A: [1, 1], B: [1, 1] })];
    expect(decideBatch(q, 0, batchPolicy(config))).toEqual({ kind: 'execute', count: 1, rows: 1 });
  });

  it('executes one request at a time when batching is disabled', () => {
    expect(decideBatch(many(5, 3), 0, policy({ maxBatchSize: 0 }))).toEqual({ kind: 'execute', count: 1, rows: 3 });
  });
});

const mlp = (db: ModelConfig['dynamic_batching'] = {}, maxBatch = 8): ModelConfig => ({
  name: 'mlp', max_batch_size: maxBatch, dynamic_batching: db,
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [2] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [2] }],
});

describe('DynamicBatchScheduler', () => {
  it('queues one full batch behind a busy pipelined instance, never a partial one', async () => {
    const h = harness(mlp({}, 4), 1, { pipelined: true });
    h.backend.hold = true;
    const all = [h.submit(request({ id: 'a', inputs: { INPUT0: [0, 0] }, batch: 1 }))];
    await flush();
    for (let i = 0; i < 3; i++) all.push(h.submit(request({ id: `p${i}`, inputs: { INPUT0: [i, i] }, batch: 1 })));
    await flush();
    expect(h.backend.batches.map((b) => b.rows)).toEqual([1]);
    all.push(h.submit(request({ id: 'p3', inputs: { INPUT0: [3, 3] }, batch: 1 })));
    await flush();
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a'], ['p0', 'p1', 'p2', 'p3']]);
    for (let i = 0; i < 4; i++) all.push(h.submit(request({ id: `q${i}`, inputs: { INPUT0: [i, i] }, batch: 1 })));
    await flush();
    expect(h.backend.batches).toHaveLength(2);
    h.backend.release();
    await flush();
    expect(h.backend.batches.map((b) => b.ids[0])).toEqual(['a', 'p0', 'q0']);
    h.backend.release();
    h.backend.release();
    await Promise.all(all.map((r) => r.done));
    expect(h.stats.executionCount).toBe(3);
    expect(h.stats.inflight).toBe(0);
  });

  it('never queues behind an instance when priorities or queue limits apply', async () => {
    const h = harness(mlp({ priority_levels: 2, default_priority_level: 2 }, 1), 1, { pipelined: true });
    h.backend.hold = true;
    const all = [h.submit(request({ id: 'a', inputs: { INPUT0: [0, 0] }, batch: 1 }))];
    await flush();
    all.push(h.submit(request({ id: 'b', inputs: { INPUT0: [1, 1] }, batch: 1 })));
    await flush();
    expect(h.backend.batches).toHaveLength(1);
    h.backend.release();
    await flush();
    h.backend.release();
    await Promise.all(all.map((r) => r.done));
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a'], ['b']]);
  });

  it('batches what queued while the instance was busy', async () => {
    const h = harness(mlp());
    h.backend.hold = true;
    h.submit(request({ id: 'a', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await flush();
    const rest = Array.from({ length: 5 }, (_, i) => h.submit(request({ id: `r${i}`, inputs: { INPUT0: [i, i] }, batch: 1 })));
    await flush();
    expect(h.backend.batches.map((b) => b.rows)).toEqual([1]);
    h.backend.release();
    await flush();
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a'], ['r0', 'r1', 'r2', 'r3', 'r4']]);
    h.backend.release();
    await Promise.all(rest.map((r) => r.done));
    expect(h.stats.executionCount).toBe(2);
    expect(h.stats.inferenceCount).toBe(6);
    expect(h.stats.pending).toBe(0);
    expect(h.stats.inflight).toBe(0);
  });

  it('honours max_queue_delay on the injected clock, and sends a preferred size at once', async () => {
    const h = harness(mlp({ preferred_batch_size: [4], max_queue_delay_microseconds: 500 }));
    h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }));
    await h.clock.advanceUs(100);
    h.submit(request({ inputs: { INPUT0: [2, 2] }, batch: 1 }));
    await h.clock.advanceUs(399);
    expect(h.backend.batches).toHaveLength(0);
    await h.clock.advanceUs(1);
    expect(h.backend.batches.map((b) => b.rows)).toEqual([2]);
    for (let i = 0; i < 4; i++) h.submit(request({ inputs: { INPUT0: [i, i] }, batch: 1 }));
    await flush();
    expect(h.backend.batches.map((b) => b.rows)).toEqual([2, 4]);
  });

  it('gives each of 1,000 concurrent requests exactly its own rows', async () => {
    const h = harness(mlp({ preferred_batch_size: [4, 8] }, 16), 2);
    h.backend.compute = (inputs) => {
      const x = inputs.get('INPUT0')!;
      return new Map([['OUTPUT0', { ...x, name: 'OUTPUT0', data: (x.data as Float32Array).map((v) => v * 2 + 1) }]]);
    };
    const reqs = Array.from({ length: 1000 }, (_, i) => {
      const rows = (i % 3) + 1;
      const data = Array.from({ length: rows * 2 }, (_, k) => i * 10 + k);
      return { data, t: h.submit(request({ id: `q${i}`, inputs: { INPUT0: data }, batch: rows })) };
    });
    for (const { data, t } of reqs) expect(values(await t.done)).toEqual(data.map((v) => v * 2 + 1));
    expect(h.backend.batches.length).toBeLessThan(1000);
    expect(Math.max(...h.backend.batches.map((b) => b.rows))).toBeLessThanOrEqual(16);
    expect(h.stats.inferenceCount).toBe(reqs.reduce((s, r) => s + r.data.length / 2, 0));
  });

  it('runs batches on two instances at once, each taking the first free one', async () => {
    const h = harness(mlp({}, 2), 2);
    h.backend.hold = true;
    // Submitted in one task: dispatch waits for the task's end, so they batch (delay 0 still never waits).
    for (let i = 0; i < 6; i++) h.submit(request({ id: `${i}`, inputs: { INPUT0: [i, i] }, batch: 1 }));
    await flush();
    expect(h.backend.batches.map((b) => [b.instance, b.ids])).toEqual([[0, ['0', '1']], [1, ['2', '3']]]);
    expect(h.backend.running).toBe(2);
    h.backend.release(1);
    await flush();
    expect(h.backend.batches[2]).toMatchObject({ instance: 1, ids: ['4', '5'] });
    h.submit(request({ id: '6', inputs: { INPUT0: [6, 6] }, batch: 1 }));
    h.backend.release(0);
    await flush();
    expect(h.backend.batches[3]).toMatchObject({ instance: 0, ids: ['6'] });
    expect(h.backend.maxRunning).toBe(2);
    h.backend.release();
    h.backend.release();
  });

  it('sends a lone request at once when an instance is idle (delay 0)', async () => {
    const h = harness(mlp({}, 8));
    h.submit(request({ id: 'a', inputs: { INPUT0: [1, 1] }, batch: 1 }));
    await flush();
    h.submit(request({ id: 'b', inputs: { INPUT0: [2, 2] }, batch: 1 }));
    await flush();
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a'], ['b']]);
  });

  it('hands the instance its next batch before delivering the previous batch\'s responses', async () => {
    const h = harness(mlp());
    h.backend.hold = true;
    const seen: number[] = [];
    const first = request({ inputs: { INPUT0: [1, 1] }, batch: 1 });
    first.req.wrapSink((inner) => (resp, final) => {
      seen.push(h.backend.batches.length);
      inner(resp, final);
    });
    h.submit(first);
    await flush();
    h.submit(request({ inputs: { INPUT0: [2, 2] }, batch: 1 }));
    h.backend.release();
    await flush();
    expect(seen).toEqual([2]);
    h.backend.release();
  });

  it('releases responses in order with preserve_ordering', async () => {
    const h = harness(mlp({ preserve_ordering: true }, 1), 2);
    h.backend.hold = true;
    const a = h.submit(request({ id: 'a', inputs: { INPUT0: [1, 1] }, batch: 1 }));
    const b = h.submit(request({ id: 'b', inputs: { INPUT0: [2, 2] }, batch: 1 }));
    await flush();
    h.backend.release(1);
    await flush();
    expect(b.result).toBeUndefined();
    h.backend.release(0);
    await flush();
    expect(values(a.result)).toEqual([1, 1]);
    expect(values(b.result)).toEqual([2, 2]);
  });

  it('without preserve_ordering a faster instance answers first', async () => {
    const h = harness(mlp({}, 1), 2);
    h.backend.hold = true;
    const a = h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }));
    const b = h.submit(request({ inputs: { INPUT0: [2, 2] }, batch: 1 }));
    await flush();
    h.backend.release(1);
    await flush();
    expect(b.result).toBeDefined();
    expect(a.result).toBeUndefined();
    h.backend.release(0);
  });

  it('is the default scheduler without dynamic_batching: one request per execution, client batch kept', async () => {
    const { dynamic_batching: _, ...config } = mlp();
    const h = harness(config);
    const rs = [h.submit(request({ inputs: { INPUT0: [1, 2, 3, 4] }, batch: 2 })), h.submit(request({ inputs: { INPUT0: [5, 6] }, batch: 1 }))];
    await Promise.all(rs.map((r) => r.done));
    expect(h.backend.batches.map((b) => b.rows)).toEqual([2, 1]);
    expect(values(rs[0]!.result)).toEqual([1, 2, 3, 4]);
  });

  it('turns a backend failure into an error for each request of the batch', async () => {
    const h = harness(mlp());
    h.backend.compute = () => { throw new Error('boom'); };
    const rs = [h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 })), h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }))];
    for (const r of rs) expect(String((await r.done as Error).message)).toContain('boom');
    expect(h.stats.failures.BACKEND).toBe(2);
  });

  it('holds the first batch until n requests are queued (scheduler test hook), once; stop lifts the hold', async () => {
    const h = harness(mlp(), 1, { delay: { requests: 3 } });
    const first = [0, 1].map((i) => h.submit(request({ id: `a${i}`, inputs: { INPUT0: [i, i] }, batch: 1 })));
    await flush();
    await h.clock.advanceUs(10_000);
    expect(h.backend.batches).toHaveLength(0);
    first.push(h.submit(request({ id: 'a2', inputs: { INPUT0: [2, 2] }, batch: 1 })));
    await flush();
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a0', 'a1', 'a2']]);
    await Promise.all(first.map((r) => r.done));
    const lone = h.submit(request({ id: 'b', inputs: { INPUT0: [5, 5] }, batch: 1 }));
    await lone.done;
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['a0', 'a1', 'a2'], ['b']]);

    const held = harness(mlp(), 1, { delay: { requests: 3 } });
    const r = held.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }));
    await flush();
    expect(held.backend.batches).toHaveLength(0);
    await held.scheduler.stop();
    expect(values(r.result)).toEqual([1, 1]);
  });

    it('drains on stop without waiting for the delay, then refuses new work', async () => {
    const h = harness(mlp({ max_queue_delay_microseconds: 1_000_000, preferred_batch_size: [8] }));
    const r = h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }));
    await flush();
    expect(h.backend.batches).toHaveLength(0);
    await h.scheduler.stop();
    expect(values(r.result)).toEqual([1, 1]);
    const late = h.submit(request({ inputs: { INPUT0: [1, 1] }, batch: 1 }));
    expect((await late.done as Error).message).toMatch(/stopped accepting/);
  });
});

describe('batchInputTensors (batch_input kinds, as Triton\'s backend input collector builds them)', () => {
  const req = (shape: number[]) => new Map<string, Tensor>([['X', { name: 'X', datatype: 'FP32', shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) }]]);
  const build = (kind: string | undefined, data_type = 'TYPE_FP32') =>
    batchInputTensors([{ kind, target_name: ['T'], data_type, source_input: ['X'] }], [req([2, 3, 1]), req([1, 5, 2])]);

  it('counts per request (kind left out is BATCH_ELEMENT_COUNT), accumulates, with a leading zero, and in INT32 when asked', () => {
    expect(build(undefined)[0]).toMatchObject({ name: 'T', datatype: 'FP32', shape: [2], data: Float32Array.from([6, 10]) });
    expect(build('BATCH_ACCUMULATED_ELEMENT_COUNT', 'TYPE_INT32')[0]).toMatchObject({ datatype: 'INT32', shape: [2], data: Int32Array.from([6, 16]) });
    expect(build('BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO')[0]).toMatchObject({ shape: [3], data: Float32Array.from([0, 6, 16]) });
    expect(build('BATCH_MAX_ELEMENT_COUNT_AS_SHAPE')[0]!.shape).toEqual([10]);
  });

  it('gives each batch row its item shape: a request of two rows repeats its shape', () => {
    expect(build('BATCH_ITEM_SHAPE')[0]).toMatchObject({ shape: [3, 2], data: Float32Array.from([3, 1, 3, 1, 5, 2]) });
    expect(build('BATCH_ITEM_SHAPE_FLATTEN')[0]).toMatchObject({ shape: [6], data: Float32Array.from([3, 1, 3, 1, 5, 2]) });
  });

  it('refuses a kind it does not know, naming it', () => {
    expect(() => build('BATCH_SOMETHING')).toThrow("unsupported batch input kind 'BATCH_SOMETHING'");
  });
});
