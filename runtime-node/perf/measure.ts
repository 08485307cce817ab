/**
 * `tsi-node perf`, a perf_analyzer for any KServe v2 server, built on tsi's own client. For each load
 * point (a concurrency or a request rate) it measures windows of `-p` ms until the last three agree
 * within `-s` percent on throughput and on latency (perf_analyzer's stability rule, at most `-r`
 * windows), then reports those three merged: throughput, latency average and percentiles, the client's
 * send/receive time, and the server's queue/compute split from statistics-extension deltas. Output
 * formats (table, CSV, plot) live in report.ts; the load itself in load.ts.
 */

import { HttpClient } from '../../client/http.js';
import { GrpcClient } from '../../client/grpc.js';
import { nodeHttpFetch } from '../../client/node-fetch.js';
import { InferenceServerError } from '../../client/errors.js';
import type { InferenceClient } from '../../client/inference-client.js';
import type { InferOptions, ModelStatistics } from '../../client/types.js';
import { buildInputSets, describeModel, type ModelInfo } from './data.js';
import { LoadRunner, type RequestRecord } from './load.js';
import { wireSender, type WireSender } from './wire.js';

export interface Range {
  start: number;
  end: number;
  step: number;
}

export interface PerfOptions {
  model: string;
  version?: string;
  url: string;
  protocol: 'http' | 'grpc';
  /** Exactly one of concurrency / requestRate; concurrency 1 when neither is given. */
  concurrency?: Range;
  requestRate?: Range;
  distribution: 'constant' | 'poisson';
  /** --async (default) or --sync; only request-rate mode differs (see load.ts). */
  async: boolean;
  maxThreads: number;
  batchSize: number;
  shapes: Record<string, number[]>;
  inputData: string;
  stringLength: number;
  stringData?: string;
  measurementMode: 'time_windows' | 'count_windows';
  measurementIntervalMs: number;
  measurementRequestCount: number;
  stabilityPct: number;
  maxTrials: number;
  /** Stabilise and report on this percentile instead of the average. */
  percentile?: number;
  /** With concurrency end 0: stop growing when latency passes this. */
  latencyThresholdMs?: number;
  sequenceLength: number;
  sequenceLengthVariation: number;
  numOfSequences: number;
  sequenceIdRange: { start: number; end: number };
  warmupRequestCount: number;
  binaryInputs: boolean;
  binaryOutputs: boolean;
  headers: Record<string, string>;
  grpcCompression?: 'gzip' | 'deflate';
  /** HTTP transport under the client: node:http (default, cheaper per call) or the platform fetch. */
  httpTransport?: 'node' | 'fetch';
  /**
   * How the load loop sends: 'wire' (default) pre-encodes each request and writes it on raw
   * connections (wire.ts; sequences, TLS and gRPC compression still use the client), 'client'
   * sends every request through the full client as an application would.
   */
  loadPath?: 'wire' | 'client';
}

export interface ServerSplit {
  successCount: number;
  inferenceCount: number;
  executionCount: number;
  requestUs: number;
  queueUs: number;
  computeInputUs: number;
  computeInferUs: number;
  computeOutputUs: number;
  overheadUs: number;
}

export interface PerfPoint {
  mode: 'concurrency' | 'request_rate';
  /** The concurrency or the request rate of this point. */
  load: number;
  stable: boolean;
  requestCount: number;
  durationS: number;
  throughput: number;
  avgUs: number;
  stdUs: number;
  /** Percentile (50, 90, 95, 99, and --percentile) ⇒ latency in µs. */
  percentiles: Record<number, number>;
  stabilizingUs: number;
  sendUs: number;
  recvUs: number;
  waitUs: number;
  /** perf_analyzer's "Network+Server Send/Recv": client wait minus server queue and compute, at least 0. */
  networkUs: number;
  delayed: number;
  /**
   * CPU the perf process itself used during the windows, as a percentage of one core. Near 100 the
   * load generator, not the server, sets the pace (perf_analyzer warns on the same condition).
   */
  clientCpuPct: number;
  server?: ServerSplit;
}

export interface PerfReport {
  model: ModelInfo;
  options: PerfOptions;
  points: PerfPoint[];
  /** Why the server-side split is missing, when it is. */
  serverStatsNote?: string;
}

export interface PerfIO {
  /** Progress lines (stderr in the CLI). */
  progress(line: string): void;
  /** Per-point reports (stdout in the CLI). */
  out(line: string): void;
}

export function createClient(o: Pick<PerfOptions, 'url' | 'protocol' | 'headers' | 'binaryInputs' | 'binaryOutputs' | 'grpcCompression' | 'httpTransport'>): InferenceClient {
  if (o.protocol === 'grpc') return new GrpcClient({ url: o.url, headers: o.headers, compression: o.grpcCompression });
  // Node's fetch costs about twice the CPU per call; a load generator should spend its time waiting, not working.
  const fetch = o.httpTransport === 'fetch' ? undefined : nodeHttpFetch();
  return new HttpClient({ url: o.url, headers: o.headers, binaryInputs: o.binaryInputs, binaryOutputs: o.binaryOutputs, fetch });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const nowNs = () => performance.now() * 1e6;
const PERCENTILES = [50, 90, 95, 99];

/** Nearest-rank percentile of sorted values. */
export function percentileOf(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** perf_analyzer's rule: over the last 3 windows, max/min ≤ 1 + s for throughput and for latency. */
export function isStable(windows: { throughput: number; latency: number }[], stabilityPct: number): boolean {
  if (windows.length < 3) return false;
  const last = windows.slice(-3);
  const within = (xs: number[]) => Math.min(...xs) > 0 && Math.max(...xs) / Math.min(...xs) <= 1 + stabilityPct / 100;
  return within(last.map((w) => w.throughput)) && within(last.map((w) => w.latency));
}

function sumStats(stats: ModelStatistics[]) {
  const z = { success: 0, successNs: 0, inference: 0, execution: 0, queueC: 0, queueNs: 0, inC: 0, inNs: 0, inferC: 0, inferNs: 0, outC: 0, outNs: 0 };
  for (const s of stats) {
    const i = s.inference_stats;
    z.success += i.success.count; z.successNs += i.success.ns;
    z.inference += s.inference_count; z.execution += s.execution_count;
    z.queueC += i.queue.count; z.queueNs += i.queue.ns;
    z.inC += i.compute_input.count; z.inNs += i.compute_input.ns;
    z.inferC += i.compute_infer.count; z.inferNs += i.compute_infer.ns;
    z.outC += i.compute_output.count; z.outNs += i.compute_output.ns;
  }
  return z;
}
type StatSum = ReturnType<typeof sumStats>;

function serverSplit(a: StatSum, b: StatSum): ServerSplit {
  const avg = (ns: number, c: number) => (c > 0 ? ns / c / 1000 : 0);
  const requestUs = avg(b.successNs - a.successNs, b.success - a.success);
  const queueUs = avg(b.queueNs - a.queueNs, b.queueC - a.queueC);
  const computeInputUs = avg(b.inNs - a.inNs, b.inC - a.inC);
  const computeInferUs = avg(b.inferNs - a.inferNs, b.inferC - a.inferC);
  const computeOutputUs = avg(b.outNs - a.outNs, b.outC - a.outC);
  return {
    successCount: b.success - a.success, inferenceCount: b.inference - a.inference, executionCount: b.execution - a.execution,
    requestUs, queueUs, computeInputUs, computeInferUs, computeOutputUs,
    overheadUs: Math.max(0, requestUs - queueUs - computeInputUs - computeInferUs - computeOutputUs),
  };
}

/** Client-side numbers of a set of records over `durationS` seconds. */
function clientSummary(recs: RequestRecord[], durationS: number, batch: number, extraPercentile?: number) {
  const lat = recs.map((r) => (r.endNs - r.startNs) / 1000).sort((x, y) => x - y);
  const n = lat.length;
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const avgUs = mean(lat);
  const stdUs = Math.sqrt(mean(lat.map((x) => (x - avgUs) ** 2)));
  const percentiles: Record<number, number> = {};
  for (const p of [...PERCENTILES, ...(extraPercentile && !PERCENTILES.includes(extraPercentile) ? [extraPercentile] : [])]) percentiles[p] = percentileOf(lat, p);
  const sendUs = mean(recs.map((r) => r.sendNs / 1000));
  const recvUs = mean(recs.map((r) => r.recvNs / 1000));
  return { requestCount: n, throughput: durationS > 0 ? (n * batch) / durationS : 0, avgUs, stdUs, percentiles, sendUs, recvUs, waitUs: Math.max(0, avgUs - sendUs - recvUs) };
}

/** Runs the whole session: every load point, in order. Throws InferenceServerError on a failed request. */
export async function runPerf(o: PerfOptions, io: PerfIO): Promise<PerfReport> {
  const client = createClient(o);
  let wire: WireSender | undefined;
  try {
    if (!(await client.isModelReady(o.model, o.version))) {
      throw new InferenceServerError({ source: 'client', status: 0, message: `model '${o.model}'${o.version ? ` version ${o.version}` : ''} is not ready on ${o.url}` });
    }
    const model = await describeModel(client, o.model, o.version, o.shapes);
    if (model.decoupled) throw new InferenceServerError({ source: 'client', status: 0, message: `model '${o.model}' is decoupled; perf measures request/response models only` });
    const inputSets = buildInputSets(model, { batchSize: o.batchSize, source: o.inputData, stringLength: o.stringLength, stringData: o.stringData });
    const report: PerfReport = { model, options: o, points: [] };
    const stats = async (): Promise<StatSum | undefined> => {
      if (report.serverStatsNote) return undefined;
      try {
        return sumStats(await client.getInferenceStatistics(o.model, o.version));
      } catch (err) {
        report.serverStatsNote = `server-side statistics unavailable: ${(err as Error).message}`;
        io.progress(`  (${report.serverStatsNote}; reporting client-side numbers only)`);
        return undefined;
      }
    };
    const callOptions: InferOptions = { binaryInputs: o.binaryInputs, binaryOutputs: o.binaryOutputs };
    const sequences = model.sequence
      ? { length: o.sequenceLength, variationPct: o.sequenceLengthVariation, idStart: o.sequenceIdRange.start, idEnd: o.sequenceIdRange.end }
      : undefined;
    const mode = o.requestRate ? 'request_rate' : 'concurrency';
    const range = o.requestRate ?? o.concurrency ?? { start: 1, end: 1, step: 1 };
    const unbounded = mode === 'concurrency' && range.end === 0;
    if (unbounded && o.latencyThresholdMs === undefined) {
      throw new InferenceServerError({ source: 'client', status: 0, message: '--concurrency-range with end 0 needs -l/--latency-threshold to know when to stop' });
    }
    io.out(`*** Measurement Settings ***\n  Batch size: ${o.batchSize}\n  Service Kind: ${o.protocol.toUpperCase()}\n  Using "${o.measurementMode}" mode for stabilization\n  ${o.measurementMode === 'time_windows' ? `Measurement window: ${o.measurementIntervalMs} msec` : `Minimum number of samples in each window: ${o.measurementRequestCount}`}\n  Stabilizing using ${o.percentile ? `p${o.percentile} latency` : 'average latency'} and throughput\n`);
    let first = true;
    wire = (o.loadPath ?? 'wire') === 'wire' && o.httpTransport !== 'fetch' ? wireSender({ ...o, inputSets, callOptions }) : undefined;
    for (let load = range.start; unbounded || load <= range.end + 1e-9; load += range.step) {
      const runner = new LoadRunner({ client, model: o.model, version: o.version, inputSets, callOptions, sequences, wire });
      if (first && o.warmupRequestCount > 0) {
        io.progress(`Warming up with ${o.warmupRequestCount} request(s)`);
        await runner.warmup(o.warmupRequestCount);
        if (runner.error) throw runner.error;
      }
      first = false;
      io.progress(mode === 'concurrency' ? `Request concurrency: ${load}` : `Request Rate: ${load} inference requests per second`);
      if (mode === 'concurrency') runner.startConcurrency(load);
      else runner.startRate(load, o.distribution, o.async ? Number.POSITIVE_INFINITY : o.maxThreads, o.numOfSequences);
      const point = await measurePoint(o, runner, stats, io, mode, load);
      await runner.stop();
      if (runner.error) throw runner.error;
      report.points.push(point);
      io.out(describePoint(point, o));
      if (o.latencyThresholdMs !== undefined && point.stabilizingUs > o.latencyThresholdMs * 1000) {
        io.progress(`  latency ${Math.round(point.stabilizingUs)} usec is above the ${o.latencyThresholdMs} ms threshold; stopping`);
        break;
      }
      if (range.step <= 0) break;
    }
    return report;
  } finally {
    wire?.close();
    await client.close();
  }
}

async function measurePoint(
  o: PerfOptions, runner: LoadRunner, stats: () => Promise<StatSum | undefined>, io: PerfIO,
  mode: PerfPoint['mode'], load: number,
): Promise<PerfPoint> {
  const windows: { from: number; to: number; cpuUs: number; statsFrom?: StatSum; statsTo?: StatSum; throughput: number; latency: number }[] = [];
  let statsAt = await stats();
  let from = nowNs();
  let cpuAt = process.cpuUsage();
  for (let trial = 1; trial <= o.maxTrials; trial++) {
    if (o.measurementMode === 'time_windows') await sleep(o.measurementIntervalMs);
    else while (runner.completedSince(from) < o.measurementRequestCount && !runner.error) await sleep(5);
    if (runner.error) throw runner.error;
    const to = nowNs();
    const cpu = process.cpuUsage(cpuAt);
    cpuAt = process.cpuUsage();
    const statsTo = await stats();
    const c = clientSummary(runner.window(from, to), (to - from) / 1e9, o.batchSize, o.percentile);
    const latency = o.percentile ? c.percentiles[o.percentile]! : c.avgUs;
    windows.push({ from, to, cpuUs: cpu.user + cpu.system, statsFrom: statsAt, statsTo, throughput: c.throughput, latency });
    io.progress(`  Pass [${trial}] throughput: ${c.throughput.toFixed(2)} infer/sec. ${o.percentile ? `p${o.percentile} latency: ${Math.round(latency)} usec` : `Avg latency: ${Math.round(c.avgUs)} usec (std ${Math.round(c.stdUs)} usec)`}`);
    statsAt = statsTo;
    from = to;
    if (isStable(windows, o.stabilityPct)) break;
  }
  const stable = isStable(windows, o.stabilityPct);
  if (!stable) {
    io.progress(`  Failed to obtain stable measurement within ${o.maxTrials} windows for ${mode === 'concurrency' ? 'concurrency' : 'request rate'} ${load}; reporting the last 3 (consider a longer -p)`);
  }
  const last = windows.slice(-3);
  const recs = last.flatMap((w) => runner.window(w.from, w.to));
  const durationS = last.reduce((s, w) => s + (w.to - w.from), 0) / 1e9;
  const c = clientSummary(recs, durationS, o.batchSize, o.percentile);
  const clientCpuPct = (last.reduce((sum, w) => sum + w.cpuUs, 0) / 1e6 / durationS) * 100;
  if (clientCpuPct > 85) {
    io.progress(`  Warning: tsi-node perf used ${Math.round(clientCpuPct)}% of a CPU core; the load generator may be the bottleneck, not the server`);
  }
  const a = last[0]!.statsFrom;
  const b = last[last.length - 1]!.statsTo;
  const server = a && b ? serverSplit(a, b) : undefined;
  const serverUs = server ? server.queueUs + server.computeInputUs + server.computeInferUs + server.computeOutputUs : 0;
  return {
    mode, load, stable, durationS, ...c,
    stabilizingUs: o.percentile ? c.percentiles[o.percentile]! : c.avgUs,
    networkUs: Math.max(0, c.waitUs - serverUs),
    delayed: runner.delayed,
    clientCpuPct,
    server,
  };
}

/** perf_analyzer's per-point text block. */
export function describePoint(p: PerfPoint, o: PerfOptions): string {
  const us = (x: number) => `${Math.round(x)} usec`;
  const lines = [
    p.mode === 'concurrency' ? `Request concurrency: ${p.load}` : `Request Rate: ${p.load}`,
    '  Client: ',
    `    Request count: ${p.requestCount}`,
    `    Throughput: ${p.throughput.toFixed(2)} infer/sec`,
  ];
  if (p.mode === 'request_rate') lines.push(`    Delayed Request Count: ${p.delayed}`);
  if (!o.percentile) lines.push(`    Avg latency: ${us(p.avgUs)} (standard deviation ${us(p.stdUs)})`);
  for (const [k, v] of Object.entries(p.percentiles)) lines.push(`    p${k} latency: ${us(v)}`);
  lines.push(`    Client CPU: ${Math.round(p.clientCpuPct)}% of one core`);
  lines.push(`    Avg ${o.protocol === 'grpc' ? 'gRPC' : 'HTTP'} time: ${us(p.sendUs + p.waitUs + p.recvUs)} (send ${us(p.sendUs)} + response wait ${us(p.waitUs)} + receive ${us(p.recvUs)})`);
  if (p.server) {
    const s = p.server;
    lines.push('  Server: ', `    Inference count: ${s.inferenceCount}`, `    Execution count: ${s.executionCount}`, `    Successful request count: ${s.successCount}`,
      `    Avg request latency: ${us(s.requestUs)} (overhead ${us(s.overheadUs)} + queue ${us(s.queueUs)} + compute input ${us(s.computeInputUs)} + compute infer ${us(s.computeInferUs)} + compute output ${us(s.computeOutputUs)})`);
  }
  if (!p.stable) lines.push('  (not stable within the window limit)');
  return lines.join('\n') + '\n';
}
