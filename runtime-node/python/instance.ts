/**
 * One instance of a Python model: one stub process (process.ts) running model.py, driven through
 * the control channel, with tensors in shared memory (shm.ts). `execute` writes each request's
 * inputs into a block of the input region and sends one `x` message per batch; the model's answers
 * come back as `d` (the batch is done, with the responses `execute` returned) and `s` (one response
 * sent through a response sender, at any time until the request's final one). A request's block is
 * given back when its final response has been read. If the process dies, its in-flight requests fail
 * with an error naming the model, how the process ended and its last stderr lines, and a new process
 * is started (and initialized) for the next batch.
 *
 * Messages, tsi → Python: `init`, `x` execute, `b` BLS result, `c` cancel request, `r` reply, `rdy` is_ready(), `fin`.
 * Python → tsi: `hello`, `ready`, `ierr` (initialize failed), `d`, `s`, `b` BLS call, `bc` cancel BLS,
 * `l` log, `mf`/`mm`/`mo`/`mv`/`mr` metrics, `imr` is_model_ready, `rdy` is_ready() answered, `fr` frees only, `fin` finalized.
 * Any Python message may carry `t` (tensors in shared memory), `q` (its ring sequence number) and
 * `fr` (input-region blocks Python no longer reads).
 *
 * Concurrency: `pipelined` — a second batch may be sent while one runs; the stub queues it and runs
 * batches one at a time, in order, on its main thread (decoupled `async def execute` may overlap,
 * as in Triton).
 */

import {
  TsiError, isCompletionOnly, modelConfigToJson, type BackendInstance, type BackendRequest, type ExecutionTimes, type InstanceSpec, type Logger,
  type ModelLoadContext, type ResponsePayload, type Tensor,
} from '../../core/index.js';
import { dirname } from 'node:path';
import type { StubMessage } from './channel.js';
import { StubProcess } from './process.js';
import type { InputRegion, OutDesc } from './shm.js';
import { StubServices, bigints, errorOfCode, wireCorrelationId } from './services.js';
import type { PythonRuntime } from './interpreter.js';

export interface ModelSetup {
  ctx: ModelLoadContext;
  log: Logger;
  /** Absolute paths of model.py and of the model's folder. */
  file: string;
  modelDir: string;
  runtime: PythonRuntime;
  shm: { initial: number; growth: number };
  startTimeoutMs: number;
  stopTimeoutMs: number;
}

interface Execution {
  requests: BackendRequest[];
  input: InputRegion;
  blocks: number[];
  finals: boolean[];
  open: number;
  /** Non-decoupled requests take one response: a non-final one waits here for its final flag. */
  held?: (ResponsePayload | undefined)[];
  done: boolean;
  ns: number;
  resolve: (ns: number) => void;
}

/** Retrying a start that failed within this window reports the same failure instead. */
const RESTART_BACKOFF_MS = 1000;
/** How long a readiness request waits for a model's is_ready() (Triton's kUserModelReadinessTimeoutMs). */
const IS_READY_TIMEOUT_MS = 5000;

export class PythonInstance implements BackendInstance {
  readonly pipelined = true;
  private proc?: StubProcess;
  private starting?: Promise<StubProcess>;
  private lastFailure?: { at: number; error: TsiError };
  private readonly executions = new Map<number, Execution>();
  private nextExec = 1;
  private stopping = false;
  private readonly decoupled: boolean;
  private readonly name: string;
  /** Whether model.py defines is_ready(); the one check in flight, which later askers share. */
  private userReady = false;
  private readiness?: Promise<void>;
  private readonly readyCalls = new Map<number, { resolve: () => void; reject: (e: TsiError) => void }>();
  private nextReadyCall = 1;

  private constructor(private readonly setup: ModelSetup, readonly spec: InstanceSpec) {
    this.decoupled = setup.ctx.config.model_transaction_policy?.decoupled === true;
    this.name = setup.ctx.config.name ?? '';
  }

  static async start(setup: ModelSetup, spec: InstanceSpec): Promise<PythonInstance> {
    const inst = new PythonInstance(setup, spec);
    inst.proc = await inst.launch();
    return inst;
  }

  get device(): string {
    const pid = this.proc?.pid;
    return pid ? `python (pid ${pid})` : 'python';
  }

  private get tag(): string {
    return `${this.name} (${this.spec.name})`;
  }

  private async launch(): Promise<StubProcess> {
    const { ctx, runtime, log } = this.setup;
    const proc = new StubProcess({
      python: runtime.python, env: runtime.env, model: this.name, instance: this.spec.name, log,
      startTimeoutMs: this.setup.startTimeoutMs, shm: this.setup.shm,
    }, 'serve');
    // A BLS call made with `trace=request.trace()` names its request by (execution, index): its trace's parent.
    const services = new StubServices(proc, ctx, this.tag, log, (x, i) => this.executions.get(x)?.requests[i]?.trace);
    proc.onMessage = (m) => this.receive(proc, services, m);
    proc.onBatchEnd = () => proc.ring!.flush();
    proc.onExit = (reason) => this.exited(proc, services, reason);
    const kind = this.spec.kind.replace('KIND_', '');
    const ready = await proc.handshake({
      k: 'init', file: this.setup.file, name: this.name, dir: dirname(this.setup.file),
      decoupled: this.decoupled, growth: this.setup.shm.growth,
      args: {
        model_config: JSON.stringify(modelConfigToJson(ctx.config)), model_instance_kind: kind, model_instance_name: this.spec.name,
        model_instance_device_id: String(Math.max(0, this.spec.deviceId)), model_repository: this.setup.modelDir,
        model_version: String(ctx.version), model_name: this.name,
      },
    }, ['ready'], `failed to initialize model '${this.name}' instance ${this.spec.name} with ${runtime.label}`);
    this.userReady = ready.ir === true;
    log.verbose(1, `${this.tag}: Python process ${proc.pid} ready`);
    return proc;
  }

  /**
   * Triton's answer while no healthy process serves: to the request that finds the process dead (it
   * starts the restart), and to those whose restart failed. Requests arriving while a restart is
   * under way wait for it.
   */
  private unhealthy(): TsiError {
    const why = this.lastFailure ? ` ${this.lastFailure.error.message}` : '';
    return new TsiError('INTERNAL',
      `Failed to process the request(s) for model instance '${this.spec.name}', message: Stub process '${this.spec.name}' is not healthy.${why}`);
  }

  /**
   * The live process; without one, the request is refused and a restart started (unless one runs, or
   * just failed). As in Triton's python backend, a process that died idle is replaced when the next
   * request finds it dead, not when it dies: until then the model reports not ready.
   */
  private ready(): Promise<StubProcess> {
    if (this.proc?.alive) return Promise.resolve(this.proc);
    if (this.stopping) return Promise.reject(new TsiError('UNAVAILABLE', `instance ${this.spec.name} of model '${this.name}' is unloading`));
    // A restart under way: wait for it, as requests queued behind Triton's restarting execute do.
    if (this.starting) return this.starting.catch(() => Promise.reject(this.unhealthy()));
    this.setup.log.error(`${this.tag}: Stub process is unhealthy and it will be restarted.`);
    this.restart();
    return Promise.reject(this.unhealthy());
  }

  private restart(): void {
    const f = this.lastFailure;
    if (this.starting || this.stopping || (f && performance.now() - f.at < RESTART_BACKOFF_MS)) return;
    this.starting = this.launch().then((proc) => {
      this.proc = proc;
      this.lastFailure = undefined;
      this.setup.log.info(`${this.tag}: Stub process '${this.spec.name}' is healthy again: a new Python process (pid ${proc.pid}) is ready`);
      return proc;
    }, (err: TsiError) => {
      this.lastFailure = { at: performance.now(), error: err };
      this.setup.log.error(`${this.tag}: ${err.message}`);
      throw err;
    }).finally(() => {
      this.starting = undefined;
    });
    this.starting.catch(() => {});
  }

  /** Triton's TRITONBACKEND_ModelInstanceReady: a live process, then the model's own is_ready() if it has one. */
  async checkReady(): Promise<void> {
    const proc = this.proc;
    if (!proc?.alive) throw new TsiError('INTERNAL', `Stub process '${this.spec.name}' is not healthy.`);
    if (!this.userReady) return;
    // One is_ready() runs at a time; it goes on past a caller's timeout, and later callers wait for it.
    const first = !this.readiness;
    if (first) {
      this.readiness = this.askReady(proc).finally(() => {
        this.readiness = undefined;
      });
      this.readiness.catch(() => {});
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TsiError('UNAVAILABLE',
        first ? 'Timed out waiting for user-defined is_ready() response' : 'Timed out waiting for in-flight is_ready() response')), IS_READY_TIMEOUT_MS);
    });
    try {
      await Promise.race([this.readiness, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private askReady(proc: StubProcess): Promise<void> {
    const id = this.nextReadyCall++;
    return new Promise<void>((resolve, reject) => {
      this.readyCalls.set(id, { resolve, reject });
      proc.send({ k: 'rdy', id });
    });
  }

  private readyAnswer(m: StubMessage): void {
    const call = this.readyCalls.get(m.id as number);
    this.readyCalls.delete(m.id as number);
    if (!call) return;
    if (typeof m.e === 'string') call.reject(new TsiError('INTERNAL', m.e));
    else if (m.v === true) call.resolve();
    else call.reject(new TsiError('UNAVAILABLE', `Model '${this.spec.name}' is not ready (user-defined check failed).`));
  }

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes> {
    const t0 = performance.now();
    const proc = await this.ready();
    const input = proc.input!;
    const x = this.nextExec++;
    const taken: number[] = [];
    let wire;
    try {
      wire = requests.map((r) => {
        const { block, descs } = input.writeTensors([...r.inputs.values()]);
        taken.push(block[0]);
        const seq = (r as { sequence?: { id: bigint | string; start: boolean; end: boolean } }).sequence;
        // [request id, correlation id, flags, timeout µs, parameters (JSON), requested outputs, block, inputs, trace]
        return [
          r.id, seq ? wireCorrelationId(seq.id) : 0, seq ? (seq.start ? 1 : 0) | (seq.end ? 2 : 0) : 0,
          (r as { timeoutUs?: number }).timeoutUs ?? 0, JSON.stringify(r.parameters, bigints), r.requestedOutputs, block, descs,
          // Traced: the context its model sees (a JSON string in "opentelemetry" mode, else just true).
          r.trace ? r.trace.spanContext ?? true : false,
        ] as const;
      });
    } catch (err) {
      // No room in shared memory (a full /dev/shm): this batch fails, the instance goes on.
      for (const off of taken) input.freeBlock(off);
      throw new TsiError('UNAVAILABLE', `model '${this.name}': cannot pass the inputs to the Python process: ${(err as Error).message}`);
    }
    const t1 = performance.now();
    const ns = await new Promise<number>((resolve) => {
      this.executions.set(x, {
        requests, input, blocks: wire.map((w) => w[6][0]), finals: requests.map(() => false), open: requests.length,
        done: false, ns: 0, resolve,
      });
      proc.send({ k: 'x', x, r: wire });
      requests.forEach((r, i) => r.onCancel?.(() => proc.send({ k: 'c', x, i })));
    });
    const t2 = performance.now();
    const transit = Math.max(0, (t2 - t1) * 1e6 - ns);
    return { computeInputNs: (t1 - t0) * 1e6 + transit / 2, computeInferNs: ns, computeOutputNs: transit / 2 };
  }

  private receive(proc: StubProcess, services: StubServices, m: StubMessage): void {
    let tensors: Tensor[] = [];
    try {
      if (m.t) tensors = proc.ring!.readTensors(m.t as OutDesc[]);
    } catch (err) {
      this.setup.log.error(`${this.tag}: unreadable tensors in a '${m.k}' message: ${(err as Error).message}`);
      proc.kill();
      return;
    }
    if (typeof m.q === 'number') proc.ring!.consume(m.q);
    if (m.fr) for (const off of m.fr as number[]) proc.input!.freeBlock(off);
    switch (m.k) {
      case 'd':
        this.batchDone(m, tensors);
        return;
      case 's': {
        const ex = this.executions.get(m.x as number);
        if (ex) this.deliver(m.x as number, ex, m.i as number, payloadOf(m, tensors), m.f === true);
        return;
      }
      case 'fr': case 'fin':
        return;
      case 'rdy':
        this.readyAnswer(m);
        return;
      case 'ierr':
        // The stub's last words before it exits (a failure outside model code): the exit handler restarts it.
        this.setup.log.error(`${this.tag}: the Python stub failed: ${String(m.m).trimEnd()}`);
        return;
      default:
        if (!services.handle(m, tensors)) this.setup.log.warn(`${this.tag}: unexpected message '${m.k}' from the Python process`);
    }
  }

  private batchDone(m: StubMessage, tensors: Tensor[]): void {
    const x = m.x as number;
    const ex = this.executions.get(x);
    if (!ex) return;
    ex.ns = (m.ns as number) ?? 0;
    if (typeof m.e === 'string') {
      const err = new TsiError('INTERNAL', m.e);
      for (let i = 0; i < ex.requests.length; i++) this.deliver(x, ex, i, err, true);
    } else if (Array.isArray(m.r)) {
      let k = 0;
      (m.r as (StubMessage | null)[]).forEach((f, i) => {
        if (f === null) return;
        const n = (f.n as number) ?? 0;
        this.deliver(x, ex, i, payloadOf(f, tensors.slice(k, k + n)), true);
        k += n;
      });
    }
    // Requests the model released with RESCHEDULE end in this execution without a response; the
    // scheduler runs them again (or refuses, for a model without iterative sequences).
    if (Array.isArray(m.rs)) {
      for (const i of m.rs as number[]) {
        if (ex.finals[i] || i >= ex.requests.length) continue;
        ex.finals[i] = true;
        ex.open--;
        ex.input.freeBlock(ex.blocks[i]!);
        ex.requests[i]!.reschedule?.();
      }
    }
    ex.done = true;
    this.settle(x, ex);
  }

  private deliver(x: number, ex: Execution, i: number, payload: ResponsePayload | TsiError, final: boolean): void {
    if (ex.finals[i] || i >= ex.requests.length) return;
    // A non-decoupled request takes one response: an error ends it, unless a response came first, which
    // then stands (Triton's frontends keep a non-decoupled request's first response and drop the rest).
    if (!this.decoupled && payload instanceof TsiError) {
      final = true;
      const held = ex.held?.[i];
      if (held) {
        this.setup.log.verbose(1, `${this.tag}: request '${ex.requests[i]!.id}' already has its response; dropped the later error: ${payload.message}`);
        payload = held;
      }
    }
    if (!this.decoupled && !(payload instanceof TsiError)) {
      if (!final) {
        (ex.held ??= [])[i] = payload;
        return;
      }
      const held = ex.held?.[i];
      if (held && isCompletionOnly(payload)) payload = held;
    }
    if (final) {
      ex.finals[i] = true;
      ex.open--;
      ex.input.freeBlock(ex.blocks[i]!);
    }
    ex.requests[i]!.send(payload, final);
    if (final && ex.done) this.settle(x, ex);
  }

  /** execute() resolves when the batch is done (non-decoupled: and every request answered). */
  private settle(x: number, ex: Execution): void {
    if (!ex.done) return;
    if (this.decoupled || ex.open === 0) ex.resolve(ex.ns);
    if (ex.open === 0) this.executions.delete(x);
  }

  private exited(proc: StubProcess, services: StubServices, reason: string): void {
    services.close();
    if (proc !== this.proc) return;
    this.proc = undefined;
    for (const call of this.readyCalls.values()) {
      call.reject(new TsiError('INTERNAL', 'Stub process is not healthy while waiting for user-defined is_ready() response'));
    }
    this.readyCalls.clear();
    const err = this.stopping
      ? new TsiError('INTERNAL', `model '${this.name}' instance ${this.spec.name}: the Python process (pid ${proc.pid}) ended while the model unloaded`)
      // Triton's sentence first (clients and log checks match it), then how the process ended.
      : new TsiError('INTERNAL', `Failed to process the request(s) for model instance '${this.spec.name}', message: Stub process '${this.spec.name}' `
        + `is not healthy. The Python process (pid ${proc.pid}) ${reason}`);
    const open = [...this.executions];
    this.executions.clear();
    for (const [x, ex] of open) {
      for (let i = 0; i < ex.requests.length; i++) if (!ex.finals[i]) this.deliver(x, ex, i, err, true);
      ex.done = true;
      ex.resolve(ex.ns);
    }
    if (this.stopping) return;
    if (this.setup.ctx.server.isShuttingDown()) {
      // The server is stopping (a signal to the whole process group reaches the stub too): no new one.
      this.stopping = true;
      this.setup.log.info(`model '${this.name}' instance ${this.spec.name}: the Python process (pid ${proc.pid}) ${reason} while the server is stopping; it is not restarted`);
      return;
    }
    // Triton's backend replaces the process when an execution finds it dead: at once when it died
    // under one, else at the next request (which fails); until the new one is ready, not ready.
    this.setup.log.error(`${this.tag}: Stub process '${this.spec.name}' is not healthy. The Python process (pid ${proc.pid}) ${reason}; `
      + `the model is not ready until ${open.length ? 'a new one is' : 'the next request starts a new one'}`);
    if (open.length) {
      this.setup.log.error(`${this.tag}: Stub process is unhealthy and it will be restarted.`);
      this.restart();
    }
  }

  async unload(): Promise<void> {
    this.stopping = true;
    await this.starting?.catch(() => {});
    await this.proc?.stop(this.setup.stopTimeoutMs);
  }
}

function payloadOf(f: StubMessage, outputs: Tensor[]): ResponsePayload | TsiError {
  if (Array.isArray(f.e)) return new TsiError(errorOfCode(f.e[0]), String(f.e[1]));
  return typeof f.p === 'string' ? { outputs, parameters: JSON.parse(f.p) as ResponsePayload['parameters'] } : { outputs };
}
