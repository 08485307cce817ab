/**
 * Which onnxruntime-node execution providers this machine can use, and the ones a model instance
 * tries, in order. The shipped binary bundles CPU and WebGPU; CUDA and TensorRT need the provider
 * libraries `tsi-node gpu install cuda` puts beside a matching core (cuda-install.ts), loaded by a
 * `serve` that found the CUDA libraries (cuda-env.ts), plus a GPU. Listing `['cuda','cpu']` to ORT
 * throws instead of falling back, so tsi picks the EPs itself and reports it.
 */

import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { acceleratorParameters, namedGpuAccelerators, TsiError, type InstanceSpec, type ModelConfig } from '../../core/index.js';
import { installedCuda } from './cuda-install.js';
import { loadOrt, ORT_DIR_ENV } from './ort.js';

export interface ProviderStatus {
  name: string;
  available: boolean;
  detail: string;
}

const require = createRequire(import.meta.url);

function bindingDir(): string | undefined {
  try {
    const pkg = process.env[ORT_DIR_ENV] || dirname(require.resolve('onnxruntime-node/package.json'));
    const dir = join(pkg, 'bin', 'napi-v6', process.platform, process.arch);
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
    bundled = loadOrt().listSupportedBackends();
  } catch (err) {
    return [{ name: 'cpu', available: false, detail: `onnxruntime-node failed to load: ${(err as Error).message}` }];
  }
  const gpus = gpuCount();
  cached = bundled.map(({ name, bundled: inBinary }) => {
    if (name === 'cpu') return { name, available: true, detail: 'bundled' };
    if (name === 'webgpu') return { name, available: inBinary, detail: inBinary ? 'bundled; needs a WebGPU adapter (tried at session creation)' : 'not in this build' };
    if (name === 'cuda' || name === 'tensorrt') {
      const lib = providerLib(name);
      if (!lib) return { name, available: false, detail: notLoadedDetail() };
      if (gpus === 0) return { name, available: false, detail: `provider library present but no NVIDIA GPU found` };
      return { name, available: true, detail: `${lib}, ${gpus} GPU(s)` };
    }
    return { name, available: inBinary, detail: inBinary ? 'bundled' : 'not bundled' };
  });
  return cached;
}

/** Why this process has no CUDA provider library: not installed, or installed but not loaded here. */
function notLoadedDetail(): string {
  const installed = installedCuda();
  if (!installed) return 'provider library not installed: tsi-node gpu install cuda (docs/gpu.md: CUDA and TensorRT)';
  return `installed (${installed.dir}) but not loaded by this process: \`tsi-node serve\` loads it when it finds the CUDA libraries (tsi-node doctor says which are missing)`;
}

const statusOf = (name: string) => providerStatus().find((p) => p.name === name);
const isAvailable = (name: string) => statusOf(name)?.available === true;
/** The provider's library is here (a missing GPU is found at session creation, and falls back). */
const isInstalled = (name: string) => name === 'webgpu' ? isAvailable(name) : providerLib(name as 'cuda' | 'tensorrt') !== undefined;

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

/** The kinds of model whose default GPU provider order is chosen apart: the onnxruntime backend's and the llm backend's decoders. */
export type ModelKind = 'onnx' | 'llm';

/**
 * The GPU providers a KIND_GPU instance tries when its config names none, by kind of model: the
 * fastest measured first. CUDA runs NVIDIA's own kernels (cuDNN, cuBLAS) where WebGPU runs generic
 * shaders through Vulkan: on the lent H200, ResNet-50 on WebGPU reached 1,115 images/s at batch 32
 * against PyTorch's 6,044 on the same card, and big_gpt on WebGPU 76 tokens/s against transformers'
 * 4,770 at 32 streams. So CUDA first for both kinds, WebGPU next; the CUDA column of bench/gpu-kit.sh's
 * table is what confirms or reorders this (docs/gpu.md).
 */
export const DEFAULT_GPU_ORDER: Record<ModelKind, readonly ('cuda' | 'webgpu')[]> = {
  onnx: ['cuda', 'webgpu'],
  llm: ['cuda', 'webgpu'],
};

/**
 * The providers an instance tries, best first. KIND_GPU: the ones the config names in
 * gpu_execution_accelerator (Triton's syntax; TensorRT brings CUDA after it), else DEFAULT_GPU_ORDER
 * for the kind of model; then the CPU. A named provider that is not installed here, or a name tsi
 * does not know, fails the load (INVALID_ARG, as Triton's onnxruntime backend does for unknown names).
 * Unavailable defaults are left out and `notes` says why, in words, for the log and the start-up table.
 * KIND_CPU: the CPU provider.
 */
export function candidateProviders(config: ModelConfig, spec: InstanceSpec, kind: ModelKind = 'onnx'): { providers: ProviderChoice[]; notes: string[] } {
  const notes: string[] = [];
  const out: ProviderChoice[] = [];
  const accel = config.optimization?.execution_accelerators;
  if (spec.kind === 'KIND_GPU') {
    const deviceId = Math.max(0, spec.deviceId);
    let named: string[];
    try {
      named = namedGpuAccelerators(config);
    } catch (err) {
      throw new TsiError('INVALID_ARG', `${(err as Error).message} for model '${config.name}' (gpu_execution_accelerator names one of tensorrt, cuda, webgpu)`);
    }
    for (const n of named) {
      if (!isInstalled(n)) {
        throw new TsiError('INVALID_ARG', `model '${config.name}': its config names gpu_execution_accelerator '${n}', but the ${n} provider is not installed here: ${statusOf(n)?.detail ?? 'not in this onnxruntime-node build'}`);
      }
    }
    const wanted = named.length > 0 ? named : [...DEFAULT_GPU_ORDER[kind]];
    notes.push(named.length > 0 ? `providers as the config names them: ${named.join(', ')}` : `no gpu_execution_accelerator named: the default order for ${kind === 'llm' ? 'an llm decoder' : 'an onnx model'}, ${wanted.join(', ')}`);
    for (const n of wanted) {
      if (!isAvailable(n)) {
        notes.push(`${n} not available: ${statusOf(n)?.detail ?? 'unknown provider'}`);
        continue;
      }
      const params = acceleratorParameters(config, n);
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
