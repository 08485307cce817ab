/**
 * The client contract: the operations of tritonclient that HttpClient (fetch; Node and browsers) and
 * GrpcClient (Node) both implement, so perf and the shared client tests drive either one. Kept apart
 * from types.ts because it names InferResult (tensor.ts), which itself reads types.ts's shapes.
 */

import type {
  CallOptions, InferInputSpec, InferOptions, LoadModelOptions, LogSettings, ModelConfig, ModelMetadata, ModelStatistics,
  RepositoryIndexEntry, ServerMetadata, SystemSharedMemoryRegion, TraceSettings, TraceSettingsUpdate, UnloadModelOptions,
} from './types.js';
import type { InferResult } from './tensor.js';

/** Safe to use from many concurrent async callers; `close()` releases connections. */
export interface InferenceClient {
  readonly protocol: 'http' | 'grpc';
  isServerLive(opts?: CallOptions): Promise<boolean>;
  isServerReady(opts?: CallOptions): Promise<boolean>;
  /** False for a known-but-not-ready and for an unknown model; throws only when no server answers. */
  isModelReady(model: string, version?: string | number, opts?: CallOptions): Promise<boolean>;
  getServerMetadata(opts?: CallOptions): Promise<ServerMetadata>;
  getModelMetadata(model: string, version?: string | number, opts?: CallOptions): Promise<ModelMetadata>;
  getModelConfig(model: string, version?: string | number, opts?: CallOptions): Promise<ModelConfig>;
  infer(model: string, inputs: readonly InferInputSpec[], opts?: InferOptions): Promise<InferResult>;
  /** Every model's statistics when `model` is omitted. */
  getInferenceStatistics(model?: string, version?: string | number, opts?: CallOptions): Promise<ModelStatistics[]>;
  getModelRepositoryIndex(opts?: CallOptions & { ready?: boolean }): Promise<RepositoryIndexEntry[]>;
  loadModel(model: string, opts?: LoadModelOptions): Promise<void>;
  unloadModel(model: string, opts?: UnloadModelOptions): Promise<void>;
  getSystemSharedMemoryStatus(region?: string, opts?: CallOptions): Promise<SystemSharedMemoryRegion[]>;
  registerSystemSharedMemory(name: string, key: string, byteSize: number, offset?: number, opts?: CallOptions): Promise<void>;
  /** Every region when `name` is omitted. */
  unregisterSystemSharedMemory(name?: string, opts?: CallOptions): Promise<void>;
  getTraceSettings(model?: string, opts?: CallOptions): Promise<TraceSettings>;
  updateTraceSettings(settings: TraceSettingsUpdate, model?: string, opts?: CallOptions): Promise<TraceSettings>;
  getLogSettings(opts?: CallOptions): Promise<LogSettings>;
  updateLogSettings(settings: LogSettings, opts?: CallOptions): Promise<LogSettings>;
  close(): Promise<void>;
}
