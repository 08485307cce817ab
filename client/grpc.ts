/**
 * GrpcClient: the `inference.GRPCInferenceService` protocol over @grpc/grpc-js, Node-only and therefore
 * its own package entry (`tsi-node/client/grpc`), away from the browser-safe HTTP client. It speaks our
 * proto files (wire-compatible with Triton's), so it works against tsi and Triton alike; answers are
 * normalised to the same types the HTTP client returns, non-OK statuses become InferenceServerError
 * with the gRPC code and the server's details, and ModelStreamInfer is an async iterator with callbacks.
 * TLS takes tritonclient's options (`ssl`, root certificates, and a private key and certificate chain
 * for mutual TLS); an API key travels as `authorization: Bearer <key>` metadata.
 */

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InferenceServerError } from './errors.js';
import { readPem, type PemSource } from './node-fetch.js';
import { buildInferRequest, fromInferParameters, parseInferResponse } from './grpc-codec.js';
import { dropNulls, indexEntry, modelMetadata, modelStatistics, num, shmRegion } from './normalize.js';
import { nowNs, type InferResult } from './tensor.js';
import type {
  CallOptions, InferInputSpec, InferOptions, LoadModelOptions, LogSettings, ModelConfig, ModelMetadata,
  ModelStatistics, RepositoryIndexEntry, ServerMetadata, SystemSharedMemoryRegion, TraceSettings, TraceSettingsUpdate,
  UnloadModelOptions,
} from './types.js';
import type { InferenceClient } from './inference-client.js';

export { InferenceServerError } from './errors.js';

export interface GrpcClientOptions {
  /** `host:port` (a `grpc://` prefix is accepted). */
  url: string;
  /** Default: insecure (plaintext), as tritonclient's default; or TLS from `ssl` and the certificates below. */
  credentials?: grpc.ChannelCredentials;
  /** Connect over TLS (tritonclient's `ssl=True`), verifying the server against `rootCertificates` or Node's roots. */
  ssl?: boolean;
  /** CA certificate(s) of the server (tritonclient's `root_certificates`): PEM, or a PEM file's path. */
  rootCertificates?: PemSource;
  /** Client key and certificate chain for mutual TLS (tritonclient's `private_key`, `certificate_chain`). */
  privateKey?: PemSource;
  certificateChain?: PemSource;
  /** An API key (`tsi-node serve --api-key`), sent as `authorization: Bearer <key>` metadata. */
  apiKey?: string;
  channelOptions?: grpc.ChannelOptions;
  /** Metadata sent with every call. */
  headers?: Record<string, string>;
  timeoutMs?: number;
  /** Compress requests (grpc-js channel-wide setting). */
  compression?: 'gzip' | 'deflate';
  /** Folder holding grpc_service.proto and model_config.proto; default: the package's proto/. */
  protoDir?: string;
}

/** Loader options shared with the tsi gRPC server (see test/node/proto.test.ts). */
const LOADER = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true } as const;

/** The package's proto/ folder, found from this file in both `client/` and `dist/client/`. */
export function defaultProtoDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'proto', 'grpc_service.proto'))) return join(dir, 'proto');
    dir = dirname(dir);
  }
  throw new InferenceServerError({ source: 'client', status: 0, message: 'cannot find proto/grpc_service.proto; pass protoDir' });
}

const packages = new Map<string, protoLoader.PackageDefinition>();
/**
 * `numeric` decodes int64 as numbers and leaves out oneof virtual fields — the form ModelConfig takes
 * in JSON; the default form keeps 64-bit integers exact and names each InferParameter's oneof choice.
 */
function loadPackage(protoDir: string, numeric = false): protoLoader.PackageDefinition {
  const key = `${protoDir}|${numeric}`;
  let p = packages.get(key);
  if (!p) {
    const opts = numeric ? { ...LOADER, longs: Number, oneofs: false } : LOADER;
    p = protoLoader.loadSync(['grpc_service.proto'], { ...opts, includeDirs: [protoDir] });
    packages.set(key, p);
  }
  return p;
}

type Obj = Record<string, any>;
/**
 * One stream response. `final` is the server's `triton_final_response` flag where it sent one (it does
 * for decoupled models when the request set `enableEmptyFinalResponse`); undefined otherwise.
 */
type StreamItem = { result: InferResult; final?: boolean; error?: undefined } | { error: InferenceServerError; result?: undefined; final?: undefined };

function grpcError(err: grpc.ServiceError): InferenceServerError {
  return new InferenceServerError({ source: 'grpc', status: err.code, message: err.details || err.message, cause: err });
}

const COMPRESSION = { deflate: 1, gzip: 2 } as const;

/**
 * The HTTP/2 receive window a tsi client opens, per stream and per connection: with Node's 64 KiB a
 * server answering a 4 MB tensor stops every 64 KiB until this process's event loop has read the data
 * and sent WINDOW_UPDATE. gRPC C++ (tritonclient) grows its windows from what it measures instead;
 * 16 MiB covers a few large answers in flight at once. A `channelOptions` entry may override it.
 */
export const GRPC_CLIENT_WINDOW = 16 * 2 ** 20;

function channelCredentials(o: GrpcClientOptions): grpc.ChannelCredentials {
  if (!o.ssl) {
    if (o.rootCertificates !== undefined || o.privateKey !== undefined || o.certificateChain !== undefined) {
      throw new InferenceServerError({ source: 'client', status: 0, message: 'rootCertificates, privateKey and certificateChain need ssl: true' });
    }
    return grpc.credentials.createInsecure();
  }
  if ((o.privateKey === undefined) !== (o.certificateChain === undefined)) {
    throw new InferenceServerError({ source: 'client', status: 0, message: 'mutual TLS needs both privateKey and certificateChain' });
  }
  const pem = (s: PemSource | undefined) => (s === undefined ? null : readPem(s));
  return grpc.credentials.createSsl(pem(o.rootCertificates), pem(o.privateKey), pem(o.certificateChain));
}

export class GrpcClient implements InferenceClient {
  readonly protocol = 'grpc' as const;
  readonly url: string;
  private readonly opts: GrpcClientOptions;
  private readonly stub: grpc.Client & Obj;
  private readonly protoDir: string;

  constructor(options: GrpcClientOptions | string) {
    this.opts = typeof options === 'string' ? { url: options } : options;
    this.url = this.opts.url.replace(/^grpc:\/\//i, '').replace(/\/+$/, '');
    this.protoDir = this.opts.protoDir ?? defaultProtoDir();
    const loaded = grpc.loadPackageDefinition(loadPackage(this.protoDir)) as Obj;
    const Service = loaded.inference.GRPCInferenceService as grpc.ServiceClientConstructor;
    const channel: grpc.ChannelOptions = {
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
      'grpc-node.flow_control_window': GRPC_CLIENT_WINDOW,
      ...this.opts.channelOptions,
    };
    if (this.opts.compression) channel['grpc.default_compression_algorithm'] = COMPRESSION[this.opts.compression];
    this.stub = new Service(this.url, this.opts.credentials ?? channelCredentials(this.opts), channel) as grpc.Client & Obj;
  }

  private metadata(opts?: CallOptions): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.opts.apiKey !== undefined) md.set('authorization', `Bearer ${this.opts.apiKey}`);
    for (const [k, v] of Object.entries({ ...this.opts.headers, ...opts?.headers })) md.set(k, v);
    return md;
  }

  private callOptions(opts?: CallOptions): grpc.CallOptions {
    const t = opts?.timeoutMs ?? this.opts.timeoutMs;
    return t ? { deadline: Date.now() + t } : {};
  }

  /** One unary RPC; `deserialize` overrides the response decoder (see getModelConfig). */
  private unary<T = Obj>(method: string, req: Obj, opts?: CallOptions, deserialize?: (b: Buffer) => unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const done = (err: grpc.ServiceError | null, res?: unknown) => (err ? reject(grpcError(err)) : resolve(res as T));
      let call: grpc.ClientUnaryCall;
      if (deserialize) {
        const def = this.stub[method].requestSerialize as (v: Obj) => Buffer;
        const path = this.stub[method].path as string;
        call = this.stub.makeUnaryRequest(path, def, deserialize, req, this.metadata(opts), this.callOptions(opts), done);
      } else call = this.stub[method](req, this.metadata(opts), this.callOptions(opts), done);
      const signal = opts?.signal;
      if (signal) {
        if (signal.aborted) call.cancel();
        else signal.addEventListener('abort', () => call.cancel(), { once: true });
      }
    });
  }

  async isServerLive(opts?: CallOptions): Promise<boolean> {
    return (await this.unary('ServerLive', {}, opts)).live === true;
  }

  async isServerReady(opts?: CallOptions): Promise<boolean> {
    return (await this.unary('ServerReady', {}, opts)).ready === true;
  }

  async isModelReady(model: string, version?: string | number, opts?: CallOptions): Promise<boolean> {
    try {
      return (await this.unary('ModelReady', { name: model, version: version === undefined ? '' : String(version) }, opts)).ready === true;
    } catch (err) {
      const e = err as InferenceServerError;
      // UNAVAILABLE is also what grpc-js reports when nothing listens: ask the server whether it is there.
      if (e.status === grpc.status.UNAVAILABLE) {
        await this.isServerLive(opts);
        return false;
      }
      if (e.status === grpc.status.NOT_FOUND || e.status === grpc.status.INVALID_ARGUMENT) return false;
      throw err;
    }
  }

  async getServerMetadata(opts?: CallOptions): Promise<ServerMetadata> {
    const r = await this.unary('ServerMetadata', {}, opts);
    return { name: r.name, version: r.version, extensions: r.extensions ?? [] };
  }

  async getModelMetadata(model: string, version?: string | number, opts?: CallOptions): Promise<ModelMetadata> {
    return modelMetadata(await this.unary('ModelMetadata', { name: model, version: version === undefined ? '' : String(version) }, opts));
  }

  /** Decoded in the numeric form, so int64 config fields (dims, delays) are numbers as in the JSON config. */
  async getModelConfig(model: string, version?: string | number, opts?: CallOptions): Promise<ModelConfig> {
    const numeric = loadPackage(this.protoDir, true)['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition;
    const deserialize = numeric.ModelConfig!.responseDeserialize as (b: Buffer) => unknown;
    const r = await this.unary('ModelConfig', { name: model, version: version === undefined ? '' : String(version) }, opts, deserialize);
    return dropNulls(r.config ?? {}) as ModelConfig;
  }

  async infer(model: string, inputs: readonly InferInputSpec[], opts: InferOptions = {}): Promise<InferResult> {
    const t0 = nowNs();
    const req = buildInferRequest(model, inputs, opts);
    const t1 = nowNs();
    const msg = await this.unary('ModelInfer', req, opts);
    const t2 = nowNs();
    const result = parseInferResponse(msg);
    const t3 = nowNs();
    Object.assign(result.timing, { sendNs: t1 - t0, waitNs: t2 - t1, recvNs: t3 - t2 });
    return result;
  }

  /**
   * Opens a ModelStreamInfer stream. Send requests with `send`, read responses with `for await` and/or
   * the callbacks; per-request errors arrive as `{error}` items (the stream stays open), a broken
   * stream ends the iteration with a thrown error. `end()` half-closes; iteration ends when the server
   * has answered everything.
   */
  stream(handlers: StreamHandlers = {}, opts?: CallOptions): InferStream {
    const call = this.stub.ModelStreamInfer(this.metadata(opts), this.callOptions(opts)) as grpc.ClientDuplexStream<Obj, Obj>;
    return new InferStream(call, handlers);
  }

  async getInferenceStatistics(model?: string, version?: string | number, opts?: CallOptions): Promise<ModelStatistics[]> {
    const r = await this.unary('ModelStatistics', { name: model ?? '', version: version === undefined ? '' : String(version) }, opts);
    return (r.model_stats ?? []).map(modelStatistics);
  }

  async getModelRepositoryIndex(opts: CallOptions & { ready?: boolean } = {}): Promise<RepositoryIndexEntry[]> {
    const r = await this.unary('RepositoryIndex', { repository_name: '', ready: opts.ready ?? false }, opts);
    return (r.models ?? []).map(indexEntry);
  }

  async loadModel(model: string, opts: LoadModelOptions = {}): Promise<void> {
    const parameters: Obj = {};
    if (opts.config !== undefined) parameters.config = { string_param: typeof opts.config === 'string' ? opts.config : JSON.stringify(opts.config) };
    for (const [k, bytes] of Object.entries(opts.files ?? {})) parameters[k.startsWith('file:') ? k : `file:${k}`] = { bytes_param: bytes };
    await this.unary('RepositoryModelLoad', { repository_name: '', model_name: model, parameters }, opts);
  }

  async unloadModel(model: string, opts: UnloadModelOptions = {}): Promise<void> {
    const parameters: Obj = {};
    if (opts.unloadDependents !== undefined) parameters.unload_dependents = { bool_param: opts.unloadDependents };
    await this.unary('RepositoryModelUnload', { repository_name: '', model_name: model, parameters }, opts);
  }

  async getSystemSharedMemoryStatus(region?: string, opts?: CallOptions): Promise<SystemSharedMemoryRegion[]> {
    const r = await this.unary('SystemSharedMemoryStatus', { name: region ?? '' }, opts);
    return Object.entries((r.regions ?? {}) as Obj).map(([k, v]) => shmRegion(v, k));
  }

  async registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0, opts?: CallOptions): Promise<void> {
    await this.unary('SystemSharedMemoryRegister', { name, key, offset: String(offset), byte_size: String(byteSize) }, opts);
  }

  async unregisterSystemSharedMemory(name?: string, opts?: CallOptions): Promise<void> {
    await this.unary('SystemSharedMemoryUnregister', { name: name ?? '' }, opts);
  }

  async getTraceSettings(model?: string, opts?: CallOptions): Promise<TraceSettings> {
    return this.updateTraceSettings({}, model, opts);
  }

  /** Values become SettingValue lists; `null` sends an empty list, which resets the setting. */
  async updateTraceSettings(settings: TraceSettingsUpdate, model?: string, opts?: CallOptions): Promise<TraceSettings> {
    const s: Obj = {};
    for (const [k, v] of Object.entries(settings)) s[k] = { value: v === null ? [] : Array.isArray(v) ? v.map(String) : [String(v)] };
    const r = await this.unary('TraceSetting', { settings: s, model_name: model ?? '' }, opts);
    const out: TraceSettings = {};
    for (const [k, v] of Object.entries((r.settings ?? {}) as Obj)) {
      const vals: string[] = v?.value ?? [];
      out[k] = k === 'trace_level' || vals.length > 1 ? vals : (vals[0] ?? '');
    }
    return out;
  }

  async getLogSettings(opts?: CallOptions): Promise<LogSettings> {
    return this.updateLogSettings({}, opts);
  }

  async updateLogSettings(settings: LogSettings, opts?: CallOptions): Promise<LogSettings> {
    const s: Obj = {};
    for (const [k, v] of Object.entries(settings)) {
      s[k] = typeof v === 'boolean' ? { bool_param: v } : typeof v === 'number' ? { uint32_param: v } : { string_param: v };
    }
    const r = await this.unary('LogSettings', { settings: s }, opts);
    const out: LogSettings = {};
    for (const [k, v] of Object.entries((r.settings ?? {}) as Obj)) {
      const choice: string | undefined = v?.parameter_choice;
      if (choice) out[k] = choice === 'uint32_param' ? num(v[choice]) : v[choice];
    }
    return out;
  }

  async close(): Promise<void> {
    this.stub.close();
  }
}

/** A ModelStreamInfer call: requests in with `send`, responses out by iteration and callbacks. */
export class InferStream implements AsyncIterable<StreamItem> {
  private readonly items: StreamItem[] = [];
  private readonly waiters: ((r: IteratorResult<StreamItem>) => void)[] = [];
  private readonly failers: ((e: unknown) => void)[] = [];
  private failure?: InferenceServerError;
  private ended = false;
  private cancelled = false;

  constructor(private readonly call: grpc.ClientDuplexStream<Obj, Obj>, handlers: StreamHandlers) {
    call.on('data', (msg: Obj) => {
      if (msg.error_message) {
        // In-stream errors carry no status code; UNKNOWN is gRPC's code for exactly that.
        const error = new InferenceServerError({ source: 'grpc', status: grpc.status.UNKNOWN, message: msg.error_message });
        handlers.onError?.(error);
        this.push({ error });
        return;
      }
      const result = parseInferResponse(msg.infer_response ?? {});
      const fin = fromInferParameters(msg.infer_response?.parameters).triton_final_response;
      const final = fin === undefined ? undefined : fin === true;
      handlers.onResult?.(result, final);
      this.push({ result, final });
    });
    call.on('error', (err: grpc.ServiceError) => {
      if (this.cancelled && err.code === grpc.status.CANCELLED) return this.finish();
      this.failure = grpcError(err);
      handlers.onError?.(this.failure);
      for (const f of this.failers.splice(0)) f(this.failure);
      this.waiters.length = 0;
    });
    call.on('end', () => this.finish());
  }

  /** Queues one request on the stream. `enableEmptyFinalResponse` asks decoupled models for a final marker. */
  send(model: string, inputs: readonly InferInputSpec[], opts: InferOptions & { enableEmptyFinalResponse?: boolean } = {}): void {
    if (this.ended || this.failure) throw new InferenceServerError({ source: 'client', status: 0, message: 'the stream is closed' });
    const extra = opts.enableEmptyFinalResponse ? { triton_enable_empty_final_response: true } : undefined;
    this.call.write(buildInferRequest(model, inputs, opts, extra));
  }

  /** Half-closes: no more requests; responses still arrive. */
  end(): void {
    this.call.end();
  }

  cancel(): void {
    this.cancelled = true;
    this.call.cancel();
  }

  private push(item: StreamItem): void {
    const w = this.waiters.shift();
    this.failers.shift();
    if (w) w({ value: item, done: false });
    else this.items.push(item);
  }

  private finish(): void {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
    this.failers.length = 0;
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamItem> {
    return {
      next: () => {
        const item = this.items.shift();
        if (item) return Promise.resolve({ value: item, done: false });
        if (this.failure) return Promise.reject(this.failure);
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => {
          this.waiters.push(resolve);
          this.failers.push(reject);
        });
      },
      return: async () => {
        // The consumer stopped: drop what is buffered and cancel the call so the server stops too.
        this.items.length = 0;
        if (!this.ended) this.cancel();
        return { value: undefined, done: true };
      },
    };
  }
}

export interface StreamHandlers {
  onResult?: (r: InferResult, final: boolean | undefined) => void;
  /** Per-request errors, and finally the stream's own failure if it breaks. */
  onError?: (e: InferenceServerError) => void;
}

export type { StreamItem };
