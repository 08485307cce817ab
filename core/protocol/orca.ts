/**
 * ORCA load reports on generate's answers, as Triton sends them: a request that carries
 * `endpoint-load-metrics-format: json` or `text` gets an `endpoint-load-metrics` response header
 * with the KV-cache utilisation and the token capacity (`named_metrics.kv_cache_utilization`,
 * `named_metrics.max_token_capacity`), which a gateway (the Kubernetes Inference Gateway, Envoy)
 * reads to route without scraping /metrics. Triton derives them from its TensorRT-LLM backend's KV
 * block gauges; here they come from the `llm` models' KV-token budgets (reserved / budget, summed
 * over the ready models and their instances). Any other format value sends no header, as in Triton.
 */

import type { InferenceServer } from '../server.js';

export const LOAD_METRICS_FORMAT = 'endpoint-load-metrics-format';
export const LOAD_METRICS = 'endpoint-load-metrics';

/** The header's value for `format`, or undefined (no format asked for, or one Triton does not know). */
export function loadMetricsHeader(server: InferenceServer, format: string | null): string | undefined {
  if (format !== 'json' && format !== 'text') return undefined;
  let reserved = 0;
  let capacity = 0;
  const seen = new Set<string>();
  for (const e of server.repositoryIndex(true)) {
    const key = `${e.name}/${e.version}`;
    if (seen.has(key)) continue;
    seen.add(key);
    let stats;
    try {
      stats = server.model(e.name, e.version).stats.llm?.stats;
    } catch {
      continue; // unloaded between the index and the lookup
    }
    if (!stats) continue;
    reserved += stats.kvTokensReserved;
    capacity += stats.kvTokensMax;
  }
  const utilization = capacity > 0 ? reserved / capacity : 0;
  // Triton writes the text form with C++'s std::to_string (six decimals) and the capacity as an integer.
  return format === 'json'
    ? `JSON ${JSON.stringify({ named_metrics: { kv_cache_utilization: utilization, max_token_capacity: capacity } })}`
    : `TEXT named_metrics.kv_cache_utilization=${utilization.toFixed(6)}, named_metrics.max_token_capacity=${capacity}`;
}
