/**
 * Test doubles for the schedulers: a Clock advanced by hand (timers fire in order, nothing sleeps) and
 * a pure-TS Backend whose instances record every batch they get, gather inputs with `concatBatch` and
 * split outputs with `splitBatch` like a real backend, can be held busy until a test releases them,
 * and answer with a replaceable per-batch function (echo by default).
 */

import type {
  Backend, BackendInstance, BackendModel, BackendRequest, InstanceSpec, ResponsePayload,
} from '../../core/backend.js';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import { PendingRequest, type ResponseSink, type SequenceFlags } from '../../core/request.js';
import type { SchedulerContext, SchedulerDelay } from '../../core/scheduling/scheduler.js';
import { createScheduler } from '../../core/scheduling/schedulers.js';
import { ModelStats } from '../../core/stats.js';
import { concatBatch, splitBatch } from '../../core/tensor.js';
import type { Clock, Logger, Tensor } from '../../core/types.js';

export class FakeClock implements Clock {
  now = 1_000_000_000;
  private timers: { at: number; fn: () => void; live: boolean; seq: number }[] = [];
  private seq = 0;

  nowNs(): number {
    return this.now;
  }
  epochMs(): number {
    return Math.floor(this.now / 1e6);
  }
  setTimer(fn: () => void, delayMs: number): () => void {
    const t = { at: this.now + Math.max(0, delayMs) * 1e6, fn, live: true, seq: this.seq++ };
    this.timers.push(t);
    return () => {
      t.live = false;
    };
  }
  /** Live timers, for tests that check a wake-up was (or was not) armed. */
  pending(): number[] {
    return this.timers.filter((t) => t.live).map((t) => t.at);
  }
  /** Moves time forward by `us` microseconds, firing due timers in order at their own time. */
  async advanceUs(us: number): Promise<void> {
    const target = this.now + us * 1000;
    for (;;) {
      await flush();
      const due = this.timers.filter((t) => t.live && t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      due.live = false;
      this.now = Math.max(this.now, due.at);
      due.fn();
    }
    this.timers = this.timers.filter((t) => t.live);
    this.now = target;
    await flush();
  }
}

/** Lets every pending promise continuation run. */
export const flush = () => new Promise<void>((r) => setImmediate(r));

export interface ExecutedBatch {
  instance: number;
  ids: string[];
  rows: number;
  requests: BackendRequest[];
  /** Each input gathered over the batch, as a real backend would see it. */
  inputs: Map<string, Tensor>;
  startNs: number;
  endNs?: number;
}

/** Computes one batch's outputs from its gathered inputs (same row count). */
export type BatchFn = (inputs: Map<string, Tensor>, requests: BackendRequest[]) => Map<string, Tensor> | TsiError;

/** Echo: every input `XINPUTy` comes back as output `XOUTPUTy`. */
export const echo: BatchFn = (inputs) => {
  const out = new Map<string, Tensor>();
  for (const [name, t] of inputs) {
    const o = name.replace('INPUT', 'OUTPUT');
    out.set(o, { ...t, name: o });
  }
  return out;
};

export class FakeBackend {
  readonly batches: ExecutedBatch[] = [];
  compute: BatchFn = echo;
  /** When true, each execute waits until `release()` lets it finish. */
  hold = false;
  private gates: { instance: number; open: () => void }[] = [];
  running = 0;
  maxRunning = 0;
  /** Requests for which this returns true are released with RESCHEDULE instead of answered. */
  rescheduleIf?: (r: BackendRequest) => boolean;
  /** Instances declare `pipelined` (a batch may be queued behind the running one). */
  pipelined = false;

  constructor(private readonly clock: Clock) {}

  instances(n: number): BackendInstance[] {
    return Array.from({ length: n }, (_, index) => this.instance({ name: `fake_${index}`, kind: 'KIND_CPU', deviceId: -1, index }));
  }

  instance(spec: InstanceSpec): BackendInstance {
    return {
      spec,
      device: 'cpu',
      pipelined: this.pipelined,
      execute: (requests) => this.execute(spec.index, requests),
      unload: async () => {},
    };
  }

  /** A Backend for tests that go through a server. */
  asBackend(name = 'fake'): Backend {
    const model: BackendModel = { createInstance: async (spec) => this.instance(spec), unload: async () => {} };
    return { name, loadModel: async () => model };
  }

  /** Lets the oldest held execution (of `instance`, if given) finish. */
  release(instance?: number): void {
    const i = this.gates.findIndex((g) => instance === undefined || g.instance === instance);
    if (i < 0) throw new Error(`no held execution${instance === undefined ? '' : ` on instance ${instance}`}`);
    this.gates.splice(i, 1)[0]!.open();
  }

  get held(): number {
    return this.gates.length;
  }

  private async execute(instance: number, requests: BackendRequest[]): Promise<void> {
    const names = [...requests[0]!.inputs.keys()];
    const inputs = new Map<string, Tensor>();
    for (const n of names) inputs.set(n, concatBatch(requests.map((r) => r.inputs.get(n)!)));
    const b: ExecutedBatch = {
      instance, ids: requests.map((r) => r.id), rows: requests.reduce((s, r) => s + r.batchSize, 0), requests, inputs,
      startNs: this.clock.nowNs(),
    };
    this.batches.push(b);
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      if (this.hold) await new Promise<void>((open) => this.gates.push({ instance, open }));
      const outs = this.compute(inputs, requests);
      if (outs instanceof TsiError) throw outs;
      const rows = requests.map((r) => r.batchSize);
      const split = new Map([...outs].map(([n, t]) => [n, splitBatch(t, rows)] as const));
      requests.forEach((r, i) => {
        if (this.rescheduleIf?.(r)) return r.reschedule!();
        const payload: ResponsePayload = { outputs: [...split.values()].map((parts) => parts[i]!) };
        r.send(payload, true);
      });
    } finally {
      this.running--;
      b.endNs = this.clock.nowNs();
    }
  }
}

/** A request as the server would build it after validation, with its responses collected. */
export interface TestRequest {
  req: PendingRequest;
  responses: (ResponsePayload | TsiError)[];
  done: Promise<ResponsePayload | TsiError>;
  /** The final response, once there is one. */
  result?: ResponsePayload | TsiError;
}

export function request(opts: {
  id?: string;
  inputs: Record<string, Tensor | number[]>;
  /** Batch size: when set, number[] inputs get shape [batch, len/batch]; else non-batched [len]. */
  batch?: number;
  priority?: number;
  timeoutUs?: number;
  sequence?: { id: SequenceFlags['id'] | number; start?: boolean; end?: boolean };
  outputs?: string[];
}): TestRequest {
  const inputs = new Map<string, Tensor>();
  for (const [name, v] of Object.entries(opts.inputs)) {
    if (!Array.isArray(v)) inputs.set(name, v);
    else {
      const shape = opts.batch !== undefined ? [opts.batch, v.length / opts.batch] : [v.length];
      inputs.set(name, { name, datatype: 'FP32', shape, data: Float32Array.from(v) });
    }
  }
  let resolve!: (r: ResponsePayload | TsiError) => void;
  const t: TestRequest = { req: undefined as never, responses: [], done: new Promise((r) => (resolve = r)) };
  const sink: ResponseSink = (resp, final) => {
    t.responses.push(resp);
    if (final) {
      t.result = resp;
      resolve(resp);
    }
  };
  const s = opts.sequence;
  t.req = new PendingRequest({
    id: opts.id ?? '', inputs, requestedOutputs: opts.outputs ?? ['OUTPUT0'], parameters: {},
    batchSize: opts.batch ?? 1, priority: opts.priority ?? 0, timeoutUs: opts.timeoutUs ?? 0, sink,
    sequence: s ? { id: typeof s.id === 'number' ? BigInt(s.id) : s.id, start: s.start ?? false, end: s.end ?? false } : undefined,
  });
  return t;
}

export const collectingLogger = (): Logger & { warnings: string[] } => {
  const warnings: string[] = [];
  return { warnings, error() {}, warn: (m) => warnings.push(m), info() {}, verbose() {} };
};

/** A scheduler from `config` over `n` fake instances on a fake clock. */
export function harness(config: ModelConfig, n = 1, opts: { pipelined?: boolean; delay?: SchedulerDelay } = {}) {
  const clock = new FakeClock();
  const backend = new FakeBackend(clock);
  backend.pipelined = opts.pipelined ?? false;
  const log = collectingLogger();
  const ctx: SchedulerContext = {
    modelName: config.name ?? 'm', version: 1, config, instances: backend.instances(n), stats: new ModelStats(),
    clock, log, decoupled: false, delay: opts.delay,
  };
  const scheduler = createScheduler(ctx);
  const submit = (t: TestRequest) => {
    t.req.receivedNs = clock.nowNs();
    scheduler.enqueue(t.req);
    return t;
  };
  return { clock, backend, log, ctx, scheduler, stats: ctx.stats, submit };
}

export const values = (r: ResponsePayload | TsiError | undefined, name = 'OUTPUT0'): number[] => {
  if (!r || r instanceof TsiError) throw new Error(`expected a response, got ${r instanceof TsiError ? r.message : r}`);
  const t = r.outputs.find((o) => o.name === name);
  if (!t) throw new Error(`no output ${name}`);
  return Array.from(t.data as ArrayLike<number | bigint>, Number);
};
