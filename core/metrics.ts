/**
 * The one metrics registry of a server: every family on `/metrics` is registered here and rendered to
 * the Prometheus text format by `render()`, whoever defines it. Two ways in:
 * - `family(name, help, type)`: a family whose series hold their own values (counters, gauges and
 *   histograms with per-series buckets), changed as things happen: Triton's custom metrics
 *   (`CustomMetrics`, for models) and the LLM backend's `vllm:*` families use these;
 * - `register(source)`: a family read at scrape time from state kept elsewhere, so it is never counted
 *   twice: the `nv_inference_*` families read the statistics (core/server-metrics.ts), the Node runtime's
 *   CPU, GPU and process families read the host.
 * Platform-neutral: a runtime only serves `scrape()`'s text (the Node runtime on its metrics listener).
 *
 * Ownership: stored families and series are shared by name (a family) and label set (a series), since
 * several instances or models may define the same ones, as in Triton. Each `family()` / `metric()`
 * call takes a reference that `release()` gives back; the last release takes it off the page.
 */

import { TsiError } from './errors.js';

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary';

/** One line of a family: `name` defaults to the family's (histograms and summaries add `_bucket`, `_sum`, `_count`). */
export interface MetricSample {
  name?: string;
  labels: Readonly<Record<string, string>>;
  value: number;
}

/** A family read at scrape time. */
export interface MetricSource {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  /** Leave the family off the page while it has no samples (else its HELP and TYPE lines stay). */
  readonly hideWhenEmpty?: boolean;
  /** Brings asynchronous readings up to date before a scrape renders. */
  refresh?(): Promise<void>;
  samples(): Iterable<MetricSample>;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function checkName(name: string): void {
  if (!NAME.test(name)) throw new TsiError('INVALID_ARG', `invalid metric family name '${name}' (Prometheus names match [a-zA-Z_:][a-zA-Z0-9_:]*)`);
}

export class MetricsRegistry {
  /** The Prometheus text format this registry writes. */
  readonly contentType = 'text/plain; version=0.0.4; charset=utf-8';
  private readonly families = new Map<string, MetricSource>();

  /** Adds a scrape-time family; the returned function takes it off again. */
  register(source: MetricSource): () => void {
    checkName(source.name);
    if (this.families.has(source.name)) throw new TsiError('ALREADY_EXISTS', `metric family '${source.name}' is already registered`);
    this.families.set(source.name, source);
    return () => {
      if (this.families.get(source.name) === source) this.families.delete(source.name);
    };
  }

  /** The stored family of this name: created, or shared when it exists with the same type. */
  family(name: string, help: string, type: 'counter' | 'gauge' | 'histogram'): MetricFamily {
    checkName(name);
    if (type !== 'counter' && type !== 'gauge' && type !== 'histogram') throw new TsiError('INVALID_ARG', `unknown metric kind '${String(type)}'`);
    const existing = this.families.get(name);
    if (existing) {
      if (!(existing instanceof MetricFamily)) throw new TsiError('ALREADY_EXISTS', `metric family '${name}' is the server's own`);
      if (existing.type !== type) throw new TsiError('ALREADY_EXISTS', `metric family '${name}' already exists as a ${existing.type}, not a ${type}`);
      return existing.retain();
    }
    const f = new MetricFamily(name, help, type, () => {
      if (this.families.get(name) === f) this.families.delete(name);
    });
    this.families.set(name, f);
    return f;
  }

  get size(): number {
    return this.families.size;
  }

  /** Reads what is read asynchronously, then renders. */
  async scrape(): Promise<string> {
    await Promise.all([...this.families.values()].map((f) => f.refresh?.()));
    return this.render();
  }

  /** The Prometheus text of every family, in registration order ('' when there are none). */
  render(): string {
    const out: string[] = [];
    for (const f of this.families.values()) {
      const samples = [...f.samples()];
      if (samples.length === 0 && f.hideWhenEmpty) continue;
      out.push(`# HELP ${f.name} ${escape(f.help)}`, `# TYPE ${f.name} ${f.type}`);
      for (const s of samples) out.push(`${s.name ?? f.name}${labelText(s.labels)} ${num(s.value)}`);
    }
    return out.length > 0 ? out.join('\n') + '\n' : '';
  }
}

/** A stored family; its series differ by labels. Off the page while it has none. */
export class MetricFamily implements MetricSource {
  readonly hideWhenEmpty = true;
  private refs = 1;
  private readonly series = new Map<string, MetricSeries>();

  constructor(readonly name: string, readonly help: string, readonly type: 'counter' | 'gauge' | 'histogram', private readonly onLastRelease: () => void) {}

  /** The series with these labels (created, or shared with whoever made it first). */
  metric(labels: Record<string, string> = {}, buckets?: number[]): MetricSeries {
    for (const [k, v] of Object.entries(labels)) {
      if (!LABEL.test(k) || k.startsWith('__')) throw new TsiError('INVALID_ARG', `metric '${this.name}': invalid label name '${k}'`);
      if (typeof v !== 'string') throw new TsiError('INVALID_ARG', `metric '${this.name}': label '${k}' must be a string`);
    }
    if (this.type === 'histogram') {
      if (!buckets) throw new TsiError('INVALID_ARG', `metric '${this.name}' is a histogram: give its buckets`);
      if (buckets.some((b, i) => typeof b !== 'number' || Number.isNaN(b) || (i > 0 && b <= buckets[i - 1]!))) {
        throw new TsiError('INVALID_ARG', `metric '${this.name}': buckets must be increasing numbers, got [${buckets.join(', ')}]`);
      }
    } else if (buckets !== undefined) {
      throw new TsiError('INVALID_ARG', `metric '${this.name}' is a ${this.type}: buckets are only for histograms`);
    }
    const key = JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const existing = this.series.get(key);
    if (existing) {
      if (this.type === 'histogram' && String(existing.buckets) !== String(buckets)) {
        throw new TsiError('INVALID_ARG', `metric '${this.name}' with labels ${key} already exists with other buckets`);
      }
      return existing.retain();
    }
    const m = new MetricSeries(this.name, this.type, { ...labels }, buckets ? [...buckets] : undefined, () => {
      if (this.series.get(key) === m) this.series.delete(key);
    });
    this.series.set(key, m);
    return m;
  }

  retain(): this {
    this.refs++;
    return this;
  }

  /** Gives back this reference; the last one takes the family and its series off the page. */
  release(): void {
    if (this.refs > 0 && --this.refs === 0) this.onLastRelease();
  }

  *samples(): Iterable<MetricSample> {
    for (const m of this.series.values()) yield* m.samples();
  }
}

/** One time series: a counter, a gauge or a histogram with its own buckets. */
export class MetricSeries {
  private refs = 1;
  private current = 0;
  /** Histogram state: counts per upper bound (+Inf last; cumulated when rendered), sum and count. */
  private readonly counts?: number[];
  private sum = 0;
  private count = 0;

  constructor(
    private readonly family: string, private readonly type: 'counter' | 'gauge' | 'histogram', readonly labels: Readonly<Record<string, string>>,
    readonly buckets: readonly number[] | undefined, private readonly onLastRelease: () => void,
  ) {
    if (buckets) this.counts = new Array<number>(buckets.length + 1).fill(0);
  }

  increment(v: number): void {
    this.check(v, 'increment');
    if (this.type === 'histogram') throw new TsiError('UNSUPPORTED', `metric family '${this.family}' is a histogram: use observe()`);
    if (this.type === 'counter' && v < 0) throw new TsiError('INVALID_ARG', `counter '${this.family}' can only increase: increment(${v}) refused`);
    this.current += v;
  }

  set(v: number): void {
    this.check(v, 'set');
    if (this.type !== 'gauge') throw new TsiError('UNSUPPORTED', `metric family '${this.family}' is a ${this.type}: set() is for gauges`);
    this.current = v;
  }

  observe(v: number): void {
    this.check(v, 'observe');
    if (!this.counts) throw new TsiError('UNSUPPORTED', `metric family '${this.family}' is a ${this.type}: observe() is for histograms`);
    const b = this.buckets!;
    let i = 0;
    while (i < b.length && v > b[i]!) i++;
    this.counts[i]!++;
    this.sum += v;
    this.count++;
  }

  value(): number {
    if (this.type === 'histogram') throw new TsiError('UNSUPPORTED', `metric family '${this.family}' is a histogram: value() is for counters and gauges`);
    return this.current;
  }

  /** Another holder of the same series. */
  retain(): this {
    this.refs++;
    return this;
  }

  release(): void {
    if (this.refs > 0 && --this.refs === 0) this.onLastRelease();
  }

  *samples(): Iterable<MetricSample> {
    if (!this.counts) {
      yield { labels: this.labels, value: this.current };
      return;
    }
    const b = this.buckets!;
    let cumulative = 0;
    for (let i = 0; i <= b.length; i++) {
      cumulative += this.counts[i]!;
      yield { name: `${this.family}_bucket`, labels: { ...this.labels, le: i < b.length ? num(b[i]!) : '+Inf' }, value: cumulative };
    }
    yield { name: `${this.family}_sum`, labels: this.labels, value: this.sum };
    yield { name: `${this.family}_count`, labels: this.labels, value: this.count };
  }

  private check(v: number, op: string): void {
    if (typeof v !== 'number' || Number.isNaN(v)) throw new TsiError('INVALID_ARG', `metric '${this.family}': ${op}() needs a number, got ${String(v)}`);
  }
}

function num(v: number): string {
  return Number.isFinite(v) ? String(v) : v > 0 ? '+Inf' : v < 0 ? '-Inf' : 'NaN';
}

const escape = (s: string) => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');

function labelText(labels: Readonly<Record<string, string>>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escape(v).replace(/"/g, '\\"')}"`);
  return parts.length > 0 ? `{${parts.join(',')}}` : '';
}
