/**
 * The gRPC server (@grpc/grpc-js): every RPC of `inference.GRPCInferenceService` from our own
 * wire-compatible proto/, plus the standard `grpc.health.v1.Health` (SERVING iff the server is ready),
 * each a thin translation onto InferenceServer and the ServerExtensions the HTTP app shares. TsiErrors
 * map to gRPC status codes by Triton's table (grpc_utils.cc); messages may be 2 GiB − 1 both ways, as in
 * Triton; gzip/deflate-compressed requests are accepted (grpc-js decompresses them), and ModelInfer /
 * ModelStreamInfer answers are gzip-compressed when `--grpc-infer-response-compression-level` asks for
 * it and the client accepts gzip (grpc-js's server never compresses; see compressInferAnswers).
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
 * TLS (Triton's `--grpc-use-ssl`, `--grpc-use-ssl-mutual`) uses credentials that follow certificate
 * reloads (runtime-node/tls.ts); API keys are checked by a server interceptor on every call of every
 * service but `grpc.health.v1.Health`, before any handler runs.
 */

import { existsSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import type { Http2SecureServer, Http2Server, ServerHttp2Session } from 'node:http2';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import {
  TsiError, asTsiError, attachTrace, checkTraceModel, grpcCategory, parseTraceUpdate, traceSettingsJson,
  type AuthRefusal, type ErrorCode, type InferenceServer, type Restrictions, type ServerExtensions,
} from '../core/index.js';
import {
  decodeInferRequest, encodeInferResponse, encodeStreamError, encodeStreamResponse, logSettingsFromProto, logSettingsToProto,
} from './grpc-codec.js';
import { BaseServerInterceptingCall } from '@grpc/grpc-js/build/src/server-interceptors.js';
import { grpcFrameOf, readModelInferRequest } from './grpc-wire.js';
import { ReloadingServerCredentials, type ReloadableTls } from './tls.js';

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
}

/** Ends a call the `authorize` check refuses, before its handler sees it. */
function authInterceptor(authorize: NonNullable<GrpcOptions['authorize']>): grpc.ServerInterceptor {
  return (method, call) => new grpc.ServerInterceptingCall(call, {
    start: (next) => next({
      onReceiveMetadata: (metadata, pass) => {
        const value = metadata.get('authorization')[0];
        const refusal = authorize(method.path, value === undefined ? undefined : String(value));
        if (!refusal) return pass(metadata);
        call.sendStatus({
          code: refusal.status === 'unauthenticated' ? grpc.status.UNAUTHENTICATED : grpc.status.PERMISSION_DENIED, details: refusal.message,
        });
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
}

/** Turns bytes into a request message; throws INVALID_ARG naming the message and the flaw. */
export type RequestDecoder = (bytes: Buffer) => Obj;

/** Methods whose messages tsi reads and writes by hand (grpc-wire.ts): the inference hot path. */
const HAND_DECODED: Record<string, (b: Buffer) => Obj> = { ModelInfer: readModelInferRequest, ModelStreamInfer: readModelInferRequest };

/**
 * The service with every request left as bytes by grpc-js (an identity deserializer), and per method
 * the decoder for the handler to call where it can answer a failure: grpc-wire.ts's for the inference
 * methods, proto-loader's for the rest. The inference methods' handlers answer with bytes they encoded
 * (grpc-wire.ts), which their serializer passes through.
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

/**
 * The HTTP/2 receive windows and frame size the server advertises. Node's defaults (64 KiB windows,
 * 16 KiB frames; grpc-js 1.14 passes no window option to its server) make a client stop every 64 KiB
 * of a request until the server's event loop has read it and sent WINDOW_UPDATE: a 4 MB ModelInfer
 * took ~64 such round trips and gRPC ran at 0.3 of HTTP's req/s. 8 MiB lets a 4 MB request arrive
 * without one; the connection's window holds four of them in flight. A stream whose reader pauses
 * (ModelStreamInfer past its high-water mark) can leave at most its window unread in the server.
 */
export const GRPC_SERVER_HTTP2 = { streamWindow: 8 * 2 ** 20, connectionWindow: 32 * 2 ** 20, maxFrameSize: 2 ** 20 } as const;

/**
 * Makes every HTTP/2 server grpc-js creates for `g` (plaintext and TLS, at bind) advertise
 * GRPC_SERVER_HTTP2, through node:http2's own updateSettings and setLocalWindowSize. grpc-js keeps
 * the server private, so this wraps its createHttp2Server; if a grpc-js upgrade renames it, the
 * server still works at default windows and test/node/grpc-large-messages.test.ts fails.
 */
function widenFlowControl(g: grpc.Server): void {
  const inner = g as unknown as { createHttp2Server?: (credentials: grpc.ServerCredentials) => Http2Server | Http2SecureServer };
  const create = inner.createHttp2Server;
  if (typeof create !== 'function') return;
  inner.createHttp2Server = (credentials) => {
    const h2 = create.call(g, credentials);
    h2.updateSettings({ initialWindowSize: GRPC_SERVER_HTTP2.streamWindow, maxFrameSize: GRPC_SERVER_HTTP2.maxFrameSize });
    h2.on('session', (session: ServerHttp2Session) => session.setLocalWindowSize(GRPC_SERVER_HTTP2.connectionWindow));
    return h2;
  };
}

/**
 * grpc-js frames every answer by copying the serialized message into a fresh buffer 5 bytes longer;
 * for a 4 MB tensor that is a second 4 MB allocation and copy per answer (HTTP writes the tensor as it
 * is). Answers written by grpc-wire.ts already carry their frame prefix, so the server's framing step
 * returns that frame for them and does what grpc-js does for anything else. If a grpc-js upgrade drops
 * the private method this wraps, answers are framed by grpc-js's copy as before (same bytes, slower).
 */
function sendFramedAnswersAsWritten(): void {
  const proto = BaseServerInterceptingCall.prototype as unknown as { serializeMessage?: (value: unknown) => Buffer; tsiFramed?: true };
  const copying = proto.serializeMessage;
  if (typeof copying !== 'function' || proto.tsiFramed) return;
  proto.serializeMessage = function (this: InterceptingCall, value: unknown) {
    const frame = value instanceof Uint8Array ? grpcFrameOf(value) : undefined;
    if (!frame) return copying.call(this, value);
    const level = gzipLevel(this);
    return level === undefined ? frame : gzipFrame(frame.subarray(5), level);
  };
  proto.tsiFramed = true;
}

const GZIP_LEVEL_OF = Symbol('tsi gzip level');
const INFER_PATHS = new Set(['/inference.GRPCInferenceService/ModelInfer', '/inference.GRPCInferenceService/ModelStreamInfer']);
interface TaggedStream { [GZIP_LEVEL_OF]?: number }
interface InterceptingCall {
  stream?: TaggedStream;
  handler?: { path?: string };
  metadataSent?: boolean;
  tsiGzip?: number;
}

/**
 * Response compression, which grpc-js's server does not do (it always answers `grpc-encoding:
 * identity` with the compressed flag 0, whatever the server's options say). Each stream of `g`'s
 * HTTP/2 servers whose client lists gzip in `grpc-accept-encoding` is tagged with the level; an
 * inference call on such a stream then sends `grpc-encoding: gzip` with its headers, and each answer
 * grpc-wire.ts wrote goes out gzipped with the compressed flag set (other messages keep the flag 0,
 * which gRPC allows on a gzip stream). gzip runs on the main thread, as an opt-in that costs what it
 * saves on the network. Private grpc-js methods again: if an upgrade renames them, answers go out
 * uncompressed and test/node/grpc-compression.test.ts fails.
 */
function compressInferAnswers(g: grpc.Server, level: number | undefined): void {
  const inner = g as unknown as { createHttp2Server?: (credentials: grpc.ServerCredentials) => Http2Server | Http2SecureServer };
  const create = inner.createHttp2Server;
  if (level === undefined || typeof create !== 'function') return;
  inner.createHttp2Server = (credentials) => {
    const h2 = create.call(g, credentials);
    // Before grpc-js's own listener, which builds the call from the stream.
    h2.prependListener('stream', (stream, headers) => {
      const accepted = String(headers['grpc-accept-encoding'] ?? '').split(',').map((e) => e.trim());
      if (accepted.includes('gzip')) (stream as TaggedStream)[GZIP_LEVEL_OF] = level;
    });
    return h2;
  };
  const proto = BaseServerInterceptingCall.prototype as unknown as {
    sendMetadata?: (this: InterceptingCall, metadata: grpc.Metadata | null) => void;
    tsiCompressing?: true;
  };
  const send = proto.sendMetadata;
  if (typeof send !== 'function' || proto.tsiCompressing) return;
  proto.sendMetadata = function (this: InterceptingCall, metadata: grpc.Metadata | null) {
    if (gzipLevel(this) !== undefined) {
      metadata = metadata ? metadata.clone() : new grpc.Metadata();
      metadata.set('grpc-encoding', 'gzip');
    }
    send.call(this, metadata);
  };
  proto.tsiCompressing = true;
}

/**
 * The gzip level of an inference call's answers, decided once, before its headers go: grpc-js frames
 * a call's first message before it sends the headers when no interceptor sent them first, and after
 * when one did, so whichever of the two comes first decides.
 */
function gzipLevel(call: InterceptingCall): number | undefined {
  if (call.tsiGzip === undefined && !call.metadataSent && INFER_PATHS.has(call.handler?.path ?? '')) {
    call.tsiGzip = call.stream?.[GZIP_LEVEL_OF];
  }
  return call.tsiGzip;
}

/** A gRPC frame of `message` gzipped at `level`, compressed flag set. */
function gzipFrame(message: Uint8Array, level: number): Buffer {
  const z = gzipSync(message, { level });
  const frame = Buffer.allocUnsafe(5 + z.byteLength);
  frame[0] = 1;
  frame.writeUInt32BE(z.byteLength, 1);
  z.copy(frame, 5);
  return frame;
}

export async function listenGrpc(server: InferenceServer, opts: GrpcOptions): Promise<GrpcListener> {
  sendFramedAnswersAsWritten();
  const { inference, health } = loadProtos();
  const g = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    ...(opts.authorize ? { interceptors: [authInterceptor(opts.authorize)] } : {}),
  });
  widenFlowControl(g);
  compressInferAnswers(g, GZIP_LEVEL[opts.responseCompression ?? 'none']);
  const inf = rawRequestService(inference);
  const hl = rawRequestService(health);
  g.addService(inf.service, inferenceService(server, opts, inf.decoders));
  g.addService(hl.service, healthService(server, hl.decoders));
  const host = opts.address.includes(':') && !opts.address.startsWith('[') ? `[${opts.address}]` : opts.address;
  const port = await new Promise<number>((resolve, reject) => {
    const credentials = opts.tls ? new ReloadingServerCredentials(opts.tls) : grpc.ServerCredentials.createInsecure();
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
    async close(timeoutMs = 1000) {
      stopAccepting();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([shutdown, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
      clearTimeout(timer);
      g.forceShutdown();
    },
  };
}

/** Triton answers a restricted call with UNAVAILABLE and this text. */
function restriction(method: string, metadata: grpc.Metadata, r?: Restrictions): Partial<grpc.StatusObject> | undefined {
  const cat = grpcCategory(method);
  const rule = cat ? r?.get(cat) : undefined;
  if (!rule) return undefined;
  const got = metadata.get(rule.key.toLowerCase())[0];
  if (got !== undefined && String(got) === rule.value) return undefined;
  return { code: grpc.status.UNAVAILABLE, details: `This protocol is restricted, expecting header '${rule.key}'` };
}

function inferenceService(server: InferenceServer, opts: GrpcOptions, decoders: Record<string, RequestDecoder>): grpc.UntypedServiceImplementation {
  const ext = opts.extensions;
  const unary = (method: string, fn: (req: Obj) => Obj | Promise<Obj>): grpc.handleUnaryCall<Buffer, Obj> => (call, callback) => {
    const denied = restriction(method, call.metadata, opts.restrictedProtocol);
    if (denied) return callback(denied);
    const decode = decoders[method]!;
    Promise.resolve().then(() => fn(decode(call.request))).then((res) => callback(null, res), (err) => callback(toStatus(err)));
  };
  const noRepositoryName = (req: Obj) => {
    if (req.repository_name) throw new TsiError('UNSUPPORTED', `'repository_name' specification is not supported`);
  };
  const cuda = (name: string) => ext.sharedMemory.cudaStatus(name || undefined);

  return {
    ServerLive: unary('ServerLive', () => ({ live: server.isLive() })),
    ServerReady: unary('ServerReady', () => ({ ready: server.isReady() })),
    ModelReady: unary('ModelReady', (req) => {
      try {
        return { ready: server.modelReady(req.name, req.version || undefined) };
      } catch (err) {
        // A known model that is loading or unloading is simply not ready; an unknown one is an error.
        if (asTsiError(err).code === 'UNAVAILABLE') return { ready: false };
        throw err;
      }
    }),
    ServerMetadata: unary('ServerMetadata', () => server.metadata()),
    ModelMetadata: unary('ModelMetadata', (req) => server.modelMetadata(req.name, req.version || undefined)),
    ModelConfig: unary('ModelConfig', (req) => ({ config: server.modelConfig(req.name, req.version || undefined) })),
    ModelStatistics: unary('ModelStatistics', (req) => server.statistics(req.name || undefined, req.version || undefined)),
    ModelInfer: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const denied = restriction('ModelInfer', call.metadata, opts.restrictedProtocol);
      if (denied) return callback(denied);
      const onCancel = (cancel: () => void) => {
        if (call.cancelled) cancel();
        else call.once('cancelled', cancel);
      };
      let msg: Obj;
      try {
        msg = decoders.ModelInfer!(call.request);
      } catch (err) {
        return callback(toStatus(err));
      }
      modelInfer(server, ext, msg, onCancel).then((res) => callback(null, res), (err) => callback(toStatus(err)));
    },
    ModelStreamInfer: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      const denied = restriction('ModelStreamInfer', call.metadata, opts.restrictedProtocol);
      if (denied) {
        call.emit('error', denied);
        return;
      }
      streamInfer(server, ext, call, decoders.ModelStreamInfer!);
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
    CudaSharedMemoryUnregister: unary('CudaSharedMemoryUnregister', () => ({})),
    TraceSetting: unary('TraceSetting', (req) => {
      const model: string | undefined = req.model_name || undefined;
      if (model) checkTraceModel(server, model);
      const settings = Object.entries((req.settings ?? {}) as Obj);
      // gRPC has one call for reading and writing: no settings means "read".
      if (settings.length > 0) {
        const u: Record<string, string | string[] | null> = {};
        for (const [k, v] of settings) {
          const values: string[] = v?.value ?? [];
          u[k] = values.length === 0 ? null : k === 'trace_level' ? values : values.length === 1 ? values[0]! : values;
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

async function modelInfer(server: InferenceServer, ext: ServerExtensions, msg: Obj, onCancel: (cancel: () => void) => void): Promise<Buffer> {
  const trace = ext.traces.sample(msg.model_name ?? '', { name: 'GRPC_WAITREAD_END', ns: server.clock.nowNs() });
  try {
    const { request, shmInputs, shmOutputs } = decodeInferRequest(msg);
    if (shmInputs.length > 0) await ext.sharedMemory.readInputs(request, shmInputs);
    if (shmOutputs.size > 0) ext.sharedMemory.checkOutputs(shmOutputs);
    if (trace) {
      attachTrace(request, trace);
      trace.requestId = request.id ?? '';
    }
    const resp = await server.infer(request, { onCancel });
    if (trace) {
      trace.mark('REQUEST_END');
      trace.version = Number(resp.model_version);
    }
    const inShm = shmOutputs.size > 0 ? await ext.sharedMemory.writeOutputs(resp, shmOutputs) : undefined;
    trace?.mark('GRPC_SEND_START');
    return encodeInferResponse(resp, inShm);
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

function streamInfer(server: InferenceServer, ext: ServerExtensions, call: grpc.ServerDuplexStream<Buffer, Buffer>, decode: RequestDecoder): void {
  let pending = 0;
  let halfClosed = false;
  let closed = false;
  /** Bytes written to the call and not yet handed to HTTP/2, and whether reading is paused. */
  let backlog = 0;
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
    if (!paused && (pending >= STREAM_LIMITS.inflight || backlog > STREAM_LIMITS.high)) {
      paused = true;
      call.pause();
    } else if (paused && pending < STREAM_LIMITS.inflight && backlog <= STREAM_LIMITS.low) {
      paused = false;
      call.resume();
    }
  };
  const sent = (n: number) => () => {
    backlog -= n;
    flow();
  };
  const write = (m: Buffer) => {
    if (closed || call.cancelled) return;
    const n = m.byteLength;
    backlog += n;
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

  const handle = async (bytes: Buffer): Promise<void> => {
    let msg: Obj;
    try {
      msg = decode(bytes);
    } catch (err) {
      // Nothing of the request is known: the error alone answers it, and the stream goes on.
      fail({}, err);
      return;
    }
    const trace = ext.traces.sample(msg.model_name ?? '', { name: 'GRPC_WAITREAD_END', ns: server.clock.nowNs() });
    // Responses of one request are written in order even though shared-memory writes are async.
    let chain = Promise.resolve();
    try {
      const { request, shmInputs, shmOutputs } = decodeInferRequest(msg);
      const enableEmptyFinal = request.parameters?.triton_enable_empty_final_response === true;
      if (shmInputs.length > 0) await ext.sharedMemory.readInputs(request, shmInputs);
      if (shmOutputs.size > 0) ext.sharedMemory.checkOutputs(shmOutputs);
      const decoupled = server.model(request.model_name, request.model_version).decoupled;
      if (trace) {
        attachTrace(request, trace);
        trace.requestId = request.id ?? '';
      }
      let cancel: (() => void) | undefined;
      await server.inferStream(request, (resp, final) => {
        if (final && cancel) cancels.delete(cancel);
        if (final && trace) trace.mark('REQUEST_END');
        chain = chain.then(async () => {
          if (resp instanceof TsiError) return fail(msg, resp);
          // A decoupled model's bare "final" flag is only sent when the client asked for it.
          const flagOnly = decoupled && final && resp.outputs.length === 0;
          if (flagOnly && !enableEmptyFinal) return;
          try {
            const inShm = shmOutputs.size > 0 ? await ext.sharedMemory.writeOutputs(resp, shmOutputs) : undefined;
            if (trace) trace.version = Number(resp.model_version);
            write(encodeStreamResponse(resp, inShm, enableEmptyFinal ? { triton_final_response: final } : undefined));
          } catch (err) {
            fail(msg, err);
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
