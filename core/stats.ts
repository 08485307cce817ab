/**
 * Per model-version statistics with Triton's fields and meaning (statistics extension, E.1): request
 * counts and cumulative durations, execution counts, per-batch-size compute times, failure reasons for
 * the metrics' `reason` label. Schedulers and the server record into it; the HTTP/gRPC statistics
 * endpoints and the Prometheus exporter read it, so both always agree.
 */

import type { LlmModelInfo } from './llm/model-info.js';

export interface Duration {
  count: number;
  ns: number;
}

export type FailureReason = 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER';

const dur = (): Duration => ({ count: 0, ns: 0 });

export interface BatchStat {
  batch_size: number;
  compute_input: Duration;
  compute_infer: Duration;
  compute_output: Duration;
}

/** One response index's statistics (Triton's InferResponseStatistics). */
export interface ResponseStat {
  compute_infer: Duration;
  compute_output: Duration;
  success: Duration;
  fail: Duration;
  empty_response: Duration;
  cancel: Duration;
}

/** A response's timings as a backend reports them (execution.ts's ResponseTiming, by error code). */
export interface ResponseTimes {
  inferNs: number;
  outputNs?: number;
  /** 'CANCELLED' for a cancelled response, another code for a failed one, absent for success. */
  errorCode?: string;
}

export class ModelStats {
  inferenceCount = 0;
  executionCount = 0;
  lastInferenceMs = 0;
  readonly success = dur();
  readonly fail = dur();
  readonly queue = dur();
  readonly computeInput = dur();
  readonly computeInfer = dur();
  readonly computeOutput = dur();
  readonly cacheHit = dur();
  readonly cacheMiss = dur();
  readonly failures: Record<FailureReason, number> = { REJECTED: 0, CANCELED: 0, BACKEND: 0, OTHER: 0 };
  readonly batches = new Map<number, BatchStat>();
  /** By response index within its request ('0', '1', ...): filled only by backends that report responses. */
  readonly responses = new Map<string, ResponseStat>();
  /** Requests accepted but not yet started by a backend (nv_inference_pending_request_count). */
  pending = 0;
  /** Requests accepted and not yet answered (for draining). */
  inflight = 0;
  /** Model load time in seconds (nv_model_load_duration_secs). */
  loadDurationSecs = 0;
  /** Sections beyond Triton's fields that a scheduler adds to the model's statistics (an LLM's `llm_stats`). */
  readonly sections = new Map<string, () => unknown>();
  /** What the OpenAI API needs of the version when it is an `llm` model (set by that backend at load). */
  llm?: LlmModelInfo;

  /** One request finished successfully: end-to-end duration and its share of an execution. */
  recordSuccess(totalNs: number, queueNs: number, times: { input: number; infer: number; output: number }, epochMs: number): void {
    add(this.success, totalNs);
    add(this.queue, queueNs);
    add(this.computeInput, times.input);
    add(this.computeInfer, times.infer);
    add(this.computeOutput, times.output);
    this.lastInferenceMs = epochMs;
  }

  recordFailure(totalNs: number, reason: FailureReason, epochMs: number): void {
    add(this.fail, totalNs);
    this.failures[reason]++;
    this.lastInferenceMs = epochMs;
  }

  /**
   * A request answered from the response cache: it counts as a success (and in the request duration)
   * but not as an inference or execution, as in Triton; `lookupNs` is the cache lookup time.
   */
  recordCacheHit(totalNs: number, lookupNs: number, epochMs: number): void {
    add(this.success, totalNs);
    add(this.cacheHit, lookupNs);
    this.lastInferenceMs = epochMs;
  }

  /** A cache miss: lookup plus insertion time (the request itself is recorded as usual). */
  recordCacheMiss(ns: number): void {
    add(this.cacheMiss, ns);
  }

  /**
   * One response a backend reported (TRITONBACKEND_ModelInstanceReportResponseStatistics), added as
   * Triton's InferenceStatsAggregator does: cancelled → cancel; with an output → compute_infer,
   * compute_output and success (or fail); without one → compute_infer and empty_response (or fail).
   */
  recordResponse(index: number, t: ResponseTimes): void {
    const key = String(index);
    let s = this.responses.get(key);
    if (!s) {
      s = { compute_infer: dur(), compute_output: dur(), success: dur(), fail: dur(), empty_response: dur(), cancel: dur() };
      this.responses.set(key, s);
    }
    const total = t.inferNs + (t.outputNs ?? 0);
    if (t.errorCode === 'CANCELLED') return add(s.cancel, total);
    add(s.compute_infer, t.inferNs);
    if (t.outputNs !== undefined) add(s.compute_output, t.outputNs);
    if (t.errorCode !== undefined) add(s.fail, total);
    else add(t.outputNs !== undefined ? s.success : s.empty_response, total);
  }

  /**
   * One execution of `batchSize` rows, of which `inferences` are requests' own (default: all). The
   * sequence batcher's padding rows count in the batch size, as Triton's null requests do, but are
   * no inferences.
   */
  recordExecution(batchSize: number, times: { input: number; infer: number; output: number }, inferences = batchSize): void {
    this.inferenceCount += inferences;
    this.executionCount += 1;
    let b = this.batches.get(batchSize);
    if (!b) {
      b = { batch_size: batchSize, compute_input: dur(), compute_infer: dur(), compute_output: dur() };
      this.batches.set(batchSize, b);
    }
    add(b.compute_input, times.input);
    add(b.compute_infer, times.infer);
    add(b.compute_output, times.output);
  }

  /** Triton's ModelStatistics JSON (also the gRPC message's field names). */
  toJson(name: string, version: string): Record<string, unknown> {
    return {
      name,
      version,
      last_inference: this.lastInferenceMs,
      inference_count: this.inferenceCount,
      execution_count: this.executionCount,
      inference_stats: {
        success: { ...this.success },
        fail: { ...this.fail },
        queue: { ...this.queue },
        compute_input: { ...this.computeInput },
        compute_infer: { ...this.computeInfer },
        compute_output: { ...this.computeOutput },
        cache_hit: { ...this.cacheHit },
        cache_miss: { ...this.cacheMiss },
      },
      response_stats: Object.fromEntries([...this.responses].map(([k, s]) => [k, {
        compute_infer: { ...s.compute_infer }, compute_output: { ...s.compute_output }, success: { ...s.success },
        fail: { ...s.fail }, empty_response: { ...s.empty_response }, cancel: { ...s.cancel },
      }])),
      batch_stats: [...this.batches.values()]
        .sort((a, b) => a.batch_size - b.batch_size)
        .map((b) => ({
          batch_size: b.batch_size,
          compute_input: { ...b.compute_input },
          compute_infer: { ...b.compute_infer },
          compute_output: { ...b.compute_output },
        })),
      memory_usage: [],
      ...Object.fromEntries([...this.sections].map(([k, f]) => [k, f()])),
    };
  }
}

function add(d: Duration, ns: number): void {
  d.count++;
  d.ns += Math.max(0, Math.round(ns));
}
