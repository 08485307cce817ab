/**
 * Two builds of tsi side by side: both servers run at once over the same repository and take turns
 * under the same closed-loop load (A B, B A, A B, ...), and the ratio B/A is taken per pair of rounds,
 * so the host's drift between faster and slower phases cancels. Prints requests/s, p50 and the main
 * thread's CPU per request (from /proc, Linux) for each, and the per-pair ratios with their median.
 * How this repository measured its HTTP/1.1 layer against node:http (README, Performance).
 *
 *   git worktree add /tmp/before <commit> && (cd /tmp/before && npm ci && npm run build)
 *   npm run build && npx tsx bench/ab.ts /tmp/before/dist dist [--concurrency 64] [--rounds 6]
 *
 * Flags: --concurrency <n> (64)  --rounds <pairs> (6)  --duration <s per round> (2)  --model (mlp_batch,
 * whose generated model must exist: `npm run models`). A build folder is a `dist/` with
 * runtime-node/index.js in it; each server runs from its own build and its own node_modules.
 */

import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildRequest, mlpRowRequest, runLoad, type LoadResult } from './load.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    concurrency: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '6' },
    duration: { type: 'string', default: '2' },
    model: { type: 'string', default: 'mlp_batch' },
  },
});
if (positionals.length !== 2) {
  process.stderr.write('usage: npx tsx bench/ab.ts <build A> <build B> [--concurrency 64] [--rounds 6]\n');
  process.exit(2);
}
const [distA, distB] = positionals.map((p) => resolve(p)) as [string, string];
const model = args.model!;
const connections = Number(args.concurrency);
const durationMs = Number(args.duration) * 1000;

// One repository with only the model under test (its generated .onnx linked, not copied).
const work = mkdtempSync(join(tmpdir(), 'tsi-ab-'));
const repo = join(work, 'repo');
const src = join(ROOT, 'models', model);
if (!existsSync(join(src, '1', 'model.onnx'))) {
  process.stderr.write(`${join(src, '1', 'model.onnx')} is missing: run \`npm run models\` first.\n`);
  process.exit(1);
}
mkdirSync(join(repo, model, '1'), { recursive: true });
symlinkSync(join(src, 'config.pbtxt'), join(repo, model, 'config.pbtxt'));
symlinkSync(join(src, '1', 'model.onnx'), join(repo, model, '1', 'model.onnx'));

// The bench's request: one 1024-float row, binary in and out (mlp_batch's INPUT/OUTPUT).
const { body, headers } = mlpRowRequest();
const request = buildRequest(`/v2/models/${model}/infer`, headers, body);

/** CPU time of a process's main thread (its thread id is its pid), in ms; NaN off Linux. */
function mainThreadMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
  } catch {
    return NaN;
  }
}

interface Side { name: string; child: import('node:child_process').ChildProcess; port: number; rounds: { load: LoadResult; mainUs: number }[] }
const servers: Side[] = [];
for (const [name, dist] of [['A', distA], ['B', distB]] as const) {
  const { argv } = tsiServer(repo, mkdtempSync(join(work, name)), { dist });
  const s = await spawnServer(argv, `server ${name} (${dist})`);
  servers.push({ name, child: s.child, port: s.port, rounds: [] });
}
process.stderr.write(`A: ${distA}\nB: ${distB}\n${model}, ${connections} clients, ${args.rounds} pairs of ${durationMs / 1000}-s rounds\n`);
try {
  for (const s of servers) await runLoad({ port: s.port, request, connections, durationMs: 1000 });
  for (let r = 0; r < Number(args.rounds); r++) {
    for (const s of r % 2 === 0 ? servers : [...servers].reverse()) {
      const cpu0 = mainThreadMs(s.child.pid!);
      const load = await runLoad({ port: s.port, request, connections, durationMs, warmupMs: 300 });
      // The CPU window also holds the warm-up and the drain: per request over all it answered.
      const answered = load.requests * (1 + 300 / durationMs);
      s.rounds.push({ load, mainUs: ((mainThreadMs(s.child.pid!) - cpu0) * 1000) / answered });
    }
  }
} finally {
  for (const s of servers) await stopServer(s.child);
  rmSync(work, { recursive: true, force: true });
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
for (const s of servers) {
  const rps = s.rounds.map((x) => x.load.rps);
  process.stdout.write(`${s.name}: req/s ${rps.map((x) => x.toFixed(0)).join(' ')} | median ${median(rps).toFixed(0)}, p50 ${median(s.rounds.map((x) => x.load.p50Ms)).toFixed(2)} ms, main thread ${median(s.rounds.map((x) => x.mainUs)).toFixed(1)} µs a request\n`);
}
const ratios = servers[0]!.rounds.map((a, i) => servers[1]!.rounds[i]!.load.rps / a.load.rps);
process.stdout.write(`B/A req/s per pair: ${ratios.map((x) => x.toFixed(3)).join(' ')}; median ${median(ratios).toFixed(3)}\n`);
