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
 * sets it on the InferRequest, ModelVersion hands it to the PendingRequest it creates, and
 * `tracedInstance` (wrapped around every backend instance) stamps queue and compute times. Untraced
 * requests pay one field read per execution. A trace is emitted once both the transport has finished and no execution is stamping it.
 */

import type { BackendInstance, BackendRequest, ExecutionTimes } from './backend.js';
import type { Clock, Logger, TraceStamps } from './types.js';

export type TraceLevel = 'TIMESTAMPS' | 'TENSORS';

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

export const DEFAULT_TRACE_SETTING: TraceSetting = { level: [], rate: 1000, count: -1, logFrequency: 0, file: '' };

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

  constructor(
    initial: Partial<TraceSetting>, private readonly clock: Clock, private readonly writer?: TraceWriter,
    private readonly log?: Logger,
  ) {
    this.global = { ...DEFAULT_TRACE_SETTING, ...initial };
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
        (this.global as unknown as Record<string, unknown>)[k] = v === null ? DEFAULT_TRACE_SETTING[k] : v;
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

  /** Whether a request to `model` is traced; if so, its Trace (already stamped `startStamp` if given). */
  sample(model: string, startStamp?: { name: string; ns: number }): Trace | undefined {
    const sampler = this.models.get(model);
    // Tracing off, the usual case, is decided without copying the settings (this runs per request).
    if (!this.writer || (!sampler && this.global.level.length === 0)) return undefined;
    const s = this.setting(model);
    if (s.level.length === 0 || s.rate <= 0 || !s.file) return undefined;
    const n = sampler ? sampler.counter++ : this.globalCounter++;
    if (n % s.rate !== 0) return undefined;
    const holder = sampler && sampler.override.count !== undefined ? sampler.override : this.global;
    if (holder.count === 0) return undefined;
    if (holder.count! > 0) holder.count!--;
    const t = new Trace(this.nextId++, model, this.clock, (tr) => this.collect(tr, s));
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
  }
}

/** One traced request's timestamps (steady-clock nanoseconds). */
export class Trace implements TraceStamps {
  version = -1;
  requestId = '';
  private readonly stamps: { name: string; ns: number }[] = [];
  private computing = 0;
  private finished = false;
  private emitted = false;

  constructor(readonly id: number, readonly model: string, private readonly clock: Clock, private readonly sink: (t: Trace) => void) {}

  mark(name: string, ns = this.clock.nowNs()): void {
    this.stamps.push({ name, ns: Math.round(ns) });
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

  records(): unknown[] {
    const head: Record<string, unknown> = { id: this.id, model_name: this.model, model_version: this.version };
    if (this.requestId) head.request_id = this.requestId;
    const timestamps = [...this.stamps].sort((a, b) => a.ns - b.ns);
    return [head, { id: this.id, timestamps }];
  }
}

/** Sets the transport's request to carry `trace`; core hands it on to the request it queues. */
export function attachTrace(request: { trace?: TraceStamps }, trace: Trace): void {
  request.trace = trace;
}

export function traceOf(request: { trace?: TraceStamps }): TraceStamps | undefined {
  return request.trace;
}

/** Wraps a backend instance so traced requests get REQUEST/QUEUE/COMPUTE timestamps. */
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
        if (!t) continue;
        (traced ??= []).push(t);
        const p = r as BackendRequest & { receivedNs?: number; enqueuedNs?: number };
        if (p.receivedNs) t.mark('REQUEST_START', p.receivedNs);
        if (p.enqueuedNs) t.mark('QUEUE_START', p.enqueuedNs);
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
