/**
 * The KServe v2 HTTP body formats: JSON tensors and Triton's binary tensor data extension
 * (`Inference-Header-Content-Length`, `binary_data_size`, BYTES length prefixes, raw single-input
 * bodies), both ways. Pure functions over bytes, shared by the Node server, the browser's `fetch` and
 * the Service Worker, so every runtime frames tensors identically.
 */

import { TsiError, invalidArg } from './errors.js';
import type { ModelConfig } from './model-config.js';
import { configTypeToDatatype } from './config.js';
import { byteSize, concatBytes, elementCount, elementSize, fromBytes, fromJsonValues, toBytes, toJsonValues } from './tensor.js';
import { DATATYPES, type DataType, type InferInput, type InferRequest, type InferResponse, type Parameters, type ParamValue, type RequestedOutput } from './types.js';

export const HEADER_LENGTH = 'Inference-Header-Content-Length';

/** How the client wants each output encoded. */
export interface OutputEncoding {
  binaryDefault: boolean;
  binary: Map<string, boolean>;
}

export interface DecodedRequest {
  request: InferRequest;
  encoding: OutputEncoding;
  /** Inputs that name a shared-memory region instead of carrying data, resolved by the transport. */
  shmInputs: { index: number; region: string; offset: number; byteSize: number }[];
  shmOutputs: Map<string, { region: string; offset: number; byteSize: number }>;
}

const utf8 = new TextDecoder();
const utf8Encoder = new TextEncoder();
const DATATYPE_SET: ReadonlySet<string> = new Set(DATATYPES);

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function jsonParams(v: unknown, where: string): Parameters | undefined {
  if (v === undefined) return undefined;
  if (!isObj(v)) throw invalidArg(`${where}: 'parameters' must be a JSON object`);
  const out: Parameters = {};
  for (const k in v) {
    const x = v[k];
    if (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean') out[k] = x as ParamValue;
    else throw invalidArg(`${where}: parameter '${k}' must be a string, number or boolean`);
  }
  return out;
}

/**
 * Parses a v2 infer body. `headerLength` is the Inference-Header-Content-Length header (undefined when
 * absent). `model` is needed only for the raw binary form (header length 0).
 */
export function decodeInferRequest(
  body: Uint8Array, headerLength: string | undefined, modelName: string, modelVersion: string | undefined,
  config: () => ModelConfig,
): DecodedRequest {
  let jsonEnd = body.byteLength;
  if (headerLength !== undefined) {
    const n = /^\s*\d+\s*$/.test(headerLength) ? Number(headerLength) : NaN;
    if (!Number.isSafeInteger(n)) throw invalidArg(`Unable to parse ${HEADER_LENGTH}, got: ${headerLength}`);
    if (n === 0) return decodeRawBinary(body, modelName, modelVersion, config());
    if (n < 0 || n > body.byteLength) {
      throw invalidArg(`inference header size should be in range (0, ${body.byteLength}), got: ${n}`);
    }
    jsonEnd = n;
  }
  let header: unknown;
  try {
    header = JSON.parse(utf8.decode(body.subarray(0, jsonEnd)));
  } catch (err) {
    throw invalidArg(`failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  if (!isObj(header)) throw invalidArg('failed to parse the request JSON buffer: the request must be a JSON object');
  const id = header.id;
  if (id !== undefined && typeof id !== 'string') throw invalidArg(`'id' must be a string, got ${JSON.stringify(id)}`);
  const parameters = jsonParams(header.parameters, 'request') ?? {};
  for (const k in parameters) {
    if (k.startsWith('triton_')) {
      throw invalidArg(`parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.`);
    }
  }
  if (!Array.isArray(header.inputs)) throw invalidArg(`Unable to find 'inputs' in the request JSON: it must be an array of tensors`);
  let offset = jsonEnd;
  const inputs: InferInput[] = [];
  const shmInputs: DecodedRequest['shmInputs'] = [];
  const rawInputs: unknown[] = header.inputs;
  for (let index = 0; index < rawInputs.length; index++) {
    const raw = rawInputs[index];
    if (!isObj(raw)) throw invalidArg(`input ${index} must be a JSON object`);
    const name = raw.name;
    if (typeof name !== 'string' || name === '') throw invalidArg(`input ${index} must have a string 'name'`);
    const datatype = raw.datatype;
    if (typeof datatype !== 'string' || !DATATYPE_SET.has(datatype)) {
      throw invalidArg(`input '${name}': invalid datatype ${JSON.stringify(datatype)}, expected one of ${DATATYPES.join(', ')}`);
    }
    const dt = datatype as DataType;
    const shape = raw.shape;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw invalidArg(`input '${name}': 'shape' must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
    }
    const params = jsonParams(raw.parameters, `input '${name}'`) ?? {};
    const binSize = params.binary_data_size;
    const shm = params.shared_memory_region;
    const set: string[] = [];
    if (raw.data !== undefined) set.push(`'data'`);
    if (binSize !== undefined) set.push(`'binary_data_size' in 'parameters'`);
    if (shm !== undefined) set.push(`'shared_memory_region' in 'parameters'`);
    if (set.length !== 1) {
      throw invalidArg(
        `Input '${name}' must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But ${set.length === 0 ? 'no field is set' : `${set.join(' and ')} are set`}`,
      );
    }
    const count = elementCount(shape as number[]);
    const rest: Parameters = {};
    for (const k in params) {
      if (k !== 'binary_data_size' && k !== 'shared_memory_region' && k !== 'shared_memory_offset' && k !== 'shared_memory_byte_size') rest[k] = params[k]!;
    }
    if (raw.data !== undefined) {
      inputs.push({ name, datatype: dt, shape: shape as number[], data: fromJsonValues(dt, raw.data, `input '${name}'`), parameters: rest });
    } else if (binSize !== undefined) {
      if (typeof binSize !== 'number' || !Number.isSafeInteger(binSize) || binSize < 0) {
        throw invalidArg(`input '${name}': 'binary_data_size' must be a non-negative integer`);
      }
      if (offset + binSize > body.byteLength) {
        throw invalidArg(
          `unexpected end of binary data for input '${name}': 'binary_data_size' is ${binSize} but only ${body.byteLength - offset} byte(s) remain in the request body`,
        );
      }
      const bytes = body.subarray(offset, offset + binSize);
      offset += binSize;
      if (dt !== 'BYTES' && binSize !== count * elementSize(dt)) {
        throw invalidArg(
          `input byte size mismatch for input '${name}' for model '${modelName}'. Expected ${count * elementSize(dt)}, got ${binSize}`,
        );
      }
      inputs.push({ name, datatype: dt, shape: shape as number[], data: fromBytes(dt, bytes), parameters: rest });
    } else {
      if (typeof shm !== 'string') throw invalidArg(`input '${name}': 'shared_memory_region' must be a string`);
      const off = params.shared_memory_offset ?? 0;
      const size = params.shared_memory_byte_size;
      if (typeof off !== 'number' || typeof size !== 'number') {
        throw invalidArg(`input '${name}': 'shared_memory_byte_size' (and optional 'shared_memory_offset') must be integers`);
      }
      shmInputs.push({ index: inputs.length, region: shm, offset: off, byteSize: size });
      inputs.push({ name, datatype: dt, shape: shape as number[], data: new Uint8Array(0), parameters: rest });
    }
  }
  if (offset !== body.byteLength) {
    throw invalidArg(`unexpected additional input data for model '${modelName}': ${body.byteLength - offset} byte(s) of binary data were not claimed by any input's 'binary_data_size'`);
  }
  const binaryDefault = parameters.binary_data_output === true;
  const encoding: OutputEncoding = { binaryDefault, binary: new Map() };
  const shmOutputs: DecodedRequest['shmOutputs'] = new Map();
  let outputs: RequestedOutput[] | undefined;
  if (header.outputs !== undefined) {
    if (!Array.isArray(header.outputs)) throw invalidArg(`'outputs' must be an array`);
    outputs = header.outputs.map((raw: unknown, i: number) => {
      if (!isObj(raw) || typeof raw.name !== 'string') throw invalidArg(`output ${i} must be an object with a string 'name'`);
      const p = jsonParams(raw.parameters, `output '${raw.name}'`) ?? {};
      if (p.binary_data !== undefined) encoding.binary.set(raw.name, p.binary_data === true);
      if (p.shared_memory_region !== undefined) {
        if (p.classification !== undefined) {
          throw invalidArg(`output '${raw.name}': 'classification' cannot be combined with 'shared_memory_region'`);
        }
        shmOutputs.set(raw.name, {
          region: String(p.shared_memory_region), offset: Number(p.shared_memory_offset ?? 0), byteSize: Number(p.shared_memory_byte_size ?? 0),
        });
      }
      const keep: Parameters = {};
      if (p.classification !== undefined) keep.classification = p.classification;
      return { name: raw.name, parameters: keep };
    });
  }
  const request: InferRequest = { model_name: modelName, model_version: modelVersion, inputs, parameters };
  if (typeof id === 'string') request.id = id;
  if (outputs) request.outputs = outputs;
  return { request, encoding, shmInputs, shmOutputs };
}

/** Triton's raw binary request: the body is the single input's bytes; batch 1; outputs binary. */
function decodeRawBinary(body: Uint8Array, modelName: string, modelVersion: string | undefined, config: ModelConfig): DecodedRequest {
  const ins = config.input ?? [];
  if (ins.length !== 1) {
    throw invalidArg(`raw binary request requires the model to have exactly 1 input, model '${modelName}' has ${ins.length}`);
  }
  const cfg = ins[0]!;
  const dt = configTypeToDatatype(cfg.data_type!);
  const dims = [...(cfg.dims ?? [])];
  const variable = dims.filter((d) => d === -1).length;
  if (variable > 1) throw invalidArg(`raw binary request for model '${modelName}' requires input '${cfg.name}' to have at most 1 variable dimension`);
  let data;
  if (dt === 'BYTES') {
    data = [body];
    for (let i = 0; i < dims.length; i++) if (dims[i] === -1) dims[i] = 1;
    if (elementCount(dims) !== 1) throw invalidArg(`raw binary request for model '${modelName}': a BYTES input must have shape [1]`);
  } else {
    const es = elementSize(dt);
    const fixed = elementCount(dims.filter((d) => d !== -1));
    if (variable === 1) {
      if (body.byteLength % (fixed * es) !== 0) {
        throw invalidArg(`raw binary request for model '${modelName}': ${body.byteLength} bytes is not a whole number of ${dt} rows of ${fixed} elements`);
      }
      dims[dims.indexOf(-1)] = body.byteLength / (fixed * es);
    } else if (body.byteLength !== fixed * es) {
      throw invalidArg(`input byte size mismatch for input '${cfg.name}' for model '${modelName}'. Expected ${fixed * es}, got ${body.byteLength}`);
    }
    data = fromBytes(dt, body);
  }
  const shape = (config.max_batch_size ?? 0) > 0 ? [1, ...dims] : dims;
  return {
    request: { model_name: modelName, model_version: modelVersion, inputs: [{ name: cfg.name!, datatype: dt, shape, data }], parameters: {} },
    encoding: { binaryDefault: true, binary: new Map() },
    shmInputs: [],
    shmOutputs: new Map(),
  };
}

export interface EncodedResponse {
  /**
   * The body in pieces, to be sent back to back: the JSON header (a string) and each binary output's
   * bytes (views of the outputs, not copies). bodyBytes() joins them where one buffer is needed.
   */
  parts: (string | Uint8Array)[];
  /** Set when any output is binary: the JSON header's length in UTF-8 bytes. */
  headerLength?: number;
  contentType: string;
}

/** Length in UTF-8 bytes (JSON.stringify never leaves a lone surrogate). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    // 2 bytes below U+0800, 3 up to U+FFFF; a surrogate pair (two code units) is 4.
    n += c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 1 : 2;
  }
  return n;
}

/** The parts of a body as one buffer. */
export function bodyBytes(parts: readonly (string | Uint8Array)[]): Uint8Array {
  return concatBytes(parts.map((p) => (typeof p === 'string' ? utf8Encoder.encode(p) : p)));
}

/** Serialises a response: JSON data for JSON outputs, appended bytes for binary ones. */
export function encodeInferResponse(resp: InferResponse, encoding: OutputEncoding, skip?: ReadonlySet<string>): EncodedResponse {
  const binaries: Uint8Array[] = [];
  const outputs = resp.outputs.map((t) => {
    const o: Record<string, unknown> = { name: t.name, datatype: t.datatype, shape: t.shape };
    const params: Parameters = { ...(t.parameters ?? {}) };
    if (skip?.has(t.name)) {
      // Written to a shared-memory region by the transport; no data in the body.
    } else if (encoding.binary.get(t.name) ?? (encoding.binaryDefault || t.datatype === 'FP16' || t.datatype === 'BF16')) {
      const bytes = toBytes(t.data);
      params.binary_data_size = byteSize(t.data);
      binaries.push(bytes);
    } else {
      o.data = toJsonValues(t.datatype, t.data);
    }
    if (Object.keys(params).length > 0) o.parameters = params;
    return o;
  });
  const head: Record<string, unknown> = {};
  if (resp.id !== undefined && resp.id !== '') head.id = resp.id;
  head.model_name = resp.model_name;
  head.model_version = resp.model_version;
  if (resp.parameters) head.parameters = jsonSafe(resp.parameters);
  head.outputs = outputs;
  const json = JSON.stringify(head);
  if (binaries.length === 0) return { parts: [json], contentType: 'application/json' };
  return { parts: [json, ...binaries], headerLength: utf8Length(json), contentType: 'application/octet-stream' };
}

function jsonSafe(p: Parameters): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [k, v] of Object.entries(p)) out[k] = typeof v === 'bigint' ? Number(v) : v;
  return out;
}

/** `{"error": "..."}` with a TsiError's message. */
export function errorBody(err: TsiError | string): string {
  return JSON.stringify({ error: typeof err === 'string' ? err : err.message });
}
