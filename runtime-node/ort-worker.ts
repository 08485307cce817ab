/**
 * One model instance's onnxruntime-node session, in a worker thread: `session.run()` blocks its thread
 * for the whole inference, so running it here keeps the server's event loop answering. Requests and
 * replies cross through the instance's shared-memory channel (worker-channel.ts) where they fit, and
 * as postMessage with transferred ArrayBuffers otherwise; both carry the main thread's sequence
 * number, and batches run strictly in that order whichever way they came.
 * Execution providers are tried in the given order and the first that creates a session wins; each
 * failure is reported back so the choice can be logged.
 *
 * WebGPU sessions of one process share onnxruntime's one WebGPU device context (the Node binding
 * cannot give a session a context of its own), and that context is not safe to use from two threads at
 * once: two instances running at the same moment fail with "CommandEncoder is already finished".
 * So every WebGPU session creation, run and release in the process takes one lock, a word in a
 * SharedArrayBuffer the main thread hands to every worker. Instances on one GPU then take turns on it,
 * which is what the GPU does with their work anyway.
 */

import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { fromBytes } from '../core/tensor.js';
import type { DataType } from '../core/types.js';
import { gpuLocked } from './gpu/lock.js';
import { viewAt } from './shm-map.js';
import { ChannelWorker, type ChannelTensor, type SlotRequest } from './worker-channel.js';

export interface InitMessage {
  modelPath?: string;
  modelBytes?: Uint8Array;
  /** Candidate EPs in preference order, e.g. [{name:'cuda', deviceId:0}, {name:'cpu'}]; WebGPU takes no deviceId. */
  providers: { name: string; deviceId?: number; options?: Record<string, unknown> }[];
  sessionOptions: ort.InferenceSession.SessionOptions;
  /** The process-wide WebGPU lock (one Int32 word: 0 free, 1 held). */
  gpuLock: SharedArrayBuffer;
  /** This instance's shared-memory channel (worker-channel.ts). */
  channel: SharedArrayBuffer;
}

export interface WireTensor {
  type: ort.Tensor.Type;
  dims: number[];
  data: ort.Tensor.DataType;
}

/**
 * An input that is a view of a system shared-memory region the main thread mapped: its address
 * crosses instead of its bytes, and this thread views the same pages (the main thread holds its own
 * view until the reply, so they stay mapped).
 */
export interface MappedWireTensor {
  type: ort.Tensor.Type;
  dims: number[];
  datatype: DataType;
  address: bigint;
  byteLength: number;
}

/**
 * A request that did not fit the channel. `seq`: the main thread's order of requests (channel and
 * posted alike) and of the close; `postedAt`: epoch ms when it was queued behind a running batch, else 0.
 */
export type WorkerRequest =
  | { kind: 'run'; seq: number; id: number; feeds: Record<string, WireTensor | MappedWireTensor>; fetches: string[]; postedAt: number }
  | { kind: 'close'; seq: number }
  | { kind: 'skip'; seq: number };

/**
 * `slot`: the channel slot of the request, when it came through one and its reply did not fit there.
 * `unmapped`: a mapped input could not be viewed here (koffi did not load in this thread).
 */
export type WorkerReply =
  | { kind: 'ready'; provider: string; failures: string[]; inputNames: readonly string[]; outputNames: readonly string[] }
  | { kind: 'init-error'; message: string; failures: string[] }
  | { kind: 'result'; id: number; slot?: number; outputs: Record<string, WireTensor>; waitNs: number; inputNs: number; inferNs: number; outputNs: number }
  | { kind: 'error'; id: number; slot?: number; message: string; unmapped?: true };

const port = parentPort!;
const init = (workerData as { data: InitMessage }).data;
const channel = new ChannelWorker(init.channel);
let session: ort.InferenceSession | undefined;
/** Set once the session runs on WebGPU: its work then goes through the process-wide lock. */
let gpuLock: Int32Array | undefined;


function transferables(data: ort.Tensor.DataType): ArrayBuffer[] {
  if (Array.isArray(data)) return [];
  const buf = (data as Uint8Array).buffer;
  return buf instanceof ArrayBuffer ? [buf] : [];
}

async function start(): Promise<void> {
  const failures: string[] = [];
  const source = init.modelPath ?? init.modelBytes!;
  for (const p of init.providers) {
    const ep = p.name === 'cpu' ? 'cpu' : { name: p.name, ...(p.deviceId !== undefined ? { deviceId: p.deviceId } : {}), ...(p.options ?? {}) };
    const lock = p.name === 'webgpu' ? new Int32Array(init.gpuLock) : undefined;
    try {
      session = await gpuLocked(lock, () => ort.InferenceSession.create(source as string, {
        ...init.sessionOptions,
        executionProviders: [ep as ort.InferenceSession.ExecutionProviderConfig],
      }));
      gpuLock = lock;
      port.postMessage({
        kind: 'ready', provider: p.name, failures, inputNames: session.inputNames, outputNames: session.outputNames,
      } satisfies WorkerReply);
      return;
    } catch (err) {
      failures.push(`${p.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  port.postMessage({ kind: 'init-error', message: failures.join('; '), failures } satisfies WorkerReply);
}

// Batches run strictly one after another, in the main thread's order: it may queue the next batch
// while this one computes (pipelining), and ORT must never see two runs of this session interleave.
// Requests come by two ways (channel slots, postMessage) that can overtake each other, so each waits
// for its sequence number's turn.
let chain: Promise<void> = Promise.resolve();
let running = false;
let nextSeq = 1;
const early = new Map<number, () => void>();

function arrive(seq: number, start: () => void): void {
  early.set(seq, start);
  for (let go = early.get(nextSeq); go; go = early.get(nextSeq)) {
    early.delete(nextSeq++);
    go();
  }
}

/** Queues `work` behind the running batch, timing how long it waited there. */
function enqueue(postedAt: number, work: (waitMs: number) => Promise<void>): void {
  const arrived = performance.now();
  const queuedBehind = running;
  chain = chain.then(() => {
    // A batch posted while this thread was blocked in a run arrives only after it: its wait counts
    // from when the main thread posted it (timeOrigin makes the two threads' clocks comparable).
    const posted = postedAt > 0 ? performance.timeOrigin + performance.now() - postedAt : 0;
    return work(Math.max(posted, queuedBehind ? performance.now() - arrived : 0));
  });
}

port.on('message', (msg: WorkerRequest) => {
  if (msg.kind !== 'run') {
    arrive(msg.seq, msg.kind === 'close' ? () => enqueue(0, close) : () => {});
    return;
  }
  arrive(msg.seq, () => enqueue(msg.postedAt, (waitMs) => execute(msg.id, undefined, () => {
    const feeds: Record<string, ort.Tensor> = {};
    for (const [name, t] of Object.entries(msg.feeds)) {
      feeds[name] = new ort.Tensor(t.type, ('address' in t ? viewMapped(t) : t.data) as never, t.dims);
    }
    return feeds;
  }, msg.fetches, waitMs)));
});

void channel.serve((r: SlotRequest) => arrive(r.seq, () => enqueue(r.postedAt, (waitMs) => execute(r.id, r.slot, () => {
  const feeds: Record<string, ort.Tensor> = {};
  for (const t of r.inputs()) feeds[session!.inputNames[t.index]!] = new ort.Tensor(t.type as ort.Tensor.Type, t.data as never, t.dims);
  return feeds;
}, r.fetches.map((i) => session!.outputNames[i]!), waitMs))), () => chain);

/** Buffers over the main thread's mapped pages: an output must never be handed back over one. */
const viewed = new WeakSet<ArrayBufferLike>();

class Unmapped extends Error {}

function viewMapped(t: MappedWireTensor): ort.Tensor.DataType {
  let buffer: ArrayBuffer;
  try {
    buffer = viewAt(t.address, t.byteLength);
  } catch (err) {
    throw new Unmapped(`a shared-memory input could not be viewed in the onnxruntime worker: ${(err as Error).message}`);
  }
  viewed.add(buffer);
  return fromBytes(t.datatype, new Uint8Array(buffer)) as ort.Tensor.DataType;
}

async function close(): Promise<void> {
  channel.stop();
  await gpuLocked(gpuLock, async () => session?.release());
  port.close();
}

/** Runs one batch and replies; never rejects (a rejected link would stop every batch behind it). */
async function execute(
  id: number, slot: number | undefined, makeFeeds: () => Record<string, ort.Tensor>, fetches: string[], waitMs: number,
): Promise<void> {
  running = true;
  try {
    const t0 = performance.now();
    const feeds = makeFeeds();
    const t1 = performance.now();
    const results = await gpuLocked(gpuLock, () => session!.run(feeds, fetches));
    const t2 = performance.now();
    if (slot !== undefined) {
      const outs: [number, ChannelTensor][] = [];
      for (const [name, t] of Object.entries(results)) {
        outs.push([session!.outputNames.indexOf(name), { type: t.type, dims: t.dims, data: t.data as ArrayBufferView }]);
      }
      const t3 = performance.now();
      const times = { waitNs: waitMs * 1e6, inputNs: (t1 - t0) * 1e6, inferNs: (t2 - t1) * 1e6, outputNs: (t3 - t2) * 1e6 };
      if (channel.reply(slot, times, outs)) return;
    }
    const outputs: Record<string, WireTensor> = {};
    const transfer = new Set<ArrayBuffer>();
    for (const [name, t] of Object.entries(results)) {
      // An output over one of the channel's kept input buffers is copied: that buffer serves the next run.
      // So is one over a shared-memory input's pages: those are the client's, and the main thread's to release.
      const buf = Array.isArray(t.data) ? undefined : (t.data as Uint8Array).buffer;
      const data = buf && (channel.ownsInput(buf) || viewed.has(buf)) ? (t.data as Uint8Array).slice() : t.data;
      outputs[name] = { type: t.type, dims: [...t.dims], data: data as ort.Tensor.DataType };
      for (const b of transferables(data as ort.Tensor.DataType)) transfer.add(b);
    }
    const t3 = performance.now();
    port.postMessage(
      {
        kind: 'result', id, slot, outputs, waitNs: waitMs * 1e6,
        inputNs: (t1 - t0) * 1e6, inferNs: (t2 - t1) * 1e6, outputNs: (t3 - t2) * 1e6,
      } satisfies WorkerReply,
      [...transfer],
    );
  } catch (err) {
    const unmapped = err instanceof Unmapped ? { unmapped: true as const } : {};
    port.postMessage({ kind: 'error', id, slot, message: (err as Error).message, ...unmapped } satisfies WorkerReply);
  } finally {
    running = false;
  }
}

void start();
