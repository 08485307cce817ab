/**
 * A worker thread for test/node/ort-worker-channel.test.ts: the worker end of a channel that echoes
 * each request's first input back, after a pause drawn at random (none, a microtask, an event-loop
 * turn or a timer), so requests meet the worker running, finishing and going to sleep.
 */

import { workerData } from 'node:worker_threads';
import { ChannelWorker } from '../../runtime-node/onnx/channel.js';

const { sab } = (workerData as { data: { sab: SharedArrayBuffer } }).data;
const worker = new ChannelWorker(sab);
const pauses = [
  () => undefined,
  () => Promise.resolve(),
  () => new Promise((r) => setImmediate(r)),
  () => new Promise((r) => setTimeout(r, 0)),
];
let chain: Promise<unknown> = Promise.resolve();
// Keeps the thread alive while the serve loop is parked (a pending waitAsync does not).
const alive = setInterval(() => {}, 1 << 30);
void worker.serve((r) => {
  chain = chain.then(async () => {
    await pauses[Math.floor(Math.random() * pauses.length)]!();
    const x = r.inputs()[0]!;
    worker.reply(r.slot, { waitNs: 0, inputNs: 0, inferNs: 0, outputNs: 0 }, [[0, { type: x.type, dims: x.dims, data: x.data }]]);
  });
}, () => chain).then(() => clearInterval(alive));
