/**
 * Which onnxruntime-node execution providers this machine can use, and the order a model instance
 * tries them in. The shipped binary bundles CPU and WebGPU; CUDA and TensorRT need provider libraries
 * that the package's install script downloads (skipped here, see the README), plus a GPU. Listing
 * `['cuda','cpu']` to ORT throws instead of falling back, so tsi picks the EPs itself and reports it.
 */

import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { InstanceSpec, ModelConfig } from '../../core/index.js';

export interface ProviderStatus {
  name: string;
  available: boolean;
  detail: string;
}

const require = createRequire(import.meta.url);

function bindingDir(): string | undefined {
  try {
    const pkg = dirname(require.resolve('onnxruntime-node/package.json'));
    const arch = process.arch;
    const plat = process.platform;
    const dir = join(pkg, 'bin', 'napi-v6', plat, arch);
    return existsSync(dir) ? dir : undefined;
  } catch {
    return undefined;
  }
}

function providerLib(name: 'cuda' | 'tensorrt'): string | undefined {
  const dir = bindingDir();
  if (!dir) return undefined;
  const file = process.platform === 'win32' ? `onnxruntime_providers_${name}.dll` : `libonnxruntime_providers_${name}.so`;
  const p = join(dir, file);
  return existsSync(p) ? p : undefined;
}

/** NVIDIA GPUs the driver exposes (Linux /proc; 0 elsewhere unless CUDA_VISIBLE_DEVICES says more). */
export function gpuCount(): number {
  const visible = process.env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined && visible.trim() === '') return 0;
  try {
    const n = readdirSync('/proc/driver/nvidia/gpus').length;
    if (visible) return Math.min(n, visible.split(',').length);
    return n;
  } catch {
    return 0;
  }
}

let cached: ProviderStatus[] | undefined;

export function providerStatus(): ProviderStatus[] {
  if (cached) return cached;
  let bundled: { name: string; bundled: boolean }[] = [];
  try {
    bundled = require('onnxruntime-node').listSupportedBackends();
  } catch (err) {
    return [{ name: 'cpu', available: false, detail: `onnxruntime-node failed to load: ${(err as Error).message}` }];
  }
  const gpus = gpuCount();
  cached = bundled.map(({ name, bundled: inBinary }) => {
    if (name === 'cpu') return { name, available: true, detail: 'bundled' };
    if (name === 'webgpu') return { name, available: inBinary, detail: inBinary ? 'bundled; needs a WebGPU adapter (tried at session creation)' : 'not in this build' };
    if (name === 'cuda' || name === 'tensorrt') {
      const lib = providerLib(name);
      if (!lib) return { name, available: false, detail: `provider library not installed (docs/gpu.md: CUDA and TensorRT)` };
      if (gpus === 0) return { name, available: false, detail: `provider library present but no NVIDIA GPU found` };
      return { name, available: true, detail: `${lib}, ${gpus} GPU(s)` };
    }
    return { name, available: inBinary, detail: inBinary ? 'bundled' : 'not bundled' };
  });
  return cached;
}

const isAvailable = (name: string) => providerStatus().some((p) => p.name === name && p.available);

export interface ProviderChoice {
  name: string;
  /** CUDA/TensorRT device; the WebGPU provider takes none (it runs on Dawn's default adapter). */
  deviceId?: number;
  options?: Record<string, unknown>;
}

/** WebGPU provider options a config may set as `gpu_execution_accelerator { name: "webgpu" parameters {...} }`. */
const WEBGPU_OPTIONS: Record<string, (v: string) => unknown> = {
  preferredLayout: (v) => v,
  validationMode: (v) => v,
  storageBufferCacheMode: (v) => v,
  uniformBufferCacheMode: (v) => v,
  queryResolveBufferCacheMode: (v) => v,
  defaultBufferCacheMode: (v) => v,
  forceCpuNodeNames: (v) => v.split(',').map((s) => s.trim()).filter(Boolean),
};

/**
 * The providers an instance tries, best first: KIND_GPU ⇒ TensorRT (when the config asks for it),
 * CUDA, WebGPU, then CPU; KIND_CPU ⇒ CPU. Unavailable ones are left out, and `notes` says why each
 * better one was skipped, in words, for the log and the start-up table.
 */
export function candidateProviders(config: ModelConfig, spec: InstanceSpec): { providers: ProviderChoice[]; notes: string[] } {
  const notes: string[] = [];
  const out: ProviderChoice[] = [];
  const accel = config.optimization?.execution_accelerators;
  if (spec.kind === 'KIND_GPU') {
    const deviceId = Math.max(0, spec.deviceId);
    const wanted: string[] = [];
    for (const a of accel?.gpu_execution_accelerator ?? []) if (a.name && !wanted.includes(a.name)) wanted.push(a.name);
    if (!wanted.includes('tensorrt')) notes.push('tensorrt not tried: the config does not ask for it (gpu_execution_accelerator)');
    for (const n of ['cuda', 'webgpu']) if (!wanted.includes(n)) wanted.push(n);
    for (const n of wanted) {
      if (n !== 'tensorrt' && n !== 'cuda' && n !== 'webgpu') {
        notes.push(`gpu_execution_accelerator '${n}' is not supported by onnxruntime-node; ignored`);
        continue;
      }
      if (!isAvailable(n)) {
        notes.push(`${n} not available: ${providerStatus().find((p) => p.name === n)?.detail ?? 'unknown provider'}`);
        continue;
      }
      const params = accel?.gpu_execution_accelerator?.find((a) => a.name === n)?.parameters;
      if (n === 'webgpu') {
        if (deviceId > 0) notes.push(`webgpu: device index ${deviceId} ignored: onnxruntime-node's WebGPU provider always runs on the default adapter`);
        out.push({ name: n, options: webgpuOptions(params, notes) });
      } else out.push({ name: n, deviceId, options: n === 'tensorrt' ? trtOptions(params) : undefined });
    }
  } else {
    for (const a of accel?.cpu_execution_accelerator ?? []) {
      notes.push(`cpu_execution_accelerator '${a.name}' is not available in onnxruntime-node; using the CPU provider`);
    }
  }
  out.push({ name: 'cpu' });
  return { providers: out, notes };
}

function webgpuOptions(params: Record<string, string> | undefined, notes: string[]): Record<string, unknown> | undefined {
  if (!params) return undefined;
  const o: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) {
    const conv = WEBGPU_OPTIONS[k];
    if (conv) o[k] = conv(v);
    else notes.push(`webgpu parameter '${k}' is not a WebGPU provider option (known: ${Object.keys(WEBGPU_OPTIONS).join(', ')}); ignored`);
  }
  return o;
}

function trtOptions(params: Record<string, string> | undefined): Record<string, unknown> | undefined {
  if (!params) return undefined;
  const o: Record<string, unknown> = {};
  if (params.precision_mode === 'FP16') o.trtFp16Enable = true;
  if (params.precision_mode === 'INT8') o.trtInt8Enable = true;
  if (params.max_workspace_size_bytes) o.trtMaxWorkspaceSize = Number(params.max_workspace_size_bytes);
  if (params.trt_engine_cache_enable) o.trtEngineCacheEnable = params.trt_engine_cache_enable === 'true';
  if (params.trt_engine_cache_path) o.trtEngineCachePath = params.trt_engine_cache_path;
  return o;
}
