/**
 * The gRPC server (@grpc/grpc-js): every RPC of `inference.GRPCInferenceService` from our own
 * wire-compatible proto/, plus the standard `grpc.health.v1.Health` (SERVING iff the server is ready),
 * each a thin translation onto InferenceServer and the ServerExtensions the HTTP app shares. TsiErrors
 * map to gRPC status codes by Triton's table (grpc_utils.cc); messages may be 2 GiB − 1 both ways, as in
 * Triton; gzip/deflate-compressed requests are accepted (grpc-js decompresses them) and responses are
 * compressed when `--grpc-infer-response-compression-level` asks for it.
 *
 * ModelStreamInfer keeps one bidirectional stream per client: each request is answered on the stream
 * as its responses arrive (a decoupled model may send several), a failed request becomes a message
 * with `error_message` while the stream stays open, and the stream closes once the client has
 * half-closed and every request on it has had its final response.
 */

import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import {
  TsiError, asTsiError, attachTrace, checkTraceModel, grpcCategory, parseTraceUpdate, traceSettingsJson,
  type ErrorCode, type InferenceServer, type Restrictions, type ServerExtensions,
} from '../core/index.js';
import {
  decodeInferRequest, encodeInferResponse, logSettingsFromProto, logSettingsToProto,
} from './grpc-codec.js';

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

const COMPRESSION = { none: 0, low: 2, medium: 2, high: 2 } as const;

export interface GrpcOptions {
  port: number;
  address: string;
  extensions: ServerExtensions;
  /** --grpc-restricted-protocol, keys already prefixed with `triton-grpc-protocol-`. */
  restrictedProtocol?: Restrictions;
  /** --grpc-infer-response-compression-level: anything but none answers gzip-compressed. */
  responseCompression?: keyof typeof COMPRESSION;
}

export interface GrpcListener {
  port: number;
  address: string;
  /** Refuses new calls; calls already running continue. */
  stopAccepting(): void;
  /** Waits up to `timeoutMs` for running calls (open streams), then cancels what is left. */
  close(timeoutMs?: number): Promise<void>;
}

export async function listenGrpc(server: InferenceServer, opts: GrpcOptions): Promise<GrpcListener> {
  const { inference, health } = loadProtos();
  const g = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    'grpc.default_compression_algorithm': COMPRESSION[opts.responseCompression ?? 'none'],
  });
  g.addService(inference, inferenceService(server, opts));
  g.addService(health, healthService(server));
  const host = opts.address.includes(':') && !opts.address.startsWith('[') ? `[${opts.address}]` : opts.address;
  const port = await new Promise<number>((resolve, reject) => {
    g.bindAsync(`${host}:${opts.port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
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

function inferenceService(server: InferenceServer, opts: GrpcOptions): grpc.UntypedServiceImplementation {
  const ext = opts.extensions;
  const unary = (method: string, fn: (req: Obj) => Obj | Promise<Obj>): grpc.handleUnaryCall<Obj, Obj> => (call, callback) => {
    const denied = restriction(method, call.metadata, opts.restrictedProtocol);
    if (denied) return callback(denied);
    Promise.resolve().then(() => fn(call.request)).then((res) => callback(null, res), (err) => callback(toStatus(err)));
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
    ModelInfer: (call: grpc.ServerUnaryCall<Obj, Obj>, callback: grpc.sendUnaryData<Obj>) => {
      const denied = restriction('ModelInfer', call.metadata, opts.restrictedProtocol);
      if (denied) return callback(denied);
      const onCancel = (cancel: () => void) => {
        if (call.cancelled) cancel();
        else call.once('cancelled', cancel);
      };
      modelInfer(server, ext, call.request, onCancel).then((res) => callback(null, res), (err) => callback(toStatus(err)));
    },
    ModelStreamInfer: (call: grpc.ServerDuplexStream<Obj, Obj>) => {
      const denied = restriction('ModelStreamInfer', call.metadata, opts.restrictedProtocol);
      if (denied) {
        call.emit('error', denied);
        return;
      }
      streamInfer(server, ext, call);
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

async function modelInfer(server: InferenceServer, ext: ServerExtensions, msg: Obj, onCancel: (cancel: () => void) => void): Promise<Obj> {
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

function streamInfer(server: InferenceServer, ext: ServerExtensions, call: grpc.ServerDuplexStream<Obj, Obj>): void {
  let pending = 0;
  let halfClosed = false;
  let closed = false;
  /** Cancels every request of the stream still running when the client cancels the call. */
  const cancels = new Set<() => void>();
  const write = (m: Obj) => {
    if (!closed && !call.cancelled) call.write(m);
  };
  const maybeEnd = () => {
    if (halfClosed && pending === 0 && !closed) {
      closed = true;
      call.end();
    }
  };
  const fail = (msg: Obj, err: unknown) => write({
    error_message: asTsiError(err).message,
    infer_response: { id: msg.id ?? '', model_name: msg.model_name ?? '', model_version: msg.model_version ?? '' },
  });

  const handle = async (msg: Obj): Promise<void> => {
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
            write({ error_message: '', infer_response: encodeInferResponse(resp, inShm, enableEmptyFinal ? { triton_final_response: final } : undefined) });
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

  call.on('data', (msg: Obj) => {
    pending++;
    void handle(msg).finally(() => {
      pending--;
      maybeEnd();
    });
  });
  call.on('end', () => {
    halfClosed = true;
    maybeEnd();
  });
  call.on('cancelled', () => {
    closed = true;
    for (const c of cancels) c();
    cancels.clear();
  });
  call.on('error', () => {
    closed = true;
  });
}

function healthService(server: InferenceServer): grpc.UntypedServiceImplementation {
  const status = () => (server.isReady() ? 'SERVING' : 'NOT_SERVING');
  const known = (service: string) => service === '' || service === 'inference.GRPCInferenceService';
  return {
    Check: (call: grpc.ServerUnaryCall<Obj, Obj>, callback: grpc.sendUnaryData<Obj>) => {
      if (!known(call.request.service)) return callback({ code: grpc.status.NOT_FOUND, details: `unknown service '${call.request.service}'` });
      callback(null, { status: status() });
    },
    Watch: (call: grpc.ServerWritableStream<Obj, Obj>) => {
      let last = known(call.request.service) ? status() : 'SERVICE_UNKNOWN';
      call.write({ status: last });
      const timer = setInterval(() => {
        if (!known(call.request.service)) return;
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
