/**
 * Ensembles (`platform: "ensemble"`), as Triton's ensemble scheduler runs them: an ensemble has no
 * instances; each request is a dataflow over ensemble tensors in which a step starts as soon as all
 * its inputs exist, as an ordinary request to the composing model through that model's own scheduler
 * (so composing models batch across ensemble requests and count them in their statistics). Outputs
 * are renamed by `output_map` and may start further steps; the response goes out when the requested
 * ensemble outputs exist. Steps that feed no requested output are pruned. Tensors move between steps
 * by reference; one read by several consumers is marked retained so no backend moves it away.
 *
 * A decoupled composing model makes the ensemble decoupled: each of its responses is a new
 * "iteration" of its outputs that flows downstream on its own and ends in its own ensemble response.
 *
 * Loading an ensemble loads its composing models first (through the repository, so they appear in the
 * index), refuses cycles between ensembles, then checks the tensor mapping (ensemble-validate.ts).
 */

import { isCompletionOnly, type Backend, type BackendModel } from './backend.js';
import { ensembleComposingModels, validateEnsemble } from './config/ensemble-validate.js';
import { TsiError, asTsiError } from './errors.js';
import type { ModelConfig } from './config/model-config.js';
import type { ModelVersion } from './repository/model.js';
import type { PendingRequest, SequenceFlags } from './request.js';
import { STOPPING_MESSAGE, type Scheduler, type SchedulerContext } from './scheduling/scheduler.js';
import type { Repository } from './repository/repository.js';
import { isAmbiguous } from './repository/namespaces.js';
import { retainBuffer } from './tensor.js';
import type { InferInput, InferRequest, InferResponse, Parameters, Tensor } from './types.js';

export { ensembleComposingModels, validateEnsemble } from './config/ensemble-validate.js';

/**
 * The dataflow of one ensemble, resolved once at load: ensemble tensors are numbered (ids index the
 * per-request arrays, so a request allocates arrays rather than maps), and the pruning for requests
 * that want every output is precomputed.
 */
interface StepPlan {
  index: number;
  model: string;
  /** undefined: the latest ready version. */
  version?: string;
  /** Composing input names and the ids of the ensemble tensors feeding them, in config order. */
  inputNames: string[];
  inputIds: number[];
  /** Composing output names and the ids of the ensemble tensors they are written to. */
  outputNames: string[];
  outputIds: number[];
  decoupled: boolean;
  /** Whether the composing model batches (max_batch_size > 0), and its config dims per input. */
  batching: boolean;
  inputDims: (readonly number[])[];
}

interface Plan {
  name: string;
  /** The repository the ensemble came from under --model-namespacing: its steps resolve there first. */
  namespace?: string;
  steps: StepPlan[];
  /** Tensor id → ensemble tensor name, and back. */
  tensorNames: string[];
  tensorIds: Map<string, number>;
  /** Tensor id → the steps reading it. */
  consumers: number[][];
  /** Tensor id → the step writing it, -1 for none (an ensemble input). */
  producer: number[];
  /** Tensors read by steps but written by none (the ensemble inputs steps use), in first-read order. */
  sources: number[];
  maxInflight: number;
  decoupled: boolean;
  /** Tensor id → whether its writer (a step, or the ensemble's own request) batches. */
  batched: boolean[];
  /** Tensor id → the ensemble output's config dims (undefined for internal tensors). */
  outputDims: (readonly number[] | undefined)[];
  ensembleBatching: boolean;
  /** The ensemble's outputs in config order (validation's order when a request names none). */
  outputNames: string[];
  /** Pruning for requests that want every output (the usual case), computed once. */
  full: Pruned;
}

interface Pruned {
  active: boolean[];
  /** Tensor id → how many readers it has (active steps, plus 1 when it is a requested output). */
  readers: number[];
  /** Step → the outputs to request from it (those with readers), as the step request lists them. */
  wanted: (readonly { name: string }[])[];
  /** Tensor id → whether it is a requested output. */
  requested: boolean[];
  /** The requested outputs' tensor ids, in the request's order. */
  outputIds: number[];
}

/** Steps needed for `outputs`, walking back from them (Triton prunes the same way). */
function prune(plan: Omit<Plan, 'full'>, outputs: readonly number[]): Pruned {
  const n = plan.tensorNames.length;
  const active = new Array<boolean>(plan.steps.length).fill(false);
  const readers = new Array<number>(n).fill(0);
  const requested = new Array<boolean>(n).fill(false);
  const todo = [...outputs];
  for (const t of todo) {
    readers[t]!++;
    requested[t] = true;
  }
  for (let t = todo.pop(); t !== undefined; t = todo.pop()) {
    const s = plan.producer[t]!;
    if (s < 0 || active[s]) continue;
    active[s] = true;
    for (const input of plan.steps[s]!.inputIds) {
      readers[input]!++;
      todo.push(input);
    }
  }
  const wanted = plan.steps.map((step) =>
    Object.freeze(step.outputNames.filter((_, i) => readers[step.outputIds[i]!]! > 0).map((name) => Object.freeze({ name }))));
  return { active, readers, wanted, requested, outputIds: [...outputs] };
}

function buildPlan(cfg: ModelConfig, stepConfigs: readonly ModelConfig[], decoupled: boolean): Plan {
  const tensorNames: string[] = [];
  const tensorIds = new Map<string, number>();
  const id = (name: string): number => {
    let i = tensorIds.get(name);
    if (i === undefined) {
      tensorIds.set(name, (i = tensorNames.length));
      tensorNames.push(name);
    }
    return i;
  };
  for (const t of cfg.input ?? []) id(t.name!);
  for (const t of cfg.output ?? []) id(t.name!);
  const consumers: number[][] = [];
  const producer: number[] = [];
  const sources: number[] = [];
  const steps = (cfg.ensemble_scheduling?.step ?? []).map((s, index): StepPlan => {
    const inputs = Object.entries(s.input_map ?? {});
    const outputs = Object.entries(s.output_map ?? {});
    const v = s.model_version ?? -1;
    return {
      index, model: s.model_name ?? '', version: v > 0 ? String(v) : undefined,
      inputNames: inputs.map(([i]) => i), inputIds: inputs.map(([, t]) => id(t)),
      outputNames: outputs.map(([o]) => o), outputIds: outputs.map(([, t]) => id(t)),
      decoupled: stepConfigs[index]?.model_transaction_policy?.decoupled === true,
      batching: (stepConfigs[index]?.max_batch_size ?? 0) > 0,
      inputDims: inputs.map(([i]) => stepConfigs[index]?.input?.find((x) => x.name === i)?.dims ?? []),
    };
  });
  for (let t = 0; t < tensorNames.length; t++) {
    consumers.push([]);
    producer.push(-1);
  }
  const read: boolean[] = [];
  for (const step of steps) {
    for (const t of step.inputIds) {
      consumers[t]!.push(step.index);
      if (!read[t]) sources.push(t);
      read[t] = true;
    }
    for (const t of step.outputIds) producer[t] = step.index;
  }
  const outputNames = (cfg.output ?? []).map((o) => o.name!);
  const ensembleBatching = (cfg.max_batch_size ?? 0) > 0;
  const batched = producer.map((p) => (p < 0 ? ensembleBatching : steps[p]!.batching));
  const outputDims = tensorNames.map((n) => cfg.output?.find((o) => o.name === n)?.dims);
  const plan = {
    name: cfg.name ?? '', steps, tensorNames, tensorIds, consumers, producer, decoupled, outputNames, batched, outputDims, ensembleBatching,
    sources: sources.filter((t) => producer[t]! < 0),
    maxInflight: cfg.ensemble_scheduling?.max_inflight_requests ?? 0,
  };
  return { ...plan, full: prune(plan, outputNames.map(id)) };
}

/** Same rank, and every dim equal where neither side is a wildcard (-1). */
function dimsMatch(config: readonly number[], dims: readonly number[]): boolean {
  return config.length === dims.length && config.every((d, i) => d === -1 || dims[i] === -1 || d === dims[i]);
}

/**
 * A tensor's shape for its reader when one side batches and the other does not, as Triton's ensemble
 * scheduler shapes it (ReshapeTensorDims): a non-batched tensor that matches a batching reader's dims
 * gains a batch of 1; a batched tensor of batch 1 that does not fit a non-batching reader as it is loses
 * its batch dimension. `batch` is the writer's batch size, 0 when it does not batch.
 */
function reshapeDims(config: readonly number[], readerBatches: boolean, batch: number, dims: number[]): number[] {
  if (readerBatches === (batch !== 0)) return dims;
  if (readerBatches) return dimsMatch(config, dims) ? [1, ...dims] : dims;
  return !dimsMatch(config, dims) && batch === 1 ? dims.slice(1) : dims;
}

/**
 * What an ensemble needs of the server that runs it: the repository its composing models are loaded
 * from and looked up in. The server passes itself; ensembles never import server.ts, which registers
 * them.
 */
export interface EnsembleHost {
  readonly repository: Pick<Repository, 'ensureLoaded' | 'index'> & {
    /** `near`: the ensemble's namespace, whose model of that name a step prefers (namespaces.ts). */
    get(name: string, version?: string, near?: string): ModelVersion;
  };
}

/** The `ensemble` backend; core registers it on every server. */
export function createEnsembleBackend(server: EnsembleHost): Backend {
  // Ensemble → composing models, for every ensemble loaded or loading, to refuse cycles before
  // waiting on a load that would wait on us.
  const graph = new Map<string, { deps: Set<string>; token: object }>();

  const cycle = (from: string, target: string, seen = new Set<string>()): string | undefined => {
    const deps = graph.get(from)?.deps;
    if (!deps || seen.has(from)) return undefined;
    seen.add(from);
    for (const d of deps) {
      if (d === target) return from;
      const via = cycle(d, target, seen);
      if (via) return via;
    }
    return undefined;
  };

  return {
    name: 'ensemble',
    async loadModel(ctx): Promise<BackendModel> {
      const cfg = ctx.config;
      const name = cfg.name ?? '';
      const composing = ensembleComposingModels(cfg);
      const token = {};
      graph.set(name, { deps: new Set(composing.map((c) => c.name)), token });
      const forget = () => {
        if (graph.get(name)?.token === token) graph.delete(name);
      };
      try {
        const last = cycle(name, name);
        if (last !== undefined) throw new TsiError('INVALID_ARG', `circular dependency between ensembles: ${name} -> ... -> ${last} -> ${name}`);
        await Promise.all([...new Set(composing.map((c) => c.name))].map((m) => server.repository.ensureLoaded(m)));
        const stepConfigs = (cfg.ensemble_scheduling?.step ?? []).map((s) => composingVersion(server, name, s.model_name ?? '', s.model_version ?? -1, ctx.namespace).config);
        const { decoupled } = validateEnsemble(cfg, stepConfigs);
        // Triton sets the ensemble's transaction policy once its steps are checked: decoupled when any
        // step is, and present either way (its config shows `model_transaction_policy {}`).
        cfg.model_transaction_policy = { ...cfg.model_transaction_policy, decoupled };
        const plan: Plan = { ...buildPlan(cfg, stepConfigs, decoupled), namespace: ctx.namespace };
        // Triton's words (its qa greps for them).
        if (plan.maxInflight > 0) ctx.log.info(`Ensemble model '${name}' configured with max_inflight_requests: ${plan.maxInflight}`);
        return {
          createInstance: () => Promise.reject(new TsiError('INTERNAL', `ensemble '${name}' has no instances`)),
          createScheduler: (sctx) => new EnsembleScheduler(sctx, plan, server),
          unload: async () => forget(),
        };
      } catch (err) {
        forget();
        throw err;
      }
    },
  };
}

/** The composing model version a step runs, or Triton's load-time error for the ensemble. */
function composingVersion(server: EnsembleHost, ensemble: string, model: string, version: number, namespace: string | undefined): ModelVersion {
  try {
    return server.repository.get(model, version > 0 ? String(version) : undefined, namespace);
  } catch (err) {
    const rows = server.repository.index().filter((e) => e.name === model && e.state !== undefined);
    if (rows.length === 0 || isAmbiguous(err)) {
      throw new TsiError('INVALID_ARG', `ensemble ${ensemble} contains models that are not available or ambiguous: ${model}`);
    }
    if (rows.some((r) => r.state === 'READY')) {
      throw new TsiError('INVALID_ARG', `ensemble '${ensemble}' depends on '${model}' whose required version ${version} is not loaded.`);
    }
    const reason = rows.map((r) => r.reason).filter(Boolean).join('; ');
    throw new TsiError('INVALID_ARG', `ensemble '${ensemble}' depends on '${model}' which has no loaded version.${reason ? ` Model '${model}' loading failed with error: ${reason}` : ''}`);
  }
}

/** A request outside any sequence, as Triton's ensemble responses describe it (id 0, no flags). */
const NO_SEQUENCE: SequenceFlags = Object.freeze({ id: 0n, start: false, end: false });

/**
 * The sequence a step's response carries on, as Triton's ensemble reads it: `sequence_id` (integer or
 * string), `sequence_start` and `sequence_end` (booleans) in the response's parameters replace the
 * step request's (flags not named are off); without them the step's own. Wrong types: Triton's texts.
 */
function responseSequence(params: Parameters | undefined, step: SequenceFlags): SequenceFlags | TsiError {
  if (!params || (params.sequence_id === undefined && params.sequence_start === undefined && params.sequence_end === undefined)) return step;
  const { sequence_id: id, sequence_start: start, sequence_end: end } = params;
  if (id !== undefined && typeof id !== 'string' && !(typeof id === 'bigint' || Number.isInteger(id))) {
    return new TsiError('INVALID_ARG', "expected parameter 'sequence_id' to be TRITONSERVER_PARAMETER_INT or TRITONSERVER_PARAMETER_STRING");
  }
  for (const [name, v] of [['sequence_start', start], ['sequence_end', end]] as const) {
    if (v !== undefined && typeof v !== 'boolean') return new TsiError('INVALID_ARG', `expect parameter '${name}' to be TRITONSERVER_PARAMETER_BOOL`);
  }
  return { id: id === undefined ? step.id : typeof id === 'number' ? BigInt(id) : (id as bigint | string), start: start === true, end: end === true };
}

/** A sequence id as a response parameter: a number while exact, a string id as it is. */
function sequenceIdParam(id: bigint | string): bigint | number | string {
  return typeof id === 'bigint' && id <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(id) : id;
}

/** Runs each ensemble request as soon as it arrives; no queue of its own (steps queue at their models). */
class EnsembleScheduler implements Scheduler {
  private stopping = false;
  private running = 0;
  private drained?: () => void;
  /** Reused for every statistics record (the stats read it and keep nothing). */
  private readonly times = { input: 0, infer: 0, output: 0 };

  /**
   * `max_inflight_requests`: per step, the step requests running, and the ones waiting for a slot, over
   * every request to this ensemble (Triton's per-step limiter is shared the same way). A decoupled
   * step's responses then wait here instead of piling up at a slower step behind it.
   */
  readonly limits?: { running: number[]; waiting: (() => void)[][] };

  constructor(private readonly ctx: SchedulerContext, private readonly plan: Plan, private readonly server: EnsembleHost) {
    if (plan.maxInflight > 0) {
      this.limits = { running: plan.steps.map(() => 0), waiting: plan.steps.map(() => []) };
    }
  }

  /** Runs `go` when step `s` has a free slot (now, or when one is released). */
  acquire(s: number, go: () => void): void {
    const limits = this.limits!;
    if (limits.running[s]! < this.plan.maxInflight) {
      limits.running[s]!++;
      go();
    } else limits.waiting[s]!.push(go);
  }

  /** A step request of step `s` is over: its slot goes to the next waiting, else is freed. */
  release(s: number): void {
    const limits = this.limits!;
    const next = limits.waiting[s]!.shift();
    if (next) next();
    else limits.running[s]!--;
  }

  get log(): SchedulerContext['log'] {
    return this.ctx.log;
  }

  enqueue(request: PendingRequest): void {
    if (this.stopping) {
      request.send(new TsiError('UNAVAILABLE', STOPPING_MESSAGE), true);
      return;
    }
    request.enqueuedNs = this.ctx.clock.nowNs();
    this.ctx.stats.inflight++;
    this.running++;
    new EnsembleRun(this.plan, this.server, request, this).start();
  }

  /** A run is over: its statistics, and the drain. */
  runDone(request: PendingRequest, failed: boolean): void {
    const { stats, clock } = this.ctx;
    const total = clock.nowNs() - request.receivedNs;
    if (failed) {
      // Triton counts a failed ensemble request twice, both times with reason OTHER: once as its error
      // response goes out (RespondIfError) and once as its tracker lets the request go
      // (ReportStatisticsWithDuration, failed). Its qa (L0_model_queue) expects the two.
      stats.recordFailure(total, 'OTHER', clock.epochMs());
      stats.recordFailure(total, 'OTHER', clock.epochMs());
    } else {
      const times = this.times;
      times.infer = total;
      stats.recordSuccess(total, 0, times, clock.epochMs());
      stats.recordExecution(request.batchSize, times);
    }
    stats.inflight--;
    if (--this.running === 0 && this.stopping) this.drained?.();
  }

  queued(): number {
    return 0;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.running === 0) return;
    await new Promise<void>((r) => (this.drained = r));
  }
}

/**
 * One ensemble request in flight. Tensors live in a flat array indexed iteration × tensors + tensor
 * id (iteration 0 unless a step is decoupled); undefined = not yet produced, null = absent (an
 * optional input left out, or a decoupled stream's tensor every reader is done with). Structures
 * only decoupled or max_inflight plans need are allocated only for them.
 */
class EnsembleRun {
  private readonly tensors: (Tensor | null | undefined)[];
  private readonly pruned: Pruned;
  /** Steps started, as iteration × steps + step. */
  private readonly fired: boolean[];
  /** Readers still to come per iteration × tensors + tensor (decoupled streams only). */
  private left?: number[];
  /** Iterations answered (decoupled streams only; otherwise the first answer ends the run). */
  private emitted?: boolean[];
  /** Next output iteration per decoupled step. */
  private iterations?: number[];
  private readonly params: Parameters;
  /**
   * The request's sequence (Triton's correlation id and flags), which every step request and ensemble
   * response carries; `seqs` holds, per tensor slot, the sequence a tensor carries where a step's
   * response replaced it (then the steps reading that tensor run with it too). Allocated only then.
   */
  private readonly seq: SequenceFlags;
  private seqs?: (SequenceFlags | undefined)[];
  private inflight = 0;
  /** While a step's final answer is being taken in (see maybeRespond). */
  private closing = false;
  private done = false;
  private failed = false;

  constructor(
    private readonly plan: Plan, private readonly server: EnsembleHost, private readonly request: PendingRequest,
    private readonly owner: EnsembleScheduler,
  ) {
    this.tensors = new Array(plan.tensorNames.length);
    this.fired = new Array(plan.steps.length);
    this.pruned = pruneFor(plan, request.requestedOutputs);
    if (plan.decoupled) {
      this.left = [];
      this.emitted = [];
      this.iterations = new Array<number>(plan.steps.length).fill(0);
    }
    const seq = request.sequence;
    this.seq = seq ?? NO_SEQUENCE;
    if (seq || request.priority || request.timeoutUs) {
      const p: Parameters = { ...request.parameters };
      if (seq) {
        p.sequence_id = seq.id;
        p.sequence_start = seq.start;
        p.sequence_end = seq.end;
      }
      if (request.priority) p.priority = request.priority;
      if (request.timeoutUs) p.timeout = request.timeoutUs;
      this.params = p;
    } else {
      // Step requests only read it (validation copies what it keeps).
      this.params = request.parameters;
    }
  }

  start(): void {
    const { tensorIds, sources } = this.plan;
    const inputs = this.request.inputs;
    for (const [name, t] of inputs) {
      const id = tensorIds.get(name);
      if (id !== undefined) this.put(id, 0, t);
    }
    // Optional ensemble inputs the client left out are present as "absent" for the steps reading them.
    for (const id of sources) if (this.tensors[id] === undefined) this.put(id, 0, null);
    // Steps may answer synchronously (validation errors, cache hits): hold one count so the run cannot
    // finish before every ready step has been started. Tensors advance in the order they were put.
    this.inflight++;
    for (const name of inputs.keys()) {
      const id = tensorIds.get(name);
      if (id !== undefined) this.advance(id, 0);
    }
    for (const id of sources) if (!inputs.has(this.plan.tensorNames[id]!)) this.advance(id, 0);
    if (--this.inflight === 0) this.finish();
  }

  private put(id: number, iter: number, t: Tensor | null, seq?: SequenceFlags): void {
    if (t && this.pruned.readers[id]! > 1) retainBuffer(t.data);
    const k = iter * this.plan.tensorNames.length + id;
    this.tensors[k] = t;
    if (seq && seq !== this.seq) (this.seqs ??= [])[k] = seq;
  }

  /** The sequence the tensor in a slot carries. */
  private seqAt(id: number, iter: number): SequenceFlags {
    return this.seqs?.[iter * this.plan.tensorNames.length + id] ?? this.seq;
  }

  private get(id: number, iter: number): Tensor | null | undefined {
    return this.tensors[iter * this.plan.tensorNames.length + id];
  }

  /**
   * One reader is done with a tensor of a decoupled stream; after the last, it is dropped (kept as
   * "present", null), so a long stream does not hold every token's tensors until it ends.
   */
  private release(id: number, iter: number): void {
    const left = this.left;
    if (!left) return;
    const k = iter * this.plan.tensorNames.length + id;
    left[k] = (left[k] ?? (this.pruned.readers[id] || 1)) - 1;
    if (left[k] === 0) this.tensors[k] = null;
  }

  /** A tensor appeared: start the steps it completes, and answer if the outputs are all there. */
  private advance(id: number, iter: number): void {
    const { steps } = this.plan;
    const consumers = this.plan.consumers[id]!;
    for (let c = 0; c < consumers.length; c++) {
      const s = consumers[c]!;
      if (!this.pruned.active[s] || this.done) continue;
      const key = iter * steps.length + s;
      if (this.fired[key] || !this.ready(steps[s]!, iter)) continue;
      this.fired[key] = true;
      if (this.owner.limits) {
        // A step request waiting for a slot counts as in flight, so the run does not end under it.
        this.inflight++;
        this.owner.acquire(s, () => {
          this.inflight--;
          if (!this.done) this.dispatch(s, iter);
          else {
            this.owner.release(s);
            if (this.inflight === 0) this.finish();
          }
        });
      } else this.dispatch(s, iter);
    }
    if (this.pruned.requested[id]) this.maybeRespond(iter);
  }

  /** Whether every input of `step` exists (present or absent) in iteration `iter`. */
  private ready(step: StepPlan, iter: number): boolean {
    const ids = step.inputIds;
    for (let i = 0; i < ids.length; i++) if (this.get(ids[i]!, iter) === undefined) return false;
    return true;
  }

  private dispatch(s: number, iter: number): void {
    const step = this.plan.steps[s]!;
    const inputs: InferInput[] = [];
    const ids = step.inputIds;
    // A step runs in the sequence its first input carries (Triton keeps the first when they differ).
    let seq = this.seq;
    for (let i = 0; i < ids.length && this.seqs && seq === this.seq; i++) seq = this.seqAt(ids[i]!, iter);
    for (let i = 0; i < ids.length; i++) {
      const t = this.get(ids[i]!, iter);
      if (t) {
        const shape = reshapeDims(step.inputDims[i]!, step.batching, this.plan.batched[ids[i]!]! ? t.shape[0] ?? 0 : 0, t.shape);
        inputs.push({ name: step.inputNames[i]!, datatype: t.datatype, shape, data: t.data });
      }
      this.release(ids[i]!, iter);
    }
    const req: InferRequest = {
      model_name: step.model, model_version: step.version, id: this.request.id, inputs,
      parameters: seq === this.seq ? this.params : { ...this.params, sequence_id: seq.id, sequence_start: seq.start, sequence_end: seq.end },
      outputs: this.pruned.wanted[s] as { name: string }[], partialOutputs: true,
    };
    // A traced ensemble request traces each step as its child (Triton's parent_id, nested spans).
    if (this.request.trace) req.trace = this.request.trace.spawn(step.model);
    this.inflight++;
    try {
      this.server.repository.get(step.model, step.version, this.plan.namespace).submit(req, (resp, final) => this.onResponse(s, iter, resp, final, seq));
    } catch (err) {
      this.onResponse(s, iter, asTsiError(err), true, seq);
    }
  }

  private onResponse(s: number, iter: number, resp: InferResponse | TsiError, final: boolean, stepSeq: SequenceFlags): void {
    const step = this.plan.steps[s]!;
    const seq = resp instanceof TsiError ? stepSeq : responseSequence(resp.parameters, stepSeq);
    if (resp instanceof TsiError) this.fail(resp);
    else if (seq instanceof TsiError) this.fail(seq);
    else if (!this.done && !(final && step.decoupled && isCompletionOnly(resp))) {
      const out = step.decoupled ? this.iterations![s]!++ : iter;
      const { outputNames, outputIds } = step;
      const produced = resp.outputs;
      // Which step outputs came back, as a bit set: tensors are put first, then advanced, so a step
      // started by one output already sees its siblings (for more than 31 outputs, an array).
      let found = 0;
      let foundList: boolean[] | undefined;
      for (let i = 0; i < outputNames.length; i++) {
        const name = outputNames[i]!;
        // The last tensor of that name, as a name map would give.
        let t: Tensor | undefined;
        for (let j = produced.length - 1; j >= 0; j--) if (produced[j]!.name === name) { t = produced[j]; break; }
        if (!t) continue;
        const id = outputIds[i]!;
        this.put(id, out, { name: this.plan.tensorNames[id]!, datatype: t.datatype, shape: t.shape, data: t.data }, seq);
        if (i < 31) found |= 1 << i;
        else (foundList ??= [])[i] = true;
      }
      // A mapped output the response left out is absent, as Triton's ensemble takes it: a step reading
      // it runs without that input (the step's own validation refuses it unless the input is
      // optional there), and an ensemble output it is goes unanswered in the response.
      for (let i = 0; i < outputIds.length; i++) {
        if (!(i < 31 ? found & (1 << i) : foundList?.[i]) && this.pruned.readers[outputIds[i]!]! > 0) this.put(outputIds[i]!, out, null, seq);
      }
      this.closing = final;
      for (let i = 0; i < outputIds.length; i++) {
        if (this.pruned.readers[outputIds[i]!]! > 0) this.advance(outputIds[i]!, out);
      }
      this.closing = false;
    }
    if (!final) return;
    this.inflight--;
    if (this.owner.limits) this.owner.release(s);
    if (this.inflight === 0) this.finish();
  }

  private maybeRespond(iter: number): void {
    if (this.done || this.emitted?.[iter]) return;
    const ids = this.pruned.outputIds;
    const outputs: Tensor[] = [];
    let left: string[] | undefined;
    let seq: SequenceFlags | undefined;
    for (let i = 0; i < ids.length; i++) {
      const t = this.get(ids[i]!, iter);
      if (t === undefined) return;
      if (t === null) {
        (left ??= []).push(this.plan.tensorNames[ids[i]!]!);
        continue;
      }
      seq = this.seqAt(ids[i]!, iter);
      const { batched, outputDims, ensembleBatching } = this.plan;
      const shape = reshapeDims(outputDims[ids[i]!] ?? t.shape, ensembleBatching, batched[ids[i]!]! ? t.shape[0] ?? 0 : 0, t.shape);
      outputs.push(shape === t.shape ? t : { ...t, shape });
    }
    // Triton's words for an ensemble output no step produced (its qa greps for them).
    if (left) for (const name of left) this.owner.log.verbose(1, `Composing models did not output tensor ${name}`);
    // Every ensemble response says which sequence its outputs belong to, as Triton's does (id 0 and
    // both flags off outside a sequence); from the last output, where steps answered differently.
    const parameters: Parameters | undefined = seq && { sequence_id: sequenceIdParam(seq.id), sequence_start: seq.start, sequence_end: seq.end };
    if (this.emitted) {
      this.emitted[iter] = true;
      for (let i = 0; i < ids.length; i++) this.release(ids[i]!, iter);
      // Made by the final answer of the only step request left: nothing can follow, so this response
      // carries the final flag, as Triton's ensemble sends it (a gRPC client that did not ask for
      // empty final responses would otherwise never see the end of the stream).
      const last = this.closing && this.inflight === 1;
      if (last) this.done = true;
      this.request.send({ outputs, parameters }, last);
      if (last) this.owner.runDone(this.request, false);
    } else {
      this.done = true;
      this.request.send({ outputs, parameters }, true);
      this.owner.runDone(this.request, false);
    }
  }

  /** Every step has answered: close a decoupled stream, or report outputs that never came. */
  private finish(): void {
    if (this.done) {
      if (this.failed) this.owner.runDone(this.request, true);
      return;
    }
    this.done = true;
    if (this.plan.decoupled) {
      this.request.send({ outputs: [] }, true);
      this.owner.runDone(this.request, false);
      return;
    }
    const missing = this.pruned.outputIds.filter((id) => this.get(id, 0) === undefined).map((id) => this.plan.tensorNames[id]!);
    this.request.send(new TsiError('INTERNAL', `in ensemble '${this.plan.name}', output(s) ${missing.map((m) => `'${m}'`).join(', ')} were not produced`), true);
    this.owner.runDone(this.request, true);
  }

  private fail(err: TsiError): void {
    if (this.done) return;
    this.done = true;
    this.failed = true;
    // Statistics (and a drain) wait in `finish` for the steps still running. Triton's text: the
    // ensemble's name, then the step's own message unchanged (clients match on what follows the comma;
    // the step's messages name their model).
    this.request.send(new TsiError(err.code, `in ensemble '${this.plan.name}', ${err.message}`, { cause: err }), true);
  }
}

/**
 * The pruning for a request's outputs. Requested outputs are validated and distinct: as many as the
 * ensemble has means all of them, and the precomputed pruning serves unless they come in another order.
 */
function pruneFor(plan: Plan, requested: readonly string[]): Pruned {
  const all = plan.outputNames;
  if (requested.length !== all.length) return prune(plan, requested.map((n) => plan.tensorIds.get(n)!));
  let i = 0;
  while (i < all.length && requested[i] === all[i]) i++;
  if (i === all.length) return plan.full;
  return { ...plan.full, outputIds: requested.map((n) => plan.tensorIds.get(n)!) };
}
