/**
 * Request tracing in Triton's "triton" mode: a TraceManager holds the global trace settings and any
 * per-model overrides, decides which requests are traced (trace_rate: one in N; trace_count: how many
 * are left, -1 = no limit), and collects each traced request's timestamps into Triton's trace-file JSON
 * (`[{"id","model_name","model_version"}, {"id","timestamps":[{"name","ns"}...]}, ...]`), which is
 * written to `trace_file` at shutdown (log_frequency 0) or to `trace_file.<n>` every log_frequency
 * traces — the files Triton's trace_summary.py reads. The file itself is written by an injected
 * TraceWriter so core stays platform-neutral.
 *
 * A trace rides on its request as a typed field (`trace`, a TraceStamps of types.ts): the transport
 * sets it on the InferRequest, ModelVersion stamps REQUEST_START/QUEUE_START/REQUEST_END and hands it
 * to the PendingRequest it creates, and `tracedInstance` (wrapped around every backend instance)
 * stamps compute times. An ensemble step or a BLS call runs under a child trace (its own id, the
 * caller's as `parent_id`), as Triton traces them. Untraced requests pay one field read per
 * execution. A trace is emitted once the transport has finished, no execution is stamping it and
 * every child has been emitted into it.
 *
 * In "opentelemetry" mode the same finished tree goes to an injected TraceExporter (the Node
 * runtime's otel/ room turns it into spans); core carries the client's W3C `traceparent` and
 * `tracestate` as plain strings, and a request that carries them is traced whatever rate and count say.
 */

import type { BackendInstance, BackendRequest, ExecutionTimes } from './backend.js';
import type { Clock, Logger, Tensor, TraceStamps } from './types.js';

export type TraceLevel = 'TIMESTAMPS' | 'TENSORS';
export type TraceMode = 'triton' | 'opentelemetry';

/** A client's W3C trace context, as its `traceparent` / `tracestate` headers carried it. */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}

/** Where finished traces go in "opentelemetry" mode (the Node runtime's otel/ room implements it). */
export interface TraceExporter {
  /** A finished top-level trace, its children inside; called once per trace, never throws. */
  export(trace: Trace): void;
  /** Sends whatever is queued (call at shutdown). */
  flush(): Promise<void>;
}

export interface TraceSetting {
  /** Empty = OFF. */
  level: TraceLevel[];
  /** Trace one request in every `rate`. */
  rate: number;
  /** Traces left to take; -1 = unlimited. */
  count: number;
  /** Write `file.<n>` every this many traces; 0 = write `file` at shutdown. */
  logFrequency: number;
  file: string;
  mode: TraceMode;
  /**
   * The mode's own settings, shown by the trace protocol as they were given (`opentelemetry,url=...`,
   * `resource`, `bsp_*`); read once at start, never changed over the protocol (as in Triton).
   */
  modeSettings: [string, string][];
}

/** An update: a value sets the field; `null` clears a model-level override (back to the global value). */
export interface TraceSettingUpdate {
  level?: TraceLevel[] | null;
  rate?: number | null;
  count?: number | null;
  logFrequency?: number | null;
}

export interface TraceWriter {
  /** Replaces the file at `path` with `text`. */
  write(path: string, text: string): Promise<void>;
}

export const DEFAULT_TRACE_SETTING: TraceSetting = { level: [], rate: 1000, count: -1, logFrequency: 0, file: '', mode: 'triton', modeSettings: [] };

interface Sampler {
  override: Partial<TraceSetting>;
  counter: number;
}

interface FileBuffer {
  records: unknown[];
  traces: number;
  index: number;
}

export class TraceManager {
  private readonly global: TraceSetting;
  private globalCounter = 0;
  private readonly models = new Map<string, Sampler>();
  private readonly files = new Map<string, FileBuffer>();
  private readonly writes = new Set<Promise<void>>();
  private nextId = 1;

  private readonly newId = (): number => this.nextId++;
  /** The global setting the server started with: what clearing a global field returns to. */
  private readonly startup: TraceSetting;

  constructor(
    initial: Partial<TraceSetting>, private readonly clock: Clock, private readonly writer?: TraceWriter,
    private readonly log?: Logger, private readonly exporter?: TraceExporter,
  ) {
    this.startup = { ...DEFAULT_TRACE_SETTING, ...initial };
    this.global = { ...this.startup };
  }

  /** The effective setting for a model (its overrides over the global one), or the global one. */
  setting(model?: string): TraceSetting {
    const o = model ? this.models.get(model)?.override : undefined;
    return { ...this.global, ...(o ?? {}) };
  }

  /**
   * Applies an update globally or to one model. For a model, an update with no keys removes its
   * overrides altogether (Triton: "a request to remove the specification").
   */
  update(model: string | undefined, u: TraceSettingUpdate): void {
    if (!model) {
      for (const [k, v] of Object.entries(u) as [keyof TraceSettingUpdate, unknown][]) {
        if (v === undefined) continue;
        // Cleared: back to the start-up value (Triton's global_default_, from --trace-config), not
        // the built-in default.
        (this.global as unknown as Record<string, unknown>)[k] = v === null ? this.startup[k] : v;
      }
      return;
    }
    if (Object.keys(u).length === 0) {
      this.models.delete(model);
      return;
    }
    let s = this.models.get(model);
    if (!s) this.models.set(model, (s = { override: {}, counter: 0 }));
    for (const [k, v] of Object.entries(u) as [keyof TraceSettingUpdate, unknown][]) {
      if (v === undefined) continue;
      if (v === null) delete s.override[k];
      else (s.override as Record<string, unknown>)[k] = v;
    }
  }

  /**
   * Whether a request to `model` is traced; if so, its Trace (already stamped `startStamp` if given).
   * In "opentelemetry" mode a request that carries a client's `context` is always traced, and takes
   * nothing from rate or count (Triton's rule since 24.01).
   */
  sample(model: string, startStamp?: { name: string; ns: number }, context?: TraceContext): Trace | undefined {
    const sampler = this.models.get(model);
    // Tracing off, the usual case, is decided without copying the settings (this runs per request).
    if (!(this.writer || this.exporter) || (!sampler && this.global.level.length === 0)) return undefined;
    const s = this.setting(model);
    if (s.level.length === 0) return undefined;
    const otel = s.mode === 'opentelemetry';
    if (otel ? !this.exporter : !this.writer || !s.file) return undefined;
    if (!(otel && context)) {
      if (s.rate <= 0) return undefined;
      // Triton's sampling: every rate-th request, counting from 1 (rate 9 traces the 9th, the 18th...).
      const n = sampler ? ++sampler.counter : ++this.globalCounter;
      if (n % s.rate !== 0) return undefined;
      const holder = sampler && sampler.override.count !== undefined ? sampler.override : this.global;
      if (holder.count === 0) return undefined;
      if (holder.count! > 0) holder.count!--;
    }
    const sink = otel ? (tr: Trace) => this.exporter!.export(tr) : (tr: Trace) => this.collect(tr, s);
    const t = new Trace(this.newId(), model, this.clock, sink, this.newId);
    if (otel) {
      if (context) t.context = context;
      // The OpenTelemetry ids are chosen now, so a model can be told its span's context while it runs.
      t.otelIds = { traceId: context ? context.traceparent.trim().slice(3, 35) : randomHex(16), spanId: randomHex(8) };
    }
    if (!otel && s.level.includes('TENSORS')) t.withTensors = true;
    if (startStamp) t.mark(startStamp.name, startStamp.ns);
    return t;
  }

  private collect(t: Trace, s: TraceSetting): void {
    let buf = this.files.get(s.file);
    if (!buf) this.files.set(s.file, (buf = { records: [], traces: 0, index: 0 }));
    buf.records.push(...t.records());
    buf.traces++;
    if (s.logFrequency > 0 && buf.traces >= s.logFrequency) this.writeOut(s.file, buf, true);
  }

  private writeOut(file: string, buf: FileBuffer, indexed: boolean): void {
    const path = indexed ? `${file}.${buf.index++}` : file;
    const text = JSON.stringify(buf.records);
    buf.records = [];
    buf.traces = 0;
    const p = this.writer!.write(path, text).catch((err) => this.log?.error(`failed to write trace file '${path}': ${String(err)}`));
    this.writes.add(p);
    void p.finally(() => this.writes.delete(p));
  }

  /** Writes every trace not yet written (call at shutdown). */
  async flush(): Promise<void> {
    for (const [file, buf] of this.files) {
      if (buf.traces === 0) continue;
      const freq = this.setting().logFrequency;
      this.writeOut(file, buf, freq > 0 || buf.index > 0);
    }
    await Promise.all([...this.writes]);
    await this.exporter?.flush();
  }
}

export type TraceAttribute = string | number | boolean | string[];

/**
 * One traced request's timestamps (steady-clock nanoseconds), with the traces of the requests it
 * made (ensemble steps, BLS calls) as children. Exporters read the public fields once it is emitted.
 */
export class Trace implements TraceStamps {
  version = -1;
  requestId = '';
  /** The caller's trace id for a child trace (an ensemble step, a BLS call); 0 for a top-level one. */
  parentId = 0;
  /** The client's W3C context the request arrived with ("opentelemetry" mode only). */
  context?: TraceContext;
  /** Why the request failed, when it did. */
  error?: string;
  readonly stamps: { name: string; ns: number }[] = [];
  /** The backend's own activities among `stamps` (the same objects), in the order it reported them. */
  readonly activities: { name: string; ns: number }[] = [];
  readonly children: Trace[] = [];
  /** Extra span attributes a front end knows (the GenAI ones for LLM requests). */
  readonly attributes: Record<string, TraceAttribute> = {};
  /** "opentelemetry" mode: the trace's id and its model span's id, in hex, chosen when it starts. */
  otelIds?: { traceId: string; spanId: string };
  /** Level TENSORS (Triton mode): the request's queued inputs and its backend's outputs are recorded. */
  withTensors = false;
  readonly tensors: { activity: string; tensor: { name: string; data: string; shape: string; dtype: string } }[] = [];
  private computing = 0;
  private finished = false;
  private emitted = false;
  /** A child trace ends with its request's final response; a top-level one when the transport says. */
  private child = false;

  constructor(
    readonly id: number, readonly model: string, private readonly clock: Clock, private readonly sink: (t: Trace) => void,
    private readonly newId: () => number,
  ) {}

  mark(name: string, ns = this.clock.nowNs()): void {
    this.stamps.push({ name, ns: Math.round(ns) });
  }

  /**
   * A backend's own activity (Triton's TRITONSERVER_InferenceTraceReportActivity): a stamp like the
   * others in the trace file; in "opentelemetry" mode NAME_START .. NAME_END pairs become spans of
   * their own, so the order they were reported in is kept beside the stamps.
   */
  activity(name: string, ns = this.clock.nowNs()): void {
    const stamp = { name, ns: Math.round(ns) };
    this.stamps.push(stamp);
    this.activities.push(stamp);
  }

  /** Records a tensor as Triton's TENSORS level writes it: values, shape and datatype as text. */
  tensor(activity: 'TENSOR_QUEUE_INPUT' | 'TENSOR_BACKEND_OUTPUT', t: Tensor): void {
    if (!this.withTensors) return;
    const data = Array.isArray(t.data)
      ? t.data.map((b) => new TextDecoder().decode(b)).join(',')
      : Array.from(t.data as ArrayLike<number | bigint>, (v) => String(v)).join(',');
    this.tensors.push({ activity, tensor: { name: t.name, data, shape: t.shape.join(','), dtype: t.datatype } });
  }

  /** The trace of a request this one's model makes to `model`; this trace waits for it. */
  spawn(model: string): Trace {
    this.computing++;
    const t = new Trace(this.newId(), model, this.clock, (c) => {
      this.children.push(c);
      this.computeEnd();
    }, this.newId);
    t.parentId = this.id;
    t.child = true;
    t.withTensors = this.withTensors;
    if (this.otelIds) t.otelIds = { traceId: this.otelIds.traceId, spanId: randomHex(8) };
    return t;
  }

  /**
   * The W3C context of this trace's model span in "opentelemetry" mode, as Triton hands it to a
   * Python model (`request.trace().get_context()`): `{"traceparent": "00-<trace>-<span>-01"}`.
   */
  get spanContext(): string | undefined {
    const ids = this.otelIds;
    return ids ? JSON.stringify({ traceparent: `00-${ids.traceId}-${ids.spanId}-01` }) : undefined;
  }

  requestEnd(error?: string): void {
    this.mark('REQUEST_END');
    if (error !== undefined) this.error ??= error;
    if (this.child) this.finish();
  }

  /** The whole tree, depth first (this trace first). */
  *all(): Generator<Trace> {
    yield this;
    for (const c of this.children) yield* c.all();
  }

  /** The transport is done with the request; the trace is written once no execution still stamps it. */
  finish(): void {
    this.finished = true;
    this.maybeEmit();
  }

  computeStart(): void {
    this.computing++;
  }

  computeEnd(): void {
    this.computing--;
    this.maybeEmit();
  }

  private maybeEmit(): void {
    if (!this.finished || this.computing > 0 || this.emitted) return;
    this.emitted = true;
    this.sink(this);
  }

  /** Triton's trace-file records for this trace and its children (children carry `parent_id`). */
  records(): unknown[] {
    const out: unknown[] = [];
    for (const t of this.all()) {
      const head: Record<string, unknown> = { id: t.id, model_name: t.model, model_version: t.version };
      if (t.requestId) head.request_id = t.requestId;
      if (t.parentId) head.parent_id = t.parentId;
      const timestamps = [...t.stamps].sort((a, b) => a.ns - b.ns);
      out.push(head, { id: t.id, timestamps });
      // Tensor records carry the top-level request's id, as Triton's trace file shows them for an
      // ensemble's steps (L0_cmdline_trace finds a step's outputs under id 1).
      for (const r of t.tensors) out.push({ id: this.id, ...r });
    }
    return out;
  }
}

/** `bytes` random bytes in lower-case hex (crypto.getRandomValues: in Node and every browser). */
function randomHex(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  let out = '';
  for (let i = 0; i < b.length; i++) out += b[i]!.toString(16).padStart(2, '0');
  return out;
}

/**
 * The W3C trace context a request's headers (HTTP) or metadata (gRPC) carry, if any. Only the shape
 * is checked here (the exporter parses it); a malformed one is ignored, as a propagator would.
 */
export function traceContextOf(header: (name: string) => string | undefined): TraceContext | undefined {
  const traceparent = header('traceparent');
  // W3C: all-zero trace and span ids are invalid, and a propagator would drop them.
  const m = traceparent && /^[\da-f]{2}-([\da-f]{32})-([\da-f]{16})-[\da-f]{2}/.exec(traceparent.trim());
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  const tracestate = header('tracestate');
  return tracestate ? { traceparent: traceparent!.trim(), tracestate } : { traceparent: traceparent!.trim() };
}

/** Sets the transport's request to carry `trace`; core hands it on to the request it queues. */
export function attachTrace(request: { trace?: TraceStamps }, trace: Trace): void {
  request.trace = trace;
}

export function traceOf(request: { trace?: TraceStamps }): TraceStamps | undefined {
  return request.trace;
}

/** Wraps a backend instance so traced requests get COMPUTE timestamps. */
export function tracedInstance(inner: BackendInstance, clock: Clock): BackendInstance {
  return {
    spec: inner.spec,
    pipelined: inner.pipelined,
    get device() {
      return inner.device;
    },
    get placement() {
      return inner.placement;
    },
    checkReady: inner.checkReady?.bind(inner),
    get memoryBytes() {
      return inner.memoryBytes;
    },
    // Not async: an untraced batch (the common case) hands back the backend's own promise, instead
    // of wrapping it in another one that costs every call extra microtask hops.
    execute(requests: BackendRequest[]): Promise<ExecutionTimes | void> {
      let traced: TraceStamps[] | undefined;
      for (const r of requests) {
        const t = r.trace;
        if (t) (traced ??= []).push(t);
      }
      if (!traced) {
        // A backend that throws synchronously still yields a rejected promise, as before.
        try {
          return inner.execute(requests);
        } catch (err) {
          return Promise.reject(err);
        }
      }
      return tracedExecute(inner, clock, requests, traced);
    },
    unload: () => inner.unload(),
  };
}

async function tracedExecute(inner: BackendInstance, clock: Clock, requests: BackendRequest[], traced: TraceStamps[]): Promise<ExecutionTimes | void> {
  const start = clock.nowNs();
  for (const t of traced) {
    t.mark('COMPUTE_START', start);
    t.computeStart();
  }
  try {
    const times = await inner.execute(requests);
    const end = clock.nowNs();
    for (const t of traced) {
      t.mark('COMPUTE_INPUT_END', start + (times ? times.computeInputNs : 0));
      t.mark('COMPUTE_OUTPUT_START', end - (times ? times.computeOutputNs : 0));
      t.mark('COMPUTE_END', end);
    }
    return times;
  } finally {
    for (const t of traced) t.computeEnd();
  }
}
