/**
 * The dynamic-batching benchmark (issue 3): three ways to serve the compute-bound `mlp_batch`
 * (4 × Gemm 1024×1024 + Relu) measured side by side in one run, so the ratios mean something on
 * whatever machine runs it:
 *   (a) naive  — hono + onnxruntime-node, one `session.run` per request (bench/naive-server.ts);
 *   (b) raw    — onnxruntime-node in this process, no HTTP, replaying exactly the batch sizes tsi
 *                formed in the same round (read from tsi's statistics): the ceiling for (c);
 *   (c) tsi    — the tsi server with dynamic batching (compiled from dist/ when built: bench/servers.ts).
 * Each concurrency runs in interleaved rounds (naive, tsi, raw, again), and ratios are taken per round:
 * on a shared host the machine's speed drifts over seconds, which would otherwise decide the ratios.
 * All servers run in child processes; the load comes from wrk or bench/load.ts (closed loop, keep-alive,
 * identical v2 binary-extension requests of one 1024-float row). Same ORT session options everywhere
 * (the config's intra_op_thread_count, graph optimisation "all").
 *
 * Run:  npm run bench:batching            (or: npx tsx bench/batching.ts)
 * Flags: --duration <s> per side and round (2)  --rounds <n> (3)  --concurrency 1,8,64,256
 *        --client wrk|node (wrk when installed, `apt-get install wrk`; else bench/load.ts)
 *        --delay-us <n> / --preferred 8,16 (override the config's dynamic_batching)
 *        --json <file> (write the results)  --server dist|tsx
 * Needs the generated model: `npm run models` once.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { buildRequest, hasWrk, mergeLoads, mlpRowRequest, runLoad, runWrk, wrkScript, type LoadResult } from './load.js';
import { benchScript, spawnServer, stopServer, tsiServer } from './servers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..');
const MODEL = 'mlp_batch';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '1,8,64,256' },
    'delay-us': { type: 'string' },
    preferred: { type: 'string' },
    json: { type: 'string' },
    server: { type: 'string' },
    client: { type: 'string' },
  },
});
const durationMs = Number(args.duration) * 1000;
const rounds = Math.max(1, Number(args.rounds));
const levels = args.concurrency!.split(',').map(Number);

// ---- repository: the model's config, optionally with the dynamic_batching settings overridden ----
const modelDir = join(ROOT, 'models', MODEL);
const onnxPath = join(modelDir, '1', 'model.onnx');
if (!existsSync(onnxPath)) {
  process.stderr.write(`${onnxPath} is missing: run \`npm run models\` first.\n`);
  process.exit(1);
}
let config = readFileSync(join(modelDir, 'config.pbtxt'), 'utf8');
if (args['delay-us'] !== undefined || args.preferred !== undefined) {
  const parts: string[] = [];
  if (args['delay-us'] !== undefined) parts.push(`max_queue_delay_microseconds: ${Number(args['delay-us'])}`);
  if (args.preferred !== undefined) parts.push(`preferred_batch_size: [ ${args.preferred} ]`);
  config = config.replace(/dynamic_batching\s*\{[^}]*\}/, `dynamic_batching {\n  ${parts.join('\n  ')}\n}`);
}
const delayUs = Number(/max_queue_delay_microseconds:\s*(\d+)/.exec(config)?.[1] ?? 0);
const intra = Number(/intra_op_thread_count"[\s\S]*?string_value:\s*"(\d+)"/.exec(config)?.[1] ?? 1);
const work = mkdtempSync(join(tmpdir(), 'tsi-bench-'));
const repo = join(work, 'repo');
mkdirSync(join(repo, MODEL, '1'), { recursive: true });
writeFileSync(join(repo, MODEL, 'config.pbtxt'), config);
try {
  symlinkSync(onnxPath, join(repo, MODEL, '1', 'model.onnx'));
} catch {
  copyFileSync(onnxPath, join(repo, MODEL, '1', 'model.onnx'));
}

// ---- the request every client sends: one row, binary in and out ----
const { row, body, headers: requestHeaders } = mlpRowRequest();
const request = buildRequest(`/v2/models/${MODEL}/infer`, requestHeaders, body);

// The client: wrk when installed (C: half the CPU per request of a Node client, CPU that on a 2-core
// machine shared with the server would otherwise come out of the server's share), else bench/load.ts.
const client = args.client ?? (hasWrk() ? 'wrk' : 'node');
if (client === 'wrk') {
  writeFileSync(join(work, 'body.bin'), body);
  writeFileSync(join(work, 'infer.lua'), wrkScript(join(work, 'body.bin'), requestHeaders));
}
const load = (port: number, connections: number): Promise<LoadResult> => client === 'wrk'
  ? runWrk({ url: `http://127.0.0.1:${port}/v2/models/${MODEL}/infer`, script: join(work, 'infer.lua'), connections, durationMs })
  : runLoad({ port, request, connections, durationMs });

type BatchHistogram = Map<number, number>;

async function batchStats(port: number): Promise<BatchHistogram> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${MODEL}/stats`);
  const st = (await r.json()) as { model_stats: { batch_stats: { batch_size: number; compute_infer: { count: number } }[] }[] };
  return new Map(st.model_stats[0]!.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]));
}

const log = (s: string) => process.stderr.write(`${s}\n`);

function meanBatch(h: BatchHistogram): number {
  let rows = 0;
  let n = 0;
  for (const [b, k] of h) {
    rows += b * k;
    n += k;
  }
  return n === 0 ? 0 : rows / n;
}

// ---- (b) raw onnxruntime-node in-process at the batch sizes tsi formed ----
const session = await ort.InferenceSession.create(onnxPath, { intraOpNumThreads: intra, interOpNumThreads: 1, graphOptimizationLevel: 'all' });
const feeds = new Map<number, ort.Tensor>();
const feed = (b: number) => {
  let t = feeds.get(b);
  if (!t) {
    const x = new Float32Array(b * 1024);
    for (let i = 0; i < b; i++) x.set(row, i * 1024);
    t = new ort.Tensor('float32', x, [b, 1024]);
    feeds.set(b, t);
  }
  return { INPUT: t };
};

const idle = new Int32Array(new SharedArrayBuffer(4));

interface Raw { rows: number; ms: number; p50Ms: number }

/**
 * Replays a batch-size mix for `ms`: rows computed, time taken, per-batch p50. `gapMs` puts the thread
 * to sleep between runs, as a model instance sleeps between one client's requests.
 */
async function replay(h: BatchHistogram, ms: number, gapMs = 0): Promise<Raw> {
  const mix: number[] = [];
  for (const [b, k] of h) for (let i = 0; i < k; i++) mix.push(b);
  // Interleave sizes deterministically rather than running them in blocks.
  mix.sort((x, y) => ((x * 2654435761) % 97) - ((y * 2654435761) % 97));
  for (const b of h.keys()) for (let i = 0; i < 3; i++) await session.run(feed(b));
  const times: number[] = [];
  let rows = 0;
  const t0 = performance.now();
  for (let i = 0; performance.now() - t0 < ms; i++) {
    const b = mix[i % mix.length]!;
    const t = performance.now();
    await session.run(feed(b));
    times.push(performance.now() - t);
    rows += b;
    if (gapMs > 0) Atomics.wait(idle, 0, 0, gapMs);
  }
  times.sort((x, y) => x - y);
  return { rows, ms: performance.now() - t0, p50Ms: times[Math.floor(times.length / 2)]! };
}
const rowsPerSec = (r: readonly Raw[]) => r.reduce((k, x) => k + x.rows, 0) / (r.reduce((k, x) => k + x.ms, 0) / 1000);
const median = (xs: readonly number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;

// ---- the three side by side, in interleaved rounds ----
// A shared host drifts between faster and slower phases over seconds; measuring each side in one
// block would let that drift decide the ratios. Each round measures naive, tsi and raw back to back
// (raw replaying the batch sizes tsi formed in that very round), and the ratios are taken per round.
const naiveSrv = await spawnServer(benchScript('naive-server.ts', [onnxPath, String(intra)]), 'the naive server');
const { argv, build } = tsiServer(repo, work, { server: args.server });
log(`tsi server: ${build}; client: ${client}; ${rounds} rounds of ${durationMs / 1000} s per side and concurrency`);
const tsiSrv = await spawnServer(argv, 'the tsi server');

interface Point { naive: LoadResult[]; tsi: LoadResult[]; raw: Raw[]; formed: BatchHistogram; rawB1: Raw[]; rawPaced: Raw[]; gapMs: number[] }
const points: Record<number, Point> = {};
for (const c of levels) {
  const p: Point = { naive: [], tsi: [], raw: [], formed: new Map(), rawB1: [], rawPaced: [], gapMs: [] };
  points[c] = p;
  for (let r = 0; r < rounds; r++) {
    const a = await load(naiveSrv.port, c);
    const before = await batchStats(tsiSrv.port);
    const t = await load(tsiSrv.port, c);
    const after = await batchStats(tsiSrv.port);
    const formed: BatchHistogram = new Map([...after].map(([b, n]) => [b, n - (before.get(b) ?? 0)] as [number, number]).filter(([, n]) => n > 0));
    for (const [b, n] of formed) p.formed.set(b, (p.formed.get(b) ?? 0) + n);
    const b = formed.size > 0 ? await replay(formed, durationMs) : { rows: 0, ms: 1, p50Ms: NaN };
    p.naive.push(a);
    p.tsi.push(t);
    p.raw.push(b);
    if (c === 1) {
      // At one client the model runs once per round trip and its thread sleeps in between; a CPU
      // computes the same run slower then (cold caches, a descheduled core) than back to back. So the
      // c=1 target is also checked against raw ORT run at tsi's c=1 pace.
      p.rawB1.push(b);
      const gap = Math.max(0, t.meanMs - b.p50Ms);
      p.gapMs.push(gap);
      p.rawPaced.push(gap > 0 ? await replay(new Map([[1, 1]]), durationMs, gap) : b);
    }
    log(`c=${c} round ${r + 1}: naive ${a.rps.toFixed(0)} req/s, tsi ${t.rps.toFixed(0)} req/s (mean batch ${meanBatch(formed).toFixed(1)}), raw ${rowsPerSec([b]).toFixed(0)} rows/s: tsi/raw ${(100 * t.rps / rowsPerSec([b])).toFixed(0)}%`);
  }
}
await stopServer(naiveSrv.child);
await stopServer(tsiSrv.child);
rmSync(work, { recursive: true, force: true });

// ---- report ----
const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
const range = (xs: number[], f: (x: number) => string) => `${f(Math.min(...xs))}–${f(Math.max(...xs))}`;
const summary = levels.map((c) => {
  const p = points[c]!;
  const a = mergeLoads(p.naive);
  const t = mergeLoads(p.tsi);
  const cb = p.tsi.map((x, i) => x.rps / rowsPerSec([p.raw[i]!]));
  const ca = p.tsi.map((x, i) => x.rps / p.naive[i]!.rps);
  return { c, a, t, rawRps: rowsPerSec(p.raw), ca, cb, batch: meanBatch(p.formed) };
});
const one = points[1];
const rawB1 = one ? median(one.rawB1.map((r) => r.p50Ms)) : NaN;
const rawPaced = one ? median(one.rawPaced.map((r) => r.p50Ms)) : NaN;
const gapMs = one ? median(one.gapMs) : NaN;
const lines = [
  `mlp_batch, ${intra} intra-op thread(s), max_queue_delay ${delayUs} µs, client ${client}, ${rounds} interleaved rounds of ${durationMs / 1000} s per side; raw ORT batch-1 p50 ${f2(rawB1)} ms back to back, ${f2(rawPaced)} ms at one run per ${f2(gapMs + rawB1)} ms`,
  '',
  '| conc | naive req/s | naive p50 / p99 ms | raw ORT rows/s | tsi req/s | tsi p50 / p99 ms | tsi mean batch | c/a (rounds) | c/b (rounds) |',
  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
];
for (const s of summary) {
  lines.push(`| ${s.c} | ${f0(s.a.rps)} | ${f2(s.a.p50Ms)} / ${f2(s.a.p99Ms)} | ${f0(s.rawRps)} | ${f0(s.t.rps)} | ${f2(s.t.p50Ms)} / ${f2(s.t.p99Ms)} | ${s.batch.toFixed(1)} | ${f2(median(s.ca))}× (${range(s.ca, f2)}) | ${pct(median(s.cb))} (${range(s.cb, pct)}) |`);
}
const checks: string[] = [];
const at = (c: number) => summary.find((s) => s.c === c);
const s64 = at(64);
if (s64) checks.push(`c/a at 64 = ${f2(median(s64.ca))}× median of ${rounds} rounds, ${range(s64.ca, f2)} (target ≥ 2.5×)`);
// c/b is a throughput target: it means something once batches are full (64+ clients); at 1 client it
// compares an HTTP round trip with a bare run() call.
for (const s of summary.filter((s) => s.c >= 64)) {
  checks.push(`c/b at ${s.c} = ${pct(median(s.cb))} median of ${rounds} rounds, ${range(s.cb, pct)} (target ≥ 85%)`);
}
const s1 = at(1);
if (s1) {
  const bound = (compute: number) => f2(delayUs / 1000 + compute + 0.5);
  checks.push(`p50 at c=1 = ${f2(s1.t.p50Ms)} ms (target ≤ delay ${f2(delayUs / 1000)} + compute + 0.5 = ${bound(rawPaced)} ms with raw compute at the same pace, ${f2(rawPaced)} ms; ${bound(rawB1)} ms with back-to-back compute, ${f2(rawB1)} ms)`);
}
const errors = summary.reduce((n, s) => n + s.a.errors + s.t.errors, 0);
if (errors > 0) checks.push(`${errors} non-2xx responses`);
process.stdout.write(`${lines.join('\n')}\n\n${checks.map((c) => `- ${c}`).join('\n')}\n`);
if (args.json) {
  const strip = (r: LoadResult) => ({ ...r, latencies: undefined });
  writeFileSync(args.json, JSON.stringify({
    intra, delayUs, durationMs, rounds, rawB1, rawPaced, gapMs,
    points: Object.fromEntries(levels.map((c) => {
      const p = points[c]!;
      return [c, { naive: p.naive.map(strip), tsi: p.tsi.map(strip), raw: p.raw, formed: Object.fromEntries(p.formed) }];
    })),
  }, null, 2));
}
