/**
 * The `onnxruntime` backend for the browser: core's Backend bound to onnxruntime-web. Each model
 * instance owns one InferenceSession; an instance picks its execution provider itself and reports it
 * as `device` (`webgpu` or `wasm`), with the reason whenever it had to fall back:
 * - KIND_GPU instances (or every instance with `device: 'webgpu'`) try WebGPU when an adapter exists
 *   and the model's inputs and outputs use only types WebGPU buffers can hold (no 64-bit, no strings);
 *   a session that still fails to create on WebGPU is retried on wasm.
 * - KIND_CPU instances run on wasm.
 * ORT is loaded lazily with a dynamic `import('onnxruntime-web')` so it lands in a chunk of its own
 * (its pthread workers start from that chunk; from the page's entry chunk they would hang), unless the
 * caller hands in a module — a Service Worker must, since `import()` is not allowed there.
 */

import type * as Ort from 'onnxruntime-web';
import {
  TsiError, concatBatch, configTypeToDatatype, decodeString, elementSize, encodeString, fromBytes, splitBatch,
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type DataType, type ExecutionTimes,
  type InstanceSpec, type Logger, type ModelConfig, type ModelFiles, type ModelIoInfo, type ModelLoadContext, type NumericArray, type Tensor,
} from '../core/index.js';
import { readOnnxIo } from './onnx-io.js';

export type OrtModule = typeof Ort;
export type DevicePreference = 'auto' | 'webgpu' | 'wasm';

export interface OnnxWebOptions {
  log: Logger;
  /** The onnxruntime-web module, or a loader for it. Default: `import('onnxruntime-web')`. */
  ort?: OrtModule | (() => Promise<OrtModule>);
  /**
   * `auto` (default): KIND_GPU instances try WebGPU, KIND_CPU ones use wasm. `webgpu`: every instance
   * tries WebGPU first. `wasm`: WebGPU is never used.
   */
  device?: DevicePreference;
  /** wasm threads; default: up to 4 when the page is cross-origin isolated, else 1. */
  numThreads?: number;
}

/** What this page (or worker) offers ORT, probed once. */
export interface WebEnvironment {
  crossOriginIsolated: boolean;
  /** Threads need Worker; a Service Worker has none. */
  workers: boolean;
  /** Why wasm threads are off although the page is cross-origin isolated (undefined when they may run). */
  threadsBlocked?: string;
  hardwareConcurrency: number;
  /** The WebGPU adapter's description, or why there is none. */
  webgpu: { available: true; vendor: string; architecture: string; fallback: boolean; shaderF16: boolean } | { available: false; reason: string };
}

interface GpuLike {
  requestAdapter(): Promise<{
    info?: { vendor?: string; architecture?: string; isFallbackAdapter?: boolean }; isFallbackAdapter?: boolean; features?: { has(f: string): boolean };
  } | null>;
}

let envPromise: Promise<WebEnvironment> | undefined;

export function probeEnvironment(): Promise<WebEnvironment> {
  envPromise ??= (async () => {
    const g = globalThis as { crossOriginIsolated?: boolean; Worker?: unknown; navigator?: { hardwareConcurrency?: number; gpu?: GpuLike } };
    let webgpu: WebEnvironment['webgpu'];
    try {
      const adapter = g.navigator?.gpu ? await g.navigator.gpu.requestAdapter() : undefined;
      if (adapter) {
        const info = adapter.info ?? {};
        webgpu = {
          available: true, vendor: info.vendor ?? '', architecture: info.architecture ?? '',
          fallback: info.isFallbackAdapter ?? adapter.isFallbackAdapter ?? false,
          // fp16 arithmetic in shaders: what an fp16 model needs on WebGPU (the llm backend's variant choice).
          shaderF16: adapter.features?.has('shader-f16') ?? false,
        };
      } else {
        webgpu = { available: false, reason: g.navigator?.gpu ? 'no WebGPU adapter (requestAdapter() returned null)' : 'this browser has no WebGPU (navigator.gpu is undefined)' };
      }
    } catch (err) {
      webgpu = { available: false, reason: `WebGPU adapter request failed: ${(err as Error).message}` };
    }
    const isolated = g.crossOriginIsolated === true;
    const workers = typeof g.Worker === 'function';
    return {
      crossOriginIsolated: isolated,
      workers,
      threadsBlocked: isolated && workers ? await workerScriptsBlocked() : undefined,
      hardwareConcurrency: g.navigator?.hardwareConcurrency ?? 1,
      webgpu,
    };
  })();
  return envPromise;
}

/**
 * ORT starts its pthread workers from its own chunk's URL. In an isolated page Chromium refuses a
 * worker script served without COEP (net::ERR_BLOCKED_BY_RESPONSE), and ORT then waits forever for
 * its threads. The chunk is served like this module, so this module's own headers tell.
 */
async function workerScriptsBlocked(): Promise<string | undefined> {
  const url = import.meta.url;
  if (!/^https?:/.test(url)) return undefined;
  try {
    const r = await fetch(url, { method: 'HEAD', cache: 'no-store' });
    const coep = r.headers.get('cross-origin-embedder-policy');
    if (coep === 'require-corp' || coep === 'credentialless') return undefined;
    return `the page is cross-origin isolated but its scripts (${url}) are served without Cross-Origin-Embedder-Policy, so wasm threads could not start; serve the tsi files with COEP too`;
  } catch {
    return undefined;
  }
}

/** Up to 4 wasm threads where they can work (isolated, Worker available, scripts with COEP), else 1. */
export function defaultThreads(env: WebEnvironment): number {
  return env.crossOriginIsolated && env.workers && !env.threadsBlocked ? Math.max(1, Math.min(4, env.hardwareConcurrency)) : 1;
}

const configured = new WeakSet<object>();

/**
 * Loads (once) and configures the ORT module. Threads only when they can work: without cross-origin
 * isolation ORT would warn and fall back anyway, and in a Service Worker it cannot start workers.
 */
export async function loadOrt(opts: Pick<OnnxWebOptions, 'ort' | 'numThreads'> = {}): Promise<OrtModule> {
  const src = opts.ort;
  const ort = typeof src === 'function' ? await src() : src ?? (await import('onnxruntime-web'));
  if (!configured.has(ort)) {
    configured.add(ort);
    ort.env.wasm.numThreads = opts.numThreads ?? defaultThreads(await probeEnvironment());
    ort.env.logLevel = 'error';
  }
  return ort;
}

const creating = new WeakMap<object, Promise<unknown>>();

/**
 * Creates sessions one at a time per ORT module. onnxruntime-web keeps a graph's external data in one
 * module-wide table that every finished create clears, so a session created beside one that is still
 * reading its external data would take that data away ("Module.MountedFiles is not available").
 */
export function createSession(ort: OrtModule, model: Uint8Array, options: Ort.InferenceSession.SessionOptions): Promise<Ort.InferenceSession> {
  const before = creating.get(ort) ?? Promise.resolve();
  const mine = before.catch(() => {}).then(() => ort.InferenceSession.create(model, options));
  creating.set(ort, mine.catch(() => {}));
  return mine;
}

const ORT_TYPE: Partial<Record<DataType, Ort.Tensor.Type>> = {
  BOOL: 'bool', UINT8: 'uint8', UINT16: 'uint16', UINT32: 'uint32', UINT64: 'uint64', INT8: 'int8', INT16: 'int16',
  INT32: 'int32', INT64: 'int64', FP16: 'float16', FP32: 'float32', FP64: 'float64', BYTES: 'string',
};
const FROM_ORT: Record<string, DataType> = Object.fromEntries(Object.entries(ORT_TYPE).map(([k, v]) => [v, k as DataType]));

/** Graph input/output types a WebGPU buffer cannot hold; such models run on wasm. */
const WEBGPU_LACKS = new Set(['int64', 'uint64', 'float64', 'string', 'bfloat16']);

function modelPath(config: ModelConfig, version: number): string {
  return `${version}/${config.default_model_filename || 'model.onnx'}`;
}

export function createOnnxWebBackend(opts: OnnxWebOptions): Backend {
  return {
    name: 'onnxruntime',
    async describeModel(config: ModelConfig, version: number, files: ModelFiles): Promise<ModelIoInfo> {
      const path = modelPath(config, version);
      if (!(await files.exists(path))) throw new TsiError('INVALID_ARG', `unable to find '${path}' for model '${config.name}'`);
      return readOnnxIo(await files.read(path));
    },
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      const ort = await loadOrt(opts);
      const path = modelPath(ctx.config, ctx.version);
      let bytes: Uint8Array;
      try {
        bytes = await ctx.files.read(path);
      } catch (err) {
        throw new TsiError('INVALID_ARG', `unable to read '${path}' for model '${ctx.config.name}': ${(err as Error).message}`);
      }
      return new OnnxWebModel(ctx, opts, ort, bytes, await probeEnvironment());
    },
  };
}

/** Triton onnxruntime_backend parameters that mean something in onnxruntime-web. */
function sessionOptions(config: ModelConfig): Ort.InferenceSession.SessionOptions {
  const p = (k: string) => config.parameters?.[k]?.string_value;
  // ORT's own warnings (e.g. shape ops placed on the CPU under WebGPU) are noise here; errors still surface.
  const o: Ort.InferenceSession.SessionOptions = { logSeverityLevel: 3 };
  const pattern = p('enable_mem_pattern');
  if (pattern !== undefined) o.enableMemPattern = pattern === '1' || pattern === 'true';
  const arena = p('enable_mem_arena');
  if (arena !== undefined) o.enableCpuMemArena = arena === '1' || arena === 'true';
  const level = config.optimization?.graph?.level;
  o.graphOptimizationLevel = level === -1 ? 'basic' : level === 1 ? 'extended' : 'all';
  return o;
}

/**
 * Runs of one ORT module never overlap: its wasm heap and WebGPU device are shared by all sessions,
 * and a WebGPU run yields while the GPU works. A run starts at once on an idle module, else chained
 * behind the last one (`tail`). `busy` counts runs whose caller has not yet seen them settle: the
 * caller counts its own run down after awaiting it, so a run costs no promise reaction of its own.
 */
interface RunLock {
  tail: Promise<unknown>;
  busy: number;
}
const runLocks = new WeakMap<object, RunLock>();
export function runLock(ort: OrtModule): RunLock {
  let lock = runLocks.get(ort);
  if (!lock) runLocks.set(ort, (lock = { tail: Promise.resolve(), busy: 0 }));
  return lock;
}

class OnnxWebModel implements BackendModel {
  private readonly gpuBlocker?: string;

  constructor(
    private readonly ctx: ModelLoadContext, private readonly opts: OnnxWebOptions, private readonly ort: OrtModule,
    private readonly bytes: Uint8Array, private readonly env: WebEnvironment,
  ) {
    const io = readOnnxIo(bytes);
    const lacking = [...new Set([...io.inputs, ...io.outputs].map((t) => t.datatype).filter((t) => WEBGPU_LACKS.has(t)))];
    if (lacking.length > 0) this.gpuBlocker = `WebGPU has no ${lacking.join('/')} tensors`;
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    const { config, log } = this.ctx;
    const pref = this.opts.device ?? 'auto';
    const tryGpu = pref === 'webgpu' || (pref === 'auto' && spec.kind === 'KIND_GPU');
    let fallback: string | undefined;
    if (tryGpu) {
      if (!this.env.webgpu.available) fallback = this.env.webgpu.reason;
      else if (this.gpuBlocker) fallback = this.gpuBlocker;
      else {
        try {
          const session = await this.create('webgpu');
          log.verbose(1, `${config.name} (${spec.name}) runs on webgpu`);
          return new OnnxWebInstance(spec, 'webgpu', undefined, session, this.ort, config);
        } catch (err) {
          fallback = `webgpu session failed: ${(err as Error).message.split('\n')[0]}`;
        }
      }
      log.warn(`${config.name} (${spec.name}): ${fallback}; running on wasm`);
    }
    const session = await this.create('wasm').catch((err: Error) => {
      throw new TsiError('INTERNAL', `failed to create an onnxruntime-web session for '${config.name}': ${err.message.split('\n')[0]}`);
    });
    log.verbose(1, `${config.name} (${spec.name}) runs on wasm (${this.ort.env.wasm.numThreads ?? 1} thread(s))`);
    return new OnnxWebInstance(spec, 'wasm', fallback, session, this.ort, this.ctx.config);
  }

  private create(ep: 'webgpu' | 'wasm'): Promise<Ort.InferenceSession> {
    // ORT may keep the buffer it is given; each session gets its own copy.
    return createSession(this.ort, this.bytes.slice(), { ...sessionOptions(this.ctx.config), executionProviders: [ep] });
  }

  async unload(): Promise<void> {}
}

/**
 * Why an instance runs on wasm although it could have used WebGPU, by its spec: core may wrap the
 * instance object (tracing), but hands every wrapper the backend's own spec.
 */
const fallbacks = new WeakMap<InstanceSpec, string>();
export const fallbackReasonOf = (spec: InstanceSpec): string | undefined => fallbacks.get(spec);

export class OnnxWebInstance implements BackendInstance {
  constructor(
    readonly spec: InstanceSpec,
    readonly device: 'webgpu' | 'wasm',
    /** Why a WebGPU-eligible instance runs on wasm instead; undefined when it got what it asked for. */
    readonly fallbackReason: string | undefined,
    private readonly session: Ort.InferenceSession,
    private readonly ort: OrtModule,
    private readonly config: ModelConfig,
  ) {
    if (fallbackReason) fallbacks.set(spec, fallbackReason);
    this.lock = runLock(ort);
    this.outputCount = session.outputNames.length;
    // Looked up once here rather than with find() over the config on every run.
    for (const i of config.input ?? []) if (i.name) this.inputCfg.set(i.name, i);
    for (const o of config.output ?? []) if (o.name) this.outputCfg.set(o.name, o);
  }

  private readonly inputCfg = new Map<string, NonNullable<ModelConfig['input']>[number]>();
  private readonly outputCfg = new Map<string, NonNullable<ModelConfig['output']>[number]>();
  private readonly lock: RunLock;
  private readonly outputCount: number;
  /** Per input name, the buffer batches are gathered into (see `gather`). */
  private readonly staging = new Map<string, ArrayBuffer>();

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes> {
    const t0 = performance.now();
    const batching = (this.config.max_batch_size ?? 0) > 0;
    const first = requests[0]!;
    const single = requests.length === 1;
    const feeds: Record<string, Ort.Tensor> = {};
    for (const name of first.inputs.keys()) {
      // A lone request's tensor goes to ORT as it is (concatBatch would return it anyway).
      const t = single ? first.inputs.get(name)! : this.gather(name, requests);
      const reshape = this.inputCfg.get(name)?.reshape;
      let dims = t.shape;
      if (reshape) dims = batching ? [t.shape[0]!, ...(reshape.shape ?? [])] : [...(reshape.shape ?? [])];
      feeds[name] = this.toOrt(t, dims);
    }
    // Naming the fetches costs ORT a little per run; only do it when some outputs are not wanted.
    // Requested outputs are validated (distinct, all the model's), so a count says whether all are.
    let names: string[] | undefined;
    if (single && !first.stateOutputs) {
      if (first.requestedOutputs.length !== this.outputCount) names = [...first.requestedOutputs];
    } else {
      const fetches = new Set<string>();
      for (const r of requests) {
        for (const o of r.requestedOutputs) fetches.add(o);
        if (r.stateOutputs) for (const o of r.stateOutputs) fetches.add(o);
      }
      if (fetches.size !== this.outputCount) names = [...fetches];
    }
    const t1 = performance.now();
    const lock = this.lock;
    const run = () => (names ? this.session.run(feeds, names) : this.session.run(feeds));
    let results: Ort.InferenceSession.ReturnType;
    lock.busy++;
    try {
      const running = lock.busy === 1 ? run() : lock.tail.then(run, run);
      lock.tail = running;
      results = await running;
    } catch (err) {
      throw new TsiError('INTERNAL', `onnxruntime failed to run model '${this.config.name}': ${(err as Error).message}`);
    } finally {
      lock.busy--;
    }
    const t2 = performance.now();
    if (single) {
      const outs: Tensor[] = [];
      for (const name in results) outs.push(this.fromOrt(name, results[name]!, batching));
      first.send({ outputs: outs }, true);
    } else {
      const rows = requests.map((r) => r.batchSize);
      let total = 0;
      for (const n of rows) total += n;
      const outs: Tensor[][] = requests.map(() => []);
      for (const name in results) {
        const t = this.fromOrt(name, results[name]!, batching);
        if (batching) {
          if (t.shape[0] !== total) {
            throw new TsiError('INTERNAL', `model '${this.config.name}' output '${name}' has ${t.shape[0]} rows for a batch of ${total}`);
          }
          const parts = splitBatch(t, rows);
          for (let i = 0; i < outs.length; i++) outs[i]!.push(parts[i]!);
        } else for (const o of outs) o.push(t);
      }
      for (let i = 0; i < requests.length; i++) requests[i]!.send({ outputs: outs[i]! }, true);
    }
    const t3 = performance.now();
    return { computeInputNs: (t1 - t0) * 1e6, computeInferNs: (t2 - t1) * 1e6, computeOutputNs: (t3 - t2) * 1e6 };
  }

  /**
   * One input of a batch as one tensor. Numeric rows are copied into a buffer this instance keeps for
   * the input (grown when a bigger batch comes) instead of a fresh one per batch: a fresh 100 kB+
   * buffer costs page faults and zeroing on every batch. Safe to reuse because ORT copies inputs into
   * its own heap during `run`, and an instance runs one batch at a time. (ORT's proxy worker mode
   * transfers input buffers instead; a detached buffer reads as 0 bytes long and is simply replaced.)
   */
  private gather(name: string, requests: BackendRequest[]): Tensor {
    const parts = requests.map((r) => r.inputs.get(name)!);
    const first = parts[0]!;
    if (first.datatype === 'BYTES') return concatBatch(parts);
    let rows = 0;
    let total = 0;
    for (const p of parts) {
      rows += p.shape[0] ?? 1;
      total += (p.data as NumericArray).length;
    }
    const bytes = total * elementSize(first.datatype);
    let buf = this.staging.get(name);
    if (!buf || buf.byteLength < bytes) this.staging.set(name, (buf = new ArrayBuffer(bytes)));
    const out = fromBytes(first.datatype, new Uint8Array(buf, 0, bytes), total) as NumericArray;
    let off = 0;
    for (const p of parts) {
      const d = p.data as NumericArray;
      (out as Float32Array).set(d as Float32Array, off);
      off += d.length;
    }
    return { name, datatype: first.datatype, shape: [rows, ...first.shape.slice(1)], data: out };
  }

  /** One ORT output as core's tensor; ORT's dims array is fresh per run, so it is kept, not copied. */
  private fromOrt(name: string, ot: Ort.Tensor, batching: boolean): Tensor {
    const cfg = this.outputCfg.get(name);
    const datatype = FROM_ORT[ot.type] ?? (cfg?.data_type ? configTypeToDatatype(cfg.data_type) : undefined);
    if (!datatype) throw new TsiError('INTERNAL', `model '${this.config.name}' output '${name}' has unsupported type '${ot.type}'`);
    let shape = ot.dims as number[];
    if (cfg?.reshape) shape = batching ? [shape[0]!, ...(cfg.dims ?? [])] : [...(cfg.dims ?? [])];
    return { name, datatype, shape, data: fromOrtData(datatype, ot.data) };
  }

  private toOrt(t: Tensor, dims: number[]): Ort.Tensor {
    const type = ORT_TYPE[t.datatype];
    if (!type) throw new TsiError('UNSUPPORTED', `datatype ${t.datatype} of input '${t.name}' is not supported by onnxruntime-web`);
    if (t.datatype === 'BYTES') return new this.ort.Tensor('string', (t.data as Uint8Array[]).map(decodeString), dims);
    return new this.ort.Tensor(type, t.data as Ort.Tensor.DataType as never, dims);
  }

  async unload(): Promise<void> {
    await this.session.release();
  }
}

/** ORT output data as core's representation (FP16 as raw Uint16 bits, BYTES as UTF-8 elements). */
function fromOrtData(datatype: DataType, data: Ort.Tensor.DataType): Tensor['data'] {
  if (datatype === 'BYTES') return (data as string[]).map(encodeString);
  if ((datatype === 'FP16' || datatype === 'BF16') && !(data instanceof Uint16Array)) {
    const d = data as unknown as ArrayBufferView & { length: number };
    return new Uint16Array(d.buffer, d.byteOffset, d.length);
  }
  if (datatype === 'BOOL' && !(data instanceof Uint8Array)) return Uint8Array.from(data as ArrayLike<number>, (v) => (v ? 1 : 0));
  return data as Tensor['data'];
}
