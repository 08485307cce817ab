/**
 * What a Python model asks of tsi besides answering requests: BLS calls into the server (any model:
 * ONNX, JavaScript, Python, ensembles, through their schedulers), custom metrics (onto /metrics),
 * log lines, and `is_model_ready`. One StubServices serves one stub process; when the process ends,
 * its metric references are given back and its BLS calls cancelled, since nobody is left to read them.
 *
 * BLS results are written into the process's input region and described on the channel; Python
 * copies them out and names the block in a later message's `fr`, which frees it (instance.ts).
 */

import {
  CustomMetrics, TsiError, asTsiError, type ErrorCode, type MetricFamily, type MetricSeries, type InferRequest, type InferResponse,
  type Logger, type ModelLoadContext, type Parameters, type Tensor, type TraceStamps,
} from '../../core/index.js';
import type { StubMessage } from './channel.js';
import type { StubProcess } from './process.js';

/** TRITONSERVER_Error_Code numbers, as pb_utils.TritonError.code() gives them. */
export const TRITON_CODES: ErrorCode[] = ['UNKNOWN', 'INTERNAL', 'NOT_FOUND', 'INVALID_ARG', 'UNAVAILABLE', 'UNSUPPORTED', 'ALREADY_EXISTS', 'CANCELLED'];
export const tritonCode = (code: ErrorCode): number => Math.max(0, TRITON_CODES.indexOf(code));
export const errorOfCode = (n: unknown): ErrorCode => TRITON_CODES[typeof n === 'number' ? n : 1] ?? 'UNKNOWN';

const FLAG_SEQUENCE_START = 1;
const FLAG_SEQUENCE_END = 2;

export class StubServices {
  private readonly handles = new Map<number, MetricFamily | MetricSeries>();
  private nextHandle = 1;
  private readonly cancels = new Map<number, () => void>();
  private closed = false;
  /** Triton's custom metrics API over the server's registry (absent where the server has none). */
  private readonly metrics?: CustomMetrics;

  constructor(
    private readonly proc: StubProcess, private readonly ctx: ModelLoadContext, private readonly tag: string,
    private readonly log: Logger,
    /** The trace of request `i` of execution `x`, if it is traced and still running. */
    private readonly traceOf: (x: number, i: number) => TraceStamps | undefined = () => undefined,
  ) {
    this.metrics = ctx.metrics && new CustomMetrics(ctx.metrics);
  }

  /** Handles `m` if it is one of ours; false when it is not. */
  handle(m: StubMessage, tensors: Tensor[]): boolean {
    switch (m.k) {
      case 'b':
        void this.bls(m, tensors);
        return true;
      case 'bc':
        this.cancels.get(m.id as number)?.();
        return true;
      case 'l':
        this.logLine(m.v as number, String(m.m), String(m.w ?? ''));
        return true;
      case 'mf': case 'mm': case 'mv': case 'imr':
        this.reply(m);
        return true;
      case 'lm': case 'um':
        void this.control(m);
        return true;
      case 'mo':
        try {
          const metric = this.metric(m.h);
          const v = m.v as number;
          if (m.op === 'increment') metric.increment(v);
          else if (m.op === 'set') metric.set(v);
          else metric.observe(v);
        } catch (err) {
          this.log.warn(`${this.tag}: metric ${String(m.op)} failed: ${asTsiError(err).message}`);
        }
        return true;
      case 'mr': {
        const h = this.handles.get(m.h as number);
        this.handles.delete(m.h as number);
        h?.release();
        return true;
      }
      default:
        return false;
    }
  }

  private logLine(level: number, msg: string, where: string): void {
    const text = `${this.tag}${where ? ` ${where}` : ''}: ${msg}`;
    if (level === 2) this.log.error(text);
    else if (level === 1) this.log.warn(text);
    else if (level === 3) this.log.verbose(1, text);
    else this.log.info(text);
  }

  private metric(h: unknown): MetricSeries {
    const m = this.handles.get(h as number);
    if (!m || !('increment' in m)) throw new TsiError('INVALID_ARG', 'Invalid metric operation as the corresponding metric has been deleted.');
    return m;
  }

  /** Answers a request that waits for its reply (`{k:'r', id, ...}`, or `err`). */
  private reply(m: StubMessage): void {
    const out: StubMessage = { k: 'r', id: m.id };
    try {
      const metrics = this.metrics;
      if (m.k === 'imr') out.v = this.ctx.server.isModelReady(String(m.model), m.version ? String(m.version) : undefined);
      else if (!metrics) throw new TsiError('UNAVAILABLE', 'custom metrics are not available in this server');
      else if (m.k === 'mf') {
        out.h = this.keep(metrics.family(String(m.name), String(m.desc), m.kind as 'COUNTER' | 'GAUGE' | 'HISTOGRAM'));
      } else if (m.k === 'mm') {
        const fam = this.handles.get(m.fam as number);
        if (!fam || !('metric' in fam)) throw new TsiError('INVALID_ARG', 'the MetricFamily of this metric has been deleted');
        out.h = this.keep(fam.metric((m.labels ?? {}) as Record<string, string>, (m.buckets ?? undefined) as number[] | undefined));
      } else out.v = this.metric(m.h).value();
    } catch (err) {
      out.err = asTsiError(err).message;
    }
    this.proc.send(out);
  }

  /** pb_utils.load_model / unload_model, through the repository extension's load and unload. */
  private async control(m: StubMessage): Promise<void> {
    const out: StubMessage = { k: 'r', id: m.id };
    try {
      const control = this.ctx.server.modelControl;
      if (!control) throw new TsiError('UNAVAILABLE', 'model control is not available in this server');
      const name = String(m.model);
      if (m.k === 'lm') {
        const params = new Map<string, string | Uint8Array>();
        if (m.config) params.set('config', String(m.config));
        for (const [k, v] of Object.entries((m.files ?? {}) as Record<string, string>)) params.set(k, Buffer.from(v, 'base64'));
        await control.load(name, params);
      } else {
        // Started, not waited for, as Triton's: a model may unload itself (or an ensemble it is a step
        // of) from execute, and the unload waits for that execute to end. A refusal (not explicit
        // mode) is already settled when the call returns, so the race raises it to the model.
        const unloading = control.unload(name, m.dependents === true);
        unloading.catch((err: unknown) => this.log.error(`${this.tag}: unloading '${name}' failed: ${asTsiError(err).message}`));
        await Promise.race([unloading, Promise.resolve()]);
      }
    } catch (err) {
      out.err = asTsiError(err).message;
    }
    this.proc.send(out);
  }

  private keep(h: MetricFamily | MetricSeries): number {
    const id = this.nextHandle++;
    this.handles.set(id, h);
    return id;
  }

  /** A BLS call: the request as core takes it, and every response written back as it comes. */
  private async bls(m: StubMessage, inputs: Tensor[]): Promise<void> {
    const id = m.id as number;
    const parameters = JSON.parse(String(m.p || '{}')) as Parameters;
    const corr = correlationIdOfWire(m.c);
    if (corr !== 0 && corr !== '') parameters.sequence_id = corr;
    const flags = (m.f as number) ?? 0;
    if (flags & FLAG_SEQUENCE_START) parameters.sequence_start = true;
    if (flags & FLAG_SEQUENCE_END) parameters.sequence_end = true;
    if ((m.to as number) > 0) parameters.timeout = m.to as number;
    const names = (m.o ?? []) as string[];
    const request: InferRequest = {
      model_name: String(m.m), model_version: (m.v as number) >= 0 ? String(m.v) : '', inputs, parameters,
      outputs: names.length > 0 ? names.map((name) => ({ name })) : undefined,
    };
    if (m.i) request.id = String(m.i);
    // `trace=request.trace()` of a traced request: the call is traced as that request's child (Triton).
    const tr = m.tr as [number, number] | undefined;
    const parent = tr ? this.traceOf(tr[0], tr[1]) : undefined;
    if (parent) request.trace = parent.spawn(request.model_name);
    const send = (r: InferResponse | TsiError, final: boolean) => this.blsReply(id, r, final);
    const onCancel = (cancel: () => void) => this.cancels.set(id, cancel);
    try {
      if (m.s) await this.ctx.server.inferStream(request, send, { onCancel });
      else {
        send(await this.ctx.server.infer(request, {
          onCancel,
          decoupledMessage: `model '${request.model_name}' uses the decoupled transaction policy: call exec(decoupled=True) for it`,
        }), true);
      }
    } catch (err) {
      send(asTsiError(err), true);
    } finally {
      this.cancels.delete(id);
    }
  }

  private blsReply(id: number, r: InferResponse | TsiError, final: boolean): void {
    if (this.closed || !this.proc.alive) return;
    if (r instanceof TsiError) {
      this.proc.send({ k: 'b', id, f: final, e: [tritonCode(r.code), r.message] });
      return;
    }
    const out: StubMessage = { k: 'b', id, f: final };
    if (r.outputs.length > 0) {
      const { block, descs } = this.proc.input!.writeTensors(r.outputs);
      out.t = descs;
      out.blk = block[0];
    }
    if (r.parameters && Object.keys(r.parameters).length > 0) out.p = JSON.stringify(r.parameters, bigints);
    this.proc.send(out);
  }

  /** The process ended: its metrics are released and its BLS calls cancelled. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const cancel of this.cancels.values()) cancel();
    this.cancels.clear();
    // Metrics before their families, so each family's last reference goes last.
    const all = [...this.handles.values()];
    this.handles.clear();
    for (const h of all) if ('increment' in h) h.release();
    for (const h of all) if (!('increment' in h)) h.release();
  }
}

/**
 * A correlation id on the stub channel, where JSON numbers are doubles on tsi's side: a number while
 * exact, a string id as itself, a uint64 past 2^53 as `{"u": "<decimal>"}` (the stub makes it a
 * Python int, and sends one back the same way).
 */
export function wireCorrelationId(id: bigint | string): number | string | { u: string } {
  if (typeof id === 'string') return id;
  return id <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(id) : { u: id.toString() };
}

/** The other way: what the stub sent as a correlation id. */
export function correlationIdOfWire(c: unknown): number | string | bigint {
  if (c !== null && typeof c === 'object' && typeof (c as { u?: unknown }).u === 'string') return BigInt((c as { u: string }).u);
  return c as number | string;
}

/** JSON.stringify replacer: 64-bit parameters (bigint) as numbers, as Triton's JSON writes them. */
export function bigints(_key: string, v: unknown): unknown {
  return typeof v === 'bigint' ? Number(v) : v;
}
