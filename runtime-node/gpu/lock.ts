/**
 * The process-wide lock around onnxruntime's WebGPU context. Every WebGPU session in the process,
 * whichever worker thread holds it, shares one Dawn device and queue inside onnxruntime, and runs
 * from two threads at once corrupt it; so each run (and session creation and release) takes this
 * lock. It is a SharedArrayBuffer so that every worker thread gets the same one: the main thread
 * creates it once and hands it to each worker it starts.
 */

// Node has had Atomics.waitAsync since 16; TypeScript's ES2023 lib does not declare it yet.
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, index: number, value: number): { async: boolean; value: Promise<string> | string };
}).waitAsync;

/** The one lock of this process (main thread); workers get it through their start-up data. */
export const WEBGPU_LOCK = new SharedArrayBuffer(4);

/**
 * Runs `fn` holding `lock` (an Int32Array over the shared buffer); no lock runs it at once. A waiter
 * waits asynchronously, never blocking its thread: a pool worker hosts several sessions, and the one
 * holding the lock may be on the same thread, its run finishing only through this thread's event loop
 * (a blocking wait there deadlocks: KIND_GPU models on the shared pool hung at load).
 */
export async function gpuLocked<T>(lock: Int32Array | undefined, fn: () => Promise<T>): Promise<T> {
  if (!lock) return fn();
  while (Atomics.compareExchange(lock, 0, 0, 1) !== 0) {
    const w = waitAsync(lock, 0, 1);
    if (w.async) await w.value;
  }
  try {
    return await fn();
  } finally {
    Atomics.store(lock, 0, 0);
    Atomics.notify(lock, 0);
  }
}
