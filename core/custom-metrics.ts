/**
 * Triton's custom metrics API (`pb_utils.MetricFamily` in the Python backend): the families a model
 * defines for itself, with Triton's kinds (COUNTER, GAUGE, HISTOGRAM) and its rule that `nv_*` names
 * are the server's own. The families live in the server's one MetricsRegistry (core/metrics.ts),
 * which shares them by name and label set and renders them on `/metrics` beside everything else.
 */

import { TsiError } from './errors.js';
import { MetricsRegistry, type MetricFamily } from './metrics.js';

export type MetricKind = 'COUNTER' | 'GAUGE' | 'HISTOGRAM';

export class CustomMetrics {
  constructor(readonly registry: MetricsRegistry = new MetricsRegistry()) {}

  /**
   * The family of this name: created, or shared when it exists with the same kind. Names the server
   * itself exports (`nv_*`) are refused, as are invalid Prometheus names.
   */
  family(name: string, description: string, kind: MetricKind): MetricFamily {
    if (typeof name === 'string' && name.startsWith('nv_')) {
      throw new TsiError('INVALID_ARG', `metric family name '${name}' is reserved: names starting with 'nv_' are the server's own`);
    }
    if (kind !== 'COUNTER' && kind !== 'GAUGE' && kind !== 'HISTOGRAM') throw new TsiError('INVALID_ARG', `unknown metric kind '${String(kind)}'`);
    return this.registry.family(name, description, kind.toLowerCase() as 'counter' | 'gauge' | 'histogram');
  }

  /** Families on the registry's page. */
  get size(): number {
    return this.registry.size;
  }

  /** The registry's Prometheus text. */
  exposition(): string {
    return this.registry.render();
  }
}
