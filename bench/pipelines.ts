/**
 * The pipelines benchmark (issue 5): what an empty JavaScript model and a one-step ensemble cost,
 * each against calling the ONNX model directly through the same server, side by side in one run:
 *   direct    — `simple` (ONNX, INT32 [16] add/sub) through /v2/models/simple/infer;
 *   js_empty  — a JavaScript model with the same inputs and outputs that returns its inputs;
 *   ensemble  — a one-step ensemble whose step is `simple`.
 * One tsi server (a child process, compiled or from sources: see bench/servers.ts) serves all three; the load comes from
 * bench/load.ts (closed loop, keep-alive, identical v2 binary requests). Many short rounds alternate
 * the targets, and each comparison is paired: a target's p50/p99 against the direct call's in the same
 * round, so drift on a shared machine cancels out; the table shows medians over rounds.
 * Targets: the empty JavaScript model adds ≤ 0.2 ms p50 at concurrency 1; the ensemble adds ≤ 10 % p99.
 *
 * Run:  npm run bench:pipelines (or npx tsx bench/pipelines.ts)   Flags: --duration <s per round> (3)  --rounds <n> (9)
 *       --concurrency 1,64  --json <file>  --server dist|tsx  --dist <build folder> (dist).
 *       Needs the generated models (`npm run models`) and, for the compiled server, `npm run build`.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildRequest, runLoad, type LoadResult } from './load.js';
import { spawnServer, stopServer, tsiServer, type Child } from './servers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const log = (s: string) => process.stderr.write(`${s}\n`);
const ROOT = join(HERE, '..');

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '9' },
    concurrency: { type: 'string', default: '1,64' },
    json: { type: 'string' },
    server: { type: 'string' },
    dist: { type: 'string' },
  },
});
const durationMs = Number(args.duration) * 1000;
const rounds = Number(args.rounds);
const levels = args.concurrency!.split(',').map(Number);

// ---- repository: simple (ONNX), js_empty (JavaScript), simple_ensemble (one step) ----
const onnx = join(ROOT, 'models', 'simple', '1', 'model.onnx');
if (!existsSync(onnx)) {
  process.stderr.write(`${onnx} is missing: run \`npm run models\` first.\n`);
  process.exit(1);
}
const io = `max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]`;
const work = mkdtempSync(join(tmpdir(), 'tsi-bench-pipelines-'));
const repo = join(work, 'repo');
const write = (rel: string, text: string) => {
  mkdirSync(dirname(join(repo, rel)), { recursive: true });
  writeFileSync(join(repo, rel), text);
};
write('simple/config.pbtxt', `name: "simple"\nbackend: "onnxruntime"\n${io}\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`);
mkdirSync(join(repo, 'simple', '1'), { recursive: true });
copyFileSync(onnx, join(repo, 'simple', '1', 'model.onnx'));
write('js_empty/config.pbtxt', `name: "js_empty"\nbackend: "javascript"\n${io}\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`);
write('js_empty/1/model.mjs', `export default class {
  execute(requests) {
    return requests.map((r) => ({ outputs: { OUTPUT0: r.input('INPUT0').data, OUTPUT1: r.input('INPUT1').data } }));
  }
}\n`);
write('simple_ensemble/config.pbtxt', `name: "simple_ensemble"\nplatform: "ensemble"\n${io}
ensemble_scheduling { step [{ model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }] }\n`);
write('simple_ensemble/1/README.txt', 'ensemble\n');

// ---- the request: INPUT0 = 0..15, INPUT1 = 1s, binary in and out ----
function requestFor(model: string): Buffer {
  const a = Int32Array.from({ length: 16 }, (_, i) => i);
  const b = new Int32Array(16).fill(1);
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
    ],
    parameters: { binary_data_output: true },
  }));
  const body = new Uint8Array(header.byteLength + 128);
  body.set(header);
  body.set(new Uint8Array(a.buffer), header.byteLength);
  body.set(new Uint8Array(b.buffer), header.byteLength + 64);
  return buildRequest(`/v2/models/${model}/infer`, {
    'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.byteLength),
  }, body);
}

async function startServer(): Promise<Child> {
  const { argv, build } = tsiServer(repo, work, { server: args.server, dist: args.dist });
  log(`server: ${build}`);
  return spawnServer(argv, 'the tsi server');
}

const TARGETS = { direct: 'simple', js_empty: 'js_empty', ensemble: 'simple_ensemble' } as const;
type Target = keyof typeof TARGETS;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const { child, port } = await startServer();
const results: Record<number, Record<Target, LoadResult[]>> = {};
try {
  // Every target answers, and answers the same, before anything is timed.
  const answers = await Promise.all(Object.values(TARGETS).map(async (model) => {
    const ones = new Array(16).fill(1);
    const r = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: ['INPUT0', 'INPUT1'].map((name) => ({ name, datatype: 'INT32', shape: [1, 16], data: ones })) }),
    });
    if (r.status !== 200) throw new Error(`${model}: ${r.status} ${await r.text()}`);
    return JSON.stringify(((await r.json()) as { outputs: unknown[] }).outputs);
  }));
  if (new Set(answers.slice(0, 1).concat(answers.slice(2))).size !== 1) throw new Error(`direct and ensemble answers differ: ${answers.join(' / ')}`);
  for (const c of levels) {
    results[c] = { direct: [], js_empty: [], ensemble: [] };
    for (let round = 0; round < rounds; round++) {
      for (const t of Object.keys(TARGETS) as Target[]) {
        const r = await runLoad({ port, request: requestFor(TARGETS[t]), connections: c, durationMs, warmupMs: 200 });
        if (r.errors > 0) throw new Error(`${t} c=${c}: ${r.errors} errors`);
        results[c]![t].push(r);
        log(`c=${c} round ${round + 1} ${t.padEnd(8)} ${r.rps.toFixed(0).padStart(6)} req/s  p50 ${r.p50Ms.toFixed(3)} ms  p99 ${r.p99Ms.toFixed(3)} ms`);
      }
    }
  }
} finally {
  await stopServer(child);
  rmSync(work, { recursive: true, force: true });
}

// ---- report: medians over rounds, and per-round comparisons with the direct call ----
const summary: Record<string, unknown>[] = [];
const lines = ['| concurrency | target | req/s | p50 ms | p99 ms | added p50 (paired) | p99 ratio (paired) |', '|---|---|---|---|---|---|---|'];
for (const c of levels) {
  const rs = results[c]!;
  const m = (t: Target, k: 'p50Ms' | 'p99Ms' | 'rps') => median(rs[t].map((r) => r[k]));
  for (const t of Object.keys(TARGETS) as Target[]) {
    const addedP50Ms = median(rs[t].map((r, i) => r.p50Ms - rs.direct[i]!.p50Ms));
    const p99Ratio = median(rs[t].map((r, i) => r.p99Ms / rs.direct[i]!.p99Ms));
    summary.push({ concurrency: c, target: t, rps: m(t, 'rps'), p50Ms: m(t, 'p50Ms'), p99Ms: m(t, 'p99Ms'), addedP50Ms, p99Ratio });
    const vs = t === 'direct' ? ['—', '—'] : [`${addedP50Ms >= 0 ? '+' : ''}${addedP50Ms.toFixed(3)} ms`, `×${p99Ratio.toFixed(3)}`];
    lines.push(`| ${c} | ${t} | ${m(t, 'rps').toFixed(0)} | ${m(t, 'p50Ms').toFixed(3)} | ${m(t, 'p99Ms').toFixed(3)} | ${vs[0]} | ${vs[1]} |`);
  }
}
const at = (c: number, t: Target) => summary.find((x) => x.concurrency === c && x.target === t)!;
console.log(lines.join('\n'));
if (levels.includes(1)) {
  const added = at(1, 'js_empty').addedP50Ms as number;
  console.log(`\nempty JavaScript model at c=1: ${added >= 0 ? '+' : ''}${added.toFixed(3)} ms p50 over direct ONNX (target ≤ 0.2 ms): ${added <= 0.2 ? 'met' : 'MISSED'}`);
}
for (const c of levels) {
  const r = at(c, 'ensemble').p99Ratio as number;
  console.log(`one-step ensemble at c=${c}: ${((r - 1) * 100).toFixed(1)} % p99 over direct (target ≤ 10 %): ${r <= 1.1 ? 'met' : 'MISSED'}`);
}
if (args.json) writeFileSync(args.json, JSON.stringify({ durationMs, rounds, results: summary }, null, 2));
