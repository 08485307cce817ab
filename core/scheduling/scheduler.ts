/**
 * What every scheduler shares: the Scheduler contract, the pool of a model version's instances (a batch
 * goes to the first free one; one batch per instance at a time), and `runExecution`, which hands one
 * batch to one instance and does the bookkeeping Triton does around TRITONBACKEND_ModelInstanceExecute:
 * queue time, compute times, per-request success/failure statistics, and a final error for any request
 * a backend forgot to answer. A model with neither `dynamic_batching` nor `sequence_batching` runs
 * the dynamic batcher with batching off (schedulers.ts), as Triton builds its default scheduler.
 */

import type { BackendInstance, ExecutionTimes, ResponsePayload, ResponseTiming } from '../execution.js';
import { TsiError, asTsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import { requestPrefix, type ExecutionObserver, type PendingRequest } from '../request.js';
import type { ModelRateLimit } from './rate-limiter.js';
import type { ModelStats } from '../stats.js';
import type { Clock, Logger } from '../types.js';

export interface Scheduler {
  /**
   * Takes ownership of a validated request. Rejections (queue full, stopping) are answered through
   * `request.send` with the error, never thrown, so every transport handles them one way. `nowNs`:
   * the caller's clock reading taken just before (it saves a read per request), else the clock's.
   */
  enqueue(request: PendingRequest, nowNs?: number): void;
  /** Requests accepted and not yet handed to a backend. */
  queued(): number;
  /** Stops accepting, lets queued and executing work finish, then resolves. */
  stop(): Promise<void>;
  /** Sequences begun and not yet ended or reaped (sequence batchers only). */
  liveSequences?(): number;
  /**
   * A stopping server: from now on only requests that continue a sequence in progress are taken (no
   * START, no unknown id), so the sequences clients are in the middle of can finish.
   */
  closeSequences?(): void;
  /**
   * An in-place instance update (repository/instance-update.ts): work goes to these new instances
   * too from now on. Both methods or neither: without them an instance change is a full reload.
   */
  addInstances?(instances: readonly BackendInstance[]): void;
  /**
   * Takes an instance out of service: nothing new goes to it, and `done` resolves once it has nothing
   * left to run (its batch in flight finished; for the sequence batcher, the sequences bound to it
   * ended or were reaped, and `lingers` says whether any were). A stopping scheduler resolves it too.
   */
  retireInstance?(instance: BackendInstance): { done: Promise<void>; lingers: boolean };
}

export interface SchedulerContext {
  modelName: string;
  version: number;
  config: ModelConfig;
  instances: BackendInstance[];
  stats: ModelStats;
  clock: Clock;
  log: Logger;
  decoupled: boolean;
  /** The model's gate on the server's rate limiter (`--rate-limit execution_count`); absent: off. */
  rateLimit?: ModelRateLimit;
  /** Triton's scheduler test hook (see SchedulerDelay); absent: schedule as usual. */
  delay?: SchedulerDelay;
}

/**
 * Triton's test hook for deterministic batch statistics (TRITONSERVER_DELAY_SCHEDULER and
 * TRITONSERVER_BACKLOG_DELAY_SCHEDULER, read once at start-up by the runtime): a batching scheduler
 * executes nothing until `requests` requests are queued, then schedules as usual for good (the hold
 * is one-shot, as Triton clears its count). The direct sequence batcher counts its slots' queues
 * across instances and, when `backlog` is set, also waits for that many backlogged requests; the
 * oldest strategy holds each instance until that many sequence heads wait there. 0 = no hold. Not
 * for production: a model whose traffic never reaches the count never runs.
 */
export interface SchedulerDelay {
  requests: number;
  backlog?: number;
}

export const STOPPING_MESSAGE = 'Server is stopping, scheduler for model has stopped accepting new inference requests';

/**
 * Free/busy bookkeeping of a model version's instances; `onFree` fires whenever one frees up. The
 * members change only by an in-place instance update: `add`, and `retire`, which waits for the
 * instance's batch in flight (and any batch queued behind it) before letting it go.
 */
export class InstancePool {
  private readonly free: BackendInstance[];
  private readonly members: BackendInstance[];
  /** Instances with a batch queued behind the running one, and what to do when that batch starts. */
  private readonly behind = new Map<BackendInstance, (() => void)[]>();
  /** Busy instances taken out of service, with what to call once their last batch is over. */
  private readonly retiring = new Map<BackendInstance, () => void>();
  private waiters: (() => void)[] = [];
  private busyCount = 0;

  constructor(instances: readonly BackendInstance[], private readonly onFree: () => void) {
    this.members = [...instances];
    this.free = [...instances];
  }

  get instances(): readonly BackendInstance[] {
    return this.members;
  }

  /** A new instance, free at once. */
  add(inst: BackendInstance): void {
    this.members.push(inst);
    this.free.push(inst);
    this.onFree();
  }

  /** Takes an instance out of the pool; resolves once it runs nothing (at once if it is free). */
  retire(inst: BackendInstance): Promise<void> {
    const m = this.members.indexOf(inst);
    if (m >= 0) this.members.splice(m, 1);
    const f = this.free.indexOf(inst);
    if (f >= 0) {
      this.free.splice(f, 1);
      return Promise.resolve();
    }
    return new Promise((resolve) => this.retiring.set(inst, resolve));
  }

  /** The first free instance in configuration order, or undefined. */
  acquire(): BackendInstance | undefined {
    if (this.free.length === 0) return undefined;
    const free = this.free;
    let best = 0;
    for (let i = 1; i < free.length; i++) if (free[i]!.spec.index < free[best]!.spec.index) best = i;
    const inst = free[best]!;
    // The order of the free list does not matter (every lookup searches it), so no splice.
    free[best] = free[free.length - 1]!;
    free.pop();
    this.busyCount++;
    return inst;
  }

  /** A specific instance (sequence batcher slots are bound to one), or undefined if busy. */
  acquireExact(inst: BackendInstance): BackendInstance | undefined {
    const i = this.free.indexOf(inst);
    if (i < 0) return undefined;
    this.free.splice(i, 1);
    this.busyCount++;
    return inst;
  }

  hasFree(): boolean {
    return this.free.length > 0;
  }

  /** Whether a specific instance is free (sequence batcher slots are bound to one). */
  isFree(inst: BackendInstance): boolean {
    return this.free.includes(inst);
  }

  /**
   * A busy instance that can take one more batch behind the one it runs (its backend declares
   * `pipelined`), or undefined. The batch waits in the instance's own queue, so the instance starts
   * it the moment the current one ends instead of idling while the main thread hands it over.
   */
  acquireBehind(): BackendInstance | undefined {
    let best: BackendInstance | undefined;
    for (const inst of this.members) {
      if (!inst.pipelined || this.behind.has(inst) || this.free.includes(inst)) continue;
      if (!best || inst.spec.index < best.spec.index) best = inst;
    }
    if (!best) return undefined;
    this.behind.set(best, []);
    this.busyCount++;
    return best;
  }

  /** Runs `fn` when the batch queued behind `inst` starts (its predecessor released the instance). */
  whenQueuedBatchStarts(inst: BackendInstance, fn: () => void): void {
    const fns = this.behind.get(inst);
    if (fns) fns.push(fn);
    else fn();
  }

  release(inst: BackendInstance): void {
    // With a batch queued behind, the instance goes on running it: still busy, one batch fewer.
    const started = this.behind.get(inst);
    if (started) {
      this.behind.delete(inst);
      this.busyCount--;
      for (const f of started) f();
      this.onFree();
      return;
    }
    const retired = this.retiring.get(inst);
    if (retired) this.retiring.delete(inst);
    else this.free.push(inst);
    this.busyCount--;
    retired?.();
    if (this.busyCount === 0) {
      const w = this.waiters;
      this.waiters = [];
      for (const f of w) f();
    }
    this.onFree();
  }

  get busy(): number {
    return this.busyCount;
  }

  /** Resolves when no instance is executing. */
  idle(): Promise<void> {
    if (this.busyCount === 0) return Promise.resolve();
    return new Promise((r) => this.waiters.push(r));
  }
}

const ZERO_TIMES = { input: 0, infer: 0, output: 0 };

export interface ExecutionOptions {
  /** Requests that take part in the execution but not in the statistics (sequence padding rows). */
  uncounted?: ReadonlySet<PendingRequest>;
  /**
   * Hold the responses a (non-decoupled) backend sends during `execute` until the instance has been
   * released and the scheduler has handed it its next batch. In Node the backend answers from the
   * main thread, so without this the instance would idle while every response of the batch is
   * encoded and written; with it, the next batch computes meanwhile. Only for schedulers that read
   * nothing from the responses before forming the next batch (not the sequence batcher, whose state
   * comes from them).
   */
  deferResponses?: boolean;
  /**
   * The batch was queued behind the instance's running one (InstancePool.acquireBehind): its requests
   * stay pending (Triton: not yet started by a backend) until that predecessor finishes.
   */
  queuedBehind?: boolean;
  /** The caller's clock reading taken as it formed the batch (saves a read), else the clock's. */
  startNs?: number;
  /** The caller already holds the instance's rate-limiter grant (the dynamic batcher asks before forming). */
  granted?: boolean;
}

/**
 * One batch's bookkeeping while it executes: it observes every counted request's responses (which
 * marks failures, holds responses back while `deferResponses` asks it to, and settles the statistics
 * of responses that come after `execute` resolved).
 */
class Execution implements ExecutionObserver {
  times = ZERO_TIMES;
  waitNs = 0;
  executed = false;
  /** Whether request i of the batch has sent an error (made on the first error). */
  private failures?: boolean[];
  /** Responses held until the instance is handed on: request, response, final, flat. */
  readonly held: unknown[] | undefined;

  constructor(private readonly ctx: SchedulerContext, readonly startNs: number, hold: boolean) {
    this.held = hold ? [] : undefined;
  }

  failed(i: number): boolean {
    return this.failures?.[i] === true;
  }

  response(r: PendingRequest, i: number, resp: ResponsePayload | TsiError, final: boolean): void {
    if (resp instanceof TsiError) (this.failures ??= [])[i] = true;
    if (this.held !== undefined && !this.executed) this.held.push(r, resp, final);
    else r.deliver(resp, final);
    // Responses that arrive after execute() resolved (decoupled models) settle here.
    if (final && this.executed) this.settle(r, this.failed(i), this.ctx.clock.nowNs(), this.ctx.clock.epochMs());
  }

  responseTiming(responseIndex: number, timing: ResponseTiming): void {
    const { inferNs, outputNs, error } = timing;
    this.ctx.stats.recordResponse(responseIndex, { inferNs, outputNs, errorCode: error?.code });
  }

  settle(r: PendingRequest, failed: boolean, endNs: number, epochMs: number): void {
    const { stats } = this.ctx;
    const total = endNs - r.receivedNs;
    if (failed) stats.recordFailure(total, 'BACKEND', epochMs);
    else stats.recordSuccess(total, this.startNs - r.enqueuedNs + this.waitNs, this.times, epochMs);
    stats.inflight--;
  }

  deliverHeld(): void {
    const h = this.held!;
    for (let k = 0; k < h.length; k += 3) {
      (h[k] as PendingRequest).deliver(h[k + 1] as ResponsePayload | TsiError, h[k + 2] as boolean);
    }
  }
}

/**
 * Executes one batch on one (already acquired) instance and releases it afterwards. Never throws:
 * a backend failure becomes an error response for each request of the batch still unanswered.
 */
export async function runExecution(
  ctx: SchedulerContext, pool: InstancePool, instance: BackendInstance, batch: PendingRequest[],
  opts: ExecutionOptions = {},
): Promise<void> {
  const { stats, clock } = ctx;
  const { uncounted } = opts;
  // With the rate limiter on, the formed batch waits here for the instance's resources (queue time).
  const gate = ctx.rateLimit;
  let startNs = opts.startNs;
  if (gate !== undefined && opts.granted !== true) {
    const granted = gate.acquire(instance);
    if (granted !== true) {
      await granted;
      startNs = undefined;
    }
  }
  // A request whose client gave up while it queued is answered now instead of computed (not in a
  // sequence batch, whose slots and state need every row).
  if (uncounted === undefined && hasCancelled(batch)) {
    batch = dropCancelled(ctx, batch, opts.queuedBehind === true ? pool : undefined, instance);
    if (batch.length === 0) {
      pool.release(instance);
      gate?.release(instance);
      return;
    }
  }
  const ex = new Execution(ctx, startNs ?? clock.nowNs(), opts.deferResponses === true && !ctx.decoupled);
  let rows = 0;
  let padRows = 0;
  let counted = 0;
  for (let i = 0; i < batch.length; i++) {
    const r = batch[i]!;
    if (uncounted?.has(r)) {
      padRows += r.batchSize;
      continue;
    }
    rows += r.batchSize;
    counted++;
    r.joinExecution(ex, i);
  }
  if (opts.queuedBehind) {
    if (counted > 0) pool.whenQueuedBatchStarts(instance, () => (stats.pending -= counted));
  } else stats.pending -= counted;
  // One reading when execute resolves serves as the compute end and every request's end.
  let end: number | undefined;
  try {
    const t = (await instance.execute(batch)) as ExecutionTimes | undefined;
    end = clock.nowNs();
    ex.times = t
      ? { input: t.computeInputNs, infer: t.computeInferNs, output: t.computeOutputNs }
      : { input: 0, infer: end - ex.startNs, output: 0 };
    ex.waitNs = t?.waitNs ?? 0;
  } catch (err) {
    const e = asTsiError(err);
    ctx.log.verbose(1, `model '${ctx.modelName}' version ${ctx.version} failed to execute a batch of ${batch.length}: ${e.message}`);
    for (const r of batch) if (!r.completed) r.send(e, true);
  } finally {
    ex.executed = true;
    stats.recordExecution(rows + padRows, ex.times, rows);
    end ??= clock.nowNs();
    const epochMs = clock.epochMs();
    for (let i = 0; i < batch.length; i++) {
      const r = batch[i]!;
      if (uncounted?.has(r)) continue;
      // Released for another run: back to the scheduler (before the instance is freed, so the pool's
      // next dispatch sees it), or Triton's refusal where the model cannot take requests back.
      if (r.rescheduled) {
        r.rescheduled = false;
        if (!r.completed) {
          if (r.onRelease) r.onRelease(true);
          else refuseReschedule(ctx, r);
          continue;
        }
      }
      r.onRelease?.(false);
      if (r.completed) ex.settle(r, ex.failed(i), end, epochMs);
      else if (!ctx.decoupled) {
        r.send(new TsiError('INTERNAL', `model '${ctx.modelName}' returned no response for request '${r.id}'`), true);
      }
    }
    // The pool first: the instance's next batch (if any) is staged before the resources go back, so
    // the limiter chooses among every waiting instance, this one included, as Triton's OnRelease does.
    pool.release(instance);
    gate?.release(instance);
    if (ex.held !== undefined) ex.deliverHeld();
  }
}

const RESCHEDULE_REFUSED = 'Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.';

/** Triton logs the failed release and releases the request; tsi also answers it, so no client waits forever. */
function refuseReschedule(ctx: SchedulerContext, r: PendingRequest): void {
  ctx.log.error(`Failed to release request: ${RESCHEDULE_REFUSED}`);
  r.send(new TsiError('INVALID_ARG', RESCHEDULE_REFUSED), true);
}

function hasCancelled(batch: PendingRequest[]): boolean {
  for (let i = 0; i < batch.length; i++) if (batch[i]!.cancelled) return true;
  return false;
}

/** Answers the batch's cancelled requests with CANCELLED and returns the others. */
/** Answers a request its client cancelled before it ran: a CANCELED failure in the statistics, Triton's CANCELLED. */
export function answerCancelled(ctx: SchedulerContext, r: PendingRequest, now: number, epochMs: number): void {
  ctx.stats.recordFailure(now - r.receivedNs, 'CANCELED', epochMs);
  ctx.stats.inflight--;
  r.send(new TsiError('CANCELLED', `${requestPrefix(r.id)}Request was cancelled`), true);
}

function dropCancelled(ctx: SchedulerContext, batch: PendingRequest[], behindOf: InstancePool | undefined, instance: BackendInstance): PendingRequest[] {
  const keep: PendingRequest[] = [];
  const now = ctx.clock.nowNs();
  const epochMs = ctx.clock.epochMs();
  let dropped = 0;
  for (const r of batch) {
    if (!r.cancelled) {
      keep.push(r);
      continue;
    }
    dropped++;
    answerCancelled(ctx, r, now, epochMs);
  }
  if (behindOf) behindOf.whenQueuedBatchStarts(instance, () => (ctx.stats.pending -= dropped));
  else ctx.stats.pending -= dropped;
  return keep;
}
