/**
 * What Triton's Python example clients put on the wire, rebuilt without tritonclient (it cannot be
 * installed here): tritonclient.http's JSON header with binary tensors after it (`binary_data_size`,
 * per-output `binary_data`, `binary_data_output` when no outputs are named, sequence flags always in
 * threes), tritonclient.grpc's ModelInferRequest (tensors in `raw_input_contents`, parameters as
 * `int64_param`/`string_param`/`bool_param`), and the reading the clients do (`as_numpy`,
 * `get_output`, `InferenceServerException.message()`). Only what the example clients use.
 */

import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { status } from '@grpc/grpc-js';
import type { GrpcTestClient, Obj } from './grpc.js';
import { lengthPrefixedBytes } from './server.js';

export type NumpyArray =
  | Int8Array | Int16Array | Int32Array | BigInt64Array | Uint8Array | Uint16Array | Uint32Array | BigUint64Array
  | Float32Array | Float64Array;
/** `as_numpy` of a BYTES output: raw elements (binary), or str elements (JSON). */
export type NumpyResult = NumpyArray | Uint8Array[] | string[];

type Ctor = { new (n: number | ArrayBuffer): NumpyArray; BYTES_PER_ELEMENT: number };
const CTORS: Record<string, Ctor> = {
  BOOL: Uint8Array, INT8: Int8Array, INT16: Int16Array, INT32: Int32Array, INT64: BigInt64Array,
  UINT8: Uint8Array, UINT16: Uint16Array, UINT32: Uint32Array, UINT64: BigUint64Array, FP32: Float32Array, FP64: Float64Array,
};

/** A shared-memory slice, as `set_shared_memory(region, byte_size, offset)` names it. */
export interface ShmRef { region: string; byteSize: number; offset?: number }

/** An InferInput after `set_data_from_numpy` (HTTP: `binary_data`, default true) or `set_shared_memory`. */
export interface PyInput {
  name: string;
  shape: number[];
  datatype: string;
  data?: NumpyArray | Uint8Array[];
  binary?: boolean;
  shm?: ShmRef;
}

/** An InferRequestedOutput (HTTP: `binary_data`, default true; `class_count`), maybe in shared memory. */
export interface PyOutput { name: string; binary?: boolean; classCount?: number; shm?: ShmRef }

export interface PyInferOptions {
  outputs?: PyOutput[];
  modelVersion?: string;
  requestId?: string;
  sequenceId?: number | string;
  sequenceStart?: boolean;
  sequenceEnd?: boolean;
  /** HTTP `query_params`. */
  query?: Record<string, string | number>;
  /** HTTP headers / gRPC metadata. */
  headers?: Record<string, string>;
}

/** InferenceServerException: the server's message, and the HTTP status or the gRPC status name. */
export class PyServerError extends Error {
  constructor(message: string, readonly status: number | string) {
    super(message);
  }
}

/** utils.serialize_byte_tensor: each element as a 4-byte little-endian length and its bytes. */
export function serializeByteTensor(elements: readonly Uint8Array[]): Uint8Array {
  return lengthPrefixedBytes(elements);
}

/** utils.deserialize_bytes_tensor (at most `count` elements). */
export function deserializeBytesTensor(b: Uint8Array, count = Infinity): Uint8Array[] {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: Uint8Array[] = [];
  for (let off = 0; off < b.byteLength && out.length < count;) {
    const n = view.getUint32(off, true);
    out.push(b.slice(off + 4, off + 4 + n));
    off += 4 + n;
  }
  return out;
}

const utf8 = new TextEncoder();
export const bytes = (s: string): Uint8Array => utf8.encode(s);
const asBytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

function tensorBytes(data: NumpyArray | Uint8Array[]): Uint8Array {
  return Array.isArray(data) ? serializeByteTensor(data) : asBytes(data);
}

function numpyFromBytes(datatype: string, b: Uint8Array, count = Infinity): NumpyResult {
  if (datatype === 'BYTES') return deserializeBytesTensor(b, count);
  const ctor = CTORS[datatype]!;
  const n = Math.min(count, b.byteLength / ctor.BYTES_PER_ELEMENT);
  const copy = new Uint8Array(n * ctor.BYTES_PER_ELEMENT);
  copy.set(b.subarray(0, copy.byteLength));
  return new ctor(copy.buffer);
}

function numpyFromJson(datatype: string, data: unknown[]): NumpyResult {
  const flat = (data as unknown[]).flat(Infinity);
  if (datatype === 'BYTES') return flat as string[];
  const ctor = CTORS[datatype]!;
  const out = new ctor(flat.length);
  const big = datatype === 'INT64' || datatype === 'UINT64';
  flat.forEach((v, i) => ((out as unknown as (number | bigint)[])[i] = big ? BigInt(v as number) : Number(v)));
  return out;
}

/** An InferResult: the response (JSON header or ModelInferResponse), `as_numpy` and `get_output`. */
export interface PyResult {
  response: Obj;
  asNumpy(name: string): NumpyResult | undefined;
  getOutput(name: string): Obj | undefined;
}

// ---------------------------------------------------------------------------------------------
// tritonclient.http
// ---------------------------------------------------------------------------------------------

export class PyHttpClient {
  constructor(private readonly base: string) {}

  private url(path: string, query?: Record<string, string | number>): string {
    const q = query ? `?${Object.entries(query).map(([k, v]) => `${k}=${v}`).join('&')}` : '';
    return `${this.base}/${path}${q}`;
  }

  private async check(r: Response): Promise<Response> {
    if (r.status === 200) return r;
    const text = await r.text();
    let message = text;
    try {
      message = JSON.parse(text).error ?? text;
    } catch {
      /* a body that is not JSON is the message */
    }
    throw new PyServerError(message, r.status);
  }

  async get(path: string, query?: Record<string, string | number>): Promise<any> {
    const r = await this.check(await fetch(this.url(path, query)));
    const text = await r.text();
    return text ? JSON.parse(text) : undefined;
  }

  async post(path: string, body: unknown = '', query?: Record<string, string | number>): Promise<any> {
    const r = await this.check(await fetch(this.url(path, query), { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) }));
    const text = await r.text();
    return text ? JSON.parse(text) : undefined;
  }

  /** is_server_live / is_server_ready / is_model_ready: true on 200. */
  async ok(path: string, query?: Record<string, string | number>): Promise<boolean> {
    return (await fetch(this.url(path, query))).status === 200;
  }

  registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0): Promise<unknown> {
    return this.post(`v2/systemsharedmemory/region/${name}/register`, { key, offset, byte_size: byteSize });
  }

  unregisterSystemSharedMemory(name = ''): Promise<unknown> {
    return this.post(name ? `v2/systemsharedmemory/region/${name}/unregister` : 'v2/systemsharedmemory/unregister');
  }

  unregisterCudaSharedMemory(): Promise<unknown> {
    return this.post('v2/cudasharedmemory/unregister');
  }

  /** InferenceServerClient.infer: tritonclient.http's request body, and its reading of the answer. */
  async infer(model: string, inputs: PyInput[], opts: PyInferOptions = {}): Promise<PyResult> {
    const request: Obj = {};
    const parameters: Obj = {};
    if (opts.requestId) request.id = opts.requestId;
    if (opts.sequenceId !== undefined && opts.sequenceId !== 0 && opts.sequenceId !== '') {
      parameters.sequence_id = opts.sequenceId;
      parameters.sequence_start = opts.sequenceStart ?? false;
      parameters.sequence_end = opts.sequenceEnd ?? false;
    }
    const raw: Uint8Array[] = [];
    request.inputs = inputs.map((i) => {
      const t: Obj = { name: i.name, shape: i.shape, datatype: i.datatype };
      if (i.shm) {
        t.parameters = { shared_memory_region: i.shm.region, shared_memory_byte_size: i.shm.byteSize };
        if (i.shm.offset) t.parameters.shared_memory_offset = i.shm.offset;
      } else if (i.binary ?? true) {
        const b = tensorBytes(i.data!);
        raw.push(b);
        t.parameters = { binary_data_size: b.byteLength };
      } else {
        t.data = Array.isArray(i.data) ? i.data.map((e) => new TextDecoder('utf-8', { fatal: true }).decode(e))
          : Array.from(i.data as ArrayLike<number | bigint>, (v) => (typeof v === 'bigint' ? Number(v) : v));
      }
      return t;
    });
    if (opts.outputs?.length) {
      request.outputs = opts.outputs.map((o) => {
        const p: Obj = o.classCount ? { classification: o.classCount } : {};
        p.binary_data = o.binary ?? true;
        if (o.shm) {
          p.binary_data = false;
          p.shared_memory_region = o.shm.region;
          p.shared_memory_byte_size = o.shm.byteSize;
          if (o.shm.offset) p.shared_memory_offset = o.shm.offset;
        }
        return { name: o.name, parameters: p };
      });
    } else {
      parameters.binary_data_output = true;
    }
    if (Object.keys(parameters).length > 0) request.parameters = parameters;
    const json = utf8.encode(JSON.stringify(request));
    const body = new Uint8Array(json.byteLength + raw.reduce((n, b) => n + b.byteLength, 0));
    body.set(json);
    let off = json.byteLength;
    for (const b of raw) {
      body.set(b, off);
      off += b.byteLength;
    }
    const headers: Record<string, string> = { ...opts.headers };
    if (raw.length > 0) headers['Inference-Header-Content-Length'] = String(json.byteLength);
    const version = opts.modelVersion ? `/versions/${opts.modelVersion}` : '';
    const r = await this.check(await fetch(this.url(`v2/models/${model}${version}/infer`, opts.query), { method: 'POST', body, headers }));
    const all = new Uint8Array(await r.arrayBuffer());
    const hl = r.headers.get('Inference-Header-Content-Length');
    const jsonLength = hl === null ? all.byteLength : Number(hl);
    const response = JSON.parse(new TextDecoder().decode(all.subarray(0, jsonLength))) as Obj;
    const binaries = new Map<string, Uint8Array>();
    let at = jsonLength;
    for (const o of response.outputs ?? []) {
      const n = o.parameters?.binary_data_size;
      if (n === undefined) continue;
      binaries.set(o.name, all.subarray(at, at + n));
      at += n;
    }
    const getOutput = (name: string) => (response.outputs ?? []).find((o: Obj) => o.name === name);
    return {
      response,
      getOutput,
      asNumpy: (name) => {
        const o = getOutput(name);
        if (!o) return undefined;
        const b = binaries.get(name);
        if (b) return numpyFromBytes(o.datatype, b);
        return o.data ? numpyFromJson(o.datatype, o.data) : undefined;
      },
    };
  }
}

// ---------------------------------------------------------------------------------------------
// tritonclient.grpc
// ---------------------------------------------------------------------------------------------

/** tritonclient.grpc's ModelInferRequest for `infer`, `async_infer` and `async_stream_infer`. */
export function grpcInferRequest(model: string, inputs: PyInput[], opts: PyInferOptions = {}): Obj {
  const request: Obj = { model_name: model, model_version: opts.modelVersion ?? '', inputs: [], raw_input_contents: [], parameters: {} };
  if (opts.requestId) request.id = opts.requestId;
  for (const i of inputs) {
    const t: Obj = { name: i.name, datatype: i.datatype, shape: i.shape };
    if (i.shm) {
      t.parameters = {
        shared_memory_region: { string_param: i.shm.region },
        shared_memory_byte_size: { int64_param: String(i.shm.byteSize) },
        ...(i.shm.offset ? { shared_memory_offset: { int64_param: String(i.shm.offset) } } : {}),
      };
    } else {
      request.raw_input_contents.push(Buffer.from(tensorBytes(i.data!)));
    }
    request.inputs.push(t);
  }
  if (opts.outputs) {
    request.outputs = opts.outputs.map((o) => {
      const parameters: Obj = {};
      if (o.classCount) parameters.classification = { int64_param: String(o.classCount) };
      if (o.shm) {
        parameters.shared_memory_region = { string_param: o.shm.region };
        parameters.shared_memory_byte_size = { int64_param: String(o.shm.byteSize) };
        if (o.shm.offset) parameters.shared_memory_offset = { int64_param: String(o.shm.offset) };
      }
      return Object.keys(parameters).length > 0 ? { name: o.name, parameters } : { name: o.name };
    });
  }
  const id = opts.sequenceId;
  if (id !== undefined && id !== 0 && id !== '') {
    request.parameters.sequence_id = typeof id === 'string' ? { string_param: id } : { int64_param: String(id) };
    request.parameters.sequence_start = { bool_param: opts.sequenceStart ?? false };
    request.parameters.sequence_end = { bool_param: opts.sequenceEnd ?? false };
  }
  return request;
}

/** InferResult over a ModelInferResponse: `as_numpy` reads the output's raw_output_contents entry. */
export function grpcResult(response: Obj): PyResult {
  const outputs: Obj[] = response.outputs ?? [];
  const getOutput = (name: string) => outputs.find((o) => o.name === name);
  return {
    response,
    getOutput,
    asNumpy: (name) => {
      const index = outputs.findIndex((o) => o.name === name);
      if (index < 0) return undefined;
      const raw: Buffer | undefined = response.raw_output_contents?.[index];
      return raw ? numpyFromBytes(outputs[index]!.datatype, new Uint8Array(raw)) : undefined;
    },
  };
}

/** InferenceServerClient.infer over gRPC; a failed call throws the status's details, as the client does. */
export async function grpcInfer(client: GrpcTestClient, model: string, inputs: PyInput[], opts: PyInferOptions = {}): Promise<PyResult> {
  try {
    return grpcResult(await client.call('ModelInfer', grpcInferRequest(model, inputs, opts), opts.headers));
  } catch (err) {
    const e = err as { details?: string; code?: number };
    throw new PyServerError(e.details ?? String(err), e.code === undefined ? 'UNKNOWN' : status[e.code]!);
  }
}

// ---------------------------------------------------------------------------------------------
// tritonclient.utils.shared_memory: a POSIX region is /dev/shm/<key> on Linux
// ---------------------------------------------------------------------------------------------

export const SHM_AVAILABLE = process.platform === 'linux' && existsSync('/dev/shm');
const shmFile = (key: string) => `/dev/shm/${key.replace(/^\//, '')}`;

/** create_shared_memory_region: a zero-filled object of `byteSize` bytes. */
export function createShm(key: string, byteSize: number): void {
  writeFileSync(shmFile(key), Buffer.alloc(byteSize));
}

/** set_shared_memory_region: `chunks` one after another from `offset`. */
export function setShm(key: string, chunks: Uint8Array[], offset = 0): void {
  const b = readFileSync(shmFile(key));
  for (const c of chunks) {
    b.set(c, offset);
    offset += c.byteLength;
  }
  writeFileSync(shmFile(key), b);
}

/** get_contents_as_numpy: `shape`'s element count of `datatype` from `offset`. */
export function shmAsNumpy(key: string, datatype: string, shape: number[], offset = 0): NumpyResult {
  const b = new Uint8Array(readFileSync(shmFile(key)));
  return numpyFromBytes(datatype, b.subarray(offset), shape.reduce((a, d) => a * Number(d), 1));
}

/** destroy_shared_memory_region. */
export function destroyShm(key: string): void {
  rmSync(shmFile(key), { force: true });
}
