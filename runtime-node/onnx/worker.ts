/**
 * A worker thread of the onnxruntime pool (pool.ts), hosting the sessions of any number of model
 * instances: `session.run()` blocks its thread for the whole inference, so running it here keeps the
 * server's event loop answering, and one thread per instance (a V8 isolate and an onnxruntime binding
 * each, about 10 MB) is what made hundreds of models cost gigabytes. Each session keeps its own
 * shared-memory channel (channel.ts) and its own order: requests and replies cross through the
 * channel where they fit, and as postMessage with transferred ArrayBuffers otherwise; both carry the
 * main thread's per-session sequence number, and a session's batches run strictly in that order
 * whichever way they came. Sessions of one thread take turns (the thread runs one at a time), so the
 * pool places a model's instances on different threads to keep `instance_group.count` executions of
 * it running at once.
 * Execution providers are tried in the given order and the first that creates a session wins; each
 * failure is reported back so the choice can be logged.
 *
 * WebGPU sessions of one process share onnxruntime's one WebGPU device context (the Node binding
 * cannot give a session a context of its own), and that context is not safe to use from two threads at
 * once: two instances running at the same moment fail with "CommandEncoder is already finished".
 * So every WebGPU session creation, run and release in the process takes one lock, a word in a
 * SharedArrayBuffer the main thread hands to every session. Instances on one GPU then take turns on it,
 * which is what the GPU does with their work anyway.
 *
 * A CPU session whose config names no thread count opens on its calling thread alone and is
 * reopened with a pool of `widenTo` intra-op threads once its runs prove heavy (WIDEN_MS): a
 * 250-byte model then costs no OS thread beyond its pool thread, however many are loaded, and a
 * real one gets the cores after its first few batches, whatever was loaded before it. The extra
 * threads come from a process-wide cap (`threadBudget`, taken here, returned by the pool).
 */

import { parentPort } from 'node:worker_threads';
import type * as Ort from 'onnxruntime-node';
import { fromBytes } from '../../core/tensor.js';
import type { DataType } from '../../core/types.js';
import { gpuLocked } from '../gpu/lock.js';
import { loadOrt } from '../gpu/ort.js';
import { viewAt } from '../shm-map.js';
import { openSession, WIDEN_MS } from './session-options.js';
import { ChannelWorker, type ChannelTensor, type SlotRequest } from './channel.js';

/** onnxruntime-node: the dependency, or the CUDA-matched core serve chose (gpu/ort.ts). */
const ort = loadOrt();

export interface InitMessage {
  modelPath?: string;
  modelBytes?: Uint8Array;
  /** Candidate EPs in preference order, e.g. [{name:'cuda', deviceId:0}, {name:'cpu'}]; WebGPU takes no deviceId. */
  providers: { name: string; deviceId?: number; options?: Record<string, unknown> }[];
  sessionOptions: Ort.InferenceSession.SessionOptions;
  /** The process-wide WebGPU lock (one Int32 word: 0 free, 1 held). */
  gpuLock: SharedArrayBuffer;
  /** This instance's shared-memory channel (channel.ts). */
  channel: SharedArrayBuffer;
  /** Intra-op threads to reopen a CPU session with once its runs prove heavy; absent, never. */
  widenTo?: number;
  /** Int32 [extra intra-op threads widened sessions hold, the most they may hold], shared by the pool's threads. */
  threadBudget: SharedArrayBuffer;
}

/** Runs whose shortest decides (one preempted run on a busy machine must not count). */
const WIDEN_RUNS = 3;

export interface WireTensor {
  type: Ort.Tensor.Type;
  dims: number[];
  data: Ort.Tensor.DataType;
}

/**
 * An input that is a view of a system shared-memory region the main thread mapped: its address
 * crosses instead of its bytes, and this thread views the same pages (the main thread holds its own
 * view until the reply, so they stay mapped).
 */
export interface MappedWireTensor {
  type: Ort.Tensor.Type;
  dims: number[];
  datatype: DataType;
  address: bigint;
  byteLength: number;
}

/**
 * What one session is asked, besides opening. `seq`: the main thread's order of that session's
 * requests (channel and posted alike) and of its close; `postedAt`: epoch ms when it was posted, or 0
 * when nothing could have held it up.
 */
export type SessionRequest =
  | { kind: 'run'; seq: number; id: number; feeds: Record<string, WireTensor | MappedWireTensor>; fetches: string[]; postedAt: number }
  | { kind: 'close'; seq: number }
  | { kind: 'skip'; seq: number };

/** A message to a pool thread: open a session, a session's request (by session id), or end the thread. */
export type WorkerRequest = { kind: 'open'; sid: number; init: InitMessage } | (SessionRequest & { sid: number }) | { kind: 'exit' };

/**
 * `slot`: the channel slot of the request, when it came through one and its reply did not fit there.
 * `unmapped`: a mapped input could not be viewed here (koffi did not load in this thread).
 * `rss`: the process's resident bytes before and after the session was created.
 */
export type SessionReply =
  | { kind: 'ready'; provider: string; failures: string[]; inputNames: readonly string[]; outputNames: readonly string[]; rss: [number, number] }
  | { kind: 'init-error'; message: string; failures: string[] }
  | { kind: 'result'; id: number; slot?: number; outputs: Record<string, WireTensor>; waitNs: number; inputNs: number; inferNs: number; outputNs: number }
  | { kind: 'error'; id: number; slot?: number; message: string; unmapped?: true }
  | { kind: 'widened'; threads: number; runMs: number; openMs: number; refused?: string }
  | { kind: 'closed' };

export type WorkerReply = SessionReply & { sid: number };

const port = parentPort!;
/** Whether any session of this thread is running a batch: one queued now waits behind it. */
let running = false;


function transferables(data: Ort.Tensor.DataType): ArrayBuffer[] {
  if (Array.isArray(data)) return [];
  const buf = (data as Uint8Array).buffer;
  return buf instanceof ArrayBuffer ? [buf] : [];
}

class Unmapped extends Error {}

/** One instance's session in this thread, with its channel and its own order of batches. */
class HostedSession {
  private session?: Ort.InferenceSession;
  /** Set once the session runs on WebGPU: its work then goes through the process-wide lock. */
  private gpuLock?: Int32Array;
  private readonly channel: ChannelWorker;
  // Batches run strictly one after another, in the main thread's order: it may queue the next batch
  // while this one computes (pipelining), and ORT must never see two runs of this session interleave.
  // Requests come by two ways (channel slots, postMessage) that can overtake each other, so each waits
  // for its sequence number's turn.
  private chain: Promise<void> = Promise.resolve();
  private nextSeq = 1;
  private readonly early = new Map<number, () => void>();
  /** Buffers over the main thread's mapped pages: an output must never be handed back over one. */
  private readonly viewed = new WeakSet<ArrayBufferLike>();
  /** Set while the session may still widen: its last run times, shortest first decides. */
  private widenTo?: number;
  private readonly runs: number[] = [];
  private closed = false;

  constructor(private readonly sid: number, private readonly init: InitMessage) {
    this.channel = new ChannelWorker(init.channel);
  }

  private reply(m: SessionReply, transfer: ArrayBuffer[] = []): void {
    port.postMessage({ ...m, sid: this.sid } as WorkerReply, transfer);
  }

  async start(): Promise<void> {
    const init = this.init;
    const before = process.memoryUsage.rss();
    const opened = await openSession(ort, init.modelPath ?? init.modelBytes!, init.sessionOptions, init.providers, init.gpuLock);
    if (!opened.session) {
      sessions.delete(this.sid);
      this.reply({ kind: 'init-error', message: opened.failures.join('; '), failures: opened.failures });
      return;
    }
    const session = opened.session;
    this.session = session;
    this.gpuLock = opened.lock;
    // A GPU session's run time is the device's; its host thread only feeds it.
    if (opened.provider === 'cpu' && (init.widenTo ?? 1) > 1) this.widenTo = init.widenTo;
    this.reply({
      kind: 'ready', provider: opened.provider, failures: opened.failures, inputNames: session.inputNames, outputNames: session.outputNames,
      rss: [before, process.memoryUsage.rss()],
    });
    void this.channel.serve((r) => this.arrive(r.seq, () => this.enqueue(r.postedAt, (waitMs) => this.fromSlot(r, waitMs))), () => this.chain);
  }

  take(msg: SessionRequest): void {
    if (msg.kind === 'skip') return this.arrive(msg.seq, () => {});
    if (msg.kind === 'close') return this.arrive(msg.seq, () => this.enqueue(0, () => this.close()));
    this.arrive(msg.seq, () => this.enqueue(msg.postedAt, (waitMs) => this.execute(msg.id, undefined, () => {
      const feeds: Record<string, Ort.Tensor> = {};
      for (const [name, t] of Object.entries(msg.feeds)) {
        feeds[name] = new ort.Tensor(t.type, ('address' in t ? this.viewMapped(t) : t.data) as never, t.dims);
      }
      return feeds;
    }, msg.fetches, waitMs)));
  }

  private fromSlot(r: SlotRequest, waitMs: number): Promise<void> {
    const s = this.session!;
    return this.execute(r.id, r.slot, () => {
      const feeds: Record<string, Ort.Tensor> = {};
      for (const t of r.inputs()) feeds[s.inputNames[t.index]!] = new ort.Tensor(t.type as Ort.Tensor.Type, t.data as never, t.dims);
      return feeds;
    }, r.fetches.map((i) => s.outputNames[i]!), waitMs);
  }

  private arrive(seq: number, start: () => void): void {
    this.early.set(seq, start);
    for (let go = this.early.get(this.nextSeq); go; go = this.early.get(this.nextSeq)) {
      this.early.delete(this.nextSeq++);
      go();
    }
  }

  /** Queues `work` behind this session's running batch, timing how long it waited. */
  private enqueue(postedAt: number, work: (waitMs: number) => Promise<void>): void {
    const arrived = performance.now();
    const queuedBehind = running;
    this.chain = this.chain.then(() => {
      // A batch posted while this thread was blocked in a run arrives only after it: its wait counts
      // from when the main thread posted it (timeOrigin makes the two threads' clocks comparable).
      const posted = postedAt > 0 ? performance.timeOrigin + performance.now() - postedAt : 0;
      return work(Math.max(posted, queuedBehind ? performance.now() - arrived : 0));
    }).then(() => this.widenIfHeavy().catch((err: Error) => {
      // Never rejects: a rejected link would stop every batch behind it.
      this.reply({ kind: 'widened', threads: 1, runMs: 0, openMs: 0, refused: err.message });
    }));
  }

  private noteRun(ms: number): void {
    if (this.widenTo === undefined) return;
    this.runs.push(ms);
    if (this.runs.length > WIDEN_RUNS) this.runs.shift();
  }

  /**
   * Reopens the session with `widenTo` threads, between two batches, once its runs prove heavy and
   * the cap has the threads; either way once. The old session serves until the new one is made.
   */
  private async widenIfHeavy(): Promise<void> {
    const to = this.widenTo;
    if (to === undefined || this.closed || this.runs.length < WIDEN_RUNS) return;
    const runMs = Math.min(...this.runs);
    if (runMs < WIDEN_MS) return;
    this.widenTo = undefined;
    const budget = new Int32Array(this.init.threadBudget);
    if (!takeThreads(budget, to - 1)) {
      this.reply({ kind: 'widened', threads: 1, runMs, openMs: 0, refused: `the ${Atomics.load(budget, 1)} intra-op threads widened sessions may hold are taken` });
      return;
    }
    const t0 = performance.now();
    const init = this.init;
    // Batches queued meanwhile wait behind the reopening as behind a run (their wait is measured so).
    running = true;
    const opened = await openSession(ort, init.modelPath ?? init.modelBytes!, { ...init.sessionOptions, intraOpNumThreads: to }, [{ name: 'cpu' }], init.gpuLock)
      .finally(() => { running = false; });
    if (!opened.session) {
      Atomics.sub(budget, 0, to - 1);
      this.reply({ kind: 'widened', threads: 1, runMs, openMs: performance.now() - t0, refused: opened.failures.join('; ') });
      return;
    }
    const narrow = this.session!;
    this.session = opened.session;
    await narrow.release().catch(() => {});
    this.reply({ kind: 'widened', threads: to, runMs, openMs: performance.now() - t0 });
  }

  private viewMapped(t: MappedWireTensor): Ort.Tensor.DataType {
    let buffer: ArrayBuffer;
    try {
      buffer = viewAt(t.address, t.byteLength);
    } catch (err) {
      throw new Unmapped(`a shared-memory input could not be viewed in the onnxruntime worker: ${(err as Error).message}`);
    }
    this.viewed.add(buffer);
    return fromBytes(t.datatype, new Uint8Array(buffer)) as Ort.Tensor.DataType;
  }

  private async close(): Promise<void> {
    this.closed = true;
    this.channel.stop();
    await gpuLocked(this.gpuLock, async () => this.session?.release());
    sessions.delete(this.sid);
    this.reply({ kind: 'closed' });
  }

  /** Runs one batch and replies; never rejects (a rejected link would stop every batch behind it). */
  private async execute(
    id: number, slot: number | undefined, makeFeeds: () => Record<string, Ort.Tensor>, fetches: string[], waitMs: number,
  ): Promise<void> {
    running = true;
    const session = this.session!;
    try {
      const t0 = performance.now();
      const feeds = makeFeeds();
      const t1 = performance.now();
      const results = await gpuLocked(this.gpuLock, () => session.run(feeds, fetches));
      const t2 = performance.now();
      this.noteRun(t2 - t1);
      if (slot !== undefined) {
        const outs: [number, ChannelTensor][] = [];
        for (const [name, t] of Object.entries(results)) {
          outs.push([session.outputNames.indexOf(name), { type: t.type, dims: t.dims, data: t.data as ArrayBufferView }]);
        }
        const t3 = performance.now();
        const times = { waitNs: waitMs * 1e6, inputNs: (t1 - t0) * 1e6, inferNs: (t2 - t1) * 1e6, outputNs: (t3 - t2) * 1e6 };
        if (this.channel.reply(slot, times, outs)) return;
      }
      const outputs: Record<string, WireTensor> = {};
      const transfer = new Set<ArrayBuffer>();
      for (const [name, t] of Object.entries(results)) {
        // An output over one of the channel's kept input buffers is copied: that buffer serves the next run.
        // So is one over a shared-memory input's pages: those are the client's, and the main thread's to release.
        const buf = Array.isArray(t.data) ? undefined : (t.data as Uint8Array).buffer;
        const data = buf && (this.channel.ownsInput(buf) || this.viewed.has(buf)) ? (t.data as Uint8Array).slice() : t.data;
        outputs[name] = { type: t.type, dims: [...t.dims], data: data as Ort.Tensor.DataType };
        for (const b of transferables(data as Ort.Tensor.DataType)) transfer.add(b);
      }
      const t3 = performance.now();
      this.reply({
        kind: 'result', id, slot, outputs, waitNs: waitMs * 1e6,
        inputNs: (t1 - t0) * 1e6, inferNs: (t2 - t1) * 1e6, outputNs: (t3 - t2) * 1e6,
      }, [...transfer]);
    } catch (err) {
      const unmapped = err instanceof Unmapped ? { unmapped: true as const } : {};
      this.reply({ kind: 'error', id, slot, message: (err as Error).message, ...unmapped });
    } finally {
      running = false;
    }
  }
}

const sessions = new Map<number, HostedSession>();

/** Takes `n` threads from the cap if it has them (any pool thread may race for the last ones). */
function takeThreads(budget: Int32Array, n: number): boolean {
  for (;;) {
    const held = Atomics.load(budget, 0);
    if (held + n > Atomics.load(budget, 1)) return false;
    if (Atomics.compareExchange(budget, 0, held, held + n) === held) return true;
  }
}

port.on('message', (msg: WorkerRequest) => {
  if (msg.kind === 'exit') {
    port.close();
    return;
  }
  if (msg.kind === 'open') {
    const s = new HostedSession(msg.sid, msg.init);
    sessions.set(msg.sid, s);
    void s.start();
    return;
  }
  sessions.get(msg.sid)?.take(msg);
});
