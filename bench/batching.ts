/**
 * The dynamic-batching benchmark (issue 3): three ways to serve the compute-bound `mlp_batch`
 * (4 × Gemm 1024×1024 + Relu) measured side by side in one run, so the ratios mean something on
 * whatever machine runs it:
 *   (a) naive  — hono + onnxruntime-node, one `session.run` per request (bench/naive-server.ts);
 *   (b) raw    — onnxruntime-node in this process, no HTTP, replaying exactly the batch sizes tsi
 *                formed at that concurrency (read from tsi's statistics): the ceiling for (c);
 *   (c) tsi    — the tsi server with dynamic batching (compiled from dist/ when built: bench/servers.ts).
 * All servers run in child processes; the load comes from bench/load.ts (closed loop, keep-alive,
 * identical v2 binary-extension requests of one 1024-float row). Same ORT session options everywhere
 * (the config's intra_op_thread_count, graph optimisation "all").
 *
 * Run:  npm run bench:batching            (or: npx tsx bench/batching.ts)
 * Flags: --duration <s> (4)  --concurrency 1,8,64,256  --delay-us <n> / --preferred 8,16 (override the
 *        config's dynamic_batching)  --json <file> (write the results)  --server dist|tsx
 * Needs the generated model: `npm run models` once.
 */

import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { buildRequest, runLoad, type LoadResult } from './load.js';
import { benchScript, spawnServer, stopServer, tsiServer } from './servers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..');
const MODEL = 'mlp_batch';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '1,8,64,256' },
    'delay-us': { type: 'string' },
    preferred: { type: 'string' },
    json: { type: 'string' },
    server: { type: 'string' },
  },
});
const durationMs = Number(args.duration) * 1000;
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
const row = Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i) * 0.5);
const header = new TextEncoder().encode(JSON.stringify({
  inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1024], parameters: { binary_data_size: 4096 } }],
  outputs: [{ name: 'OUTPUT', parameters: { binary_data: true } }],
}));
const body = new Uint8Array(header.byteLength + 4096);
body.set(header);
body.set(new Uint8Array(row.buffer), header.byteLength);
const request = buildRequest(`/v2/models/${MODEL}/infer`, {
  'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.byteLength),
}, body);

type BatchHistogram = Map<number, number>;

async function batchStats(port: number): Promise<BatchHistogram> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${MODEL}/stats`);
  const st = (await r.json()) as { model_stats: { batch_stats: { batch_size: number; compute_infer: { count: number } }[] }[] };
  return new Map(st.model_stats[0]!.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]));
}

const log = (s: string) => process.stderr.write(`${s}\n`);

// ---- (a) naive ----
const naive: Record<number, LoadResult> = {};
{
  const { child, port } = await spawnServer(benchScript('naive-server.ts', [onnxPath, String(intra)]), 'the naive server');
  for (const c of levels) {
    naive[c] = await runLoad({ port, request, connections: c, durationMs });
    log(`naive  c=${c}: ${naive[c]!.rps.toFixed(0)} req/s`);
  }
  await stopServer(child);
}

// ---- (c) tsi, recording the batch sizes it formed at each concurrency ----
const tsi: Record<number, LoadResult> = {};
const formed: Record<number, BatchHistogram> = {};
{
  const { argv, build } = tsiServer(repo, work, { server: args.server });
  log(`tsi server: ${build}`);
  const { child, port } = await spawnServer(argv, 'the tsi server');
  for (const c of levels) {
    const before = await batchStats(port);
    tsi[c] = await runLoad({ port, request, connections: c, durationMs });
    const after = await batchStats(port);
    formed[c] = new Map([...after].map(([b, n]) => [b, n - (before.get(b) ?? 0)] as [number, number]).filter(([, n]) => n > 0));
    log(`tsi    c=${c}: ${tsi[c]!.rps.toFixed(0)} req/s, mean batch ${meanBatch(formed[c]!).toFixed(1)}`);
  }
  await stopServer(child);
}
rmSync(work, { recursive: true, force: true });

function meanBatch(h: BatchHistogram): number {
  let rows = 0;
  let n = 0;
  for (const [b, k] of h) {
    rows += b * k;
    n += k;
  }
  return n === 0 ? 0 : rows / n;
}

// ---- (b) raw onnxruntime-node in-process at the same batch sizes ----
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

/**
 * Replays a batch-size mix for `ms`; rows per second and per-batch latency percentiles. `gapMs` puts
 * the thread to sleep between runs, as a model instance sleeps between one client's requests.
 */
async function replay(h: BatchHistogram, ms: number, gapMs = 0): Promise<{ rowsPerSec: number; p50Ms: number }> {
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
  return { rowsPerSec: rows / ((performance.now() - t0) / 1000), p50Ms: times[Math.floor(times.length / 2)]! };
}

const raw: Record<number, { rowsPerSec: number; p50Ms: number }> = {};
const rawB1 = await replay(new Map([[1, 1]]), Math.min(durationMs, 2000));
// At one client the model runs once per round trip and its thread sleeps in between; a CPU computes
// the same run slower then (cold caches, a descheduled core) than in a back-to-back loop. So the c=1
// target is also checked against raw ORT run at tsi's c=1 pace.
const gapMs = tsi[1] ? Math.max(0, tsi[1].meanMs - rawB1.p50Ms) : 0;
const rawPaced = gapMs > 0 ? await replay(new Map([[1, 1]]), Math.min(durationMs, 2000), gapMs) : rawB1;
for (const c of levels) {
  raw[c] = formed[c]!.size > 0 ? await replay(formed[c]!, Math.min(durationMs, 3000)) : { rowsPerSec: NaN, p50Ms: NaN };
  log(`raw    c=${c}: ${raw[c]!.rowsPerSec.toFixed(0)} rows/s`);
}

// ---- report ----
const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const lines = [
  `mlp_batch, ${intra} intra-op thread(s), max_queue_delay ${delayUs} µs, ${durationMs / 1000} s per point; raw ORT batch-1 p50 ${f2(rawB1.p50Ms)} ms back to back, ${f2(rawPaced.p50Ms)} ms at one run per ${f2(gapMs + rawB1.p50Ms)} ms`,
  '',
  '| conc | naive req/s | naive p50 / p99 ms | raw ORT rows/s | tsi req/s | tsi p50 / p99 ms | tsi mean batch | c/a | c/b |',
  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
];
for (const c of levels) {
  const a = naive[c]!;
  const t = tsi[c]!;
  const b = raw[c]!;
  lines.push(`| ${c} | ${f0(a.rps)} | ${f2(a.p50Ms)} / ${f2(a.p99Ms)} | ${f0(b.rowsPerSec)} | ${f0(t.rps)} | ${f2(t.p50Ms)} / ${f2(t.p99Ms)} | ${meanBatch(formed[c]!).toFixed(1)} | ${f2(t.rps / a.rps)}× | ${(100 * t.rps / b.rowsPerSec).toFixed(0)}% |`);
}
const checks: string[] = [];
if (tsi[64]) checks.push(`c/a at 64 = ${f2(tsi[64].rps / naive[64]!.rps)}× (target ≥ 2.5×)`);
// c/b is a throughput target: it means something once batches are full (64+ clients); at 1 client it
// compares an HTTP round trip with a bare run() call.
for (const c of levels.filter((c) => c >= 64)) {
  checks.push(`c/b at ${c} = ${(100 * tsi[c]!.rps / raw[c]!.rowsPerSec).toFixed(0)}% (target ≥ 85%)`);
}
if (tsi[1]) {
  const bound = (compute: number) => f2(delayUs / 1000 + compute + 0.5);
  checks.push(`p50 at c=1 = ${f2(tsi[1].p50Ms)} ms (target ≤ delay ${f2(delayUs / 1000)} + compute + 0.5 = ${bound(rawPaced.p50Ms)} ms with raw compute at the same pace, ${f2(rawPaced.p50Ms)} ms; ${bound(rawB1.p50Ms)} ms with back-to-back compute, ${f2(rawB1.p50Ms)} ms)`);
}
const errors = levels.reduce((n, c) => n + naive[c]!.errors + tsi[c]!.errors, 0);
if (errors > 0) checks.push(`${errors} non-2xx responses`);
process.stdout.write(`${lines.join('\n')}\n\n${checks.map((c) => `- ${c}`).join('\n')}\n`);
if (args.json) {
  writeFileSync(args.json, JSON.stringify({ intra, delayUs, durationMs, rawB1, rawPaced, gapMs, naive, tsi, raw, formed: Object.fromEntries(Object.entries(formed).map(([c, h]) => [c, Object.fromEntries(h)])) }, null, 2));
}
