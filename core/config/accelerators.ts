/**
 * A model's choice of GPU execution provider, as Triton's config writes it:
 * `optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" } ] } }`.
 * Triton's onnxruntime backend knows `tensorrt` and `cuda` there and refuses any other name when it
 * creates a KIND_GPU instance ("unknown Execution Accelerator 'x' is requested", INVALID_ARG: the model
 * fails to load); tsi adds `webgpu`. Pure: which providers are installed is the runtime's question.
 */

import type { ModelConfig } from './model-config.js';

/** The names a gpu_execution_accelerator may have in tsi. */
export const GPU_ACCELERATORS = ['tensorrt', 'cuda', 'webgpu'] as const;
export type GpuAccelerator = (typeof GPU_ACCELERATORS)[number];

/**
 * The GPU providers the config names, in its order, without repeats. Throws Triton's message for a
 * name outside GPU_ACCELERATORS. TensorRT brings CUDA after it unless CUDA is named too, as in
 * Triton's onnxruntime backend (TensorRT hands the nodes it cannot build to CUDA).
 */
export function namedGpuAccelerators(config: ModelConfig): GpuAccelerator[] {
  const out: GpuAccelerator[] = [];
  for (const a of config.optimization?.execution_accelerators?.gpu_execution_accelerator ?? []) {
    const name = a.name ?? '';
    if (!(GPU_ACCELERATORS as readonly string[]).includes(name)) throw new Error(`unknown Execution Accelerator '${name}' is requested`);
    if (!out.includes(name as GpuAccelerator)) out.push(name as GpuAccelerator);
  }
  if (out.includes('tensorrt') && !out.includes('cuda')) out.splice(out.indexOf('tensorrt') + 1, 0, 'cuda');
  return out;
}

/** The parameters the config gives one named accelerator. */
export function acceleratorParameters(config: ModelConfig, name: string): Record<string, string> | undefined {
  return config.optimization?.execution_accelerators?.gpu_execution_accelerator?.find((a) => a.name === name)?.parameters;
}

/**
 * The config as loaded names the provider its KIND_GPU instances run on: when the config named none,
 * `gpu_execution_accelerator [{ name: <provider> }]` is filled in with the ones used, so a client
 * reading GET /v2/models/m/config sees the choice in Triton's own field.
 */
export function withChosenAccelerators(config: ModelConfig, used: string[]): ModelConfig {
  const accel = config.optimization?.execution_accelerators;
  if (used.length === 0 || (accel?.gpu_execution_accelerator?.length ?? 0) > 0) return config;
  return {
    ...config,
    optimization: {
      ...config.optimization,
      execution_accelerators: { ...accel, gpu_execution_accelerator: used.map((name) => ({ name })) },
    },
  };
}
