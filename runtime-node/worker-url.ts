/**
 * Starts a worker thread from a module beside this one. Compiled, the entry is that module's `.js`.
 * Under vitest or tsx the sources are `.ts`, which a bare worker cannot load, so the worker starts
 * from a tiny bootstrap that registers tsx first. Either way the worker reads its own data from
 * `workerData.data`.
 */

import { Worker, type WorkerOptions } from 'node:worker_threads';

export function startWorker(name: string, data: unknown, options: Omit<WorkerOptions, 'workerData'> = {}): Worker {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    const entry = new URL(`./${name}.ts`, here).href;
    return new Worker(new URL('./dev-worker.mjs', here), { ...options, workerData: { entry, data } });
  }
  return new Worker(new URL(`./${name}.js`, here), { ...options, workerData: { data } });
}
