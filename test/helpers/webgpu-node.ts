/**
 * The browser runtime's WebGPU path, run under Node: Dawn's `navigator.gpu` from the `webgpu` package
 * (on a real GPU, or on Mesa's lavapipe software Vulkan device that CI installs), the onnxruntime-web
 * build a page gets, and default-repository models as in-memory files. Everything Node-specific that
 * this needs lives here, so runtime-browser/ stays free of `node:*` and runs unchanged:
 * - `installWebGpu` puts Dawn on `navigator.gpu` (Node 20 has no `navigator`) and works around one
 *   dawn.node gap that onnxruntime-web hits on every upload (see `patchQueue`).
 * - `loadBrowserOrt` imports `dist/ort.bundle.min.mjs`: under Node, `import('onnxruntime-web')`
 *   resolves through the package's `node` export condition to `ort.node.min.mjs`, a build that
 *   registers only the `cpu` and `wasm` backends, so `executionProviders: ['webgpu']` fails there with
 *   "no available backend found. ERR: [webgpu] backend not found". The bundle is what a bundler gives
 *   a page (the `import` → `default` condition): JSEP WebGPU plus wasm, its .wasm found beside it.
 * - `baselineWasmOnly` keeps V8 from spending a minute of CPU optimising ORT's wasm in the background.
 * - `memoryRepository` reads `models/<m>/...` into the `{ '<m>/<path>': bytes }` form `createServer`
 *   takes, optionally with each config rewritten (as config.json).
 */

import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { modelConfigToJson, parseModelConfig, type ModelConfig } from '../../core/index.js';
import type { OrtModule } from '../../runtime-browser/index.js';
import { MODELS } from './server.js';

export interface AdapterInfo {
  vendor: string;
  architecture: string;
  description: string;
  isFallbackAdapter: boolean;
}

export interface NodeWebGpu {
  /** Whether the `webgpu` package (dawn.node) loaded on this platform at all. */
  loaded: boolean;
  /** The adapter Dawn offers; undefined when there is none. */
  adapter?: AdapterInfo;
  /** Why there is no adapter. */
  reason?: string;
  /** Command buffers submitted to any queue so far: proof that work really went to the GPU. */
  submits(): number;
  /** Drops `navigator.gpu`; while Dawn's instance is referenced, Node does not exit (crbug.com/387965810). */
  dispose(): void;
}

let installed: Promise<NodeWebGpu> | undefined;

/** Installs Dawn as `navigator.gpu` once per process and reports the adapter it offers. */
export function installWebGpu(): Promise<NodeWebGpu> {
  installed ??= install();
  return installed;
}

async function install(): Promise<NodeWebGpu> {
  // Mesa prints an error line on every start without one.
  process.env.XDG_RUNTIME_DIR ??= tmpdir();
  const none = (reason: string): NodeWebGpu => ({ loaded: false, reason, submits: () => 0, dispose() {} });
  let mod: typeof import('webgpu');
  try {
    mod = await import('webgpu');
  } catch (err) {
    return none(`the webgpu package (dawn.node) did not load: ${(err as Error).message.split('\n')[0]}`);
  }
  const globals = mod.globals as Record<string, { prototype: Proto }>;
  // ORT's WebGPU code reads GPUBufferUsage, GPUMapMode, GPUDevice... as globals, as in a page.
  Object.assign(globalThis, globals);
  const queue = patchQueue(globals.GPUQueue!.prototype);
  const submits = () => queue.submitted;
  // Node 20 has no navigator; Node 21+ has one without `gpu`.
  const g = globalThis as unknown as { navigator?: Record<string, unknown> };
  if (!g.navigator) Object.defineProperty(globalThis, 'navigator', { value: {}, configurable: true, writable: true });
  const gpu = mod.create([]);
  Object.defineProperty(g.navigator!, 'gpu', { value: gpu, configurable: true, writable: true });
  const dispose = () => {
    delete g.navigator!.gpu;
  };
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter();
  } catch (err) {
    return { loaded: true, reason: `requestAdapter() failed: ${(err as Error).message}`, submits, dispose };
  }
  if (!adapter) {
    return { loaded: true, reason: 'Dawn found no WebGPU adapter (no usable Vulkan driver; CI installs Mesa lavapipe)', submits, dispose };
  }
  const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  return {
    loaded: true,
    adapter: {
      vendor: info.vendor, architecture: info.architecture, description: info.description,
      isFallbackAdapter: info.isFallbackAdapter ?? false,
    },
    submits,
    dispose,
  };
}

type Proto = Record<PropertyKey, unknown>;
interface QueueCounts { submitted: number }
const PATCHED = Symbol.for('tsi.test.webgpu-node.queue');

/**
 * Wraps GPUQueue once per process (the prototype is dawn.node's, shared by every module instance):
 * - `writeBuffer` copies shared memory first. onnxruntime-web's builds are all threaded, so its wasm
 *   heap is a shared WebAssembly.Memory even on one thread, and it uploads tensors with
 *   `queue.writeBuffer(buffer, offset, heap.buffer, ...)` or a typed array over the heap. WebGPU takes
 *   shared buffers there (AllowSharedBufferSource) and browsers accept them; dawn.node 0.6.2 does not:
 *   a SharedArrayBuffer gets "TypeError: no overload matched for writeBuffer", and a typed array over
 *   one kills the process with SIGSEGV. A browser stages every upload through a copy anyway.
 * - `submit` counts command buffers, so tests can see work reach the GPU without trusting the runtime.
 */
function patchQueue(proto: Proto): QueueCounts {
  const done = proto[PATCHED] as QueueCounts | undefined;
  if (done) return done;
  const counts: QueueCounts = { submitted: 0 };
  proto[PATCHED] = counts;
  const writeBuffer = proto.writeBuffer as (this: GPUQueue, ...args: unknown[]) => void;
  proto.writeBuffer = function (this: GPUQueue, buffer: GPUBuffer, offset: number, data: ArrayBuffer | ArrayBufferView, dataOffset = 0, size?: number) {
    const view = ArrayBuffer.isView(data);
    const backing = view ? data.buffer : data;
    if (!(backing instanceof SharedArrayBuffer)) return writeBuffer.call(this, buffer, offset, data, dataOffset, size);
    // dataOffset and size count elements of a typed array, bytes of a buffer (or a DataView).
    const unit = view ? ((data as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1) : 1;
    const start = (view ? data.byteOffset : 0) + dataOffset * unit;
    const bytes = size === undefined ? data.byteLength - dataOffset * unit : size * unit;
    const copy = new Uint8Array(bytes);
    copy.set(new Uint8Array(backing, start, bytes));
    return writeBuffer.call(this, buffer, offset, copy.buffer, 0, bytes);
  };
  const submit = proto.submit as (this: GPUQueue, buffers: GPUCommandBuffer[]) => void;
  proto.submit = function (this: GPUQueue, buffers: GPUCommandBuffer[]) {
    counts.submitted += buffers.length;
    return submit.call(this, buffers);
  };
  return counts;
}

/**
 * Keeps V8 on its baseline wasm compiler (Liftoff); call it before onnxruntime-web loads. Otherwise
 * instantiating ORT's 28 MB wasm starts an optimising (TurboFan) compile of the whole module in the
 * background: about 50 s of CPU, on the same cores lavapipe runs its shaders on, and Node does not
 * exit until it ends (measured: a child process done after 3 s exited after 55 s). Liftoff code
 * computes the same results, more slowly; these tests check results, not wasm speed.
 */
export function baselineWasmOnly(): void {
  setFlagsFromString('--liftoff-only');
}

const require = createRequire(import.meta.url);

/** file: URL of the onnxruntime-web build a page gets (WebGPU + wasm), beside the Node build. */
export function browserOrtUrl(): string {
  return pathToFileURL(join(dirname(require.resolve('onnxruntime-web')), 'ort.bundle.min.mjs')).href;
}

/** The browser build of onnxruntime-web, for `createServer({ ort })`; one module per process. */
export const loadBrowserOrt = (): Promise<OrtModule> => import(browserOrtUrl()) as Promise<OrtModule>;

/** Default-repository models that have their generated model.onnx (all ONNX models after install). */
export function onnxModels(names: string[]): string[] {
  return names.filter((m) => existsSync(join(MODELS, m, '1', 'model.onnx')));
}

function filesUnder(dir: string, rel = ''): string[] {
  return readdirSync(join(dir, rel), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(dir, `${rel}${e.name}/`) : [`${rel}${e.name}`]);
}

/**
 * `models/<m>/...` for each model as in-memory files keyed `<m>/<path>`. With `edit`, each config
 * (empty for a model without one) is rewritten and stored as config.json in place of config.pbtxt.
 */
export function memoryRepository(models: string[], edit?: (c: ModelConfig) => ModelConfig): Record<string, Uint8Array | string> {
  const out: Record<string, Uint8Array | string> = {};
  for (const m of models) {
    const dir = join(MODELS, m);
    for (const rel of filesUnder(dir)) {
      if (edit && rel === 'config.pbtxt') continue;
      // A plain Uint8Array, not a Buffer: the backend copies model bytes with slice(), which on a
      // Buffer is a view.
      out[`${m}/${rel}`] = new Uint8Array(readFileSync(join(dir, rel)));
    }
    if (edit) {
      const pbtxt = join(dir, 'config.pbtxt');
      const config = existsSync(pbtxt) ? parseModelConfig(readFileSync(pbtxt, 'utf8'), pbtxt) : {};
      out[`${m}/config.json`] = JSON.stringify(modelConfigToJson(edit(config)));
    }
  }
  return out;
}

/** A config's KIND_GPU twin: what makes the browser runtime try WebGPU under `device: 'auto'`. */
export function onGpu(c: ModelConfig): ModelConfig {
  return { ...c, instance_group: [{ kind: 'KIND_GPU', count: 1 }] };
}
