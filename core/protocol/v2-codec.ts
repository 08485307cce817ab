/**
 * The KServe v2 HTTP body formats: JSON tensors and Triton's binary tensor data extension
 * (`Inference-Header-Content-Length`, `binary_data_size`, BYTES length prefixes, raw single-input
 * bodies), both ways. Pure functions over bytes, shared by the Node server, the browser's `fetch` and
 * the Service Worker, so every runtime frames tensors identically. Every field a client controls is
 * checked by the rules of request-params.ts before it is used, with Triton's HTTP texts.
 */

import { TsiError, invalidArg } from '../errors.js';
import { parseInferJson, stringifyJson } from './json-exact.js';
import { requestPrefix } from '../request.js';
import type { ModelConfig } from '../config/model-config.js';
import { configTypeToDatatype } from '../config/pipeline.js';
import {
  INPUT_PARAMS, OUTPUT_PARAMS, REQUEST_PARAMS, RESERVED_PREFIX_MESSAGE, checkDatatype, checkJsonParam, checkJsonShape, describeValue,
  jsonKinds, type ParamRules, type ParamSite,
} from './request-params.js';
import {
  JSON_CHUNK, byteSize, concatBytes, elementCount, elementSize, fromBytes, fromJsonValues, jsonDataText, markRequestBuffer, toBytes, toJsonValues,
} from '../tensor.js';
import { putEntry, type InferInput, type InferRequest, type InferResponse, type Parameters, type ParamValue, type RequestedOutput } from '../types.js';

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

/** A JSON object (not null, not an array): what a request body or a nested parameter block must be. */
export const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A `parameters` object, each key checked by its rule (request-params.ts). On the request every
 * other key must be a scalar (it reaches the backend); on a tensor Triton ignores keys it does not know,
 * so non-scalar ones are dropped rather than refused.
 */
function jsonParams(v: unknown, rules: ParamRules, site: ParamSite, tensorLevel: boolean): Parameters {
  const out: Parameters = {};
  if (v === undefined) return out;
  if (!isObj(v)) {
    throw invalidArg(
      `failed to get ${site.tensor ? `parameters of ${site.tensor}` : 'request params'}.: attempt to get members for non-object (model '${site.model}': got ${describeValue(v)})`,
    );
  }
  for (const k in v) {
    const x = v[k];
    if (!tensorLevel && k.startsWith('triton_')) throw invalidArg(RESERVED_PREFIX_MESSAGE);
    if (tensorLevel && !Object.hasOwn(rules, k) && jsonKinds(x) === 0) continue;
    checkJsonParam(rules, k, x, site);
    putEntry(out, k, x as ParamValue);
  }
  return out;
}

/**
 * `binary_data_size` as a number the arithmetic after it can trust. The exact JSON reader hands
 * integers past 2^53 over as bigints (uint64 is their legal range on the wire), and no body is that
 * large: refused here, naming the parameter, rather than mixing a bigint into a sum further on.
 */
function byteParam(params: Parameters, key: string, what: string, model: string): number | undefined {
  const v = params[key];
  if (v === undefined) return undefined;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return v;
  throw invalidArg(`'${key}' ${String(v)} is out of range for ${what} for model '${model}': byte sizes and offsets are at most ${Number.MAX_SAFE_INTEGER}`);
}

/**
 * A shared-memory offset or byte size, as the client sent it. A bigint (past 2^53) goes on unchanged:
 * the region's checks (core/shared-memory.ts) compare it exactly and answer in Triton's words
 * (`Invalid offset for shared memory region`, `Integer overflow detected`) before any arithmetic.
 */
function shmParam(params: Parameters, key: string): number | undefined {
  return params[key] as number | undefined;
}

const unableToParse = (field: string, complaint: string, where: string, got: unknown) =>
  invalidArg(`Unable to parse '${field}': attempt to access JSON ${complaint} (${where}: got ${describeValue(got)})`);

/**
 * Parses a v2 infer body. `headerLength` is the Inference-Header-Content-Length header (undefined when
 * absent). `model` is needed only for the raw binary form (header length 0). Every field a client
 * controls is checked here or in request-params.ts before anything else reads it; texts are Triton's
 * (http_server.cc) with where and what tsi found added.
 */
export function decodeInferRequest(
  body: Uint8Array, headerLength: string | undefined, modelName: string, modelVersion: string | undefined,
  config: () => ModelConfig,
): DecodedRequest {
  let jsonEnd = body.byteLength;
  if (headerLength !== undefined) {
    const n = /^\s*\d+\s*$/.test(headerLength) ? Number(headerLength) : NaN;
    if (!Number.isSafeInteger(n)) throw invalidArg(`Unable to parse ${HEADER_LENGTH}, got: ${headerLength.slice(0, 64)}`);
    if (n === 0) return decodeRawBinary(body, modelName, modelVersion, config());
    if (n < 0 || n > body.byteLength) {
      throw invalidArg(`inference header size should be in range (0, ${body.byteLength}), got: ${n}`);
    }
    jsonEnd = n;
  }
  let header: unknown;
  try {
    header = parseInferJson(utf8.decode(body.subarray(0, jsonEnd)));
  } catch (err) {
    throw invalidArg(`failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  const model = modelName;
  if (!isObj(header)) throw invalidArg(`failed to parse the request JSON buffer: the request must be a JSON object, got ${describeValue(header)}`);
  const id = header.id;
  if (id !== undefined && typeof id !== 'string') throw unableToParse('id', 'non-string as string', `request for model '${model}'`, id);
  const parameters = jsonParams(header.parameters, REQUEST_PARAMS, { model }, false);
  if (!Array.isArray(header.inputs)) {
    const complaint = header.inputs === undefined ? `access non-existing object member 'inputs'` : `access JSON non-array as array`;
    throw invalidArg(`Unable to parse 'inputs': attempt to ${complaint} (request for model '${model}': expected an array of tensors, got ${describeValue(header.inputs)})`);
  }
  let offset = jsonEnd;
  const inputs: InferInput[] = [];
  const shmInputs: DecodedRequest['shmInputs'] = [];
  const rawInputs: unknown[] = header.inputs;
  for (let index = 0; index < rawInputs.length; index++) {
    const raw = rawInputs[index];
    if (!isObj(raw)) throw invalidArg(`input ${index} for model '${model}' must be a JSON object, got ${describeValue(raw)}`);
    const name = raw.name;
    if (typeof name !== 'string' || name === '') throw unableToParse('name', 'non-string as string', `input ${index} for model '${model}'`, name);
    const what = `input '${name}'`;
    const dt = checkDatatype(raw.datatype, what, model);
    const count = checkJsonShape(raw.shape, name, model);
    const shape = raw.shape as number[];
    const params = jsonParams(raw.parameters, INPUT_PARAMS, { model, tensor: what }, true);
    const binSize = byteParam(params, 'binary_data_size', what, model);
    const shm = params.shared_memory_region as string | undefined;
    const set: string[] = [];
    if (raw.data !== undefined) set.push(`'data'`);
    if (binSize !== undefined) set.push(`'binary_data_size' in 'parameters'`);
    if (shm !== undefined) set.push(`'shared_memory_region' in 'parameters'`);
    if (set.length !== 1) {
      throw invalidArg(
        `Input '${name}' must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But ${set.length === 0 ? 'no field is set' : `${set.join(' and ')} are set`}`,
      );
    }
    const rest: Parameters = {};
    for (const k in params) {
      if (k !== 'binary_data_size' && k !== 'shared_memory_region' && k !== 'shared_memory_offset' && k !== 'shared_memory_byte_size') putEntry(rest, k, params[k]!);
    }
    if (raw.data !== undefined) {
      if (count > 2 ** 50 && dt !== 'BYTES') byteSizeFits(name, shape, elementSize(dt));
      inputs.push({ name, datatype: dt, shape, data: fromJsonValues(dt, raw.data, `${what} for model '${model}'`), parameters: rest });
    } else if (binSize !== undefined) {
      if (offset + binSize > body.byteLength) {
        throw invalidArg(
          `unexpected end of binary data for input '${name}': 'binary_data_size' is ${binSize} but only ${body.byteLength - offset} byte(s) remain in the request body`,
        );
      }
      const bytes = body.subarray(offset, offset + binSize);
      offset += binSize;
      if (dt !== 'BYTES' && binSize !== count * elementSize(dt)) {
        throw invalidArg(
          `input byte size mismatch for input '${name}' for model '${model}'. Expected ${count * elementSize(dt)}, got ${binSize}`,
        );
      }
      let data;
      try {
        data = fromBytes(dt, bytes);
      } catch (err) {
        throw invalidArg(`${what} for model '${model}': ${(err as Error).message}`);
      }
      inputs.push({ name, datatype: dt, shape, data, parameters: rest });
    } else {
      const size = shmParam(params, 'shared_memory_byte_size');
      const shmOffset = shmParam(params, 'shared_memory_offset');
      if (size === undefined) {
        throw invalidArg(`'shared_memory_byte_size' must be specified along with 'shared_memory_region' for ${what} for model '${model}'`);
      }
      shmInputs.push({ index: inputs.length, region: shm!, offset: shmOffset ?? 0, byteSize: size });
      inputs.push({ name, datatype: dt, shape, data: new Uint8Array(0), parameters: rest });
    }
  }
  if (offset !== body.byteLength) {
    throw invalidArg(`unexpected additional input data for model '${model}': ${body.byteLength - offset} byte(s) of binary data were not claimed by any input's 'binary_data_size'`);
  }
  markRequestBody(body, inputs);
  const binaryDefault = parameters.binary_data_output === true;
  const encoding: OutputEncoding = { binaryDefault, binary: new Map() };
  const shmOutputs: DecodedRequest['shmOutputs'] = new Map();
  let outputs: RequestedOutput[] | undefined;
  if (header.outputs !== undefined) {
    if (!Array.isArray(header.outputs)) {
      throw invalidArg(`Unable to parse 'outputs': attempt to access JSON non-array as array (request for model '${model}': got ${describeValue(header.outputs)})`);
    }
    const rawOutputs: unknown[] = header.outputs;
    outputs = [];
    for (let i = 0; i < rawOutputs.length; i++) {
      const raw = rawOutputs[i];
      if (!isObj(raw) || typeof raw.name !== 'string') {
        throw unableToParse('name', 'non-string as string', `output ${i} for model '${model}'`, isObj(raw) ? raw.name : raw);
      }
      const name = raw.name;
      const what = `output '${name}'`;
      const p = jsonParams(raw.parameters, OUTPUT_PARAMS, { model, tensor: what }, true);
      if (p.shared_memory_region !== undefined) {
        if (p.classification !== undefined) {
          throw invalidArg(`Output can't set both 'shared_memory_region' and 'classification' (${what} for model '${model}')`);
        }
        if (p.binary_data === true) {
          throw invalidArg(`Output can't set both 'shared_memory_region' and 'binary_data' (${what} for model '${model}')`);
        }
        shmOutputs.set(name, {
          region: p.shared_memory_region as string, offset: shmParam(p, 'shared_memory_offset') ?? 0,
          byteSize: shmParam(p, 'shared_memory_byte_size') ?? 0,
        });
      }
      if (p.binary_data !== undefined) encoding.binary.set(name, p.binary_data === true);
      const keep: Parameters = {};
      // Triton reads a classification of 0 as "no classification".
      if (p.classification !== undefined && p.classification !== 0) keep.classification = p.classification;
      outputs.push({ name, parameters: keep });
    }
  }
  const request: InferRequest = { model_name: model, model_version: modelVersion, inputs, parameters };
  if (typeof id === 'string') request.id = id;
  if (outputs) request.outputs = outputs;
  return { request, encoding, shmInputs, shmOutputs };
}

const INT64_MAX = (1n << 63n) - 1n;

/** Triton's check that a JSON input's byte size fits int64 (its text); shapes this big are rare. */
function byteSizeFits(name: string, shape: readonly number[], size: number): void {
  const count = shape.reduce((n, d) => n * BigInt(d), 1n);
  if (size > 1 && count > INT64_MAX / BigInt(size)) {
    throw invalidArg(`byte size overflow for input '${name}': element count (${count}) * data type size (${size}) exceeds maximum allowed size (${INT64_MAX})`);
  }
}

/**
 * A body that has its buffer to itself (short of the padding that aligns its tensor data) is the
 * request's own: a backend may move it to another thread whole, with the inputs that view it, rather
 * than copy each out (a 2 GiB tensor would be held twice). A body that is a view of a buffer others
 * share (a pooled one) is left unmarked.
 */
export function markRequestBody(body: Uint8Array, inputs: readonly InferInput[]): void {
  if (body.byteOffset >= 8 || body.buffer.byteLength - body.byteLength >= 8) return;
  let views = 0;
  for (const i of inputs) {
    if (!Array.isArray(i.data)) {
      if ((i.data as ArrayBufferView).buffer === body.buffer) views++;
    } else if ((i.data[0] as Uint8Array | undefined)?.buffer === body.buffer) {
      // BYTES elements viewing the body: a backend counts only typed arrays, and moving the body
      // would empty these under whoever reads them next (another step of an ensemble).
      return;
    }
  }
  markRequestBuffer(body.buffer, views);
}

/** Triton's raw binary request: the body is the single input's bytes; batch 1; outputs binary. */
function decodeRawBinary(body: Uint8Array, modelName: string, modelVersion: string | undefined, config: ModelConfig): DecodedRequest {
  // Triton's texts (infer_request.cc), with its request-id prefix: a raw request has no id.
  const prefix = requestPrefix(undefined);
  const ins = config.input ?? [];
  if (ins.length !== 1) {
    throw invalidArg(`${prefix}Raw request must only have 1 input (found 1) to be deduced but got ${ins.length} inputs in '${modelName}' model configuration`);
  }
  const cfg = ins[0]!;
  const dt = configTypeToDatatype(cfg.data_type!);
  const dims = [...(cfg.dims ?? [])];
  const variable = dims.filter((d) => d === -1).length;
  if (variable > 1) {
    throw invalidArg(`${prefix}The shape of the raw input '${cfg.name}' can not be deduced because there are more than one variable-sized dimension`);
  }
  let data;
  if (dt === 'BYTES') {
    data = [body];
    if (variable > 0 || elementCount(dims) !== 1) {
      throw invalidArg(`${prefix}For BYTE datatype raw input '${cfg.name}', the model must have input shape [1]`);
    }
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
  const inputs = [{ name: cfg.name!, datatype: dt, shape, data }];
  markRequestBody(body, inputs);
  return {
    request: { model_name: modelName, model_version: modelVersion, inputs, parameters: {} },
    encoding: { binaryDefault: true, binary: new Map() },
    shmInputs: [],
    shmOutputs: new Map(),
  };
}

export interface EncodedResponse {
  /**
   * The body in pieces, to be sent back to back: the JSON header (one string, or several when a large
   * JSON `data` array was written by chunks) and each binary output's bytes (views of the outputs, not
   * copies). bodyBytes() joins them where one buffer is needed.
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

/**
 * Serialises a response: JSON data for JSON outputs, appended bytes for binary ones. The JSON is
 * JSON.stringify of { id?, model_name, model_version, parameters?, outputs: [{ name, datatype, shape,
 * data?, parameters? }] }; a `data` array of more than JSON_CHUNK elements is formatted a chunk at a
 * time (jsonDataText) and the header sent as pieces around it, never built whole as a JS array or a
 * string — the same bytes, at JSON.stringify's own cost.
 */
/** Whether a floating-point tensor holds NaN or an infinity (JSON.stringify would write null). */
function nonFinite(t: { datatype: string; data: unknown }): boolean {
  if (t.datatype !== 'FP32' && t.datatype !== 'FP64') return false;
  const d = t.data as Float32Array;
  for (let i = 0; i < d.length; i++) if (!Number.isFinite(d[i]!)) return true;
  return false;
}

export function encodeInferResponse(resp: InferResponse, encoding: OutputEncoding, skip?: ReadonlySet<string>): EncodedResponse {
  const binaries: Uint8Array[] = [];
  let chunked = false;
  const outputs = resp.outputs.map((t) => {
    const o: Record<string, unknown> = { name: t.name, datatype: t.datatype, shape: t.shape };
    const params: Parameters = { ...(t.parameters ?? {}) };
    let data: string[] | undefined;
    if (skip?.has(t.name)) {
      // Written to a shared-memory region by the transport; no data in the body.
    } else if (encoding.binary.get(t.name) ?? (encoding.binaryDefault || t.datatype === 'FP16' || t.datatype === 'BF16')) {
      const bytes = toBytes(t.data);
      params.binary_data_size = byteSize(t.data);
      binaries.push(bytes);
    } else if (t.data.length > JSON_CHUNK || t.datatype === 'INT64' || t.datatype === 'UINT64' || nonFinite(t)) {
      // 64-bit integers always through jsonDataText, which writes them exactly, and NaN and the
      // infinities, which it writes as Triton does.
      data = jsonDataText(t.datatype, t.data, t.name);
      chunked = true;
    } else {
      o.data = toJsonValues(t.datatype, t.data, t.name);
    }
    if (Object.keys(params).length > 0) o.parameters = params;
    return { o, data };
  });
  const head: Record<string, unknown> = {};
  if (resp.id !== undefined && resp.id !== '') head.id = resp.id;
  head.model_name = resp.model_name;
  head.model_version = resp.model_version;
  if (resp.parameters) head.parameters = resp.parameters;
  let texts: string[];
  if (!chunked) {
    head.outputs = outputs.map((x) => x.o);
    texts = [stringifyJson(head)];
  } else {
    // A placeholder last member, cut off again: `…,"outputs":` followed by the array written here.
    head.outputs = 0;
    let text = `${stringifyJson(head).slice(0, -2)}[`;
    texts = [];
    outputs.forEach(({ o, data }, i) => {
      if (i > 0) text += ',';
      if (!data) {
        text += stringifyJson(o);
        return;
      }
      // `data` goes between shape and parameters, where the object above would have had it.
      const { parameters, ...rest } = o;
      text += `${stringifyJson(rest).slice(0, -1)},"data":${data[0]!}`;
      for (let k = 1; k < data.length; k++) {
        texts.push(text);
        text = data[k]!;
      }
      text += parameters ? `,"parameters":${stringifyJson(parameters)}}` : '}';
    });
    texts.push(`${text}]}`);
  }
  if (binaries.length === 0) return { parts: texts, contentType: 'application/json' };
  let headerLength = 0;
  for (const s of texts) headerLength += utf8Length(s);
  return { parts: [...texts, ...binaries], headerLength, contentType: 'application/octet-stream' };
}

/** `{"error": "..."}` with a TsiError's message. */
export function errorBody(err: TsiError | string): string {
  return JSON.stringify({ error: typeof err === 'string' ? err : err.message });
}
