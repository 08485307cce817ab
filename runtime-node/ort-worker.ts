/**
 * One model instance's onnxruntime-node session, in a worker thread: `session.run()` blocks its thread
 * for the whole inference, so running it here keeps the server's event loop answering. The main thread
 * sends feeds as transferred ArrayBuffers (no copy, no JSON) and gets outputs back the same way.
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

export interface InitMessage {
  modelPath?: string;
  modelBytes?: Uint8Array;
  /** Candidate EPs in preference order, e.g. [{name:'cuda', deviceId:0}, {name:'cpu'}]; WebGPU takes no deviceId. */
  providers: { name: string; deviceId?: number; options?: Record<string, unknown> }[];
  sessionOptions: ort.InferenceSession.SessionOptions;
  /** The process-wide WebGPU lock (one Int32 word: 0 free, 1 held). */
  gpuLock: SharedArrayBuffer;
}

export interface WireTensor {
  type: ort.Tensor.Type;
  dims: number[];
  data: ort.Tensor.DataType;
}

/** `postedAt`: epoch ms when the main thread queued it behind a running batch, else 0. */
export type WorkerRequest = { id: number; feeds: Record<string, WireTensor>; fetches: string[]; postedAt: number };

export type WorkerReply =
  | { kind: 'ready'; provider: string; failures: string[]; inputNames: readonly string[]; outputNames: readonly string[] }
  | { kind: 'init-error'; message: string; failures: string[] }
  | { kind: 'result'; id: number; outputs: Record<string, WireTensor>; waitNs: number; inputNs: number; inferNs: number; outputNs: number }
  | { kind: 'error'; id: number; message: string };

const port = parentPort!;
const init = (workerData as { data: InitMessage }).data;
let session: ort.InferenceSession | undefined;
/** Set once the session runs on WebGPU: its work then goes through the process-wide lock. */
let gpuLock: Int32Array | undefined;

async function locked<T>(lock: Int32Array | undefined, fn: () => Promise<T>): Promise<T> {
  if (!lock) return fn();
  while (Atomics.compareExchange(lock, 0, 0, 1) !== 0) Atomics.wait(lock, 0, 1);
  try {
    return await fn();
  } finally {
    Atomics.store(lock, 0, 0);
    Atomics.notify(lock, 0, 1);
  }
}

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
      session = await locked(lock, () => ort.InferenceSession.create(source as string, {
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

// Batches run strictly one after another, in arrival order: the main thread may queue the next batch
// while this one computes (pipelining), and ORT must never see two runs of this session interleave.
let chain: Promise<void> = Promise.resolve();
let running = false;

port.on('message', (msg: WorkerRequest | 'close') => {
  const arrived = performance.now();
  const queuedBehind = running;
  chain = chain.then(() => {
    // A batch posted while this thread was blocked in a run arrives only after it: its wait counts
    // from when the main thread posted it (timeOrigin makes the two threads' clocks comparable).
    const posted = msg !== 'close' && msg.postedAt > 0 ? performance.timeOrigin + performance.now() - msg.postedAt : 0;
    return handle(msg, Math.max(posted, queuedBehind ? performance.now() - arrived : 0));
  });
});

async function handle(msg: WorkerRequest | 'close', waitMs: number): Promise<void> {
  if (msg === 'close') {
    await locked(gpuLock, async () => session?.release());
    port.close();
    return;
  }
  running = true;
  try {
    const t0 = performance.now();
    const feeds: Record<string, ort.Tensor> = {};
    for (const [name, t] of Object.entries(msg.feeds)) feeds[name] = new ort.Tensor(t.type, t.data as never, t.dims);
    const t1 = performance.now();
    const results = await locked(gpuLock, () => session!.run(feeds, msg.fetches));
    const t2 = performance.now();
    const outputs: Record<string, WireTensor> = {};
    const transfer: ArrayBuffer[] = [];
    for (const [name, t] of Object.entries(results)) {
      outputs[name] = { type: t.type, dims: [...t.dims], data: t.data };
      transfer.push(...transferables(t.data));
    }
    const t3 = performance.now();
    port.postMessage(
      {
        kind: 'result', id: msg.id, outputs, waitNs: waitMs * 1e6,
        inputNs: (t1 - t0) * 1e6, inferNs: (t2 - t1) * 1e6, outputNs: (t3 - t2) * 1e6,
      } satisfies WorkerReply,
      transfer,
    );
  } catch (err) {
    port.postMessage({ kind: 'error', id: msg.id, message: (err as Error).message } satisfies WorkerReply);
  } finally {
    running = false;
  }
}

void start();
