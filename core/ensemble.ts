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
import { ensembleComposingModels, validateEnsemble } from './ensemble-validate.js';
import { TsiError, asTsiError } from './errors.js';
import type { ModelConfig } from './model-config.js';
import type { ModelVersion } from './model.js';
import type { PendingRequest } from './request.js';
import { STOPPING_MESSAGE, type Scheduler, type SchedulerContext } from './scheduler.js';
import type { InferenceServer } from './server.js';
import { retainBuffer } from './tensor.js';
import type { InferInput, InferResponse, Parameters, Tensor } from './types.js';

export { ensembleComposingModels, validateEnsemble } from './ensemble-validate.js';

interface StepPlan {
  index: number;
  model: string;
  /** undefined: the latest ready version. */
  version?: string;
  /** [composing input, ensemble tensor] */
  inputs: [string, string][];
  /** [composing output, ensemble tensor] */
  outputs: [string, string][];
  decoupled: boolean;
}

interface Plan {
  name: string;
  steps: StepPlan[];
  /** Ensemble tensor → the steps reading it. */
  consumers: Map<string, number[]>;
  /** Ensemble tensor → the step writing it. */
  producer: Map<string, number>;
  maxInflight: number;
  decoupled: boolean;
  outputCount: number;
  /** Pruning for requests that want every output (the usual case), computed once. */
  full?: Pruned;
}

interface Pruned {
  active: boolean[];
  /** How many readers each needed tensor has (active steps, plus 1 when it is a requested output). */
  readers: Map<string, number>;
}

/** Steps needed for `outputs`, walking back from them (Triton prunes the same way). */
function prune(plan: Plan, outputs: readonly string[]): Pruned {
  const active = new Array<boolean>(plan.steps.length).fill(false);
  const readers = new Map<string, number>();
  const todo = [...outputs];
  for (const t of todo) readers.set(t, (readers.get(t) ?? 0) + 1);
  for (let t = todo.pop(); t !== undefined; t = todo.pop()) {
    const s = plan.producer.get(t);
    if (s === undefined || active[s]) continue;
    active[s] = true;
    for (const [, input] of plan.steps[s]!.inputs) {
      readers.set(input, (readers.get(input) ?? 0) + 1);
      todo.push(input);
    }
  }
  return { active, readers };
}

function buildPlan(cfg: ModelConfig, stepConfigs: readonly ModelConfig[], decoupled: boolean): Plan {
  const consumers = new Map<string, number[]>();
  const producer = new Map<string, number>();
  const steps = (cfg.ensemble_scheduling?.step ?? []).map((s, index): StepPlan => {
    const inputs = Object.entries(s.input_map ?? {});
    const outputs = Object.entries(s.output_map ?? {});
    for (const [, t] of inputs) consumers.set(t, [...(consumers.get(t) ?? []), index]);
    for (const [, t] of outputs) producer.set(t, index);
    const v = s.model_version ?? -1;
    return {
      index, model: s.model_name ?? '', version: v > 0 ? String(v) : undefined, inputs, outputs,
      decoupled: stepConfigs[index]?.model_transaction_policy?.decoupled === true,
    };
  });
  const plan: Plan = {
    name: cfg.name ?? '', steps, consumers, producer, decoupled, outputCount: (cfg.output ?? []).length,
    maxInflight: cfg.ensemble_scheduling?.max_inflight_requests ?? 0,
  };
  plan.full = prune(plan, (cfg.output ?? []).map((o) => o.name!));
  return plan;
}

/** The `ensemble` backend; core registers it on every server. */
export function createEnsembleBackend(server: InferenceServer): Backend {
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
        const stepConfigs = (cfg.ensemble_scheduling?.step ?? []).map((s) => composingVersion(server, name, s.model_name ?? '', s.model_version ?? -1).config);
        const { decoupled } = validateEnsemble(cfg, stepConfigs);
        // Triton marks the ensemble itself decoupled (visible in its config) when any step is.
        if (decoupled) cfg.model_transaction_policy = { ...cfg.model_transaction_policy, decoupled: true };
        const plan = buildPlan(cfg, stepConfigs, decoupled);
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
function composingVersion(server: InferenceServer, ensemble: string, model: string, version: number): ModelVersion {
  try {
    return server.repository.get(model, version > 0 ? String(version) : undefined);
  } catch {
    const rows = server.repository.index().filter((e) => e.name === model && e.state !== undefined);
    if (rows.length === 0) {
      throw new TsiError('INVALID_ARG', `ensemble ${ensemble} contains models that are not available or ambiguous: ${model}`);
    }
    if (rows.some((r) => r.state === 'READY')) {
      throw new TsiError('INVALID_ARG', `ensemble '${ensemble}' depends on '${model}' whose required version ${version} is not loaded.`);
    }
    const reason = rows.map((r) => r.reason).filter(Boolean).join('; ');
    throw new TsiError('INVALID_ARG', `ensemble '${ensemble}' depends on '${model}' which has no loaded version.${reason ? ` Model '${model}' loading failed with error: ${reason}` : ''}`);
  }
}

/** Runs each ensemble request as soon as it arrives; no queue of its own (steps queue at their models). */
class EnsembleScheduler implements Scheduler {
  private stopping = false;
  private readonly running = new Set<EnsembleRun>();
  private drained?: () => void;

  constructor(private readonly ctx: SchedulerContext, private readonly plan: Plan, private readonly server: InferenceServer) {}

  enqueue(request: PendingRequest): void {
    if (this.stopping) {
      request.send(new TsiError('UNAVAILABLE', STOPPING_MESSAGE), true);
      return;
    }
    const { stats, clock } = this.ctx;
    request.enqueuedNs = clock.nowNs();
    stats.inflight++;
    const run = new EnsembleRun(this.plan, this.server, request, (failed) => {
      this.running.delete(run);
      const total = clock.nowNs() - request.receivedNs;
      if (failed) stats.recordFailure(total, 'OTHER', clock.epochMs());
      else {
        const times = { input: 0, infer: total, output: 0 };
        stats.recordSuccess(total, 0, times, clock.epochMs());
        stats.recordExecution(request.batchSize, times);
      }
      stats.inflight--;
      if (this.stopping && this.running.size === 0) this.drained?.();
    });
    this.running.add(run);
    run.start();
  }

  queued(): number {
    return 0;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.running.size === 0) return;
    await new Promise<void>((r) => (this.drained = r));
  }
}

/** One ensemble request in flight. Tensors are stored per iteration (0 unless a step is decoupled). */
class EnsembleRun {
  private readonly tensors = new Map<string, (Tensor | null)[]>();
  private readonly active: boolean[];
  private readonly readers: Map<string, number>;
  /** Steps started, as iteration × steps + step. */
  private readonly fired = new Set<number>();
  /** Readers still to come per tensor and iteration (decoupled streams only). */
  private readonly left = new Map<string, number[]>();
  private readonly emitted = new Set<number>();
  private readonly stepInflight: number[];
  private readonly stepQueue: number[][];
  private readonly iterations: number[];
  private readonly params: Parameters;
  private inflight = 0;
  private done = false;
  private failed = false;

  constructor(
    private readonly plan: Plan, private readonly server: InferenceServer, private readonly request: PendingRequest,
    private readonly onDone: (failed: boolean) => void,
  ) {
    const n = plan.steps.length;
    this.stepInflight = new Array<number>(n).fill(0);
    this.stepQueue = Array.from({ length: n }, () => []);
    this.iterations = new Array<number>(n).fill(0);
    // Requested outputs are validated and distinct: as many as the ensemble has means all of them.
    const pruned = request.requestedOutputs.length === plan.outputCount && plan.full ? plan.full : prune(plan, request.requestedOutputs);
    this.active = pruned.active;
    this.readers = pruned.readers;
    const p: Parameters = { ...request.parameters };
    const seq = request.sequence;
    if (seq) {
      p.sequence_id = seq.id;
      p.sequence_start = seq.start;
      p.sequence_end = seq.end;
    }
    if (request.priority) p.priority = request.priority;
    if (request.timeoutUs) p.timeout = request.timeoutUs;
    this.params = p;
  }

  start(): void {
    for (const [name, t] of this.request.inputs) this.put(name, 0, t);
    // Optional ensemble inputs the client left out are present as "absent" for the steps reading them.
    for (const [name] of this.plan.consumers) {
      if (!this.plan.producer.has(name) && !this.request.inputs.has(name)) this.put(name, 0, null);
    }
    // Steps may answer synchronously (validation errors, cache hits): hold one count so the run cannot
    // finish before every ready step has been started.
    this.inflight++;
    for (const name of [...this.tensors.keys()]) this.advance(name, 0);
    if (--this.inflight === 0) this.finish();
  }

  private put(name: string, iter: number, t: Tensor | null): void {
    if (t && (this.readers.get(name) ?? 0) > 1) retainBuffer(t.data);
    let list = this.tensors.get(name);
    if (!list) this.tensors.set(name, (list = []));
    list[iter] = t;
  }

  private has(name: string, iter: number): boolean {
    return this.tensors.get(name)?.[iter] !== undefined;
  }

  /**
   * One reader is done with a tensor of a decoupled stream; after the last, it is dropped (kept as
   * "present", null), so a long stream does not hold every token's tensors until it ends.
   */
  private release(name: string, iter: number): void {
    if (!this.plan.decoupled) return;
    let left = this.left.get(name);
    if (!left) this.left.set(name, (left = []));
    left[iter] = (left[iter] ?? this.readers.get(name) ?? 1) - 1;
    if (left[iter] === 0) this.tensors.get(name)![iter] = null;
  }

  /** A tensor appeared: start the steps it completes, and answer if the outputs are all there. */
  private advance(name: string, iter: number): void {
    for (const s of this.plan.consumers.get(name) ?? []) {
      if (!this.active[s] || this.done) continue;
      const key = iter * this.plan.steps.length + s;
      if (this.fired.has(key) || !this.plan.steps[s]!.inputs.every(([, t]) => this.has(t, iter))) continue;
      this.fired.add(key);
      if (this.plan.maxInflight > 0 && this.stepInflight[s]! >= this.plan.maxInflight) this.stepQueue[s]!.push(iter);
      else this.dispatch(s, iter);
    }
    if (this.request.requestedOutputs.includes(name)) this.maybeRespond(iter);
  }

  private dispatch(s: number, iter: number): void {
    const step = this.plan.steps[s]!;
    const inputs: InferInput[] = [];
    for (const [input, tensor] of step.inputs) {
      const t = this.tensors.get(tensor)![iter]!;
      if (t) inputs.push({ name: input, datatype: t.datatype, shape: t.shape, data: t.data });
      this.release(tensor, iter);
    }
    const wanted = step.outputs.filter(([, t]) => (this.readers.get(t) ?? 0) > 0);
    const req = {
      model_name: step.model, model_version: step.version, id: this.request.id, parameters: this.params, inputs,
      outputs: wanted.map(([o]) => ({ name: o })),
    };
    this.inflight++;
    this.stepInflight[s]!++;
    try {
      this.server.repository.get(step.model, step.version).submit(req, (resp, final) => this.onResponse(s, iter, resp, final));
    } catch (err) {
      this.onResponse(s, iter, asTsiError(err), true);
    }
  }

  private onResponse(s: number, iter: number, resp: InferResponse | TsiError, final: boolean): void {
    const step = this.plan.steps[s]!;
    if (resp instanceof TsiError) this.fail(step, resp);
    else if (!this.done && !(final && step.decoupled && isCompletionOnly(resp))) {
      const out = step.decoupled ? this.iterations[s]!++ : iter;
      const byName = new Map(resp.outputs.map((t) => [t.name, t]));
      const produced: string[] = [];
      for (const [output, tensor] of step.outputs) {
        const t = byName.get(output);
        if (!t) continue;
        this.put(tensor, out, { name: tensor, datatype: t.datatype, shape: t.shape, data: t.data });
        produced.push(tensor);
      }
      for (const tensor of produced) this.advance(tensor, out);
    }
    if (!final) return;
    this.inflight--;
    this.stepInflight[s]!--;
    const next = this.stepQueue[s]!.shift();
    if (next !== undefined && !this.done) this.dispatch(s, next);
    if (this.inflight === 0) this.finish();
  }

  private maybeRespond(iter: number): void {
    if (this.done || this.emitted.has(iter)) return;
    const outputs: Tensor[] = [];
    for (const name of this.request.requestedOutputs) {
      const t = this.tensors.get(name)?.[iter];
      if (!t) return;
      outputs.push(t);
    }
    this.emitted.add(iter);
    for (const name of this.request.requestedOutputs) this.release(name, iter);
    if (this.plan.decoupled) this.request.send({ outputs }, false);
    else {
      this.done = true;
      this.request.send({ outputs }, true);
      this.onDone(false);
    }
  }

  /** Every step has answered: close a decoupled stream, or report outputs that never came. */
  private finish(): void {
    if (this.done) {
      if (this.failed) this.onDone(true);
      return;
    }
    this.done = true;
    if (this.plan.decoupled) {
      this.request.send({ outputs: [] }, true);
      this.onDone(false);
      return;
    }
    const missing = this.request.requestedOutputs.filter((n) => !this.has(n, 0));
    this.request.send(new TsiError('INTERNAL', `in ensemble '${this.plan.name}', output(s) ${missing.map((m) => `'${m}'`).join(', ')} were not produced`), true);
    this.onDone(true);
  }

  private fail(step: StepPlan, err: TsiError): void {
    if (this.done) return;
    this.done = true;
    this.failed = true;
    // Statistics (and a drain) wait in `finish` for the steps still running.
    this.request.send(new TsiError(err.code, `in ensemble '${this.plan.name}', step ${step.index} (model '${step.model}') failed: ${err.message}`, { cause: err }), true);
  }
}
