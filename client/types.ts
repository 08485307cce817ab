/**
 * The client's public vocabulary: what callers pass to `infer` (inputs, requested outputs, options),
 * what the server's answers look like once normalised (metadata, statistics, repository index, shared
 * memory, trace and log settings), and the InferenceClient interface both transports implement — so
 * code written against one (e.g. `tsi-node perf`) runs unchanged over the other. Option objects are
 * camelCase; objects that mirror the protocol keep its snake_case (`model_stats`, `byte_size`).
 */

import type { DataType, Parameters, ParamValue, TensorData } from '../core/types.js';
import type { ModelConfig } from '../core/config/model-config.js';

export type { DataType, Parameters, ParamValue, TensorData, ModelConfig };

/**
 * Tensor contents a caller may pass. Typed arrays go out as they are; plain arrays are converted to the
 * datatype (required for `number[]`, since JavaScript numbers do not say whether they are INT32 or FP32).
 * Strings and Uint8Arrays are BYTES elements; booleans are BOOL.
 */
export type InputData =
  | TensorData
  | readonly number[]
  | readonly bigint[]
  | readonly boolean[]
  | readonly (string | Uint8Array)[];

/** A slice of a registered shared-memory region holding (or receiving) a tensor. */
export interface SharedMemoryRef {
  region: string;
  byteSize: number;
  offset?: number;
}

export interface InferInputSpec {
  name: string;
  /** Omitted: taken from the typed array (Float32Array ⇒ FP32, string[] ⇒ BYTES, ...). */
  datatype?: DataType;
  shape: readonly number[];
  /** Row-major contents; leave out when `sharedMemory` carries the tensor. */
  data?: InputData;
  sharedMemory?: SharedMemoryRef;
  parameters?: Parameters;
}

export interface RequestedOutputSpec {
  name: string;
  /** HTTP only: per-output binary (true) or JSON (false) encoding; default from the call's `binaryOutputs`. */
  binary?: boolean;
  /** Top-N classification: the output comes back as BYTES "value:index[:label]". */
  classification?: number;
  sharedMemory?: SharedMemoryRef;
  parameters?: Parameters;
}

/** Per-call transport options, accepted by every operation. */
export interface CallOptions {
  /** Extra HTTP headers / gRPC metadata for this call. */
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Gives up after this many milliseconds (HTTP: aborts the fetch; gRPC: deadline). */
  timeoutMs?: number;
}

export interface InferOptions extends CallOptions {
  version?: string | number;
  id?: string;
  /** Omitted: every output, binary on HTTP. */
  outputs?: readonly (string | RequestedOutputSpec)[];
  /** Custom request parameters; reserved ones have the dedicated options below. */
  parameters?: Parameters;
  sequenceId?: number | bigint | string;
  sequenceStart?: boolean;
  sequenceEnd?: boolean;
  priority?: number;
  /** Server-side timeout in microseconds. */
  timeout?: number;
  /** HTTP only: send input tensors with the binary extension (default true) or as JSON. */
  binaryInputs?: boolean;
  /** HTTP only: ask for binary outputs (default true) or JSON ones. */
  binaryOutputs?: boolean;
}

export interface OutputTensor {
  name: string;
  datatype: DataType;
  shape: number[];
  /** Empty when the output went to a shared-memory region. */
  data: TensorData;
  parameters?: Parameters;
}

/**
 * Where one call's time went, in nanoseconds: `send` is the client encoding the request (and
 * compressing it), `recv` is reading and decoding the response body, `wait` the rest (network plus
 * server). perf reports them as Client Send / Client Recv.
 */
export interface RequestTiming {
  sendNs: number;
  waitNs: number;
  recvNs: number;
}

export interface ServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

export interface TensorMetadata {
  name: string;
  datatype: string;
  /** -1 marks a variable dimension (and the batch dimension of batching models). */
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

export interface StatisticDuration {
  count: number;
  ns: number;
}

export interface InferStatistics {
  success: StatisticDuration;
  fail: StatisticDuration;
  queue: StatisticDuration;
  compute_input: StatisticDuration;
  compute_infer: StatisticDuration;
  compute_output: StatisticDuration;
  cache_hit: StatisticDuration;
  cache_miss: StatisticDuration;
}

export interface InferBatchStatistics {
  batch_size: number;
  compute_input: StatisticDuration;
  compute_infer: StatisticDuration;
  compute_output: StatisticDuration;
}

export interface InferResponseStatistics {
  compute_infer: StatisticDuration;
  compute_output: StatisticDuration;
  success: StatisticDuration;
  fail: StatisticDuration;
  empty_response: StatisticDuration;
  cancel: StatisticDuration;
}

export interface MemoryUsage {
  type: string;
  id: number;
  byte_size: number;
}

/** One model version's statistics (statistics extension), numbers whichever transport fetched them. */
export interface ModelStatistics {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: InferStatistics;
  batch_stats: InferBatchStatistics[];
  memory_usage: MemoryUsage[];
  response_stats: Record<string, InferResponseStatistics>;
}

export interface RepositoryIndexEntry {
  name: string;
  version?: string;
  state?: string;
  reason?: string;
}

export interface LoadModelOptions extends CallOptions {
  /** A config to load the model with instead of its config.pbtxt (object or JSON text). */
  config?: string | ModelConfig | Record<string, unknown>;
  /** Model files to load from memory, keyed `file:<version>/<name>` or `<version>/<name>`. */
  files?: Record<string, Uint8Array>;
}

export interface UnloadModelOptions extends CallOptions {
  unloadDependents?: boolean;
}

export interface SystemSharedMemoryRegion {
  name: string;
  key: string;
  offset: number;
  byte_size: number;
}

/** Trace settings as the server reports them: `trace_level` is a list, the rest single strings. */
export type TraceSettings = Record<string, string | string[]>;
/** `null` clears a model-level override (falls back to the global value). */
export type TraceSettingsUpdate = Record<string, string | number | readonly string[] | null>;
export type LogSettings = Record<string, string | number | boolean>;
