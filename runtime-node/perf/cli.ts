/**
 * The `tsi-node perf` subcommand: perf_analyzer's flag names and defaults (-m, -u, -i, -b, -p, -s, -r,
 * --concurrency-range, --request-rate-range, --shape, --input-data, ...) parsed into PerfOptions, then
 * a run with progress on stderr, the per-point report and summary table on stdout, and the CSV / plot
 * files written at the end. Kept apart from cli.ts so the server's CLI only mounts it.
 */

import { Command, InvalidArgumentError, Option } from 'commander';
import { writeFileSync } from 'node:fs';
import { runPerf, type PerfOptions, type Range } from './measure.js';
import { closingLines, summaryTable, toCsv, toPlotHtml } from './report.js';

function parseRange(v: string, integer: boolean): Range {
  const parts = v.split(':').map((x) => Number(x));
  const ok = parts.length >= 1 && parts.length <= 3 && parts.every((x) => Number.isFinite(x) && x >= 0 && (!integer || Number.isInteger(x)));
  if (!ok) throw new InvalidArgumentError(`expected <start>[:<end>[:<step>]] of ${integer ? 'non-negative integers' : 'non-negative numbers'}, got '${v}'`);
  const [start, end = start, step = 1] = parts as [number, number?, number?];
  if (start <= 0) throw new InvalidArgumentError(`the start of the range must be positive, got '${v}'`);
  if (end !== 0 && end < start) throw new InvalidArgumentError(`the end of the range must not be below its start, got '${v}'`);
  return { start, end, step };
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`expected a positive integer, got '${v}'`);
  return n;
}

function nonNegative(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`expected a non-negative number, got '${v}'`);
  return n;
}

/** `--shape NAME:d1,d2` (repeatable) into a map. */
function collectShape(v: string, prev: Record<string, number[]> = {}): Record<string, number[]> {
  const i = v.lastIndexOf(':');
  const dims = i > 0 ? v.slice(i + 1).split(',').map(Number) : [];
  if (i <= 0 || dims.length === 0 || !dims.every((d) => Number.isInteger(d) && d >= 0)) {
    throw new InvalidArgumentError(`expected <input name>:<d1>,<d2>,..., got '${v}'`);
  }
  return { ...prev, [v.slice(0, i)]: dims };
}

/** `-H 'Name: value'` (repeatable). */
function collectHeader(v: string, prev: Record<string, string> = {}): Record<string, string> {
  const i = v.indexOf(':');
  if (i <= 0) throw new InvalidArgumentError(`expected '<name>: <value>', got '${v}'`);
  return { ...prev, [v.slice(0, i).trim()]: v.slice(i + 1).trim() };
}

export function perfCommand(): Command {
  return new Command('perf')
    .description("measure a model's throughput and latency on any KServe v2 server (perf_analyzer's flags)")
    .requiredOption('-m, --model-name <name>', 'model to measure')
    .option('-x, --model-version <version>', 'model version (default: the server picks the latest ready one)')
    .option('-u, --url <host:port>', 'server address (default localhost:8000 for http, localhost:8001 for grpc)')
    .addOption(new Option('-i, --protocol <protocol>', 'protocol').choices(['http', 'grpc']).default('http'))
    .option('--concurrency-range <start:end:step>', 'requests kept in flight; end 0 grows until -l is crossed', (v) => parseRange(v, true))
    .option('--request-rate-range <start:end:step>', 'requests started per second instead of a concurrency', (v) => parseRange(v, false))
    .addOption(new Option('--request-distribution <kind>', 'gaps between requests in request-rate mode').choices(['constant', 'poisson']).default('constant'))
    .option('-a, --async', 'asynchronous requests (default)')
    .option('--sync', 'synchronous requests: in request-rate mode at most --max-threads in flight')
    .option('--max-threads <n>', 'in-flight limit for --sync request-rate mode', positiveInt, 4)
    .option('-b, --batch-size <n>', 'batch size of every request', positiveInt, 1)
    .option('--shape <name:dims>', 'dimensions of a variable-size input, batch excluded (repeatable)', collectShape)
    .option('--input-data <zero|random|file.json>', "input values: zeros, random values, or perf_analyzer's JSON", 'random')
    .option('--string-length <n>', 'length of random BYTES elements', positiveInt, 128)
    .option('--string-data <text>', 'use this text for every BYTES element')
    .addOption(new Option('--measurement-mode <mode>', 'windows by time or by request count').choices(['time_windows', 'count_windows']).default('time_windows'))
    .option('-p, --measurement-interval <ms>', 'time window length', positiveInt, 5000)
    .option('--measurement-request-count <n>', 'requests per window in count_windows mode', positiveInt, 50)
    .option('-s, --stability-percentage <pct>', 'how far the last 3 windows may differ (throughput and latency)', nonNegative, 10)
    .option('-r, --max-trials <n>', 'windows to try before giving up on stability', positiveInt, 10)
    .option('--percentile <p>', 'stabilise and report on this latency percentile instead of the average', positiveInt)
    .option('-l, --latency-threshold <ms>', 'stop increasing the load when latency passes this', nonNegative)
    .option('--sequence-length <n>', 'requests per sequence (sequence models)', positiveInt, 20)
    .option('--sequence-length-variation <pct>', 'random ± variation of each sequence length', nonNegative, 20)
    .option('--num-of-sequences <n>', 'concurrent sequences in request-rate mode', positiveInt, 4)
    .option('--sequence-id-range <start[:end]>', 'sequence ids to use, cycling', '1:4294967295')
    .option('--warmup-request-count <n>', 'requests sent before measuring (not counted)', (v) => Math.floor(nonNegative(v)), 0)
    .addOption(new Option('--input-tensor-format <format>', 'HTTP input encoding').choices(['binary', 'json']).default('binary'))
    .addOption(new Option('--output-tensor-format <format>', 'HTTP output encoding').choices(['binary', 'json']).default('binary'))
    .addOption(new Option('--grpc-compression-algorithm <alg>', 'gRPC request compression').choices(['none', 'gzip', 'deflate']).default('none'))
    .addOption(new Option('--http-transport <kind>', "HTTP under the client: node:http (lighter) or Node's fetch").choices(['node', 'fetch']).default('node'))
    .option('-H, --header <header>', "extra header 'Name: value' (repeatable)", collectHeader)
    .option('-f, --latency-report-file <file.csv>', "write perf_analyzer's CSV here")
    .option('--plot <file.html>', 'write a throughput-vs-latency plot (self-contained HTML/SVG) here')
    .action(async (o) => {
      if (o.concurrencyRange && o.requestRateRange) {
        process.stderr.write('error: give either --concurrency-range or --request-rate-range, not both\n');
        process.exit(1);
      }
      const [idStart, idEnd] = String(o.sequenceIdRange).split(':').map(Number);
      const protocol = o.protocol as 'http' | 'grpc';
      const options: PerfOptions = {
        model: o.modelName,
        version: o.modelVersion,
        url: o.url ?? (protocol === 'grpc' ? 'localhost:8001' : 'localhost:8000'),
        protocol,
        concurrency: o.concurrencyRange,
        requestRate: o.requestRateRange,
        distribution: o.requestDistribution,
        async: !o.sync,
        maxThreads: o.maxThreads,
        batchSize: o.batchSize,
        shapes: o.shape ?? {},
        inputData: o.inputData,
        stringLength: o.stringLength,
        stringData: o.stringData,
        measurementMode: o.measurementMode,
        measurementIntervalMs: o.measurementInterval,
        measurementRequestCount: o.measurementRequestCount,
        stabilityPct: o.stabilityPercentage,
        maxTrials: o.maxTrials,
        percentile: o.percentile,
        latencyThresholdMs: o.latencyThreshold,
        sequenceLength: o.sequenceLength,
        sequenceLengthVariation: o.sequenceLengthVariation,
        numOfSequences: o.numOfSequences,
        sequenceIdRange: { start: idStart || 1, end: idEnd || Number.MAX_SAFE_INTEGER },
        warmupRequestCount: o.warmupRequestCount,
        binaryInputs: o.inputTensorFormat === 'binary',
        binaryOutputs: o.outputTensorFormat === 'binary',
        headers: o.header ?? {},
        grpcCompression: o.grpcCompressionAlgorithm === 'none' ? undefined : o.grpcCompressionAlgorithm,
        httpTransport: o.httpTransport,
      };
      try {
        const report = await runPerf(options, {
          progress: (line) => process.stderr.write(line + '\n'),
          out: (line) => process.stdout.write(line + '\n'),
        });
        process.stdout.write(closingLines(report) + '\n\n' + summaryTable(report) + '\n');
        if (o.latencyReportFile) writeFileSync(o.latencyReportFile, toCsv(report));
        if (o.plot) writeFileSync(o.plot, toPlotHtml(report));
      } catch (err) {
        const e = err as Error & { status?: number; source?: string };
        const where = e.source && e.source !== 'client' && e.status ? ` (${e.source} status ${e.status})` : '';
        process.stderr.write(`error: ${e.message}${where}\n`);
        process.exit(1);
      }
    });
}
