/**
 * The gRPC server (@grpc/grpc-js): every RPC of `inference.GRPCInferenceService` from our own
 * wire-compatible proto/, plus the standard `grpc.health.v1.Health` (SERVING iff the server is ready),
 * each a thin translation onto InferenceServer and the ServerExtensions the HTTP app shares. TsiErrors
 * map to gRPC status codes by Triton's table (grpc_utils.cc); messages may be 2 GiB − 1 both ways, as in
 * Triton; gzip/deflate-compressed requests are accepted (grpc-js decompresses them), and ModelInfer /
 * ModelStreamInfer answers are gzip-compressed when `--grpc-infer-response-compression-level` asks for
 * it and the client accepts gzip (grpc-js's server never compresses; see js-hooks.ts).
 *
 * ModelStreamInfer keeps one bidirectional stream per client: each request is answered on the stream
 * as its responses arrive (a decoupled model may send several), a failed request becomes a message
 * with `error_message` while the stream stays open, and the stream closes once the client has
 * half-closed and every request on it has had its final response.
 *
 * Requests reach the handlers as bytes and are decoded there, not in grpc-js's deserializer (whose
 * failures become INTERNAL "Error deserializing request"): bytes that are not the message they should
 * be are the client's error, INVALID_ARGUMENT naming the message and what was wrong with it. A stream
 * whose client stops reading stops being read once its unsent responses pass a high-water mark (the
 * client's further requests wait in HTTP/2 flow control), and is ended with RESOURCE_EXHAUSTED if a
 * decoupled model keeps producing past a hard cap, so a stalled client cannot make the server buffer
 * without bound.
 *
 * Plain unary ModelInfer calls are answered on node:http2 before grpc-js sees them (direct.ts,
 * through directModelInfer below): the same checks and handler without grpc-js's per-call machinery.
 *
 * TLS (Triton's `--grpc-use-ssl`, `--grpc-use-ssl-mutual`) uses credentials that follow certificate
 * reloads (runtime-node/http/tls.ts); API keys are checked by a server interceptor on every call of every
 * service but `grpc.health.v1.Health`, before any handler runs.
 */

import type { IncomingHttpHeaders } from 'node:http2';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import {
  TsiError, asTsiError, attachTrace, checkTraceModel, forwardHeaders, traceContextOf, grpcCategory, parseTraceUpdate, putEntry, traceSettingsJson,
  type AuthRefusal, type ErrorCode, type InferenceServer, type InferRequest, type InferResponse, type Restrictions, type ServerExtensions,
} from '../../core/index.js';
import {
  decodeInferRequest, encodeInferResponse, encodeStreamError, encodeStreamResponse, grpcVersion, logSettingsFromProto, logSettingsToProto,
} from './codec.js';
import { MODEL_INFER_PATH, type DirectModelInfer, type GrpcStatus } from './direct.js';
import { hookGrpcJsCalls, hookHttp2Servers } from './js-hooks.js';
import { readModelInferRequest } from './wire-reader.js';
import { writeModelInferResponseFrame } from './wire-writer.js';
import { ReloadingServerCredentials, type ReloadableTls } from '../http/tls.js';

export { GRPC_SERVER_HTTP2 } from './js-hooks.js';

type Obj = Record<string, any>;

/** The options every tsi gRPC party loads the protos with (the tests and the client use them too). */
export const PROTO_LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true } as const;

export const MAX_MESSAGE_BYTES = 2 ** 31 - 1;

/** `proto/` of the package, found from this file in both `runtime-node/` and `dist/runtime-node/`. */
export function protoDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'proto', 'grpc_service.proto'))) return join(dir, 'proto');
    dir = dirname(dir);
  }
  throw new Error('tsi: cannot find proto/grpc_service.proto next to the package');
}

export function loadProtos(): { inference: protoLoader.ServiceDefinition; health: protoLoader.ServiceDefinition } {
  const pkg = protoLoader.loadSync(['grpc_service.proto', 'health.proto'], { ...PROTO_LOADER_OPTIONS, includeDirs: [protoDir()] });
  return {
    inference: pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition,
    health: pkg['grpc.health.v1.Health'] as protoLoader.ServiceDefinition,
  };
}

/** Triton's grpc_utils.cc mapping. */
export const GRPC_STATUS: Record<ErrorCode, grpc.status> = {
  UNKNOWN: grpc.status.UNKNOWN,
  INTERNAL: grpc.status.INTERNAL,
  NOT_FOUND: grpc.status.NOT_FOUND,
  INVALID_ARG: grpc.status.INVALID_ARGUMENT,
  UNAVAILABLE: grpc.status.UNAVAILABLE,
  UNSUPPORTED: grpc.status.UNIMPLEMENTED,
  ALREADY_EXISTS: grpc.status.ALREADY_EXISTS,
  CANCELLED: grpc.status.CANCELLED,
  PERMISSION_DENIED: grpc.status.PERMISSION_DENIED,
};

function toStatus(err: unknown): Partial<grpc.StatusObject> {
  const e = asTsiError(err);
  return { code: GRPC_STATUS[e.code] ?? grpc.status.UNKNOWN, details: e.message };
}

/** --grpc-infer-response-compression-level as zlib levels (Triton's none/low/medium/high). */
const GZIP_LEVEL = { none: undefined, low: 1, medium: 6, high: 9 } as const;

export interface GrpcOptions {
  port: number;
  address: string;
  extensions: ServerExtensions;
  /** --grpc-restricted-protocol, keys already prefixed with `triton-grpc-protocol-`. */
  restrictedProtocol?: Restrictions;
  /** --grpc-infer-response-compression-level: anything but none gzips inference answers for clients accepting gzip. */
  responseCompression?: keyof typeof GZIP_LEVEL;
  /** --grpc-use-ssl[-mutual]: serve TLS with these credentials (reloaded when they change); unset: plaintext. */
  tls?: ReloadableTls;
  /** API keys: judges a call by its method path and `authorization` metadata; a refusal ends it. */
  authorize?: (path: string, authorization: string | undefined) => AuthRefusal | undefined;
  /**
   * --grpc-handshake-timeout-secs: how long a new connection may take to finish its TLS handshake and,
   * then, to send the HTTP/2 preface and SETTINGS before it is closed (default 60 s, as HTTP's head).
   */
  handshakeTimeoutMs?: number;
  /** --grpc-header-forward-pattern: metadata whose keys match reach the model as request parameters. */
  headerForwardPattern?: RegExp;
  /**
   * --grpc-max-response-pool-size: how many responses a stream may hold written but not yet handed to
   * HTTP/2 before it stops reading further requests (on top of STREAM_LIMITS' byte bounds).
   */
  maxResponsePoolSize?: number;
  /**
   * Triton's test hook TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC (L0_client_timeout): every RPC but
   * inference answers this much later, so clients' timeouts on them can be tested. Not for production.
   */
  responseDelayMs?: number;
}

/**
 * A call's metadata as (key, value) pairs for --grpc-header-forward-pattern: text values only, and
 * none of the transport's own keys (pseudo-headers, content-type, te, grpc-*), which grpc-js keeps
 * out of a call's metadata and direct.ts sees among the stream's headers.
 */
type Forwarder = (request: InferRequest) => void;

function forwarder(pattern: RegExp | undefined, metadata: () => Iterable<[string, unknown]>): Forwarder | undefined {
  if (!pattern) return undefined;
  return (request) => {
    const pairs: [string, string][] = [];
    for (const [k, v] of metadata()) {
      if (k.startsWith(':') || k.startsWith('grpc-') || k === 'content-type' || k === 'te') continue;
      const first = Array.isArray(v) ? v[0] : v;
      if (typeof first === 'string') pairs.push([k, first]);
    }
    forwardHeaders(pattern, pairs, request);
  };
}

const GRPC_HANDSHAKE_TIMEOUT_MS = 60_000;

/** Ends a call the `authorize` check refuses, before its handler sees it. */
function authInterceptor(authorize: NonNullable<GrpcOptions['authorize']>): grpc.ServerInterceptor {
  return (method, call) => new grpc.ServerInterceptingCall(call, {
    start: (next) => next({
      onReceiveMetadata: (metadata, pass) => {
        const value = metadata.get('authorization')[0];
        const refusal = authorize(method.path, value === undefined ? undefined : String(value));
        if (!refusal) return pass(metadata);
        call.sendStatus(refusalStatus(refusal));
      },
    }),
  });
}

export interface GrpcListener {
  port: number;
  address: string;
  /** Refuses new calls; calls already running continue. */
  stopAccepting(): void;
  /** Waits up to `timeoutMs` for running calls (open streams), then cancels what is left. */
  close(timeoutMs?: number): Promise<void>;
  /** ModelInfer calls answered on node:http2 ahead of grpc-js (direct.ts) so far. */
  directCalls(): number;
}

/** Turns bytes into a request message; throws INVALID_ARG naming the message and the flaw. */
export type RequestDecoder = (bytes: Buffer) => Obj;

/** Methods whose messages tsi reads and writes by hand (wire-reader.ts, wire-writer.ts): the hot path. */
const HAND_DECODED: Record<string, (b: Buffer) => Obj> = { ModelInfer: readModelInferRequest, ModelStreamInfer: readModelInferRequest };

/**
 * The service with every request left as bytes by grpc-js (an identity deserializer), and per method
 * the decoder for the handler to call where it can answer a failure: wire-reader.ts's for the inference
 * methods, proto-loader's for the rest. The inference methods' handlers answer with bytes they encoded
 * (wire-writer.ts), which their serializer passes through.
 */
export function rawRequestService(def: protoLoader.ServiceDefinition): { service: grpc.ServiceDefinition; decoders: Record<string, RequestDecoder> } {
  const service: Record<string, grpc.MethodDefinition<Buffer, Obj>> = {};
  const decoders: Record<string, RequestDecoder> = {};
  for (const [name, m] of Object.entries(def)) {
    const decode = HAND_DECODED[name] ?? (m.requestDeserialize as (b: Buffer) => Obj);
    const pkg = m.path.slice(1, m.path.indexOf('/', 1));
    const type = `${pkg.slice(0, pkg.lastIndexOf('.') + 1)}${(m.requestType.type as { name?: string }).name ?? name}`;
    decoders[name] = (bytes) => {
      try {
        return decode(bytes);
      } catch (err) {
        throw new TsiError('INVALID_ARG', `unable to decode the request as ${type} (${bytes.byteLength} bytes): ${(err as Error).message}`);
      }
    };
    const method: grpc.MethodDefinition<Buffer, Obj> = { ...(m as unknown as grpc.MethodDefinition<Buffer, Obj>), requestDeserialize: (b: Buffer) => b };
    if (HAND_DECODED[name]) {
      const serialize = m.responseSerialize as (v: Obj) => Buffer;
      method.responseSerialize = (v: Obj) => (Buffer.isBuffer(v) ? v : serialize(v));
    }
    service[name] = method;
  }
  return { service: service as unknown as grpc.ServiceDefinition, decoders };
}

export async function listenGrpc(server: InferenceServer, opts: GrpcOptions): Promise<GrpcListener> {
  hookGrpcJsCalls();
  const { inference, health } = loadProtos();
  const g = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    // Per-call counters and timestamps for a channelz service tsi does not serve.
    'grpc.enable_channelz': 0,
    ...(opts.authorize ? { interceptors: [authInterceptor(opts.authorize)] } : {}),
  });
  const inf = rawRequestService(inference);
  const handshakeMs = opts.handshakeTimeoutMs ?? GRPC_HANDSHAKE_TIMEOUT_MS;
  const direct = directModelInfer(server, opts, inf.decoders.ModelInfer!);
  hookHttp2Servers(g, { gzipLevel: GZIP_LEVEL[opts.responseCompression ?? 'none'], direct, handshakeMs });
  const hl = rawRequestService(health);
  g.addService(inf.service, inferenceService(server, opts, inf.decoders));
  g.addService(hl.service, healthService(server, hl.decoders));
  const host = opts.address.includes(':') && !opts.address.startsWith('[') ? `[${opts.address}]` : opts.address;
  const port = await new Promise<number>((resolve, reject) => {
    const credentials = opts.tls ? new ReloadingServerCredentials(opts.tls, handshakeMs) : grpc.ServerCredentials.createInsecure();
    g.bindAsync(`${host}:${opts.port}`, credentials, (err, p) => (err ? reject(err) : resolve(p)));
  });
  let shutdown: Promise<void> | undefined;
  const stopAccepting = () => {
    shutdown ??= new Promise<void>((resolve) => g.tryShutdown(() => resolve()));
  };
  return {
    port,
    address: opts.address,
    stopAccepting,
    directCalls: () => direct.calls,
    async close(timeoutMs = 1000) {
      stopAccepting();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([shutdown, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
      clearTimeout(timer);
      g.forceShutdown();
    },
  };
}

/**
 * ModelInfer as direct.ts answers it, ahead of grpc-js: the same checks in the same order as the
 * grpc-js route (the API-key interceptor, the protocol restriction, decoding), the same handler.
 */
function directModelInfer(server: InferenceServer, opts: GrpcOptions, decode: RequestDecoder): DirectModelInfer {
  return {
    admit(headers) {
      const header = headerValue(headers);
      const refusal = opts.authorize?.(MODEL_INFER_PATH, header('authorization'));
      if (refusal) return refusalStatus(refusal);
      return restriction('ModelInfer', header, opts.restrictedProtocol);
    },
    infer: async (message, onCancel, headers, own) => {
      const readStart = server.clock.nowNs();
      return modelInfer(server, opts.extensions, decode(message), onCancel, writeModelInferResponseFrame,
        headerValue(headers),
        forwarder(opts.headerForwardPattern, () => Object.entries(headers)), readStart, own);
    },
    status: (err) => toStatus(err) as GrpcStatus,
    maxMessageBytes: MAX_MESSAGE_BYTES,
    calls: 0,
  };
}

/** Triton answers a restricted call with UNAVAILABLE and this text. */
function restriction(method: string, header: (key: string) => unknown, r?: Restrictions): { code: grpc.status; details: string } | undefined {
  const cat = grpcCategory(method);
  const rule = cat ? r?.get(cat) : undefined;
  if (!rule) return undefined;
  const got = header(rule.key.toLowerCase());
  if (got !== undefined && String(got) === rule.value) return undefined;
  return { code: grpc.status.UNAVAILABLE, details: `This protocol is restricted, expecting header '${rule.key}'` };
}

/** The first value of a header among direct.ts's HTTP/2 headers. */
const headerValue = (headers: IncomingHttpHeaders) => (key: string): string | undefined => {
  const v = headers[key];
  return Array.isArray(v) ? v[0] : v;
};
/** The first value of a metadata key of a grpc-js call, as a string (binary values never carry what is read this way). */
const metadataValue = (metadata: grpc.Metadata) => (key: string): string | undefined => {
  const v = metadata.get(key)[0];
  return v === undefined ? undefined : String(v);
};

/** The status an API-key refusal ends a call with. */
function refusalStatus(refusal: AuthRefusal): { code: grpc.status; details: string } {
  return { code: refusal.status === 'unauthenticated' ? grpc.status.UNAUTHENTICATED : grpc.status.PERMISSION_DENIED, details: refusal.message };
}

function inferenceService(server: InferenceServer, opts: GrpcOptions, decoders: Record<string, RequestDecoder>): grpc.UntypedServiceImplementation {
  const ext = opts.extensions;
  const unary = (method: string, fn: (req: Obj) => Obj | Promise<Obj>): grpc.handleUnaryCall<Buffer, Obj> => (call, callback) => {
    const denied = restriction(method, metadataValue(call.metadata), opts.restrictedProtocol);
    if (denied) return callback(denied);
    const decode = decoders[method]!;
    const delay = opts.responseDelayMs ?? 0;
    const answered = Promise.resolve().then(() => fn(decode(call.request)));
    (delay > 0 ? answered.finally(() => new Promise((r) => setTimeout(r, delay))) : answered)
      .then((res) => callback(null, res), (err) => callback(toStatus(err)));
  };
  const noRepositoryName = (req: Obj) => {
    if (req.repository_name) throw new TsiError('UNSUPPORTED', `'repository_name' specification is not supported`);
  };
  const cuda = (name: string) => ext.sharedMemory.cudaStatus(name || undefined);

  return {
    ServerLive: unary('ServerLive', () => ({ live: server.isLive() })),
    ServerReady: unary('ServerReady', () => ({ ready: server.isReady() })),
    ModelReady: unary('ModelReady', async (req) => {
      const version = grpcVersion(req.version);
      try {
        return { ready: await server.modelReady(req.name, version) };
      } catch (err) {
        // Triton's InferenceServer::ModelIsReady answers success with ready=false for a model (or
        // version) it does not know, as for one that is loading: only a malformed version is an error.
        if (asTsiError(err).code === 'INVALID_ARG') throw err;
        return { ready: false };
      }
    }),
    ServerMetadata: unary('ServerMetadata', () => server.metadata()),
    ModelMetadata: unary('ModelMetadata', (req) => server.modelMetadata(req.name, grpcVersion(req.version))),
    ModelConfig: unary('ModelConfig', (req) => ({ config: server.modelConfigMessage(req.name, grpcVersion(req.version)) })),
    ModelStatistics: unary('ModelStatistics', (req) => server.statistics(req.name || undefined, grpcVersion(req.version))),
    ModelInfer: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const denied = restriction('ModelInfer', metadataValue(call.metadata), opts.restrictedProtocol);
      if (denied) return callback(denied);
      const onCancel = (cancel: () => void) => {
        if (call.cancelled) cancel();
        else call.once('cancelled', cancel);
      };
      let msg: Obj;
      const readStart = server.clock.nowNs();
      try {
        msg = decoders.ModelInfer!(call.request);
      } catch (err) {
        return callback(toStatus(err));
      }
      const forward = forwarder(opts.headerForwardPattern, () => Object.entries(call.metadata.getMap()));
      modelInfer(server, ext, msg, onCancel, encodeInferResponse, metadataValue(call.metadata), forward, readStart).then((res) => callback(null, res), (err) => callback(toStatus(err)));
    },
    ModelStreamInfer: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      const denied = restriction('ModelStreamInfer', metadataValue(call.metadata), opts.restrictedProtocol);
      if (denied) {
        call.emit('error', denied);
        return;
      }
      streamInfer(server, ext, call, decoders.ModelStreamInfer!, forwarder(opts.headerForwardPattern, () => Object.entries(call.metadata.getMap())),
        opts.maxResponsePoolSize);
    },
    RepositoryIndex: unary('RepositoryIndex', async (req) => {
      noRepositoryName(req);
      await server.repository.scan();
      return {
        models: server.repositoryIndex(req.ready).map((e) => ({ name: e.name, version: e.version ?? '', state: e.state ?? '', reason: e.reason ?? '' })),
      };
    }),
    RepositoryModelLoad: unary('RepositoryModelLoad', async (req) => {
      noRepositoryName(req);
      const params = new Map<string, string | Uint8Array | boolean | number>();
      for (const [k, v] of Object.entries((req.parameters ?? {}) as Obj)) {
        switch (v?.parameter_choice) {
          case 'string_param': params.set(k, v.string_param); break;
          case 'bytes_param': params.set(k, new Uint8Array(v.bytes_param.buffer, v.bytes_param.byteOffset, v.bytes_param.byteLength)); break;
          case 'bool_param': params.set(k, v.bool_param); break;
          case 'int64_param': params.set(k, Number(v.int64_param)); break;
          default: break;
        }
      }
      await ext.modelControl.load(req.model_name, params);
      return {};
    }),
    RepositoryModelUnload: unary('RepositoryModelUnload', async (req) => {
      noRepositoryName(req);
      const p = req.parameters?.unload_dependents;
      if (p && p.parameter_choice !== 'bool_param') {
        throw new TsiError('INVALID_ARG', `invalid value type for 'unload_dependents' parameter, expected bool_param.`);
      }
      await ext.modelControl.unload(req.model_name, p?.bool_param === true);
      return {};
    }),
    SystemSharedMemoryStatus: unary('SystemSharedMemoryStatus', (req) => ({
      regions: Object.fromEntries(ext.sharedMemory.systemStatus(req.name || undefined).map((r) => [r.name, r])),
    })),
    SystemSharedMemoryRegister: unary('SystemSharedMemoryRegister', async (req) => {
      await ext.sharedMemory.registerSystem(req.name, req.key, Number(req.offset), Number(req.byte_size));
      return {};
    }),
    SystemSharedMemoryUnregister: unary('SystemSharedMemoryUnregister', async (req) => {
      await ext.sharedMemory.unregisterSystem(req.name || undefined);
      return {};
    }),
    CudaSharedMemoryStatus: unary('CudaSharedMemoryStatus', (req) => ({ regions: Object.fromEntries(cuda(req.name).map((r) => [r.name, r])) })),
    CudaSharedMemoryRegister: unary('CudaSharedMemoryRegister', (req) => ext.sharedMemory.registerCuda(req.name)),
    CudaSharedMemoryUnregister: unary('CudaSharedMemoryUnregister', () => (ext.sharedMemory.unregisterCuda(), {})),
    TraceSetting: unary('TraceSetting', (req) => {
      const model: string | undefined = req.model_name || undefined;
      if (model) checkTraceModel(server, model);
      const settings = Object.entries((req.settings ?? {}) as Obj);
      // gRPC has one call for reading and writing: no settings means "read".
      if (settings.length > 0) {
        const u: Record<string, string | string[] | null> = {};
        for (const [k, v] of settings) {
          const values: string[] = v?.value ?? [];
          putEntry(u, k, values.length === 0 ? null : k === 'trace_level' ? values : values.length === 1 ? values[0]! : values);
        }
        ext.traces.update(model, parseTraceUpdate(u));
      }
      const json = traceSettingsJson(ext.traces, model);
      return { settings: Object.fromEntries(Object.entries(json).map(([k, v]) => [k, { value: Array.isArray(v) ? v : [v] }])) };
    }),
    LogSettings: unary('LogSettings', (req) => {
      const u = logSettingsFromProto(req.settings);
      const json = Object.keys(u).length > 0 ? ext.logging.update(u) : ext.logging.json();
      return { settings: logSettingsToProto(json as unknown as Record<string, unknown>) };
    }),
  };
}

/** One ModelInfer; `encode` writes the answer (one buffer for grpc-js, frame pieces for direct.ts). */
async function modelInfer<T>(
  server: InferenceServer, ext: ServerExtensions, msg: Obj, onCancel: (cancel: () => void) => void,
  encode: (resp: InferResponse, inShm?: ReadonlySet<string>) => T, header: (key: string) => string | undefined,
  /** With --grpc-header-forward-pattern: adds the call's matching metadata to the request's parameters. */
  forward?: Forwarder,
  /** When the request's message was in hand, before it was decoded (GRPC_WAITREAD_START). */
  readStart?: number,
  /** The message's frame when its buffer is the call's own (direct.ts joined it): see decodeInferRequest. */
  own?: Uint8Array,
): Promise<T> {
  const trace = ext.traces.sample(msg.model_name ?? '', { name: 'GRPC_WAITREAD_START', ns: readStart ?? server.clock.nowNs() }, traceContextOf(header));
  trace?.mark('GRPC_WAITREAD_END');
  try {
    const { request, shmInputs, shmOutputs } = decodeInferRequest(msg, own);
    forward?.(request);
    const release = ext.sharedMemory.hold(shmInputs, shmOutputs);
    let resp: InferResponse;
    let inShm: Set<string> | undefined;
    try {
      if (shmInputs.length > 0) await ext.sharedMemory.readInputs(request, shmInputs);
      if (shmOutputs.size > 0) ext.sharedMemory.checkOutputs(shmOutputs);
      if (trace) {
        attachTrace(request, trace);
        trace.requestId = request.id ?? '';
      }
      resp = await server.infer(request, { onCancel });
      if (trace) {
        trace.mark('INFER_RESPONSE_COMPLETE');
        trace.version = Number(resp.model_version);
      }
      inShm = shmOutputs.size > 0 ? await ext.sharedMemory.writeOutputs(resp, shmOutputs) : undefined;
    } finally {
      if (release) await release();
    }
    trace?.mark('GRPC_SEND_START');
    const out = encode(resp, inShm);
    // The answer's bytes are with the transport: what tsi can see of Triton's "sent".
    trace?.mark('GRPC_SEND_END');
    return out;
  } catch (err) {
    if (trace) trace.error ??= asTsiError(err).message;
    throw err;
  } finally {
    trace?.finish();
  }
}

/**
 * How much one stream may hold. A stream is not read while it has `inflight` requests being answered,
 * or while its unsent responses pass `high` bytes (until they drain below `low`): the client's further
 * requests then wait in HTTP/2 flow control, not in this process. Past `cap` unsent bytes — only a
 * decoupled model that keeps producing for a client that keeps not reading gets there — the stream's
 * requests are cancelled and the call ends with RESOURCE_EXHAUSTED. Tests lower them.
 */
export const STREAM_LIMITS = { inflight: 1024, high: 8 * 1024 * 1024, low: 2 * 1024 * 1024, cap: 256 * 1024 * 1024 };

function streamInfer(
  server: InferenceServer, ext: ServerExtensions, call: grpc.ServerDuplexStream<Buffer, Buffer>, decode: RequestDecoder,
  forward: Forwarder | undefined, responsePool = Infinity,
): void {
  let pending = 0;
  let halfClosed = false;
  let closed = false;
  /** Bytes and responses written to the call and not yet handed to HTTP/2, and whether reading is paused. */
  let backlog = 0;
  let unsent = 0;
  let paused = false;
  /** Cancels every request of the stream still running when the client cancels the call. */
  const cancels = new Set<() => void>();
  const cancelAll = () => {
    for (const c of cancels) c();
    cancels.clear();
  };
  /** Reading stops while too much is in flight or unsent, and starts again once both have come down. */
  const flow = () => {
    if (closed) return;
    if (!paused && (pending >= STREAM_LIMITS.inflight || backlog > STREAM_LIMITS.high || unsent >= responsePool)) {
      paused = true;
      call.pause();
    } else if (paused && pending < STREAM_LIMITS.inflight && backlog <= STREAM_LIMITS.low && unsent < responsePool) {
      paused = false;
      call.resume();
    }
  };
  const sent = (n: number) => () => {
    backlog -= n;
    unsent--;
    flow();
  };
  const write = (m: Buffer) => {
    if (closed || call.cancelled) return;
    const n = m.byteLength;
    backlog += n;
    unsent++;
    if (backlog > STREAM_LIMITS.cap) {
      closed = true;
      cancelAll();
      call.emit('error', {
        code: grpc.status.RESOURCE_EXHAUSTED,
        details: `stream closed: the client has not read ${backlog} bytes of responses (limit ${STREAM_LIMITS.cap})`,
      });
      return;
    }
    call.write(m, sent(n));
    flow();
  };
  const maybeEnd = () => {
    if (halfClosed && pending === 0 && !closed) {
      closed = true;
      call.end();
    }
  };
  const fail = (msg: Obj, err: unknown) => write(encodeStreamError(msg, asTsiError(err)));
  // A client that sends `triton_grpc_error: true` wants the first error an inference answers with to
  // end the stream with its status (Triton's grpc error mode); the stream's other requests are cancelled.
  const errorEnds = call.metadata.get('triton_grpc_error')[0] === 'true';
  // A stream's metadata comes once: every request on it continues the client's trace, if it sent one.
  const traceContext = traceContextOf(metadataValue(call.metadata));
  /** An inference's own error: inside the stream, flagged like any response, or the stream's end. */
  const failed = (msg: Obj, err: unknown, final: boolean) => {
    if (!errorEnds) return write(encodeStreamError(msg, asTsiError(err), { triton_final_response: final }));
    if (closed || call.cancelled) return;
    closed = true;
    cancelAll();
    call.emit('error', toStatus(err));
  };

  /**
   * Requests to models that are not decoupled are answered in the order they came, as Triton queues
   * them on a stream: each takes its place on arrival, and writes once the places before it are done.
   * A decoupled request gives its place up at once (its responses go out as they come).
   */
  let inOrder: Promise<void> = Promise.resolve();

  const handle = async (bytes: Buffer): Promise<void> => {
    const before = inOrder;
    let giveUp!: () => void;
    const mine = new Promise<void>((r) => (giveUp = r));
    inOrder = before.then(() => mine);
    try {
      await answer(bytes, before, giveUp);
    } finally {
      giveUp();
    }
  };

  const answer = async (bytes: Buffer, before: Promise<void>, giveUp: () => void): Promise<void> => {
    let msg: Obj;
    const readStart = server.clock.nowNs();
    try {
      msg = decode(bytes);
    } catch (err) {
      // Nothing of the request is known: the error alone answers it, and the stream goes on.
      fail({}, err);
      return;
    }
    const trace = ext.traces.sample(msg.model_name ?? '', { name: 'GRPC_WAITREAD_START', ns: readStart }, traceContext);
    trace?.mark('GRPC_WAITREAD_END');
    // Responses of one request are written in order even though shared-memory writes are async.
    let chain = Promise.resolve();
    let release: (() => Promise<void>) | undefined;
    try {
      const { request, shmInputs, shmOutputs } = decodeInferRequest(msg);
      request.firstAnswerOnly = true;
      forward?.(request);
      release = ext.sharedMemory.hold(shmInputs, shmOutputs);
      const enableEmptyFinal = request.parameters?.triton_enable_empty_final_response === true;
      if (shmInputs.length > 0) await ext.sharedMemory.readInputs(request, shmInputs);
      if (shmOutputs.size > 0) ext.sharedMemory.checkOutputs(shmOutputs);
      const decoupled = (await server.resident(request.model_name, request.model_version)).decoupled;
      if (decoupled) giveUp();
      else chain = before;
      if (trace) {
        attachTrace(request, trace);
        trace.requestId = request.id ?? '';
      }
      let cancel: (() => void) | undefined;
      await server.inferStream(request, (resp, final) => {
        if (final && cancel) cancels.delete(cancel);
        if (final && trace) trace.mark('INFER_RESPONSE_COMPLETE');
        chain = chain.then(async () => {
          if (resp instanceof TsiError) return failed(msg, resp, final);
          // A decoupled model's bare "final" flag is only sent when the client asked for it.
          const flagOnly = decoupled && final && resp.outputs.length === 0;
          if (flagOnly && !enableEmptyFinal) return;
          try {
            const inShm = shmOutputs.size > 0 ? await ext.sharedMemory.writeOutputs(resp, shmOutputs) : undefined;
            if (trace) trace.version = Number(resp.model_version);
            // Triton flags every response of the stream, decoupled or not, asked or not.
            if (final) trace?.mark('GRPC_SEND_START');
            write(encodeStreamResponse(resp, inShm, { triton_final_response: final }));
            if (final) trace?.mark('GRPC_SEND_END');
          } catch (err) {
            failed(msg, err, final);
          }
        });
      }, {
        onCancel: (c) => {
          if (closed) return c();
          cancel = c;
          cancels.add(c);
        },
      });
    } catch (err) {
      chain = chain.then(() => fail(msg, err));
    } finally {
      await chain;
      if (release) await release();
      trace?.finish();
    }
  };

  call.on('data', (bytes: Buffer) => {
    pending++;
    flow();
    void handle(bytes).finally(() => {
      pending--;
      flow();
      maybeEnd();
    });
  });
  call.on('end', () => {
    halfClosed = true;
    maybeEnd();
  });
  call.on('cancelled', () => {
    closed = true;
    cancelAll();
  });
  call.on('error', () => {
    closed = true;
  });
}

function healthService(server: InferenceServer, decoders: Record<string, RequestDecoder>): grpc.UntypedServiceImplementation {
  const status = () => (server.isReady() ? 'SERVING' : 'NOT_SERVING');
  const known = (service: string) => service === '' || service === 'inference.GRPCInferenceService';
  return {
    Check: (call: grpc.ServerUnaryCall<Buffer, Obj>, callback: grpc.sendUnaryData<Obj>) => {
      let req: Obj;
      try {
        req = decoders.Check!(call.request);
      } catch (err) {
        return callback(toStatus(err));
      }
      if (!known(req.service)) return callback({ code: grpc.status.NOT_FOUND, details: `unknown service '${req.service}'` });
      callback(null, { status: status() });
    },
    Watch: (call: grpc.ServerWritableStream<Buffer, Obj>) => {
      let req: Obj;
      try {
        req = decoders.Watch!(call.request);
      } catch (err) {
        call.emit('error', toStatus(err));
        return;
      }
      let last = known(req.service) ? status() : 'SERVICE_UNKNOWN';
      call.write({ status: last });
      const timer = setInterval(() => {
        if (!known(req.service)) return;
        const now = status();
        if (now !== last) call.write({ status: (last = now) });
      }, 500);
      const stop = () => clearInterval(timer);
      call.on('cancelled', stop);
      call.on('close', stop);
      call.on('error', stop);
    },
  };
}
