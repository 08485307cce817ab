/**
 * Validation at the public edge, done once: an InferRequest from any transport becomes a
 * PendingRequest that schedulers and backends trust (known inputs, right datatypes, shapes and byte
 * counts, batch size within max_batch_size, reserved parameters parsed). Error texts follow Triton's
 * infer_request.cc because clients and tests match on them.
 */

import type { BackendRequest, ResponsePayload } from './backend.js';
import { TsiError, invalidArg } from './errors.js';
import type { ModelConfig, ModelInput } from './model-config.js';
import { dataLength, elementCount, shapeToString } from './tensor.js';
import type { DataType, InferRequest, Parameters, ParamValue, Tensor } from './types.js';
import { configTypeToDatatype } from './config.js';

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
  readonly sequence: SequenceFlags | undefined;
  stateOutputs?: string[];
  /** Nanosecond timestamps (Clock.nowNs) for statistics. */
  receivedNs = 0;
  enqueuedNs = 0;
  /** Set by a scheduler's queue policy: absolute deadline in ns, 0 for none. */
  deadlineNs = 0;
  private done = false;
  private sink: ResponseSink;

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

  send(response: ResponsePayload | TsiError, final: boolean): void {
    if (this.done) return;
    if (final) this.done = true;
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

function paramInt(name: string, v: ParamValue, prefix: string): number {
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === 'bigint' && v >= 0n) return Number(v);
  if (typeof v === 'string' && /^\d+$/.test(v)) return Number(v);
  throw invalidArg(`${prefix}parameter '${name}' must be a non-negative integer, got ${JSON.stringify(String(v))}`);
}

function paramBool(name: string, v: ParamValue, prefix: string): boolean {
  if (typeof v === 'boolean') return v;
  throw invalidArg(`${prefix}parameter '${name}' must be a boolean, got ${JSON.stringify(String(v))}`);
}

export interface ValidateOptions {
  modelName: string;
  config: ModelConfig;
  /** Inputs a scheduler supplies itself (sequence controls, implicit state): never required from clients. */
  internalInputs?: ReadonlySet<string>;
  sink: ResponseSink;
}

/** Per-config name lookups, built once per loaded config rather than on every request. */
const LOOKUPS = new WeakMap<ModelConfig, { inputs: Map<string, ModelInput>; outputNames: Set<string> }>();
function lookups(config: ModelConfig) {
  let l = LOOKUPS.get(config);
  if (!l) {
    l = {
      inputs: new Map((config.input ?? []).map((i) => [i.name!, i])),
      outputNames: new Set((config.output ?? []).map((o) => o.name!)),
    };
    LOOKUPS.set(config, l);
  }
  return l;
}

/** Checks a request against a model's normalised config and builds the PendingRequest. */
export function validateRequest(req: InferRequest, opts: ValidateOptions): PendingRequest {
  const { config, modelName } = opts;
  const prefix = requestPrefix(req.id);
  const fail = (msg: string) => new TsiError('INVALID_ARG', prefix + msg);
  const maxBatch = config.max_batch_size ?? 0;
  const { inputs: configInputs, outputNames } = lookups(config);

  // Reserved parameters.
  const parameters: Parameters = {};
  let priority = 0;
  let timeoutUs = 0;
  let seqId: SequenceId | undefined;
  let seqStart = false;
  let seqEnd = false;
  for (const [k, v] of Object.entries(req.parameters ?? {})) {
    if (k.startsWith('triton_')) continue; // transport-level flags (checked by the transports)
    if (!RESERVED.has(k)) {
      parameters[k] = v;
      continue;
    }
    switch (k) {
      case 'priority': priority = paramInt(k, v, prefix); break;
      case 'timeout': timeoutUs = paramInt(k, v, prefix); break;
      case 'sequence_start': seqStart = paramBool(k, v, prefix); break;
      case 'sequence_end': seqEnd = paramBool(k, v, prefix); break;
      case 'sequence_id':
        if (typeof v === 'string') seqId = v;
        else if (typeof v === 'bigint' && v >= 0n) seqId = v;
        else if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) seqId = BigInt(v);
        else throw fail(`parameter 'sequence_id' must be an unsigned integer or a string, got ${JSON.stringify(String(v))}`);
        break;
      default: break;
    }
  }

  // Inputs: known names, no duplicates, datatypes, shapes, byte counts, one batch size.
  const inputs = new Map<string, Tensor>();
  let batchSize = -1;
  for (const t of req.inputs) {
    const cfg = configInputs.get(t.name);
    if (!cfg) {
      if (opts.internalInputs?.has(t.name)) {
        throw fail(`input '${t.name}' for model '${modelName}' is supplied by the server (sequence control or state) and must not be sent`);
      }
      throw fail(`unexpected inference input '${t.name}' for model '${modelName}'`);
    }
    if (inputs.has(t.name)) throw fail(`input '${t.name}' is specified more than once for model '${modelName}'`);
    const expected: DataType = configTypeToDatatype(cfg.data_type!);
    if (t.datatype !== expected) {
      throw fail(`inference input '${t.name}' data-type is '${t.datatype}', but model '${modelName}' expects '${expected}'`);
    }
    const dims = cfg.dims ?? [];
    const full = maxBatch > 0 ? [-1, ...dims] : dims;
    const shape = t.shape;
    let shapeOk = shape.length === full.length && shape.every((d, i) => Number.isInteger(d) && d >= 0 && (full[i] === -1 || full[i] === d));
    // Triton also accepts a batch-less shape for a [1] "reshape: []" style input? No: shapes must match exactly.
    if (!shapeOk) {
      let msg = `unexpected shape for input '${t.name}' for model '${modelName}'. Expected ${shapeToString(full)}, got ${shapeToString(shape)}.`;
      if (maxBatch > 0 && shape.length === dims.length) {
        msg += ' NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape.'
          + ' If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero.'
          + ' See the model configuration docs for more info on max_batch_size.';
      }
      throw fail(msg);
    }
    const count = elementCount(shape);
    const got = dataLength(t.data);
    if (got !== count) {
      if (t.datatype === 'BYTES') {
        throw fail(`input '${t.name}' for model '${modelName}' has ${got} BYTES elements, but shape ${shapeToString(shape)} needs ${count}`);
      }
      const es = bytesPer(t.datatype);
      throw fail(`input byte size mismatch for input '${t.name}' for model '${modelName}'. Expected ${count * es}, got ${got * es}`);
    }
    if (maxBatch > 0) {
      const b = shape[0]!;
      if (batchSize === -1) batchSize = b;
      else if (b !== batchSize) {
        throw fail(`input '${t.name}' batch size ${b} does not match the batch size ${batchSize} of the other inputs for model '${modelName}'`);
      }
    }
    inputs.set(t.name, { name: t.name, datatype: t.datatype, shape: t.shape, data: t.data });
  }
  const missing = [...configInputs.values()].filter((c) => !c.optional && !inputs.has(c.name!)).map((c) => c.name!);
  if (missing.length > 0) {
    const got = [...inputs.keys()].map((n) => `'${n}'`).join(', ');
    throw fail(
      `expected ${configInputs.size} inputs but got ${inputs.size} inputs for model '${modelName}'. Got input(s) [${got}], but missing required input(s) [${missing.map((n) => `'${n}'`).join(', ')}]. Please provide all required input(s).`,
    );
  }
  if (maxBatch > 0) {
    if (batchSize === -1) batchSize = 1;
    if (batchSize > maxBatch) throw fail(`inference request batch-size must be <= ${maxBatch} for '${modelName}'`);
    if (batchSize === 0) throw fail(`inference request batch-size must be >= 1 for '${modelName}'`);
  } else {
    batchSize = 1;
  }

  // Requested outputs.
  let requestedOutputs: string[];
  if (req.outputs && req.outputs.length > 0) {
    requestedOutputs = [];
    for (const o of req.outputs) {
      if (!outputNames.has(o.name)) throw fail(`unexpected inference output '${o.name}' for model '${modelName}'`);
      if (requestedOutputs.includes(o.name)) throw fail(`output '${o.name}' is requested more than once for model '${modelName}'`);
      const cls = o.parameters?.classification;
      if (cls !== undefined && !(typeof cls === 'number' && Number.isInteger(cls) && cls > 0)) {
        throw fail(`output '${o.name}': 'classification' must be a positive integer, got ${JSON.stringify(String(cls))}`);
      }
      requestedOutputs.push(o.name);
    }
  } else {
    requestedOutputs = [...outputNames];
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
