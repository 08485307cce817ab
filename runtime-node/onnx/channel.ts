/**
 * The hand-off between the server's main thread and one onnxruntime worker (worker.ts), through
 * shared memory instead of postMessage. Profiles put postMessage at 20–29 % of the main thread's CPU
 * on `simple` and at a third of the worker's: every request and reply was a structured clone, a
 * MessagePort wake-up and a 'message' event on each side. Here a request is a few numbers and its
 * tensors' bytes written into a slot of one SharedArrayBuffer per instance, and a counter bumped and
 * notified; the other side wakes from `Atomics.waitAsync` (no event objects, no clone) and reads them.
 * The worker is notified only when it has said it is going to sleep: a notify to a registered
 * `waitAsync` posts a task to that thread's event loop and writes its eventfd (a syscall here, a
 * loop turn there; 11–18 µs of the notifier's time when the thread sleeps, on the 2-vCPU dev VM),
 * wasted while the worker still runs the batch before, since the scheduler pipelines the next one
 * behind it and the worker looks at every slot before it sleeps. With three batches outstanding,
 * 6–18 % of submits found it asleep (all of them notified before).
 *
 * Layout: a control block (two counters — requests written, replies written — and one state word per
 * slot), then SLOTS slots, each a descriptor of Float64 numbers followed by a data area. A slot
 * belongs to one request from `submit` until the main thread has read its reply (`FREE` again), so the
 * worker writes the reply's outputs over the request's inputs, which it has copied out by then.
 *
 * What does not fit goes through postMessage as before, in the same order (every request carries a
 * sequence number and the worker runs them strictly by it): string tensors, tensors bigger than a
 * slot's data area, and any request arriving while every slot is taken. onnxruntime-node rejects
 * typed arrays over a SharedArrayBuffer, so the worker copies inputs out of the slot into buffers it
 * keeps per input (no allocation per request), and the main thread copies outputs out of the slot
 * into buffers of their own: a reply's tensors may live on in a response cache or an ensemble long
 * after the slot is reused.
 */

/** onnxruntime-node's tensor types by code; the numeric ones with the typed array that holds them. */
const TYPES = ['float32', 'uint8', 'int8', 'uint16', 'int16', 'int32', 'int64', 'bool', 'float16', 'float64', 'uint32', 'uint64'] as const;
type TypedCtor = { new (b: ArrayBufferLike, off: number, len: number): ArrayLike<unknown> & { slice(): unknown; byteLength: number }; BYTES_PER_ELEMENT: number };
const CTORS: TypedCtor[] = [
  Float32Array, Uint8Array, Int8Array, Uint16Array, Int16Array, Int32Array, BigInt64Array, Uint8Array, Uint16Array,
  Float64Array, Uint32Array, BigUint64Array,
] as unknown as TypedCtor[];
const TYPE_CODE = new Map<string, number>(TYPES.map((t, i) => [t, i]));

const SLOTS = 4;
const CONTROL_BYTES = 64;
/** Descriptor numbers a slot holds: ample for any model's inputs or outputs with their dims. */
const DESC_NUMBERS = 1024;
const DESC_BYTES = DESC_NUMBERS * 8;
/**
 * A slot's data area. Beyond a few hundred KiB a copy through the slot costs more than it saves: the
 * main thread's copy out of it lands in fresh memory (page faults), where a transferred buffer moves
 * whole. conv_dense's hand-off, median µs a request (192 KiB in, 1 MiB out): all by postMessage 600,
 * input by slot and answer by transfer 504, both by slot 1037.
 */
export const SLOT_DATA_BYTES = 256 * 1024;
const SLOT_BYTES = DESC_BYTES + SLOT_DATA_BYTES;

const REQ_SEQ = 0;
const REP_SEQ = 1;
/** 1 while the worker is (about to be) parked waiting for requests: only then does `submit` notify it. */
const WORKER_IDLE = 2;
const STATE = 4;
const FREE = 0;
const REQUEST = 1;
const TAKEN = 2;
const REPLY = 3;

/** Reply descriptor status: outputs are in the slot, or the reply went by postMessage. */
const OK = 0;

type WaitAsync = (a: Int32Array, i: number, v: number) => { async: boolean; value: Promise<unknown> | string };
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

export function channelBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(CONTROL_BYTES + SLOTS * SLOT_BYTES);
}

/** A numeric tensor as the channel moves it: an onnxruntime type name, dims and its bytes' view. */
export interface ChannelTensor {
  type: string;
  dims: readonly number[];
  data: ArrayBufferView;
}

export interface ChannelTimes {
  waitNs: number;
  inputNs: number;
  inferNs: number;
  outputNs: number;
}

const align8 = (n: number) => (n + 7) & ~7;

/**
 * Writes `tensors` (name index, tensor) after `at` in `desc` and their bytes into `data`; false when
 * a type is not numeric, the bytes exceed the data area or the descriptor would overflow.
 */
function writeTensors(desc: Float64Array, at: number, data: Uint8Array, tensors: readonly [number, ChannelTensor][]): number {
  let off = 0;
  for (const [index, t] of tensors) {
    const code = TYPE_CODE.get(t.type);
    const len = t.data.byteLength;
    if (code === undefined || off + len > data.byteLength || at + 5 + t.dims.length > DESC_NUMBERS) return -1;
    desc[at++] = index;
    desc[at++] = code;
    desc[at++] = off;
    desc[at++] = len;
    desc[at++] = t.dims.length;
    for (const d of t.dims) desc[at++] = d;
    data.set(new Uint8Array(t.data.buffer, t.data.byteOffset, len), off);
    off = align8(off + len);
  }
  return at;
}

interface DecodedTensor { index: number; type: string; dims: number[]; offset: number; byteLength: number; ctor: TypedCtor }

function readTensors(desc: Float64Array, at: number, count: number): { tensors: DecodedTensor[]; at: number } {
  const tensors: DecodedTensor[] = [];
  for (let i = 0; i < count; i++) {
    const index = desc[at++]!;
    const code = desc[at++]!;
    const offset = desc[at++]!;
    const byteLength = desc[at++]!;
    const n = desc[at++]!;
    const dims = new Array<number>(n);
    for (let d = 0; d < n; d++) dims[d] = desc[at++]!;
    tensors.push({ index, type: TYPES[code]!, dims, offset, byteLength, ctor: CTORS[code]! });
  }
  return { tensors, at };
}

/** A decoded output as the main thread hands it on: its own (non-shared) typed array. */
export interface ChannelOutput { index: number; type: string; dims: number[]; data: ArrayBufferView }

/**
 * The main thread's end. `submit` places a request in a free slot (or says it cannot); replies in
 * slots are read as they come, in whatever order, and handed to `onReply` with their outputs already
 * copied out; the slot is then free. Not safe across threads other than the one worker it pairs with.
 */
export class ChannelMain {
  private readonly ctrl: Int32Array;
  private readonly inFlight = new Map<number, number>();
  private watching = false;
  private closed = false;

  constructor(
    private readonly sab: SharedArrayBuffer,
    private readonly onReply: (id: number, times: ChannelTimes, outputs: ChannelOutput[]) => void,
  ) {
    this.ctrl = new Int32Array(sab, 0, CONTROL_BYTES / 4);
  }

  /** Writes the request into a free slot and wakes the worker; false when it does not fit (post it instead). */
  submit(seq: number, id: number, postedAt: number, feeds: readonly [number, ChannelTensor][], fetches: readonly number[]): boolean {
    if (this.closed) return false;
    let slot = -1;
    for (let s = 0; s < SLOTS; s++) if (Atomics.load(this.ctrl, STATE + s) === FREE && !this.inFlight.has(s)) { slot = s; break; }
    if (slot < 0) return false;
    const base = CONTROL_BYTES + slot * SLOT_BYTES;
    const desc = new Float64Array(this.sab, base, DESC_NUMBERS);
    desc[0] = seq;
    desc[1] = id;
    desc[2] = postedAt;
    desc[3] = feeds.length;
    desc[4] = fetches.length;
    if (5 + fetches.length > DESC_NUMBERS) return false;
    let at = 5;
    for (const f of fetches) desc[at++] = f;
    if (writeTensors(desc, at, new Uint8Array(this.sab, base + DESC_BYTES, SLOT_DATA_BYTES), feeds) < 0) return false;
    this.inFlight.set(slot, id);
    Atomics.store(this.ctrl, STATE + slot, REQUEST);
    Atomics.add(this.ctrl, REQ_SEQ, 1);
    // Read after the counter's bump: a worker that set the flag before it reads the slots again.
    if (Atomics.load(this.ctrl, WORKER_IDLE) === 1) Atomics.notify(this.ctrl, REQ_SEQ, 1);
    void this.watch();
    return true;
  }

  /** Frees the slot of a request whose reply came by postMessage instead. */
  release(slot: number): void {
    this.inFlight.delete(slot);
    Atomics.store(this.ctrl, STATE + slot, FREE);
  }

  /** Stops reading replies (the worker is gone); slot requests still out are the caller's to fail. */
  close(): void {
    this.closed = true;
    this.inFlight.clear();
  }

  private async watch(): Promise<void> {
    if (this.watching) return;
    this.watching = true;
    try {
      while (this.inFlight.size > 0 && !this.closed) {
        // Read the counter before draining: a reply written after the drain changes it, and the wait
        // below then returns at once instead of sleeping past it.
        const seen = Atomics.load(this.ctrl, REP_SEQ);
        this.drain();
        if (this.inFlight.size === 0) break;
        const r = waitAsync(this.ctrl, REP_SEQ, seen);
        if (r.async) await r.value;
      }
    } finally {
      this.watching = false;
    }
  }

  private drain(): void {
    for (const [slot, id] of this.inFlight) {
      if (Atomics.load(this.ctrl, STATE + slot) !== REPLY) continue;
      const base = CONTROL_BYTES + slot * SLOT_BYTES;
      const desc = new Float64Array(this.sab, base, DESC_NUMBERS);
      const times = { waitNs: desc[1]!, inputNs: desc[2]!, inferNs: desc[3]!, outputNs: desc[4]! };
      const { tensors } = readTensors(desc, 6, desc[5]!);
      const outputs = tensors.map((t) => ({
        index: t.index, type: t.type, dims: t.dims,
        data: new t.ctor(this.sab, base + DESC_BYTES + t.offset, t.byteLength / t.ctor.BYTES_PER_ELEMENT).slice() as ArrayBufferView,
      }));
      this.release(slot);
      this.onReply(id, times, outputs);
    }
  }
}

/** A request as the worker takes it from a slot: inputs still in the slot until `inputs()` copies them. */
export interface SlotRequest {
  seq: number;
  id: number;
  postedAt: number;
  slot: number;
  fetches: number[];
  /** Copies the inputs out of the slot (into buffers reused per input) and returns them as typed arrays. */
  inputs(): { index: number; type: string; dims: number[]; data: ArrayBufferView }[];
}

/**
 * The worker's end: `serve` reads requests from slots as the main thread writes them, and `reply`
 * writes outputs back into the request's slot when they fit (numeric, within the data area).
 */
export class ChannelWorker {
  private readonly ctrl: Int32Array;
  /** Input buffers kept between runs, by input index: onnxruntime reads feeds only during run(). */
  private readonly inputBuffers = new Map<number, ArrayBuffer>();
  private stopped = false;

  constructor(private readonly sab: SharedArrayBuffer) {
    this.ctrl = new Int32Array(sab, 0, CONTROL_BYTES / 4);
  }

  /**
   * Calls `take` for every request written into a slot, until `stop()`. `settled` resolves once what
   * was taken so far has run (and replied): the worker sleeps only then, after saying so in WORKER_IDLE
   * and looking at the slots once more, so a request written meanwhile is either seen here or notified.
   */
  async serve(take: (r: SlotRequest) => void, settled: () => Promise<unknown> = async () => {}): Promise<void> {
    while (!this.stopped) {
      if (this.takeAll(take)) {
        await settled();
        continue;
      }
      Atomics.store(this.ctrl, WORKER_IDLE, 1);
      const seen = Atomics.load(this.ctrl, REQ_SEQ);
      if (this.takeAll(take)) {
        Atomics.store(this.ctrl, WORKER_IDLE, 0);
        await settled();
        continue;
      }
      if (!this.stopped) {
        const r = waitAsync(this.ctrl, REQ_SEQ, seen);
        if (r.async) await r.value;
      }
      Atomics.store(this.ctrl, WORKER_IDLE, 0);
    }
  }

  /** Takes every request waiting in a slot; whether there was one. */
  private takeAll(take: (r: SlotRequest) => void): boolean {
    let took = false;
    for (let s = 0; s < SLOTS; s++) {
      if (Atomics.compareExchange(this.ctrl, STATE + s, REQUEST, TAKEN) === REQUEST) {
        take(this.read(s));
        took = true;
      }
    }
    return took;
  }

  stop(): void {
    this.stopped = true;
    // Wake the serve loop so it sees `stopped` and lets the thread's event loop end.
    Atomics.add(this.ctrl, REQ_SEQ, 1);
    Atomics.notify(this.ctrl, REQ_SEQ);
  }

  private read(slot: number): SlotRequest {
    const base = CONTROL_BYTES + slot * SLOT_BYTES;
    const desc = new Float64Array(this.sab, base, DESC_NUMBERS);
    const nFetches = desc[4]!;
    const fetches: number[] = [];
    for (let i = 0; i < nFetches; i++) fetches.push(desc[5 + i]!);
    const nFeeds = desc[3]!;
    const at = 5 + nFetches;
    return {
      seq: desc[0]!, id: desc[1]!, postedAt: desc[2]!, slot, fetches,
      inputs: () => readTensors(desc, at, nFeeds).tensors.map((t) => {
        let buf = this.inputBuffers.get(t.index);
        if (buf?.byteLength !== t.byteLength) this.inputBuffers.set(t.index, (buf = new ArrayBuffer(t.byteLength)));
        new Uint8Array(buf).set(new Uint8Array(this.sab, base + DESC_BYTES + t.offset, t.byteLength));
        return { index: t.index, type: t.type, dims: t.dims, data: new t.ctor(buf, 0, t.byteLength / t.ctor.BYTES_PER_ELEMENT) as unknown as ArrayBufferView };
      }),
    };
  }

  /** Whether `buffer` is one of the kept input buffers (an output aliasing it must be copied before it is posted). */
  ownsInput(buffer: ArrayBufferLike): boolean {
    for (const b of this.inputBuffers.values()) if (b === buffer) return true;
    return false;
  }

  /** Writes the outputs into the request's slot and wakes the main thread; false when they do not fit. */
  reply(slot: number, times: ChannelTimes, outputs: readonly [number, ChannelTensor][]): boolean {
    const base = CONTROL_BYTES + slot * SLOT_BYTES;
    const desc = new Float64Array(this.sab, base, DESC_NUMBERS);
    desc[0] = OK;
    desc[1] = times.waitNs;
    desc[2] = times.inputNs;
    desc[3] = times.inferNs;
    desc[4] = times.outputNs;
    desc[5] = outputs.length;
    if (writeTensors(desc, 6, new Uint8Array(this.sab, base + DESC_BYTES, SLOT_DATA_BYTES), outputs) < 0) return false;
    Atomics.store(this.ctrl, STATE + slot, REPLY);
    Atomics.add(this.ctrl, REP_SEQ, 1);
    Atomics.notify(this.ctrl, REP_SEQ, 1);
    return true;
  }
}
