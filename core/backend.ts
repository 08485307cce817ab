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

import type { MetricsRegistry } from './metrics.js';
import type { TsiError } from './errors.js';
import type { ModelConfig } from './config/model-config.js';
import type { BackendInstance, InstanceSpec, ModelIoInfo } from './execution.js';
import type { Scheduler, SchedulerContext } from './scheduling/scheduler.js';
import type { InferRequest, InferResponse, Logger } from './types.js';

export type { BackendInstance, BackendRequest, ExecutionTimes, InstancePlacement, InstanceSpec, ModelIoInfo, ResponsePayload } from './execution.js';

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

export interface ModelLoadContext {
  /** Normalised and validated. */
  config: ModelConfig;
  version: number;
  files: ModelFiles;
  log: Logger;
  /** Calls back into the server, for backends whose models call other models (BLS). */
  server: InProcessServer;
  /** The server's metrics registry, for models that define families of their own (rendered on /metrics). */
  metrics?: MetricsRegistry;
  /** Under `--model-namespacing`, the repository the model was loaded from (an ensemble's steps are looked up there first). */
  namespace?: string;
}

/** What a backend's config auto-complete may read. */
export interface AutoCompleteContext {
  files: ModelFiles;
  /** The latest version folder. */
  version: number;
  log: Logger;
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
   * The model's instances may be created at once (Triton's backends declare the same); left out,
   * one after another. For backends whose instances are independent processes or threads.
   */
  readonly parallelInstances?: boolean;
  /**
   * For models that schedule their own requests (ensembles: no instances, every request a dataflow
   * over other models); left out, the config's scheduler runs the model's instances.
   */
  createScheduler?(ctx: SchedulerContext): Scheduler;
  /** Frees what the model holds once all its instances are unloaded. */
  unload(): Promise<void>;
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
   * The repository extension's explicit load and unload, with its checks (model control mode, names,
   * uploaded code): Python's pb_utils.load_model / unload_model. Absent until extensions are attached.
   */
  readonly modelControl?: InProcessModelControl;
  /**
   * True from the first step of a shutdown on: a backend whose model process exits now lets it go
   * (the signal that stops the server often reaches its children too) instead of starting another.
   */
  isShuttingDown(): boolean;
}

/** What a model may ask of model control (core/repository/model-control.ts's ModelControl). */
export interface InProcessModelControl {
  /** `params`: `config` (JSON text) and `file:<version>/<name>` contents, as the load API takes them. */
  load(name: string, params: ReadonlyMap<string, string | Uint8Array | boolean | number>): Promise<void>;
  unload(name: string, unloadDependents?: boolean): Promise<void>;
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
