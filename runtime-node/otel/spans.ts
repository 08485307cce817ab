/**
 * A finished trace tree (core's Trace: the top-level request and the children its ensemble steps and
 * BLS calls made) as OpenTelemetry spans, nested as Triton nests them: an `InferRequest` span for the
 * request as the transport saw it (child of the client's span when it sent a `traceparent`), under it
 * a span named for the model (REQUEST_START .. REQUEST_END), under that a `compute` span for each
 * execution, the spans of the backend's own activities (NAME_START .. NAME_END, nested as reported) and
 * the model spans of the requests the model made. The TIMESTAMPS become span events on the span they
 * belong to; each model span carries Triton's `triton.*` attributes; a failed request sets its spans'
 * status to ERROR.
 *
 * Spans are made after the fact, with explicit start and end times and the ids core chose when the
 * request began (a model may have been told its span's context): core stamps steady-clock
 * nanoseconds, turned into wall-clock time here by one offset taken when the exporter starts (as
 * Triton's `time_offset_`).
 */

import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace as traceApi, type Context, type HrTime, type Span, type TextMapPropagator, type Tracer } from '@opentelemetry/api';
import { RandomIdGenerator, type IdGenerator } from '@opentelemetry/sdk-trace-base';
import type { Clock, Trace } from '../../core/index.js';

const MODEL_EVENTS = new Set(['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
const COMPUTE_EVENTS = new Set(['COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END']);
const START = '_START';
const END = '_END';

type Stamp = { name: string; ns: number };

/**
 * The SDK's id source, made to hand out the ids core chose for a trace (a model was told its span's
 * context while it ran: Python's `request.trace().get_context()`); random ones otherwise.
 */
export class PresetIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  private traceId?: string;
  private spanId?: string;

  /** The ids the next span started takes (each once). */
  preset(traceId: string | undefined, spanId: string | undefined): void {
    this.traceId = traceId;
    this.spanId = spanId;
  }

  generateTraceId(): string {
    const id = this.traceId ?? this.random.generateTraceId();
    this.traceId = undefined;
    return id;
  }

  generateSpanId(): string {
    const id = this.spanId ?? this.random.generateSpanId();
    this.spanId = undefined;
    return id;
  }
}

export class SpanBuilder {
  /** Wall-clock seconds at the exporter's start, and the nanoseconds past them, minus the steady clock then. */
  private readonly epochSec0: number;
  private readonly offsetNs: number;

  constructor(private readonly tracer: Tracer, private readonly propagator: TextMapPropagator, clock: Clock, private readonly ids: PresetIds) {
    const steady0 = clock.nowNs();
    const ms = clock.epochMs();
    this.epochSec0 = Math.floor(ms / 1000);
    // Kept small so that adding a steady reading stays exact in a float64.
    this.offsetNs = (ms - this.epochSec0 * 1000) * 1e6 - steady0;
  }

  /** Steady-clock nanoseconds as wall-clock [seconds, nanoseconds]. */
  time(ns: number): HrTime {
    const x = ns + this.offsetNs;
    const sec = Math.floor(x / 1e9);
    return [this.epochSec0 + sec, Math.round(x - sec * 1e9)];
  }

  /** Makes and ends every span of a finished top-level trace. */
  build(t: Trace): void {
    const parent = t.context ? this.propagator.extract(ROOT_CONTEXT, t.context, {
      get: (carrier: Record<string, string | undefined>, key: string) => carrier[key],
      keys: (carrier: Record<string, string | undefined>) => Object.keys(carrier),
    }) : ROOT_CONTEXT;
    const stamps = sorted(t.stamps);
    const custom = new Set(t.activities);
    const own = stamps.filter((s) => !MODEL_EVENTS.has(s.name) && !COMPUTE_EVENTS.has(s.name) && !custom.has(s));
    const first = stamps[0]?.ns ?? 0;
    const last = stamps[stamps.length - 1]?.ns ?? first;
    // Without a client's context the root span starts the trace: with the id core chose for it.
    this.ids.preset(t.otelIds?.traceId, undefined);
    const root = this.tracer.startSpan('InferRequest', { kind: SpanKind.SERVER, startTime: this.time(own[0]?.ns ?? first) }, parent);
    this.ids.preset(undefined, undefined);
    for (const s of own) root.addEvent(s.name, this.time(s.ns));
    root.setAttributes(t.attributes);
    if (t.error !== undefined) root.setStatus({ code: SpanStatusCode.ERROR, message: t.error });
    this.model(t, stamps, traceApi.setSpan(parent, root));
    root.end(this.time(Math.max(last, own[own.length - 1]?.ns ?? last)));
  }

  /** The model span of one trace, its compute spans, and (recursively) its children's model spans. */
  private model(t: Trace, stamps: Stamp[], parent: Context): void {
    const custom = new Set(t.activities);
    const mine = stamps.filter((s) => MODEL_EVENTS.has(s.name) || (t.parentId !== 0 && !COMPUTE_EVENTS.has(s.name) && !custom.has(s)));
    const start = mine.find((s) => s.name === 'REQUEST_START')?.ns ?? stamps[0]?.ns ?? 0;
    const end = mine.find((s) => s.name === 'REQUEST_END')?.ns ?? stamps[stamps.length - 1]?.ns ?? start;
    this.ids.preset(undefined, t.otelIds?.spanId);
    const span = this.tracer.startSpan(t.model, { kind: SpanKind.SERVER, startTime: this.time(start) }, parent);
    this.ids.preset(undefined, undefined);
    span.setAttribute('triton.model_name', t.model);
    span.setAttribute('triton.model_version', t.version);
    span.setAttribute('triton.trace_id', t.id);
    span.setAttribute('triton.trace_parent_id', t.parentId);
    if (t.requestId) span.setAttribute('triton.request_id', t.requestId);
    if (t.parentId !== 0) span.setAttributes(t.attributes);
    if (t.error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: t.error });
    const ctx = traceApi.setSpan(parent, span);
    const loose = this.activities(t.activities, ctx, end);
    for (const s of sorted([...mine, ...loose])) span.addEvent(s.name, this.time(s.ns));
    this.compute(stamps, ctx);
    for (const c of t.children) this.model(c, sorted(c.stamps), ctx);
    span.end(this.time(end));
  }

  /**
   * The backend's own activities, read in the order reported as Triton's tracer reads them: NAME_START
   * opens a span NAME under the innermost one still open (the model span when none is), NAME_END adds
   * its event and ends the innermost open span, any other name is an event on the innermost open span.
   * An END with nothing open stays an event of the model span; a span left open ends with the model's.
   * Returns the activities that are the model span's own events.
   */
  private activities(list: readonly Stamp[], modelCtx: Context, endNs: number): Stamp[] {
    const open: { span: Span; ctx: Context }[] = [];
    const loose: Stamp[] = [];
    for (const a of list) {
      if (a.name.length > START.length && a.name.endsWith(START)) {
        const parent = open.at(-1)?.ctx ?? modelCtx;
        const span = this.tracer.startSpan(a.name.slice(0, -START.length), { kind: SpanKind.SERVER, startTime: this.time(a.ns) }, parent);
        open.push({ span, ctx: traceApi.setSpan(parent, span) });
      }
      const top = open.at(-1);
      if (top) top.span.addEvent(a.name, this.time(a.ns));
      else loose.push(a);
      if (top && a.name.length > END.length && a.name.endsWith(END)) open.pop()!.span.end(this.time(a.ns));
    }
    for (const o of open.reverse()) o.span.end(this.time(endNs));
    return loose;
  }

  /** One `compute` span per COMPUTE_START .. COMPUTE_END run of stamps. */
  private compute(stamps: Stamp[], parent: Context): void {
    let open: Span | undefined;
    for (const s of stamps) {
      if (!COMPUTE_EVENTS.has(s.name)) continue;
      if (s.name === 'COMPUTE_START') {
        open?.end(this.time(s.ns));
        open = this.tracer.startSpan('compute', { kind: SpanKind.SERVER, startTime: this.time(s.ns) }, parent);
      }
      open?.addEvent(s.name, this.time(s.ns));
      if (s.name === 'COMPUTE_END') {
        open?.end(this.time(s.ns));
        open = undefined;
      }
    }
    open?.end();
  }
}

function sorted(stamps: readonly Stamp[]): Stamp[] {
  return [...stamps].sort((a, b) => a.ns - b.ns);
}
