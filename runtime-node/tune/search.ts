/**
 * The decisions of `tsi-node tune`, pure: which configurations exist (the knobs and the values each
 * may take), which to measure next, at which concurrencies, how a measured configuration scores
 * against the objective, and the Pareto front. Measuring is a function handed in, time a clock handed
 * in, so tests drive the whole search with a model of a server and fake time.
 *
 * The search is Model Analyzer's "quick" idea: hill climbing from the shipped config, one knob one step
 * at a time, moving to the first neighbour that beats the current best on the objective and stopping
 * at a local optimum or when the budget will not fit another configuration; then the shipped config and
 * the best few are measured again and credited with the worse result. Configurations that differ
 * only in knobs that have no effect (delay or preferred sizes with batching off, batching with a
 * max_batch_size of 1) are the same configuration and measured once.
 */

export interface TuneKnobs {
  instances: number;
  /** 0: the model does not batch (then nothing below applies). */
  maxBatchSize: number;
  dynamicBatching: boolean;
  maxQueueDelayUs: number;
  /** Empty: none (the batcher then takes as many as max_batch_size allows). */
  preferredBatchSizes: number[];
}

export interface LoadPoint {
  concurrency: number;
  /** Inferences per second. */
  throughput: number;
  p99Ms: number;
  avgMs: number;
  stable: boolean;
}

export interface Objective {
  /** The p99 latency every counted point must stay within. */
  latencyBudgetMs?: number;
  /** A configuration is acceptable only when some point reaches this throughput. */
  minThroughput?: number;
}

export interface Trial {
  id: number;
  knobs: TuneKnobs;
  points: LoadPoint[];
  /** The point that scores the configuration: the highest throughput within the constraints. */
  best?: LoadPoint;
  /** The objective: that point's throughput; below 0 when no point meets the constraints. */
  score: number;
  shipped: boolean;
  error?: string;
  elapsedMs: number;
  /** The second measurement of the scoring point (only the shipped config and the winner get one). */
  confirmation?: LoadPoint;
}

export interface Space {
  instances: number[];
  maxBatchSizes: number[];
  delaysUs: number[];
}

/** Knobs with the no-effect ones set to their neutral value, so equivalent configs compare equal. */
export function canonical(k: TuneKnobs): TuneKnobs {
  const batching = k.maxBatchSize > 1 && k.dynamicBatching;
  return {
    instances: k.instances,
    maxBatchSize: k.maxBatchSize,
    dynamicBatching: batching,
    maxQueueDelayUs: batching ? k.maxQueueDelayUs : 0,
    preferredBatchSizes: batching ? k.preferredBatchSizes.filter((b) => b <= k.maxBatchSize) : [],
  };
}

export const knobKey = (k: TuneKnobs): string => JSON.stringify(canonical(k));

export function describeKnobs(k: TuneKnobs): string {
  const c = canonical(k);
  const parts = [`instances ${c.instances}`];
  if (c.maxBatchSize > 0) parts.push(`max_batch ${c.maxBatchSize}`);
  if (c.dynamicBatching) {
    parts.push(`dynamic batching, delay ${c.maxQueueDelayUs} µs`);
    if (c.preferredBatchSizes.length) parts.push(`preferred [${c.preferredBatchSizes.join(', ')}]`);
  } else if (c.maxBatchSize > 0) parts.push('no dynamic batching');
  return parts.join(', ');
}

/**
 * The values each knob may take around the shipped config: instance counts up to `maxInstances`,
 * max_batch_size in powers of two up to `maxBatchLimit` (never turning batching on for a model that
 * does not batch: its inputs have no batch dimension), and queue delays Node can honour (timers fire
 * in whole milliseconds, so sub-millisecond delays act as 1 ms).
 */
export function buildSpace(shipped: TuneKnobs, limits: { maxInstances: number; maxBatchLimit: number }): Space {
  const instances = range(1, Math.max(limits.maxInstances, shipped.instances));
  const maxBatchSizes: number[] = [];
  if (shipped.maxBatchSize > 0) {
    const top = Math.max(limits.maxBatchLimit, shipped.maxBatchSize);
    for (let b = 1; b <= top; b *= 2) maxBatchSizes.push(b);
    if (!maxBatchSizes.includes(shipped.maxBatchSize)) maxBatchSizes.push(shipped.maxBatchSize);
    maxBatchSizes.sort((a, b) => a - b);
  } else maxBatchSizes.push(0);
  const delaysUs = [...new Set([0, 1000, 2000, 5000, shipped.maxQueueDelayUs])].sort((a, b) => a - b);
  return { instances, maxBatchSizes, delaysUs };
}

/** Configurations one step from `k` along one knob, the most promising kinds first. */
export function neighbours(k: TuneKnobs, space: Space): TuneKnobs[] {
  const c = canonical(k);
  const out: TuneKnobs[] = [];
  const step = <T>(values: T[], cur: T, f: (v: T) => TuneKnobs) => {
    const i = values.indexOf(cur);
    for (const j of [i + 1, i - 1]) if (i >= 0 && j >= 0 && j < values.length) out.push(f(values[j]!));
  };
  if (c.maxBatchSize > 1 && !c.dynamicBatching) out.push({ ...c, dynamicBatching: true });
  step(space.instances, c.instances, (v) => ({ ...c, instances: v }));
  step(space.maxBatchSizes, c.maxBatchSize, (v) => ({ ...c, maxBatchSize: v }));
  if (c.dynamicBatching) {
    step(space.delaysUs, c.maxQueueDelayUs, (v) => ({ ...c, maxQueueDelayUs: v }));
    out.push({ ...c, preferredBatchSizes: c.preferredBatchSizes.length ? [] : [c.maxBatchSize] });
    out.push({ ...c, dynamicBatching: false });
  }
  const seen = new Set([knobKey(c)]);
  return out.filter((n) => {
    const key = knobKey(n);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

export function meets(p: LoadPoint, o: Objective): boolean {
  return (o.latencyBudgetMs === undefined || p.p99Ms <= o.latencyBudgetMs) && (o.minThroughput === undefined || p.throughput >= o.minThroughput);
}

/**
 * A configuration's score: the throughput of its best point within the latency budget, when that
 * reaches the minimum throughput; otherwise below 0, closer to 0 for a lower p99 (so that among
 * configurations that all miss the budget, the nearest one still wins).
 */
export function scorePoints(points: readonly LoadPoint[], o: Objective): { best?: LoadPoint; score: number } {
  let best: LoadPoint | undefined;
  for (const p of points) if (meets(p, o) && (!best || p.throughput > best.throughput)) best = p;
  if (best) return { best, score: best.throughput };
  if (points.length === 0) return { score: -Infinity };
  const nearest = points.reduce((a, b) => (b.p99Ms < a.p99Ms ? b : a));
  return { best: undefined, score: -nearest.p99Ms };
}

/**
 * The next concurrency of a configuration's sweep, or undefined when it is done: doubling from 1
 * (a binary search for the knee), stopping once p99 is past the latency budget (more load only adds
 * queueing), once two doublings in a row brought less than `flatPct` over the best throughput before
 * them (saturated; one flat step may be noise), or at `max`.
 */
export function nextConcurrency(points: readonly LoadPoint[], o: Objective, max: number, floor = 1, flatPct = 5): number | undefined {
  if (points.length === 0) return 1;
  const last = points[points.length - 1]!;
  if (o.latencyBudgetMs !== undefined && last.p99Ms > o.latencyBudgetMs) return undefined;
  if (points.length >= 3 && last.concurrency >= floor) {
    const bestBefore = Math.max(...points.slice(0, -2).map((p) => p.throughput));
    if (points.slice(-2).every((p) => p.throughput < bestBefore * (1 + flatPct / 100))) return undefined;
  }
  const next = last.concurrency * 2;
  return next <= max ? next : undefined;
}

/**
 * The concurrency below which a sweep does not stop for flat throughput: enough requests in flight to
 * keep every instance busy with a queue behind it, and with dynamic batching to fill batches (a batch
 * forms only from what is queued). Below it, a flat step says more about noise than about saturation.
 */
export function sweepFloor(k: TuneKnobs): number {
  const c = canonical(k);
  return c.instances * (c.dynamicBatching ? Math.min(c.maxBatchSize, 8) : 2);
}

/** Indices of the points no other point beats on both throughput (higher) and p99 (lower). */
export function paretoFront(points: readonly { throughput: number; p99Ms: number }[]): number[] {
  const front: number[] = [];
  points.forEach((p, i) => {
    const dominated = points.some((q, j) => j !== i && q.throughput >= p.throughput && q.p99Ms <= p.p99Ms && (q.throughput > p.throughput || q.p99Ms < p.p99Ms));
    if (!dominated) front.push(i);
  });
  return front.sort((a, b) => points[a]!.p99Ms - points[b]!.p99Ms);
}

export interface SearchOptions {
  shipped: TuneKnobs;
  space: Space;
  objective: Objective;
  /** Loads the configuration and measures one concurrency; throws when the configuration will not load or serve. */
  measure(knobs: TuneKnobs, concurrency: number): Promise<LoadPoint>;
  /** Called before a configuration's first measurement (its load), when the search moves on. */
  prepare?(knobs: TuneKnobs): Promise<void>;
  maxConcurrency: number;
  budgetMs: number;
  clock: { nowMs(): number };
  progress?(line: string): void;
  /** A new best must beat the current one by this much (measurement noise is not an improvement). */
  minGainPct?: number;
}

export interface SearchResult {
  trials: Trial[];
  best: Trial;
  shipped: Trial;
  /** Why the search ended. */
  stopped: 'local optimum' | 'budget' | 'space exhausted';
}

/**
 * Runs the hill climb, the shipped configuration first, then confirms the result: the shipped config
 * and the best few are measured once more and credited with the worse of their two measurements.
 */
export async function search(o: SearchOptions): Promise<SearchResult> {
  const start = o.clock.nowMs();
  const gain = 1 + (o.minGainPct ?? 5) / 100;
  const trials: Trial[] = [];
  const tried = new Set<string>();
  const log = o.progress ?? (() => {});
  const run = async (knobs: TuneKnobs, shipped: boolean): Promise<Trial> => {
    const t0 = o.clock.nowMs();
    const trial: Trial = { id: trials.length + 1, knobs: canonical(knobs), points: [], score: -Infinity, shipped, elapsedMs: 0 };
    tried.add(knobKey(knobs));
    trials.push(trial);
    log(`[${trial.id}] ${shipped ? 'shipped: ' : ''}${describeKnobs(knobs)}`);
    try {
      await o.prepare?.(trial.knobs);
      const floor = sweepFloor(trial.knobs);
      for (let c = nextConcurrency([], o.objective, o.maxConcurrency); c !== undefined; c = nextConcurrency(trial.points, o.objective, o.maxConcurrency, floor)) {
        const p = await o.measure(trial.knobs, c);
        trial.points.push(p);
        log(`    concurrency ${c}: ${p.throughput.toFixed(1)} infer/s, p99 ${p.p99Ms.toFixed(2)} ms${p.stable ? '' : ' (not stable)'}`);
      }
    } catch (err) {
      trial.error = (err as Error).message;
      log(`    failed: ${trial.error}`);
    }
    Object.assign(trial, scorePoints(trial.points, o.objective));
    trial.elapsedMs = o.clock.nowMs() - t0;
    if (trial.error) trial.score = -Infinity;
    const elapsed = o.clock.nowMs() - start;
    log(`    objective ${fmtScore(trial.score)}; ${(elapsed / 60000).toFixed(1)} of ${(o.budgetMs / 60000).toFixed(1)} min used`);
    return trial;
  };
  const shipped = await run(o.shipped, true);
  let best = shipped;
  let stopped: SearchResult['stopped'] = 'local optimum';
  const avgTrialMs = () => trials.reduce((s, t) => s + t.elapsedMs, 0) / trials.length;
  climb: for (;;) {
    const candidates = neighbours(best.knobs, o.space).filter((k) => !tried.has(knobKey(k)));
    if (candidates.length === 0) {
      if (tried.size === 1) stopped = 'space exhausted';
      break;
    }
    for (const k of candidates) {
      if (o.clock.nowMs() - start + avgTrialMs() > o.budgetMs) {
        stopped = 'budget';
        log(`budget: another configuration (about ${(avgTrialMs() / 1000).toFixed(0)} s) would not fit in what is left`);
        break climb;
      }
      const t = await run(k, false);
      if (better(t, best, gain)) {
        best = t;
        log(`    new best`);
        continue climb;
      }
    }
    break;
  }
  if (best !== shipped) {
    // The winner and the next best by their first measurements: a lucky window may have put the winner first.
    const contenders = trials.filter((t) => !t.shipped && t.score >= 0 && t !== best).sort((a, b) => b.score - a.score).slice(0, CONFIRMED - 1);
    best = await confirm(o, shipped, [best, ...contenders], gain, log);
  }
  return { trials, best, shipped, stopped };
}

/** How many configurations besides the shipped one the confirmation measures again. */
const CONFIRMED = 3;

/**
 * Measures the shipped config and the contenders once more, each at the concurrency that scored it,
 * and keeps the lower of its two throughputs (and the higher p99): a configuration is credited with
 * what it sustained both times, so one lucky window cannot make the verdict. The shipped config is
 * also measured at the contenders' concurrencies. Returns the best contender if it still beats the
 * shipped config by the margin, else the shipped config.
 */
async function confirm(o: SearchOptions, shipped: Trial, contenders: Trial[], gain: number, log: (line: string) => void): Promise<Trial> {
  log(`confirming: ${contenders.map((t) => `#${t.id}`).join(', ')} against the shipped config, once more each`);
  for (const t of [shipped, ...contenders]) {
    if (!t.best) continue;
    try {
      await o.prepare?.(t.knobs);
      const again = await o.measure(t.knobs, t.best.concurrency);
      t.confirmation = again;
      const p: LoadPoint = { ...t.best, throughput: Math.min(t.best.throughput, again.throughput), p99Ms: Math.max(t.best.p99Ms, again.p99Ms), stable: t.best.stable && again.stable };
      Object.assign(t, scorePoints([p], o.objective));
      if (!t.best) t.best = p;
      log(`    #${t.id} at concurrency ${p.concurrency}: ${again.throughput.toFixed(1)} infer/s, p99 ${again.p99Ms.toFixed(2)} ms; objective now ${fmtScore(t.score)}`);
      if (t === shipped) {
        // The shipped config is also measured where the contenders scored (its own sweep may have stopped
        // early on a bad window); a better point there counts for it. Doubt goes to the shipped config.
        for (const c of new Set(contenders.flatMap((x) => (x.best ? [x.best.concurrency] : [])))) {
          if (c === p.concurrency) continue;
          const extra = await o.measure(t.knobs, c);
          const rescored = scorePoints([t.best!, extra], o.objective);
          log(`    #${t.id} at concurrency ${c}: ${extra.throughput.toFixed(1)} infer/s, p99 ${extra.p99Ms.toFixed(2)} ms`);
          if (rescored.score > t.score) Object.assign(t, rescored);
        }
      }
    } catch (err) {
      t.error = (err as Error).message;
      t.score = -Infinity;
    }
  }
  const best = contenders.reduce((a, b) => (b.score > a.score ? b : a));
  return better(best, shipped, gain) ? best : shipped;
}

/** Whether `a` beats `b` by the required margin (any feasible beats any infeasible). */
export function better(a: Trial, b: Trial, gain: number): boolean {
  if (a.score >= 0 && b.score < 0) return true;
  if (a.score < 0 || b.score < 0) return a.score > b.score;
  return a.score > b.score * gain;
}

export function fmtScore(s: number): string {
  if (s === -Infinity) return 'none (failed)';
  return s >= 0 ? `${s.toFixed(1)} infer/s` : `misses the constraints (best p99 ${(-s).toFixed(2)} ms)`;
}

function range(a: number, b: number): number[] {
  return Array.from({ length: b - a + 1 }, (_, i) => a + i);
}
