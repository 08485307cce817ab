/**
 * Image preprocessing off the server's thread: a vision-language model's pixel step (decode, resize,
 * normalise, split — seconds of CPU for a 12-megapixel photo) runs in a small pool of worker threads
 * of its own (image-worker.ts), so the thread that reads requests keeps answering health checks,
 * text-only chats and token streams while a photo is prepared. Not the decoder's workers: those run
 * a model step at a time and a photo there would stall every stream of the instance.
 *
 * Config parameter `image_workers`: how many threads (default half the cores, 1 to 4; `0` runs the
 * step in the server's thread, as the page does). Threads start with the first image and live until
 * the model unloads; a job goes to the thread with the fewest jobs, a new thread starting while every
 * running one is busy and the pool has room. The bytes go over copied (the caller keeps its own);
 * the pixel values come back transferred.
 */

import type { Worker } from 'node:worker_threads';
import { TsiError, type ErrorCode, type ModelConfig } from '../../core/index.js';
import type { PixelJob, PixelRunner, PixelValues } from '../../core/vision/idefics3.js';
import { startWorker } from '../worker-url.js';
import { stopWorker } from '../worker-instance.js';
import type { ImageWorkerReply, ImageWorkerRequest } from './image-worker.js';

/** `image_workers` from the config: a whole number ≥ 0, default half of `cores` within 1..4. */
export function imageWorkers(config: ModelConfig, cores: number): number {
  const v = config.parameters?.image_workers?.string_value?.trim();
  if (v === undefined || v === '') return Math.max(1, Math.min(4, Math.floor(cores / 2)));
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter image_workers must be a whole number of threads >= 0 (0: in the server's thread), not '${v}'`);
  return n;
}

interface Pending {
  resolve: (v: PixelValues) => void;
  reject: (e: Error) => void;
}

/** One thread and the jobs it holds; a thread that dies fails its jobs and leaves the pool. */
class ImageThread {
  readonly pending = new Map<number, Pending>();
  private nextId = 1;

  constructor(readonly worker: Worker, model: string, onDeath: (t: ImageThread) => void) {
    worker.on('message', (m: ImageWorkerReply) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.values);
      else p.reject(new TsiError(m.code as ErrorCode, m.message));
    });
    const fail = (why: string) => {
      onDeath(this);
      for (const p of this.pending.values()) p.reject(new TsiError('INTERNAL', `the image worker of '${model}' ${why}`));
      this.pending.clear();
    };
    worker.on('error', (e) => fail(`failed: ${e.message}`));
    worker.on('exit', (code) => fail(`exited (code ${code})`));
    // An idle pool does not keep the process alive; a job in flight is held by its request anyway.
    worker.unref();
  }

  run(job: PixelJob): Promise<PixelValues> {
    const id = this.nextId++;
    const bytes = job.bytes.slice();
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, job: { ...job, bytes } } satisfies ImageWorkerRequest, [bytes.buffer]);
    });
  }
}

/** A model's image pool (see the file comment); `size` 0 gives none (the step runs in the caller's thread). */
export function imagePool(model: string, size: number): { run: PixelRunner; close(): Promise<void> } | undefined {
  if (size <= 0) return undefined;
  const threads: ImageThread[] = [];
  let closed = false;
  const run: PixelRunner = async (job) => {
    if (closed) throw new TsiError('UNAVAILABLE', `model '${model}' is unloading`);
    let t = threads.reduce<ImageThread | undefined>((best, x) => (!best || x.pending.size < best.pending.size ? x : best), undefined);
    if (!t || (t.pending.size > 0 && threads.length < size)) {
      t = new ImageThread(startWorker('llm/image-worker', {}), model, (dead) => {
        const at = threads.indexOf(dead);
        if (at >= 0) threads.splice(at, 1);
      });
      threads.push(t);
    }
    return t.run(job);
  };
  const close = async () => {
    closed = true;
    await Promise.all(threads.splice(0).map((t) => stopWorker(t.worker)));
  };
  return { run, close };
}
