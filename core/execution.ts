/**
 * What one execution on a model instance exchanges, the contract every scheduler, backend and the
 * request path share: the instance (its spec, placement and `execute`), the requests handed to it, the
 * responses it sends back and the times it measured, plus what a backend learns from a model file for
 * auto-complete. It imports no other module of core's but errors and types, so backend.ts,
 * scheduler.ts, request.ts and the config pipeline can all depend on it without depending on each
 * other (the rules of ownership and concurrency are at the top of backend.ts).
 */

import type { TsiError } from './errors.js';
import type { Parameters, Tensor, TraceStamps } from './types.js';

/** What a backend's auto-complete learns from the model file. */
export interface ModelIoInfo {
  inputs: { name: string; datatype: string; shape: (number | string)[] }[];
  outputs: { name: string; datatype: string; shape: (number | string)[] }[];
  /** The operator types the graph's nodes use (`domain:op` outside the ONNX domain), when the reader gives them. */
  ops?: string[];
}

export interface InstanceSpec {
  /** e.g. `simple_0_1`: group name and index within it. */
  name: string;
  kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL';
  /** GPU id for KIND_GPU, else -1. */
  deviceId: number;
  /** Index of this instance among all the model version's instances. */
  index: number;
  /**
   * A passive instance (instance_group `passive: true`, TRITONBACKEND_ModelInstanceIsPassive): created
   * and loaded, but never handed requests by a scheduler; its backend may use it on its own.
   */
  passive?: boolean;
}

/** Durations a backend measured for one execution, in nanoseconds. */
export interface ExecutionTimes {
  computeInputNs: number;
  computeInferNs: number;
  computeOutputNs: number;
  /** Time a pipelined batch waited behind the previous one on its instance: queue time, not compute. */
  waitNs?: number;
}

/**
 * Where an instance really runs, which can differ from what its config asked: a KIND_GPU instance on
 * a machine without a usable GPU runs on the CPU. Shown in logs, the start-up table and the config as
 * loaded (`GET /v2/models/{m}/config`).
 */
export interface InstancePlacement {
  /** KIND_GPU when it runs on a GPU (through whichever provider), else KIND_CPU (or KIND_MODEL). */
  kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL';
  /** The execution provider, e.g. `webgpu`, `cuda`, `cpu`, `wasm`. */
  provider: string;
  /** The GPU or adapter in words, when known. */
  adapter?: string;
  /** Why better providers were skipped, in words. */
  notes?: string[];
}

export interface BackendInstance {
  readonly spec: InstanceSpec;
  /** Human-readable device / execution provider, e.g. `cpu` or `cuda:0`; shown in logs and `doctor`. */
  readonly device: string;
  /** Where it really runs; absent: as its spec says. */
  readonly placement?: InstancePlacement;
  execute(requests: BackendRequest[]): Promise<ExecutionTimes | void>;
  unload(): Promise<void>;
  /**
   * True when the instance may be handed its next batch before the current `execute` resolves and
   * will still run the batches one at a time, in order (a worker thread with its own message queue).
   * Schedulers then queue one full batch behind the running one.
   */
  readonly pipelined?: boolean;
  /**
   * Whether the instance can serve now (TRITONBACKEND_ModelInstanceReady): resolves if so, rejects with
   * the reason if not (a crashed worker process, a model's own readiness check saying no). Asked on
   * every model-readiness request, possibly concurrently with `execute`; absent: always ready.
   */
  checkReady?(): Promise<void>;
  /** Memory the instance holds, as its backend measured it at creation (bytes); absent: not measured. */
  readonly memoryBytes?: number;
}

/**
 * TRITONBACKEND_ModelInstanceReportResponseStatistics: how one response of a request was spent, in
 * nanoseconds. Core keys it by the response's index within its request (0, 1, ...) and adds it to the
 * model's `response_stats` as Triton does: with an output, `inferNs` then `outputNs` (success, or fail
 * when `error` is set); without one, an empty response (or a failure) of `inferNs`; an `error` of
 * CANCELLED counts as cancelled, whatever the times.
 */
export interface ResponseTiming {
  /** From the response's start to the start of its output (the whole response when it had none). */
  inferNs: number;
  /** Writing the response's output; absent when it had none (an empty response, or one cut short). */
  outputNs?: number;
  /** What the response failed with, if it did. */
  error?: TsiError;
}

export interface ResponsePayload {
  outputs: Tensor[];
  parameters?: Parameters;
}

/** One request inside a batch handed to a backend. */
export interface BackendRequest {
  readonly id: string;
  /** Validated inputs, by name, including control and implicit-state inputs a scheduler added. */
  readonly inputs: ReadonlyMap<string, Tensor>;
  /** Names of the outputs this request wants; a backend may still compute all of them. */
  readonly requestedOutputs: readonly string[];
  /** Custom (non-reserved) request parameters. */
  readonly parameters: Readonly<Parameters>;
  /** Rows this request contributes to the batch dimension (1 for non-batching models). */
  readonly batchSize: number;
  /** Output names the backend must return even if not requested (implicit state outputs). */
  readonly stateOutputs?: readonly string[];
  /**
   * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: called during `execute` instead of a final response, it
   * releases the request for another execution once this one ends (models with `iterative_sequence`);
   * other models answer it with Triton's refusal.
   */
  reschedule?(): void;
  /**
   * The request's sequence, when a sequence batcher runs it (TRITONBACKEND_RequestCorrelationId and
   * its flags): an iterative sequence's id is the one the batcher assigned.
   */
  readonly sequence?: { readonly id: bigint | string; readonly start: boolean; readonly end: boolean };
  /** Reports one response's timings into the model's `response_stats` (see ResponseTiming); may come after `execute` returned. */
  reportResponse?(timing: ResponseTiming): void;
  /** True once the client gave up on the request (closed its connection, cancelled its call). */
  readonly cancelled?: boolean;
  /**
   * Calls `cb` once when the client gives up (at once if it already has). A backend may stop work on
   * the request early; it must still send the request a final response.
   */
  onCancel?(cb: () => void): void;
  /** Core's: the request's trace, stamped around its executions (trace.ts); backends leave it alone. */
  readonly trace?: TraceStamps;
  /**
   * The response sender. `final` closes the request; sending after that is a no-op. Outputs a
   * request did not ask for are dropped by core.
   */
  send(response: ResponsePayload | TsiError, final: boolean): void;
}
