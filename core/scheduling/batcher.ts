/**
 * The dynamic batcher (reference §C.5, §D.2–D.5). Two parts, kept apart on purpose:
 * - `decideBatch`, a pure function of (queue in service order, now, policy) that answers "execute the
 *   first N requests now" or "wait until T", following Triton's GetDynamicBatch: preferred sizes,
 *   max_queue_delay, max_batch_size, shape compatibility, requests counting by their own batch size.
 *   The sequence batcher's `oldest` strategy reuses it over its candidate sequences.
 * - `DynamicBatchScheduler`, which owns a RequestQueue (priorities, timeouts, max size), asks for a
 *   decision whenever an instance is free or a timer fires, and hands each batch to the first free
 *   instance. A batch is formed only when an instance can take it, so with the defaults (delay 0,
 *   preferred = [max]) a batch is "whatever is queued when an instance frees up", as in Triton.
 *
 * Backends receive the requests of a batch and answer each one; nothing is split here.
 */

import type { BackendInstance, ResponsePayload } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import { RequestQueue, timeoutExpiredError } from './queue.js';
import type { PendingRequest, ResponseSink } from '../request.js';
import { InstancePool, STOPPING_MESSAGE, runExecution, type Scheduler, type SchedulerContext } from './scheduler.js';
import type { Clock, Tensor } from '../types.js';

/** What the decision reads of a queued request. */
export interface BatchCandidate {
  readonly batchSize: number;
  readonly enqueuedNs: number;
  readonly inputs: ReadonlyMap<string, Tensor>;
}

export interface BatchPolicy {
  /** 0 = batching disabled: every request is an execution of its own. */
  maxBatchSize: number;
  /** Ascending, each ≤ maxBatchSize; empty means [maxBatchSize]. */
  preferredSizes: readonly number[];
  /** 0 = never wait for a fuller batch. */
  maxQueueDelayNs: number;
  /** Inputs whose shapes (and, for shape tensors, contents) must be equal within a batch (§D.3). */
  equalShapeInputs: readonly { name: string; shapeTensor: boolean }[];
  /** With optional inputs every request of a batch must supply the same set. */
  hasOptionalInputs: boolean;
}

export type BatchDecision =
  | { kind: 'execute'; count: number; rows: number }
  | { kind: 'wait'; untilNs: number }
  | { kind: 'empty' };

/** The batching policy of a config; `over` supplies the sequence batcher's `oldest` settings. */
export function batchPolicy(
  config: ModelConfig,
  over?: { preferred_batch_size?: number[]; max_queue_delay_microseconds?: number },
): BatchPolicy {
  const maxBatchSize = Math.max(0, Number(config.max_batch_size ?? 0));
  const src = over ?? config.dynamic_batching ?? {};
  const preferredSizes = [...new Set((src.preferred_batch_size ?? []).map(Number))]
    .filter((n) => n > 0 && n <= maxBatchSize)
    .sort((a, b) => a - b);
  const equalShapeInputs: { name: string; shapeTensor: boolean }[] = [];
  for (const i of config.input ?? []) {
    const variable = (i.dims ?? []).some((d) => d < 0) && i.allow_ragged_batch !== true;
    if (variable || i.is_shape_tensor) equalShapeInputs.push({ name: i.name!, shapeTensor: i.is_shape_tensor === true });
  }
  return {
    maxBatchSize,
    preferredSizes,
    maxQueueDelayNs: Number(src.max_queue_delay_microseconds ?? 0) * 1000,
    equalShapeInputs,
    hasOptionalInputs: (config.input ?? []).some((i) => i.optional === true),
  };
}

function sameShape(a: Tensor | undefined, b: Tensor | undefined, skipBatch: boolean, contents: boolean): boolean {
  if (!a || !b) return a === b;
  if (a.shape.length !== b.shape.length) return false;
  for (let d = skipBatch ? 1 : 0; d < a.shape.length; d++) if (a.shape[d] !== b.shape[d]) return false;
  if (!contents) return true;
  const x = a.data as ArrayLike<unknown>;
  const y = b.data as ArrayLike<unknown>;
  if (x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** Can `r` join a batch that `first` started? (§D.3) */
export function compatible(first: BatchCandidate, r: BatchCandidate, policy: BatchPolicy): boolean {
  const skipBatch = policy.maxBatchSize > 0;
  for (const { name, shapeTensor } of policy.equalShapeInputs) {
    if (!sameShape(first.inputs.get(name), r.inputs.get(name), skipBatch, shapeTensor)) return false;
  }
  if (policy.hasOptionalInputs) {
    if (first.inputs.size !== r.inputs.size) return false;
    for (const k of first.inputs.keys()) if (!r.inputs.has(k)) return false;
  }
  return true;
}

/**
 * Triton's GetDynamicBatch as a pure function. Scans at most max_batch_size + 1 requests. `flush`
 * treats the delay as exceeded (used while stopping, so draining does not wait for fuller batches).
 */
export function decideBatch(queue: Iterable<BatchCandidate>, nowNs: number, policy: BatchPolicy, flush = false): BatchDecision {
  const maxBatch = policy.maxBatchSize;
  if (maxBatch === 0) {
    for (const r of queue) return { kind: 'execute', count: 1, rows: Math.max(1, r.batchSize) };
    return { kind: 'empty' };
  }
  const preferred = policy.preferredSizes;
  const maxPreferred = preferred.length > 0 ? preferred[preferred.length - 1]! : maxBatch;
  const check = policy.equalShapeInputs.length > 0 || policy.hasOptionalInputs;
  let rows = 0;
  let count = 0;
  let bestRows = 0;
  let bestCount = 0;
  let oldestNs = Infinity;
  let sendNow = false;
  let first: BatchCandidate | undefined;
  for (const r of queue) {
    const b = Math.max(1, r.batchSize);
    if (count === 0) first = r;
    else {
      // Growing past every preferred size: remember what we have as the candidate, but keep scanning
      // so that, if the delay has already run out, the larger batch goes instead.
      if (rows + b > maxPreferred && bestRows === 0) {
        bestRows = rows;
        bestCount = count;
      }
      if (rows + b > maxBatch) {
        sendNow = true;
        break;
      }
      if (check && !compatible(first!, r, policy)) {
        sendNow = true;
        break;
      }
    }
    rows += b;
    count++;
    if (r.enqueuedNs < oldestNs) oldestNs = r.enqueuedNs;
    if (preferred.includes(rows)) {
      bestRows = rows;
      bestCount = count;
    }
  }
  if (count === 0) return { kind: 'empty' };
  const delay = policy.maxQueueDelayNs;
  const exceeded = flush || (delay !== 0 && nowNs - oldestNs >= delay);
  if (bestRows !== 0 && !exceeded) return { kind: 'execute', count: bestCount, rows: bestRows };
  if (sendNow || rows >= maxPreferred || exceeded || delay === 0) return { kind: 'execute', count, rows };
  return { kind: 'wait', untilNs: oldestNs + delay };
}

/** One re-armable wake-up on an injected clock; arming later than the pending one keeps the earlier. */
export class WakeTimer {
  private cancel?: () => void;
  private atNs = Infinity;

  constructor(private readonly clock: Clock, private readonly fire: () => void) {}

  at(ns: number): void {
    if (!Number.isFinite(ns) || ns >= this.atNs) return;
    this.clear();
    this.atNs = ns;
    this.cancel = this.clock.setTimer(() => {
      this.cancel = undefined;
      this.atNs = Infinity;
      this.fire();
    }, Math.max(0, (ns - this.clock.nowNs()) / 1e6));
  }

  clear(): void {
    this.cancel?.();
    this.cancel = undefined;
    this.atNs = Infinity;
  }
}

/**
 * Releases responses in the order requests were registered (Triton's preserve_ordering delegates
 * responses in the order requests leave the queue). A response of a later request is held until every
 * earlier request has sent its final response; the head request's responses pass straight through.
 */
export class ResponseOrderer {
  private readonly entries: { sink: ResponseSink; held: [ResponsePayload | TsiError, boolean][]; done: boolean }[] = [];
  private head = 0;

  register(r: PendingRequest): void {
    r.wrapSink((inner) => {
      const e = { sink: inner, held: [] as [ResponsePayload | TsiError, boolean][], done: false };
      this.entries.push(e);
      return (resp, final) => {
        if (this.entries[this.head] === e) {
          inner(resp, final);
          if (final) {
            e.done = true;
            this.advance();
          }
        } else {
          e.held.push([resp, final]);
          if (final) e.done = true;
        }
      };
    });
  }

  private advance(): void {
    while (this.head < this.entries.length && this.entries[this.head]!.done) {
      this.entries[this.head++] = undefined as never;
      const next = this.entries[this.head];
      if (next) for (const [resp, final] of next.held.splice(0)) next.sink(resp, final);
    }
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries.splice(0, this.head);
      this.head = 0;
    }
  }
}

/**
 * Triton's DynamicBatchScheduler. One queue per model version feeding all its instances. With
 * `batching: false` it is Triton's default scheduler (one request per execution, no queue policy).
 */
const SETTLED = Promise.resolve();

export class DynamicBatchScheduler implements Scheduler {
  private readonly queue: RequestQueue;
  private readonly policy: BatchPolicy;
  private readonly pool: InstancePool;
  private readonly orderer?: ResponseOrderer;
  private readonly timer: WakeTimer;
  private stopping = false;
  private drained?: () => void;
  private dispatching = false;
  private again = false;
  private dispatchQueued = false;
  private readonly queuedDispatch = (): void => {
    this.dispatchQueued = false;
    this.dispatch();
  };
  /**
   * Queueing a batch behind a busy instance takes it out of the policy queue early, so it is allowed
   * only where that cannot change what Triton would do: one priority level, no timeouts, no size cap.
   */
  private readonly mayQueueBehind: boolean;
  /** An instance waits for the rate limiter's grant (see runGranted). */
  private awaitingGrant = false;
  /** Queued requests to wait for before the first batch (SchedulerDelay); 0 once reached. */
  private holdFor: number;

  constructor(private readonly ctx: SchedulerContext, opts: { batching?: boolean } = {}) {
    const enabled = opts.batching ?? ctx.config.dynamic_batching !== undefined;
    this.queue = new RequestQueue(enabled ? ctx.config.dynamic_batching : undefined);
    this.policy = enabled ? batchPolicy(ctx.config) : { ...batchPolicy(ctx.config), maxBatchSize: 0 };
    if (enabled && ctx.config.dynamic_batching?.preserve_ordering) this.orderer = new ResponseOrderer();
    this.pool = new InstancePool(ctx.instances, () => this.dispatch());
    this.timer = new WakeTimer(ctx.clock, () => this.dispatch());
    // Triton's default scheduler has no batcher thread, so the hook holds batching models only.
    this.holdFor = enabled ? Math.max(0, ctx.delay?.requests ?? 0) : 0;
    const db = ctx.config.dynamic_batching;
    const p = db?.default_queue_policy;
    // Never with the rate limiter: each batch must win its instance's resources on its own.
    this.mayQueueBehind = ctx.rateLimit === undefined && (!db || (
      !(Number(db.priority_levels ?? 0) > 0) && Object.keys(db.priority_queue_policy ?? {}).length === 0
      && !(Number(p?.default_timeout_microseconds ?? 0) > 0) && !(Number(p?.max_queue_size ?? 0) > 0) && !p?.allow_timeout_override
    ));
  }

  enqueue(request: PendingRequest, nowNs?: number): void {
    const now = nowNs ?? this.ctx.clock.nowNs();
    if (this.stopping) {
      request.send(new TsiError('UNAVAILABLE', STOPPING_MESSAGE), true);
      return;
    }
    request.enqueuedNs = now;
    const err = this.queue.enqueue(request, now);
    if (err) {
      this.ctx.stats.recordFailure(now - request.receivedNs, 'REJECTED', this.ctx.clock.epochMs());
      request.send(err, true);
      return;
    }
    this.ctx.stats.pending++;
    this.ctx.stats.inflight++;
    // Dispatch after the current task's synchronous work: requests submitted together (an in-page
    // Promise.all, a burst read from one socket) then form one batch instead of "first alone, rest
    // together". Still no waiting: the microtask runs before any I/O or timer.
    if (!this.dispatchQueued) {
      this.dispatchQueued = true;
      // A settled promise's then() is the same microtask queue at a fraction of queueMicrotask's cost
      // (1-3 µs a call in Chromium, 0.6 µs in Node).
      void SETTLED.then(this.queuedDispatch);
    }
  }

  queued(): number {
    return this.queue.size;
  }

  addInstances(instances: readonly BackendInstance[]): void {
    for (const inst of instances) this.pool.add(inst);
  }

  /** The queue feeds every instance, so nothing is bound to the one leaving: it goes once its batch ends. */
  retireInstance(instance: BackendInstance): { done: Promise<void>; lingers: boolean } {
    return { done: this.pool.retire(instance), lingers: false };
  }

  /** Re-entrant calls (a response handler enqueueing, say) fold into the running loop. */
  private dispatch(): void {
    if (this.dispatching) {
      this.again = true;
      return;
    }
    this.dispatching = true;
    try {
      do {
        this.again = false;
        this.step();
      } while (this.again);
    } finally {
      this.dispatching = false;
    }
    if (this.stopping && this.drained && this.queue.size === 0 && this.pool.busy === 0) this.drained();
  }

  private step(): void {
    const { clock } = this.ctx;
    for (;;) {
      // Nothing queued: nothing can expire or run, and no clock reading is needed.
      if (this.queue.size === 0) return;
      // A batch waits for the rate limiter; it takes what queues until its grant.
      if (this.awaitingGrant) return;
      // Triton's held batcher neither batches nor expires; every enqueue re-checks the count.
      if (this.holdFor > 0) {
        if (this.queue.size < this.holdFor && !this.stopping) return;
        this.holdFor = 0;
      }
      const now = clock.nowNs();
      for (const r of this.queue.expire(now)) this.reject(r, now);
      if (this.queue.size === 0) return;
      // Expiry needs a wake-up even while every instance is busy, so rejections are not late.
      this.timer.at(this.queue.nextDeadlineNs());
      const free = this.pool.hasFree();
      // decideBatch reads at most max_batch_size + 1 requests (each counts at least one row).
      const d = decideBatch(this.queue.head(this.policy.maxBatchSize + 1), now, this.policy, this.stopping);
      if (d.kind !== 'execute') {
        if (d.kind === 'wait' && free) this.timer.at(d.untilNs);
        return;
      }
      // Every instance busy: queue a batch behind a running one only when it is already full; a
      // partial batch is better left to grow until an instance frees up.
      const full = this.policy.maxBatchSize === 0 || d.rows >= this.policy.maxBatchSize;
      const instance = free ? this.pool.acquire()! : full && this.mayQueueBehind ? this.pool.acquireBehind() : undefined;
      if (!instance) return;
      // Batching off (Triton's default scheduler): each request is its own payload, staged at once.
      const ask = this.ctx.rateLimit !== undefined && this.policy.maxBatchSize > 0;
      if (ask) {
        const granted = this.ctx.rateLimit!.acquire(instance);
        if (granted !== true) {
          // Triton's batcher forms its next payload only for an instance the limiter lets run, and
          // the payload keeps taking requests while it waits: the batch is formed at the grant, from
          // whatever has queued by then (up to max_batch_size), and no second batch waits beside it.
          this.awaitingGrant = true;
          void granted.then(() => this.runGranted(instance));
          return;
        }
      }
      const batch = this.queue.take(d.count);
      if (this.orderer) for (const r of batch) this.orderer.register(r);
      void runExecution(this.ctx, this.pool, instance, batch, { deferResponses: true, queuedBehind: !free, startNs: now, granted: ask });
    }
  }

  /** The rate limiter granted the waiting instance its resources: the batch is what has queued meanwhile. */
  private runGranted(instance: BackendInstance): void {
    this.awaitingGrant = false;
    const now = this.ctx.clock.nowNs();
    this.queue.expire(now).forEach((r) => this.reject(r, now));
    const d = decideBatch(this.queue.head(this.policy.maxBatchSize + 1), now, this.policy, true);
    if (d.kind !== 'execute') {
      // Everything it waited for expired meanwhile: the resources and the instance go back unused.
      this.pool.release(instance);
      this.ctx.rateLimit!.release(instance);
    } else {
      const batch = this.queue.take(d.count);
      if (this.orderer) for (const r of batch) this.orderer.register(r);
      void runExecution(this.ctx, this.pool, instance, batch, { deferResponses: true, startNs: now, granted: true });
    }
    this.dispatch();
  }

  private reject(r: PendingRequest, now: number): void {
    const { stats, clock } = this.ctx;
    stats.pending--;
    stats.inflight--;
    stats.recordFailure(now - r.receivedNs, 'REJECTED', clock.epochMs());
    r.send(timeoutExpiredError(), true);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.dispatch();
    if (this.queue.size === 0 && this.pool.busy === 0) {
      this.timer.clear();
      return;
    }
    await new Promise<void>((r) => (this.drained = r));
    this.timer.clear();
  }
}
