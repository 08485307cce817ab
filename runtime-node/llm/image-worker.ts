/**
 * A thread of a vision-language model's image pool (image-pool.ts): it runs core's pixel step
 * (decode, resize, normalise, split; core/vision/idefics3.ts) on the jobs posted to it, one at a
 * time, and posts each job's pixel values back transferred, or its refusal (the TsiError's code and
 * message, so the request's 400 reads as if it ran in the server's thread).
 */

import { parentPort } from 'node:worker_threads';
// Direct module imports, not core/index.js: the worker needs only these.
import { asTsiError } from '../../core/errors.js';
import { idefics3Pixels, type PixelJob, type PixelValues } from '../../core/vision/idefics3.js';

export type ImageWorkerRequest = { id: number; job: PixelJob };
export type ImageWorkerReply =
  | { id: number; ok: true; values: PixelValues }
  | { id: number; ok: false; code: string; message: string };

const port = parentPort!;

port.on('message', (msg: ImageWorkerRequest | 'close') => {
  if (msg === 'close') {
    port.close();
    return;
  }
  void idefics3Pixels(msg.job).then(
    (values) => port.postMessage({ id: msg.id, ok: true, values } satisfies ImageWorkerReply, [values.pixels.buffer as ArrayBuffer]),
    (err: unknown) => {
      const e = asTsiError(err);
      port.postMessage({ id: msg.id, ok: false, code: e.code, message: e.message } satisfies ImageWorkerReply);
    },
  );
});
