/**
 * The Backend interface, shaped like TRITONBACKEND: a backend loads models, a model makes instances,
 * and an instance executes a *batch of requests* per call. Backends are registered by name
 * (`onnxruntime`, `javascript`, ...) in a BackendRegistry and are initialised lazily, so heavy native
 * dependencies load only when a model needs them and core never imports them.
 *
 * Ownership and concurrency rules:
 * - `execute` is never called concurrently on one instance; different instances run in parallel.
 * - Every request passed to `execute` must get exactly one response marked final (an error counts),
 *   sent through its `send`. Decoupled models may send any number of non-final responses first, and may
 *   keep sending after `execute` resolves; a non-decoupled request takes exactly one response. A final
 *   response with no outputs and no parameters is a bare completion flag (Triton's
 *   TRITONSERVER_RESPONSE_COMPLETE_FINAL without a response): streaming transports forward it only
 *   when the client asked for empty final responses (see `isCompletionOnly`).
 * - Input tensors belong to the backend for the duration of `execute` and must not be kept after the
 *   request's final response; output tensors handed to `send` belong to core from then on.
 * - Inputs arrive validated (names, datatypes, shapes, batch size) against the normalised config.
 */

import type { CustomMetrics } from './custom-metrics.js';
import type { TsiError } from './errors.js';
import type { ModelConfig } from './model-config.js';
import type { Scheduler, SchedulerContext } from './scheduler.js';
import type { InferRequest, InferResponse, Logger, Parameters, Tensor } from './types.js';

/** Read access to one model's folder in the repository: `<model>/...`. */
export interface ModelFiles {
  /** Path relative to the model folder, e.g. `1/model.onnx` or `labels.txt`. */
  read(relPath: string): Promise<Uint8Array>;
  exists(relPath: string): Promise<boolean>;
  /** Entries of a folder relative to the model folder ('' for the model folder itself). */
  list(relDir: string): Promise<{ name: string; isDir: boolean }[]>;
  /** A local filesystem path for the same file where one exists (Node), else undefined. */
  localPath?(relPath: string): string | undefined;
}

/** What a backend's auto-complete learns from the model file. */
export interface ModelIoInfo {
  inputs: { name: string; datatype: string; shape: (number | string)[] }[];
  outputs: { name: string; datatype: string; shape: (number | string)[] }[];
}

export interface ModelLoadContext {
  /** Normalised and validated. */
  config: ModelConfig;
  version: number;
  files: ModelFiles;
  log: Logger;
  /** Calls back into the server, for backends whose models call other models (BLS). */
  server: InProcessServer;
  /** The server's custom metric families, for models that define their own (rendered on /metrics). */
  metrics?: CustomMetrics;
}

/** What a backend's config auto-complete may read. */
export interface AutoCompleteContext {
  files: ModelFiles;
  /** The latest version folder. */
  version: number;
  log: Logger;
}

export interface InstanceSpec {
  /** e.g. `simple_0_1`: group name and index within it. */
  name: string;
  kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL';
  /** GPU id for KIND_GPU, else -1. */
  deviceId: number;
  /** Index of this instance among all the model version's instances. */
  index: number;
}

export interface Backend {
  readonly name: string;
  /**
   * Reads the model file to describe its inputs and outputs, for Triton-style auto-complete. Optional:
   * backends without it leave the config as written.
   */
  describeModel?(config: ModelConfig, version: number, files: ModelFiles): Promise<ModelIoInfo>;
  /**
   * Completes a whole config from the model itself, beyond inputs and outputs (Triton's Python
   * `auto_complete_config`: batching, transaction policy, anything). Called with the config as parsed,
   * before normalisation, only when auto-complete is enabled; what it returns replaces the config.
   */
  autoCompleteConfig?(config: ModelConfig, ctx: AutoCompleteContext): Promise<ModelConfig>;
  loadModel(ctx: ModelLoadContext): Promise<BackendModel>;
}

export interface BackendModel {
  createInstance(spec: InstanceSpec): Promise<BackendInstance>;
  /**
   * For models that schedule their own requests (ensembles: no instances, every request a dataflow
   * over other models); left out, the config's scheduler runs the model's instances.
   */
  createScheduler?(ctx: SchedulerContext): Scheduler;
  /** Frees what the model holds once all its instances are unloaded. */
  unload(): Promise<void>;
}

/** Durations a backend measured for one execution, in nanoseconds. */
export interface ExecutionTimes {
  computeInputNs: number;
  computeInferNs: number;
  computeOutputNs: number;
  /** Time a pipelined batch waited behind the previous one on its instance: queue time, not compute. */
  waitNs?: number;
}

/**
 * Where an instance really runs, which can differ from what its config asked: a KIND_GPU instance on
 * a machine without a usable GPU runs on the CPU. Shown in logs, the start-up table and the config as
 * loaded (`GET /v2/models/{m}/config`).
 */
export interface InstancePlacement {
  /** KIND_GPU when it runs on a GPU (through whichever provider), else KIND_CPU (or KIND_MODEL). */
  kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL';
  /** The execution provider, e.g. `webgpu`, `cuda`, `cpu`, `wasm`. */
  provider: string;
  /** The GPU or adapter in words, when known. */
  adapter?: string;
  /** Why better providers were skipped, in words. */
  notes?: string[];
}

export interface BackendInstance {
  readonly spec: InstanceSpec;
  /** Human-readable device / execution provider, e.g. `cpu` or `cuda:0`; shown in logs and `doctor`. */
  readonly device: string;
  /** Where it really runs; absent: as its spec says. */
  readonly placement?: InstancePlacement;
  execute(requests: BackendRequest[]): Promise<ExecutionTimes | void>;
  unload(): Promise<void>;
  /**
   * True when the instance may be handed its next batch before the current `execute` resolves and
   * will still run the batches one at a time, in order (a worker thread with its own message queue).
   * Schedulers then queue one full batch behind the running one.
   */
  readonly pipelined?: boolean;
  /**
   * Whether the instance can serve now (TRITONBACKEND_ModelInstanceReady): resolves if so, rejects with
   * the reason if not (a crashed worker process, a model's own readiness check saying no). Asked on
   * every model-readiness request, possibly concurrently with `execute`; absent: always ready.
   */
  checkReady?(): Promise<void>;
  /** Memory the instance holds, as its backend measured it at creation (bytes); absent: not measured. */
  readonly memoryBytes?: number;
}

export interface ResponsePayload {
  outputs: Tensor[];
  parameters?: Parameters;
}

/** One request inside a batch handed to a backend. */
export interface BackendRequest {
  readonly id: string;
  /** Validated inputs, by name, including control and implicit-state inputs a scheduler added. */
  readonly inputs: ReadonlyMap<string, Tensor>;
  /** Names of the outputs this request wants; a backend may still compute all of them. */
  readonly requestedOutputs: readonly string[];
  /** Custom (non-reserved) request parameters. */
  readonly parameters: Readonly<Parameters>;
  /** Rows this request contributes to the batch dimension (1 for non-batching models). */
  readonly batchSize: number;
  /** Output names the backend must return even if not requested (implicit state outputs). */
  readonly stateOutputs?: readonly string[];
  /** True once the client gave up on the request (closed its connection, cancelled its call). */
  readonly cancelled?: boolean;
  /**
   * Calls `cb` once when the client gives up (at once if it already has). A backend may stop work on
   * the request early; it must still send the request a final response.
   */
  onCancel?(cb: () => void): void;
  /**
   * The response sender. `final` closes the request; sending after that is a no-op. Outputs a
   * request did not ask for are dropped by core.
   */
  send(response: ResponsePayload | TsiError, final: boolean): void;
}

/** The in-process server surface a backend may call (BLS). */
export interface InferOptions {
  /** The error text for a decoupled model, which `infer` refuses (each transport words it its own way). */
  decoupledMessage?: string;
  /**
   * For transports that can tell when the client gives up: called once the request is admitted, with
   * the function to call at that moment (the request is then cancelled: see BackendRequest.onCancel).
   */
  onCancel?: (cancel: () => void) => void;
}

export interface InProcessServer {
  infer(request: InferRequest, opts?: InferOptions): Promise<InferResponse>;
  /** Every response (decoupled models: 0..N, then a final one); resolves after the final one. */
  inferStream(request: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void, opts?: InferOptions): Promise<void>;
  isModelReady(name: string, version?: string): boolean;
  /**
   * True from the first step of a shutdown on: a backend whose model process exits now lets it go
   * (the signal that stops the server often reaches its children too) instead of starting another.
   */
  isShuttingDown(): boolean;
}

/** A final response that carries nothing but the "final" flag (see the rules at the top). */
export function isCompletionOnly(r: { outputs: readonly unknown[]; parameters?: object }): boolean {
  return r.outputs.length === 0 && (r.parameters === undefined || Object.keys(r.parameters).length === 0);
}

/** Backends by name, created on first use; a failed creation is remembered and reported. */
export class BackendRegistry {
  private readonly factories = new Map<string, () => Promise<Backend> | Backend>();
  private readonly created = new Map<string, Promise<Backend>>();

  register(name: string, factory: () => Promise<Backend> | Backend): void {
    this.factories.set(name, factory);
    this.created.delete(name);
  }

  has(name: string): boolean {
    return this.factories.has(name);
  }

  names(): string[] {
    return [...this.factories.keys()];
  }

  get(name: string): Promise<Backend> | undefined {
    let p = this.created.get(name);
    if (!p) {
      const factory = this.factories.get(name);
      if (!factory) return undefined;
      p = Promise.resolve().then(factory);
      this.created.set(name, p);
    }
    return p;
  }
}
