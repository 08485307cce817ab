/**
 * tsi in the browser: core's InferenceServer bound to onnxruntime-web (WebGPU or wasm) and to model
 * repositories reached by URL or held in memory. `createServer` returns a BrowserServer with two ways
 * in: the in-page API (`infer`, `metadata`, `config`, `ready`, `stats`) and the KServe v2 HTTP
 * protocol itself as `fetch(request)` — core's own handler, so a Service Worker (service-worker.ts)
 * can answer `/v2/...` for unmodified HTTP clients. Queueing, dynamic batching, sequences and
 * statistics are core's and apply here unchanged, and so do ensembles (core's), JavaScript models
 * (js-backend.ts), `llm` language models (llm-backend.ts: core's in-flight batching and OpenAI
 * API) and `embedding` sentence encoders (core/encoders/embedding.ts over this runtime's onnxruntime backend). Further backends plug in through `backends`, by the name a config's `backend` selects.
 */

import {
  BackendRegistry, createEmbeddingBackend, createClassifierBackend, createWhisperBackend, InferenceServer, TsiError, createHttpApp, createLogger,
  type Backend, type HttpOptions, type IndexEntry, type InferRequest, type InferResponse, type LoadOverrides,
  type Logger, type ModelControlMode, type RepositorySource,
} from '../core/index.js';
import { fromInferResponse, outputData, toInferRequest, type InferCall, type OutputData, type OutputTensor } from './api.js';
import { createJsBackend } from './js-backend.js';
import { createWebLlmBackend } from './llm-backend.js';
import { MemorySource, UrlSource, filesFromFileList, type MemoryFile, type ModelList } from './fetch-source.js';
import {
  createOnnxWebBackend, defaultThreads, fallbackReasonOf, probeEnvironment,
  type DevicePreference, type OrtModule, type WebEnvironment,
} from './onnx-web-backend.js';

export type RepositoryInput =
  | string | URL | RepositorySource | Map<string, MemoryFile> | Record<string, MemoryFile> | FileList | File[];

export interface BrowserServerOptions {
  /**
   * A base URL laid out as a Triton repository (with a `tsi-index.json`, or `models`), in-memory files
   * keyed `<model>/<path>`, dropped Files, a RepositorySource, or several of these.
   */
  repository: RepositoryInput | RepositoryInput[];
  /** For a URL repository without an index: model names (layout `<m>/config.pbtxt`, `<m>/1/model.onnx`) or names → files. */
  models?: ModelList;
  /** Index file name or URL relative to the repository URL (default `tsi-index.json`). */
  index?: string;
  /** `auto` (default): KIND_GPU instances try WebGPU, KIND_CPU use wasm; `webgpu`: all try WebGPU; `wasm`: never. */
  device?: DevicePreference;
  /** wasm threads; default up to 4 when the page is cross-origin isolated, else 1. */
  numThreads?: number;
  /** The onnxruntime-web module or a loader; default `import('onnxruntime-web')`. */
  ort?: OrtModule | (() => Promise<OrtModule>);
  /** More backends by name, created on first use; a name already taken (`javascript`) is replaced. */
  backends?: Record<string, () => Backend | Promise<Backend>>;
  log?: Logger;
  /** Console logging verbosity when no `log` is given (tritonserver's --log-verbose). */
  logVerbose?: number;
  modelControlMode?: ModelControlMode;
  /** Models to load at start in explicit mode (`*` = all). */
  loadModels?: string[];
  strictReadiness?: boolean;
  autoComplete?: boolean;
  defaultMaxBatchSize?: number;
  /** Server name reported by `GET /v2`. */
  id?: string;
  /** Options of the v2 HTTP handler behind `fetch` (body size limit, CORS, extra routes). */
  http?: HttpOptions;
}

export interface InstanceInfo {
  name: string;
  kind: string;
  /** `webgpu` or `wasm` for ONNX models; what other backends report otherwise. */
  device: string;
  /** Why an instance that could have used WebGPU runs on wasm. */
  fallbackReason?: string;
}

export function consoleLogger(verbose = 0): Logger {
  return createLogger((level, line) => {
    if (level === 'E') console.error(line);
    else if (level === 'W') console.warn(line);
    else console.info(line);
  }, verbose);
}

function toSource(r: RepositoryInput, opts: BrowserServerOptions): RepositorySource {
  if (typeof r === 'string' || r instanceof URL) return new UrlSource(r, { models: opts.models, index: opts.index });
  if (typeof (r as RepositorySource).listModels === 'function') return r as RepositorySource;
  if (Array.isArray(r) || (typeof FileList !== 'undefined' && r instanceof FileList)) return new MemorySource(filesFromFileList(r as File[]), 'dropped files');
  return new MemorySource(r as Map<string, MemoryFile> | Record<string, MemoryFile>);
}

/** Files dropped as one array are one source; an array of sources is several. */
function toSources(opts: BrowserServerOptions): RepositorySource[] {
  const r = opts.repository;
  const isFileArray = Array.isArray(r) && r.length > 0 && r.every((x) => typeof File !== 'undefined' && x instanceof File);
  const list = Array.isArray(r) && !isFileArray ? (r as RepositoryInput[]) : [r as RepositoryInput];
  return list.map((x) => toSource(x, opts));
}

export class BrowserServer {
  /** The platform-neutral server underneath (repository control, streaming infer, ...). */
  readonly core: InferenceServer;
  private readonly app: ReturnType<typeof createHttpApp>;

  constructor(core: InferenceServer, http: HttpOptions | undefined, readonly environment: WebEnvironment & { numThreads: number }) {
    this.core = core;
    this.app = createHttpApp(core, http);
  }

  /**
   * Runs one request and returns its outputs by name: typed arrays, BYTES as strings. Throws a
   * TsiError with the same message the v2 HTTP endpoint would put in its `error` body.
   */
  async infer(call: InferCall): Promise<Record<string, OutputData>> {
    // Straight to core (not through inferTensors): one async frame and its promise hops fewer per call.
    const config = this.core.model(call.model, call.version === undefined ? undefined : String(call.version)).config;
    return outputData(await this.core.infer(toInferRequest(call, config)));
  }

  /** As `infer`, with each output's datatype and shape. */
  async inferTensors(call: InferCall): Promise<Record<string, OutputTensor>> {
    const config = this.core.model(call.model, call.version === undefined ? undefined : String(call.version)).config;
    return fromInferResponse(await this.core.infer(toInferRequest(call, config)));
  }

  /**
   * Every response of a request, as they come — for decoupled models (0..N responses) and any other
   * (exactly one): `for await (const out of server.inferStream({...}))`. An error response ends it by
   * throwing. Leaving the loop early (`break`), or aborting `signal`, cancels the request: an `llm`
   * model drops the sequence at its next step (the signal's way ends the loop with a CANCELLED error).
   */
  async *inferStream(call: InferCall, opts: { signal?: AbortSignal } = {}): AsyncGenerator<Record<string, OutputData>> {
    const config = this.core.model(call.model, call.version === undefined ? undefined : String(call.version)).config;
    const queue: (InferResponse | TsiError)[] = [];
    let finished = false;
    let wake: (() => void) | undefined;
    let cancel: (() => void) | undefined;
    const done = this.core.inferStream(toInferRequest(call, config), (r, final) => {
      queue.push(r);
      if (final) finished = true;
      wake?.();
    }, {
      onCancel: (c) => {
        cancel = c;
        opts.signal?.addEventListener('abort', c, { once: true });
      },
    });
    // A request refused at admission (server stopping) sends nothing: end the loop with its error.
    done.catch((err: unknown) => {
      queue.push(err instanceof TsiError ? err : new TsiError('INTERNAL', String(err)));
      finished = true;
      wake?.();
    });
    try {
      for (;;) {
        const r = queue.shift();
        if (r === undefined) {
          if (finished) break;
          await new Promise<void>((w) => (wake = w));
          wake = undefined;
          continue;
        }
        if (r instanceof TsiError) throw r;
        // A final response that only closes the stream carries no outputs.
        if (r.outputs.length === 0) continue;
        const out: Record<string, OutputData> = {};
        for (const [name, t] of Object.entries(fromInferResponse(r))) out[name] = t.data;
        yield out;
      }
    } finally {
      if (!finished) cancel?.();
      if (cancel) opts.signal?.removeEventListener('abort', cancel);
    }
    await done;
  }

  /** Core's request/response objects as they are (v2 field names, BYTES as Uint8Array elements). */
  inferRequest(request: InferRequest): Promise<InferResponse> {
    return this.core.infer(request);
  }

  /** The KServe v2 HTTP protocol, answered in the page: `fetch('/v2/models/m/infer', {method: 'POST', body})`. */
  async fetch(input: Request | string | URL, init?: RequestInit): Promise<Response> {
    const req = input instanceof Request && !init ? input : new Request(new URL(String(input instanceof Request ? input.url : input), globalThis.location?.href ?? 'http://localhost/'), init);
    return this.app.fetch(req);
  }

  /** Server metadata, or a model's (v2 `GET /v2` / `GET /v2/models/<m>`). */
  metadata(model?: string, version?: string | number): Record<string, unknown> {
    return model === undefined ? this.core.metadata() : this.core.modelMetadata(model, version === undefined ? undefined : String(version));
  }

  config(model: string, version?: string | number): Record<string, unknown> {
    return this.core.modelConfig(model, version === undefined ? undefined : String(version));
  }

  /** Server readiness, or one model's (false for unknown models, as `isModelReady`). */
  ready(model?: string, version?: string | number): boolean {
    return model === undefined ? this.core.isReady() : this.core.isModelReady(model, version === undefined ? undefined : String(version));
  }

  /** The statistics extension's JSON, for one model or all. */
  stats(model?: string, version?: string | number): { model_stats: Record<string, unknown>[] } {
    return this.core.statistics(model, version === undefined ? undefined : String(version));
  }

  /** Every model version known and its state (the repository index). */
  index(): IndexEntry[] {
    return this.core.repositoryIndex();
  }

  /** Where each instance of a model version runs. */
  instances(model: string, version?: string | number): InstanceInfo[] {
    return this.core.model(model, version === undefined ? undefined : String(version)).instances.map((i) => {
      // `llm` instances report their fallback in their placement's notes.
      const reason = fallbackReasonOf(i.spec) ?? i.placement?.notes?.[0];
      return { name: i.spec.name, kind: i.spec.kind, device: i.device, ...(reason ? { fallbackReason: reason } : {}) };
    });
  }

  load(model: string, overrides?: LoadOverrides): Promise<void> {
    return this.core.loadModel(model, overrides);
  }

  unload(model: string): Promise<void> {
    return this.core.unloadModel(model);
  }

  /** Refuses new work, waits for in-flight requests (up to `timeoutMs`), then frees every session. */
  async stop(timeoutMs = 30_000): Promise<void> {
    await this.core.stop(timeoutMs);
  }
}

/** Builds the server and loads its models; models that fail are UNAVAILABLE with a reason (see `index()`). */
export async function createServer(opts: BrowserServerOptions): Promise<BrowserServer> {
  if (!opts || opts.repository === undefined) throw new TsiError('INVALID_ARG', 'createServer: `repository` is required');
  const log = opts.log ?? consoleLogger(opts.logVerbose ?? 0);
  const env = await probeEnvironment();
  if (env.threadsBlocked && opts.numThreads === undefined) log.warn(`${env.threadsBlocked}; running on 1 thread`);
  const backends = new BackendRegistry();
  backends.register('onnxruntime', () => createOnnxWebBackend({ log, ort: opts.ort, device: opts.device, numThreads: opts.numThreads }));
  backends.register('javascript', () => createJsBackend({ log }));
  backends.register('llm', () => createWebLlmBackend({ log, ort: opts.ort, device: opts.device, numThreads: opts.numThreads }));
  backends.register('embedding', () => createEmbeddingBackend(() => backends.get('onnxruntime')!));
  backends.register('whisper', () => createWhisperBackend(() => backends.get('onnxruntime')!));
  backends.register('classifier', () => createClassifierBackend(() => backends.get('onnxruntime')!));
  for (const [name, factory] of Object.entries(opts.backends ?? {})) backends.register(name, factory);
  const core = new InferenceServer({
    sources: toSources(opts),
    backends,
    log,
    id: opts.id,
    strictReadiness: opts.strictReadiness,
    modelControlMode: opts.modelControlMode,
    startupModels: opts.loadModels,
    autoComplete: opts.autoComplete,
    defaultMaxBatchSize: opts.defaultMaxBatchSize,
    // A software (fallback) adapter is no GPU worth defaulting KIND_AUTO models onto.
    gpuCount: env.webgpu.available && !env.webgpu.fallback ? 1 : 0,
  });
  await core.start();
  return new BrowserServer(core, opts.http, { ...env, numThreads: opts.numThreads ?? defaultThreads(env) });
}

export { UrlSource, MemorySource, filesFromFileList, INDEX_FILE, type RepositoryIndexFile, type MemoryFile, type ModelList } from './fetch-source.js';
export { createOnnxWebBackend, createSession, loadOrt, probeEnvironment, type DevicePreference, type OrtModule, type WebEnvironment } from './onnx-web-backend.js';
export { readOnnxIo } from './onnx-io.js';
export { createJsBackend } from './js-backend.js';
export { createWebLlmBackend } from './llm-backend.js';
export type { InferCall, InputData, InputValue, OutputData, OutputTensor } from './api.js';
export { TsiError } from '../core/index.js';
