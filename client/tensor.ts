/**
 * Tensors on the client side: turning what callers pass (typed arrays, plain arrays, strings) into
 * wire-ready tensors with a checked datatype and element count, and turning what servers return into
 * InferResult, whose outputs are typed arrays looked up by name. The byte layouts are core's (tensor.ts),
 * so client and server frame tensors identically; core's errors are rewrapped into the client's one type.
 */

import { DATATYPES, type DataType, type NumericArray, type Parameters, type TensorData } from '../core/types.js';
import { decodeString, elementCount, encodeString, fromBytes, fromJsonValues, toBytes } from '../core/tensor.js';
import { clientError, asClientError } from './errors.js';
import type { InferInputSpec, InferOptions, OutputTensor, RequestTiming, SharedMemoryRef } from './types.js';

/** A validated input: datatype known, data (or a shared-memory reference) matching the shape. */
export interface WireInput {
  name: string;
  datatype: DataType;
  shape: number[];
  data?: TensorData;
  sharedMemory?: SharedMemoryRef;
  parameters?: Parameters;
}

type Ctor = { new (n: number): NumericArray; from(a: ArrayLike<number> | ArrayLike<bigint>): NumericArray };

const CTOR: Record<Exclude<DataType, 'BYTES'>, Ctor> = {
  BOOL: Uint8Array, UINT8: Uint8Array, INT8: Int8Array, UINT16: Uint16Array, INT16: Int16Array,
  FP16: Uint16Array, BF16: Uint16Array, UINT32: Uint32Array, INT32: Int32Array, FP32: Float32Array,
  UINT64: BigUint64Array as unknown as Ctor, INT64: BigInt64Array as unknown as Ctor, FP64: Float64Array,
};

/** Datatype implied by a typed array; Uint8Array is UINT8 (say BOOL explicitly), Uint16Array UINT16. */
function impliedDatatype(data: unknown): DataType | undefined {
  if (data instanceof Float32Array) return 'FP32';
  if (data instanceof Float64Array) return 'FP64';
  if (data instanceof Int32Array) return 'INT32';
  if (data instanceof BigInt64Array) return 'INT64';
  if (data instanceof BigUint64Array) return 'UINT64';
  if (data instanceof Uint8Array) return 'UINT8';
  if (data instanceof Int8Array) return 'INT8';
  if (data instanceof Uint16Array) return 'UINT16';
  if (data instanceof Int16Array) return 'INT16';
  if (data instanceof Uint32Array) return 'UINT32';
  if (Array.isArray(data) && data.length > 0) {
    const x = data[0];
    if (typeof x === 'string' || x instanceof Uint8Array) return 'BYTES';
    if (typeof x === 'boolean') return 'BOOL';
    if (typeof x === 'bigint') return 'INT64';
  }
  return undefined;
}

function toNumeric(dt: Exclude<DataType, 'BYTES'>, data: ArrayLike<unknown>, name: string): NumericArray {
  const ctor = CTOR[dt];
  if (ArrayBuffer.isView(data) && data.constructor === ctor) return data as unknown as NumericArray;
  const big = dt === 'INT64' || dt === 'UINT64';
  const out = new ctor(data.length);
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (big) {
      if (typeof v === 'bigint') (out as BigInt64Array)[i] = v;
      else if (typeof v === 'number' && Number.isInteger(v)) (out as BigInt64Array)[i] = BigInt(v);
      else throw clientError(`input '${name}': element ${i} (${String(v)}) is not an integer for ${dt}`);
    } else if (typeof v === 'number') (out as Float64Array)[i] = v;
    else if (typeof v === 'boolean') (out as Uint8Array)[i] = v ? 1 : 0;
    else if (typeof v === 'bigint') (out as Float64Array)[i] = Number(v);
    else throw clientError(`input '${name}': element ${i} (${String(v)}) is not a number for ${dt}`);
  }
  return out;
}

/** Checks and converts one caller input. Throws InferenceServerError (source 'client') on a mismatch. */
export function normalizeInput(spec: InferInputSpec): WireInput {
  const { name } = spec;
  if (!name) throw clientError('every input needs a name');
  const shape = Array.from(spec.shape);
  if (!shape.every((d) => Number.isInteger(d) && d >= 0)) {
    throw clientError(`input '${name}': shape must be non-negative integers, got [${shape.join(',')}]`);
  }
  const datatype = spec.datatype ?? impliedDatatype(spec.data);
  if (!datatype) {
    throw clientError(`input '${name}': datatype is required for this data (plain numbers do not say INT32 or FP32)`);
  }
  if (!(DATATYPES as readonly string[]).includes(datatype)) throw clientError(`input '${name}': unknown datatype '${datatype}'`);
  const base: WireInput = { name, datatype, shape };
  if (spec.parameters) base.parameters = spec.parameters;
  if (spec.sharedMemory) {
    if (spec.data !== undefined) throw clientError(`input '${name}': give either data or sharedMemory, not both`);
    return { ...base, sharedMemory: spec.sharedMemory };
  }
  if (spec.data === undefined) throw clientError(`input '${name}': no data`);
  let data: TensorData;
  if (datatype === 'BYTES') {
    const src = spec.data as ArrayLike<unknown>;
    if (!Array.isArray(src)) throw clientError(`input '${name}': BYTES data must be an array of strings or Uint8Arrays`);
    data = src.map((v, i) => {
      if (typeof v === 'string') return encodeString(v);
      if (v instanceof Uint8Array) return v;
      throw clientError(`input '${name}': BYTES element ${i} must be a string or Uint8Array`);
    });
  } else {
    data = toNumeric(datatype, spec.data as ArrayLike<unknown>, name);
  }
  const expected = elementCount(shape);
  const got = (data as { length: number }).length;
  if (got !== expected) {
    throw clientError(`input '${name}': shape [${shape.join(',')}] holds ${expected} element(s) but the data has ${got}`);
  }
  return { ...base, data };
}

/** The reserved request parameters (sequence, priority, timeout) merged with the custom ones. */
export function requestParameters(opts: InferOptions): Parameters {
  const p: Parameters = { ...(opts.parameters ?? {}) };
  if (opts.sequenceId !== undefined && opts.sequenceId !== 0 && opts.sequenceId !== '') {
    p.sequence_id = opts.sequenceId;
    p.sequence_start = opts.sequenceStart ?? false;
    p.sequence_end = opts.sequenceEnd ?? false;
  }
  if (opts.priority !== undefined) p.priority = opts.priority;
  if (opts.timeout !== undefined) p.timeout = opts.timeout;
  return p;
}

/** Output data from raw little-endian bytes (HTTP binary section, gRPC raw_output_contents). */
export function outputFromBytes(name: string, datatype: string, bytes: Uint8Array): TensorData {
  try {
    return fromBytes(checkDatatype(name, datatype), bytes);
  } catch (err) {
    throw asClientError(err);
  }
}

/** Output data from JSON values (HTTP JSON outputs). */
export function outputFromJson(name: string, datatype: string, values: unknown): TensorData {
  try {
    return fromJsonValues(checkDatatype(name, datatype), values, `output '${name}'`);
  } catch (err) {
    throw asClientError(err);
  }
}

function checkDatatype(name: string, datatype: string): DataType {
  if (!(DATATYPES as readonly string[]).includes(datatype)) throw clientError(`output '${name}' has unknown datatype '${datatype}'`);
  return datatype as DataType;
}

export { toBytes as tensorBytes };

/**
 * A server's answer to one inference: outputs in the order the server sent them, found by name with
 * `output()`, `data()` or `strings()`. `timing` says where the call's time went.
 */
export class InferResult {
  readonly model_name: string;
  readonly model_version: string;
  readonly id?: string;
  readonly parameters?: Parameters;
  readonly outputs: OutputTensor[];
  readonly timing: RequestTiming;

  constructor(init: {
    model_name: string; model_version: string; id?: string; parameters?: Parameters; outputs: OutputTensor[]; timing?: RequestTiming;
  }) {
    this.model_name = init.model_name;
    this.model_version = init.model_version;
    if (init.id !== undefined && init.id !== '') this.id = init.id;
    if (init.parameters && Object.keys(init.parameters).length > 0) this.parameters = init.parameters;
    this.outputs = init.outputs;
    this.timing = init.timing ?? { sendNs: 0, waitNs: 0, recvNs: 0 };
  }

  output(name: string): OutputTensor | undefined {
    return this.outputs.find((o) => o.name === name);
  }

  /**
   * The output's contents: Float32Array for FP32, Int32Array for INT32, BigInt64Array for INT64, ...,
   * Uint8Array of 0/1 for BOOL, Uint16Array of raw bits for FP16/BF16, one Uint8Array per element for
   * BYTES. The type parameter only narrows the static type; it converts nothing.
   */
  data<T extends TensorData = TensorData>(name: string): T {
    const o = this.output(name);
    if (!o) throw clientError(`the response has no output '${name}' (it has: ${this.outputs.map((x) => x.name).join(', ') || 'none'})`);
    return o.data as T;
  }

  /** A BYTES output's elements decoded as UTF-8 (classification results, string models). */
  strings(name: string): string[] {
    const d = this.data(name);
    if (!Array.isArray(d)) throw clientError(`output '${name}' is not BYTES`);
    return (d as Uint8Array[]).map(decodeString);
  }
}

/** Monotonic nanoseconds, available in Node and browsers alike. */
export const nowNs = (): number => performance.now() * 1e6;
