/**
 * The dynamic batcher's request queue with Triton's queue policies (scheduler_utils.cc, reference §D.5):
 * priority levels (1 = highest), a ModelQueuePolicy per level (timeout with REJECT or DELAY, timeout
 * override, max queue size). It lives apart from the batching decision so the decision stays a pure
 * function over "the queue in service order": every level's live requests, then that level's delayed
 * ones, then the next level. Expiry is lazy, as in Triton: the scheduler calls `expire(now)` before it
 * looks at the queue and arms a wake-up at `nextDeadlineNs()`.
 *
 * Single-threaded by construction (one scheduler owns one queue); nothing here awaits.
 */

import { TsiError } from '../errors.js';
import type { ModelDynamicBatching, ModelQueuePolicy } from '../config/model-config.js';
import { requestPrefix, type PendingRequest } from '../request.js';

export interface QueuePolicy {
  timeoutAction: 'REJECT' | 'DELAY';
  /** 0 = no timeout. */
  defaultTimeoutUs: number;
  allowTimeoutOverride: boolean;
  /** 0 = unbounded. */
  maxQueueSize: number;
}

export function queuePolicy(p: ModelQueuePolicy | undefined): QueuePolicy {
  return {
    timeoutAction: p?.timeout_action === 'DELAY' ? 'DELAY' : 'REJECT',
    defaultTimeoutUs: Number(p?.default_timeout_microseconds ?? 0),
    allowTimeoutOverride: p?.allow_timeout_override === true,
    maxQueueSize: Number(p?.max_queue_size ?? 0),
  };
}

export const queueFullError = (r: PendingRequest) =>
  new TsiError('UNAVAILABLE', `${requestPrefix(r.id)}Exceeds maximum queue size`);
/** Triton's text, bare whether or not the request has an id (its batchers answer with one shared status). */
export const timeoutExpiredError = () => new TsiError('UNAVAILABLE', 'Request timeout expired');

/** A FIFO with O(1) amortised shift, compacted lazily. */
class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }
  push(x: T): void {
    this.items.push(x);
  }
  at(i: number): T {
    return this.items[this.head + i]!;
  }
  shift(): T {
    const x = this.items[this.head]!;
    this.items[this.head++] = undefined;
    if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return x;
  }
  /** Removes every item `out` returns true for, keeping the order of the rest. */
  removeWhere(out: (x: T) => boolean): void {
    const kept: T[] = [];
    for (let i = this.head; i < this.items.length; i++) {
      const x = this.items[i]!;
      if (!out(x)) kept.push(x);
    }
    this.items = kept;
    this.head = 0;
  }
  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i]!;
  }
}

class Level {
  readonly live = new Fifo<PendingRequest>();
  /** DELAY'd requests: served after every live request of this level, never expire again. */
  readonly delayed = new Fifo<PendingRequest>();
  /** Earliest deadline among `live` (Infinity when none), so expiry scans only when one is due. */
  minDeadlineNs = Infinity;
  /** Its priority (1 = highest). */
  number = 1;

  constructor(readonly policy: QueuePolicy) {}

  get size(): number {
    return this.live.length + this.delayed.length;
  }
}

export class RequestQueue {
  /**
   * The levels that have held a request (and the default one), in service order. A config may name
   * up to UINT64_MAX levels (Triton's L0_model_queue does): a level exists once a request uses it.
   */
  private readonly levels: Level[] = [];
  private readonly byNumber = new Map<number, Level>();
  private readonly levelCount: number;
  private readonly defaultLevel: number;
  private readonly policyOf: (level: number) => QueuePolicy;
  private count = 0;

  /** `config` absent: one unbounded level without timeouts (the default scheduler's queue). */
  constructor(config?: ModelDynamicBatching) {
    const n = Number(config?.priority_levels ?? 0);
    const base = queuePolicy(config?.default_queue_policy);
    this.levelCount = Math.max(1, n);
    this.policyOf = (l) => {
      const own = n > 0 ? config?.priority_queue_policy?.[String(l)] : undefined;
      return own ? queuePolicy(own) : base;
    };
    const d = Number(config?.default_priority_level ?? 0);
    this.defaultLevel = d >= 1 && d <= this.levelCount ? d : this.levelCount;
    this.level(this.defaultLevel);
  }

  get size(): number {
    return this.count;
  }

  /** The level (1 = highest) of a request's `priority` parameter: 0 or out of range ⇒ the default level. */
  levelOf(priority: number): number {
    return priority >= 1 && priority <= this.levelCount ? priority : this.defaultLevel;
  }

  /** Level `l`, made (in its place in service order) the first time a request uses it. */
  private level(l: number): Level {
    let level = this.byNumber.get(l);
    if (!level) {
      level = new Level(this.policyOf(l));
      level.number = l;
      this.byNumber.set(l, level);
      let i = this.levels.length;
      while (i > 0 && this.levels[i - 1]!.number > l) i--;
      this.levels.splice(i, 0, level);
    }
    return level;
  }

  /**
   * Admits a request and sets its deadline, or returns the rejection (queue full) without keeping it.
   * The request's own `timeout` wins only when the level allows overrides and it is non-zero and
   * shorter than the level's default: Triton's rule, stricter than its docs read.
   */
  enqueue(r: PendingRequest, nowNs: number): TsiError | undefined {
    const level = this.level(this.levelOf(r.priority));
    const p = level.policy;
    if (p.maxQueueSize > 0 && level.size >= p.maxQueueSize) return queueFullError(r);
    let timeoutUs = p.defaultTimeoutUs;
    if (p.allowTimeoutOverride && r.timeoutUs !== 0 && r.timeoutUs < timeoutUs) timeoutUs = r.timeoutUs;
    r.deadlineNs = timeoutUs > 0 ? nowNs + timeoutUs * 1000 : 0;
    if (r.deadlineNs !== 0 && r.deadlineNs < level.minDeadlineNs) level.minDeadlineNs = r.deadlineNs;
    level.live.push(r);
    this.count++;
    return undefined;
  }

  /**
   * Applies the timeout policies at `nowNs`: REJECT'd requests leave the queue and are returned for
   * the caller to answer; DELAY'd ones move behind their level's live requests.
   */
  expire(nowNs: number): PendingRequest[] {
    const rejected: PendingRequest[] = [];
    for (const level of this.levels) {
      if (level.minDeadlineNs > nowNs) continue;
      let min = Infinity;
      level.live.removeWhere((r) => {
        if (r.deadlineNs === 0) return false;
        if (r.deadlineNs > nowNs) {
          if (r.deadlineNs < min) min = r.deadlineNs;
          return false;
        }
        r.deadlineNs = 0;
        if (level.policy.timeoutAction === 'REJECT') rejected.push(r);
        else level.delayed.push(r);
        return true;
      });
      level.minDeadlineNs = min;
    }
    this.count -= rejected.length;
    if (rejected.length > 0) this.prune();
    return rejected;
  }

  /** Forgets emptied levels but the default one, so clients' distinct priorities do not pile up. */
  private prune(): void {
    if (this.levels.length === 1) return;
    for (let i = this.levels.length - 1; i >= 0; i--) {
      const l = this.levels[i]!;
      if (l.size === 0 && l.number !== this.defaultLevel) {
        this.levels.splice(i, 1);
        this.byNumber.delete(l.number);
      }
    }
  }

  /** The nearest deadline still pending, Infinity if none. */
  nextDeadlineNs(): number {
    let min = Infinity;
    for (const l of this.levels) if (l.minDeadlineNs < min) min = l.minDeadlineNs;
    return min;
  }

  /** Requests in service order. Stop iterating early where you can: the batcher reads a prefix. */
  *[Symbol.iterator](): IterableIterator<PendingRequest> {
    for (const l of this.levels) {
      yield* l.live;
      yield* l.delayed;
    }
  }

  /**
   * The first `n` requests in service order, left in the queue: what the batcher reads (it needs at
   * most max_batch_size + 1), without the cost of iterating generators.
   */
  head(n: number): PendingRequest[] {
    const out: PendingRequest[] = [];
    for (const l of this.levels) {
      for (let i = 0; i < l.live.length && out.length < n; i++) out.push(l.live.at(i));
      for (let i = 0; i < l.delayed.length && out.length < n; i++) out.push(l.delayed.at(i));
      if (out.length === n) break;
    }
    return out;
  }

  /** Removes and returns the first `n` requests in service order. */
  take(n: number): PendingRequest[] {
    const out: PendingRequest[] = [];
    for (const l of this.levels) {
      while (out.length < n && l.live.length > 0) out.push(l.live.shift());
      while (out.length < n && l.delayed.length > 0) out.push(l.delayed.shift());
      if (out.length === n) break;
    }
    this.count -= out.length;
    this.prune();
    return out;
  }

  /** Empties the queue (shutdown paths), returning what was in it. */
  drain(): PendingRequest[] {
    return this.take(this.count);
  }
}
