/**
 * Intra-op threads per model, whatever the load order (issue 41). One server holds N copies of a
 * model of real compute (bench/conv-model.ts, a ResNet-shaped network) under the default thread
 * policy (runtime-node/onnx: a session widens to its share of the cores once its runs prove heavy),
 * and N more copies for each static split (`intra_op_thread_count` = t for every copy, t from 1 to the
 * inference cores), all loaded one by one in a random order (printed, with its seed). Then:
 * - each policy model alone busy at concurrency 1: its median latency over HTTP against a raw
 *   onnxruntime-node session with default options in this process, measured just before it (the
 *   ratio, target ≤ 1.15 for every model, whichever place it loaded in), and against a raw session
 *   opened as the policy opens a widened one (the same threads, spinning off: the server's own cost),
 *   with a tiny model's served latency beside it (the hops between client, server and worker threads,
 *   which on a contended machine cost a scheduler wake-up each);
 * - all N policy models busy at once (one closed-loop client each): total inferences/s against the
 *   best static split driven the same way (target ≥ 0.9), the variants alternating over rounds so a
 *   neighbour's load falls on all of them alike.
 * Prints the machine's core count; the threads each model ended with come from the server's log.
 * On a machine shared with other work, wall-clock rates follow the share the OS gives the server
 * (more runnable threads, more share), so each variant's inferences per second of the server's own
 * CPU time are printed too: how much work a variant gets out of what it was given.
 *
 * Run:  npx tsx bench/threads.ts [--models 10] [--size 224] [--width 64] [--requests 30]
 *                                [--seconds 3] [--rounds 6] [--seed 41] [--splits 1,2,8]
 * Needs the compiled build (npm run build).
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import { markdownTable } from './markdown.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { HttpClient } from '../client/index.js';
import { computeCores, NO_SPINNING } from '../runtime-node/onnx/session-options.js';
import { offsetModel } from '../scripts/gen-models.js';
import { buildConvModel, CONV_INPUT, convImages } from './conv-model.js';
import { spawnServer, stopServer } from './servers.js';

const { values: args } = parseArgs({
  options: {
    models: { type: 'string', default: '10' },
    size: { type: 'string', default: '224' },
    width: { type: 'string', default: '64' },
    requests: { type: 'string', default: '30' },
    seconds: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '6' },
    seed: { type: 'string', default: '41' },
    splits: { type: 'string' },
  },
});
const N = Number(args.models);
const REQUESTS = Number(args.requests);
const SECONDS = Number(args.seconds);
const cores = availableParallelism();
const inference = computeCores(cores);
// Static splits: every copy pinned to t threads, t doubling up to all the inference cores, or as
// --splits says (more threads than cores shows what oversubscription costs with spinning off).
const splits = args.splits ? args.splits.split(',').map(Number)
  : [...new Set([...Array.from({ length: 8 }, (_, i) => 2 ** i).filter((t) => t < inference), inference])];

const model = buildConvModel({ size: Number(args.size), width: Number(args.width) });
const image = convImages(model.size, 1);
const work = mkdtempSync(join(tmpdir(), 'tsi-threads-bench-'));
const repo = join(work, 'repo');

/** The N copies of one variant: `p<i>` under the policy, `s<t>_<i>` pinned to t threads. */
const names = (t?: number) => Array.from({ length: N }, (_, i) => (t === undefined ? `p${i}` : `s${t}_${i}`));
function writeModel(name: string, threads?: number): void {
  mkdirSync(join(repo, name, '1'), { recursive: true });
  const param = threads === undefined ? '' : `parameters { key: "intra_op_thread_count" value: { string_value: "${threads}" } }\n`;
  writeFileSync(join(repo, name, 'config.pbtxt'), `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 1\n`
    + `input [{ name: "${CONV_INPUT}" data_type: TYPE_FP32 dims: [ 3, ${model.size}, ${model.size} ] }]\n`
    + `output [{ name: "${model.output}" data_type: TYPE_FP32 dims: [ ${model.outputDims.join(', ')} ] }]\n`
    + `instance_group [{ count: 1 kind: KIND_CPU }]\n${param}`);
  writeFileSync(join(repo, name, '1', 'model.onnx'), model.bytes);
}
for (const n of names()) writeModel(n);
mkdirSync(join(repo, 'hop', '1'), { recursive: true });
writeFileSync(join(repo, 'hop', 'config.pbtxt'), 'name: "hop"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
  + 'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n');
writeFileSync(join(repo, 'hop', '1', 'model.onnx'), offsetModel(0));
for (const t of splits) for (const n of names(t)) writeModel(n, t);

/** mulberry32: the same order for the same seed on every machine. */
function shuffled<T>(xs: T[], seed: number): T[] {
  let a = seed >>> 0;
  const rand = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

const entry = join(work, 'server.mjs');
writeFileSync(entry, `import { startServer } from ${JSON.stringify(pathToFileURL(join(import.meta.dirname, '..', 'dist/runtime-node/index.js')).href)};
const say = (l) => process.stdout.write('LOG ' + l + '\\n');
const s = await startServer({ modelRepositories: [process.argv[2]], modelControlMode: 'explicit', httpPort: 0, httpAddress: '127.0.0.1', metricsPort: 0, metricsAddress: '127.0.0.1', cpuMetrics: false,
  log: { error: say, warn: say, info: (l) => { if (/intra-op/.test(l)) say(l); }, verbose() {} } });
process.stdout.write('PORT ' + s.http.port + '\\n');
process.on('SIGTERM', () => void s.stop(5000).then(() => process.exit(0)));
`);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  console.log(`${cores} cores (${inference} for inference); ${N} copies of ${model.describe}; static splits ${splits.join(', ')} thread(s) a copy; load average ${loadavg()[0]!.toFixed(1)}`);
  const server = await spawnServer([entry, repo], 'tsi');
  const threads = new Map<string, number>();
  server.child.stdout!.on('data', (d: Buffer) => {
    for (const line of d.toString().split('\n')) {
      const m = /^LOG (\S+) .*now (\d+) intra-op threads/.exec(line);
      if (m) threads.set(m[1]!, Number(m[2]));
      else if (line.startsWith('LOG ')) console.error(line.slice(4));
    }
  });
  const client = new HttpClient(`127.0.0.1:${server.port}`);
  const infer = (name: string) => client.infer(name, [{ name: CONV_INPUT, datatype: 'FP32', shape: [1, 3, model.size, model.size], data: image }]);
  try {
    const seed = Number(args.seed);
    const order = shuffled([...names(), ...splits.flatMap((t) => names(t)), 'hop'], seed);
    for (const name of order) {
      const r = await fetch(`http://127.0.0.1:${server.port}/v2/repository/models/${name}/load`, { method: 'POST' });
      if (!r.ok) throw new Error(`loading ${name}: ${r.status} ${await r.text()}`);
    }
    const place = (name: string) => order.indexOf(name) + 1;
    console.log(`load order (seed ${seed}): ${order.filter((n) => n.startsWith('p')).map((n) => `${n}@${place(n)}`).join(' ')} of ${order.length}`);

    // Each policy model alone at concurrency 1, against the raw session measured just before it.
    const raw = await ort.InferenceSession.create(model.bytes);
    const same = await ort.InferenceSession.create(model.bytes, { intraOpNumThreads: inference, extra: NO_SPINNING });
    const feeds = { [CONV_INPUT]: new ort.Tensor('float32', image, [1, 3, model.size, model.size]) };
    /** Median ms of `run` after a warm-up long enough for a served session to prove heavy and widen. */
    const timed = async (run: () => Promise<unknown>) => {
      for (let i = 0; i < 6; i++) await run();
      const ms: number[] = [];
      for (let i = 0; i < REQUESTS; i++) {
        const t0 = performance.now();
        await run();
        ms.push(performance.now() - t0);
      }
      return median(ms);
    };
    const rows: (string | number)[][] = [['model', 'loaded', 'threads', 'raw ms', `raw ${inference} threads, no spin, ms`, 'tiny model served ms', 'served ms', 'served/raw', 'served/raw no spin']];
    const ratios: number[] = [];
    for (const name of names()) {
      const rawMs = await timed(() => raw.run(feeds));
      const sameMs = await timed(() => same.run(feeds));
      const hopMs = await timed(() => client.infer('hop', [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: Float32Array.of(1) }]));
      const servedMs = await timed(() => infer(name));
      const ratio = servedMs / rawMs;
      ratios.push(ratio);
      rows.push([name, `${place(name)} of ${order.length}`, threads.get(name) ?? 1, rawMs.toFixed(2), sameMs.toFixed(2), hopMs.toFixed(2), servedMs.toFixed(2), ratio.toFixed(2), (servedMs / sameMs).toFixed(2)]);
    }
    await raw.release();
    await same.release();
    printTable('each policy model alone busy, concurrency 1 (median latency)', rows);
    console.log(`served/raw: worst ${Math.max(...ratios).toFixed(2)}, best ${Math.min(...ratios).toFixed(2)} (target ≤ 1.15 for every model)`);

    // All N busy at once: the policy against each static split, alternating over rounds.
    for (const t of splits) for (const name of names(t)) for (let i = 0; i < 3; i++) await infer(name);
    const variants: (number | undefined)[] = [undefined, ...splits];
    const rates = new Map<number | undefined, number[]>(variants.map((v) => [v, []]));
    const perCpu = new Map<number | undefined, number[]>(variants.map((v) => [v, []]));
    for (let round = 0; round < Number(args.rounds); round++) {
      for (const v of round % 2 === 0 ? variants : [...variants].reverse()) {
        let done = 0;
        const until = performance.now() + SECONDS * 1000;
        const t0 = performance.now();
        const cpu0 = cpuSeconds(server.child.pid!);
        await Promise.all(names(v).map(async (name) => {
          while (performance.now() < until) {
            await infer(name);
            done++;
          }
        }));
        rates.get(v)!.push(done / ((performance.now() - t0) / 1000));
        perCpu.get(v)!.push(done / Math.max(0.01, cpuSeconds(server.child.pid!) - cpu0));
      }
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const policy = mean(rates.get(undefined)!);
    const best = Math.max(...splits.map((t) => mean(rates.get(t)!)));
    const busy: (string | number)[][] = [['variant', 'threads a copy', ...rates.get(undefined)!.map((_, r) => `round ${r + 1} infer/s`), 'mean infer/s', 'vs best static', 'infer per server CPU-s']];
    for (const v of variants) {
      const r = rates.get(v)!;
      busy.push([v === undefined ? 'policy' : `static ${v}`, v ?? `1 → ${[...new Set(names().map((n) => threads.get(n) ?? 1))].join('/')}`, ...r.map((x) => x.toFixed(1)), mean(r).toFixed(1), (mean(r) / best).toFixed(2), mean(perCpu.get(v)!).toFixed(1)]);
    }
    printTable(`all ${N} busy at once, one closed-loop client each, ${SECONDS} s a round`, busy);
    const bestPerCpu = Math.max(...splits.map((t) => mean(perCpu.get(t)!)));
    const policyPerCpu = mean(perCpu.get(undefined)!) / bestPerCpu;
    console.log(`policy / best static split: ${(policy / best).toFixed(2)} (target ≥ 0.9); per server CPU-second ${policyPerCpu.toFixed(2)}`);
    markdownTable('summary', [
      ['cores (inference)', 'model', 'load order of the policy copies (seed)', 'served/raw, worst', 'all busy: policy / best static', 'the same per server CPU-s'],
      [`${cores} (${inference})`, model.describe, `${order.filter((n) => n.startsWith('p')).map(place).join(', ')} of ${order.length} (${seed})`,
        Math.max(...ratios).toFixed(2), (policy / best).toFixed(2), policyPerCpu.toFixed(2)],
    ]);
  } finally {
    await stopServer(server.child);
    rmSync(work, { recursive: true, force: true });
  }
}

/** The process's user + system CPU time (Linux; 0 elsewhere, and the column reads as nothing). */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

function printTable(title: string, rows: (string | number)[][]): void {
  console.log(`\n${title}`);
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => String(r[c]).length)));
  for (const r of rows) console.log(r.map((x, c) => String(x).padStart(widths[c]!)).join('  '));
  markdownTable(title, rows);
}

await main();
