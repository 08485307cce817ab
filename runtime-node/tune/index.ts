/**
 * `tsi-node tune -m MODEL`: Model Analyzer in one command. Against a running tsi in explicit
 * model-control mode (`--url`), or one it starts in this process over a repository, it loads one
 * configuration after another through the load API with a config override (instance count,
 * max_batch_size, dynamic batching on/off, queue delay, preferred batch size), measures each with
 * perf's engine over a concurrency sweep (perf's stability rule), searches by hill climbing
 * (search.ts) within `--max-minutes`, and writes the best config.pbtxt, a table of every configuration
 * and an HTML report (report.ts). The model's own config is loaded again at the end, whatever happens.
 *
 * A server started here shares this process with the load generator (the models compute in worker
 * threads; HTTP and scheduling share the main thread with perf's client). Every configuration pays the
 * same, so the comparison holds; for absolute numbers, tune against a separate server with `--url`.
 */

import { Command, InvalidArgumentError } from 'commander';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { HttpClient } from '../../client/http.js';
import { nodeHttpFetch } from '../../client/node-fetch.js';
import { createLogger, parsePbtxt, type ModelConfig } from '../../core/index.js';
import { runPerf, type PerfOptions } from '../perf/measure.js';
import { startServer, usableCores, type RunningServer } from '../index.js';
import { bestPbtxt, objectiveText, reportHtml, trialsTable, verdict, type TuneSummary } from './report.js';
import { buildSpace, search, type LoadPoint, type Objective, type SearchResult, type TuneKnobs } from './search.js';

export * from './search.js';
export { bestPbtxt, reportHtml, trialsTable, verdict } from './report.js';

export interface TuneOptions {
  model: string;
  /** A running tsi (`host:port`, HTTP) in explicit model-control mode; absent: start one over `repositories`. */
  url?: string;
  repositories?: string[];
  objective: Objective;
  maxMinutes: number;
  maxInstances: number;
  /** Largest max_batch_size tried (powers of two up to it, and the shipped value). */
  maxBatchLimit: number;
  maxConcurrency: number;
  /** perf's measurement window per pass. */
  measurementIntervalMs: number;
  /** Where config.pbtxt, report.html, results.md and results.json go. */
  outputDir: string;
  headers?: Record<string, string>;
}

export interface TuneResult extends TuneSummary {
  bestConfig: ModelConfig;
  files: { config: string; report: string; table: string; json: string };
}

/** The knobs of a config as loaded. */
export function knobsOf(cfg: ModelConfig): TuneKnobs {
  const db = cfg.dynamic_batching;
  return {
    instances: (cfg.instance_group ?? []).reduce((n, g) => n + Number(g.count ?? 1) * Math.max(1, g.gpus?.length ?? 1), 0) || 1,
    maxBatchSize: Number(cfg.max_batch_size ?? 0),
    dynamicBatching: db !== undefined,
    maxQueueDelayUs: Number(db?.max_queue_delay_microseconds ?? 0),
    preferredBatchSizes: (db?.preferred_batch_size ?? []).map(Number),
  };
}

/** `cfg` with the knobs applied: one instance group of `instances` (the first group's kind and settings). */
export function applyKnobs(cfg: ModelConfig, k: TuneKnobs): ModelConfig {
  const out: ModelConfig = structuredClone(cfg);
  out.max_batch_size = k.maxBatchSize;
  const g = { ...(cfg.instance_group?.[0] ?? { kind: 'KIND_CPU' as const }) };
  g.count = g.kind === 'KIND_GPU' && g.gpus?.length ? Math.max(1, Math.round(k.instances / g.gpus.length)) : k.instances;
  delete g.name;
  out.instance_group = [g];
  if (k.dynamicBatching) {
    out.dynamic_batching = { ...(cfg.dynamic_batching ?? {}), max_queue_delay_microseconds: k.maxQueueDelayUs, preferred_batch_size: k.preferredBatchSizes };
    if (k.preferredBatchSizes.length === 0) delete out.dynamic_batching.preferred_batch_size;
  } else delete out.dynamic_batching;
  return out;
}

function unsupported(model: string, cfg: ModelConfig): string | undefined {
  if (cfg.platform === 'ensemble') return `model '${model}' is an ensemble: tune its steps instead`;
  if (cfg.sequence_batching) return `model '${model}' uses the sequence batcher; tune handles stateless models (default or dynamic batching)`;
  if (cfg.model_transaction_policy?.decoupled) return `model '${model}' is decoupled; perf measures request/response models only`;
  return undefined;
}

const quietLog = createLogger(() => {}, 0);

/** Runs the whole tune session; `progress` gets one line per step. */
export async function runTune(o: TuneOptions, progress: (line: string) => void = () => {}): Promise<TuneResult> {
  let running: RunningServer | undefined;
  let url = o.url;
  if (!url) {
    running = await startServer({
      modelRepositories: o.repositories ?? [], modelControlMode: 'explicit', loadModels: [o.model],
      httpPort: 0, httpAddress: '127.0.0.1', log: quietLog,
    });
    url = `127.0.0.1:${running.http!.port}`;
    progress(`started tsi on ${url} (explicit model control) over ${(o.repositories ?? []).join(', ')}`);
  }
  const client = new HttpClient({ url, headers: o.headers, fetch: nodeHttpFetch() });
  const startedAt = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  let wasLoaded = false;
  let found: Awaited<ReturnType<HttpClient['getModelConfig']>> | undefined;
  try {
    const index = await client.getModelRepositoryIndex();
    wasLoaded = index.some((e) => e.name === o.model && e.state === 'READY');
    if (!index.some((e) => e.name === o.model)) throw new Error(`model '${o.model}' is not in the repository of ${url}`);
    if (!wasLoaded) await client.loadModel(o.model);
    const loaded = await client.getModelConfig(o.model);
    found = loaded;
    const why = unsupported(o.model, loaded);
    if (why) throw new Error(why);
    // The written config starts from the repository's own file when it is at hand (no normalised defaults).
    const file = (o.repositories ?? []).map((r) => join(r, o.model, 'config.pbtxt')).find((p) => existsSync(p));
    const base = file ? parsePbtxt(readFileSync(file, 'utf8'), file) : loaded;
    const shipped = knobsOf(loaded);
    const space = buildSpace(shipped, { maxInstances: o.maxInstances, maxBatchLimit: o.maxBatchLimit });
    progress(`tuning '${o.model}': ${objectiveText(o.objective)}; budget ${o.maxMinutes} min; instances ${space.instances.join('/')}, max_batch ${space.maxBatchSizes.join('/')}, delays ${space.delaysUs.join('/')} µs`);
    const result: SearchResult = await search({
      shipped, space, objective: o.objective, maxConcurrency: o.maxConcurrency, budgetMs: o.maxMinutes * 60_000,
      clock: { nowMs: () => performance.now() }, progress,
      prepare: async (k) => {
        await client.loadModel(o.model, { config: JSON.stringify(applyKnobs(loaded, k)) });
        if (!(await client.isModelReady(o.model))) throw new Error(`model '${o.model}' is not ready after loading the configuration`);
      },
      measure: (_k, c) => measure(url!, o, c),
    });
    const bestConfig = applyKnobs(base, result.best.knobs);
    const summary: TuneSummary = { model: o.model, objective: o.objective, result, startedAt, server: running ? 'a tsi started by tune (same process)' : `tsi at ${url}`, budgetMinutes: o.maxMinutes };
    mkdirSync(o.outputDir, { recursive: true });
    const files = {
      config: join(o.outputDir, 'config.pbtxt'), report: join(o.outputDir, `${o.model}-tune.html`),
      table: join(o.outputDir, 'results.md'), json: join(o.outputDir, 'results.json'),
    };
    writeFileSync(files.config, bestPbtxt(summary, bestConfig));
    writeFileSync(files.report, reportHtml(summary));
    writeFileSync(files.table, `${trialsTable(summary)}\n\n${verdict(result)}.\n`);
    writeFileSync(files.json, JSON.stringify({ model: o.model, objective: o.objective, startedAt, stopped: result.stopped, best: result.best.id, trials: result.trials }, null, 1) + '\n');
    return { ...summary, bestConfig, files };
  } finally {
    try {
      // The config the model had when tune found it, or unloaded as it was found. A load without an
      // override would keep tune's last trial: as in Triton, an override stays until the folder changes.
      if (wasLoaded) await client.loadModel(o.model, found ? { config: JSON.stringify(found) } : undefined);
      else await client.unloadModel(o.model);
      progress(wasLoaded ? `restored '${o.model}' to the config it had before tuning` : `unloaded '${o.model}' (it was not loaded before)`);
    } catch (err) {
      progress(`could not restore '${o.model}': ${(err as Error).message}`);
    }
    await client.close();
    await running?.stop();
  }
}

/** One concurrency of one configuration, measured by perf with its stability rule. */
async function measure(url: string, o: TuneOptions, concurrency: number): Promise<LoadPoint> {
  const options: PerfOptions = {
    model: o.model, url, protocol: 'http', concurrency: { start: concurrency, end: concurrency, step: 1 },
    distribution: 'constant', async: true, maxThreads: 4, batchSize: 1, shapes: {}, inputData: 'random', stringLength: 16,
    measurementMode: 'time_windows', measurementIntervalMs: o.measurementIntervalMs, measurementRequestCount: 50,
    stabilityPct: 10, maxTrials: 6, sequenceLength: 20, sequenceLengthVariation: 0, numOfSequences: 1,
    sequenceIdRange: { start: 1, end: 1 << 30 }, warmupRequestCount: 10 + concurrency * 4, binaryInputs: true, binaryOutputs: true,
    headers: o.headers ?? {},
  };
  const report = await runPerf(options, { progress: () => {}, out: () => {} });
  const p = report.points[0]!;
  return { concurrency, throughput: p.throughput, p99Ms: p.percentiles[99]! / 1000, avgMs: p.avgUs / 1000, stable: p.stable };
}

const positive = (v: string) => {
  const n = Number(v);
  if (!(n > 0)) throw new InvalidArgumentError(`expected a positive number, got '${v}'`);
  return n;
};
const positiveInt = (v: string) => {
  const n = positive(v);
  if (!Number.isInteger(n)) throw new InvalidArgumentError(`expected a positive integer, got '${v}'`);
  return n;
};

export function tuneCommand(defaultRepository: () => string): Command {
  return new Command('tune')
    .description('search instance count, batching and queue delay for a model and write the best config.pbtxt (Model Analyzer in one command)')
    .requiredOption('-m, --model-name <name>', 'model to tune')
    .option('-u, --url <host:port>', 'a running tsi (HTTP) in explicit model-control mode; default: start one here')
    .option('--model-repository <path>', 'repository for the server tune starts (repeatable; default: the package\'s models/)', (v: string, acc: string[] = []) => [...acc, v])
    .option('--latency-budget-ms <ms>', 'p99 latency every counted point must stay within', positive)
    .option('--min-throughput <n>', 'configurations must reach this many infer/s', positive)
    .option('--max-minutes <n>', 'time budget for the search', positive, 10)
    .option('--max-instances <n>', 'largest instance count tried', positiveInt, Math.min(4, usableCores()))
    .option('--max-batch-size-limit <n>', 'largest max_batch_size tried (powers of two, and the shipped value)', positiveInt, 64)
    .option('--max-concurrency <n>', 'largest concurrency of each sweep (it doubles from 1)', positiveInt, 64)
    .option('-p, --measurement-interval <ms>', "perf's measurement window", positiveInt, 1000)
    .option('-o, --output-dir <dir>', 'where the best config.pbtxt, the report and the tables go (default tune-<model>)')
    .option('-H, --header <header>', "extra header 'Name: value' for every request (repeatable)", (v: string, acc: Record<string, string> = {}) => {
      const i = v.indexOf(':');
      if (i <= 0) throw new InvalidArgumentError(`expected 'Name: value', got '${v}'`);
      return { ...acc, [v.slice(0, i).trim()]: v.slice(i + 1).trim() };
    })
    .action(async (o) => {
      try {
        const r = await runTune({
          model: o.modelName, url: o.url, repositories: o.url ? o.modelRepository : (o.modelRepository ?? [defaultRepository()]).map((p: string) => resolve(p)),
          objective: { latencyBudgetMs: o.latencyBudgetMs, minThroughput: o.minThroughput },
          maxMinutes: o.maxMinutes, maxInstances: o.maxInstances, maxBatchLimit: o.maxBatchSizeLimit, maxConcurrency: o.maxConcurrency,
          measurementIntervalMs: o.measurementInterval, outputDir: o.outputDir ?? `tune-${o.modelName}`, headers: o.header,
        }, (line) => process.stderr.write(line + '\n'));
        process.stdout.write(`\n${trialsTable(r)}\n\n${verdict(r.result)}.\n\nwrote ${r.files.config}, ${r.files.report}, ${r.files.table}, ${r.files.json}\n`);
      } catch (err) {
        process.stderr.write(`error: ${(err as Error).message}\n`);
        process.exit(1);
      }
    });
}
