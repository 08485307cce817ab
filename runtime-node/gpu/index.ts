/**
 * The GPU side of the Node runtime, one door: which execution providers this machine has and the order
 * a KIND_GPU instance tries them in (providers.ts), the WebGPU adapters Dawn offers (webgpu.ts), NVIDIA
 * GPUs read through nvidia-smi (nvidia.ts), and Triton's `nv_gpu_*` metrics (metrics.ts). What is
 * platform-neutral about a placement (its kind, provider and adapter) is core's InstancePlacement.
 */

export { candidateProviders, gpuCount, providerStatus, type ProviderChoice, type ProviderStatus } from './providers.js';
export { adapterLabel, probeWebGpu, vulkanHint, type WebGpuAdapter, type WebGpuProbe } from './webgpu.js';
export { queryNvidiaGpus, type NvidiaGpu, type NvidiaQuery } from './nvidia.js';
export { GpuMetrics, type GpuMetricsOptions } from './metrics.js';
