/**
 * The server's own families, registered into its MetricsRegistry and read at scrape time from the same
 * ModelStats the statistics extension serves, so `/metrics` and `/v2/models/stats` always agree and
 * nothing is counted twice. Per-model families carry Triton's names, types, HELP texts and
 * `model`/`version` labels, so Triton dashboards and alerts work unchanged; durations are the
 * statistics' total nanoseconds in whole microseconds. tsi's own `tsi_*` families add the rate
 * limiter's waits, memory per model and instance, and loads and unloads by reason.
 */

import type { MetricSample, MetricSource, MetricsRegistry } from './metrics.js';
import type { ModelVersion } from './repository/model.js';
import type { Repository } from './repository/repository.js';
import { versionMemory, type Residency, type ResidencyCounts } from './repository/residency.js';
import type { FailureReason, ModelStats } from './stats.js';

const REASONS: FailureReason[] = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'];
const us = (ns: number) => Math.floor(ns / 1000);

/** The time a model's batches waited for rate-limiter resources (its `rate_limiter` statistics section). */
const rateLimitWait = (s: ModelStats) => (s.sections.get('rate_limiter')?.() as { wait: { count: number; ns: number } } | undefined)?.wait;

interface PerVersion {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  value: (s: ModelStats) => number;
  /** Triton exports the cache families only for models whose config enables the response cache. */
  cacheOnly?: boolean;
  /** Only while `--rate-limit execution_count` is on. */
  rateLimitOnly?: boolean;
}

const SUCCESS: PerVersion = { name: 'nv_inference_request_success', type: 'counter', help: 'Number of successful inference requests, all batch sizes', value: (s) => s.success.count };

const PER_VERSION: PerVersion[] = [
  { name: 'nv_inference_count', type: 'counter', help: 'Number of inferences performed (does not include cached requests)', value: (s) => s.inferenceCount },
  { name: 'nv_inference_exec_count', type: 'counter', help: 'Number of model executions performed (does not include cached requests)', value: (s) => s.executionCount },
  { name: 'nv_inference_request_duration_us', type: 'counter', help: 'Cumulative inference request duration in microseconds (includes cached requests)', value: (s) => us(s.success.ns) },
  { name: 'nv_inference_queue_duration_us', type: 'counter', help: 'Cumulative inference queuing duration in microseconds (includes cached requests)', value: (s) => us(s.queue.ns) },
  { name: 'nv_inference_compute_input_duration_us', type: 'counter', help: 'Cumulative compute input duration in microseconds (does not include cached requests)', value: (s) => us(s.computeInput.ns) },
  { name: 'nv_inference_compute_infer_duration_us', type: 'counter', help: 'Cumulative compute inference duration in microseconds (does not include cached requests)', value: (s) => us(s.computeInfer.ns) },
  { name: 'nv_inference_compute_output_duration_us', type: 'counter', help: 'Cumulative inference compute output duration in microseconds (does not include cached requests)', value: (s) => us(s.computeOutput.ns) },
  { name: 'nv_inference_pending_request_count', type: 'gauge', help: 'Instantaneous number of pending requests awaiting execution per-model.', value: (s) => s.pending },
  { name: 'nv_model_load_duration_secs', type: 'gauge', help: 'Model load time in seconds', value: (s) => s.loadDurationSecs },
  { name: 'nv_cache_num_hits_per_model', type: 'counter', help: 'Number of cache hits per model', value: (s) => s.cacheHit.count, cacheOnly: true },
  { name: 'nv_cache_num_misses_per_model', type: 'counter', help: 'Number of cache misses per model', value: (s) => s.cacheMiss.count, cacheOnly: true },
  { name: 'nv_cache_hit_duration_per_model', type: 'counter', help: 'Total cache hit duration per model, in microseconds', value: (s) => us(s.cacheHit.ns), cacheOnly: true },
  { name: 'nv_cache_miss_duration_per_model', type: 'counter', help: 'Total cache miss (insert+lookup) duration per model, in microseconds', value: (s) => us(s.cacheMiss.ns), cacheOnly: true },
  { name: 'tsi_rate_limiter_wait_count', type: 'counter', help: 'Number of executions that asked the rate limiter for resources', value: (s) => rateLimitWait(s)?.count ?? 0, rateLimitOnly: true },
  { name: 'tsi_rate_limiter_wait_duration_us', type: 'counter', help: 'Cumulative time executions waited for rate-limiter resources, in microseconds (also part of the queue duration)', value: (s) => us(rateLimitWait(s)?.ns ?? 0), rateLimitOnly: true },
];

/** What the server families read. */
export interface ServerMetricsView {
  readonly repository: Repository;
  readonly residency: Residency;
}

/** Registers the server's families (Triton's `nv_inference_*`, `nv_cache_*`, and tsi's `tsi_*`) into `registry`. */
export function registerServerMetrics(registry: MetricsRegistry, server: ServerMetricsView): void {
  // Every per-version family walks the same list: it is made once per render (which runs in one
  // go, so the list is dropped at the next microtask) rather than once per family.
  let snapshot: ModelVersion[] | undefined;
  const loaded = (): ModelVersion[] => {
    if (snapshot) return snapshot;
    const out: ModelVersion[] = [];
    for (const name of server.repository.names().sort()) out.push(...server.repository.readyVersions(name).reverse());
    queueMicrotask(() => (snapshot = undefined));
    return (snapshot = out);
  };
  const source = (name: string, help: string, type: 'counter' | 'gauge', samples: () => Iterable<MetricSample>): MetricSource => ({ name, help, type, samples });
  // Under --model-namespacing, Triton's `namespace` label tells apart models of the same name.
  const labelsOf = (mv: ModelVersion): Record<string, string> => (mv.namespace === undefined
    ? { model: mv.name, version: String(mv.version) }
    : { namespace: mv.namespace, model: mv.name, version: String(mv.version) });
  const perVersion = (f: PerVersion) => registry.register(source(f.name, f.help, f.type, function* () {
    for (const mv of loaded()) {
      if (f.cacheOnly && mv.config.response_cache?.enable !== true) continue;
      if (f.rateLimitOnly && !mv.stats.sections.has('rate_limiter')) continue;
      yield { labels: labelsOf(mv), value: f.value(mv.stats) };
    }
  }));

  perVersion(SUCCESS);
  registry.register(source('nv_inference_request_failure', 'Number of failed inference requests, all batch sizes', 'counter', function* () {
    for (const mv of loaded()) for (const reason of REASONS) yield { labels: { model: mv.name, reason, version: String(mv.version) }, value: mv.stats.failures[reason] };
  }));
  for (const f of PER_VERSION) perVersion(f);

  // Memory as the backends measured it, loads and unloads by reason, and the waits for on-demand loads.
  registry.register(source('tsi_model_memory_bytes', 'Memory a loaded model version holds, as its backend measured it at load', 'gauge', function* () {
    for (const mv of loaded()) yield { labels: labelsOf(mv), value: versionMemory(mv) };
  }));
  registry.register(source('tsi_model_instance_memory_bytes', 'Memory one model instance holds, as its backend measured it at creation', 'gauge', function* () {
    for (const mv of loaded()) for (const i of mv.instances) yield { labels: { ...labelsOf(mv), instance: i.spec.name }, value: i.memoryBytes ?? 0 };
  }));
  const byReason = (name: string, help: string, pick: (c: ResidencyCounts) => Partial<Record<string, number>>) =>
    registry.register(source(name, help, 'counter', function* () {
      for (const [model, c] of server.residency.allCounts()) for (const [reason, n] of Object.entries(pick(c))) yield { labels: { model, reason }, value: n ?? 0 };
    }));
  byReason('tsi_model_loads_total', 'Model loads, by reason (startup, explicit, on_demand, poll)', (c) => c.loads);
  byReason('tsi_model_unloads_total', 'Model unloads, by reason (explicit, budget, removed)', (c) => c.unloads);
  const onDemand = (name: string, help: string, value: (c: ResidencyCounts) => number) =>
    registry.register(source(name, help, 'counter', function* () {
      for (const [model, c] of server.residency.allCounts()) if (c.onDemand.count > 0) yield { labels: { model }, value: value(c) };
    }));
  onDemand('tsi_model_on_demand_load_count', 'Loads that a request waited for (on-demand loading)', (c) => c.onDemand.count);
  onDemand('tsi_model_on_demand_load_duration_us', 'Cumulative time requests waited for on-demand loads, in microseconds', (c) => us(c.onDemand.ns));
}
