/**
 * Child-process half of the "no adapter" test in test/node/browser-runtime-webgpu.test.ts: started
 * with the Vulkan driver hidden (`VK_DRIVER_FILES=/nonexistent`, which the Vulkan loader reads when
 * Dawn starts, so it cannot be changed inside a process that already has an adapter). It serves
 * add_sub as KIND_GPU through the browser runtime with the WebGPU-capable onnxruntime-web build, runs
 * one request, and prints what it saw as one JSON line on stdout.
 */

import { createLogger } from '../../core/index.js';
import { createServer } from '../../runtime-browser/index.js';
import { baselineWasmOnly, installWebGpu, loadBrowserOrt, memoryRepository, onGpu } from './webgpu-node.js';

baselineWasmOnly();
const webgpu = await installWebGpu();
const logs: string[] = [];
const server = await createServer({
  repository: memoryRepository(['add_sub'], onGpu), ort: loadBrowserOrt, log: createLogger((_l, line) => logs.push(line), 0),
});
const a = Float32Array.from({ length: 16 }, (_, i) => i / 4);
const b = Float32Array.from({ length: 16 }, (_, i) => 1 - i / 8);
const out = await server.infer({ model: 'add_sub', inputs: { INPUT0: a, INPUT1: b } });
const report = {
  dawnLoaded: webgpu.loaded,
  adapter: webgpu.adapter ?? null,
  environment: server.environment.webgpu,
  instances: server.instances('add_sub'),
  sum: Array.from(out.OUTPUT0 as Float32Array),
  expected: Array.from(a, (x, i) => Math.fround(x + b[i]!)),
  submits: webgpu.submits(),
  logs,
};
await server.stop(5000);
webgpu.dispose();
process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
