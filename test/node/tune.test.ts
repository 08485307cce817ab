/**
 * `tsi-node tune`'s search (runtime-node/tune/search.ts) on fake time: each configuration runs on core's
 * real dynamic batcher over instances whose executions take fake time on a machine of two fake cores,
 * driven by closed-loop clients, so the knobs change throughput and latency the way they do for real
 * and the search must find the better ones. Also the pure parts, and the pbtxt writer the best config
 * is written with.
 */

import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { BackendInstance, BackendRequest } from '../../core/backend.js';
import { formatPbtxt, parsePbtxt } from '../../core/config/pipeline.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import type { SchedulerContext } from '../../core/scheduling/scheduler.js';
import { createScheduler } from '../../core/scheduling/schedulers.js';
import { ModelStats } from '../../core/stats.js';
import {
  applyKnobs, buildSpace, canonical, knobKey, knobsOf, neighbours, nextConcurrency, paretoFront, scorePoints, search, sweepFloor,
  type LoadPoint, type TuneKnobs,
} from '../../runtime-node/tune/index.js';
import { bestPbtxt, reportHtml, trialsTable, verdict } from '../../runtime-node/tune/report.js';
import { FakeClock, collectingLogger, request } from '../helpers/fake-backend.js';
import { MODELS } from '../helpers/server.js';

const BASE: ModelConfig = {
  name: 'm', max_batch_size: 16,
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [1] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [1] }],
  instance_group: [{ kind: 'KIND_CPU', count: 1 }],
};

/**
 * One closed-loop measurement of `knobs` at `concurrency` over `seconds` of fake time: core's scheduler
 * for the config, instances whose executions cost 2 ms + 0.25 ms a row and need one of two fake cores.
 */
async function simulate(clock: FakeClock, knobs: TuneKnobs, concurrency: number, seconds = 1): Promise<LoadPoint> {
  const config = applyKnobs(BASE, knobs);
  let freeCores = 2;
  const coreWaiters: (() => void)[] = [];
  const core = () => (freeCores > 0 ? (freeCores--, Promise.resolve()) : new Promise<void>((r) => coreWaiters.push(r)));
  const uncore = () => {
    const w = coreWaiters.shift();
    if (w) w();
    else freeCores++;
  };
  const sleep = (us: number) => new Promise<void>((r) => clock.setTimer(r, us / 1000));
  const instances: BackendInstance[] = Array.from({ length: knobs.instances }, (_, index) => ({
    spec: { name: `m_${index}`, kind: 'KIND_CPU', deviceId: -1, index }, device: 'cpu', unload: async () => {},
    execute: async (reqs: BackendRequest[]) => {
      await core();
      await sleep(2000 + 250 * reqs.reduce((n, r) => n + r.batchSize, 0));
      uncore();
      for (const r of reqs) r.send({ outputs: [{ name: 'OUTPUT0', datatype: 'FP32', shape: [1, 1], data: new Float32Array(1) }] }, true);
    },
  }));
  const ctx: SchedulerContext = { modelName: 'm', version: 1, config, instances, stats: new ModelStats(), clock, log: collectingLogger(), decoupled: false };
  const scheduler = createScheduler(ctx);
  const start = clock.nowNs();
  const end = start + seconds * 1e9;
  const latencies: number[] = [];
  let stop = false;
  const client = async () => {
    while (!stop) {
      const t = request({ inputs: { INPUT0: [1] }, batch: 1 });
      const t0 = clock.nowNs();
      t.req.receivedNs = t0;
      scheduler.enqueue(t.req);
      await t.done;
      if (clock.nowNs() <= end) latencies.push((clock.nowNs() - t0) / 1e6);
    }
  };
  const clients = Array.from({ length: concurrency }, client);
  await clock.advanceUs(seconds * 1e6);
  stop = true;
  await clock.advanceUs(100_000);
  await Promise.all(clients);
  await scheduler.stop();
  latencies.sort((a, b) => a - b);
  return { concurrency, throughput: latencies.length / seconds, p99Ms: percentile(latencies, 99), avgMs: latencies.reduce((a, b) => a + b, 0) / latencies.length, stable: true };
}

const shippedKnobs = knobsOf(BASE);

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! : 0;
}

describe('tune search on fake time', () => {
  it('finds a configuration that beats the shipped one and never measures one twice', async () => {
    const clock = new FakeClock();
    const measured: string[] = [];
    const space = buildSpace(shippedKnobs, { maxInstances: 4, maxBatchLimit: 16 });
    const r = await search({
      shipped: shippedKnobs, space, objective: {}, maxConcurrency: 32, budgetMs: 60 * 60_000,
      clock: { nowMs: () => clock.nowNs() / 1e6 },
      measure: async (k, c) => {
        measured.push(`${knobKey(k)}@${c}`);
        return simulate(clock, k, c);
      },
    });
    expect(r.trials[0]!.shipped).toBe(true);
    expect(r.trials[0]!.knobs).toEqual(canonical(shippedKnobs));
    // Only the confirmation measures a point twice: the scoring points of the shipped config and the best three others.
    const confirmed = r.trials.filter((t) => t.confirmation);
    expect(confirmed.length).toBe(4);
    expect(confirmed).toContain(r.shipped);
    expect(confirmed).toContain(r.best);
    const twice = measured.filter((m, i) => measured.indexOf(m) !== i);
    const confirmedKeys = new Set(confirmed.map((t) => knobKey(t.knobs)));
    for (const m of twice) expect(confirmedKeys.has(m.slice(0, m.lastIndexOf('@'))), m).toBe(true);
    for (const t of confirmed) if (!t.shipped) expect(twice).toContain(`${knobKey(t.knobs)}@${t.best!.concurrency}`);
    expect(new Set(r.trials.map((t) => knobKey(t.knobs))).size).toBe(r.trials.length);
    // One instance without batching: 2.25 ms an execution, ~444/s. Batching on the two cores does far better.
    expect(r.shipped.score).toBeGreaterThan(400);
    expect(r.shipped.score).toBeLessThan(460);
    expect(r.best.knobs.dynamicBatching).toBe(true);
    expect(r.best.score).toBeGreaterThan(r.shipped.score * 2);
    expect(r.stopped).toBe('local optimum');
    expect(verdict(r)).toMatch(/^tuned config #\d+ beats the shipped one/);
  });

  it('keeps to the latency budget and stops when the time budget will not fit another configuration', async () => {
    const clock = new FakeClock();
    const space = buildSpace(shippedKnobs, { maxInstances: 4, maxBatchLimit: 16 });
    const r = await search({
      shipped: shippedKnobs, space, objective: { latencyBudgetMs: 8 }, maxConcurrency: 64, budgetMs: 25_000,
      clock: { nowMs: () => clock.nowNs() / 1e6 },
      measure: (k, c) => simulate(clock, k, c),
    });
    for (const t of r.trials) if (t.best) expect(t.best.p99Ms).toBeLessThanOrEqual(8);
    // A sweep never goes on past a point over the budget.
    for (const t of r.trials) for (const p of t.points.slice(0, -1)) expect(p.p99Ms).toBeLessThanOrEqual(8);
    expect(r.stopped).toBe('budget');
    expect(clock.nowNs() / 1e6 - 1000).toBeLessThan(25_000 + 12_000);
  });

  it('confirms the winner against the shipped config, so one lucky window does not decide', async () => {
    const clock = new FakeClock();
    let luck = true;
    const r = await search({
      shipped: shippedKnobs, space: buildSpace(shippedKnobs, { maxInstances: 2, maxBatchLimit: 16 }), objective: {}, maxConcurrency: 4, budgetMs: 3_600_000,
      clock: { nowMs: () => clock.nowNs() / 1e6 },
      // Every configuration performs like the shipped one, except that the first other one measured has one lucky window.
      measure: async (k, c) => {
        const p = await simulate(clock, { ...k, instances: 1, dynamicBatching: false }, c);
        if (knobKey(k) !== knobKey(shippedKnobs) && luck && c === 4) {
          luck = false;
          return { ...p, throughput: p.throughput * 3 };
        }
        return p;
      },
    });
    const lucky = r.trials.find((t) => t.confirmation && !t.shipped)!;
    expect(lucky.points.some((p) => p.throughput > r.shipped.score * 2)).toBe(true);
    expect(r.shipped.confirmation).toBeDefined();
    expect(r.best).toBe(r.shipped);
    expect(verdict(r)).toMatch(/^the shipped config is already the best found/);
  });

  it('says the shipped config is best when nothing beats it', async () => {
    const clock = new FakeClock();
    const good: TuneKnobs = { instances: 2, maxBatchSize: 16, dynamicBatching: true, maxQueueDelayUs: 0, preferredBatchSizes: [] };
    const r = await search({
      shipped: good, space: buildSpace(good, { maxInstances: 2, maxBatchLimit: 16 }), objective: {}, maxConcurrency: 32, budgetMs: 3_600_000,
      clock: { nowMs: () => clock.nowNs() / 1e6 },
      measure: (k, c) => simulate(clock, k, c),
    });
    expect(r.best).toBe(r.shipped);
    expect(verdict(r)).toMatch(/^the shipped config is already the best found/);
  });
});

describe('tune: pure parts', () => {
  it('treats knobs without effect as the same configuration', () => {
    const a: TuneKnobs = { instances: 1, maxBatchSize: 8, dynamicBatching: false, maxQueueDelayUs: 500, preferredBatchSizes: [8] };
    expect(knobKey(a)).toBe(knobKey({ ...a, maxQueueDelayUs: 0, preferredBatchSizes: [] }));
    expect(knobKey({ ...a, maxBatchSize: 1, dynamicBatching: true })).toBe(knobKey({ ...a, maxBatchSize: 1 }));
    const n = neighbours({ ...a, dynamicBatching: true }, buildSpace(a, { maxInstances: 2, maxBatchLimit: 16 }));
    expect(n.map(knobKey)).not.toContain(knobKey({ ...a, dynamicBatching: true }));
    expect(n.some((k) => k.instances === 2)).toBe(true);
    expect(n.some((k) => !k.dynamicBatching)).toBe(true);
  });

  it('never turns batching on for a model without a batch dimension', () => {
    const k: TuneKnobs = { instances: 1, maxBatchSize: 0, dynamicBatching: false, maxQueueDelayUs: 0, preferredBatchSizes: [] };
    const space = buildSpace(k, { maxInstances: 3, maxBatchLimit: 64 });
    expect(space.maxBatchSizes).toEqual([0]);
    expect(neighbours(k, space).every((n) => n.maxBatchSize === 0 && !n.dynamicBatching)).toBe(true);
  });

  it('sweeps concurrency by doubling until the budget is crossed or throughput stays flat twice', () => {
    const p = (concurrency: number, throughput: number, p99Ms = 1): LoadPoint => ({ concurrency, throughput, p99Ms, avgMs: p99Ms, stable: true });
    expect(nextConcurrency([], {}, 64)).toBe(1);
    expect(nextConcurrency([p(1, 100)], {}, 64)).toBe(2);
    expect(nextConcurrency([p(1, 100), p(2, 101)], {}, 64)).toBe(4);
    expect(nextConcurrency([p(1, 100), p(2, 101), p(4, 102)], {}, 64)).toBeUndefined();
    expect(nextConcurrency([p(1, 100), p(2, 90), p(4, 200)], {}, 64)).toBe(8);
    expect(nextConcurrency([p(1, 100, 5), p(2, 180, 12)], { latencyBudgetMs: 10 }, 64)).toBeUndefined();
    expect(nextConcurrency([p(32, 100), p(64, 200)], {}, 64)).toBeUndefined();
    // Below the floor a flat stretch is not saturation yet.
    expect(nextConcurrency([p(1, 100), p(2, 101), p(4, 102)], {}, 64, 8)).toBe(8);
    expect(sweepFloor({ instances: 2, maxBatchSize: 32, dynamicBatching: true, maxQueueDelayUs: 0, preferredBatchSizes: [] })).toBe(16);
    expect(sweepFloor({ instances: 2, maxBatchSize: 32, dynamicBatching: false, maxQueueDelayUs: 0, preferredBatchSizes: [] })).toBe(4);
  });

  it('scores by the best point within the constraints, the nearest miss below zero', () => {
    const pts: LoadPoint[] = [
      { concurrency: 1, throughput: 100, p99Ms: 4, avgMs: 3, stable: true },
      { concurrency: 2, throughput: 180, p99Ms: 9, avgMs: 6, stable: true },
    ];
    expect(scorePoints(pts, {}).score).toBe(180);
    expect(scorePoints(pts, { latencyBudgetMs: 5 })).toEqual({ best: pts[0], score: 100 });
    expect(scorePoints(pts, { latencyBudgetMs: 5, minThroughput: 150 })).toEqual({ best: undefined, score: -4 });
    expect(paretoFront([{ throughput: 100, p99Ms: 4 }, { throughput: 90, p99Ms: 5 }, { throughput: 180, p99Ms: 9 }])).toEqual([0, 2]);
  });

  it('writes the best config and a self-contained report', async () => {
    const clock = new FakeClock();
    const r = await search({
      shipped: shippedKnobs, space: buildSpace(shippedKnobs, { maxInstances: 2, maxBatchLimit: 8 }), objective: { latencyBudgetMs: 20 },
      maxConcurrency: 8, budgetMs: 40_000, clock: { nowMs: () => clock.nowNs() / 1e6 }, measure: (k, c) => simulate(clock, k, c),
    });
    const summary = { model: 'm', objective: { latencyBudgetMs: 20 }, result: r, startedAt: 'now', server: 'fake', budgetMinutes: 1 };
    const text = bestPbtxt(summary, applyKnobs(BASE, r.best.knobs));
    expect(text).toMatch(/^# Tuned by tsi-node tune on now against fake\.\n# Objective: maximise throughput, p99 ≤ 20 ms\.\n# Measured: /);
    expect(knobsOf(parsePbtxt(text))).toEqual(r.best.knobs);
    const html = reportHtml(summary);
    expect(html).toMatch(/<svg[^>]*>/);
    expect(html).not.toMatch(/<script|src=|href=/);
    expect(html.match(/<polyline/g)!.length).toBe(r.trials.filter((t) => t.points.length > 0).length + 1);
    expect(trialsTable(summary).split('\n')).toHaveLength(r.trials.length + 2);
  });
});

describe('pbtxt writer', () => {
  it('writes every config of the default repository so that it parses back to the same config', () => {
    let n = 0;
    for (const m of readdirSync(MODELS)) {
      const p = join(MODELS, m, 'config.pbtxt');
      if (!existsSync(p)) continue;
      const cfg = parsePbtxt(readFileSync(p, 'utf8'), p);
      expect(JSON.parse(JSON.stringify(parsePbtxt(formatPbtxt(cfg, ['a comment'])))), m).toEqual(JSON.parse(JSON.stringify(cfg)));
      n++;
    }
    expect(n).toBeGreaterThan(10);
    expect(formatPbtxt({ name: 'x', dynamic_batching: {} })).toBe('name: "x"\ndynamic_batching {\n}\n');
  });
});
