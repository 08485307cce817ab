/**
 * The `tsi-node` command line: `serve` (tritonserver's flag names where they apply) and `doctor`
 * (versions and execution providers). Logs say what happened in words; the start-up table shows every
 * model's state, device and, for failures, the reason.
 */

import { Command, InvalidArgumentError, Option } from 'commander';
import { fileURLToPath } from 'node:url';
import { dirname, join, resolve } from 'node:path';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { NOT_LOADED_BUDGET, TSI_VERSION, asTsiError, legacyTraceSpecs, parseCacheFlags, parseTraceConfig, type IndexEntry, type ModelControlMode, type SagemakerInferenceType } from '../core/index.js';
import { nodeLogger, startServer } from './index.js';
import type { TlsFiles } from './http/tls.js';
import { doctorReport, formatDoctor, table } from './doctor.js';
import { INDEX_FILE, writeRepositoryIndex } from './browser-assets.js';
import { perfCommand } from './perf/cli.js';
import { cudaServeNote, gpuCommand, reexecForCuda } from './gpu/command.js';
import { tuneCommand } from './tune/index.js';
import { youngGenerationNote } from './young-generation.js';
import { describeCutShort } from './shutdown.js';
import { pullModel } from './llm/pull.js';

/**
 * Kubernetes takes a terminating pod out of its Services' endpoints at once, but every node's
 * kube-proxy (iptables resync at least 1 s apart) and every ingress learns it a second or two later;
 * the manifests' readiness probe (every 2 s, one failure) tells balancers that probe. 5 s covers both
 * with margin, and keeps `docker stop` (10 s before SIGKILL) able to drain and finalize after it.
 */
export const DEFAULT_DRAIN_DELAY_SECS = 5;


/** The package's own `models/`, found from this file in both `runtime-node/` and `dist/runtime-node/`. */
export function defaultRepository(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, 'models');
    dir = dirname(dir);
  }
  return resolve('models');
}

function parseBool(v: string): boolean {
  const s = v.toLowerCase();
  if (['true', '1', 'on', 'yes'].includes(s)) return true;
  if (['false', '0', 'off', 'no'].includes(s)) return false;
  throw new InvalidArgumentError(`expected true or false, got '${v}'`);
}

/**
 * A boolean flag written any of the ways Triton's users write one: `--flag`, `--flag true|false` and
 * `--flag=true|false` (Triton's own take a value; tsi's bare flags did not).
 */
export function boolOption(flag: string, description: string, byDefault: boolean): Option {
  return new Option(`${flag} [bool]`, description).argParser(parseBool).preset('true').default(byDefault);
}

function parsePort(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`expected a port number 0-65535, got '${v}'`);
  return n;
}

/** `<from>-<to>`, two ports (tritonserver's --sagemaker-safe-port-range). */
function parsePortRange(v: string): [number, number] {
  const m = /^(\d+)-(\d+)$/.exec(v);
  if (!m) throw new InvalidArgumentError(`expected <integer>-<integer>, got '${v}'`);
  return [parsePort(m[1]!), parsePort(m[2]!)];
}

interface PortUse {
  service: string;
  address: string;
  port: number;
  /** The ports every other service must keep within (SageMaker's safe range). */
  range?: [number, number];
}

/**
 * tritonserver's check of its listeners before any starts, with its texts: two on one address and port,
 * or one outside the SageMaker safe range. Port 0 is left out (a free port the system picks).
 */
export function checkPortCollision(uses: PortUse[]): void {
  for (let i = 0; i < uses.length; i++) {
    const a = uses[i]!;
    for (let j = a.range ? 0 : i + 1; j < uses.length; j++) {
      const b = uses[j]!;
      // Port 0 (the system picks a free one, as tests ask) collides with nothing.
      if (j === i || a.address !== b.address || b.port === 0) continue;
      if (a.range && (b.port < a.range[0] || b.port > a.range[1])) {
        throw new Error(`The server cannot listen to ${b.service} requests at port ${b.port}, allowed port range is [${a.range[0]}, ${a.range[1]}]`);
      }
      if (a.port === b.port) {
        throw new Error(`The server cannot listen to ${a.service} requests and ${b.service} requests at the same address and port ${a.address}:${a.port}`);
      }
    }
  }
}

/** A parser for a choice flag that tritonserver reads in any case (`--model-control-mode=POLL`). */
function anyCase(...choices: string[]): (v: string) => string {
  return (v) => {
    const lower = v.toLowerCase();
    if (!choices.includes(lower)) throw new InvalidArgumentError(`Allowed choices are ${choices.join(', ')}.`);
    return lower;
  };
}

function parseIntArg(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`expected a non-negative integer, got '${v}'`);
  return n;
}

/** tritonserver's int-or-bool options (--log-verbose): true and false are 1 and 0. */
function parseIntBool(v: string): number {
  const s = v.toLowerCase();
  if (s === 'true' || s === 'on' || s === 'yes') return 1;
  if (s === 'false' || s === 'off' || s === 'no') return 0;
  return parseIntArg(v);
}

function parsePositiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`expected a positive integer, got '${v}'`);
  return n;
}

/**
 * --http-max-input-size: 0 would refuse every body, so it is refused as Triton refuses it, with
 * Triton's line alone (its test finds it in the log) rather than commander's "argument is invalid".
 */
function parseMaxInputSize(v: string, cmd: Command): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) cmd.error('Error: --http-max-input-size must be greater than 0.');
  return n;
}

const collect = (v: string, prev: string[] | undefined) => [...(prev ?? []), v];

function parseNonNegativeSecs(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`expected a non-negative number of seconds, got '${v}'`);
  return n;
}

function parseSecs(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`expected a positive number of seconds, got '${v}'`);
  return n;
}

/**
 * The TLS files of `--<proto>-use-ssl[-mutual]`, as tritonserver reads its gRPC ones (mutual implies
 * SSL); undefined for plaintext. Certificate flags without use-ssl are ignored as by tritonserver,
 * but said so, since that serves plaintext.
 */
function tlsFlags(o: Record<string, unknown>, proto: 'http' | 'grpc', warn: (msg: string) => void): TlsFiles | undefined {
  const f = (k: string) => o[`${proto}${k}`] as string | undefined;
  const mutual = o[`${proto}UseSslMutual`] === true;
  if (!mutual && o[`${proto}UseSsl`] !== true) {
    if (f('ServerCert') || f('ServerKey') || f('RootCert')) warn(`--${proto}-server-cert/-key/--${proto}-root-cert are ignored without --${proto}-use-ssl=true: ${proto === 'http' ? 'HTTP' : 'gRPC'} is served in plaintext`);
    return undefined;
  }
  const cert = f('ServerCert');
  const key = f('ServerKey');
  if (!cert || !key) throw new Error(`--${proto}-use-ssl${mutual ? '-mutual' : ''} needs --${proto}-server-cert and --${proto}-server-key`);
  return { cert, key, ca: f('RootCert'), mutual };
}

function modelTable(entries: IndexEntry[], devices: (name: string, version: string) => string): string {
  if (entries.length === 0) return 'No models loaded.';
  return table(
    ['Model', 'Version', 'Status', 'Device'],
    entries.map((e) => [e.name, e.version ?? '-', e.state === 'READY' ? 'READY' : `${e.state}: ${e.reason}`, e.state === 'READY' ? devices(e.name, e.version!) : '']),
  );
}

export function buildCli(): Command {
  const program = new Command('tsi-node')
    .description('tsi: a Triton-compatible inference server for ONNX models, in TypeScript')
    .version(TSI_VERSION);

  const serve: Command = program
    .command('serve')
    .description('serve a Triton model repository over the KServe v2 HTTP API')
    .addOption(new Option('--model-repository <path>', 'model repository folder (repeatable; default: the package\'s models/)').argParser(collect))
    .addOption(new Option('--model-store <path>', 'alias of --model-repository').argParser(collect).hideHelp())
    .option('--http-port <port>', 'HTTP port', parsePort, 8000)
    .option('--http-address <address>', 'HTTP listen address', '0.0.0.0')
    .addOption(boolOption('--allow-http', 'serve HTTP', true))
    .option('--grpc-port <port>', 'gRPC port', parsePort, 8001)
    .option('--grpc-address <address>', 'gRPC listen address', '0.0.0.0')
    .addOption(boolOption('--allow-grpc', 'serve gRPC', true))
    .option('--grpc-restricted-protocol <cats:key=value>', 'gRPC categories (health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging) that need metadata triton-grpc-protocol-<key>=<value> (repeatable)', collect)
    .option('--grpc-header-forward-pattern <regex>', 'gRPC metadata whose keys match (case-insensitive unless the pattern starts with (?-i)) reach the model as string request parameters')
    .option('--grpc-max-response-pool-size <n>', 'responses a gRPC stream may hold unsent before it stops reading further requests', (v) => {
      const n = Number(v);
      if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError(`--grpc-max-response-pool-size must be greater than 0, got '${v}'`);
      return n;
    })
    .option('--grpc-infer-thread-count <n>', "Triton's gRPC inference handler threads (2 to 128; default 2): checked as Triton checks it, otherwise without effect, as tsi answers gRPC on its event loop and runs models on instance threads", (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 2 || n > 128) throw new InvalidArgumentError('invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.');
      return n;
    })
    .addOption(new Option('--grpc-infer-response-compression-level <level>', 'compress gRPC responses').choices(['none', 'low', 'medium', 'high']).default('none'))
    .addOption(boolOption('--grpc-use-ssl', 'serve gRPC over TLS (needs --grpc-server-cert and --grpc-server-key)', false))
    .addOption(boolOption('--grpc-use-ssl-mutual', 'gRPC over TLS that requires client certificates signed by --grpc-root-cert (implies --grpc-use-ssl)', false))
    .option('--grpc-server-cert <file>', 'PEM certificate (chain) of the gRPC server; reloaded when it changes and on SIGHUP')
    .option('--grpc-server-key <file>', 'PEM private key of --grpc-server-cert')
    .option('--grpc-root-cert <file>', 'PEM CA certificate that gRPC client certificates must chain to (mutual TLS)')
    .addOption(boolOption('--http-use-ssl', 'serve HTTPS on the HTTP port (needs --http-server-cert and --http-server-key)', false))
    .addOption(boolOption('--http-use-ssl-mutual', 'HTTPS that requires client certificates signed by --http-root-cert (implies --http-use-ssl)', false))
    .option('--http-server-cert <file>', 'PEM certificate (chain) of the HTTPS server; reloaded when it changes and on SIGHUP')
    .option('--http-server-key <file>', 'PEM private key of --http-server-cert')
    .option('--http-root-cert <file>', 'PEM CA certificate that HTTPS client certificates must chain to (mutual TLS)')
    .option('--api-key <[cats:]key>', 'require Authorization: Bearer <key> (HTTP header or gRPC metadata) on every API but health; cats (e.g. inference,metadata) limit what this key opens (repeatable)', collect)
    .option('--api-key-file <file>', 'API keys, one [cats:]key a line (# comments); re-read when it changes and on SIGHUP')
    .addOption(boolOption('--allow-model-code-upload', 'let model load requests upload code (JavaScript/Python model files, native libraries) or point EXECUTION_ENV_PATH elsewhere: anyone who can load models can then run code here; off, such a load is refused with 403', false))
    .option('--http-headers-timeout-secs <secs>', 'how long a request head (and a TLS handshake) may take to arrive before 408', parseSecs, 60)
    .option('--http-request-timeout-secs <secs>', 'how long a whole request may take to arrive before 408', parseSecs, 300)
    .option('--grpc-handshake-timeout-secs <secs>', 'how long a new gRPC connection may take to finish its TLS handshake and send the HTTP/2 preface before it is closed', parseSecs, 60)
    .option('--metrics-port <port>', 'Prometheus metrics port (GET /metrics)', parsePort, 8002)
    .option('--metrics-address <address>', 'metrics listen address (default: the HTTP address)')
    .addOption(boolOption('--allow-metrics', 'serve Prometheus metrics', true))
    .addOption(boolOption('--allow-cpu-metrics', 'include nv_cpu_* host metrics', true))
    .addOption(boolOption('--allow-gpu-metrics', 'include nv_gpu_* metrics of NVIDIA GPUs (read with nvidia-smi)', true))
    .option('--metrics-interval-ms <ms>', 'how often GPU metrics are read', parseIntArg, 2000)
    .option('--http-header-forward-pattern <regex>', 'HTTP headers whose names match (case-insensitive unless the pattern starts with (?-i)) reach the model as string request parameters')
    .option('--http-restricted-api <cats:key=value>', 'HTTP categories (as for gRPC) that need header <key>: <value>, else 403 (repeatable)', collect)
    .addOption(boolOption('--allow-client-shm', 'let clients register system shared memory regions', false))
    .option('--repository-poll-secs <secs>', 'poll interval in poll mode', parseNonNegativeSecs, 15)
    .option('--trace-config <[mode,]key=value>', 'trace setting: level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; opentelemetry,url=URL (default http://localhost:4318/v1/traces), opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_max_queue_size=N (2048), opentelemetry,bsp_schedule_delay=MS (5000), opentelemetry,bsp_max_export_batch_size=N (512) (repeatable)', collect)
    .option('--trace-file <path>', "deprecated by tritonserver: --trace-config triton,file=<path>")
    .option('--trace-level <level>', "deprecated by tritonserver: --trace-config level=<OFF|TIMESTAMPS|TENSORS> (MIN and MAX read as TIMESTAMPS; repeatable)", collect)
    .option('--trace-rate <n>', 'deprecated by tritonserver: --trace-config rate=<n>')
    .option('--trace-count <n>', 'deprecated by tritonserver: --trace-config count=<n>')
    .option('--trace-log-frequency <n>', 'deprecated by tritonserver: --trace-config triton,log-frequency=<n>')
    .option('--http-thread-count <n>', "accepted for tritonserver's scripts; tsi serves HTTP on one event loop", parsePositiveInt)
    .option('--log-verbose <level>', 'verbose logging level (0 = off; true and false are 1 and 0, as tritonserver reads them)', parseIntBool, 0)
    .addOption(boolOption('--log-info', 'print info lines', true))
    .addOption(boolOption('--log-warning', 'print warning lines', true))
    .addOption(new Option('--log-warn [bool]', 'tritonserver accepts this prefix of --log-warning').argParser(parseBool).preset('true').hideHelp())
    .addOption(boolOption('--log-error', 'print error lines', true))
    .option('--log-format <format>', 'line layout: default (LMMDD hh:mm:ss.uuuuuu pid src:line] msg) or ISO8601 (YYYY-MM-DDThh:mm:ssZ L pid src:line] msg)', (v) => {
      if (v !== 'default' && v !== 'ISO8601') throw new InvalidArgumentError('invalid argument for --log-format');
      return v;
    }, 'default')
    .option('--log-file <path>', 'append the log to this file instead of printing it to stderr')
    .addOption(boolOption('--exit-on-error', 'exit if any model fails to load at start-up; false: serve the others (a --model-repository folder that is missing leaves the server up, neither live nor ready, as tritonserver)', true))
    .addOption(boolOption('--strict-readiness', 'ready only when every model is ready', true))
    .option('--model-load-thread-count <n>', 'models loaded at once (at start-up and by repository polls)', parsePositiveInt, 4)
    .option('--model-config-name <name>', 'read each model\'s config from configs/<name>.pbtxt in its folder where that file exists, else from config.pbtxt', (v) => {
      if (v === '') throw new InvalidArgumentError('Error: empty argument for --model-config-name');
      return v;
    })
    .addOption(boolOption('--model-namespacing', 'a model is its repository and its name, so the same name may load from several repositories (tritonserver\'s flag; its SageMaker entry script turns it on): a request by a name several repositories hold is refused as ambiguous, and an ensemble runs the step of that name from its own repository first; without it, a name in two repositories is refused', false))
    .option('--model-load-retry-count <n>', 'times a model version that fails to load is tried again before its load fails', parseIntArg, 0)
    .option('--max-loaded-models <n>', 'load models on their first request, at most this many at once; the least recently used idle one is unloaded to make room', parsePositiveInt)
    .option('--model-memory-budget <bytes|%>', 'load models on their first request within this much memory (e.g. 2G, or 50% of the machine\'s), unloading the least recently used idle ones')
    .addOption(boolOption('--disable-auto-complete-config', 'do not fill model configs from the model files', false))
    .addOption(boolOption('--strict-model-config', "Triton's older spelling: true is --disable-auto-complete-config", false))
    .addOption(new Option('--model-control-mode <mode>', 'model control mode (any case, as tritonserver: EXPLICIT too)')
      .choices(['none', 'poll', 'explicit']).argParser(anyCase('none', 'poll', 'explicit')).default('none'))
    .addOption(new Option('--load-model <name>', 'model to load at start in explicit mode (repeatable; * = all)').argParser(collect))
    .option('--http-cors-origin <origin>', 'allow browser pages from this origin (repeatable; * = any) to call the HTTP API', collect)
    .option('--http-max-input-size <bytes>', 'largest accepted JSON request body or binary request header, raw binary body, or decompressed body (binary tensor data after a JSON header is not bounded by it, as in Triton)', (v) => parseMaxInputSize(v, serve), 64 * 1024 * 1024)
    .addOption(boolOption('--allow-image-urls', 'chat image_url parts may be http(s) URLs, which the server fetches (never from private, loopback or link-local addresses; 10 s, at most --http-max-input-size bytes); off: data: URLs only', false))
    .addOption(new Option('--http-compression <mode>', 'compress infer responses for clients that accept it: auto (JSON of at least --http-compression-min-bytes), always (as Triton), off').choices(['auto', 'always', 'off']).default('auto'))
    .option('--http-compression-min-bytes <bytes>', 'smallest JSON infer response compressed in auto mode', parseIntArg, 65536)
    .option('--exit-timeout-secs <secs>', 'shutdown: how long in-flight requests and sequences in progress may take once the listeners are closed, before the models are unloaded anyway', parseIntArg, 30)
    .option('--drain-delay-secs <secs>', 'shutdown: on SIGTERM/SIGINT report not ready but go on serving this long, so that load balancers and Kubernetes endpoints move away before the listeners close (0 = close them at once)', parseNonNegativeSecs, DEFAULT_DRAIN_DELAY_SECS)
    .option('--backend-directory <dir>', "tritonserver's folder of backend libraries, taken so its command lines run unchanged (Triton's qa passes it to every server); tsi's backends are built in, and the folder is not read")
    .option('--backend-config <backend,key=value>', 'backend setting, e.g. onnxruntime,default-max-batch-size=8 or python,executable=/usr/bin/python3.11 (repeatable)', collect)
    .option('--id <name>', 'server name reported by GET /v2', 'triton')
    .option('--cache-config <cache,key=value>', 'response cache, e.g. local,size=1048576 (bytes); models opt in with response_cache { enable: true }', collect)
    .option('--response-cache-byte-size <bytes>', 'deprecated by tritonserver: --cache-config local,size=<bytes>', parseIntArg)
    .addOption(boolOption('--browser-demo', 'also serve the in-browser demo at /demo, the browser build at /browser/ and the model files at /repository/', false))
    .option('--rate-limit <mode>', 'execution_count: an instance runs only when the resources its rate_limiter lists are free, priorities weighting the turns across models; off: as soon as it is free', (v) => {
      if (v !== 'off' && v !== 'execution_count') throw new InvalidArgumentError(`expected off or execution_count, got '${v}'`);
      return v;
    }, 'off')
    .addOption(boolOption('--allow-dashboard', 'serve the live dashboard at /dashboard/ on the HTTP port (in the statistics category of --http-restricted-api and --api-key)', false))
    .option('--dashboard-tune-reports <dir>', 'a folder of tsi-node tune reports the dashboard lists')
    .addOption(boolOption('--allow-sagemaker', 'serve SageMaker\'s routes on --sagemaker-port: /ping, /invocations (SAGEMAKER_TRITON_DEFAULT_MODEL_NAME, SAGEMAKER_TRITON_INFERENCE_TYPE infer|generate|generate_stream) and the multi-model /models API', false))
    .option('--sagemaker-port <port>', 'SageMaker port', parsePort, 8080)
    .option('--sagemaker-safe-port-range <from-to>', 'the ports every other listener must use (SageMaker\'s SAGEMAKER_SAFE_PORT_RANGE); a listener outside it stops the start', parsePortRange)
    .option('--sagemaker-thread-count <n>', 'accepted for tritonserver\'s scripts; tsi serves every listener on one event loop', parsePositiveInt, 8)
    .addOption(new Option('--sagemaker-models-root <dir>', 'where SageMaker multi-model loads\' urls must point (<dir>/<hash>/model[/<subdir>])').env('TSI_SAGEMAKER_MODELS_ROOT').default('/opt/ml/models'))
    .addOption(new Option('--allow-vertex-ai [bool]', 'serve Vertex AI\'s routes (AIP_HEALTH_ROUTE, AIP_PREDICT_ROUTE with X-Vertex-Ai-Triton-Redirect) on --vertex-ai-port once the models are loaded (default: true when AIP_MODE=PREDICTION, which also turns HTTP and gRPC off unless asked for)').argParser(parseBool).preset('true'))
    .option('--vertex-ai-port <port>', 'Vertex AI port (default: AIP_HTTP_PORT, else 8080)', parsePort)
    .option('--vertex-ai-thread-count <n>', 'accepted for tritonserver\'s scripts; tsi serves every listener on one event loop', parsePositiveInt, 8)
    .option('--vertex-ai-default-model <name>', 'the model a Vertex AI predict reaches without a redirect (default: the only model loaded)')
    .option('--rate-limit-resource <name:count[:device]>', 'copies of a rate-limiter resource (per device, or on one device; default: the largest count any instance lists) (repeatable)', collect)
    .action(async (o) => {
      // With the CUDA provider installed, this process hands over to one that can load it (gpu/command.ts).
      if (await reexecForCuda((m) => process.stderr.write(`Warning: ${m}\n`))) return;
      const repos: string[] = [...(o.modelRepository ?? []), ...(o.modelStore ?? [])];
      // Vertex AI's environment, read as tritonserver reads it: AIP_MODE=PREDICTION turns its endpoint
      // on and HTTP and gRPC off (unless asked for), AIP_STORAGE_URI is the repository if none is given.
      const env = process.env;
      const predicting = env.AIP_MODE === 'PREDICTION';
      const given = (key: string) => serve.getOptionValueSource(key) === 'cli';
      const allowVertexAi: boolean = o.allowVertexAi ?? predicting;
      const allowHttp: boolean = predicting && !given('allowHttp') ? false : o.allowHttp;
      const allowGrpc: boolean = predicting && !given('allowGrpc') ? false : o.allowGrpc;
      const vertexAiPort: number = o.vertexAiPort ?? (env.AIP_HTTP_PORT ? Number.parseInt(env.AIP_HTTP_PORT, 10) : 8080);
      if (repos.length === 0 && env.AIP_STORAGE_URI) repos.push(env.AIP_STORAGE_URI);
      if (repos.length === 0) repos.push(defaultRepository());
      const inferenceType = env.SAGEMAKER_TRITON_INFERENCE_TYPE ?? 'infer';
      if (o.allowSagemaker && !['infer', 'generate', 'generate_stream'].includes(inferenceType)) {
        process.stderr.write(`Error: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '${inferenceType}': must be one of infer, generate, generate_stream\n`);
        process.exit(1);
      }
      try {
        checkPortCollision([
          ...(allowHttp ? [{ service: 'HTTP', address: o.httpAddress, port: o.httpPort }] : []),
          ...(allowGrpc ? [{ service: 'GRPC', address: o.grpcAddress, port: o.grpcPort }] : []),
          ...(o.allowMetrics ? [{ service: 'metrics', address: o.metricsAddress ?? o.httpAddress, port: o.metricsPort }] : []),
          ...(o.allowSagemaker ? [{ service: 'SageMaker', address: '0.0.0.0', port: o.sagemakerPort, range: o.sagemakerSafePortRange }] : []),
          ...(allowVertexAi ? [{ service: 'Vertex AI', address: '0.0.0.0', port: vertexAiPort }] : []),
        ]);
      } catch (err) {
        process.stderr.write(`Error: ${(err as Error).message}\n`);
        process.exit(1);
      }
      const mode = o.modelControlMode as ModelControlMode;
      if (o.loadModel && mode !== 'explicit') {
        process.stderr.write("Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.\n");
        process.exit(1);
      }
      let defaultMaxBatchSize = 4;
      // Per backend, as tritonserver keeps them: `<backend>,<key>=<value>`; no backend = every backend.
      const backendConfig: Record<string, Record<string, string>> = {};
      for (const bc of (o.backendConfig ?? []) as string[]) {
        const m = /^(?:([^,=]+),)?([^=]+)=(.*)$/.exec(bc);
        if (!m) {
          process.stderr.write(`Error: --backend-config expects <backend>,<key>=<value>, got '${bc}'\n`);
          process.exit(1);
        }
        if (m[2] === 'default-max-batch-size') defaultMaxBatchSize = Number(m[3]);
        (backendConfig[m[1] ?? '*'] ??= {})[m[2]!] = m[3]!;
      }
      let cache: { size: number } | undefined;
      try {
        cache = parseCacheFlags((o.cacheConfig ?? []) as string[], o.responseCacheByteSize);
        if (o.responseCacheByteSize !== undefined) {
          process.stderr.write(`Warning: '--response-cache-byte-size' has been deprecated! This will default to the 'local' cache implementation with the provided byte size for its config. Please use '--cache-config' instead. The equivalent --cache-config CLI args would be: '--cache-config=local,size=${o.responseCacheByteSize}'\n`);
        }
      } catch (err) {
        process.stderr.write(`Error: ${asTsiError(err).message}\n`);
        process.exit(1);
      }
      let trace;
      try {
        const configSpecs = (o.traceConfig ?? []) as string[];
        const legacy = legacyTraceSpecs(o, configSpecs);
        for (const w of legacy.warnings) process.stderr.write(`${w}\n`);
        trace = parseTraceConfig([...legacy.specs, ...configSpecs], process.env);
      } catch (err) {
        process.stderr.write(`Error: ${asTsiError(err).message}\n`);
        process.exit(1);
      }
      let log;
      try {
        log = nodeLogger({
          verbose: o.logVerbose, file: o.logFile, info: o.logInfo, warning: o.logWarn ?? o.logWarning, error: o.logError, format: o.logFormat,
        });
      } catch (err) {
        process.stderr.write(`Error: cannot open --log-file ${o.logFile}: ${(err as Error).message}\n`);
        process.exit(1);
      }
      const cuda = cudaServeNote();
      if (cuda) log.info(cuda);
      const young = youngGenerationNote();
      if (young) log.info(young);
      if (o.backendDirectory) log.info(`--backend-directory ${o.backendDirectory} is not read: tsi's backends are built in`);
      let httpTls: TlsFiles | undefined;
      let grpcTls: TlsFiles | undefined;
      try {
        httpTls = tlsFlags(o, 'http', (m) => log.warn(m));
        grpcTls = tlsFlags(o, 'grpc', (m) => log.warn(m));
      } catch (err) {
        process.stderr.write(`Error: ${(err as Error).message}\n`);
        process.exit(1);
      }
      log.info(`tsi ${TSI_VERSION} starting; model repositories: ${repos.join(', ')}`);
      let running;
      try {
        running = await startServer({
          modelRepositories: repos,
          httpPort: o.httpPort,
          httpAddress: o.httpAddress,
          allowHttp,
          log,
          logFile: o.logFile,
          strictReadiness: o.strictReadiness,
          exitOnError: o.exitOnError,
          modelLoadThreadCount: o.modelLoadThreadCount,
          modelLoadRetryCount: o.modelLoadRetryCount,
          modelConfigName: o.modelConfigName,
          modelNamespacing: o.modelNamespacing,
          maxLoadedModels: o.maxLoadedModels,
          modelMemoryBudget: o.modelMemoryBudget,
          modelControlMode: mode,
          loadModels: o.loadModel,
          autoComplete: !o.disableAutoCompleteConfig && o.strictModelConfig !== true,
          defaultMaxBatchSize,
          backendConfig,
          corsOrigin: o.httpCorsOrigin,
          maxInputSize: o.httpMaxInputSize,
          allowImageUrls: o.allowImageUrls === true,
          httpCompression: { mode: o.httpCompression, minBytes: o.httpCompressionMinBytes },
          id: o.id,
          browserDemo: o.browserDemo,
          responseCacheBytes: cache?.size,
          grpcPort: allowGrpc ? o.grpcPort : undefined,
          grpcAddress: o.grpcAddress,
          grpcRestrictedProtocol: o.grpcRestrictedProtocol,
          grpcResponseCompression: o.grpcInferResponseCompressionLevel,
          metricsPort: o.allowMetrics ? o.metricsPort : undefined,
          metricsAddress: o.metricsAddress,
          cpuMetrics: o.allowCpuMetrics,
          gpuMetrics: o.allowGpuMetrics,
          metricsIntervalMs: o.metricsIntervalMs,
          httpRestrictedApi: o.httpRestrictedApi,
          httpHeaderForwardPattern: o.httpHeaderForwardPattern,
          grpcHeaderForwardPattern: o.grpcHeaderForwardPattern,
          grpcMaxResponsePoolSize: o.grpcMaxResponsePoolSize,
          allowClientShm: o.allowClientShm,
          allowModelCodeUpload: o.allowModelCodeUpload,
          httpTls,
          grpcTls,
          apiKeys: o.apiKey,
          apiKeyFile: o.apiKeyFile,
          httpHeadersTimeoutMs: o.httpHeadersTimeoutSecs * 1000,
          grpcHandshakeTimeoutMs: o.grpcHandshakeTimeoutSecs * 1000,
          httpRequestTimeoutMs: o.httpRequestTimeoutSecs * 1000,
          repositoryPollSecs: o.repositoryPollSecs,
          trace,
          rateLimit: o.rateLimit,
          rateLimitResources: o.rateLimitResource,
          allowDashboard: o.allowDashboard,
          dashboardTuneReports: o.dashboardTuneReports,
          sagemaker: o.allowSagemaker ? {
            port: o.sagemakerPort, defaultModel: env.SAGEMAKER_TRITON_DEFAULT_MODEL_NAME, inferenceType: inferenceType as SagemakerInferenceType,
            pingMode: env.SAGEMAKER_TRITON_PING_MODE === 'live' ? 'live' : 'ready', modelsRoot: o.sagemakerModelsRoot,
          } : undefined,
          vertexAi: allowVertexAi ? {
            port: vertexAiPort, predictRoute: env.AIP_PREDICT_ROUTE, healthRoute: env.AIP_HEALTH_ROUTE, defaultModel: o.vertexAiDefaultModel,
          } : undefined,
        });
      } catch (err) {
        const message = asTsiError(err).message;
        log.error(message.startsWith('failed to start') ? message : `failed to start: ${message}`);
        process.exit(1);
      }
      const { server } = running;
      // Models an explicit-mode repository holds but did not load are listed by name only; not in the table.
      // Nor those registered for on-demand loading (--max-loaded-models, --model-memory-budget): counted instead.
      const all = server.repositoryIndex();
      const index = all.filter((e) => e.state !== undefined && e.reason !== NOT_LOADED_BUDGET);
      if (index.length < all.length && server.onDemand) log.info(`${all.filter((e) => e.reason === NOT_LOADED_BUDGET).length} model(s) registered, to load on their first request`);
      // A name several repositories hold (--model-namespacing) is ambiguous by name: its rows show no device.
      const devices = (n: string, v: string) => {
        try {
          return server.model(n, v).devices().join(', ');
        } catch {
          return '';
        }
      };
      process.stderr.write(modelTable(index, devices) + '\n');
      if (o.exitOnError && index.some((e) => e.state !== 'READY')) {
        log.error('failed to load all models; exiting (start with --exit-on-error=false to serve the others)');
        await running.stop(1000);
        process.exit(1);
      }
      let stopping = false;
      const shutdown = (sig: 'SIGINT' | 'SIGTERM') => {
        if (stopping) {
          // An operator's second Ctrl+C, or an orchestrator out of patience: out now, saying what is lost.
          log.warn(`${sig} received again: exiting now; ${describeCutShort(running.shutdownProgress())}`);
          process.exit(128 + constants.signals[sig]);
        }
        stopping = true;
        log.info(`${sig} received: shutting down in phases (drain delay ${o.drainDelaySecs} s, then up to ${o.exitTimeoutSecs} s for in-flight requests); send it again to exit at once`);
        void running.stop({ drainDelayMs: o.drainDelaySecs * 1000, timeoutMs: o.exitTimeoutSecs * 1000 }).then(() => {
          log.info('all models unloaded; exiting');
          process.exit(0);
        });
      };
      process.on('SIGINT', () => shutdown('SIGINT'));
      process.on('SIGTERM', () => shutdown('SIGTERM'));
      // Only now: whoever waits for these lines may signal at once, and must find the handlers in place.
      if (running.grpc) log.info(`Started GRPCInferenceService at ${o.grpcAddress}:${running.grpc.port}`);
      if (running.http) log.info(`Started HTTPService at ${o.httpAddress}:${running.http.port}`);
      if (running.metrics) log.info(`Started Metrics Service at ${o.metricsAddress ?? o.httpAddress}:${running.metrics.port}`);
      if (running.sagemaker) log.info(`Started Sagemaker HTTPService at 0.0.0.0:${running.sagemaker.port}`);
      if (running.vertexAi) log.info(`Started Vertex AI HTTPService at 0.0.0.0:${running.vertexAi.port}`);
      // Only with something to reload: otherwise SIGHUP keeps its default (ending the process).
      if (httpTls || grpcTls || o.apiKeyFile !== undefined) {
        process.on('SIGHUP', () => {
          log.info('SIGHUP received: reloading TLS certificates and API keys');
          void running.reloadCredentials();
        });
      }
    });

  program
    .command('index')
    .description(`write <repository>/${INDEX_FILE}, the model and file list a browser needs to read the repository by URL`)
    .argument('[repository]', 'model repository folder (default: the package\'s models/)')
    .action(async (repo?: string) => {
      const r = await writeRepositoryIndex(resolve(repo ?? defaultRepository()));
      process.stdout.write(`wrote ${r.path} (${r.models} models)\n`);
    });

  program
    .command('doctor')
    .description('print versions, NVIDIA GPUs, WebGPU adapters, the execution providers a KIND_GPU instance can use here, and whether CUDA can load (which library is missing, and the command that installs it)')
    .addOption(boolOption('--json', 'print the report as JSON', false))
    .action(async (o: { json?: boolean }) => {
      const report = await doctorReport();
      process.stdout.write(o.json ? JSON.stringify(report, null, 2) + '\n' : formatDoctor(report) + '\n');
    });

  program
    .command('pull')
    .description('fetch an onnx-community model folder from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN) with only the files one variant needs, resumably, and write the config.pbtxt that serves it: a causal LM (llm backend) or a reranker / sequence classifier (classifier backend)')
    .argument('<repo>', 'the Hub repo id, e.g. onnx-community/Qwen2.5-0.5B-Instruct or onnx-community/bge-reranker-base-ONNX')
    .option('--variant <variant>', 'the weights to fetch: q4, fp16, fp32, quantized, q4f16... or a file name under onnx/ (default: the best present for --device: on cpu model, model_q4, model_quantized...; on gpu model_fp16, model, model_q4f16, model_q4...)')
    .option('--device <device>', 'where it will be served: cpu, or gpu (also writes instance_group [{ kind: KIND_GPU }])', 'cpu')
    .option('--repository <dir>', 'the model repository to write into', 'models')
    .option('--name <name>', 'the model name in the repository (default: the repo\'s name, lowercased)')
    .option('--revision <rev>', 'branch, tag or commit on the Hub', 'main')
    .action(async (repo: string, o: { variant?: string; device: string; repository: string; name?: string; revision: string }) => {
      const tty = process.stderr.isTTY;
      if (o.device !== 'cpu' && o.device !== 'gpu') {
        process.stderr.write(`tsi-node pull: --device must be cpu or gpu, not '${o.device}'\n`);
        process.exitCode = 1;
        return;
      }
      const r = await pullModel({
        repo, variant: o.variant, device: o.device, repository: o.repository, name: o.name, revision: o.revision,
        progress: (line, done) => {
          if (tty) process.stderr.write(`\r\x1b[K${line}${done ? '\n' : ''}`);
          else if (done) process.stderr.write(`${line}\n`);
        },
      }).catch((err: Error) => {
        // A refusal or a cut connection is an answer, not a crash: no stack.
        process.stderr.write(`${tty ? '\n' : ''}tsi-node pull: ${err.message}\n`);
        process.exitCode = 1;
      });
      if (r) process.stdout.write(`pulled ${repo} (${r.variant}: ${r.reason}; ${r.commit.slice(0, 12)}) into ${r.dir}\n`);
    });

  program.addCommand(gpuCommand());
  program.addCommand(perfCommand());
  program.addCommand(tuneCommand(defaultRepository));

  return program;
}

export async function main(argv = process.argv): Promise<void> {
  await buildCli().parseAsync(argv);
}
