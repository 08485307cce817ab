/**
 * Prometheus metrics on their own listener (`--metrics-port`, default 8002, `GET /metrics`), in the
 * exposition format written by prom-client. Per-model families carry Triton's names, types, HELP texts
 * and `model`/`version` labels, so Triton dashboards and alerts work unchanged. Their values are not
 * counted twice: every scrape reads the same ModelStats the statistics extension serves (collect
 * callbacks), so `/metrics` and `/v2/models/stats` always agree. Durations are the statistics' total
 * nanoseconds in whole microseconds. Host CPU and memory gauges (Linux /proc where available) and
 * prom-client's process metrics complete the page.
 */

import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { listenOn } from './http/server.js';
import { cpus, freemem, totalmem } from 'node:os';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { versionMemory, type FailureReason, type InferenceServer, type ModelStats, type ModelVersion, type ResidencyCounts } from '../core/index.js';

const REASONS: FailureReason[] = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'];
const us = (ns: number) => Math.floor(ns / 1000);

type Labels = { model: string; version: string };

/** Per-model families: name, Triton's HELP text, type, and how to read the value from ModelStats. */
/** The time a model's batches waited for rate-limiter resources (its `rate_limiter` statistics section). */
const rateLimitWait = (s: ModelStats) => (s.sections.get('rate_limiter')?.() as { wait: { count: number; ns: number } } | undefined)?.wait;

const MODEL_FAMILIES: { name: string; help: string; type: 'counter' | 'gauge'; value: (s: ModelStats) => number; cacheOnly?: boolean; rateLimitOnly?: boolean }[] = [
  { name: 'nv_inference_request_success', type: 'counter', help: 'Number of successful inference requests, all batch sizes', value: (s) => s.success.count },
  { name: 'nv_inference_count', type: 'counter', help: 'Number of inferences performed (does not include cached requests)', value: (s) => s.inferenceCount },
  { name: 'nv_inference_exec_count', type: 'counter', help: 'Number of model executions performed (does not include cached requests)', value: (s) => s.executionCount },
  { name: 'nv_inference_request_duration_us', type: 'counter', help: 'Cumulative inference request duration in microseconds (includes cached requests)', value: (s) => us(s.success.ns) },
  { name: 'nv_inference_queue_duration_us', type: 'counter', help: 'Cumulative inference queuing duration in microseconds (includes cached requests)', value: (s) => us(s.queue.ns) },
  { name: 'nv_inference_compute_input_duration_us', type: 'counter', help: 'Cumulative compute input duration in microseconds (does not include cached requests)', value: (s) => us(s.computeInput.ns) },
  { name: 'nv_inference_compute_infer_duration_us', type: 'counter', help: 'Cumulative compute inference duration in microseconds (does not include cached requests)', value: (s) => us(s.computeInfer.ns) },
  { name: 'nv_inference_compute_output_duration_us', type: 'counter', help: 'Cumulative inference compute output duration in microseconds (does not include cached requests)', value: (s) => us(s.computeOutput.ns) },
  { name: 'nv_inference_pending_request_count', type: 'gauge', help: 'Instantaneous number of pending requests awaiting execution per-model.', value: (s) => s.pending },
  { name: 'nv_model_load_duration_secs', type: 'gauge', help: 'Model load time in seconds', value: (s) => s.loadDurationSecs },
  // Triton exports the cache families only for models whose config enables the response cache.
  { name: 'nv_cache_num_hits_per_model', type: 'counter', help: 'Number of cache hits per model', value: (s) => s.cacheHit.count, cacheOnly: true },
  { name: 'nv_cache_num_misses_per_model', type: 'counter', help: 'Number of cache misses per model', value: (s) => s.cacheMiss.count, cacheOnly: true },
  { name: 'nv_cache_hit_duration_per_model', type: 'counter', help: 'Total cache hit duration per model, in microseconds', value: (s) => us(s.cacheHit.ns), cacheOnly: true },
  { name: 'nv_cache_miss_duration_per_model', type: 'counter', help: 'Total cache miss (insert+lookup) duration per model, in microseconds', value: (s) => us(s.cacheMiss.ns), cacheOnly: true },
  // tsi's own (Triton has none): only while --rate-limit execution_count is on.
  { name: 'tsi_rate_limiter_wait_count', type: 'counter', help: 'Number of executions that asked the rate limiter for resources', value: (s) => rateLimitWait(s)?.count ?? 0, rateLimitOnly: true },
  { name: 'tsi_rate_limiter_wait_duration_us', type: 'counter', help: 'Cumulative time executions waited for rate-limiter resources, in microseconds (also part of the queue duration)', value: (s) => us(rateLimitWait(s)?.ns ?? 0), rateLimitOnly: true },
];

export interface MetricsOptions {
  /** nv_cpu_* gauges (tritonserver's --allow-cpu-metrics). */
  cpuMetrics?: boolean;
  /** prom-client's process_* and nodejs_* metrics. */
  processMetrics?: boolean;
}

function loadedVersions(server: InferenceServer): ModelVersion[] {
  const out: ModelVersion[] = [];
  for (const name of server.repository.names().sort()) out.push(...server.repository.readyVersions(name).reverse());
  return out;
}

const labelsOf = (mv: ModelVersion): Labels => ({ model: mv.name, version: String(mv.version) });

/** A registry whose model metrics are read from `server` at scrape time. */
export function createMetricsRegistry(server: InferenceServer, opts: MetricsOptions = {}): Registry {
  const registry = new Registry();
  const [success, ...rest] = MODEL_FAMILIES;
  const versions = (f: (typeof MODEL_FAMILIES)[number]) =>
    loadedVersions(server).filter((mv) => (!f.cacheOnly || mv.config.response_cache?.enable === true) && (!f.rateLimitOnly || mv.stats.sections.has('rate_limiter')));
  const family = (f: (typeof MODEL_FAMILIES)[number]) => {
    if (f.type === 'counter') {
      new Counter({
        name: f.name, help: f.help, labelNames: ['model', 'version'], registers: [registry],
        collect() {
          this.reset();
          for (const mv of versions(f)) this.inc(labelsOf(mv), f.value(mv.stats));
        },
      });
    } else {
      new Gauge({
        name: f.name, help: f.help, labelNames: ['model', 'version'], registers: [registry],
        collect() {
          this.reset();
          for (const mv of versions(f)) this.set(labelsOf(mv), f.value(mv.stats));
        },
      });
    }
  };
  family(success!);
  new Counter({
    name: 'nv_inference_request_failure', help: 'Number of failed inference requests, all batch sizes',
    labelNames: ['model', 'reason', 'version'], registers: [registry],
    collect() {
      this.reset();
      for (const mv of loadedVersions(server)) {
        for (const reason of REASONS) this.inc({ model: mv.name, reason, version: String(mv.version) }, mv.stats.failures[reason]);
      }
    },
  });
  for (const f of rest) family(f);
  residencyFamilies(registry, server);
  if (opts.cpuMetrics !== false) cpuGauges(registry);
  if (opts.processMetrics !== false) collectDefaultMetrics({ register: registry });
  return registry;
}

/**
 * tsi's own (Triton has none): memory per model and per instance as the backends measured it, loads
 * and unloads by reason (startup, explicit, on_demand, poll; explicit, budget, removed), and the time
 * requests waited for on-demand loads.
 */
function residencyFamilies(registry: Registry, server: InferenceServer): void {
  new Gauge({
    name: 'tsi_model_memory_bytes', help: 'Memory a loaded model version holds, as its backend measured it at load', labelNames: ['model', 'version'], registers: [registry],
    collect() {
      this.reset();
      for (const mv of loadedVersions(server)) this.set(labelsOf(mv), versionMemory(mv));
    },
  });
  new Gauge({
    name: 'tsi_model_instance_memory_bytes', help: 'Memory one model instance holds, as its backend measured it at creation', labelNames: ['model', 'version', 'instance'], registers: [registry],
    collect() {
      this.reset();
      for (const mv of loadedVersions(server)) for (const i of mv.instances) this.set({ ...labelsOf(mv), instance: i.spec.name }, i.memoryBytes ?? 0);
    },
  });
  const byReason = (name: string, help: string, pick: (c: ResidencyCounts) => Partial<Record<string, number>>) => new Counter({
    name, help, labelNames: ['model', 'reason'], registers: [registry],
    collect() {
      this.reset();
      for (const [model, c] of server.residency.allCounts()) for (const [reason, n] of Object.entries(pick(c))) this.inc({ model, reason }, n ?? 0);
    },
  });
  byReason('tsi_model_loads_total', 'Model loads, by reason (startup, explicit, on_demand, poll)', (c) => c.loads);
  byReason('tsi_model_unloads_total', 'Model unloads, by reason (explicit, budget, removed)', (c) => c.unloads);
  const onDemand = (name: string, help: string, value: (c: ResidencyCounts) => number) => new Counter({
    name, help, labelNames: ['model'], registers: [registry],
    collect() {
      this.reset();
      for (const [model, c] of server.residency.allCounts()) if (c.onDemand.count > 0) this.inc({ model }, value(c));
    },
  });
  onDemand('tsi_model_on_demand_load_count', 'Loads that a request waited for (on-demand loading)', (c) => c.onDemand.count);
  onDemand('tsi_model_on_demand_load_duration_us', 'Cumulative time requests waited for on-demand loads, in microseconds', (c) => us(c.onDemand.ns));
}

/** Aggregate CPU busy/total jiffies (os.cpus() times are cumulative since boot). */
function cpuTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const c of cpus()) {
    const t = c.times;
    busy += t.user + t.nice + t.sys + t.irq;
    total += t.user + t.nice + t.sys + t.irq + t.idle;
  }
  return { busy, total };
}

function memoryUsed(): number {
  try {
    // MemAvailable is what Triton uses: total minus memory the kernel could hand out now.
    const info = readFileSync('/proc/meminfo', 'utf8');
    const total = Number(/^MemTotal:\s+(\d+)/m.exec(info)?.[1]) * 1024;
    const avail = Number(/^MemAvailable:\s+(\d+)/m.exec(info)?.[1]) * 1024;
    if (Number.isFinite(total) && Number.isFinite(avail)) return total - avail;
  } catch {
    /* not Linux */
  }
  return totalmem() - freemem();
}

function cpuGauges(registry: Registry): void {
  let last = cpuTimes();
  new Gauge({
    name: 'nv_cpu_utilization', help: 'CPU utilization rate [0.0 - 1.0]', registers: [registry],
    collect() {
      const now = cpuTimes();
      const dt = now.total - last.total;
      // Between two scrapes; on the first, or if no time passed, since boot.
      this.set(dt > 0 ? (now.busy - last.busy) / dt : (now.total > 0 ? now.busy / now.total : 0));
      if (dt > 0) last = now;
    },
  });
  new Gauge({
    name: 'nv_cpu_memory_total_bytes', help: 'CPU total memory (RAM), in bytes', registers: [registry],
    collect() {
      this.set(totalmem());
    },
  });
  new Gauge({
    name: 'nv_cpu_memory_used_bytes', help: 'CPU used memory (RAM), in bytes', registers: [registry],
    collect() {
      this.set(memoryUsed());
    },
  });
}

export interface MetricsListener {
  port: number;
  address: string;
  close(): Promise<void>;
}

/** What `/metrics` serves: the registry's families, then text other parts render themselves. */
export interface MetricsPage {
  contentType: string;
  text(): Promise<string>;
}

/**
 * The page: prom-client's registry, then the models' own families (Triton's custom metrics, whose
 * histograms carry per-series buckets that prom-client cannot express) and any `extra` renderers.
 */
export function metricsPage(registry: Registry, server: InferenceServer, extra: (() => string)[] = []): MetricsPage {
  return {
    contentType: registry.contentType,
    async text() {
      let text = await registry.metrics();
      for (const f of extra) text += f();
      return text + server.metrics.exposition();
    },
  };
}

/** Serves `GET /metrics` (Triton's `/metrics/?`); other paths 404, other methods 405. */
export async function listenMetrics(page: MetricsPage, port: number, address: string): Promise<MetricsListener> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (!/^\/metrics\/?$/.test(path)) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"Not Found"}');
      return;
    }
    if (req.method !== 'GET') {
      res.writeHead(405, { 'Content-Type': 'application/json' }).end('{"error":"Method Not Allowed"}');
      return;
    }
    page.text().then(
      (text) => res.writeHead(200, { 'Content-Type': page.contentType }).end(text),
      (err) => res.writeHead(500, { 'Content-Type': 'application/json' }).end(JSON.stringify({ error: String(err) })),
    );
  });
  const info = await listenOn(server, port, address);
  return {
    port: info.port,
    address: info.address,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
