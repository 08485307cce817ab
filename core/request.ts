/**
 * Validation at the public edge, done once: an InferRequest from any transport becomes a
 * PendingRequest that schedulers and backends trust (known inputs, right datatypes, shapes and byte
 * counts, batch size within max_batch_size, reserved parameters parsed). Error texts follow Triton's
 * infer_request.cc because clients and tests match on them.
 */

import type { BackendRequest, ResponsePayload, ResponseTiming } from './execution.js';
import { TsiError, invalidArg } from './errors.js';
import type { ModelConfig, ModelInput } from './config/model-config.js';
import { UINT64, describeValue, jsonKinds } from './protocol/request-params.js';
import { dataLength, shapeToString } from './tensor.js';
import { putEntry, type DataType, type InferRequest, type Parameters, type ParamValue, type Tensor, type TraceStamps } from './types.js';
import { configTypeToDatatype } from './config/pipeline.js';
import type { GenerationRequest } from './llm/params.js';

export type SequenceId = bigint | string;

export interface SequenceFlags {
  /** 0n / '' means "no sequence". */
  id: SequenceId;
  start: boolean;
  end: boolean;
}

export type ResponseSink = (response: ResponsePayload | TsiError, final: boolean) => void;

const RESERVED = new Set(['sequence_id', 'sequence_start', 'sequence_end', 'priority', 'timeout', 'binary_data_output', 'headers']);

/** Request-id prefix Triton puts on request errors. */
export function requestPrefix(id: string | undefined): string {
  return `[request id: ${id ? id : '<id_unknown>'}] `;
}

let nextInternalId = 1;

/** Sees the responses of the requests of one execution before their sinks do (see `joinExecution`). */
export interface ExecutionObserver {
  response(request: PendingRequest, index: number, response: ResponsePayload | TsiError, final: boolean): void;
  /** A backend's report of one response's timings, with the response's index within its request. */
  responseTiming?(responseIndex: number, timing: ResponseTiming): void;
}

/**
 * A validated request waiting in, or passing through, a scheduler. It is the BackendRequest a backend
 * sees; `send` forwards to the sink the server attached.
 */
export class PendingRequest implements BackendRequest {
  readonly id: string;
  readonly internalId = nextInternalId++;
  readonly inputs: Map<string, Tensor>;
  readonly requestedOutputs: string[];
  readonly parameters: Parameters;
  readonly batchSize: number;
  readonly priority: number;
  /** Requested timeout in microseconds, 0 when none. */
  readonly timeoutUs: number;
  /** Replaced by the sequence batcher for iterative sequences (an id it assigns, START only on the first run). */
  sequence: SequenceFlags | undefined;
  stateOutputs?: string[];
  /** Nanosecond timestamps (Clock.nowNs) for statistics. */
  receivedNs = 0;
  enqueuedNs = 0;
  /** Set by a scheduler's queue policy: absolute deadline in ns, 0 for none. */
  deadlineNs = 0;
  /** The client's request's trace, when traced (ModelVersion hands it over; a derived request has none). */
  trace?: TraceStamps;
  /** An `llm` request's parsed generation parameters, when its front end parsed them (InferRequest.generation). */
  generation?: GenerationRequest;
  private done = false;
  /** Set by the backend (`reschedule`) during an execution; runExecution reads and clears it. */
  rescheduled = false;
  /**
   * Installed by a scheduler that takes requests back (iterative sequences): called when an execution
   * releases the request, with whether the model asked to run it again.
   */
  onRelease?: (reschedule: boolean) => void;
  /** Cancellation: whether the client gave up, and who wants to know (made on first use). */
  private cancelState?: { cancelled: boolean; callbacks: (() => void)[] };
  private sink: ResponseSink;
  /** The execution this request is part of (see `joinExecution`), and its position in that batch. */
  private execution?: ExecutionObserver;
  private executionIndex = 0;
  /** The index the next reported response timing gets (Triton's response factory counts them). */
  private responseIndex = 0;

  constructor(init: {
    id: string; inputs: Map<string, Tensor>; requestedOutputs: string[]; parameters: Parameters;
    batchSize: number; priority: number; timeoutUs: number; sequence?: SequenceFlags; sink: ResponseSink;
  }) {
    this.id = init.id;
    this.inputs = init.inputs;
    this.requestedOutputs = init.requestedOutputs;
    this.parameters = init.parameters;
    this.batchSize = init.batchSize;
    this.priority = init.priority;
    this.timeoutUs = init.timeoutUs;
    this.sequence = init.sequence;
    this.sink = init.sink;
  }

  get completed(): boolean {
    return this.done;
  }

  get cancelled(): boolean {
    return this.cancelState?.cancelled === true;
  }

  onCancel(cb: () => void): void {
    const st = (this.cancelState ??= { cancelled: false, callbacks: [] });
    if (st.cancelled) cb();
    else st.callbacks.push(cb);
  }

  /** The client gave up: marks the request and tells whoever asked (a request already answered stays as it is). */
  cancel(): void {
    if (this.done) return;
    const st = (this.cancelState ??= { cancelled: false, callbacks: [] });
    if (st.cancelled) return;
    st.cancelled = true;
    const cbs = st.callbacks;
    st.callbacks = [];
    for (const cb of cbs) cb();
  }

  reschedule(): void {
    if (!this.done) this.rescheduled = true;
  }

  reportResponse(timing: ResponseTiming): void {
    this.execution?.responseTiming?.(this.responseIndex++, timing);
  }

  send(response: ResponsePayload | TsiError, final: boolean): void {
    if (this.done) return;
    if (final) this.done = true;
    if (this.execution !== undefined) this.execution.response(this, this.executionIndex, response, final);
    else this.sink(response, final);
  }

  /**
   * Puts `observer` in front of the sink, as the outermost wrapper: from now on every response goes
   * to `observer.response`, which passes it on with `deliver` (at once or later). runExecution's
   * cheaper equivalent of a `wrapSink` per request: no closures, and `index` says which request of
   * the batch answered. Sinks wrapped afterwards go inside the observer.
   */
  joinExecution(observer: ExecutionObserver, index: number): void {
    this.execution = observer;
    this.executionIndex = index;
  }

  /** Passes a response on to the sink, behind the execution observer. */
  deliver(response: ResponsePayload | TsiError, final: boolean): void {
    this.sink(response, final);
  }

  /** Replaces the sink, for schedulers that wrap responses (ordering, sequences, state). */
  wrapSink(wrap: (inner: ResponseSink) => ResponseSink): void {
    this.sink = wrap(this.sink);
  }

  /** A copy that shares inputs but has its own sink; used by ensembles and null sequence slots. */
  derive(over: Partial<{ inputs: Map<string, Tensor>; sink: ResponseSink; requestedOutputs: string[] }>): PendingRequest {
    const r = new PendingRequest({
      id: this.id, inputs: over.inputs ?? this.inputs, requestedOutputs: over.requestedOutputs ?? this.requestedOutputs,
      parameters: this.parameters, batchSize: this.batchSize, priority: this.priority, timeoutUs: this.timeoutUs,
      sequence: this.sequence, sink: over.sink ?? this.sink,
    });
    r.receivedNs = this.receivedNs;
    return r;
  }
}

/** A client's value quoted for a message, safely (describeValue for anything that is not a scalar). */
const quoted = (v: unknown) => JSON.stringify(typeof v === 'object' && v !== null ? describeValue(v) : String(v));

/** An unsigned 64-bit parameter (priority, timeout): Triton's uint64, here as a number. */
function paramUint(name: string, v: ParamValue, prefix: string): number {
  if ((jsonKinds(v) & UINT64) !== 0) return Number(v);
  throw invalidArg(`${prefix}parameter '${name}' must be a non-negative integer, got ${quoted(v)}`);
}

function paramBool(name: string, v: ParamValue, prefix: string): boolean {
  if (typeof v === 'boolean') return v;
  throw invalidArg(`${prefix}parameter '${name}' must be a boolean, got ${quoted(v)}`);
}

export interface ValidateOptions {
  modelName: string;
  config: ModelConfig;
  /** Inputs a scheduler supplies itself (sequence controls, implicit state): never required from clients. */
  internalInputs?: ReadonlySet<string>;
  sink: ResponseSink;
}

/** What validation needs of one config input, derived once per loaded config. */
interface InputRule {
  cfg: ModelInput;
  datatype: DataType;
  /** The config dims, and the full expected shape (with the -1 batch dimension when batching). */
  dims: number[];
  full: number[];
}

/** Per-config lookups, built once per loaded config rather than on every request. */
interface Lookups {
  inputs: Map<string, ModelInput>;
  rules: Map<string, InputRule>;
  requiredCount: number;
  outputNames: Set<string>;
  /** Every output name, shared by the requests that ask for no outputs in particular (never mutated). */
  allOutputs: string[];
}
const LOOKUPS = new WeakMap<ModelConfig, Lookups>();
function lookups(config: ModelConfig): Lookups {
  let l = LOOKUPS.get(config);
  if (!l) {
    const batching = (config.max_batch_size ?? 0) > 0;
    const rules = new Map<string, InputRule>();
    let requiredCount = 0;
    for (const i of config.input ?? []) {
      const dims = i.dims ?? [];
      rules.set(i.name!, { cfg: i, datatype: configTypeToDatatype(i.data_type!), dims, full: batching ? [-1, ...dims] : dims });
    }
    const inputs = new Map((config.input ?? []).map((i) => [i.name!, i]));
    for (const c of inputs.values()) if (!c.optional) requiredCount++;
    const outputNames = new Set((config.output ?? []).map((o) => o.name!));
    l = { inputs, rules, requiredCount, outputNames, allOutputs: Object.freeze([...outputNames]) as string[] };
    LOOKUPS.set(config, l);
  }
  return l;
}

/** An INVALID_ARG with Triton's request-id prefix; the prefix is only built on this (rare) path. */
function fail(req: InferRequest, msg: string): TsiError {
  return new TsiError('INVALID_ARG', requestPrefix(req.id) + msg);
}

/** Checks a request against a model's normalised config and builds the PendingRequest. */
export function validateRequest(req: InferRequest, opts: ValidateOptions): PendingRequest {
  const { config, modelName } = opts;
  const maxBatch = config.max_batch_size ?? 0;
  const { inputs: configInputs, rules, requiredCount, outputNames, allOutputs } = lookups(config);

  // Reserved parameters.
  const parameters: Parameters = {};
  let priority = 0;
  let timeoutUs = 0;
  let seqId: SequenceId | undefined;
  let seqStart = false;
  let seqEnd = false;
  const reqParams = req.parameters;
  if (reqParams !== undefined && reqParams !== null) {
    const keys = Object.keys(reqParams);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const v = reqParams[k]!;
      if (k.startsWith('triton_')) continue; // transport-level flags (checked by the transports)
      if (!RESERVED.has(k)) {
        putEntry(parameters, k, v);
        continue;
      }
      const prefix = requestPrefix(req.id);
      switch (k) {
        case 'priority': priority = paramUint(k, v, prefix); break;
        case 'timeout': timeoutUs = paramUint(k, v, prefix); break;
        case 'sequence_start': seqStart = paramBool(k, v, prefix); break;
        case 'sequence_end': seqEnd = paramBool(k, v, prefix); break;
        case 'binary_data_output': paramBool(k, v, prefix); break;
        case 'sequence_id':
          if (typeof v === 'string') seqId = v;
          else if (typeof v === 'bigint' && v >= 0n && v < 1n << 64n) seqId = v;
          else if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) seqId = BigInt(v);
          else if (typeof v === 'number' && Number.isInteger(v) && v > 0 && v < 2 ** 64) {
            throw fail(req, `parameter 'sequence_id' ${v} is past 2^53 and has lost digits as a JSON number: send it as a string`);
          } else throw fail(req, `parameter 'sequence_id' must be an unsigned integer or a string, got ${quoted(v)}`);
          break;
        default: break;
      }
    }
  }

  // Inputs: known names, no duplicates, datatypes, shapes, byte counts, one batch size.
  const inputs = new Map<string, Tensor>();
  let batchSize = -1;
  let required = 0;
  let stringCountError: string | undefined;
  const reqInputs = req.inputs;
  for (let i = 0; i < reqInputs.length; i++) {
    const t = reqInputs[i]!;
    // Triton's texts (infer_request.cc); the model named after them so a startswith match still holds.
    if (inputs.has(t.name)) throw fail(req, `input '${t.name}' already exists in request (model '${modelName}')`);
    const rule = rules.get(t.name);
    if (!rule) {
      if (opts.internalInputs?.has(t.name)) {
        throw fail(req, `input '${t.name}' for model '${modelName}' is supplied by the server (sequence control or state) and must not be sent`);
      }
      throw fail(req, `unexpected inference input '${t.name}' for model '${modelName}'`);
    }
    const expected = rule.datatype;
    if (t.datatype !== expected) {
      throw fail(req, `inference input '${t.name}' data-type is '${t.datatype}', but model '${modelName}' expects '${expected}'`);
    }
    const full = rule.full;
    const shape = t.shape;
    let shapeOk = shape.length === full.length;
    let count = 1;
    for (let d = 0; shapeOk && d < shape.length; d++) {
      const n = shape[d]!;
      if (n === -1) {
        throw fail(req, `All input dimensions should be specified for input '${t.name}' for model '${modelName}', got ${shapeToString(shape)}`);
      }
      if (!(Number.isInteger(n) && n >= 0 && (full[d] === -1 || full[d] === n))) shapeOk = false;
      count *= n;
    }
    if (!shapeOk) {
      let msg = `unexpected shape for input '${t.name}' for model '${modelName}'. Expected ${shapeToString(full)}, got ${shapeToString(shape)}.`;
      if (maxBatch > 0 && shape.length === rule.dims.length) {
        msg += ' NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape.'
          + ' If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero.'
          + ' See the model configuration docs for more info on max_batch_size.';
      }
      throw fail(req, msg);
    }
    if (count >= 2 ** 63) {
      throw fail(req, `invalid shape for input '${t.name}': shape ${shapeToString(shape)} causes total element count to exceed maximum size of 9223372036854775807`);
    }
    const got = dataLength(t.data);
    if (got !== count) {
      if (t.datatype === 'BYTES') {
        // Triton's texts (it stops counting at the first element too many). It reports the last such
        // input of the request first (its inputs sit in a hash map), so the report waits for the loop's end.
        stringCountError = got < count
          ? `expected ${count} string elements for inference input '${t.name}' for model '${modelName}', got ${got}`
          : `unexpected number of string elements ${count + 1} for inference input '${t.name}' for model '${modelName}', expecting ${count}`;
        continue;
      }
      const es = bytesPer(t.datatype);
      throw fail(req, `input byte size mismatch for input '${t.name}' for model '${modelName}'. Expected ${count * es}, got ${got * es}`);
    }
    if (maxBatch > 0) {
      const b = shape[0]!;
      if (batchSize === -1) batchSize = b;
      else if (b !== batchSize) {
        throw fail(req, `input '${t.name}' batch size ${b} does not match the batch size ${batchSize} of the other inputs for model '${modelName}'`);
      }
    }
    if (!rule.cfg.optional) required++;
    inputs.set(t.name, { name: t.name, datatype: t.datatype, shape: t.shape, data: t.data });
  }
  if (stringCountError !== undefined) throw fail(req, stringCountError);
  if (required !== requiredCount) {
    // Triton's text: the exact count when no input is optional, else the range; lists joined by ','.
    const quoted = (names: string[]) => `[${names.map((n) => `'${n}'`).join(',')}]`;
    const missing = [...configInputs.values()].filter((c) => !c.optional && !inputs.has(c.name!)).map((c) => c.name!);
    const expected = configInputs.size === requiredCount ? `${requiredCount} inputs` : `number of inputs between ${requiredCount} and ${configInputs.size}`;
    throw fail(
      req,
      `expected ${expected} but got ${inputs.size} inputs for model '${modelName}'. Got input(s) ${quoted([...inputs.keys()])}, but missing required input(s) ${quoted(missing)}. Please provide all required input(s).`,
    );
  }
  if (maxBatch > 0) {
    if (batchSize === -1) batchSize = 1;
    if (batchSize > maxBatch) throw fail(req, `inference request batch-size must be <= ${maxBatch} for '${modelName}'`);
    if (batchSize === 0) throw fail(req, `inference request batch-size must be >= 1 for '${modelName}'`);
  } else {
    batchSize = 1;
  }

  // Requested outputs.
  let requestedOutputs: string[];
  if (req.outputs && req.outputs.length > 0) {
    requestedOutputs = [];
    for (const o of req.outputs) {
      if (requestedOutputs.includes(o.name)) throw fail(req, `output '${o.name}' already exists in request (model '${modelName}')`);
      if (!outputNames.has(o.name)) throw fail(req, `unexpected inference output '${o.name}' for model '${modelName}'`);
      const cls = o.parameters?.classification;
      if (cls !== undefined && !(typeof cls === 'number' && Number.isInteger(cls) && cls > 0)) {
        throw fail(req, `output '${o.name}': 'classification' must be a positive integer, got ${quoted(cls)}`);
      }
      requestedOutputs.push(o.name);
    }
  } else {
    requestedOutputs = allOutputs;
  }

  let sequence: SequenceFlags | undefined;
  if (seqId !== undefined && seqId !== 0n && seqId !== '') sequence = { id: seqId, start: seqStart, end: seqEnd };
  else if (seqStart || seqEnd) sequence = { id: seqId ?? 0n, start: seqStart, end: seqEnd };

  return new PendingRequest({
    id: req.id ?? '', inputs, requestedOutputs, parameters, batchSize, priority, timeoutUs, sequence, sink: opts.sink,
  });
}

function bytesPer(dt: DataType): number {
  switch (dt) {
    case 'BOOL': case 'UINT8': case 'INT8': return 1;
    case 'UINT16': case 'INT16': case 'FP16': case 'BF16': return 2;
    case 'UINT32': case 'INT32': case 'FP32': return 4;
    default: return 8;
  }
}
