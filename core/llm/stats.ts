/**
 * What an `llm` model version measures: time to first token, inter-token latency, end-to-end latency,
 * prompt and generated tokens, generation throughput, running and waiting sequences and KV-cache use.
 * One LlmStats per model version feeds three readers, so they always agree:
 * - the statistics extension (`llm_stats` in the model's entry, beside Triton's fields);
 * - `/metrics` under the names of Triton's vLLM backend (`vllm:time_to_first_token_seconds`,
 *   `vllm:time_per_output_token_seconds` and current vLLM's name for the same gaps,
 *   `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`,
 *   `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, labels model/version) and of vLLM's
 *   engine gauges (`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` and v0's `vllm:gpu_cache_usage_perc`,
 *   `vllm:avg_generation_throughput_toks_per_s`), stored families in the server's MetricsRegistry;
 *   instances on a GPU add tsi's `tsi_llm_device_bytes_total{direction, data}` (bytes moved between
 *   host and device: `kv`, `inputs`, `logits`, `ids`) and `tsi_llm_device_tensors` (tensors held there).
 */

import type { MetricFamily, MetricSeries, MetricsRegistry } from '../metrics.js';

// Triton's vLLM backend's buckets.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
const TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];
// vLLM's inter_token_latency_seconds buckets.
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const E2E_BUCKETS = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0];

/**
 * A decoder session on a device, totals since it started: tensors it holds there now (KV caches),
 * and bytes moved host → device and device → host by what they were (`kv`, `inputs`, `logits`, `ids`).
 */
export interface DeviceUse {
  tensors: number;
  toDevice: Record<string, number>;
  toHost: Record<string, number>;
}

interface Summary {
  count: number;
  ns: number;
}

/** Throughput over the last few seconds (a ring of one-second buckets). */
class Rate {
  private readonly buckets = new Float64Array(10);
  private last = 0;

  add(n: number, nowMs: number): void {
    this.roll(nowMs);
    this.buckets[Math.floor(nowMs / 1000) % this.buckets.length]! += n;
  }

  perSecond(nowMs: number): number {
    this.roll(nowMs);
    const cur = Math.floor(nowMs / 1000);
    // Whole seconds only, so a scrape early in a second does not read a partial bucket as a rate.
    let sum = 0;
    for (let s = cur - this.buckets.length + 1; s < cur; s++) sum += this.buckets[((s % this.buckets.length) + this.buckets.length) % this.buckets.length]!;
    return sum / (this.buckets.length - 1);
  }

  private roll(nowMs: number): void {
    const cur = Math.floor(nowMs / 1000);
    if (this.last === 0) this.last = cur;
    for (let s = Math.max(this.last + 1, cur - this.buckets.length + 1); s <= cur; s++) this.buckets[s % this.buckets.length] = 0;
    this.last = Math.max(this.last, cur);
  }
}

export class LlmStats {
  promptTokens = 0;
  generationTokens = 0;
  readonly ttft: Summary = { count: 0, ns: 0 };
  readonly interToken: Summary = { count: 0, ns: 0 };
  readonly e2e: Summary = { count: 0, ns: 0 };
  running = 0;
  waiting = 0;
  /** Sequence slots over all instances. */
  maxNumSeqs = 0;
  /** KV tokens reserved by running sequences, and the budget, over all instances. */
  kvTokensReserved = 0;
  kvTokensMax = 0;
  /** Bytes the sessions really hold (padding included). */
  kvBytesHeld = 0;
  kvBytesPerToken = 0;
  steps = 0;
  /**
   * Decode steps' time by where it went, summed: the model's run (graph), laying out its inputs,
   * choosing tokens on the server's thread (sampling), text and sending (streaming), and the gaps
   * between consecutive steps (idle: the worker's own sampling and messages, a busy thread).
   */
  readonly decodeSplit = { steps: 0, graphNs: 0, inputNs: 0, samplingNs: 0, streamingNs: 0, idleNs: 0 };
  /** Sequences that joined others already decoding, after their prefill (in-flight batching at work). */
  joined = 0;
  private readonly rate = new Rate();
  private readonly m?: {
    families: MetricFamily[];
    metrics: MetricSeries[];
    ttft: MetricSeries; tpot: MetricSeries; itl: MetricSeries; e2e: MetricSeries; prompt: MetricSeries; gen: MetricSeries;
    running: MetricSeries; waiting: MetricSeries; kv: MetricSeries; kvV0: MetricSeries; tput: MetricSeries;
    prefixQueries: MetricSeries; prefixHits: MetricSeries;
  };
  /** Prompt tokens looked up in the prefix cache, and those found there (prefix caching on). */
  prefixQueries = 0;
  prefixHits = 0;
  /** Bytes the prefix caches hold, over all instances. */
  prefixBytes = 0;
  /** Instances on a GPU: tensors they hold there and bytes moved so far, over all instances. */
  device?: DeviceUse;
  private deviceSeries?: { families: MetricFamily[]; tensors: MetricSeries; bytes: Map<string, MetricSeries> };

  constructor(private readonly metrics: MetricsRegistry | undefined, private readonly labels: { model: string; version: string }, private readonly nowMs: () => number) {
    if (!metrics) return;
    const families: MetricFamily[] = [];
    const all: MetricSeries[] = [];
    const metric = (name: string, help: string, type: 'counter' | 'gauge' | 'histogram', buckets?: number[]) => {
      const f = metrics.family(name, help, type);
      families.push(f);
      const m = f.metric(labels, buckets);
      all.push(m);
      return m;
    };
    this.m = {
      families, metrics: all,
      ttft: metric('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', 'histogram', TTFT_BUCKETS),
      tpot: metric('vllm:time_per_output_token_seconds', 'Histogram of time per output token in seconds.', 'histogram', TPOT_BUCKETS),
      // Current vLLM observes each gap between a request's tokens under this name (time_per_output_token
      // became a per-request mean there); Triton's vLLM backend still writes the gaps as time_per_output_token.
      itl: metric('vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.', 'histogram', ITL_BUCKETS),
      e2e: metric('vllm:e2e_request_latency_seconds', 'Histogram of end to end request latency in seconds.', 'histogram', E2E_BUCKETS),
      prompt: metric('vllm:prompt_tokens_total', 'Number of prefill tokens processed.', 'counter'),
      gen: metric('vllm:generation_tokens_total', 'Number of generation tokens processed.', 'counter'),
      running: metric('vllm:num_requests_running', 'Number of requests currently running on the model.', 'gauge'),
      waiting: metric('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', 'gauge'),
      kv: metric('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', 'gauge'),
      // vLLM v0's name for the same gauge, which Triton's vLLM backend reported and dashboards still query.
      kvV0: metric('vllm:gpu_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', 'gauge'),
      tput: metric('vllm:avg_generation_throughput_toks_per_s', 'Average generation throughput in tokens/s.', 'gauge'),
      // vLLM v1's counters (`vllm:prefix_cache_queries`, `_hits`), as prometheus_client writes them out.
      prefixQueries: metric('vllm:prefix_cache_queries_total', 'Prompt tokens looked up in the prefix cache.', 'counter'),
      prefixHits: metric('vllm:prefix_cache_hits_total', 'Prompt tokens found in the prefix cache.', 'counter'),
    };
  }

  firstToken(ns: number, promptTokens: number): void {
    add(this.ttft, ns);
    this.promptTokens += promptTokens;
    this.m?.ttft.observe(ns / 1e9);
    this.m?.prompt.increment(promptTokens);
  }

  /** A prompt was prefilled with prefix caching on: its length, and the tokens the cache had. */
  prefixLookup(queried: number, hit: number): void {
    this.prefixQueries += queried;
    this.prefixHits += hit;
    this.m?.prefixQueries.increment(queried);
    this.m?.prefixHits.increment(hit);
  }

  tokens(n: number): void {
    this.generationTokens += n;
    this.rate.add(n, this.nowMs());
    this.m?.gen.increment(n);
  }

  interTokenGap(ns: number): void {
    add(this.interToken, ns);
    this.m?.tpot.observe(ns / 1e9);
    this.m?.itl.observe(ns / 1e9);
  }

  finished(ns: number): void {
    add(this.e2e, ns);
    this.m?.e2e.observe(ns / 1e9);
  }

  /** The instances' device use, summed (totals since each started). */
  deviceUse(use: DeviceUse): void {
    this.device = use;
    if (!this.metrics) return;
    if (!this.deviceSeries) {
      const tensors = this.metrics.family('tsi_llm_device_tensors', 'Tensors the model\'s instances hold on their device (KV caches).', 'gauge');
      const bytes = this.metrics.family('tsi_llm_device_bytes_total', 'Bytes moved between host and device by the model\'s decoder sessions, by direction and what they were.', 'counter');
      this.deviceSeries = { families: [tensors, bytes], tensors: tensors.metric(this.labels), bytes: new Map() };
    }
    const d = this.deviceSeries;
    d.tensors.set(use.tensors);
    for (const [direction, side] of [['to_device', use.toDevice], ['to_host', use.toHost]] as const) {
      for (const [data, n] of Object.entries(side)) {
        const key = `${direction}:${data}`;
        let m = d.bytes.get(key);
        if (!m) d.bytes.set(key, (m = d.families[1]!.metric({ ...this.labels, direction, data })));
        if (n > m.value()) m.increment(n - m.value());
      }
    }
  }

  /** Called after anything that moves the gauges. */
  gauges(): void {
    if (!this.m) return;
    this.m.running.set(this.running);
    this.m.waiting.set(this.waiting);
    this.m.kv.set(this.kvUsage());
    this.m.kvV0.set(this.kvUsage());
    this.m.tput.set(this.tokensPerSecond());
  }

  kvUsage(): number {
    return this.kvTokensMax > 0 ? this.kvTokensReserved / this.kvTokensMax : 0;
  }

  tokensPerSecond(): number {
    return this.rate.perSecond(this.nowMs());
  }

  /** The `llm_stats` section of the statistics extension. */
  toJson(): Record<string, unknown> {
    return {
      prompt_tokens: this.promptTokens,
      generation_tokens: this.generationTokens,
      generation_tokens_per_second: Math.round(this.tokensPerSecond() * 10) / 10,
      time_to_first_token: { ...this.ttft },
      inter_token_latency: { ...this.interToken },
      request_latency: { ...this.e2e },
      steps: this.steps,
      decode_step_split: {
        steps: this.decodeSplit.steps, graph_ns: this.decodeSplit.graphNs, inputs_ns: this.decodeSplit.inputNs,
        sampling_ns: this.decodeSplit.samplingNs, streaming_ns: this.decodeSplit.streamingNs, idle_ns: this.decodeSplit.idleNs,
      },
      joined_sequences: this.joined,
      running_sequences: this.running,
      waiting_sequences: this.waiting,
      max_num_seqs: this.maxNumSeqs,
      kv_cache: {
        reserved_tokens: this.kvTokensReserved,
        max_tokens: this.kvTokensMax,
        usage: Math.round(this.kvUsage() * 1e4) / 1e4,
        held_bytes: this.kvBytesHeld,
        bytes_per_token: this.kvBytesPerToken,
        prefix_cache: { bytes: this.prefixBytes, queried_tokens: this.prefixQueries, hit_tokens: this.prefixHits },
      },
      ...(this.device ? { device: { tensors: this.device.tensors, bytes_to_device: this.device.toDevice, bytes_to_host: this.device.toHost } } : {}),
    };
  }

  /** Gives the metric series back (the model is unloading). */
  release(): void {
    for (const m of [...this.m?.metrics ?? [], this.deviceSeries?.tensors, ...this.deviceSeries?.bytes.values() ?? []]) m?.release();
    for (const f of [...this.m?.families ?? [], ...this.deviceSeries?.families ?? []]) f.release();
  }
}

function add(s: Summary, ns: number): void {
  s.count++;
  s.ns += Math.max(0, Math.round(ns));
}
