/**
 * InferenceServer: core's public entry point, the in-process equivalent of TRITONSERVER_Server. It owns
 * the model repository and answers every protocol-level question (health, metadata, config, infer,
 * statistics, repository control) as plain objects and TsiErrors; the HTTP handler in http.ts, the gRPC
 * server and the browser API are thin translations of it. Stopping has two steps a runtime spaces out
 * (runtime-node/shutdown.ts): `beginDrain` only turns readiness off, so load balancers move away while
 * everything is still served; `stop` then refuses new work (except requests continuing a sequence in
 * progress), waits for what is in flight and for those sequences within a deadline, and unloads.
 */

import { BackendRegistry, type InferOptions, type InProcessModelControl, type InProcessServer } from './backend.js';
import type { ResponseCache } from './cache.js';
import { RateLimiter, type RateLimitMode, type ResourceLimit } from './scheduling/rate-limiter.js';
import { configJsonText, modelConfigToJson, modelConfigToProtoObject } from './config/pipeline.js';
import { createEnsembleBackend } from './ensemble.js';
import { registerTestBackends } from './test-backends/index.js';
import { TsiError, asTsiError } from './errors.js';
import type { ModelVersion } from './repository/model.js';
import { MetricsRegistry } from './metrics.js';
import type { IndexEntry, LoadOverrides, Repository, RepositorySource } from './repository/repository.js';
import { createRepository, isAmbiguous, repositoryParts } from './repository/namespaces.js';
import { Residency, type ResidencyOptions } from './repository/residency.js';
import { registerServerMetrics } from './server-metrics.js';
import type { SchedulerDelay } from './scheduling/scheduler.js';
import { systemClock, type Clock, type InferRequest, type InferResponse, type Logger, silentLogger } from './types.js';

export type ModelControlMode = 'none' | 'poll' | 'explicit';

export interface ServerOptions {
  sources: RepositorySource[];
  backends: BackendRegistry;
  clock?: Clock;
  log?: Logger;
  /** Server name reported by `GET /v2` (tritonserver's --id). */
  id?: string;
  version?: string;
  strictReadiness?: boolean;
  modelControlMode?: ModelControlMode;
  /** Models to load at start in explicit mode; `*` means all. */
  startupModels?: string[];
  /**
   * Why the server could not initialise (a model repository that is not there), when it is to serve
   * anyway: as Triton's SERVER_FAILED_TO_INITIALIZE, it answers metadata but is neither live nor
   * ready, and loads nothing.
   */
  initError?: string;
  autoComplete?: boolean;
  defaultMaxBatchSize?: number;
  gpuCount?: number;
  /** Extensions advertised by `GET /v2` beyond core's own (transports add theirs). */
  extraExtensions?: string[];
  /** The response cache (tritonserver's `--cache-config local,size=N`); absent: no caching. */
  responseCache?: ResponseCache;
  /** tritonserver's `--rate-limit`; default off (instances run as soon as they are free). */
  rateLimit?: RateLimitMode;
  /** tritonserver's `--rate-limit-resource`: resource counts instead of the largest need of any instance. */
  rateLimitResources?: ResourceLimit[];
  /** tritonserver's `--model-load-thread-count`: models loaded at once (default 4). */
  modelLoadThreadCount?: number;
  /** tritonserver's `--model-load-retry-count`: times a version that fails to load is tried again (default 0). */
  modelLoadRetryCount?: number;
  /** On-demand loading within a budget (residency.ts); absent: every model loads at start, as in Triton. */
  residency?: ResidencyOptions;
  /** Triton's scheduler test hook (TRITONSERVER_DELAY_SCHEDULER); absent: no hold. See SchedulerDelay. */
  schedulerDelay?: SchedulerDelay;
  /** tritonserver's `--model-config-name`: each model's `configs/<name>.pbtxt` where it has one. */
  modelConfigName?: string;
  /** tritonserver's `--model-namespacing`: a model is (repository, name); see repository/namespaces.ts. */
  modelNamespacing?: boolean;
}

export const TSI_VERSION = '0.1.0';

const CORE_EXTENSIONS = [
  'classification', 'sequence', 'model_repository', 'model_repository(unload_dependents)', 'schedule_policy',
  'model_configuration', 'system_shared_memory', 'cuda_shared_memory', 'binary_tensor_data', 'parameters',
  'statistics', 'trace', 'logging',
];

export class InferenceServer implements InProcessServer {
  readonly repository: Repository;
  readonly cache?: ResponseCache;
  /** Shared by every loaded model, so that models using the same resources take turns. */
  readonly rateLimiter: RateLimiter;
  /** The one registry of every family on /metrics: the server's own, models' custom ones, the runtime's. */
  readonly metrics = new MetricsRegistry();
  /** Loads and unloads with their reasons, measured memory, and on-demand loading when a budget is set. */
  readonly residency: Residency;
  readonly clock: Clock;
  readonly log: Logger;
  /** Set by the ServerExtensions attached to this server (models reach it as InProcessServer's). */
  modelControl?: InProcessModelControl;
  readonly options: Required<Pick<ServerOptions, 'id' | 'version' | 'strictReadiness' | 'modelControlMode'>>;
  private live = false;
  /** The start-up load is over: readiness may be true from here on (live is true from the start). */
  private started = false;
  private stopping = false;
  /** Shutting down: not ready (server and models), though still serving until `stop`. */
  private draining = false;
  /** Admitted requests not yet answered with their final response, and who waits for none. */
  private inflight = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly extensions: string[];

  constructor(private readonly opts: ServerOptions) {
    this.clock = opts.clock ?? systemClock;
    this.log = opts.log ?? silentLogger;
    this.options = {
      id: opts.id ?? 'triton',
      version: opts.version ?? TSI_VERSION,
      strictReadiness: opts.strictReadiness ?? true,
      modelControlMode: opts.modelControlMode ?? 'none',
    };
    this.extensions = [...CORE_EXTENSIONS, ...(opts.extraExtensions ?? [])];
    this.cache = opts.responseCache;
    this.rateLimiter = new RateLimiter({ mode: opts.rateLimit, resources: opts.rateLimitResources, clock: this.clock, log: this.log });
    // Ensembles are core: every runtime serves them without registering anything.
    if (!opts.backends.has('ensemble')) opts.backends.register('ensemble', () => createEnsembleBackend(this));
    // So are Triton's small test backends, which its documentation and tests name.
    registerTestBackends(opts.backends);
    this.repository = createRepository({
      sources: opts.sources,
      backends: opts.backends,
      clock: this.clock,
      log: this.log,
      server: this,
      gpuCount: opts.gpuCount ?? 0,
      autoComplete: opts.autoComplete ?? true,
      defaultMaxBatchSize: opts.defaultMaxBatchSize ?? 4,
      cache: opts.responseCache,
      metrics: this.metrics,
      rateLimiter: this.rateLimiter,
      loadThreadCount: opts.modelLoadThreadCount,
      loadRetryCount: opts.modelLoadRetryCount,
      schedulerDelay: opts.schedulerDelay,
      configName: opts.modelConfigName,
      namespacing: opts.modelNamespacing,
    });
    this.residency = new Residency(this.repository, opts.residency ?? {}, this.clock, this.log);
    registerServerMetrics(this.metrics, this);
  }

  /** Whether models load on their first request within a budget (`--max-loaded-models`, `--model-memory-budget`). */
  get onDemand(): boolean {
    const r = this.opts.residency;
    return r !== undefined && (r.maxLoadedModels !== undefined || r.memoryBudgetBytes !== undefined);
  }

  /** Loads the start-up models. Failures leave those models UNAVAILABLE; see `index()`. */
  async start(): Promise<void> {
    if (this.opts.initError !== undefined) {
      this.log.error(this.opts.initError);
      this.started = true;
      return;
    }
    this.live = true;
    try {
      const wanted = this.options.modelControlMode === 'explicit' ? this.opts.startupModels ?? [] : ['*'];
      if (this.onDemand) {
        // Registered, not loaded: each loads on its first request (explicit mode: the named ones load now).
        this.repository.park([...(await this.repository.scan()).keys()]);
        if (this.options.modelControlMode === 'explicit' && !wanted.includes('*')) await this.repository.loadAll(wanted);
      } else if (wanted.includes('*')) await this.repository.loadAll();
      else await this.repository.loadAll(wanted);
      for (const name of this.repository.names()) if (this.repository.readyVersions(name).length > 0) this.residency.loaded(name, 'startup');
      if (this.onDemand) await this.residency.makeRoom();
    } finally {
      this.started = true;
    }
  }

  isLive(): boolean {
    return this.live && !this.stopping;
  }

  isReady(): boolean {
    // Until the start-up load is over, models the scan has not reached yet are not registered at all.
    if (!this.isLive() || !this.started || this.draining) return false;
    return this.options.strictReadiness ? this.repository.allReady() : true;
  }

  metadata(): { name: string; version: string; extensions: string[] } {
    return { name: this.options.id, version: this.options.version, extensions: this.extensions };
  }

  model(name: string, version?: string): ModelVersion {
    return this.repository.get(name, version);
  }

  isModelReady(name: string, version?: string): boolean {
    try {
      return this.repository.get(name, version).state === 'READY';
    } catch {
      return false;
    }
  }

  /**
   * Checks readiness with Triton's distinctions (unknown ⇒ NOT_FOUND, not ready ⇒ UNAVAILABLE); false
   * for every model once draining, so balancers that probe a model move away too.
   */
  isShuttingDown(): boolean {
    return this.draining;
  }

  async modelReady(name: string, version?: string): Promise<boolean> {
    const mv = this.repository.get(name, version);
    if (mv.state !== 'READY' || this.draining) return false;
    // A loaded model is ready while each of its instances says it can serve (a crashed process cannot).
    try {
      await Promise.all(mv.instances.map((inst) => inst.checkReady?.()));
      return true;
    } catch (err) {
      this.log.warn(`Model '${mv.name}' version ${mv.version} is not ready: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    }
  }

  /**
   * The first step of a shutdown: the server and its models report not ready (live stays true) while
   * every request is still served, so load balancers and Kubernetes endpoints move traffic away
   * before anything is refused. Irreversible; `stop` follows.
   */
  beginDrain(): void {
    this.draining = true;
  }

  /** Admitted requests that have not had their final response (decoupled streams included). */
  inflightRequests(): number {
    return this.inflight;
  }

  /** Sequences begun and not yet ended or reaped, over every loaded model. */
  liveSequences(): number {
    let n = 0;
    for (const name of this.repository.names()) for (const mv of this.repository.readyVersions(name)) n += mv.liveSequences();
    return n;
  }

  modelMetadata(name: string, version?: string): Record<string, unknown> {
    const mv = this.repository.get(name, version);
    const versions = version ? [String(mv.version)] : this.repository.readyVersions(name).map((m) => String(m.version));
    return mv.metadata(versions);
  }

  modelConfig(name: string, version?: string): Record<string, unknown> {
    return modelConfigToJson(this.repository.get(name, version).loadedConfig);
  }

  /** modelConfig as gRPC's ModelConfig carries it: 64-bit values past 2^53 as the digits the file wrote (strings). */
  modelConfigMessage(name: string, version?: string): Record<string, unknown> {
    return modelConfigToProtoObject(this.repository.get(name, version).loadedConfig);
  }

  /** modelConfig as HTTP serves it: JSON text, 64-bit values past 2^53 with the digits the file wrote. */
  modelConfigText(name: string, version?: string): string {
    return configJsonText(this.repository.get(name, version).loadedConfig);
  }

  /**
   * The version a request addresses, loading it first when it is registered for on-demand loading
   * (the request waits); else as `model`.
   */
  async resident(name: string, version?: string): Promise<ModelVersion> {
    if (this.onDemand && !this.stopping && this.residency.needsLoad(name)) await this.residency.ensure(name);
    return this.repository.get(name, version);
  }

  /** One request, one response. Decoupled models are refused here, as on Triton's HTTP infer. */
  infer(request: InferRequest, opts?: InferOptions): Promise<InferResponse> {
    if (this.onDemand && !this.stopping) {
      if (this.residency.needsLoad(request.model_name)) return this.residency.ensure(request.model_name).then(() => this.infer(request, opts));
      this.residency.touch(request.model_name);
    }
    let mv: ModelVersion;
    try {
      mv = this.admit(request);
    } catch (err) {
      return Promise.reject(err);
    }
    if (mv.decoupled) {
      return Promise.reject(new TsiError(
        'UNSUPPORTED',
        opts?.decoupledMessage ?? `ModelInfer RPC doesn't support models with decoupled transaction policy`,
      ));
    }
    return new Promise<InferResponse>((resolve, reject) => {
      this.submitCounted(mv, request, (resp, final) => {
        if (!final) return;
        if (resp instanceof TsiError) reject(resp);
        else resolve(resp);
      }, opts?.onCancel);
    });
  }

  /**
   * Streaming form for any model: every response goes to `onResponse`; the promise resolves after the
   * final one (errors are delivered as responses, never thrown after admission).
   */
  inferStream(request: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void, opts?: InferOptions): Promise<void> {
    if (this.onDemand && !this.stopping) {
      if (this.residency.needsLoad(request.model_name)) {
        return this.residency.ensure(request.model_name).then(() => this.inferStream(request, onResponse, opts));
      }
      this.residency.touch(request.model_name);
    }
    let mv: ModelVersion;
    try {
      mv = this.admit(request);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<void>((resolve) => {
      this.submitCounted(mv, request, (resp, final) => {
        onResponse(resp, final);
        if (final) resolve();
      }, opts?.onCancel);
    });
  }

  /**
   * Submits an admitted request, counted in flight until its final response (or until submit throws,
   * which the caller's promise then rejects with).
   */
  private submitCounted(
    mv: ModelVersion, request: InferRequest, sink: (r: InferResponse | TsiError, final: boolean) => void,
    onCancel?: (cancel: () => void) => void,
  ): void {
    this.inflight++;
    let open = true;
    const settle = () => {
      if (!open) return;
      open = false;
      this.settled();
    };
    try {
      const pending = mv.submit(request, (resp, final) => {
        sink(resp, final);
        if (final) settle();
      });
      if (onCancel && open) onCancel(() => pending.cancel());
    } catch (err) {
      settle();
      throw err;
    }
  }

  private admit(request: InferRequest): ModelVersion {
    if (this.stopping) {
      // A request that may continue a sequence in progress goes on to its batcher, which takes only those.
      if (request.parameters?.sequence_id !== undefined) {
        try {
          const mv = this.repository.get(request.model_name, request.model_version);
          if (mv.liveSequences() > 0) return mv;
        } catch {
          // Unknown or unloading: refused below like any other request.
        }
      }
      throw new TsiError('UNAVAILABLE', 'Server is stopping, scheduler for model has stopped accepting new inference requests');
    }
    return this.repository.get(request.model_name, request.model_version);
  }

  /** One admitted request has its final response (or failed before it was queued). */
  private settled(): void {
    if (--this.inflight === 0 && this.idleWaiters.length > 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** Statistics extension: every READY version of one or all models. */
  statistics(name?: string, version?: string): { model_stats: Record<string, unknown>[] } {
    const out: Record<string, unknown>[] = [];
    const names = name ? [name] : this.repository.names().sort();
    for (const n of names) {
      let versions: ModelVersion[];
      if (name) {
        try {
          versions = [this.repository.get(n, version)];
          if (!version) versions = this.repository.readyVersions(n);
        } catch (err) {
          // A name several repositories hold (--model-namespacing): said as such, not as "not available".
          if (isAmbiguous(err)) throw err;
          throw new TsiError('INVALID_ARG', `requested model '${n}' is not available`);
        }
        if (versions.length === 0) throw new TsiError('INVALID_ARG', `requested model '${n}' is not available`);
      } else versions = this.repository.readyVersions(n);
      for (const mv of versions.sort((a, b) => a.version - b.version)) out.push(mv.stats.toJson(mv.name, String(mv.version)));
    }
    return { model_stats: out };
  }

  repositoryIndex(readyOnly = false): IndexEntry[] {
    const all = this.repository.index();
    return readyOnly ? all.filter((e) => e.state === 'READY') : all;
  }

  private checkControl(): void {
    if (this.options.modelControlMode !== 'explicit') {
      throw new TsiError('UNAVAILABLE', 'explicit model load / unload is not allowed if polling is enabled');
    }
  }

  async loadModel(name: string, overrides?: LoadOverrides): Promise<void> {
    this.checkControl();
    if (this.onDemand && this.repository.readyVersions(name).length === 0) await this.residency.makeRoom(name);
    await this.repository.load(name, overrides);
    this.residency.loaded(name, 'explicit');
  }

  async unloadModel(name: string): Promise<void> {
    this.checkControl();
    // An unknown name is a no-op (as in Triton), not an unload to count.
    const known = this.repository.names().includes(name);
    await this.repository.unload(name);
    if (known) this.residency.unloaded(name, 'explicit');
    // As Triton, the ensembles that run it are unloaded with it rather than left READY with a step gone:
    // each repository's own (--model-namespacing: an ensemble of the same name elsewhere may not run it).
    const gone = [name];
    for (let n = gone.shift(); n !== undefined; n = gone.shift()) {
      for (const part of repositoryParts(this.repository)) {
        for (const dep of part.dependents(n)) {
          if (part.readyVersions(dep).length === 0) continue;
          this.log.info(`unloading '${dep}': it depends on '${n}', which was unloaded`);
          await part.unload(dep);
          this.residency.unloaded(dep, 'explicit');
          gone.push(dep);
        }
      }
    }
  }

  /**
   * Graceful stop: refuse new requests except those continuing a sequence in progress, wait (up to
   * `timeoutMs`) for in-flight requests and for those sequences to end (or be reaped as idle), then
   * unload every model (`onDrained` is called in between). Returns the number of requests still
   * unfinished at the deadline.
   */
  async stop(timeoutMs = 30_000, onDrained?: () => void): Promise<number> {
    if (this.stopping) return 0;
    this.stopping = true;
    // tritonserver's line, which its L0_logging checks appears once per shutdown.
    this.log.info('Waiting for in-flight requests to complete.');
    this.draining = true;
    for (const name of this.repository.names()) for (const mv of this.repository.readyVersions(name)) mv.closeSequences();
    const pending = this.inflight;
    const sequences = this.liveSequences();
    if (pending > 0 || sequences > 0) {
      this.log.info(`waiting for ${pending} in-flight inference request(s) and ${sequences} sequence(s) in progress to finish (up to ${timeoutMs / 1000} s)`);
      let expired = false;
      let wake: (() => void) | undefined;
      const cancel = this.clock.setTimer(() => {
        expired = true;
        wake?.();
      }, timeoutMs);
      // Requests end with an event; sequences end with a request or the idle reaper, so they are polled.
      while (!expired && (this.inflight > 0 || this.liveSequences() > 0)) {
        await new Promise<void>((r) => {
          wake = r;
          if (this.inflight > 0) this.idleWaiters.push(r);
          else this.clock.setTimer(r, 20);
        });
      }
      cancel();
    }
    onDrained?.();
    const left = this.inflight;
    await this.repository.unloadAll().catch((err) => this.log.error(asTsiError(err).message));
    this.live = false;
    return left;
  }
}

export { BackendRegistry };
