/**
 * One loaded model version: its normalised config, backend model, instances, scheduler, statistics and
 * labels, plus the request path through it (validate → schedule → shape the response: requested-output
 * subset and classification). Loading follows Triton's order — backend model, then every instance of
 * every instance_group, then the scheduler — and unloading drains the scheduler before freeing.
 */

import type { Backend, BackendInstance, BackendModel, InProcessServer, InstanceSpec, ModelFiles, ResponsePayload } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import { PendingRequest, validateRequest } from '../request.js';
import { sequenceInternalInputs } from '../scheduling/sequence.js';
import type { Scheduler, SchedulerDelay } from '../scheduling/scheduler.js';
import { createScheduler } from '../scheduling/schedulers.js';
import { ModelStats } from '../stats.js';
import { decodeString, encodeString } from '../tensor.js';
import type { Clock, InferRequest, InferResponse, Logger, NumericArray, OutputTensor, Tensor } from '../types.js';
import { configTypeToDatatype } from '../config/pipeline.js';
import { withChosenAccelerators } from '../config/accelerators.js';
import { tracedInstance } from '../trace.js';
import { warmUpInstance, warmupSamples } from './warmup.js';
import { instanceSpecs, planInstanceUpdate } from './instance-update.js';
import type { ResponseCache } from '../cache.js';
import type { MetricsRegistry } from '../metrics.js';
import type { ModelRateLimit, RateLimiter } from '../scheduling/rate-limiter.js';

/** The most elements one batch entry of an output may have for classification (Triton's bound). */
const MAX_CLASSIFICATION_ELEMENTS = 1_000_000;

export type ModelState = 'UNKNOWN' | 'LOADING' | 'READY' | 'UNAVAILABLE' | 'UNLOADING';

export interface LoadOptions {
  name: string;
  version: number;
  config: ModelConfig;
  backend: Backend;
  files: ModelFiles;
  clock: Clock;
  log: Logger;
  server: InProcessServer;
  /** The server's response cache, used when the config enables `response_cache`. */
  cache?: ResponseCache;
  metrics?: MetricsRegistry;
  /** The server's rate limiter; the version's instances register with it while it is loaded. */
  rateLimiter?: RateLimiter;
  schedulerDelay?: SchedulerDelay;
  /** The repository it was loaded from, under `--model-namespacing` (see RepositoryOptions.namespace). */
  namespace?: string;
  /** The model's files but its config, as they were read for this load (instance-update.ts compares it). */
  filesFingerprint?: string;
}

export class ModelVersion {
  readonly name: string;
  readonly version: number;
  /** The repository it came from, under `--model-namespacing` (its metrics carry it as Triton's `namespace` label). */
  readonly namespace?: string;
  private readonly versionString: string;
  /** Replaced only by an in-place instance update, which changes nothing but `instance_group`. */
  config: ModelConfig;
  readonly filesFingerprint?: string;
  readonly stats = new ModelStats();
  readonly labels = new Map<string, string[]>();
  /** Fixed once loaded (an ensemble learns it from its steps while loading). */
  decoupled: boolean;
  state: ModelState = 'LOADING';
  reason = '';
  instances: BackendInstance[] = [];
  /** The config with each instance_group as its instances were really placed (see `configAsLoaded`). */
  loadedConfig: ModelConfig;
  /** For each instance, the index of the instance_group it belongs to. */
  private groupOf: number[] = [];
  private backendModel?: BackendModel;
  private scheduler?: Scheduler;
  private rateLimit?: ModelRateLimit;
  /** Instances an update removed that still finish their work, and their finalizations under way. */
  private readonly retiring = new Set<BackendInstance>();
  private readonly finalizing = new Set<Promise<void>>();
  private readonly files: ModelFiles;
  private readonly clock: Clock;
  private readonly log: Logger;
  private cache?: ResponseCache;
  /** Sequence control and implicit-state inputs: the scheduler supplies them, clients must not. */
  private readonly internalInputs: ReadonlySet<string>;

  private constructor(opts: LoadOptions) {
    this.name = opts.name;
    this.version = opts.version;
    this.namespace = opts.namespace;
    this.versionString = String(opts.version);
    this.config = opts.config;
    this.loadedConfig = opts.config;
    this.filesFingerprint = opts.filesFingerprint;
    this.files = opts.files;
    this.clock = opts.clock;
    this.log = opts.log;
    this.decoupled = opts.config.model_transaction_policy?.decoupled === true;
    this.internalInputs = sequenceInternalInputs(opts.config);
  }

  /** Loads a version; on failure every part already created is freed and the error is thrown. */
  static async load(opts: LoadOptions): Promise<ModelVersion> {
    const mv = new ModelVersion(opts);
    const t0 = opts.clock.nowNs();
    try {
      for (const out of opts.config.output ?? []) {
        if (out.label_filename) {
          const text = decodeString(await opts.files.read(out.label_filename));
          mv.labels.set(out.name!, text.split(/\r?\n/).filter((l, i, a) => l.length > 0 || i < a.length - 1));
        }
      }
      mv.backendModel = await opts.backend.loadModel({
        config: opts.config, version: opts.version, files: opts.files, log: opts.log, server: opts.server,
        metrics: opts.metrics, namespace: opts.namespace,
      });
      mv.decoupled = opts.config.model_transaction_policy?.decoupled === true;
      if (opts.config.response_cache?.enable) {
        if (opts.cache) mv.cache = opts.cache;
        else opts.log.warn(`model '${mv.name}' enables response_cache but the server has no cache (start it with --cache-config local,size=<bytes>); responses are not cached`);
      }
      // Bad warmup settings fail the load before any instance starts.
      const samples = await warmupSamples(opts.config, opts.files, opts.log);
      const placed = instanceSpecs(opts.config, mv.name);
      mv.groupOf = placed.map((p) => p.group);
      mv.instances = await mv.createInstances(placed.map((p) => p.spec));
      if (samples.length > 0) {
        const t1 = opts.clock.nowNs();
        await Promise.all(mv.instances.filter((inst) => !inst.spec.passive).map((inst) => warmUpInstance(opts.config, inst, samples, opts.log)));
        opts.log.info(`model '${mv.name}' version ${mv.version}: ${samples.length} warmup sample(s) ran on ${mv.instances.length} instance(s) in ${((opts.clock.nowNs() - t1) / 1e6).toFixed(0)} ms`);
      }
      const groups = opts.config.instance_group ?? [];
      // Passive instances are loaded but take no requests: neither the scheduler nor the rate limiter sees them.
      const active = mv.instances.filter((inst) => !inst.spec.passive);
      const activeGroups = mv.instances.flatMap((inst, i) => (inst.spec.passive ? [] : [groups[mv.groupOf[i] ?? -1]]));
      mv.rateLimit = opts.rateLimiter?.register(mv.name, mv.version, active, activeGroups);
      const gate = mv.rateLimit;
      if (gate) mv.stats.sections.set('rate_limiter', () => gate.toJson());
      const sctx = {
        modelName: mv.name, version: mv.version, config: opts.config, instances: active, stats: mv.stats,
        clock: opts.clock, log: opts.log, decoupled: mv.decoupled, rateLimit: mv.rateLimit, delay: opts.schedulerDelay,
      };
      mv.scheduler = mv.backendModel.createScheduler?.(sctx) ?? createScheduler(sctx);
      mv.loadedConfig = mv.configAsLoaded();
      mv.stats.loadDurationSecs = (opts.clock.nowNs() - t0) / 1e9;
      mv.state = 'READY';
      return mv;
    } catch (err) {
      await mv.freeParts();
      throw err;
    }
  }

  /**
   * Creates the instances in spec order; all at once where the backend allows it (as Triton's
   * backends that declare parallel instance loading: a model of N instances with a slow initialize
   * loads in about the time of one). Every instance created is kept in `instances`, so a failure
   * frees them all; the first failure is thrown once every creation is over.
   */
  private async createInstances(specs: readonly InstanceSpec[]): Promise<BackendInstance[]> {
    const created: BackendInstance[] = [];
    const create = async (spec: InstanceSpec) => tracedInstance(await this.backendModel!.createInstance(spec), this.clock);
    try {
      if (!this.backendModel!.parallelInstances || specs.length < 2) {
        for (const spec of specs) created.push(await create(spec));
        return created;
      }
      const settled = await Promise.allSettled(specs.map(create));
      for (const r of settled) if (r.status === 'fulfilled') created.push(r.value);
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
      return created;
    } catch (err) {
      await this.unloadInstances(created);
      throw err;
    }
  }

  /** Whether `updateInstances` can change this version's instances (its scheduler can take them in and out). */
  canUpdateInstances(): boolean {
    return this.state === 'READY' && this.backendModel !== undefined && this.scheduler?.addInstances !== undefined && this.scheduler.retireInstance !== undefined
      && !this.instances.some((inst) => inst.spec.passive);
  }

  /**
   * Changes the instances in place to what `config` asks for (it differs from the loaded config in
   * `instance_group` only; see instance-update.ts). The new instances are created and warmed up while
   * the others serve, then join the scheduler; the removed ones leave it at once and are finalized
   * when their work is over: awaited here, except for instances kept on for the sequences bound to them.
   * On a failure nothing has changed and the error is thrown.
   */
  async updateInstances(config: ModelConfig): Promise<void> {
    const before = this.instances.length;
    const oldGroups = this.config.instance_group ?? [];
    const plan = planInstanceUpdate(
      this.instances.map((instance, i) => ({ instance, group: oldGroups[this.groupOf[i] ?? -1] })), config, this.name,
      new Set([...this.retiring].map((i) => i.spec.name)),
    );
    const groups = config.instance_group ?? [];
    const samples = plan.add.length > 0 ? await warmupSamples(config, this.files, this.log) : [];
    const added = await this.createInstances(plan.add.map((p) => p.spec));
    try {
      if (samples.length > 0) await Promise.all(added.map((inst) => warmUpInstance(config, inst, samples, this.log)));
      this.rateLimit?.add(added, plan.add.map((p) => groups[p.group]));
    } catch (err) {
      await this.unloadInstances(added);
      throw err;
    }
    this.scheduler!.addInstances!(added);
    this.instances = [...plan.keep.map((k) => k.instance), ...added];
    this.groupOf = [...plan.keep.map((k) => k.group), ...plan.add.map((p) => p.group)];
    this.config = config;
    this.loadedConfig = this.configAsLoaded();
    const waits: Promise<void>[] = [];
    let lingering = 0;
    for (const inst of plan.remove) {
      const { done, lingers } = this.scheduler!.retireInstance!(inst);
      this.retiring.add(inst);
      const finished = done.then(() => this.finalizeRetired(inst));
      if (lingers) lingering++;
      else waits.push(finished);
    }
    this.log.info(`model '${this.name}' version ${this.version}: instances ${before} -> ${this.instances.length}, ${added.length} added, ${plan.keep.length} kept, ${plan.remove.length} removed${lingering > 0 ? ` (${lingering} of them once the sequences they hold end)` : ''}`);
    await Promise.all(waits);
  }

  /** Finalizes an instance an update removed, once it runs nothing (unless the version's unload got to it first). */
  private finalizeRetired(inst: BackendInstance): Promise<void> {
    if (!this.retiring.delete(inst)) return Promise.resolve();
    this.rateLimit?.remove(inst);
    const p = this.unloadInstances([inst]).then(() => {
      this.finalizing.delete(p);
      this.log.verbose(1, `model '${this.name}' version ${this.version}: removed instance ${inst.spec.name} finalized`);
    });
    this.finalizing.add(p);
    return p;
  }

  private async unloadInstances(list: readonly BackendInstance[]): Promise<void> {
    for (const inst of list) {
      try {
        await inst.unload();
      } catch (err) {
        this.log.warn(`model '${this.name}' version ${this.version}: instance ${inst.spec.name} failed to unload: ${String(err)}`);
      }
    }
  }

  /**
   * The config with every instance_group as it was really placed: a KIND_GPU group whose instances
   * all fell back to the CPU (no usable GPU here) reads KIND_CPU, without GPU ids, as what a client
   * asking for the config should plan with. Groups placed as asked are unchanged. A config that named
   * no gpu_execution_accelerator gets the provider(s) its GPU instances run on.
   */
  private configAsLoaded(): ModelConfig {
    // The GPU providers used, named in Triton's field when the config chose none (accelerators.ts).
    const used = [...new Set(this.instances.flatMap((i) => (i.placement?.kind === 'KIND_GPU' ? [i.placement.provider] : [])))];
    const config = withChosenAccelerators(this.config, used);
    const groups = config.instance_group;
    if (!groups || groups.length === 0) return config;
    let changed = false;
    const out = groups.map((group, g) => {
      if (group.kind !== 'KIND_GPU') return group;
      const placed = this.instances.filter((_, i) => this.groupOf[i] === g);
      if (placed.length === 0 || !placed.every((inst) => inst.placement?.kind === 'KIND_CPU')) return group;
      changed = true;
      const { gpus: _gpus, ...rest } = group;
      return { ...rest, kind: 'KIND_CPU' as const };
    });
    return changed ? { ...config, instance_group: out } : config;
  }

  /** Devices the instances run on, e.g. `cpu` or `cuda:0`, for the start-up table and doctor. */
  devices(): string[] {
    return [...new Set(this.instances.map((i) => i.device))];
  }

  /**
   * Runs one request. `onResponse` gets every response (decoupled models may send many); the promise
   * settles after the final one. Validation errors are thrown before anything is queued.
   */
  submit(req: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void): PendingRequest {
    if (this.state !== 'READY' || !this.scheduler) {
      const err = new TsiError('UNAVAILABLE', `Request for unknown model: '${this.name}' version ${this.version} is not at ready state`);
      req.trace?.requestEnd(err.message);
      throw err;
    }
    // Classification is rare: the map exists only for requests that ask for it.
    let classification: Map<string, number> | undefined;
    const outs = req.outputs;
    if (outs !== undefined) {
      for (let i = 0; i < outs.length; i++) {
        const o = outs[i]!;
        const c = o.parameters?.classification;
        if (typeof c === 'number') (classification ??= new Map()).set(o.name, c);
      }
    }
    const trace = req.trace;
    if (trace) {
      // The response callback is wrapped only for traced requests: REQUEST_END, and the error if any.
      const inner = onResponse;
      const backendOutputs = trace.withTensors && this.config.platform !== 'ensemble';
      onResponse = (r, final) => {
        if (backendOutputs && !(r instanceof TsiError)) for (const o of r.outputs) trace.tensor?.('TENSOR_BACKEND_OUTPUT', o);
        if (final) trace.requestEnd(r instanceof TsiError ? r.message : undefined);
        inner(r, final);
      };
    }
    const pending = this.validate(req, onResponse, classification);
    const now = this.clock.nowNs();
    pending.receivedNs = now;
    if (trace) {
      pending.trace = trace;
      trace.mark('REQUEST_START', now);
      trace.mark('QUEUE_START', now);
      if (trace.withTensors) for (const t of pending.inputs.values()) trace.tensor?.('TENSOR_QUEUE_INPUT', t);
    }
    pending.generation = req.generation;
    // The cache's key is the request's tensors and parameters: parsed generation parameters are neither.
    if (this.cache && !req.generation) {
      if (this.cache.serve(this.name, this.version, pending, this.stats, this.clock)) return pending;
      // The lookup took time (it hashes the inputs): the queue start is a reading of its own.
      this.scheduler.enqueue(pending);
    } else {
      // Validated just now: receipt and queue start are the same instant.
      this.scheduler.enqueue(pending, now);
    }
    return pending;
  }

  private validate(req: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void, classification: Map<string, number> | undefined): PendingRequest {
    const trace = req.trace;
    if (!trace) return this.validated(req, onResponse, classification);
    trace.version = this.version;
    if (req.id) trace.requestId = req.id;
    try {
      return this.validated(req, onResponse, classification);
    } catch (err) {
      // Refused before it was queued: no response will come, so the trace ends here.
      trace.requestEnd(err instanceof Error ? err.message : String(err));
      throw err;
    }
  }

  private validated(req: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void, classification: Map<string, number> | undefined): PendingRequest {
    // A model that is not decoupled answers once. A backend may still send that answer and then the
    // final flag on its own (Triton's repeat backend under `decoupled: false`): the answer is held until
    // the flag completes it; a second answer is an error, in Triton's words.
    let held: ResponsePayload | undefined;
    let answers = 0;
    const pending = validateRequest(req, {
      modelName: this.name,
      config: this.config,
      internalInputs: this.internalInputs,
      sink: (resp, final) => {
        if (!this.decoupled && !(resp instanceof TsiError)) {
          const bare = final && resp.outputs.length === 0 && answers > 0;
          if (!bare) answers++;
          if (answers > 1 && req.firstAnswerOnly && held) {
            // A gRPC stream writes a non-decoupled model's first answer and drops the others, as
            // Triton's stream handler does; the last one's final flag completes the first.
            if (!final) return;
            this.log.verbose(1, `model '${this.name}' is not decoupled but sent ${answers} responses to one request on a gRPC stream: the first was sent, the others dropped`);
            resp = held;
          } else if (answers > 1) {
            held = undefined;
            if (final) onResponse(new TsiError('INTERNAL', `expected a single response, got ${answers}`), true);
            return;
          }
          if (!final) {
            held = resp;
            return;
          }
          if (bare) resp = held!;
        }
        if (resp instanceof TsiError) onResponse(resp, final);
        else {
          try {
            onResponse(this.shapeResponse(req, pending, resp, classification), final);
          } catch (err) {
            onResponse(err instanceof TsiError ? err : new TsiError('INTERNAL', String(err)), final);
          }
        }
      },
    });
    return pending;
  }

  private shapeResponse(req: InferRequest, pending: PendingRequest, resp: ResponsePayload, classification: Map<string, number> | undefined): InferResponse {
    const produced = resp.outputs;
    const names = pending.requestedOutputs;
    // Few outputs (the common case): a backwards scan finds the same tensor a name map would (the
    // last one of that name) without building the map.
    const byName = produced.length > 8 ? new Map(produced.map((t) => [t.name, t] as const)) : undefined;
    const outputs: OutputTensor[] = [];
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      let t: Tensor | undefined;
      if (byName) t = byName.get(name);
      else for (let j = produced.length - 1; j >= 0; j--) if (produced[j]!.name === name) { t = produced[j]; break; }
      if (!t) {
        // Decoupled models may legitimately send partial responses; an ensemble takes a step's missing
        // output as absent, and leaves an output no step produced out of its own response (Triton's
        // ensemble scheduler); otherwise a model must produce every output it was asked for.
        if (this.decoupled || req.partialOutputs || this.config.platform === 'ensemble') continue;
        throw new TsiError('INTERNAL', `model '${this.name}' did not produce requested output '${name}'`);
      }
      const k = classification?.get(name);
      outputs.push(k === undefined ? { name, datatype: t.datatype, shape: t.shape, data: t.data } : this.classify(t, k));
    }
    const out: InferResponse = { model_name: this.name, model_version: this.versionString, outputs };
    if (req.id) out.id = req.id;
    if (resp.parameters && hasKeys(resp.parameters)) out.parameters = resp.parameters;
    return out;
  }

  /** Triton's classification extension: top-k "value:index[:label]" strings per batch row. */
  private classify(t: Tensor, k: number): OutputTensor {
    // Triton's texts (its frontend's classification.cc), then the output's name.
    if (t.datatype === 'BYTES' || t.datatype === 'FP16' || t.datatype === 'BF16' || t.datatype === 'BOOL') {
      throw new TsiError('INVALID_ARG', `class result not available for output due to unsupported type '${t.datatype}' (output '${t.name}' of model '${this.name}')`);
    }
    const batching = (this.config.max_batch_size ?? 0) > 0;
    const rows = batching ? (t.shape[0] ?? 1) : 1;
    const data = t.data as NumericArray;
    const classes = rows > 0 ? data.length / rows : 0;
    // Sorting every class of a row costs its length: Triton bounds it.
    if (classes > MAX_CLASSIFICATION_ELEMENTS) {
      throw new TsiError('INVALID_ARG',
        `classification output tensor too large (output '${t.name}' of model '${this.name}' has ${classes} elements per batch entry, at most ${MAX_CLASSIFICATION_ELEMENTS} can be classified)`);
    }
    const labels = this.labels.get(t.name);
    const isFloat = t.datatype === 'FP32' || t.datatype === 'FP64';
    const kk = Math.min(k, classes);
    const out: Uint8Array[] = [];
    for (let r = 0; r < rows; r++) {
      const idx = Array.from({ length: classes }, (_, i) => i);
      const val = (i: number) => Number(data[r * classes + i]);
      idx.sort((a, b) => val(b) - val(a) || a - b);
      for (let j = 0; j < kk; j++) {
        const i = idx[j]!;
        const v = isFloat ? val(i).toFixed(6) : String(data[r * classes + i]);
        const label = labels?.[i];
        out.push(encodeString(label ? `${v}:${i}:${label}` : `${v}:${i}`));
      }
    }
    return { name: t.name, datatype: 'BYTES', shape: batching ? [rows, kk] : [kk], data: out };
  }

  /** Model metadata as the v2 protocol serves it. */
  metadata(versions: string[]): Record<string, unknown> {
    const c = this.config;
    const batch = (c.max_batch_size ?? 0) > 0;
    const io = (t: { name?: string; data_type?: string; dims?: number[] }) => ({
      name: t.name,
      datatype: configTypeToDatatype(t.data_type as never),
      shape: batch ? [-1, ...(t.dims ?? [])] : [...(t.dims ?? [])],
    });
    return {
      name: this.name,
      versions,
      platform: c.platform || c.backend || '',
      inputs: (c.input ?? []).map(io),
      outputs: (c.output ?? []).map(io),
    };
  }

  get inflight(): number {
    return this.stats.inflight;
  }

  /** Sequences in progress (sequence batching only). */
  liveSequences(): number {
    return this.scheduler?.liveSequences?.() ?? 0;
  }

  /** A stopping server: only requests continuing a sequence in progress are taken from now on. */
  closeSequences(): void {
    this.scheduler?.closeSequences?.();
  }

  /** Stops accepting, drains queued and executing requests, frees instances and the backend model. */
  async unload(): Promise<void> {
    this.state = 'UNLOADING';
    await this.scheduler?.stop();
    await this.freeParts();
    this.state = 'UNAVAILABLE';
    this.reason = 'unloaded';
  }

  private async freeParts(): Promise<void> {
    this.rateLimit?.unregister();
    this.rateLimit = undefined;
    const retiring = [...this.retiring];
    this.retiring.clear();
    await this.unloadInstances([...this.instances, ...retiring]);
    await Promise.all(this.finalizing);
    this.instances = [];
    try {
      await this.backendModel?.unload();
    } catch (err) {
      this.log.warn(`model '${this.name}' version ${this.version}: failed to unload: ${String(err)}`);
    }
    this.backendModel = undefined;
  }
}

/** `Object.keys(o).length > 0` without building the array. */
function hasKeys(o: object): boolean {
  for (const k in o) if (Object.hasOwn(o, k)) return true;
  return false;
}
