/**
 * Many models on one server. Scale: N copies of a tiny model (a 250-byte Add) and of one with ~10 MB
 * of weights, one CPU instance each; for each N the time until the server is up with every model
 * ready, its resident memory and its threads (/proc/<pid>/status), and the memory each model costs
 * beyond its weights, from the difference to the N = 1 run of the same kind in the same run (the
 * baseline the ratios are taken against). Budget: `--max-loaded-models` over many registered tiny
 * models, with clients sending requests to Zipf-distributed random models: failures, wrong answers
 * (each copy answers x + its number), the hit rate (requests that found their model loaded), the time
 * first requests waited for loads, and the peak resident memory against the scale run of as many loaded
 * models.
 *
 * Run:  npx tsx bench/models.ts [--tiny 1,50,200] [--big 1,10] [--registered 1000] [--loaded 50]
 *                               [--clients 32] [--seconds 15] [--zipf 1.1]
 * (add 1000 to --tiny for the full table; it is not run by CI). Needs the compiled build (npm run build).
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { offsetModel } from '../scripts/gen-models.js';

const { values: args } = parseArgs({
  options: {
    tiny: { type: 'string', default: '1,50,200' },
    big: { type: 'string', default: '1,10' },
    registered: { type: 'string', default: '1000' },
    loaded: { type: 'string', default: '50' },
    clients: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '15' },
    zipf: { type: 'string', default: '1.1' },
  },
});
const list = (s: string) => s.split(',').filter(Boolean).map(Number);
const BIG_BYTES = 10 * 1024 * 1024;
const ROOT = join(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'tsi-models-bench-'));
const entry = join(work, 'server.mjs');
writeFileSync(entry, `import { startServer } from ${JSON.stringify(pathToFileURL(join(ROOT, 'dist/runtime-node/index.js')).href)};
const max = process.argv[3] ? Number(process.argv[3]) : undefined;
const s = await startServer({ modelRepositories: [process.argv[2]], httpPort: 0, httpAddress: '127.0.0.1', metricsPort: 0, metricsAddress: '127.0.0.1', cpuMetrics: false, maxLoadedModels: max, log: { log() {}, info() {}, warn() {}, error() {}, verbose() {} } });
process.stdout.write('PORT ' + s.http.port + ' ' + s.metrics.port + '\\n');
process.on('SIGTERM', () => void s.stop(5000).then(() => process.exit(0)));
`);

function writeRepo(n: number, weightBytes: number): string {
  const dir = join(work, `repo-${n}-${weightBytes}`);
  const configOf = (name: string) => `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n`
    + `input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n`
    + `instance_group [{ count: 1 kind: KIND_CPU }]\n`;
  for (let i = 0; i < n; i++) {
    mkdirSync(join(dir, `m${i}`, '1'), { recursive: true });
    writeFileSync(join(dir, `m${i}`, 'config.pbtxt'), configOf(`m${i}`));
    writeFileSync(join(dir, `m${i}`, '1', 'model.onnx'), offsetModel(i, weightBytes));
  }
  return dir;
}

async function start(repo: string, maxLoaded?: number): Promise<{ child: ChildProcess; port: number; metrics: number; readyS: number }> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [entry, repo, ...(maxLoaded ? [String(maxLoaded)] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /PORT (\d+) (\d+)/.exec(out);
      if (m) resolve({ child, port: Number(m[1]), metrics: Number(m[2]), readyS: (performance.now() - t0) / 1000 });
    });
    child.once('exit', (code) => reject(new Error(`server exited with code ${code}`)));
  });
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

function procStatus(pid: number): { rssMiB: number; threads: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  return { rssMiB: Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024, threads: Number(/Threads:\s+(\d+)/.exec(s)![1]) };
}

async function infer(port: number, model: string, x: number): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/infer`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: [x] }] }),
  });
  const body = await r.json() as { outputs?: { data: number[] }[]; error?: string };
  if (r.status !== 200) throw new Error(`${model}: ${r.status} ${body.error}`);
  return body.outputs![0]!.data[0]!;
}

interface ScaleRow { kind: string; n: number; readyS: number; rssMiB: number; threads: number }

async function scale(kind: string, ns: number[], weightBytes: number): Promise<ScaleRow[]> {
  const rows: ScaleRow[] = [];
  for (const n of ns) {
    const repo = writeRepo(n, weightBytes);
    const s = await start(repo);
    // Every model answers (the server is up only once all are READY); one request each touches their sessions.
    for (let i = 0; i < n; i++) if ((await infer(s.port, `m${i}`, 1)) !== 1 + i) throw new Error(`m${i} answered wrong`);
    rows.push({ kind, n, readyS: s.readyS, ...procStatus(s.child.pid!) });
    await stop(s.child);
    rmSync(repo, { recursive: true, force: true });
  }
  return rows;
}

/** Ranks 0..n-1 drawn with probability ∝ 1/(rank+1)^s. */
function zipf(n: number, s: number): () => number {
  const cdf: number[] = [];
  let sum = 0;
  for (let i = 0; i < n; i++) cdf.push((sum += 1 / (i + 1) ** s));
  return () => {
    const u = Math.random() * sum;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(name + '{')) total += Number(line.split(' ').pop());
  return total;
}

async function budget(registered: number, loaded: number, clients: number, seconds: number, s: number) {
  const repo = writeRepo(registered, 0);
  const srv = await start(repo, loaded);
  const pick = zipf(registered, s);
  const order = Array.from({ length: registered }, (_, i) => i).sort(() => Math.random() - 0.5);
  let requests = 0;
  let failures = 0;
  let wrong = 0;
  let peak = procStatus(srv.child.pid!).rssMiB;
  const sampler = setInterval(() => (peak = Math.max(peak, procStatus(srv.child.pid!).rssMiB)), 200);
  const end = performance.now() + seconds * 1000;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      const m = order[pick()]!;
      const x = Math.floor(Math.random() * 1000);
      requests++;
      try {
        if ((await infer(srv.port, `m${m}`, x)) !== x + m) wrong++;
      } catch {
        failures++;
      }
    }
  }));
  clearInterval(sampler);
  const loads = await metric(srv.metrics, 'tsi_model_on_demand_load_count');
  const waitedUs = await metric(srv.metrics, 'tsi_model_on_demand_load_duration_us');
  const unloads = await metric(srv.metrics, 'tsi_model_unloads_total');
  await stop(srv.child);
  rmSync(repo, { recursive: true, force: true });
  return { requests, failures, wrong, loads, unloads, hitRate: 1 - loads / Math.max(1, requests), loadMs: waitedUs / 1000 / Math.max(1, loads), peakMiB: peak };
}

const load = loadavg()[0]!.toFixed(1);
console.log(`# many models: ${availableParallelism()} cores, load average ${load} at start (a shared, loaded machine: compare ratios, not absolute times)\n`);
const rows = [...await scale('tiny', list(args.tiny!), 0), ...await scale('10 MB', list(args.big!), BIG_BYTES)];
console.log('| model | N | ready (s) | RSS (MiB) | threads | per model beyond weights (MiB) | ready s/model vs N=1 |');
console.log('|---|---:|---:|---:|---:|---:|---:|');
for (const r of rows) {
  const base = rows.find((b) => b.kind === r.kind && b.n === 1);
  const weightsMiB = r.kind === 'tiny' ? 0 : BIG_BYTES / 2 ** 20;
  const per = base && r.n > 1 ? ((r.rssMiB - base.rssMiB) / (r.n - 1) - weightsMiB).toFixed(2) : '';
  const ratio = base && r.n > 1 ? ((r.readyS / r.n) / base.readyS).toFixed(3) : '';
  console.log(`| ${r.kind} | ${r.n} | ${r.readyS.toFixed(2)} | ${r.rssMiB.toFixed(0)} | ${r.threads} | ${per} | ${ratio} |`);
}
const registered = Number(args.registered);
const loaded = Number(args.loaded);
if (registered > 0) {
  const b = await budget(registered, loaded, Number(args.clients), Number(args.seconds), Number(args.zipf));
  const ref = rows.find((r) => r.kind === 'tiny' && r.n === loaded);
  console.log(`\n## budget: --max-loaded-models ${loaded} over ${registered} registered, ${args.clients} clients, Zipf s=${args.zipf}, ${args.seconds} s\n`);
  console.log(`requests ${b.requests}, failed ${b.failures}, wrong ${b.wrong}; hit rate ${(b.hitRate * 100).toFixed(1)} %; `
    + `${b.loads} on-demand loads (mean wait ${b.loadMs.toFixed(0)} ms), ${b.unloads} unloads; peak RSS ${b.peakMiB.toFixed(0)} MiB`
    + (ref ? ` (${(b.peakMiB / ref.rssMiB).toFixed(2)}× the ${loaded}-model scale run's ${ref.rssMiB.toFixed(0)} MiB)` : ''));
}
rmSync(work, { recursive: true, force: true });
