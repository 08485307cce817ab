/**
 * tsi for Node: core bound to onnxruntime-node (in worker threads) and to real sockets. `startServer`
 * is what `tsi-node serve` runs and what tests start on port 0; everything protocol-shaped comes from
 * core, so this file only wires backends, repositories and listeners together.
 */

import { imageUrlFetcher } from './http/image-urls.js';
import { openSync, readFileSync, writeSync } from 'node:fs';
import { deflate, gzip } from 'node:zlib';
import { availableParallelism, totalmem } from 'node:os';
import {
  BackendRegistry, createEmbeddingBackend, createClassifierBackend, createWhisperBackend, DEFAULT_MAX_INPUT_SIZE, InferenceServer, inferEndpoint, RepositoryPoller, ResponseCache, ServerExtensions, parseRateLimitResource, type RateLimitMode, controllableLogger, createHttpApp,
  createLogger, headerForwardPattern, createSagemakerApp, createVertexAiApp, vertexAiDefaultModel, TsiError, asTsiError, type SagemakerInferenceType, type ConfigurableLogger, type LogFormat, parseMemoryBudget, parseRestrictions, type Backend, type CompressionPolicy, type Logger, type ModelControlMode, type SchedulerDelay, type TraceSetting,
} from '../core/index.js';
import { fileTraceWriter, tempFolderStager } from './fs-extensions.js';
import { listenGrpc, type GrpcListener } from './grpc/server.js';
import { listenMetrics, registerHostMetrics, type MetricsListener } from './metrics.js';
import { nodeShmProvider } from './shm.js';
import { repositorySources } from './fs-source.js';
import { listen, type Listener } from './http/server.js';
import { sagemakerModelStore } from './http/sagemaker-store.js';
import { Shutdown, type ShutdownProgress, type ShutdownReport, type StopOptions } from './shutdown.js';
import { ReloadableTls, type TlsFiles } from './http/tls.js';
import { ApiKeyring, grpcAuthorizer, httpAuthorizer } from './http/api-keys.js';
import { createOnnxBackend } from './onnx/backend.js';
import { createJsBackend } from './js-backend.js';
import { browserRoutes } from './browser-assets.js';
import { dashboardRoutes } from './dashboard/index.js';
import type { Hono } from 'hono';
import { GpuMetrics, gpuCount } from './gpu/index.js';

export interface NodeServerOptions {
  modelRepositories: string[];
  httpPort?: number;
  httpAddress?: string;
  /** false: no HTTP listener (tritonserver's --allow-http=false). */
  allowHttp?: boolean;
  logVerbose?: number;
  log?: Logger;
  /** The file `log` writes to (`--log-file`), as `/v2/logging` reports it. */
  logFile?: string;
  strictReadiness?: boolean;
  modelControlMode?: ModelControlMode;
  /**
   * false: a model repository folder that does not exist does not stop the start; the server serves
   * on, not live and not ready, without models (tritonserver's --exit-on-error=false). Default true.
   */
  exitOnError?: boolean;
  loadModels?: string[];
  autoComplete?: boolean;
  defaultMaxBatchSize?: number;
  /** tritonserver's `--model-load-thread-count`: models loaded at once (default 4). */
  modelLoadThreadCount?: number;
  /** tritonserver's `--model-load-retry-count`: times a version that fails to load is tried again (default 0). */
  modelLoadRetryCount?: number;
  /** tritonserver's `--model-config-name`: each model's `configs/<name>.pbtxt` where it has one, else its config.pbtxt. */
  modelConfigName?: string;
  /** tritonserver's `--model-namespacing`: the same model name may load from several repositories (core/repository/namespaces.ts). */
  modelNamespacing?: boolean;
  /** `--max-loaded-models`: load models on demand, at most this many at once (core/repository/residency.ts). */
  maxLoadedModels?: number;
  /** `--model-memory-budget`: load models on demand within this memory (bytes, `2G`, or `50%` of the machine's). */
  modelMemoryBudget?: string;
  /** `--backend-config <backend>,<key>=<value>` settings by backend name (`*`: given without a backend). */
  backendConfig?: Record<string, Record<string, string>>;
  corsOrigin?: string | string[];
  maxInputSize?: number;
  /** `--allow-image-urls`: chat image_url parts may be http(s) URLs, fetched (never from private addresses; http/image-urls.ts). */
  allowImageUrls?: boolean;
  id?: string;
  /** Also serve the browser demo (/demo), the browser build (/browser/) and the repositories' files (/repository/). */
  browserDemo?: boolean;
  /** gRPC listener port; unset = no gRPC listener (the CLI passes 8001). */
  grpcPort?: number;
  grpcAddress?: string;
  /** --grpc-restricted-protocol specs, `<categories>:<key>=<value>`. */
  grpcRestrictedProtocol?: string[];
  grpcResponseCompression?: 'none' | 'low' | 'medium' | 'high';
  /** Prometheus listener port; unset = no metrics listener (the CLI passes 8002). */
  metricsPort?: number;
  /** Default: the HTTP address. */
  metricsAddress?: string;
  cpuMetrics?: boolean;
  /** nv_gpu_* metrics for NVIDIA GPUs (tritonserver's --allow-gpu-metrics; default true). */
  gpuMetrics?: boolean;
  /** How often GPU readings are taken (tritonserver's --metrics-interval-ms; default 2000). */
  metricsIntervalMs?: number;
  /** The nvidia-smi the GPU metrics run (default: `nvidia-smi` from PATH). */
  nvidiaSmi?: string;
  /** --http-restricted-api specs, `<categories>:<key>=<value>`. */
  httpRestrictedApi?: string[];
  /** --http-header-forward-pattern / --grpc-header-forward-pattern: regular expressions (Triton's reading). */
  httpHeaderForwardPattern?: string;
  grpcHeaderForwardPattern?: string;
  /** --grpc-max-response-pool-size: responses a gRPC stream may hold unsent before it stops reading. */
  grpcMaxResponsePoolSize?: number;
  /** --allow-client-shm (default false). */
  allowClientShm?: boolean;
  /** Poll interval in poll mode (default 15; 0 = never poll after start-up). */
  repositoryPollSecs?: number;
  /** Initial trace settings (--trace-config). */
  trace?: Partial<TraceSetting>;
  /** The response cache's size in bytes (tritonserver's `--cache-config local,size=N`); unset = no cache. */
  responseCacheBytes?: number;
  /** Which infer responses are compressed for clients that accept it (--http-compression); default auto. */
  httpCompression?: CompressionPolicy;
  /** Backends to register besides onnxruntime (name → factory), e.g. a JavaScript or decoupled backend. */
  extraBackends?: Record<string, () => Backend | Promise<Backend>>;
  /** --allow-model-code-upload: load requests may upload model code and set interpreter paths (default false). */
  allowModelCodeUpload?: boolean;
  /** --http-use-ssl[-mutual], --http-server-cert, --http-server-key, --http-root-cert; unset = plain HTTP. */
  httpTls?: TlsFiles;
  /** --grpc-use-ssl[-mutual], --grpc-server-cert, --grpc-server-key, --grpc-root-cert; unset = plaintext gRPC. */
  grpcTls?: TlsFiles;
  /** --api-key values, `[<categories>:]<key>`; with these or apiKeyFile, every API but health needs a key. */
  apiKeys?: string[];
  /** --api-key-file: one `[<categories>:]<key>` a line, re-read when it changes and on reloadCredentials(). */
  apiKeyFile?: string;
  /** Debounce of the certificate and key-file watchers (default 200 ms); 0 = do not watch (reload on demand only). */
  credentialsWatchMs?: number;
  /** How long a request head (and a TLS handshake) may take to arrive, in ms (default 60 s). */
  httpHeadersTimeoutMs?: number;
  /** How long a whole request may take to arrive, in ms (default 300 s). */
  httpRequestTimeoutMs?: number;
  /** How long a new gRPC connection may take to finish TLS and send the HTTP/2 preface, in ms (default 60 s). */
  grpcHandshakeTimeoutMs?: number;
  /** --rate-limit: `execution_count` makes instances wait for their rate_limiter resources; default off. */
  rateLimit?: RateLimitMode;
  /** --rate-limit-resource values, `<name>:<count>[:<device>]`. */
  rateLimitResources?: string[];
  /** --allow-dashboard: serve the live dashboard at /dashboard/ on the HTTP port (default false). */
  allowDashboard?: boolean;
  /** A folder of `tsi-node tune` reports the dashboard lists (--dashboard-tune-reports). */
  dashboardTuneReports?: string;
  /** Triton's scheduler test hook; default: read from the environment by `schedulerDelayFromEnv`. */
  schedulerDelay?: SchedulerDelay;
  /** Triton's gRPC test hook, in ms; default: read from the environment by `grpcResponseDelayFromEnv`. */
  grpcResponseDelayMs?: number;
  /** --allow-sagemaker: SageMaker's routes on a port of their own (core/protocol/cloud-endpoints.ts). */
  sagemaker?: SagemakerListenOptions;
  /** --allow-vertex-ai: Vertex AI's routes on a port of their own, listening once the models are loaded. */
  vertexAi?: VertexAiListenOptions;
}

export interface SagemakerListenOptions {
  port: number;
  address?: string;
  /** SAGEMAKER_TRITON_DEFAULT_MODEL_NAME */
  defaultModel?: string;
  /** SAGEMAKER_TRITON_INFERENCE_TYPE */
  inferenceType?: SagemakerInferenceType;
  /** SAGEMAKER_TRITON_PING_MODE */
  pingMode?: 'ready' | 'live';
  /** Where multi-model loads' urls must point (default /opt/ml/models). */
  modelsRoot?: string;
}

export interface VertexAiListenOptions {
  port: number;
  address?: string;
  /** AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE; either missing stops the start, as in Triton. */
  predictRoute?: string;
  healthRoute?: string;
  /** --vertex-ai-default-model; default: the only model loaded. */
  defaultModel?: string;
}

export interface RunningServer {
  server: InferenceServer;
  http?: Listener;
  sagemaker?: Listener;
  vertexAi?: Listener;
  grpc?: GrpcListener;
  metrics?: MetricsListener;
  /** Shared-memory regions, trace/log settings and model control, shared by HTTP and gRPC. */
  extensions: ServerExtensions;
  log: Logger;
  /** Reads the TLS certificates and the API key file again (what SIGHUP does); keeps what is in force if they are unusable. */
  reloadCredentials(): Promise<void>;
  /**
   * Shutdown phase a (runtime-node/shutdown.ts): not ready from now on (health, ServerReady,
   * ModelReady), every request still served; `stop` later counts its drain delay from here.
   */
  beginDrain(): void;
  /**
   * Graceful stop in phases: not ready for `drainDelayMs` (default 0), then listeners closed (HTTP
   * `Connection: close`, gRPC GOAWAY), in-flight requests and sequences drained (up to `timeoutMs`,
   * default 30 s; a number is that timeout), models unloaded. Calls after the first share its result.
   */
  stop(opts?: number | StopOptions): Promise<ShutdownReport>;
  /** Where a shutdown stands and what is still under way (for a log line when it is cut short). */
  shutdownProgress(): ShutdownProgress;
}

export function stderrLogger(verbose = 0) {
  return nodeLogger({ verbose });
}

export interface NodeLogOptions {
  verbose?: number;
  /** `--log-file`: lines are appended to this file instead of stderr (opened now: a bad path throws). */
  file?: string;
  info?: boolean;
  warning?: boolean;
  error?: boolean;
  format?: LogFormat;
}

/** The server's logger in Node: tritonserver's lines with this process's id, to stderr or a file. */
export function nodeLogger(o: NodeLogOptions = {}): ConfigurableLogger {
  let write = (line: string) => void process.stderr.write(line + '\n');
  if (o.file !== undefined) {
    // Synchronous appends: every line is in the file, in order, even if the process dies just after.
    const fd = openSync(o.file, 'a');
    write = (line) => void writeSync(fd, line + '\n');
  }
  const log = createLogger((_level, line) => write(line), o.verbose ?? 0, { pid: process.pid });
  Object.assign(log.settings, { info: o.info ?? true, warning: o.warning ?? true, error: o.error ?? true, format: o.format ?? 'default' });
  return log;
}

/**
 * The cores this process may use: the machine's, capped by a cgroup CPU quota (a container's or a
 * Kubernetes pod's CPU limit), which availableParallelism() does not see. A pod limited to 2 CPUs on a
 * 64-core node would otherwise size onnxruntime's thread pools for 64 and be throttled.
 */
export function usableCores(): number {
  const cores = availableParallelism();
  const quota = (text: string | undefined): number | undefined => {
    const m = text ? /^(\d+)\s+(\d+)/.exec(text.trim()) : null;
    return m && Number(m[2]) > 0 ? Number(m[1]) / Number(m[2]) : undefined;
  };
  const read = (p: string) => {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      return undefined;
    }
  };
  // cgroup v2: "max 100000" (no limit) or "<quota> <period>"; v1: two files, quota -1 for none.
  let limit = quota(read('/sys/fs/cgroup/cpu.max'));
  if (limit === undefined) {
    const q = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_quota_us'));
    const p = Number(read('/sys/fs/cgroup/cpu/cpu.cfs_period_us'));
    if (q > 0 && p > 0) limit = q / p;
  }
  return limit !== undefined ? Math.max(1, Math.min(cores, Math.ceil(limit))) : cores;
}

/**
 * Triton's scheduler test hook from the environment, as its tests set it: TRITONSERVER_DELAY_SCHEDULER
 * (and TRITONSERVER_BACKLOG_DELAY_SCHEDULER for the direct sequence batcher's backlog). Read like
 * atoi (a leading integer; anything else is 0); a negative count is 0 here rather than Triton's
 * hold-forever. Unset or 0: undefined, no hold.
 */
export function schedulerDelayFromEnv(env: Record<string, string | undefined>): SchedulerDelay | undefined {
  const count = (name: string) => Math.max(0, Number.parseInt(env[name] ?? '', 10) || 0);
  const requests = count('TRITONSERVER_DELAY_SCHEDULER');
  return requests > 0 ? { requests, backlog: count('TRITONSERVER_BACKLOG_DELAY_SCHEDULER') } : undefined;
}

/**
 * Triton's gRPC test hook from the environment: TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC, seconds
 * (read like atoi) by which every RPC but inference is answered late. Unset or 0: no delay.
 */
export function grpcResponseDelayFromEnv(env: Record<string, string | undefined>): number {
  return Math.max(0, Number.parseInt(env.TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC ?? '', 10) || 0) * 1000;
}

/** zlib at its fastest level, off the event loop (libuv's pool): several times CompressionStream's speed. */
/**
 * Starts one listener, turning "address in use" into Triton's words for it (main.cc's "failed to start
 * <service> service" before the server's "Unavailable - Socket '<address>:<port>' already in use"),
 * which scripts such as L0_lifecycle's look for in the log. Other errors pass through.
 */
async function starting<T>(service: string, address: string, port: number, start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (err) {
    // node:net sets code EADDRINUSE; grpc-js folds it into its own message.
    if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' && !/\bEADDRINUSE\b/.test(String((err as Error).message))) throw err;
    throw new TsiError('UNAVAILABLE', `failed to start ${service} service: Unavailable - Socket '${address}:${port}' already in use`);
  }
}

function fastCompress(data: Uint8Array, format: 'gzip' | 'deflate'): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const done = (err: Error | null, out: Buffer) => (err ? reject(err) : resolve(out));
    if (format === 'gzip') gzip(data, { level: 1 }, done);
    else deflate(data, { level: 1 }, done);
  });
}

export function createNodeBackends(log: Logger, backendConfig: NodeServerOptions['backendConfig'] = {}): BackendRegistry {
  const backends = new BackendRegistry();
  const ortWorkers = Number(backendConfig.onnxruntime?.['worker-count'] ?? backendConfig['*']?.['worker-count']) || undefined;
  backends.register('onnxruntime', () => createOnnxBackend({ log, cores: usableCores(), workers: ortWorkers }));
  backends.register('javascript', () => createJsBackend({ log }));
  // Loaded when a model first needs it: servers without Python models never touch it.
  backends.register('python', async () => (await import('./python/index.js')).createPythonBackend({ log, config: { ...backendConfig['*'], ...backendConfig.python } }));
  backends.register('llm', async () => (await import('./llm/index.js')).createNodeLlmBackend({ cores: usableCores() }));
  // Runs its encoder on the onnxruntime backend above (its worker threads and sessions).
  backends.register('embedding', () => createEmbeddingBackend(() => backends.get('onnxruntime')!));
  backends.register('whisper', () => createWhisperBackend(() => backends.get('onnxruntime')!));
  backends.register('classifier', () => createClassifierBackend(() => backends.get('onnxruntime')!));
  return backends;
}

function withExtraBackends(registry: BackendRegistry, extra: NodeServerOptions['extraBackends']): BackendRegistry {
  for (const [name, factory] of Object.entries(extra ?? {})) registry.register(name, factory);
  return registry;
}

/** Several optional route sets as one `extend`. */
function extendAll(...parts: (((app: Hono) => void) | undefined)[]): ((app: Hono) => void) | undefined {
  const present = parts.filter((p) => p !== undefined);
  return present.length === 0 ? undefined : (app) => present.forEach((p) => p(app));
}

export async function startServer(opts: NodeServerOptions): Promise<RunningServer> {
  // The logging extension must be able to switch what this logger prints.
  const log = controllableLogger(opts.log ?? stderrLogger(opts.logVerbose ?? 0));
  const httpRestrictions = parseRestrictions(opts.httpRestrictedApi ?? [], '--http-restricted-api');
  const grpcRestrictions = parseRestrictions(opts.grpcRestrictedProtocol ?? [], '--grpc-restricted-protocol', 'triton-grpc-protocol-');
  const forward = (p: string | undefined, flag: string) => (p === undefined || p === '' ? undefined : headerForwardPattern(p, flag));
  const httpForward = forward(opts.httpHeaderForwardPattern, '--http-header-forward-pattern');
  const grpcForward = forward(opts.grpcHeaderForwardPattern, '--grpc-header-forward-pattern');
  const schedulerDelay = opts.schedulerDelay ?? schedulerDelayFromEnv(process.env);
  if (schedulerDelay) {
    log.info(`scheduler test hook: batching schedulers hold until ${schedulerDelay.requests} queued request(s)`
      + (schedulerDelay.backlog ? ` and ${schedulerDelay.backlog} backlogged sequence request(s)` : '') + ' (TRITONSERVER_DELAY_SCHEDULER)');
  }
  const { sources, initError } = repositorySources(opts.modelRepositories, opts.exitOnError ?? true);
  const server = new InferenceServer({
    sources,
    initError,
    backends: withExtraBackends(createNodeBackends(log, opts.backendConfig), opts.extraBackends),
    log,
    id: opts.id,
    strictReadiness: opts.strictReadiness,
    modelControlMode: opts.modelControlMode,
    startupModels: opts.loadModels,
    autoComplete: opts.autoComplete,
    defaultMaxBatchSize: opts.defaultMaxBatchSize,
    gpuCount: gpuCount(),
    responseCache: opts.responseCacheBytes !== undefined ? new ResponseCache(opts.responseCacheBytes) : undefined,
    rateLimit: opts.rateLimit,
    rateLimitResources: (opts.rateLimitResources ?? []).map(parseRateLimitResource),
    modelLoadThreadCount: opts.modelLoadThreadCount,
    modelLoadRetryCount: opts.modelLoadRetryCount,
    modelConfigName: opts.modelConfigName,
    modelNamespacing: opts.modelNamespacing,
    schedulerDelay,
    residency: {
      maxLoadedModels: opts.maxLoadedModels,
      memoryBudgetBytes: opts.modelMemoryBudget !== undefined ? parseMemoryBudget(opts.modelMemoryBudget, totalmem()) : undefined,
    },
  });
  const shmProvider = nodeShmProvider({ log });
  // The OpenTelemetry SDK loads only when its mode is asked for.
  const otel = opts.trace?.mode === 'opentelemetry'
    ? (await import('./otel/index.js')).createOtelExporter(opts.trace.modeSettings ?? [], server.clock, log)
    : undefined;
  const extensions = new ServerExtensions(server, {
    allowClientShm: opts.allowClientShm ?? false,
    shmProvider,
    shmUnavailableReason: shmProvider ? undefined : `POSIX shared memory files (/dev/shm) are not available on ${process.platform}`,
    trace: opts.trace,
    traceWriter: fileTraceWriter,
    logFile: opts.logFile,
    traceExporter: otel,
    stageModelFiles: tempFolderStager(),
    modelCode: { allowCodeUpload: opts.allowModelCodeUpload ?? false },
  });
  if (opts.allowModelCodeUpload && opts.modelControlMode === 'explicit') {
    log.warn('--allow-model-code-upload: any client of the model load API can run code on this machine as this process\'s user');
  }
  // Credentials first: a certificate or key file that is not usable stops the start before anything listens.
  const httpTls = opts.allowHttp !== false && opts.httpTls ? await ReloadableTls.load(opts.httpTls, '--http', log) : undefined;
  const grpcTls = opts.grpcPort !== undefined && opts.grpcTls ? await ReloadableTls.load(opts.grpcTls, '--grpc', log) : undefined;
  const keyring = opts.apiKeys?.length || opts.apiKeyFile !== undefined
    ? await ApiKeyring.create({ keys: opts.apiKeys, file: opts.apiKeyFile, log })
    : undefined;
  if (keyring) log.info(`API keys: ${keyring.size} key(s); every API but health needs one`);
  const watchMs = opts.credentialsWatchMs ?? 200;
  if (watchMs > 0) {
    httpTls?.watch(watchMs);
    grpcTls?.watch(watchMs);
    keyring?.watch(watchMs);
  } else if (httpTls || grpcTls || keyring) log.verbose(1, 'credentials: TLS and API key files are not watched; reloadCredentials() (SIGHUP) reads them again');
  const closeCredentials = () => {
    httpTls?.close();
    grpcTls?.close();
    keyring?.close();
  };
  // The cloud endpoints' v2 routes: the HTTP port's size limit and restrictions; no compression and no
  // forwarded headers, as Triton's.
  const cloudHttpOptions = () => ({
    maxInputSize: opts.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE, extensions, restrictedApi: httpRestrictions,
    compression: { mode: 'off' as const, minBytes: 0 },
  });
  let http: Listener | undefined;
  let sagemaker: Listener | undefined;
  let grpc: GrpcListener | undefined;
  let metrics: MetricsListener | undefined;
  let gpuMetrics: GpuMetrics | undefined;
  try {
    if (opts.allowHttp !== false) {
      const httpOptions = {
        maxInputSize: opts.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE, corsOrigin: opts.corsOrigin,
        compression: opts.httpCompression, compress: fastCompress,
        fetchImage: opts.allowImageUrls ? imageUrlFetcher() : undefined,
        extend: extendAll(
          opts.browserDemo ? browserRoutes(opts.modelRepositories) : undefined,
          opts.allowDashboard ? dashboardRoutes(server, { tuneReports: opts.dashboardTuneReports }) : undefined,
        ),
        extensions, restrictedApi: httpRestrictions, headerForwardPattern: httpForward,
      };
      const app = createHttpApp(server, httpOptions);
      // Listen before loading models, as Triton does: liveness answers while models load; readiness waits.
      const [address, port] = [opts.httpAddress ?? '0.0.0.0', opts.httpPort ?? 8000];
      http = await starting('HTTP', address, port, () => listen(port, address, {
        fetch: app.fetch, infer: inferEndpoint(server, httpOptions), cors: opts.corsOrigin !== undefined,
        onError: (err) => log.error(`HTTP: ${err.message}`),
        tls: httpTls, onTlsError: (err, from) => log.verbose(1, `HTTPS: TLS handshake with ${from ?? 'a client'} failed: ${err.message}`),
        authorize: keyring && httpAuthorizer(keyring),
        headersTimeoutMs: opts.httpHeadersTimeoutMs, requestTimeoutMs: opts.httpRequestTimeoutMs,
      }));
    }
    if (opts.sagemaker) {
      const sm = opts.sagemaker;
      const app = createSagemakerApp({
        server, extensions, infer: inferEndpoint(server, cloudHttpOptions()), maxInputSize: opts.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE,
        restrictions: httpRestrictions, defaultModel: sm.defaultModel, inferenceType: sm.inferenceType, pingMode: sm.pingMode,
        store: sagemakerModelStore(sm.modelsRoot), log,
      });
      const address = sm.address ?? '0.0.0.0';
      sagemaker = await starting('Sagemaker', address, sm.port, () => listen(sm.port, address, {
        fetch: app.fetch, onError: (err) => log.error(`SageMaker: ${err.message}`),
        headersTimeoutMs: opts.httpHeadersTimeoutMs, requestTimeoutMs: opts.httpRequestTimeoutMs,
      }));
    }
    if (opts.grpcPort !== undefined) {
      const grpcDelay = opts.grpcResponseDelayMs ?? grpcResponseDelayFromEnv(process.env);
      if (grpcDelay > 0) log.info(`gRPC test hook: every RPC but inference answers ${grpcDelay / 1000} s late (TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC)`);
      const [address, port] = [opts.grpcAddress ?? '0.0.0.0', opts.grpcPort];
      grpc = await starting('GRPC', address, port, () => listenGrpc(server, {
        port, address, extensions, restrictedProtocol: grpcRestrictions,
        headerForwardPattern: grpcForward, maxResponsePoolSize: opts.grpcMaxResponsePoolSize,
        responseCompression: opts.grpcResponseCompression,
        tls: grpcTls, authorize: keyring && grpcAuthorizer(keyring), handshakeTimeoutMs: opts.grpcHandshakeTimeoutMs,
        responseDelayMs: grpcDelay,
      }));
    }
    if (opts.metricsPort !== undefined) {
      registerHostMetrics(server.metrics, { cpuMetrics: opts.cpuMetrics });
      if (opts.gpuMetrics !== false) {
        // Polled in the background: the first nvidia-smi reading must not hold up the start.
        const gm = new GpuMetrics({ intervalMs: opts.metricsIntervalMs ?? 2000, log, command: opts.nvidiaSmi });
        gpuMetrics = gm;
        void gm.start().then((found) => {
          if (found) log.info(`GPU metrics: ${gm.gpus.map((g) => `${g.name} (${g.uuid})`).join(', ')}, every ${opts.metricsIntervalMs ?? 2000} ms`);
        });
        gm.register(server.metrics);
      }
      const [address, port] = [opts.metricsAddress ?? opts.httpAddress ?? '0.0.0.0', opts.metricsPort];
      metrics = await starting('Metrics', address, port, () => listenMetrics(server.metrics, port, address));
    }
  } catch (err) {
    gpuMetrics?.stop();
    await Promise.all([http?.close(), sagemaker?.close(), grpc?.close(0), metrics?.close()]);
    closeCredentials();
    throw err;
  }
  await server.start();
  // Vertex AI's port opens once the models are loaded: its default model is the only one loaded, unless named.
  let vertexAi: Listener | undefined;
  if (opts.vertexAi) {
    const va = opts.vertexAi;
    try {
      if (!va.predictRoute) throw new TsiError('INVALID_ARG', 'API_PREDICT_ROUTE is not defined for Vertex AI endpoint');
      if (!va.healthRoute) throw new TsiError('INVALID_ARG', 'AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint');
      const cloud = cloudHttpOptions();
      const app = createVertexAiApp({
        server, v2: createHttpApp(server, cloud), infer: inferEndpoint(server, cloud), predictRoute: va.predictRoute, healthRoute: va.healthRoute,
        defaultModel: vertexAiDefaultModel(server, va.defaultModel), log,
      });
      vertexAi = await listen(va.port, va.address ?? '0.0.0.0', {
        fetch: app.fetch, onError: (err) => log.error(`Vertex AI: ${err.message}`),
        headersTimeoutMs: opts.httpHeadersTimeoutMs, requestTimeoutMs: opts.httpRequestTimeoutMs,
      });
    } catch (err) {
      gpuMetrics?.stop();
      await Promise.all([http?.close(), sagemaker?.close(), grpc?.close(0), metrics?.close()]);
      closeCredentials();
      await server.stop(1000);
      throw new TsiError('INVALID_ARG', `failed to start Vertex AI service: ${asTsiError(err).message}`);
    }
  }
  const poller = opts.modelControlMode === 'poll' ? new RepositoryPoller(server, (opts.repositoryPollSecs ?? 15) * 1000) : undefined;
  poller?.start();
  const shutdown = new Shutdown({
    server, log, http, grpc, others: [sagemaker, vertexAi].filter((l) => l !== undefined),
    stopBackground: async () => poller?.stop(),
    async release() {
      gpuMetrics?.stop();
      await metrics?.close();
      closeCredentials();
      await extensions.close();
      await otel?.shutdown();
    },
  });
  return {
    server,
    http,
    sagemaker,
    vertexAi,
    grpc,
    metrics,
    extensions,
    log,
    async reloadCredentials() {
      await Promise.all([httpTls?.reload(), grpcTls?.reload(), keyring?.reload()]);
    },
    beginDrain: () => shutdown.beginDrain(),
    stop: (o) => shutdown.stop(typeof o === 'number' ? { timeoutMs: o } : o),
    shutdownProgress: () => shutdown.progress(),
  };
}

export { FolderSource, folderFiles } from './fs-source.js';
export type { ShutdownPhase, ShutdownProgress, ShutdownReport, StopOptions } from './shutdown.js';
export { createOnnxBackend } from './onnx/backend.js';
export { createJsBackend } from './js-backend.js';
export { providerStatus, gpuCount, probeWebGpu, queryNvidiaGpus } from './gpu/index.js';
