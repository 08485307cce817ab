/**
 * Plumbing shared by backends whose instances are worker threads (one worker per model instance):
 * starting a worker and waiting for its "ready" (or its reason for failing), stopping it with a
 * deadline, and moving tensors between threads. Moving follows one rule: a buffer is transferred
 * (no copy) only when the tensor covers all of it and nothing else still reads it (`canTransfer`);
 * otherwise just the tensor's bytes are copied, never the whole buffer a view happens to sit in.
 */

import type { Worker } from 'node:worker_threads';
// Direct module imports, not core/index.js: model workers load this file, and the whole core would
// add to every instance's start-up.
import { TsiError } from '../core/errors.js';
import { canTransfer } from '../core/tensor.js';
import type { NumericArray, Tensor, TensorData } from '../core/types.js';
import { startWorker } from './worker-url.js';

/**
 * Starts `name` (a module beside this one) and resolves once it posts `{kind:'ready'}`; an
 * `{kind:'init-error', message}` fails the start. `attach` sees the worker first, to serve what the
 * worker asks for while it initialises (messages other than those two).
 */
export async function startWorkerInstance<R extends { kind: string }>(
  name: string, data: unknown, what: string, attach?: (worker: Worker) => void,
): Promise<{ worker: Worker; ready: R }> {
  const worker = startWorker(name, data);
  attach?.(worker);
  try {
    const ready = await new Promise<R>((resolve, reject) => {
      const cleanup = () => {
        worker.off('message', onMsg);
        worker.off('error', onErr);
        worker.off('exit', onExit);
      };
      const onMsg = (m: R & { message?: string }) => {
        if (m.kind !== 'ready' && m.kind !== 'init-error') return;
        cleanup();
        if (m.kind === 'ready') resolve(m);
        else reject(new TsiError('INTERNAL', `${what}: ${m.message}`));
      };
      const onErr = (e: Error) => {
        cleanup();
        reject(new TsiError('INTERNAL', `${what}: ${e.message}`));
      };
      const onExit = (code: number) => {
        cleanup();
        reject(new TsiError('INTERNAL', `${what}: the worker exited with code ${code}`));
      };
      worker.on('message', onMsg);
      worker.once('error', onErr);
      worker.once('exit', onExit);
    });
    return { worker, ready };
  } catch (err) {
    await worker.terminate();
    throw err;
  }
}

/** Asks a worker to close (`'close'` message), terminating it if it has not exited after `timeoutMs`. */
export async function stopWorker(worker: Worker, timeoutMs = 5000): Promise<void> {
  const exited = new Promise<void>((r) => worker.once('exit', () => r()));
  worker.postMessage('close');
  const timer = setTimeout(() => void worker.terminate(), timeoutMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Tensor data ready to post: transferred when it owns its whole buffer and may (`transferOwned`),
 * else a copy of exactly its bytes (which is then transferred). BYTES elements are copied one by one.
 */
export function movable(data: TensorData, transfer: Set<ArrayBuffer>, transferOwned: boolean): TensorData {
  if (Array.isArray(data)) return (data as Uint8Array[]).map((e) => e.slice());
  const d = data as NumericArray;
  const buf = d.buffer;
  const whole = d.byteOffset === 0 && d.byteLength === buf.byteLength && buf instanceof ArrayBuffer;
  if (transferOwned && whole && canTransfer(buf) && !transfer.has(buf)) {
    transfer.add(buf);
    return d;
  }
  const copy = d.slice();
  transfer.add(copy.buffer as ArrayBuffer);
  return copy;
}

export function movableTensor(t: Tensor, transfer: Set<ArrayBuffer>, transferOwned: boolean): Tensor {
  return { name: t.name, datatype: t.datatype, shape: t.shape, data: movable(t.data, transfer, transferOwned) };
}
