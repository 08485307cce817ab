/**
 * The rate limiter's decisions (core/scheduling/rate-limiter.ts) with core's fake backend and clock: instances
 * of different models contend for shared resources, priorities weight the turns, per-device and
 * global resources, explicit counts from `--rate-limit-resource`, and the waiting time in statistics.
 */

import { describe, expect, it } from 'vitest';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig, ModelInstanceGroup } from '../../core/config/model-config.js';
import { RateLimiter, fits, nextStaged, parseRateLimitResource, type RateLimitMode, type ResourceLimit } from '../../core/scheduling/rate-limiter.js';
import type { SchedulerContext } from '../../core/scheduling/scheduler.js';
import { createScheduler } from '../../core/scheduling/schedulers.js';
import { ModelStats } from '../../core/stats.js';
import { FakeBackend, FakeClock, collectingLogger, flush, request, type TestRequest } from '../helpers/fake-backend.js';

const group = (resources: { name: string; count: number; global?: boolean }[], priority?: number, count = 1): ModelInstanceGroup =>
  ({ kind: 'KIND_CPU', count, rate_limiter: { resources, priority } });

/** Several models on one fake clock, each with held fake instances, sharing one RateLimiter. */
function world(mode: RateLimitMode = 'execution_count', resources: ResourceLimit[] = []) {
  const clock = new FakeClock();
  const limiter = new RateLimiter({ mode, resources, clock });
  let n = 0;
  const model = (name: string, g: ModelInstanceGroup | undefined, opts: { instances?: number; deviceId?: number; batching?: Partial<ModelConfig> } = {}) => {
    const backend = new FakeBackend(clock);
    backend.hold = true;
    const count = opts.instances ?? g?.count ?? 1;
    const instances = Array.from({ length: count }, (_, index) => backend.instance({ name: `${name}_${index}`, kind: 'KIND_CPU', deviceId: opts.deviceId ?? -1, index }));
    const config: ModelConfig = { name, max_batch_size: 0, instance_group: g ? [g] : [], ...opts.batching };
    const stats = new ModelStats();
    const gate = limiter.register(name, 1, instances, instances.map(() => g));
    const ctx: SchedulerContext = { modelName: name, version: 1, config, instances, stats, clock, log: collectingLogger(), decoupled: false, rateLimit: gate };
    const scheduler = createScheduler(ctx);
    const submit = (k = 1): TestRequest[] => Array.from({ length: k }, () => {
      const t = request({ id: `${name}-${n++}`, inputs: { INPUT0: [1] } });
      t.req.receivedNs = clock.nowNs();
      scheduler.enqueue(t.req);
      return t;
    });
    return { name, backend, stats, gate, submit };
  };
  return { clock, limiter, model };
}

describe('rate limiter: pure parts', () => {
  it('picks the lowest exec_count × priority, earliest staged on a tie, priority 0 as 1', () => {
    expect(nextStaged([])).toBe(-1);
    expect(nextStaged([{ execCount: 3, priority: 1, seq: 0 }, { execCount: 1, priority: 2, seq: 1 }])).toBe(1);
    expect(nextStaged([{ execCount: 2, priority: 1, seq: 5 }, { execCount: 1, priority: 2, seq: 4 }])).toBe(1);
    expect(nextStaged([{ execCount: 2, priority: 0, seq: 0 }, { execCount: 1, priority: 1, seq: 1 }])).toBe(1);
  });

  it('fits counts what is allocated on the same device only', () => {
    const m = (o: Record<string, Record<string, number>>) => new Map(Object.entries(o).map(([k, v]) => [k, new Map(Object.entries(v))]));
    const limits = m({ '0': { R: 4 }, '1': { R: 4 } });
    expect(fits(m({ '0': { R: 3 } }), m({ '0': { R: 1 } }), limits)).toBe(true);
    expect(fits(m({ '0': { R: 3 } }), m({ '0': { R: 2 } }), limits)).toBe(false);
    expect(fits(m({ '1': { R: 3 } }), m({ '0': { R: 4 } }), limits)).toBe(true);
    expect(fits(m({ '0': { S: 1 } }), m({}), limits)).toBe(false);
  });

  it('parses --rate-limit-resource and names the mistake', () => {
    expect(parseRateLimitResource('R1:10')).toEqual({ name: 'R1', count: 10 });
    expect(parseRateLimitResource('R2:5:1')).toEqual({ name: 'R2', count: 5, device: 1 });
    expect(() => parseRateLimitResource('R1')).toThrow(/'R1': wrong number of fields; expected <name>:<count>\[:<device>\]/);
    expect(() => parseRateLimitResource('R1:x')).toThrow(/count 'x' is not a non-negative integer/);
    expect(() => parseRateLimitResource('R1:2:gpu')).toThrow(/device 'gpu' is not a device id/);
  });
});

describe('rate limiter: contention across models', () => {
  it('runs one model at a time when both need the only copy of a resource, and counts the wait', async () => {
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 1 }]));
    const b = w.model('b', group([{ name: 'R', count: 1 }]));
    expect(w.limiter.resources()).toEqual({ '-1': { R: 1 } });
    const [ra] = a.submit();
    const [rb] = b.submit();
    await flush();
    expect(a.backend.running + b.backend.running).toBe(1);
    expect(a.backend.running).toBe(1);
    await w.clock.advanceUs(2500);
    a.backend.release();
    await ra!.done;
    await flush();
    expect(b.backend.running).toBe(1);
    b.backend.release();
    await rb!.done;
    expect(a.gate!.wait).toEqual({ count: 1, ns: 0 });
    expect(b.gate!.wait).toEqual({ count: 1, ns: 2_500_000 });
    // The wait is queue time too (Triton's payload waits in the same place).
    expect(b.stats.queue.ns).toBe(2_500_000);
    expect(b.gate!.toJson()).toEqual({ wait: { count: 1, ns: 2_500_000 } });
  });

  it('lets both run with --rate-limit off, whatever the configs ask', async () => {
    const w = world('off');
    const a = w.model('a', group([{ name: 'R', count: 1 }]));
    const b = w.model('b', group([{ name: 'R', count: 1 }]));
    expect(a.gate).toBeUndefined();
    a.submit();
    b.submit();
    await flush();
    expect(a.backend.running + b.backend.running).toBe(2);
  });

  it('lets instances whose needs fit together run together', async () => {
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 2 }]));
    const b = w.model('b', group([{ name: 'R', count: 3 }]));
    const c = w.model('c', group([{ name: 'R', count: 1 }]));
    a.submit();
    c.submit();
    b.submit();
    await flush();
    // R = 3 (the largest need): a (2) and c (1) fit together, b (3) waits for both.
    expect([a.backend.running, b.backend.running, c.backend.running]).toEqual([1, 0, 1]);
    a.backend.release();
    await flush();
    expect(b.backend.running).toBe(0);
    c.backend.release();
    await flush();
    expect(b.backend.running).toBe(1);
  });

  /** Two models with backlogs sharing the only copy of R: which one runs, `n` executions in a row. */
  async function turns(priorityA: number, priorityB: number, n: number): Promise<string> {
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 1 }], priorityA));
    const b = w.model('b', group([{ name: 'R', count: 1 }], priorityB));
    a.submit(n);
    b.submit(n);
    let order = '';
    for (let i = 0; i < n; i++) {
      await flush();
      expect(a.backend.running + b.backend.running).toBe(1);
      const running = a.backend.running ? a : b;
      order += running.name;
      running.backend.release();
    }
    return order;
  }

  it('gives priority 2 half the turns of priority 1 under a steady backlog', async () => {
    const order = await turns(1, 2, 30);
    expect([...order].filter((x) => x === 'a')).toHaveLength(20);
    expect(order.slice(0, 6)).toBe('ababaa');
  });

  it('gives L0_rate_limiter\'s client 80 inferences of the priority-1 model to 45 of the priority-2 one', async () => {
    // test_cross_model_prioritization_limited_resource as its client behaves: each model keeps 8
    // requests in flight; the first to have sent 80 sets a stop flag both runners share, and the
    // other, blocked waiting for a free slot, still sends one more when its next response comes.
    // Triton's order (exec_count × priority, ties to the instance waiting longer) then gives the
    // priority-2 model 36 executions while the other completes 72, so 36 + 8 + 1 = 45: 80/45 = 1.78
    // (ties to the instance staged last give 36 too), below the suite's 1.8 however fast the server.
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 1 }], 1));
    const b = w.model('b', group([{ name: 'R', count: 1 }], 2));
    const sent = new Map([[a, 8], [b, 8]]);
    const exited = new Set<typeof a>();
    let stop = false;
    a.submit(8);
    b.submit(8);
    await flush();
    for (let i = 0; i < 200 && a.backend.running + b.backend.running > 0; i++) {
      const m = a.backend.running ? a : b;
      m.backend.release();
      await flush();
      if (exited.has(m)) continue;
      const wasStopped = stop;
      m.submit(1);
      sent.set(m, sent.get(m)! + 1);
      if (sent.get(m) === 80) stop = true;
      if (wasStopped || sent.get(m) === 80) exited.add(m);
      await flush();
    }
    expect([sent.get(a), sent.get(b)]).toEqual([80, 45]);
    expect(a.backend.batches.length + b.backend.batches.length).toBe(125);
  });

  it('alternates fairly between equal priorities', async () => {
    expect(await turns(1, 1, 10)).toBe('ababababab');
  });

  it('keeps per-device resources apart and shares global ones across devices', async () => {
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 1 }]), { deviceId: 0 });
    const b = w.model('b', group([{ name: 'R', count: 1 }]), { deviceId: 1 });
    const c = w.model('c', group([{ name: 'G', count: 1, global: true }]), { deviceId: 0 });
    const d = w.model('d', group([{ name: 'G', count: 1, global: true }]), { deviceId: 1 });
    expect(w.limiter.resources()).toEqual({ '0': { R: 1 }, '1': { R: 1 }, global: { G: 1 } });
    for (const m of [a, b, c, d]) m.submit();
    await flush();
    expect([a, b, c, d].map((m) => m.backend.running)).toEqual([1, 1, 1, 0]);
  });

  it('uses --rate-limit-resource counts, per device where one is named', async () => {
    const w = world('execution_count', [{ name: 'R', count: 2 }, { name: 'R', count: 1, device: 1 }]);
    const a = w.model('a', group([{ name: 'R', count: 1 }], 1, 3), { deviceId: 0 });
    const b = w.model('b', group([{ name: 'R', count: 1 }], 1, 3), { deviceId: 1 });
    expect(w.limiter.resources()).toEqual({ '0': { R: 2 }, '1': { R: 1 } });
    b.submit(1);
    a.submit(3);
    await flush();
    // Device 0 has 2 copies, device 1 one: a's third batch waits, b runs beside a's two.
    expect([a.backend.running, b.backend.running]).toEqual([2, 1]);
  });

  it('refuses a model whose instances could never get enough of a resource', () => {
    const w = world('execution_count', [{ name: 'R', count: 2 }]);
    expect(() => w.model('big', group([{ name: 'R', count: 4 }])))
      .toThrow('Resource count for "R" is limited to 2 which will prevent scheduling of one or more model instances, the minimum required count is 4');
    // The refused model left nothing behind.
    expect(w.limiter.resources()).toEqual({});
    try {
      w.model('mixed1', group([{ name: 'X', count: 1, global: true }]));
      w.model('mixed2', group([{ name: 'X', count: 1 }]));
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(TsiError);
      expect((e as TsiError).message).toMatch(/Resource "X" is present as both global and device-specific resource/);
    }
  });

  it('holds an instance without resources behind the head of the order, as Triton does', async () => {
    const w = world();
    const big = w.model('big', group([{ name: 'R', count: 2 }]));
    const small = w.model('small', group([{ name: 'R', count: 1 }]), { instances: 2 });
    const free = w.model('free', undefined);
    small.submit(1);
    await flush();
    big.submit(1);
    await flush();
    free.submit(1);
    await flush();
    // big (R 2) waits for small's copy; free, staged after big, waits its turn behind it.
    expect([big.backend.running, small.backend.running, free.backend.running]).toEqual([0, 1, 0]);
    small.backend.release();
    await flush();
    expect([big.backend.running, free.backend.running]).toEqual([1, 1]);
  });

  it('frees a model\'s resources for the others when it unloads', () => {
    const w = world();
    const a = w.model('a', group([{ name: 'R', count: 5 }]));
    w.model('b', group([{ name: 'R', count: 2 }]));
    expect(w.limiter.resources()).toEqual({ '-1': { R: 5 } });
    a.gate!.unregister();
    expect(w.limiter.resources()).toEqual({ '-1': { R: 2 } });
  });

  it('lets a dynamic batch grow while it waits for the rate limiter, as L0_rate_limiter expects', async () => {
    // Two instances, one copy of R: the second instance cannot run beside the first. Triton's batcher
    // forms its payload for an instance the limiter lets run and adds requests until the grant, so
    // with preferred sizes 1-4 every batch is still 4 when the requests come faster than executions.
    const w = world();
    const m = w.model('m', group([{ name: 'R', count: 1 }], 1, 2), {
      batching: { max_batch_size: 4, input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [1] }], dynamic_batching: { preferred_batch_size: [1, 2, 3, 4] } },
    });
    m.submit(4);
    await flush();
    expect(m.backend.batches.map((b) => b.requests.length)).toEqual([4]);
    // One request arrives while the first batch runs: instance 1 is free but may not run, so the
    // request is not sent alone (preferred size 1); three more join it before the grant.
    m.submit(1);
    await flush();
    m.submit(3);
    await flush();
    expect(m.backend.batches).toHaveLength(1);
    m.backend.release();
    await flush();
    expect(m.backend.batches.map((b) => b.requests.length)).toEqual([4, 4]);
    expect(m.backend.running).toBe(1);
    expect(m.backend.batches.map((b) => b.rows)).toEqual([4, 4]);
  });
});
