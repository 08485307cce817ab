/**
 * Load generation for `tsi-node perf`: a fixed number of requests in flight (concurrency mode, a
 * closed loop), or requests started on a schedule (request-rate mode, constant or Poisson gaps, an open
 * loop). Each completed request leaves a record of when it started and ended and where its time went;
 * the profiler cuts measurement windows out of those records. Sequence models get per-sequence
 * ordering: one request of a sequence in flight at a time, flags start/end set as perf_analyzer does.
 */

import type { InferenceClient } from '../../client/inference-client.js';
import type { InferInputSpec, InferOptions } from '../../client/types.js';
import { InferenceServerError } from '../../client/errors.js';
import type { WireSender } from './wire.js';

export interface RequestRecord {
  startNs: number;
  endNs: number;
  sendNs: number;
  recvNs: number;
}

export interface SequenceOptions {
  length: number;
  /** ± percent applied to each sequence's length (perf_analyzer's --sequence-length-variation). */
  variationPct: number;
  idStart: number;
  idEnd: number;
}

export interface LoadOptions {
  client: InferenceClient;
  model: string;
  version?: string;
  inputSets: InferInputSpec[][];
  callOptions: InferOptions;
  sequences?: SequenceOptions;
  /** Pre-encoded requests on raw connections (wire.ts); used for every request outside a sequence. */
  wire?: WireSender;
}

const nowNs = () => performance.now() * 1e6;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One sequence in progress: its id and how many requests are left (0 ⇒ start a new one). */
class SequenceSlot {
  id = 0;
  left = 0;
  busy = false;
}

export class LoadRunner {
  records: RequestRecord[] = [];
  /** First failed request; the profiler stops on it, as perf_analyzer does. */
  error?: InferenceServerError;
  sent = 0;
  /** Request-rate mode: requests that could not start on time (all sequence slots / threads busy). */
  delayed = 0;
  private stopped = false;
  private readonly loops: Promise<void>[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private nextSet = 0;
  private nextSeqId: number;
  private readonly slots: SequenceSlot[] = [];

  constructor(private readonly o: LoadOptions) {
    this.nextSeqId = o.sequences?.idStart ?? 1;
  }

  private nextIndex(): number {
    const i = this.nextSet;
    this.nextSet = (this.nextSet + 1) % this.o.inputSets.length;
    return i;
  }

  private sequenceFlags(slot: SequenceSlot): Partial<InferOptions> {
    const s = this.o.sequences!;
    let start = false;
    if (slot.left === 0) {
      slot.id = this.nextSeqId;
      this.nextSeqId = this.nextSeqId >= s.idEnd ? s.idStart : this.nextSeqId + 1;
      const v = s.length * (s.variationPct / 100);
      slot.left = Math.max(1, Math.round(s.length + (Math.random() * 2 - 1) * v));
      start = true;
    }
    slot.left--;
    return { sequenceId: slot.id, sequenceStart: start, sequenceEnd: slot.left === 0 };
  }

  /** Sends one request and records it; never throws (failures land in `error`). */
  private async one(slot?: SequenceSlot, record = true): Promise<void> {
    const wire = slot ? undefined : this.o.wire;
    const opts: InferOptions | undefined = wire ? undefined : { ...this.o.callOptions, version: this.o.version, ...(slot ? this.sequenceFlags(slot) : {}) };
    const set = this.nextIndex();
    this.sent++;
    const t0 = nowNs();
    try {
      const timing = wire ? await wire.send(set) : (await this.o.client.infer(this.o.model, this.o.inputSets[set]!, opts)).timing;
      const t1 = nowNs();
      if (record) this.records.push({ startNs: t0, endNs: t1, sendNs: timing.sendNs, recvNs: timing.recvNs });
    } catch (err) {
      this.error ??= err instanceof InferenceServerError ? err : new InferenceServerError({ source: 'client', status: 0, message: String(err) });
      this.stopped = true;
    }
  }

  /** Sends `n` requests one after another, unrecorded (warm-up). */
  async warmup(n: number): Promise<void> {
    const slot = this.newSlot();
    for (let i = 0; i < n && !this.stopped; i++) await this.one(slot, false);
    await this.closeSequences();
  }

  private newSlot(): SequenceSlot | undefined {
    if (!this.o.sequences) return undefined;
    const s = new SequenceSlot();
    this.slots.push(s);
    return s;
  }

  /** Ends every unfinished sequence with one last request, so it does not hold a server slot. */
  private async closeSequences(): Promise<void> {
    const open = this.slots.filter((s) => s.left > 0);
    this.slots.length = 0;
    await Promise.all(open.map((s) => {
      s.left = 1;
      return this.one(s, false);
    }));
  }

  /** Keeps `n` requests in flight until stop(). */
  startConcurrency(n: number): void {
    for (let w = 0; w < n; w++) {
      const slot = this.newSlot();
      this.loops.push((async () => {
        while (!this.stopped) await this.one(slot);
      })());
    }
  }

  /**
   * Starts requests at `rate` per second until stop(). `maxInFlight` bounds outstanding requests
   * (--sync: perf_analyzer's threads each wait for their answer); `numSequences` slots serve sequence models.
   */
  startRate(rate: number, distribution: 'constant' | 'poisson', maxInFlight: number, numSequences: number): void {
    const slots = this.o.sequences ? Array.from({ length: numSequences }, () => this.newSlot()!) : [];
    let rr = 0;
    const freeSlot = (): SequenceSlot | undefined => {
      for (let k = 0; k < slots.length; k++) {
        const s = slots[(rr + k) % slots.length]!;
        if (!s.busy) {
          rr = (rr + k + 1) % slots.length;
          return s;
        }
      }
      return undefined;
    };
    const gapNs = () => (distribution === 'constant' ? 1e9 / rate : (-Math.log(1 - Math.random()) * 1e9) / rate);
    let backlog = 0;
    const fire = () => {
      const slot = this.o.sequences ? freeSlot() : undefined;
      if ((this.o.sequences && !slot) || this.inflight.size >= maxInFlight) {
        backlog++;
        this.delayed++;
        return;
      }
      if (slot) slot.busy = true;
      const p: Promise<void> = this.one(slot).then(() => {
        if (slot) slot.busy = false;
        this.inflight.delete(p);
        if (backlog > 0 && !this.stopped) {
          backlog--;
          fire();
        }
      });
      this.inflight.add(p);
    };
    this.loops.push((async () => {
      let next = nowNs();
      while (!this.stopped) {
        const now = nowNs();
        // Timers are millisecond-grained: send everything whose time has come, then sleep to the next.
        while (next <= now && !this.stopped) {
          fire();
          next += gapNs();
        }
        const waitMs = (next - nowNs()) / 1e6;
        if (waitMs >= 1) await sleep(Math.floor(waitMs));
        else await new Promise<void>((r) => setImmediate(r));
      }
    })());
  }

  /** Stops sending, waits for requests in flight, and closes open sequences so server slots free up. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.loops);
    await Promise.all([...this.inflight]);
    this.loops.length = 0;
    await this.closeSequences();
  }

  /** Records whose start and end both lie in [fromNs, toNs] (perf_analyzer's valid requests). */
  window(fromNs: number, toNs: number): RequestRecord[] {
    return this.records.filter((r) => r.startNs >= fromNs && r.endNs <= toNs);
  }

  /** Requests completed since `fromNs` (count-window mode). */
  completedSince(fromNs: number): number {
    let n = 0;
    for (let i = this.records.length - 1; i >= 0 && this.records[i]!.endNs >= fromNs; i--) if (this.records[i]!.startNs >= fromNs) n++;
    return n;
  }
}
