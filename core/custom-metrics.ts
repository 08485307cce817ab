/**
 * Metric families that models define themselves (Triton's custom metrics: `pb_utils.MetricFamily` in
 * the Python backend), kept by the server and rendered on `/metrics` next to the `nv_*` families.
 * Platform-neutral: a backend creates families and metrics through `ModelLoadContext.metrics`, the
 * runtime's metrics listener appends `exposition()` to its page.
 *
 * Ownership: families and metrics are shared by name (a family) and label set (a metric), because
 * several instances of one model, or several models, may define the same ones, as in Triton. Each
 * `family()` / `metric()` call takes a reference that its `release()` gives back; the last release
 * removes it from the page.
 */

import { TsiError } from './errors.js';

export type MetricKind = 'COUNTER' | 'GAUGE' | 'HISTOGRAM';

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** One time series: a counter, a gauge or a histogram with its own buckets. */
export class CustomMetric {
  private refs = 1;
  private current = 0;
  /** Histogram state: cumulative counts per upper bound (+Inf last), sum and count. */
  private readonly counts?: number[];
  private sum = 0;
  private count = 0;

  constructor(
    private readonly family: CustomMetricFamily, readonly labels: Readonly<Record<string, string>>, readonly key: string,
    readonly buckets?: readonly number[],
  ) {
    if (buckets) this.counts = new Array<number>(buckets.length + 1).fill(0);
  }

  increment(v: number): void {
    this.check(v, 'increment');
    if (this.family.kind === 'HISTOGRAM') throw new TsiError('UNSUPPORTED', `metric family '${this.family.name}' is a histogram: use observe()`);
    if (this.family.kind === 'COUNTER' && v < 0) {
      throw new TsiError('INVALID_ARG', `counter '${this.family.name}' can only increase: increment(${v}) refused`);
    }
    this.current += v;
  }

  set(v: number): void {
    this.check(v, 'set');
    if (this.family.kind !== 'GAUGE') throw new TsiError('UNSUPPORTED', `metric family '${this.family.name}' is a ${this.family.kind.toLowerCase()}: set() is for gauges`);
    this.current = v;
  }

  observe(v: number): void {
    this.check(v, 'observe');
    if (this.family.kind !== 'HISTOGRAM' || !this.counts) {
      throw new TsiError('UNSUPPORTED', `metric family '${this.family.name}' is a ${this.family.kind.toLowerCase()}: observe() is for histograms`);
    }
    const b = this.buckets!;
    for (let i = 0; i < b.length; i++) if (v <= b[i]!) this.counts[i]!++;
    this.counts[b.length]!++;
    this.sum += v;
    this.count++;
  }

  value(): number {
    if (this.family.kind === 'HISTOGRAM') throw new TsiError('UNSUPPORTED', `metric family '${this.family.name}' is a histogram: value() is for counters and gauges`);
    return this.current;
  }

  /** Another holder of the same series. */
  retain(): this {
    this.refs++;
    return this;
  }

  release(): void {
    if (this.refs > 0 && --this.refs === 0) this.family.drop(this);
  }

  /** Exposition lines of this series. */
  lines(out: string[]): void {
    const name = this.family.name;
    if (!this.counts) {
      out.push(`${name}${labelText(this.labels)} ${num(this.current)}`);
      return;
    }
    const b = this.buckets!;
    for (let i = 0; i <= b.length; i++) {
      const le = i < b.length ? num(b[i]!) : '+Inf';
      out.push(`${name}_bucket${labelText({ ...this.labels, le })} ${this.counts[i]}`);
    }
    out.push(`${name}_sum${labelText(this.labels)} ${num(this.sum)}`);
    out.push(`${name}_count${labelText(this.labels)} ${this.count}`);
  }

  private check(v: number, op: string): void {
    if (typeof v !== 'number' || Number.isNaN(v)) throw new TsiError('INVALID_ARG', `metric '${this.family.name}': ${op}() needs a number, got ${String(v)}`);
  }
}

/** A named family of one kind; its metrics differ by labels. */
export class CustomMetricFamily {
  private refs = 1;
  private readonly metrics = new Map<string, CustomMetric>();

  constructor(private readonly owner: CustomMetrics, readonly name: string, readonly description: string, readonly kind: MetricKind) {}

  /** The series with these labels (created, or shared with whoever made it first). */
  metric(labels: Record<string, string> = {}, buckets?: number[]): CustomMetric {
    for (const [k, v] of Object.entries(labels)) {
      if (!LABEL.test(k) || k.startsWith('__')) throw new TsiError('INVALID_ARG', `metric '${this.name}': invalid label name '${k}'`);
      if (typeof v !== 'string') throw new TsiError('INVALID_ARG', `metric '${this.name}': label '${k}' must be a string`);
    }
    if (this.kind === 'HISTOGRAM') {
      if (!buckets) throw new TsiError('INVALID_ARG', `metric '${this.name}' is a histogram: give its buckets`);
      if (buckets.some((b, i) => typeof b !== 'number' || Number.isNaN(b) || (i > 0 && b <= buckets[i - 1]!))) {
        throw new TsiError('INVALID_ARG', `metric '${this.name}': buckets must be increasing numbers, got [${buckets.join(', ')}]`);
      }
    } else if (buckets !== undefined) {
      throw new TsiError('INVALID_ARG', `metric '${this.name}' is a ${this.kind.toLowerCase()}: buckets are only for histograms`);
    }
    const key = JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const existing = this.metrics.get(key);
    if (existing) {
      if (this.kind === 'HISTOGRAM' && String(existing.buckets) !== String(buckets)) {
        throw new TsiError('INVALID_ARG', `metric '${this.name}' with labels ${key} already exists with other buckets`);
      }
      return existing.retain();
    }
    const m = new CustomMetric(this, { ...labels }, key, buckets ? [...buckets] : undefined);
    this.metrics.set(key, m);
    return m;
  }

  retain(): this {
    this.refs++;
    return this;
  }

  /** Gives back this reference; the last one removes the family and its metrics from the page. */
  release(): void {
    if (this.refs > 0 && --this.refs === 0) this.owner.drop(this);
  }

  drop(m: CustomMetric): void {
    if (this.metrics.get(m.key) === m) this.metrics.delete(m.key);
  }

  lines(out: string[]): void {
    if (this.metrics.size === 0) return;
    out.push(`# HELP ${this.name} ${this.description.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`);
    out.push(`# TYPE ${this.name} ${this.kind.toLowerCase()}`);
    for (const m of this.metrics.values()) m.lines(out);
  }
}

/** Every custom family of one server. */
export class CustomMetrics {
  private readonly families = new Map<string, CustomMetricFamily>();

  /**
   * The family of this name: created, or shared when it exists with the same kind. Names the server
   * itself exports (`nv_*`) are refused, as are invalid Prometheus names.
   */
  family(name: string, description: string, kind: MetricKind): CustomMetricFamily {
    if (!NAME.test(name)) throw new TsiError('INVALID_ARG', `invalid metric family name '${name}' (Prometheus names match [a-zA-Z_:][a-zA-Z0-9_:]*)`);
    if (name.startsWith('nv_')) throw new TsiError('INVALID_ARG', `metric family name '${name}' is reserved: names starting with 'nv_' are the server's own`);
    if (kind !== 'COUNTER' && kind !== 'GAUGE' && kind !== 'HISTOGRAM') throw new TsiError('INVALID_ARG', `unknown metric kind '${String(kind)}'`);
    const existing = this.families.get(name);
    if (existing) {
      if (existing.kind !== kind) {
        throw new TsiError('ALREADY_EXISTS', `metric family '${name}' already exists as a ${existing.kind.toLowerCase()}, not a ${kind.toLowerCase()}`);
      }
      return existing.retain();
    }
    const f = new CustomMetricFamily(this, name, description, kind);
    this.families.set(name, f);
    return f;
  }

  drop(f: CustomMetricFamily): void {
    if (this.families.get(f.name) === f) this.families.delete(f.name);
  }

  get size(): number {
    return this.families.size;
  }

  /** The Prometheus text exposition of every family ('' when there are none). */
  exposition(): string {
    const out: string[] = [];
    for (const f of this.families.values()) f.lines(out);
    return out.length > 0 ? out.join('\n') + '\n' : '';
  }
}

function num(v: number): string {
  return Number.isFinite(v) ? String(v) : v > 0 ? '+Inf' : v < 0 ? '-Inf' : 'NaN';
}

function labelText(labels: Readonly<Record<string, string>>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')}"`);
  return parts.length > 0 ? `{${parts.join(',')}}` : '';
}
