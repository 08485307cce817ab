/**
 * The sequence batcher (reference §C.6, §D.6): stateful models see every request of a sequence on the
 * same instance and batch slot. Each instance has slots (direct: max(1, max_batch_size); oldest:
 * max_candidate_sequences); a START binds its sequence to the free slot with the lowest index (ties to
 * the lowest instance, so sequences spread over instances), later requests follow it there, END frees
 * it for the oldest backlogged sequence, and sequences idle longer than max_sequence_idle_microseconds
 * are reaped. Before execution each request gets the control inputs (START/END/READY/CORRID) and the
 * implicit state inputs; its state outputs are captured for the sequence's next step.
 *
 * - direct: one batch per instance at a time; row i is slot i, empty lower slots are padding copies of
 *   a real request with READY=0 whose responses go nowhere.
 * - oldest: per instance, `decideBatch` over the head request of each candidate sequence, oldest
 *   first, so one sequence never has two requests in a batch.
 */

import type { BackendInstance, ResponsePayload } from '../backend.js';
import { decideBatch, batchPolicy, compatible, WakeTimer, type BatchPolicy } from './batcher.js';
import { TsiError, invalidArg, unsupported } from '../errors.js';
import type { ConfigDataType, ModelConfig, SequenceControl } from '../config/model-config.js';
import { requestPrefix, type PendingRequest, type SequenceId } from '../request.js';
import { InstancePool, STOPPING_MESSAGE, answerCancelled, runExecution, type Scheduler, type SchedulerContext } from './scheduler.js';
import { allocate, elementCount, encodeString } from '../tensor.js';
import type { DataType, NumericArray, Tensor } from '../types.js';

type ControlKind = 'START' | 'END' | 'READY' | 'CORRID';

interface ControlSpec {
  name: string;
  kind: ControlKind;
  datatype: DataType;
  /** The false and true values (0/1 for BOOL); unused for CORRID. */
  values: [number, number];
}

interface StateSpec {
  input: string;
  output: string;
  datatype: DataType;
  /** Per-request shape of the initial state, batch dimension included where the model batches. */
  shape: number[];
}

interface Sequence {
  key: string;
  id: SequenceId;
  slot?: Slot;
  /** Its place in the backlog while it waits for a slot. */
  backlog?: BacklogEntry;
  /** Implicit state by input name; undefined until the first step answered. */
  state?: Map<string, Tensor>;
  lastNs: number;
  /** Requests queued or executing: a busy sequence is never reaped. */
  open: number;
  ended: boolean;
}

interface BacklogEntry {
  key: string;
  items: Item[];
  /** When its requests' shortest timeout runs out (clock ns), if any set one. */
  expiresNs?: number;
}

interface Item {
  req: PendingRequest;
  seq: Sequence;
  /** Set once the item waits in a slot's queue. */
  slot?: Slot;
  /** Whether the request's sink already carries the sequence's wrapper (a rescheduled request runs again). */
  prepared?: boolean;
}

interface Slot {
  lane: Lane;
  index: number;
  /** Key of the sequence bound to this slot, if any. */
  key?: string;
  queue: Item[];
}

interface Lane {
  instance: BackendInstance;
  slots: Slot[];
  timer: WakeTimer;
  /** Oldest strategy: sequence heads to wait for before this instance's first batch (SchedulerDelay). */
  holdFor: number;
  /** Set once an instance update removed the instance: called when its last sequence is gone. */
  retired?: () => void;
}

const datatypeOf = (t: ConfigDataType | undefined): DataType =>
  t === 'TYPE_STRING' ? 'BYTES' : ((t ?? 'TYPE_INVALID').slice(5) as DataType);

/** Inputs the sequence batcher supplies itself (controls and implicit state): clients must not send them. */
export function sequenceInternalInputs(config: ModelConfig): Set<string> {
  const sb = config.sequence_batching;
  const names = new Set<string>();
  for (const c of sb?.control_input ?? []) if (c.name) names.add(c.name);
  for (const s of sb?.state ?? []) if (s.input_name) names.add(s.input_name);
  return names;
}

function controlSpec(model: string, name: string, c: SequenceControl): ControlSpec {
  const kind = (c.kind ?? 'CONTROL_SEQUENCE_START').replace('CONTROL_SEQUENCE_', '') as ControlKind;
  if (kind === 'CORRID') {
    const datatype = datatypeOf(c.data_type ?? 'TYPE_UINT64');
    if (!['UINT64', 'INT64', 'UINT32', 'INT32', 'BYTES'].includes(datatype)) {
      throw unsupported(`sequence batching control '${name}' of model '${model}': CORRID data type ${c.data_type} is not supported`);
    }
    return { name, kind, datatype, values: [0, 0] };
  }
  const pair = (v: unknown[] | undefined) => (v && v.length === 2 ? (v.map((x) => Number(x)) as [number, number]) : undefined);
  const i32 = pair(c.int32_false_true);
  if (i32) return { name, kind, datatype: 'INT32', values: i32 };
  const f32 = pair(c.fp32_false_true);
  if (f32) return { name, kind, datatype: 'FP32', values: f32 };
  const b = pair(c.bool_false_true);
  if (b) return { name, kind, datatype: 'BOOL', values: [b[0] ? 1 : 0, b[1] ? 1 : 0] };
  throw invalidArg(
    `sequence batching control '${name}' of model '${model}' must specify int32_false_true, fp32_false_true or bool_false_true`,
  );
}

export class SequenceBatcher implements Scheduler {
  private readonly model: string;
  private readonly batching: boolean;
  private readonly oldest: boolean;
  private readonly policy: BatchPolicy;
  private readonly directDelayNs: number;
  private readonly minUtilization: number;
  private readonly idleNs: number;
  /** iterative_sequence: requests without a correlation ID get one, and a model may run a request again. */
  private readonly iterative: boolean;
  private nextIterativeId = 1n;
  private readonly controls: ControlSpec[] = [];
  private readonly states: StateSpec[] = [];
  private readonly stateOutputNames: string[];
  private readonly pool: InstancePool;
  private readonly perInstance: number;
  private readonly lanes: Lane[] = [];
  private readonly freeSlots: Slot[] = [];
  private readonly seqs = new Map<string, Sequence>();
  private readonly backlog: BacklogEntry[] = [];
  private readonly reaper: WakeTimer;
  private stopping = false;
  /** Only sequences in progress may go on (a stopping server); see `closeSequences`. */
  private closing = false;
  private drained?: () => void;
  private dispatching = false;
  private again = false;
  /** Direct strategy: slot-queued and backlogged requests to wait for (SchedulerDelay); 0 once reached. */
  private holdFor: number;
  private readonly backlogHoldFor: number;

  constructor(private readonly ctx: SchedulerContext) {
    const { config } = ctx;
    const sb = config.sequence_batching ?? {};
    this.model = ctx.modelName;
    const maxBatch = Math.max(0, Number(config.max_batch_size ?? 0));
    this.batching = maxBatch > 0;
    this.oldest = sb.oldest !== undefined;
    this.policy = batchPolicy(config, sb.oldest ?? {});
    this.directDelayNs = Number(sb.direct?.max_queue_delay_microseconds ?? 0) * 1000;
    this.minUtilization = Number(sb.direct?.minimum_slot_utilization ?? 0);
    this.idleNs = (Number(sb.max_sequence_idle_microseconds ?? 0) || 1_000_000) * 1000;
    this.iterative = sb.iterative_sequence === true;
    for (const ci of sb.control_input ?? []) {
      for (const c of ci.control ?? []) this.controls.push(controlSpec(this.model, ci.name ?? '', c));
    }
    for (const s of sb.state ?? []) {
      const init = s.initial_state?.[0];
      if (init?.data_file) {
        throw unsupported(`initial_state '${init.name ?? ''}' of model '${this.model}': data_file is not supported, use zero_data`);
      }
      const dims = (init?.dims ?? s.dims ?? []).map((d) => (d < 0 ? 1 : Number(d)));
      this.states.push({
        input: s.input_name!, output: s.output_name!, datatype: datatypeOf(s.data_type),
        shape: this.batching ? [1, ...dims] : dims,
      });
    }
    this.stateOutputNames = this.states.map((s) => s.output);
    const perInstance = this.oldest
      ? Number(sb.oldest?.max_candidate_sequences ?? 0) || Math.max(1, maxBatch)
      : Math.max(1, maxBatch);
    // Triton's oldest strategy hands sequences to a dynamic batcher per instance, and the hook holds
    // each of those; the direct strategy holds all instances on one shared count (and the backlog).
    const hold = Math.max(0, ctx.delay?.requests ?? 0);
    this.holdFor = this.oldest ? 0 : hold;
    this.backlogHoldFor = this.oldest ? 0 : Math.max(0, ctx.delay?.backlog ?? 0);
    this.perInstance = perInstance;
    this.pool = new InstancePool(ctx.instances, () => this.dispatch());
    for (const instance of ctx.instances) this.lanes.push(this.lane(instance, this.oldest ? hold : 0));
    // Slot 0 of every instance first, then slot 1, ...: sequences spread over instances.
    for (let i = 0; i < perInstance; i++) for (const lane of this.lanes) this.freeSlots.push(lane.slots[i]!);
    this.reaper = new WakeTimer(ctx.clock, () => this.reap());
  }

  private lane(instance: BackendInstance, holdFor: number): Lane {
    const timer = new WakeTimer(this.ctx.clock, () => this.dispatch());
    const lane: Lane = { instance, slots: [], timer, holdFor };
    for (let i = 0; i < this.perInstance; i++) lane.slots.push({ lane, index: i, queue: [] });
    return lane;
  }

  /** New instances' slots serve the backlog first, then join the free list in its order. */
  addInstances(instances: readonly BackendInstance[]): void {
    for (const instance of instances) {
      const lane = this.lane(instance, 0);
      this.lanes.push(lane);
      this.pool.add(instance);
      for (const slot of lane.slots) this.offer(slot);
    }
    this.dispatch();
  }

  /**
   * As Triton: a removed instance takes no new sequence, and the sequences bound to it go on there
   * until they end (or are reaped); then it leaves. Its free slots leave the free list at once.
   */
  retireInstance(instance: BackendInstance): { done: Promise<void>; lingers: boolean } {
    const lane = this.lanes.find((l) => l.instance === instance);
    if (!lane) return { done: this.pool.retire(instance), lingers: false };
    for (const slot of lane.slots) {
      const at = this.freeSlots.indexOf(slot);
      if (at >= 0) this.freeSlots.splice(at, 1);
    }
    const lingers = lane.slots.some((s) => s.key !== undefined || s.queue.length > 0);
    const done = new Promise<void>((resolve) => (lane.retired = resolve));
    this.leaveIfIdle(lane);
    return { done, lingers };
  }

  /** A retired lane with no sequence bound and nothing queued leaves, once its instance's batch is over. */
  private leaveIfIdle(lane: Lane): void {
    const retired = lane.retired;
    if (!retired || lane.slots.some((s) => s.key !== undefined || s.queue.length > 0)) return;
    lane.retired = undefined;
    this.lanes.splice(this.lanes.indexOf(lane), 1);
    // A dispatch pass iterating the lanes would skip the one after it: go round again.
    if (this.dispatching) this.again = true;
    lane.timer.clear();
    void this.pool.retire(lane.instance).then(retired);
  }

  enqueue(r: PendingRequest): void {
    const { clock, stats, log } = this.ctx;
    // Triton's sequence batcher texts carry no request-id prefix (clients match them with startswith).
    const prefix = requestPrefix(r.id);
    const fail = (e: TsiError) => r.send(e, true);
    if (this.stopping) return fail(new TsiError('UNAVAILABLE', STOPPING_MESSAGE));
    if (this.iterative && (!r.sequence || r.sequence.id === 0n || r.sequence.id === '')) {
      // Triton's IterativeSequencer: a sequence of its own, started by this request.
      r.sequence = { id: this.nextIterativeId++, start: true, end: false };
    }
    const flags = r.sequence;
    if (!flags || flags.id === 0n || flags.id === '') {
      return fail(invalidArg(`inference request to model '${this.model}' must specify a non-zero or non-empty correlation ID`));
    }
    if (r.batchSize !== 1) {
      return fail(invalidArg(`inference request to model '${this.model}' must specify batch-size 1 due to requirements of sequence batcher`));
    }
    const corrid = this.controls.find((c) => c.kind === 'CORRID');
    // A string id needs a BYTES control, a numeric one an integer control: Triton's text for either.
    const idType = typeof flags.id === 'string' ? 'BYTES' : 'UINT64';
    if (corrid && (idType === 'BYTES') !== (corrid.datatype === 'BYTES')) {
      return fail(invalidArg(`${prefix}sequence batching control '${corrid.name}' data-type is '${idType}', but model '${this.model}' expects '${corrid.datatype}'`));
    }
    const key = typeof flags.id === 'bigint' ? `n${flags.id}` : `s${flags.id}`;
    let seq = this.seqs.get(key);
    if (this.closing && (flags.start || !seq)) return fail(new TsiError('UNAVAILABLE', STOPPING_MESSAGE));
    if (!flags.start && !seq) {
      return fail(invalidArg(`inference request for sequence ${flags.id} to model '${this.model}' must specify the START flag on the first request of the sequence`));
    }
    const now = clock.nowNs();
    if (flags.start) {
      if (seq) {
        log.warn(`sequence ${flags.id} for model '${this.model}' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.`);
      }
      // A restarted id keeps its slot (or backlog place); its old requests still run with the old state.
      seq = { key, id: flags.id, slot: seq?.slot, backlog: seq?.backlog, lastNs: now, open: 0, ended: false };
      this.seqs.set(key, seq);
    }
    seq = seq!;
    seq.lastNs = now;
    seq.open++;
    r.enqueuedNs = now;
    stats.pending++;
    stats.inflight++;
    const item: Item = { req: r, seq };
    if (this.iterative) r.onRelease = (again) => (again ? this.requeue(item) : this.release(item));
    r.onCancel(() => this.cancelSequence(item));
    this.place(item);
    // As Triton, the correlation ID is free again once its END is queued, not once it has run: a
    // START with the same ID meanwhile is a new sequence (backlogged when no slot is free).
    if (flags.end && this.seqs.get(key) === seq) this.seqs.delete(key);
    this.dispatch();
  }

  /**
   * A client cancelled a request still waiting (in its slot's queue or the backlog): as in Triton, the
   * whole sequence is cancelled — every request of it still waiting is answered CANCELLED, and the
   * sequence ends, freeing its slot for the backlog. A request already executing is left to finish.
   */
  private cancelSequence(item: Item): void {
    const { seq } = item;
    const mine = (i: Item) => i.seq === seq;
    const slotQueue = item.slot?.queue;
    const entry = slotQueue ? undefined : this.backlog.find((b) => b.items.some(mine));
    const from = slotQueue ?? entry?.items;
    if (!from || !from.includes(item)) return;
    const dropped = from.filter(mine);
    const kept = from.filter((i) => !mine(i));
    from.splice(0, from.length, ...kept);
    if (entry && kept.length === 0) this.backlog.splice(this.backlog.indexOf(entry), 1);
    const now = this.ctx.clock.nowNs();
    const epochMs = this.ctx.clock.epochMs();
    this.ctx.log.verbose(1, `sequence ${seq.id} of model '${this.model}' cancelled: ${dropped.length} waiting request(s) cancelled`);
    for (const i of dropped) {
      this.ctx.stats.pending--;
      seq.open--;
      answerCancelled(this.ctx, i.req, now, epochMs);
    }
    if (this.seqs.get(seq.key) === seq) this.seqs.delete(seq.key);
    seq.ended = true;
    const slot = seq.slot;
    seq.slot = undefined;
    if (slot) this.maybeRelease(slot);
    this.dispatch();
  }

  private place(item: Item): void {
    const { seq } = item;
    const key = seq.key;
    if (seq.slot) {
      item.slot = seq.slot;
      seq.slot.queue.push(item);
    } else if (this.freeSlots.length > 0 && !seq.backlog) {
      this.bind(this.freeSlots.shift()!, key, [item]);
    } else {
      if (!seq.backlog) {
        seq.backlog = { key, items: [] };
        this.backlog.push(seq.backlog);
      }
      seq.backlog.items.push(item);
      // A backlogged sequence lives as long as its requests' shortest timeout (Triton's backlog expiry).
      const t = item.req.timeoutUs;
      if (t > 0) {
        const at = item.req.enqueuedNs + t * 1000;
        if (seq.backlog.expiresNs === undefined || at < seq.backlog.expiresNs) seq.backlog.expiresNs = at;
      }
    }
  }

  /**
   * A request the model released with RESCHEDULE: it runs again in its sequence's slot, neither START
   * nor END (Triton clears both), still open, so the reaper leaves it alone meanwhile. Unless the run
   * outlasted max_sequence_idle: Triton's reaper would have ended the sequence by now, so it ends
   * here, and the request is refused as a continuation without START.
   */
  private requeue(item: Item): void {
    const { req, seq } = item;
    const now = this.ctx.clock.nowNs();
    // Triton's reaper ends a sequence idle past max_sequence_idle since its last request was queued,
    // busy or not; the rescheduled request then has no START for a sequence that is gone.
    if (now - seq.lastNs >= this.idleNs) {
      this.release(item);
      req.send(invalidArg(`inference request for sequence ${seq.id} to model '${this.model}' must specify the START flag on the first request of the sequence`), true);
      return;
    }
    req.sequence = { id: seq.id, start: false, end: false };
    req.enqueuedNs = now;
    seq.lastNs = now;
    this.ctx.stats.pending++;
    if (!this.seqs.has(seq.key)) {
      seq.ended = false;
      this.seqs.set(seq.key, seq);
    }
    this.place(item);
  }

  /** An iterative request released for good ends its sequence (Triton enqueues a cancelled END for it). */
  private release(item: Item): void {
    const { seq } = item;
    if (this.seqs.get(seq.key) === seq) this.seqs.delete(seq.key);
    seq.ended = true;
    const slot = seq.slot;
    seq.slot = undefined;
    if (slot) this.maybeRelease(slot);
  }

  queued(): number {
    let n = 0;
    for (const lane of this.lanes) for (const s of lane.slots) n += s.queue.length;
    for (const b of this.backlog) n += b.items.length;
    return n;
  }

  private bind(slot: Slot, key: string, items: Item[]): void {
    slot.key = key;
    for (const item of items) {
      // The sequence (and one it restarted, sharing its place) may have queued its END already.
      item.seq.slot = slot;
      item.seq.backlog = undefined;
      item.slot = slot;
      slot.queue.push(item);
    }
  }

  /** Frees a slot whose sequence is gone and whose queue is empty, handing it to the backlog first. */
  private maybeRelease(slot: Slot): void {
    if (slot.key === undefined || slot.queue.length > 0) return;
    if (this.seqs.get(slot.key)?.slot === slot) return;
    slot.key = undefined;
    if (slot.lane.retired) this.leaveIfIdle(slot.lane);
    else this.offer(slot);
  }

  /** An empty slot goes to the oldest backlogged sequence, else to the free list. */
  private offer(slot: Slot): void {
    const next = this.backlog.shift();
    if (next) this.bind(slot, next.key, next.items);
    else {
      // Keep the free list in (slot index, instance) order.
      const at = this.freeSlots.findIndex((s) => s.index > slot.index
        || (s.index === slot.index && s.lane.instance.spec.index > slot.lane.instance.spec.index));
      this.freeSlots.splice(at < 0 ? this.freeSlots.length : at, 0, slot);
    }
  }

  private dispatch(): void {
    if (this.dispatching) {
      this.again = true;
      return;
    }
    this.dispatching = true;
    try {
      do {
        this.again = false;
        if (this.held()) break;
        for (const lane of this.lanes) this.dispatchLane(lane);
      } while (this.again);
    } finally {
      this.dispatching = false;
    }
    this.armReaper();
    if (this.stopping && this.drained && this.queued() === 0 && this.pool.busy === 0) this.drained();
  }

  /** The direct strategy's hold: slot queues (all instances) and the backlog under their counts. */
  private held(): boolean {
    if (this.holdFor === 0) return false;
    if (!this.stopping) {
      let slotted = 0;
      for (const lane of this.lanes) for (const s of lane.slots) slotted += s.queue.length;
      let backlogged = 0;
      for (const b of this.backlog) backlogged += b.items.length;
      if (slotted < this.holdFor || backlogged < this.backlogHoldFor) return true;
    }
    this.holdFor = 0;
    return false;
  }

  private dispatchLane(lane: Lane): void {
    if (!this.pool.isFree(lane.instance)) return;
    const now = this.ctx.clock.nowNs();
    const taken = this.oldest ? this.takeOldest(lane, now) : this.takeDirect(lane, now);
    if (!taken) return;
    const batch: PendingRequest[] = [];
    const padding = new Set<PendingRequest>();
    let template: PendingRequest | undefined;
    for (const item of taken) {
      if (item) {
        this.prepare(item);
        template ??= item.req;
      }
    }
    for (const item of taken) {
      if (item) batch.push(item.req);
      else {
        const pad = this.padding(template!);
        padding.add(pad);
        batch.push(pad);
      }
    }
    // Taken before any slot is released: a released slot may let a removed instance leave, which must
    // then wait for this batch.
    this.pool.acquireExact(lane.instance);
    for (const item of taken) if (item) this.maybeRelease(item.slot!);
    void runExecution(this.ctx, this.pool, lane.instance, batch, { uncounted: padding });
  }

  /** Direct: row i = slot i up to the highest slot with a queued request; undefined rows become padding. */
  private takeDirect(lane: Lane, now: number): (Item | undefined)[] | undefined {
    let hi = -1;
    let ready = 0;
    let oldestNs = Infinity;
    for (const s of lane.slots) {
      if (s.queue.length === 0) continue;
      hi = s.index;
      ready++;
      oldestNs = Math.min(oldestNs, s.queue[0]!.req.enqueuedNs);
    }
    if (hi < 0) return undefined;
    const d = this.directDelayNs;
    if (d > 0 && !this.stopping && ready < this.minUtilization * lane.slots.length && now - oldestNs < d) {
      lane.timer.at(oldestNs + d);
      return undefined;
    }
    const rows: (Item | undefined)[] = [];
    let first: PendingRequest | undefined;
    for (let i = 0; i <= hi; i++) {
      const head = lane.slots[i]!.queue[0];
      // Shape rules (§D.3) hold within a direct batch too: a mismatching slot waits for the next one.
      if (head && (!first || compatible(first, head.req, this.policy))) {
        first ??= head.req;
        rows.push(lane.slots[i]!.queue.shift());
      } else rows.push(undefined);
    }
    // Up to the highest slot with a queued request, even one left out for its shape: Triton pads it
    // with a null request, and the batch size (its statistics) counts it.
    return rows;
  }

  /** Oldest: the dynamic batcher's decision over each candidate sequence's head request. */
  private takeOldest(lane: Lane, now: number): Item[] | undefined {
    const heads = lane.slots.filter((s) => s.queue.length > 0);
    if (heads.length === 0) return undefined;
    if (lane.holdFor > 0) {
      if (heads.length < lane.holdFor && !this.stopping) return undefined;
      lane.holdFor = 0;
    }
    heads.sort((a, b) => a.queue[0]!.req.enqueuedNs - b.queue[0]!.req.enqueuedNs);
    const d = decideBatch(heads.map((s) => s.queue[0]!.req), now, this.policy, this.stopping);
    if (d.kind === 'wait') lane.timer.at(d.untilNs);
    if (d.kind !== 'execute') return undefined;
    return heads.slice(0, d.count).map((s) => s.queue.shift()!);
  }

  private control(spec: ControlSpec, value: boolean | SequenceId | undefined): Tensor {
    const shape = this.batching ? [1, 1] : [1];
    let data: Tensor['data'];
    if (spec.kind === 'CORRID') {
      const id = value as SequenceId | undefined;
      if (spec.datatype === 'BYTES') data = [encodeString(id === undefined ? '' : String(id))];
      else {
        const n = typeof id === 'bigint' ? id : 0n;
        if (spec.datatype === 'UINT64') data = BigUint64Array.of(BigInt.asUintN(64, n));
        else if (spec.datatype === 'INT64') data = BigInt64Array.of(BigInt.asIntN(64, n));
        else if (spec.datatype === 'UINT32') data = Uint32Array.of(Number(BigInt.asUintN(32, n)));
        else data = Int32Array.of(Number(BigInt.asIntN(32, n)));
      }
    } else {
      const v = spec.values[value ? 1 : 0];
      data = spec.datatype === 'INT32' ? Int32Array.of(v) : spec.datatype === 'FP32' ? Float32Array.of(v) : Uint8Array.of(v);
    }
    return { name: spec.name, datatype: spec.datatype, shape, data };
  }

  /** Adds controls and state to a request about to execute, and captures its state outputs. */
  private prepare(item: Item): void {
    const { req, seq } = item;
    const flags = req.sequence!;
    const first = item.prepared !== true;
    item.prepared = true;
    for (const c of this.controls) {
      const v = c.kind === 'START' ? flags.start : c.kind === 'END' ? flags.end : c.kind === 'READY' ? true : flags.id;
      req.inputs.set(c.name, this.control(c, v));
    }
    for (const s of this.states) req.inputs.set(s.input, seq.state?.get(s.input) ?? this.initialState(s));
    if (flags.end) {
      seq.ended = true;
      if (this.seqs.get(seq.key) === seq) this.seqs.delete(seq.key);
    }
    const strip = this.stateOutputNames.filter((n) => !req.requestedOutputs.includes(n));
    if (this.states.length > 0) req.stateOutputs = this.stateOutputNames;
    if (!first) return;
    req.wrapSink((inner) => (resp, final) => {
      if (!(resp instanceof TsiError)) {
        if (!seq.ended && this.states.length > 0) this.capture(seq, resp);
        if (strip.length > 0) resp = { ...resp, outputs: resp.outputs.filter((t) => !strip.includes(t.name)) };
      }
      if (final && --seq.open === 0) seq.lastNs = Math.max(seq.lastNs, this.ctx.clock.nowNs());
      inner(resp, final);
    });
  }

  /**
   * Copies state outputs: the backend may hand out views of a batch-wide buffer, and the next step may
   * transfer its inputs to a worker, so the state owns its bytes.
   */
  private capture(seq: Sequence, resp: ResponsePayload): void {
    for (const s of this.states) {
      const t = resp.outputs.find((o) => o.name === s.output);
      if (!t) continue;
      const data = Array.isArray(t.data) ? t.data.map((e) => e.slice()) : (t.data as NumericArray).slice();
      (seq.state ??= new Map()).set(s.input, { name: s.input, datatype: t.datatype, shape: [...t.shape], data });
    }
  }

  private initialState(s: StateSpec): Tensor {
    return { name: s.input, datatype: s.datatype, shape: s.shape, data: allocate(s.datatype, elementCount(s.shape)) };
  }

  /** A padding row for the direct strategy: a real request's inputs with READY (and the rest) false. */
  private padding(template: PendingRequest): PendingRequest {
    const inputs = new Map(template.inputs);
    for (const c of this.controls) inputs.set(c.name, this.control(c, c.kind === 'CORRID' ? undefined : false));
    const pad = template.derive({ inputs, sink: () => {}, requestedOutputs: [] });
    if (this.states.length > 0) pad.stateOutputs = this.stateOutputNames;
    return pad;
  }

  private armReaper(): void {
    for (const seq of this.seqs.values()) if (seq.slot && seq.open === 0) this.reaper.at(seq.lastNs + this.idleNs);
    for (const b of this.backlog) if (b.expiresNs !== undefined) this.reaper.at(b.expiresNs);
  }

  /**
   * Backlogged sequences whose timeout ran out before they got a slot: every request of theirs is
   * refused with Triton's text, and the ID is forgotten (a later request of it must START again).
   */
  private expireBacklog(now: number): void {
    for (let i = 0; i < this.backlog.length; i++) {
      const b = this.backlog[i]!;
      if (b.expiresNs === undefined || b.expiresNs > now) continue;
      this.backlog.splice(i--, 1);
      for (const { req, seq } of b.items) {
        seq.backlog = undefined;
        if (this.seqs.get(seq.key) === seq) this.seqs.delete(seq.key);
        seq.ended = true;
        seq.open--;
        this.ctx.stats.pending--;
        this.ctx.stats.inflight--;
        req.send(new TsiError('UNAVAILABLE', 'timeout of the corresponding sequence has been expired'), true);
      }
    }
  }

  /** Releases the slots of sequences idle longer than max_sequence_idle_microseconds. */
  private reap(): void {
    const now = this.ctx.clock.nowNs();
    this.expireBacklog(now);
    for (const seq of [...this.seqs.values()]) {
      if (!seq.slot || seq.open > 0 || now - seq.lastNs < this.idleNs) continue;
      this.ctx.log.verbose(1, `Reaper: sequence ${seq.id} of model '${this.model}': max sequence idle exceeded`);
      this.seqs.delete(seq.key);
      seq.ended = true;
      const slot = seq.slot;
      seq.slot = undefined;
      this.maybeRelease(slot);
    }
    this.dispatch();
  }

  liveSequences(): number {
    return this.seqs.size;
  }

  closeSequences(): void {
    this.closing = true;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    // Backlogged sequences cannot get a slot once clients can no longer end the running ones.
    for (const b of this.backlog.splice(0)) {
      for (const { req, seq } of b.items) {
        this.ctx.stats.pending--;
        this.ctx.stats.inflight--;
        seq.open--;
        req.send(new TsiError('UNAVAILABLE', STOPPING_MESSAGE), true);
      }
    }
    this.dispatch();
    if (this.queued() > 0 || this.pool.busy > 0) await new Promise<void>((r) => (this.drained = r));
    this.reaper.clear();
    for (const lane of this.lanes) {
      lane.timer.clear();
      // Nothing runs any more: instances kept for their sequences may go now.
      lane.retired?.();
      lane.retired = undefined;
    }
  }
}
