/**
 * How an onnxruntime-node session is made, for both users of it: the onnxruntime backend's instances
 * (worker.ts) and the `llm` backend's decoders (llm/decoder-worker.ts). The config's Triton
 * onnxruntime_backend parameters map to ORT session options here on the main thread, and a worker
 * opens its session by trying the candidate execution providers in order. onnxruntime-node is a
 * type import only: the worker passes its loaded module in, so the main thread never loads it here.
 */

import type * as Ort from 'onnxruntime-node';
import type { ModelConfig } from '../../core/index.js';
import { gpuLocked } from '../gpu/lock.js';
import type { ProviderChoice } from '../gpu/providers.js';

/** Cores the model instances share when configs set no thread count: all but 1 from 4 cores, 2 from 8. */
export function computeCores(cores: number): number {
  return cores >= 8 ? cores - 2 : cores >= 4 ? cores - 1 : cores;
}

/**
 * The intra-op threads a session of this config gets (its calling thread included): the count its
 * `intra_op_thread_count` parameter names, as written (`pinned`), or else the inference cores
 * (computeCores, less `reserve`) split among the model's instances. The same whatever else is loaded
 * and in whatever order: a model's speed depends only on what else is busy, never on who loaded first.
 */
export function intraOpThreads(config: ModelConfig, instanceCount: number, cores: number, reserve = 0): { threads: number; pinned: boolean } {
  const intra = config.parameters?.intra_op_thread_count?.string_value;
  if (intra !== undefined) return { threads: Number(intra), pinned: true };
  // Split among instances so one model's instances don't oversubscribe each other, and leave the
  // server's main thread (HTTP, gRPC, batching) cores of its own on bigger machines: with every core
  // taken, ORT's parallel loops wait for threads the main thread has displaced (bench:gpu on 16
  // cores: served/raw 0.81-0.85 with 16 threads, 0.96 with 14, at the same or higher throughput).
  return { threads: Math.max(1, Math.floor((computeCores(cores) - reserve) / Math.max(1, instanceCount))), pinned: false };
}

/**
 * A run at least this long on one thread makes a session worth a pool of its own (worker.ts widens
 * it): a parallel loop's wake-up costs tens of microseconds, a few percent of such a run, while a
 * tiny model's whole run is that long.
 */
export const WIDEN_MS = 1;

/**
 * onnxruntime's session option that makes a session's idle intra-op threads sleep instead of
 * spinning (ORT spins them for a while after each parallel loop): with a pool per session, the pools
 * of models at rest then cost no CPU, and busy ones do not burn the cores others are computing on.
 */
export const NO_SPINNING = { session: { intra_op: { allow_spinning: '0' } } } as const;

/**
 * Triton onnxruntime_backend parameters → ORT session options. `reserve`: cores kept back from the
 * instances' share when the config sets no thread count (beyond what computeCores keeps).
 */
export function sessionOptions(config: ModelConfig, instanceCount: number, cores: number, reserve = 0): Ort.InferenceSession.SessionOptions {
  const p = (k: string) => config.parameters?.[k]?.string_value;
  const o: Ort.InferenceSession.SessionOptions = {};
  o.intraOpNumThreads = intraOpThreads(config, instanceCount, cores, reserve).threads;
  const inter = p('inter_op_thread_count');
  if (inter !== undefined) o.interOpNumThreads = Number(inter);
  const mode = p('execution_mode');
  if (mode !== undefined) o.executionMode = mode === '1' ? 'parallel' : 'sequential';
  const arena = p('enable_mem_arena');
  if (arena !== undefined) o.enableCpuMemArena = arena === '1' || arena === 'true';
  const pattern = p('enable_mem_pattern');
  if (pattern !== undefined) o.enableMemPattern = pattern === '1' || pattern === 'true';
  const level = config.optimization?.graph?.level;
  o.graphOptimizationLevel = level === -1 ? 'basic' : level === 1 ? 'extended' : 'all';
  return o;
}

export type OpenedSession =
  | { session: Ort.InferenceSession; provider: string; lock?: Int32Array; failures: string[] }
  | { session?: undefined; failures: string[] };

/**
 * Creates a session with the first of `providers` that works (in a worker thread); each failure is
 * kept, one line each, so the choice can be logged. A WebGPU session is created holding the
 * process's WebGPU lock, and its `lock` is what its runs and release must take too. `webgpuOptions`
 * apply to the WebGPU try only (an LLM decoder's outputs left on the device: llm/device-kv.ts).
 */
export async function openSession(
  ort: typeof Ort, source: string | Uint8Array, options: Ort.InferenceSession.SessionOptions,
  providers: ProviderChoice[], gpuLock: SharedArrayBuffer, webgpuOptions: Ort.InferenceSession.SessionOptions = {},
): Promise<OpenedSession> {
  const failures: string[] = [];
  for (const p of providers) {
    const ep = p.name === 'cpu' ? 'cpu' : { name: p.name, ...(p.deviceId !== undefined ? { deviceId: p.deviceId } : {}), ...(p.options ?? {}) };
    const lock = p.name === 'webgpu' ? new Int32Array(gpuLock) : undefined;
    try {
      const session = await gpuLocked(lock, () => ort.InferenceSession.create(source as string, {
        ...options, ...(p.name === 'webgpu' ? webgpuOptions : {}), executionProviders: [ep as Ort.InferenceSession.ExecutionProviderConfig],
      }));
      return { session, provider: p.name, lock, failures };
    } catch (err) {
      failures.push(`${p.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return { failures };
}
