/**
 * Conversions between the client's tensors and parameters and the `inference.*` gRPC messages as
 * proto-loader presents them (`keepCase, longs: String, enums: String, defaults: true, oneofs: true`).
 * Inputs always travel as raw_input_contents (the byte layout of HTTP's binary extension); outputs are
 * read from raw_output_contents or, from servers that answer with typed contents, from those lists.
 * Pure functions, so the client file keeps only the transport.
 */

import { InferResult, normalizeInput, outputFromBytes, requestParameters, tensorBytes } from './tensor.js';
import { clientError } from './errors.js';
import type { DataType, OutputTensor, ParamValue, Parameters, TensorData } from '../core/types.js';
import type { InferInputSpec, InferOptions, RequestedOutputSpec, RequestTiming } from './types.js';

type Obj = Record<string, any>;

/** Reserved keys Triton's clients send as uint64 (tritonclient does the same for priority). */
const UINT64_KEYS = new Set(['priority']);

export function toInferParameter(key: string, v: ParamValue): Obj {
  if (typeof v === 'boolean') return { bool_param: v };
  if (typeof v === 'string') return { string_param: v };
  if (typeof v === 'bigint' || Number.isInteger(v)) {
    return UINT64_KEYS.has(key) ? { uint64_param: String(v) } : { int64_param: String(v) };
  }
  return { double_param: v };
}

export function toInferParameters(p: Parameters | undefined): Obj {
  const out: Obj = {};
  for (const [k, v] of Object.entries(p ?? {})) out[k] = toInferParameter(k, v);
  return out;
}

/** 64-bit integers arrive as decimal strings: numbers when exact, bigints when not. */
function int64(s: unknown): number | bigint {
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : BigInt(String(s));
}

export function fromInferParameters(p: Obj | null | undefined): Parameters {
  const out: Parameters = {};
  for (const [k, v] of Object.entries(p ?? {})) {
    const choice: string | undefined = v?.parameter_choice;
    if (!choice) continue;
    const x = v[choice];
    out[k] = choice === 'int64_param' || choice === 'uint64_param' ? int64(x) : x;
  }
  return out;
}

/** A ModelInferRequest message for `model` from caller inputs and options. */
export function buildInferRequest(model: string, specs: readonly InferInputSpec[], opts: InferOptions, extra?: Parameters): Obj {
  const raw: Uint8Array[] = [];
  const inputs = specs.map((spec) => {
    const t = normalizeInput(spec);
    const params: Parameters = { ...(t.parameters ?? {}) };
    if (t.sharedMemory) {
      params.shared_memory_region = t.sharedMemory.region;
      params.shared_memory_byte_size = t.sharedMemory.byteSize;
      if (t.sharedMemory.offset) params.shared_memory_offset = t.sharedMemory.offset;
    } else raw.push(tensorBytes(t.data!));
    return { name: t.name, datatype: t.datatype, shape: t.shape.map(String), parameters: toInferParameters(params) };
  });
  const outputs = (opts.outputs ?? []).map((s) => {
    const spec: RequestedOutputSpec = typeof s === 'string' ? { name: s } : s;
    const p: Parameters = { ...(spec.parameters ?? {}) };
    if (spec.classification !== undefined) p.classification = spec.classification;
    if (spec.sharedMemory) {
      p.shared_memory_region = spec.sharedMemory.region;
      p.shared_memory_byte_size = spec.sharedMemory.byteSize;
      if (spec.sharedMemory.offset) p.shared_memory_offset = spec.sharedMemory.offset;
    }
    return { name: spec.name, parameters: toInferParameters(p) };
  });
  return {
    model_name: model,
    model_version: opts.version === undefined ? '' : String(opts.version),
    id: opts.id ?? '',
    parameters: toInferParameters({ ...requestParameters(opts), ...extra }),
    inputs,
    outputs,
    raw_input_contents: raw,
  };
}

type Ctor = { from(a: ArrayLike<number>): TensorData };
const TYPED: Partial<Record<DataType, Ctor>> = {
  INT8: Int8Array, INT16: Int16Array, INT32: Int32Array, UINT8: Uint8Array, UINT16: Uint16Array, UINT32: Uint32Array,
  FP32: Float32Array, FP64: Float64Array,
};

/** Output data from InferTensorContents (servers that do not answer with raw contents). */
function fromContents(name: string, dt: DataType, c: Obj): TensorData {
  switch (dt) {
    case 'BOOL': return Uint8Array.from((c.bool_contents ?? []) as boolean[], (b) => (b ? 1 : 0));
    case 'INT64': return BigInt64Array.from((c.int64_contents ?? []) as string[], (s) => BigInt(s));
    case 'UINT64': return BigUint64Array.from((c.uint64_contents ?? []) as string[], (s) => BigInt(s));
    case 'BYTES': return ((c.bytes_contents ?? []) as Uint8Array[]).map((b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
    case 'FP32': return Float32Array.from(c.fp32_contents ?? []);
    case 'FP64': return Float64Array.from(c.fp64_contents ?? []);
    case 'UINT8': case 'UINT16': case 'UINT32': return TYPED[dt]!.from(c.uint_contents ?? []);
    case 'INT8': case 'INT16': case 'INT32': return TYPED[dt]!.from(c.int_contents ?? []);
    default: throw clientError(`output '${name}': ${dt} cannot travel as typed contents (raw only)`);
  }
}

/** InferResult from a ModelInferResponse message. */
export function parseInferResponse(msg: Obj, timing?: RequestTiming): InferResult {
  const outs: Obj[] = msg.outputs ?? [];
  const raw: Uint8Array[] = msg.raw_output_contents ?? [];
  const inShm = (o: Obj) => o.parameters?.shared_memory_region !== undefined;
  // Raw contents are one per output, or (tritonclient's reading) one per output not in shared memory.
  const skipShm = raw.length !== outs.length;
  let r = 0;
  const outputs: OutputTensor[] = outs.map((o) => {
    const name = String(o.name);
    const datatype = String(o.datatype) as DataType;
    let data: TensorData = new Uint8Array(0);
    if (inShm(o) && skipShm) {
      /* written to the region; no bytes here */
    } else if (r < raw.length) data = outputFromBytes(name, datatype, raw[r++]!);
    else if (o.contents) data = fromContents(name, datatype, o.contents);
    const t: OutputTensor = { name, datatype, shape: (o.shape ?? []).map(Number), data };
    const params = fromInferParameters(o.parameters);
    if (Object.keys(params).length) t.parameters = params;
    return t;
  });
  return new InferResult({
    model_name: msg.model_name ?? '',
    model_version: msg.model_version ?? '',
    id: msg.id || undefined,
    parameters: fromInferParameters(msg.parameters),
    outputs,
    timing,
  });
}
