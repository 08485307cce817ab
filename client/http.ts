/**
 * HttpClient: the KServe v2 HTTP protocol over `fetch`, so one file serves Node and browsers (no
 * `node:*`, no Buffer). Tensors travel with Triton's binary extension by default (JSON on request),
 * request bodies can be gzip/deflate-compressed with CompressionStream, and infer responses can be
 * asked for compressed. Every failure becomes an InferenceServerError with the HTTP status and the
 * server's `{"error": ...}` text. Works against tsi, Triton or any v2 server.
 */

import { clientError, InferenceServerError } from './errors.js';
import { base64, dropNulls, indexEntry, modelMetadata, modelStatistics, shmRegion } from './normalize.js';
import { InferResult, normalizeInput, nowNs, outputFromBytes, outputFromJson, requestParameters, tensorBytes, type WireInput } from './tensor.js';
import { concatBytes, decodeString } from '../core/tensor.js';
import { parseInferJson, parseJson, stringifyJson } from '../core/protocol/json-exact.js';
import type { DataType, OutputTensor, Parameters, TensorData } from '../core/types.js';
import type {
  CallOptions, InferInputSpec, InferOptions, LoadModelOptions, LogSettings, ModelConfig, ModelMetadata,
  ModelStatistics, RepositoryIndexEntry, RequestedOutputSpec, ServerMetadata, SystemSharedMemoryRegion, TraceSettings,
  TraceSettingsUpdate, UnloadModelOptions,
} from './types.js';
import type { InferenceClient } from './inference-client.js';

export const HEADER_LENGTH = 'Inference-Header-Content-Length';

/** The part of a fetch Response the client reads; the platform's Response satisfies it. */
export interface ResponseLike {
  readonly ok: boolean;
  readonly status: number;
  readonly statusText: string;
  readonly headers: { get(name: string): string | null };
  readonly body: ReadableStream<Uint8Array> | null;
  arrayBuffer(): Promise<ArrayBuffer>;
  text(): Promise<string>;
}

/** What HttpClient calls to send: the platform's `fetch`, or a lighter one such as nodeHttpFetch. */
export type FetchLike = (url: string, init: RequestInit) => Promise<ResponseLike>;

export interface HttpClientOptions {
  /** `http://host:port` or `https://host:port` (a bare `host:port` means http). */
  url: string;
  /** Headers sent with every call (auth, restricted-API keys). */
  headers?: Record<string, string>;
  /** An API key (`tsi-node serve --api-key`), sent as `Authorization: Bearer <key>` with every call. */
  apiKey?: string;
  /**
   * A fetch to use instead of the global one (tests, custom agents, nodeHttpFetch). In Node, HTTPS with
   * a private CA or a client certificate goes through `nodeHttpFetch({ ca, cert, key })`; browsers use
   * the certificates the browser trusts.
   */
  fetch?: FetchLike;
  /** Compress request bodies. */
  requestCompression?: 'gzip' | 'deflate';
  /**
   * Ask for compressed infer responses. Unset, Node's fetch is told `identity`, because its default
   * `Accept-Encoding: gzip, deflate` would make servers compress every response (browsers choose
   * their own Accept-Encoding and ignore this).
   */
  responseCompression?: 'gzip' | 'deflate';
  timeoutMs?: number;
  /** Defaults for InferOptions.binaryInputs / binaryOutputs (both true). */
  binaryInputs?: boolean;
  binaryOutputs?: boolean;
}

type Method = 'GET' | 'POST';

export class HttpClient implements InferenceClient {
  readonly protocol = 'http' as const;
  readonly url: string;
  private readonly opts: HttpClientOptions;
  private readonly fetchFn: FetchLike;
  private readonly auth: Record<string, string>;

  constructor(options: HttpClientOptions | string) {
    this.opts = typeof options === 'string' ? { url: options } : options;
    const u = this.opts.url.replace(/\/+$/, '');
    this.url = /^https?:\/\//i.test(u) ? u : `http://${u}`;
    this.fetchFn = this.opts.fetch ?? ((input, init) => fetch(input, init));
    this.auth = this.opts.apiKey !== undefined ? { Authorization: `Bearer ${this.opts.apiKey}` } : {};
  }

  /** Sends one request; non-2xx answers are thrown unless `allowStatus` accepts them. */
  private async send(
    method: Method, path: string, body: Uint8Array | string | undefined, opts: CallOptions = {}, headers: Record<string, string> = {},
    allowStatus?: (s: number) => boolean, compressible = true,
  ): Promise<ResponseLike> {
    const h: Record<string, string> = { ...this.auth, ...this.opts.headers, ...headers, ...opts.headers };
    let payload: BodyInit | undefined;
    if (body !== undefined) {
      let bytes = typeof body === 'string' ? new TextEncoder().encode(body) : body;
      if (this.opts.requestCompression && compressible) {
        bytes = await compress(bytes, this.opts.requestCompression);
        h['Content-Encoding'] = this.opts.requestCompression;
      }
      payload = bytes as BodyInit;
    }
    const { signal, done } = withTimeout(opts.signal, opts.timeoutMs ?? this.opts.timeoutMs);
    let resp: ResponseLike;
    try {
      resp = await this.fetchFn(this.url + path, { method, headers: h, body: payload, signal });
    } catch (err) {
      done();
      const why = err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
      throw new InferenceServerError({ source: 'http', status: 0, message: `${method} ${this.url}${path} failed: ${why}`, cause: err });
    }
    done();
    if (!resp.ok && !allowStatus?.(resp.status)) throw await httpError(resp);
    return resp;
  }

  /** `parse` is parseJson where the answer may carry 64-bit integers (generate); statistics and the rest stay plain numbers. */
  private async json<T>(method: Method, path: string, body?: unknown, opts?: CallOptions, compressible = true, parse: (text: string) => unknown = JSON.parse): Promise<T> {
    const headers: Record<string, string> = body === undefined ? {} : { 'Content-Type': 'application/json' };
    const resp = await this.send(method, path, body === undefined ? undefined : stringifyJson(body), opts, headers, undefined, compressible);
    const text = await resp.text();
    if (text === '') return undefined as T;
    try {
      return parse(text) as T;
    } catch {
      throw new InferenceServerError({ source: 'http', status: resp.status, message: `${path}: the server's answer is not JSON: ${text.slice(0, 200)}` });
    }
  }

  private async ok(path: string, opts?: CallOptions): Promise<boolean> {
    const resp = await this.send('GET', path, undefined, opts, {}, () => true);
    await resp.arrayBuffer();
    return resp.status === 200;
  }

  isServerLive(opts?: CallOptions): Promise<boolean> {
    return this.ok('/v2/health/live', opts);
  }

  isServerReady(opts?: CallOptions): Promise<boolean> {
    return this.ok('/v2/health/ready', opts);
  }

  isModelReady(model: string, version?: string | number, opts?: CallOptions): Promise<boolean> {
    return this.ok(`${modelPath(model, version)}/ready`, opts);
  }

  getServerMetadata(opts?: CallOptions): Promise<ServerMetadata> {
    return this.json('GET', '/v2', undefined, opts);
  }

  async getModelMetadata(model: string, version?: string | number, opts?: CallOptions): Promise<ModelMetadata> {
    return modelMetadata(await this.json('GET', modelPath(model, version), undefined, opts));
  }

  async getModelConfig(model: string, version?: string | number, opts?: CallOptions): Promise<ModelConfig> {
    const c = await this.json<Record<string, unknown>>('GET', `${modelPath(model, version)}/config`, undefined, opts);
    // Triton answers the config itself; some v2 servers wrap it as {"config": ...}.
    return dropNulls((c && typeof c.config === 'object' && c.config !== null && !('name' in c) ? c.config : c) as ModelConfig);
  }

  async infer(model: string, specs: readonly InferInputSpec[], opts: InferOptions = {}): Promise<InferResult> {
    const t0 = nowNs();
    const { body, headerLength } = encodeInferRequest(specs.map(normalizeInput), opts, this.opts);
    const headers: Record<string, string> = { 'Accept-Encoding': this.opts.responseCompression ?? 'identity' };
    if (headerLength !== undefined) {
      headers[HEADER_LENGTH] = String(headerLength);
      headers['Content-Type'] = 'application/octet-stream';
    } else headers['Content-Type'] = 'application/json';
    const t1 = nowNs();
    const resp = await this.send('POST', `${modelPath(model, opts.version)}/infer`, body, opts, headers);
    const t2 = nowNs();
    const raw = new Uint8Array(await resp.arrayBuffer());
    const result = decodeInferResponse(raw, resp.headers.get(HEADER_LENGTH));
    const t3 = nowNs();
    return new InferResult({ ...result, timing: { sendNs: t1 - t0, waitNs: t2 - t1, recvNs: t3 - t2 } });
  }

  /** The provisional `generate` extension: one JSON object in, one out (never compressed: Triton takes identity only). */
  generate(model: string, body: Record<string, unknown>, opts: CallOptions & { version?: string | number } = {}): Promise<Record<string, unknown>> {
    return this.json('POST', `${modelPath(model, opts.version)}/generate`, body, opts, false, parseJson);
  }

  /** `generate_stream`: yields each server-sent event's JSON; an `{"error": ...}` event throws. */
  async *generateStream(model: string, body: Record<string, unknown>, opts: CallOptions & { version?: string | number } = {}): AsyncGenerator<Record<string, unknown>> {
    const resp = await this.send('POST', `${modelPath(model, opts.version)}/generate_stream`, stringifyJson(body), opts, {
      'Content-Type': 'application/json', Accept: 'text/event-stream',
    }, undefined, false);
    for await (const data of sseEvents(resp)) {
      let v: unknown;
      try {
        v = parseJson(data);
      } catch {
        throw new InferenceServerError({ source: 'http', status: resp.status, message: `generate_stream: event is not JSON: ${data.slice(0, 200)}` });
      }
      const o = v as Record<string, unknown>;
      if (o && typeof o.error === 'string') throw new InferenceServerError({ source: 'http', status: resp.status, message: o.error });
      yield o;
    }
  }

  async getInferenceStatistics(model?: string, version?: string | number, opts?: CallOptions): Promise<ModelStatistics[]> {
    const path = model ? `${modelPath(model, version)}/stats` : '/v2/models/stats';
    const r = await this.json<{ model_stats?: unknown[] }>('GET', path, undefined, opts);
    return (r?.model_stats ?? []).map(modelStatistics);
  }

  async getModelRepositoryIndex(opts: CallOptions & { ready?: boolean } = {}): Promise<RepositoryIndexEntry[]> {
    const r = await this.json<unknown[]>('POST', '/v2/repository/index', opts.ready === undefined ? {} : { ready: opts.ready }, opts);
    return (r ?? []).map(indexEntry);
  }

  async loadModel(model: string, opts: LoadModelOptions = {}): Promise<void> {
    const parameters: Record<string, string> = {};
    if (opts.config !== undefined) parameters.config = typeof opts.config === 'string' ? opts.config : JSON.stringify(opts.config);
    for (const [k, bytes] of Object.entries(opts.files ?? {})) parameters[k.startsWith('file:') ? k : `file:${k}`] = base64(bytes);
    await this.json('POST', `/v2/repository/models/${encodeURIComponent(model)}/load`, Object.keys(parameters).length ? { parameters } : {}, opts);
  }

  async unloadModel(model: string, opts: UnloadModelOptions = {}): Promise<void> {
    const body = opts.unloadDependents === undefined ? {} : { parameters: { unload_dependents: opts.unloadDependents } };
    await this.json('POST', `/v2/repository/models/${encodeURIComponent(model)}/unload`, body, opts);
  }

  async getSystemSharedMemoryStatus(region?: string, opts?: CallOptions): Promise<SystemSharedMemoryRegion[]> {
    const r = await this.json<unknown>('GET', `/v2/systemsharedmemory${regionPath(region)}/status`, undefined, opts);
    // Triton answers a list; accept a name-keyed object too (the gRPC shape some servers reuse).
    if (Array.isArray(r)) return r.map((x) => shmRegion(x));
    return Object.entries((r ?? {}) as Record<string, unknown>).map(([k, v]) => shmRegion(v, k));
  }

  async registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0, opts?: CallOptions): Promise<void> {
    await this.json('POST', `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/register`, { key, offset, byte_size: byteSize }, opts);
  }

  async unregisterSystemSharedMemory(name?: string, opts?: CallOptions): Promise<void> {
    await this.json('POST', `/v2/systemsharedmemory${regionPath(name)}/unregister`, {}, opts);
  }

  getTraceSettings(model?: string, opts?: CallOptions): Promise<TraceSettings> {
    return this.json('GET', tracePath(model), undefined, opts);
  }

  updateTraceSettings(settings: TraceSettingsUpdate, model?: string, opts?: CallOptions): Promise<TraceSettings> {
    const body: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(settings)) body[k] = typeof v === 'number' ? String(v) : v;
    return this.json('POST', tracePath(model), body, opts);
  }

  getLogSettings(opts?: CallOptions): Promise<LogSettings> {
    return this.json('GET', '/v2/logging', undefined, opts);
  }

  updateLogSettings(settings: LogSettings, opts?: CallOptions): Promise<LogSettings> {
    return this.json('POST', '/v2/logging', settings, opts);
  }

  /** fetch keeps no per-client connections to release; present for the InferenceClient contract. */
  async close(): Promise<void> {}
}

const modelPath = (model: string, version?: string | number) =>
  `/v2/models/${encodeURIComponent(model)}${version !== undefined && version !== '' ? `/versions/${version}` : ''}`;
const regionPath = (region?: string) => (region ? `/region/${encodeURIComponent(region)}` : '');
const tracePath = (model?: string) => (model ? `/v2/models/${encodeURIComponent(model)}/trace/setting` : '/v2/trace/setting');

async function httpError(resp: ResponseLike): Promise<InferenceServerError> {
  const text = await resp.text().catch(() => '');
  let message = text;
  try {
    const j = JSON.parse(text) as { error?: unknown };
    if (j && typeof j.error === 'string') message = j.error;
  } catch {
    /* not JSON: keep the text */
  }
  if (!message) message = `HTTP ${resp.status} ${resp.statusText}`.trim();
  return new InferenceServerError({ source: 'http', status: resp.status, message });
}

/** Combines a caller's AbortSignal with a timeout; `done` clears the timer. */
function withTimeout(signal: AbortSignal | undefined, timeoutMs: number | undefined): { signal?: AbortSignal; done: () => void } {
  if (!timeoutMs) return { signal, done: () => {} };
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
  const onAbort = () => ac.abort(signal?.reason);
  if (signal?.aborted) ac.abort(signal.reason);
  else signal?.addEventListener('abort', onAbort, { once: true });
  return { signal: ac.signal, done: () => { clearTimeout(timer); signal?.removeEventListener('abort', onAbort); } };
}

async function compress(data: Uint8Array, format: 'gzip' | 'deflate'): Promise<Uint8Array> {
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new CompressionStream(format));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function jsonValues(dt: DataType, data: TensorData): unknown[] {
  if (dt === 'BYTES') return (data as Uint8Array[]).map(decodeString);
  if (dt === 'BOOL') return Array.from(data as Uint8Array, (v) => v !== 0);
  if (dt === 'FP16' || dt === 'BF16') throw clientError(`${dt} tensors can only be sent as binary data`);
  return Array.from(data as ArrayLike<number | bigint>);
}

/** Builds the infer body: a JSON header, then (binary extension) the tensors' bytes in input order. */
export function encodeInferRequest(
  inputs: WireInput[], opts: InferOptions, defaults: { binaryInputs?: boolean; binaryOutputs?: boolean } = {},
): { body: Uint8Array; headerLength?: number } {
  const binIn = opts.binaryInputs ?? defaults.binaryInputs ?? true;
  const binOut = opts.binaryOutputs ?? defaults.binaryOutputs ?? true;
  const chunks: Uint8Array[] = [];
  const jsonInputs = inputs.map((t) => {
    const params: Parameters = { ...(t.parameters ?? {}) };
    const o: Record<string, unknown> = { name: t.name, shape: t.shape, datatype: t.datatype };
    if (t.sharedMemory) {
      params.shared_memory_region = t.sharedMemory.region;
      params.shared_memory_byte_size = t.sharedMemory.byteSize;
      if (t.sharedMemory.offset) params.shared_memory_offset = t.sharedMemory.offset;
    } else if (binIn || t.datatype === 'FP16' || t.datatype === 'BF16') {
      const bytes = tensorBytes(t.data!);
      params.binary_data_size = bytes.byteLength;
      chunks.push(bytes);
    } else o.data = jsonValues(t.datatype, t.data!);
    if (Object.keys(params).length) o.parameters = params;
    return o;
  });
  const parameters = requestParameters(opts);
  const header: Record<string, unknown> = {};
  if (opts.id) header.id = opts.id;
  header.inputs = jsonInputs;
  if (opts.outputs && opts.outputs.length > 0) {
    header.outputs = opts.outputs.map((s) => {
      const spec: RequestedOutputSpec = typeof s === 'string' ? { name: s } : s;
      const p: Parameters = { ...(spec.parameters ?? {}) };
      if (spec.sharedMemory) {
        p.shared_memory_region = spec.sharedMemory.region;
        p.shared_memory_byte_size = spec.sharedMemory.byteSize;
        if (spec.sharedMemory.offset) p.shared_memory_offset = spec.sharedMemory.offset;
      } else p.binary_data = spec.binary ?? binOut;
      if (spec.classification !== undefined) p.classification = spec.classification;
      return { name: spec.name, parameters: p };
    });
  } else if (binOut) parameters.binary_data_output = true;
  if (Object.keys(parameters).length) header.parameters = parameters;
  const json = new TextEncoder().encode(stringifyJson(header));
  if (chunks.length === 0) return { body: json };
  return { body: concatBytes([json, ...chunks]), headerLength: json.byteLength };
}

interface DecodedResponse {
  model_name: string;
  model_version: string;
  id?: string;
  parameters?: Parameters;
  outputs: OutputTensor[];
}

/** Splits a response into its JSON header and binary section and builds typed outputs. */
export function decodeInferResponse(raw: Uint8Array, headerLength: string | null): DecodedResponse {
  const jsonLen = headerLength !== null && headerLength !== '' ? Number(headerLength) : raw.byteLength;
  if (!Number.isSafeInteger(jsonLen) || jsonLen < 0 || jsonLen > raw.byteLength) {
    throw clientError(`bad ${HEADER_LENGTH} ${headerLength} for a ${raw.byteLength}-byte response`);
  }
  let head: Record<string, unknown>;
  try {
    head = parseInferJson(decodeString(raw.subarray(0, jsonLen))) as Record<string, unknown>;
  } catch (err) {
    throw clientError(`the infer response is not valid JSON: ${(err as Error).message}`);
  }
  let off = jsonLen;
  const outputs = (Array.isArray(head.outputs) ? head.outputs : []).map((o: Record<string, unknown>) => {
    const name = String(o.name);
    const datatype = String(o.datatype);
    const params = { ...((o.parameters ?? {}) as Parameters) };
    const size = params.binary_data_size;
    delete params.binary_data_size;
    let data: TensorData;
    if (size !== undefined) {
      const n = Number(size);
      if (off + n > raw.byteLength) throw clientError(`output '${name}' claims ${n} binary bytes but only ${raw.byteLength - off} remain`);
      data = outputFromBytes(name, datatype, raw.subarray(off, off + n));
      off += n;
    } else if (o.data !== undefined) data = outputFromJson(name, datatype, o.data);
    else data = new Uint8Array(0);
    const t: OutputTensor = { name, datatype: datatype as DataType, shape: (o.shape as number[]) ?? [], data };
    if (Object.keys(params).length) t.parameters = params;
    return t;
  });
  return {
    model_name: String(head.model_name ?? ''),
    model_version: String(head.model_version ?? ''),
    id: typeof head.id === 'string' ? head.id : undefined,
    parameters: head.parameters as Parameters | undefined,
    outputs,
  };
}

/** The `data:` payloads of a text/event-stream body, one string per event. */
async function* sseEvents(resp: ResponseLike): AsyncGenerator<string> {
  if (!resp.body) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>).getReader();
  let buf = '';
  const take = function* (final: boolean): Generator<string> {
    for (;;) {
      const m = /\r?\n\r?\n/.exec(buf);
      if (!m && !(final && buf.trim() !== '')) return;
      const block = m ? buf.slice(0, m.index) : buf;
      buf = m ? buf.slice(m.index + m[0].length) : '';
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
      if (data.length) yield data.join('\n');
      if (!m) return;
    }
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += value;
      yield* take(false);
    }
    yield* take(true);
  } finally {
    // A consumer that stops early must not leave the response body (and its connection) open.
    await reader.cancel().catch(() => {});
  }
}
