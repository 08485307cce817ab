/**
 * OpenTelemetry export of request traces (`--trace-config mode=opentelemetry`), as Triton runs it:
 * an OTLP/HTTP exporter (protobuf, to `opentelemetry,url`, default http://localhost:4318/v1/traces)
 * behind a Batch Span Processor sized by the `bsp_*` settings, a resource of
 * `service.name=triton-inference-server` overlaid by OTEL_RESOURCE_ATTRIBUTES and then by each
 * `opentelemetry,resource=key=value`, and W3C trace-context extraction for the `traceparent` /
 * `tracestate` a client sent. Core decides what is traced and collects the trace tree; this room
 * only turns finished trees into spans (spans.ts) and hands them to the SDK.
 *
 * The SDK owns the bounds: the processor's queue holds at most `bsp_max_queue_size` spans and drops
 * the rest (its warning, with the count dropped, reaches the server log through the diag logger
 * installed here), and an export that fails or hangs is abandoned after the exporter's timeout, so a
 * collector that is down or slow never fails or holds up an inference.
 */

import { AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { DiagLogLevel, diag } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { Clock, Logger, Trace, TraceExporter } from '../../core/index.js';
import { TSI_VERSION } from '../../core/index.js';
import { PresetIds, SpanBuilder } from './spans.js';

export const DEFAULT_OTLP_URL = 'http://localhost:4318/v1/traces';

/** The OpenTelemetry side of the settings, read from the `opentelemetry,...` pairs core parsed. */
export interface OtelSettings {
  url: string;
  resource: Record<string, string>;
  maxQueueSize: number;
  scheduleDelayMs: number;
  maxExportBatchSize: number;
}

export function otelSettings(pairs: readonly [string, string][]): OtelSettings {
  const out: OtelSettings = { url: DEFAULT_OTLP_URL, resource: {}, maxQueueSize: 2048, scheduleDelayMs: 5000, maxExportBatchSize: 512 };
  for (const [k, v] of pairs) {
    if (k === 'url') out.url = /^[a-z][a-z0-9+.-]*:\/\//i.test(v) ? v : `http://${v}`; // Triton takes host:port/path too
    else if (k === 'resource') {
      const i = v.indexOf('=');
      out.resource[v.slice(0, i)] = v.slice(i + 1);
    } else if (k === 'bsp_max_queue_size') out.maxQueueSize = Number(v);
    else if (k === 'bsp_schedule_delay') out.scheduleDelayMs = Number(v);
    else if (k === 'bsp_max_export_batch_size') out.maxExportBatchSize = Number(v);
  }
  return out;
}

/** A diag argument as one line: an error (which the SDK's error handler hands over as JSON) by its message. */
function diagText(v: unknown): string {
  if (v instanceof Error) return v.message;
  if (typeof v === 'string' && v.startsWith('{')) {
    try {
      const o = JSON.parse(v) as { message?: unknown };
      if (typeof o.message === 'string') return o.message;
    } catch {
      // not JSON: as it is
    }
  }
  return String(v);
}

/** The exporter core hands finished traces to; `flush` at shutdown sends what is queued. */
export function createOtelExporter(pairs: readonly [string, string][], clock: Clock, log: Logger): TraceExporter & { shutdown(): Promise<void> } {
  const s = otelSettings(pairs);
  if (s.maxExportBatchSize > s.maxQueueSize) {
    log.warn(`opentelemetry: bsp_max_export_batch_size (${s.maxExportBatchSize}) is larger than bsp_max_queue_size (${s.maxQueueSize}); using ${s.maxQueueSize}`);
  }
  // The SDK reports dropped spans and failed exports through its diag logger only.
  diag.setLogger({
    error: (m, ...a) => log.error(`opentelemetry: ${[m, ...a].map(diagText).join(' ')}`),
    warn: (m, ...a) => log.warn(`opentelemetry: ${[m, ...a].map(diagText).join(' ')}`),
    info: () => {},
    debug: () => {},
    verbose: () => {},
  }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
  const resource = resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'triton-inference-server' })
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes(s.resource));
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url: s.url }), {
    maxQueueSize: s.maxQueueSize,
    scheduledDelayMillis: s.scheduleDelayMs,
    maxExportBatchSize: Math.min(s.maxExportBatchSize, s.maxQueueSize),
  });
  // Always on: core has already sampled, and a client's unsampled `traceparent` is traced too (Triton).
  const ids = new PresetIds();
  const provider = new BasicTracerProvider({ resource, sampler: new AlwaysOnSampler(), spanProcessors: [processor], idGenerator: ids });
  const builder = new SpanBuilder(provider.getTracer('tsi', TSI_VERSION), new W3CTraceContextPropagator(), clock, ids);
  log.info(`opentelemetry: exporting traces to ${s.url} (queue ${s.maxQueueSize}, batch ${s.maxExportBatchSize}, every ${s.scheduleDelayMs} ms)`);
  return {
    export(t: Trace): void {
      try {
        builder.build(t);
      } catch (err) {
        log.error(`opentelemetry: could not export trace ${t.id}: ${String(err)}`);
      }
    },
    flush: () => provider.forceFlush().catch((err) => log.error(`opentelemetry: flush failed: ${String(err)}`)),
    shutdown: () => provider.shutdown().catch((err) => log.error(`opentelemetry: shutdown failed: ${String(err)}`)),
  };
}
