/**
 * Queue policies (reference §D.5): priority levels and their default, max queue size per level, the
 * timeout and its override rule, REJECT and DELAY, both on the RequestQueue itself and through the
 * dynamic batcher on a fake clock (the expiry wake-up fires with every instance busy).
 */

import { describe, expect, it } from 'vitest';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig, ModelDynamicBatching } from '../../core/config/model-config.js';
import { RequestQueue } from '../../core/scheduling/queue.js';
import { flush, harness, request } from '../helpers/fake-backend.js';

const r = (id: string, priority = 0, timeoutUs = 0) => request({ id, inputs: { INPUT0: [0, 0] }, batch: 1, priority, timeoutUs }).req;
const ids = (q: RequestQueue) => [...q].map((x) => x.id);

describe('RequestQueue', () => {
  it('serves level 1 first; priority 0 or out of range goes to the default level', () => {
    const q = new RequestQueue({ priority_levels: 3, default_priority_level: 2 });
    for (const [id, p] of [['p3', 3], ['p1', 1], ['p2', 2], ['p0', 0], ['p9', 9], ['p1b', 1]] as const) q.enqueue(r(id, p), 0);
    expect(ids(q)).toEqual(['p1', 'p1b', 'p2', 'p0', 'p9', 'p3']);
    expect(q.take(3).map((x) => x.id)).toEqual(['p1', 'p1b', 'p2']);
    expect(q.size).toBe(3);
  });

  it('rejects past max_queue_size per level with Triton\'s text', () => {
    const q = new RequestQueue({
      priority_levels: 2, default_priority_level: 1,
      default_queue_policy: { max_queue_size: 2 }, priority_queue_policy: { 2: { max_queue_size: 1 } },
    });
    expect(q.enqueue(r('a', 1), 0)).toBeUndefined();
    expect(q.enqueue(r('b', 1), 0)).toBeUndefined();
    const err = q.enqueue(r('c', 1), 0)!;
    expect(err).toBeInstanceOf(TsiError);
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.message).toBe('[request id: c] Exceeds maximum queue size');
    expect(q.enqueue(r('d', 2), 0)).toBeUndefined();
    expect(q.enqueue(r('', 2), 0)!.message).toBe('[request id: <id_unknown>] Exceeds maximum queue size');
  });

  it('uses the request timeout only when allowed, non-zero and shorter than the default', () => {
    const deadline = (policy: ModelDynamicBatching['default_queue_policy'], timeoutUs: number) => {
      const q = new RequestQueue({ default_queue_policy: policy });
      const x = r('x', 0, timeoutUs);
      q.enqueue(x, 1000);
      return x.deadlineNs;
    };
    expect(deadline({ default_timeout_microseconds: 100, allow_timeout_override: true }, 50)).toBe(1000 + 50_000);
    expect(deadline({ default_timeout_microseconds: 100, allow_timeout_override: true }, 500)).toBe(1000 + 100_000);
    expect(deadline({ default_timeout_microseconds: 100, allow_timeout_override: false }, 50)).toBe(1000 + 100_000);
    expect(deadline({ default_timeout_microseconds: 0, allow_timeout_override: true }, 50)).toBe(0);
    expect(deadline(undefined, 50)).toBe(0);
  });

  it('REJECT removes expired requests; DELAY moves them behind the live ones of their level', () => {
    const reject = new RequestQueue({ default_queue_policy: { default_timeout_microseconds: 10 } });
    reject.enqueue(r('a'), 0);
    reject.enqueue(r('b'), 5_000);
    expect(reject.nextDeadlineNs()).toBe(10_000);
    expect(reject.expire(9_999)).toEqual([]);
    expect(reject.expire(10_000).map((x) => x.id)).toEqual(['a']);
    expect(ids(reject)).toEqual(['b']);
    expect(reject.nextDeadlineNs()).toBe(15_000);

    const delay = new RequestQueue({
      priority_levels: 2, default_priority_level: 1,
      default_queue_policy: { timeout_action: 'DELAY', default_timeout_microseconds: 10 },
      priority_queue_policy: { 2: {} },
    });
    delay.enqueue(r('a', 1), 0);
    delay.enqueue(r('low', 2), 0);
    delay.enqueue(r('b', 1), 5_000);
    expect(delay.expire(10_000)).toEqual([]);
    expect(ids(delay)).toEqual(['b', 'a', 'low']);
    delay.expire(1e9);
    expect(ids(delay)).toEqual(['a', 'b', 'low']);
    expect(delay.nextDeadlineNs()).toBe(Infinity);
  });
});

const model = (db: ModelDynamicBatching): ModelConfig => ({
  name: 'm', max_batch_size: 4, dynamic_batching: db,
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [2] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [2] }],
});

describe('queue policies through the dynamic batcher', () => {
  it('serves higher priorities first when an instance frees up', async () => {
    const h = harness(model({ priority_levels: 2, default_priority_level: 2, preferred_batch_size: [2] }));
    h.backend.hold = true;
    h.submit(request({ id: 'first', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await flush();
    for (const [id, p] of [['low1', 2], ['low2', 0], ['high1', 1], ['high2', 1]] as const) {
      h.submit(request({ id, inputs: { INPUT0: [0, 0] }, batch: 1, priority: p }));
    }
    h.backend.release();
    await flush();
    h.backend.release();
    await flush();
    expect(h.backend.batches.map((b) => b.ids)).toEqual([['first'], ['high1', 'high2'], ['low1', 'low2']]);
    h.backend.release();
  });

  it('rejects a timed-out request while the instance is busy, on the expiry wake-up', async () => {
    const h = harness(model({ default_queue_policy: { default_timeout_microseconds: 1000 } }));
    h.backend.hold = true;
    h.submit(request({ id: 'busy', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await flush();
    const late = h.submit(request({ id: 'late', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await h.clock.advanceUs(999);
    expect(late.result).toBeUndefined();
    await h.clock.advanceUs(1);
    const err = late.result as TsiError;
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.message).toBe('Request timeout expired');
    expect(h.stats.failures.REJECTED).toBe(1);
    expect(h.stats.pending).toBe(0);
    expect(h.stats.inflight).toBe(1);
    h.backend.release();
    await flush();
    expect(h.backend.batches).toHaveLength(1);
    expect(h.stats.pending).toBe(0);
    expect(h.stats.inflight).toBe(0);
  });

  it('DELAY lets later requests overtake an expired one', async () => {
    const h = harness(model({
      preferred_batch_size: [1],
      default_queue_policy: { timeout_action: 'DELAY', default_timeout_microseconds: 100_000, allow_timeout_override: true },
    }));
    h.backend.hold = true;
    h.submit(request({ id: 'busy', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await flush();
    h.submit(request({ id: 'short', inputs: { INPUT0: [0, 0] }, batch: 1, timeoutUs: 10 }));
    h.submit(request({ id: 'normal', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await h.clock.advanceUs(10);
    for (let i = 0; i < 3; i++) {
      h.backend.release();
      await flush();
    }
    expect(h.backend.batches.map((b) => b.ids[0])).toEqual(['busy', 'normal', 'short']);
    expect(h.stats.failures.REJECTED).toBe(0);
  });

  it('answers queue-full with UNAVAILABLE and counts it as REJECTED', async () => {
    const h = harness(model({ default_queue_policy: { max_queue_size: 1 } }));
    h.backend.hold = true;
    h.submit(request({ id: 'running', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    await flush();
    h.submit(request({ id: 'queued', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    const full = h.submit(request({ id: 'full', inputs: { INPUT0: [0, 0] }, batch: 1 }));
    expect((full.result as TsiError).message).toBe('[request id: full] Exceeds maximum queue size');
    expect((full.result as TsiError).code).toBe('UNAVAILABLE');
    expect(h.stats.failures.REJECTED).toBe(1);
    expect(h.scheduler.queued()).toBe(1);
    h.backend.release();
    await flush();
    h.backend.release();
  });
});
