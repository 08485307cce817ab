/**
 * Conversions between the `inference.*` gRPC messages and core's InferRequest / InferResponse. Requests
 * arrive in proto-loader's plain shape (`keepCase, defaults, oneofs`: an unset message field is null,
 * each parameter names its `parameter_choice`), as wire-reader.ts reads ModelInferRequest: int64s are
 * numbers (bigints past 2^53), bytes are Buffers viewing the received message, typed `contents` lists
 * are typed arrays. Inputs may come as typed `contents`, as `raw_input_contents` (HTTP's binary layout)
 * or from a shared-memory region; responses always carry `raw_output_contents`, one entry per output,
 * as Triton's gRPC server does (FP16/BF16 have no typed list), written by wire-writer.ts. Parameters and
 * tensor descriptions are checked by core's shared rules (request-params.ts: kinds, reserved `triton_`
 * keys, shapes, datatypes) with Triton's gRPC texts (infer_handler.cc, grpc_utils.cc), where clients
 * may match on them.
 */

import {
  TsiError, elementSize, fromBytes, markRequestBody, putEntry, toBytes,
  INPUT_PARAMS, OUTPUT_PARAMS, REQUEST_PARAMS, RESERVED_PREFIX_MESSAGE_GRPC, TRITON_GRPC_PARAMS, checkDatatype, checkProtoParam, checkShape,
  type DataType, type InferRequest, type InferResponse, type Parameters, type ParamValue, type RequestedOutput, type ShmRef, type TensorData,
} from '../../core/index.js';
import { writeModelInferResponse, writeModelStreamInferResponse } from './wire-writer.js';

type Obj = Record<string, any>;

/** 64-bit integers: numbers when exact, bigints when not (proto-loader's decimal strings too). */
function int64(s: unknown): number | bigint {
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : BigInt(String(s));
}

/** One InferParameter (oneof parameter_choice) as a plain value; undefined when unset. */
export function paramValue(p: Obj | null | undefined): ParamValue | undefined {
  switch (p?.parameter_choice) {
    case 'bool_param': return Boolean(p.bool_param);
    case 'int64_param': return int64(p.int64_param);
    case 'uint64_param': return int64(p.uint64_param);
    case 'string_param': return String(p.string_param);
    case 'double_param': return Number(p.double_param);
    default: return undefined;
  }
}

/**
 * The request's parameters, each checked by core's table (request-params.ts) with Triton's gRPC texts
 * (infer_handler.cc SetInferenceRequestMetadata): reserved ones by their types, `triton_` keys refused
 * unless Triton lets gRPC clients send them, custom ones as int64, bool, string or double.
 */
function requestParams(p: Obj | null | undefined): Parameters {
  const out: Parameters = {};
  if (!p) return out;
  for (const k in p) {
    const v = p[k] as Obj | null;
    const choice = v?.parameter_choice;
    if (k.startsWith('triton_')) {
      if (!Object.hasOwn(TRITON_GRPC_PARAMS, k)) throw new TsiError('INVALID_ARG', RESERVED_PREFIX_MESSAGE_GRPC);
      checkProtoParam(TRITON_GRPC_PARAMS, k, choice);
    } else {
      checkProtoParam(REQUEST_PARAMS, k, choice);
      if (k === 'priority' && choice === 'int64_param' && String(v!.int64_param).startsWith('-')) {
        throw new TsiError('INVALID_ARG', `invalid value for 'priority', expected value >= 0.`);
      }
    }
    putEntry(out, k, paramValue(v)!);
  }
  return out;
}

/** Triton's ParseSharedMemoryParams for one tensor's parameters. */
function shmParams(name: string, p: Obj | null | undefined): ShmRef | undefined {
  const region = p?.shared_memory_region;
  const offset = p?.shared_memory_offset;
  const size = p?.shared_memory_byte_size;
  if (!region) {
    if (offset) throw new TsiError('INVALID_ARG', `'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor '${name}'`);
    if (size) throw new TsiError('INVALID_ARG', `'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor '${name}'`);
    return undefined;
  }
  checkProtoParam(INPUT_PARAMS, 'shared_memory_region', region.parameter_choice, name);
  if (offset) checkProtoParam(INPUT_PARAMS, 'shared_memory_offset', offset.parameter_choice, name);
  if (size) checkProtoParam(INPUT_PARAMS, 'shared_memory_byte_size', size.parameter_choice, name);
  if (!size) throw new TsiError('INVALID_ARG', `'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '${name}'`);
  const off = offset ? Number(paramValue(offset)) : 0;
  const bytes = Number(paramValue(size));
  if (off < 0 || bytes < 0) {
    throw new TsiError('INVALID_ARG', `invalid shared memory offset ${off} or byte size ${bytes} for tensor '${name}': expected non-negative integers`);
  }
  return { region: region.string_param, offset: off, byteSize: bytes };
}

const CONTENT_LIST: Partial<Record<DataType, string>> = {
  BOOL: 'bool_contents', INT8: 'int_contents', INT16: 'int_contents', INT32: 'int_contents', INT64: 'int64_contents',
  UINT8: 'uint_contents', UINT16: 'uint_contents', UINT32: 'uint_contents', UINT64: 'uint64_contents',
  FP32: 'fp32_contents', FP64: 'fp64_contents', BYTES: 'bytes_contents',
};
const LIST_TYPE: Record<string, string> = {
  bool_contents: 'BOOL', int_contents: 'INT32', int64_contents: 'INT64', uint_contents: 'UINT32', uint64_contents: 'UINT64',
  fp32_contents: 'FP32', fp64_contents: 'FP64', bytes_contents: 'BYTES',
};

/** A typed list as read (a typed array, or a JS array from proto-loader's codec) or absent. */
const listLength = (v: unknown): number => (v as ArrayLike<unknown> | undefined)?.length ?? 0;

function typedContents(name: string, model: string, dt: DataType, c: Obj): TensorData {
  const want = CONTENT_LIST[dt];
  for (const k in LIST_TYPE) {
    if (k !== want && listLength(c[k]) > 0) {
      throw new TsiError('INVALID_ARG',
        `unexpected explicit tensor data for input tensor '${name}' for model '${model}' of type '${LIST_TYPE[k]}', expected datatype '${dt}'`);
    }
  }
  if (!want) {
    throw new TsiError('INVALID_ARG', `input tensor '${name}' for model '${model}' is ${dt}, which has no typed contents: send it in raw_input_contents`);
  }
  const list: ArrayLike<any> = c[want] ?? [];
  // Lists whose wire type is the tensor's own (FP32, FP64, INT32, INT64, UINT32, UINT64) are used as read.
  switch (dt) {
    case 'BOOL': return list instanceof Uint8Array ? list : Uint8Array.from(list, (b: boolean) => (b ? 1 : 0));
    case 'INT8': return Int8Array.from(list);
    case 'INT16': return Int16Array.from(list);
    case 'INT32': return list instanceof Int32Array ? list : Int32Array.from(list);
    case 'UINT8': return Uint8Array.from(list);
    case 'UINT16': return Uint16Array.from(list);
    case 'UINT32': return list instanceof Uint32Array ? list : Uint32Array.from(list);
    case 'INT64': return list instanceof BigInt64Array ? list : BigInt64Array.from(list, (s) => BigInt(s));
    case 'UINT64': return list instanceof BigUint64Array ? list : BigUint64Array.from(list, (s) => BigInt(s));
    case 'FP32': return list instanceof Float32Array ? list : Float32Array.from(list);
    case 'FP64': return list instanceof Float64Array ? list : Float64Array.from(list);
    default: return Array.from(list as ArrayLike<Buffer>, (b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
  }
}

export interface DecodedGrpcRequest {
  request: InferRequest;
  shmInputs: (ShmRef & { index: number })[];
  shmOutputs: Map<string, ShmRef>;
}

/**
 * A request's `version` string as Triton's GetModelVersionFromString (common.cc) reads it: empty is the
 * latest; a negative number is refused (core's own "-1 = latest" is not for clients to send).
 */
export function grpcVersion(version: string | undefined): string | undefined {
  if (!version) return undefined;
  if (/^\s*-\d+$/.test(version)) {
    throw new TsiError('INVALID_ARG', `invalid model version specified '${version}' , version should be an integral value > 0`);
  }
  return version;
}

/**
 * A ModelInferRequest message as core's InferRequest plus its shared-memory references. `own`: the
 * received frame, when its buffer holds this message alone; it is marked as the request's own, so a
 * backend moves it to its worker whole with the raw inputs that view it rather than copying each.
 */
export function decodeInferRequest(msg: Obj, own?: Uint8Array): DecodedGrpcRequest {
  const model: string = msg.model_name ?? '';
  const version = grpcVersion(msg.model_version) ?? '';
  // Parameters first, as Triton reads them before the tensors.
  const parameters = requestParams(msg.parameters);
  const raw: Buffer[] = msg.raw_input_contents ?? [];
  let rawIndex = 0;
  const shmInputs: DecodedGrpcRequest['shmInputs'] = [];
  const inputs = (msg.inputs ?? []).map((io: Obj, index: number) => {
    const name: string = io.name;
    const dt = checkDatatype(io.datatype, `input '${name}'`, model);
    const dims: (number | string)[] = io.shape ?? [];
    const shape = new Array<number>(dims.length);
    for (let d = 0; d < dims.length; d++) shape[d] = Number(dims[d]);
    const count = checkShape(shape, name, model);
    const tensorParams: Parameters = {};
    for (const [k, v] of Object.entries(io.parameters ?? {})) {
      if (!k.startsWith('shared_memory_')) {
        const x = paramValue(v as Obj);
        if (x !== undefined) putEntry(tensorParams, k, x);
      }
    }
    const shm = shmParams(name, io.parameters);
    let data: TensorData;
    if (shm) {
      if (io.contents) {
        throw new TsiError('INVALID_ARG', `unexpected 'content' provided when using shared memory for input tensor '${name}' for model '${model}'`);
      }
      shmInputs.push({ ...shm, index });
      data = new Uint8Array(0);
    } else if (io.contents && raw.length > 0) {
      throw new TsiError('INVALID_ARG', `contents field must not be specified when using raw_input_contents for '${name}' for model '${model}'`);
    } else if (io.contents) {
      data = typedContents(name, model, dt, io.contents);
    } else if (rawIndex < raw.length) {
      const b = raw[rawIndex++]!;
      const es = elementSize(dt);
      if (es > 0 && b.byteLength !== count * es) {
        throw new TsiError('INVALID_ARG', `input byte size mismatch for input '${name}' for model '${model}'. Expected ${count * es}, got ${b.byteLength}`);
      }
      try {
        data = fromBytes(dt, new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
      } catch (err) {
        throw new TsiError('INVALID_ARG', `input '${name}' for model '${model}': ${(err as Error).message}`);
      }
    } else {
      throw new TsiError('INVALID_ARG', `unable to find data for input tensor '${name}' for model '${model}' in request.`);
    }
    return { name, datatype: dt, shape, data, parameters: tensorParams };
  });
  if (rawIndex < raw.length) {
    throw new TsiError('INVALID_ARG',
      `expected ${rawIndex} raw input contents but got ${raw.length} for model '${model}': raw_input_contents must have one entry per input that has no contents or shared memory`);
  }
  const shmOutputs = new Map<string, ShmRef>();
  const outputs: RequestedOutput[] = (msg.outputs ?? []).map((o: Obj) => {
    const shm = shmParams(o.name, o.parameters);
    const cls = o.parameters?.classification;
    const keep: Parameters = {};
    if (cls) {
      checkProtoParam(OUTPUT_PARAMS, 'classification', cls.parameter_choice);
      const n = Number(cls.int64_param);
      if (n <= 0) throw new TsiError('INVALID_ARG', `invalid value for 'classification' parameter, expected >= 0`);
      if (shm) throw new TsiError('INVALID_ARG', `output can't set both 'shared_memory_region' and 'classification'`);
      keep.classification = n;
    }
    if (shm) shmOutputs.set(o.name, shm);
    return { name: o.name, parameters: keep };
  });
  if (own) markRequestBody(own, inputs);
  const request: InferRequest = {
    model_name: model, model_version: version, inputs, parameters,
  };
  if (msg.id) request.id = msg.id;
  if (outputs.length > 0) request.outputs = outputs;
  return { request, shmInputs, shmOutputs };
}

/** A ModelInferResponse's bytes; outputs written to shared memory get an empty raw entry. */
export function encodeInferResponse(resp: InferResponse, inShm?: ReadonlySet<string>, extra?: Parameters): Buffer {
  return writeModelInferResponse(resp, inShm, extra);
}

/** A ModelStreamInferResponse's bytes: the answer to one request of a stream. */
export function encodeStreamResponse(resp: InferResponse, inShm?: ReadonlySet<string>, extra?: Parameters): Buffer {
  return writeModelStreamInferResponse(resp, '', inShm, extra);
}

/**
 * A ModelStreamInferResponse carrying an error, with what is known of the request it answers (and,
 * for an error the inference itself answered with, `extra` parameters such as triton_final_response).
 */
export function encodeStreamError(msg: Obj, err: TsiError, extra?: Parameters): Buffer {
  return writeModelStreamInferResponse(
    { id: msg.id ?? '', model_name: msg.model_name ?? '', model_version: msg.model_version ?? '', outputs: [] }, err.message, undefined, extra,
  );
}

/** LogSettings values (oneof bool/uint32/string) as plain JSON-like values, and back. */
export function logSettingsFromProto(settings: Obj | null | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(settings ?? {})) {
    const c = (v as Obj)?.parameter_choice;
    out[k] = c === 'bool_param' ? (v as Obj).bool_param : c === 'uint32_param' ? Number((v as Obj).uint32_param) : c === 'string_param' ? (v as Obj).string_param : null;
  }
  return out;
}

export function logSettingsToProto(json: Record<string, unknown>): Obj {
  const out: Obj = {};
  for (const [k, v] of Object.entries(json)) {
    out[k] = typeof v === 'boolean' ? { bool_param: v } : typeof v === 'number' ? { uint32_param: v } : { string_param: String(v) };
  }
  return out;
}
