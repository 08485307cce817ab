/**
 * The python backend benchmark (issue 13), measured side by side in interleaved rounds with ratios
 * taken per round (a shared host's speed drifts over seconds; bench/batching.ts does the same), the
 * one-client latencies in ABBA order within a round:
 *   1. add/sub on INT32[16] in Python vs the same model in JavaScript vs ONNX `simple`, at 1 and at
 *      64 clients: what a Python model adds per request (target: p50 at one client ≤ 0.3 ms over JS);
 *   2. a 4 MB FP32 identity in Python vs JavaScript at one client (target: ≤ 1.5× the JS time);
 *   3. a Python model that spends ~`--work-ms` of pure-Python CPU per request (GIL-bound, as
 *      tokenizers and pre-processing are), with `instance_group.count` 2 vs 1, at 64 clients
 *      (target: ≥ 1.6× the throughput) — one process per instance is what makes a second one count.
 *      Beside it, the parallelism the machine offers at that moment (two Python processes burning
 *      at once vs one alone), which bounds the ratio: on a 2-core machine shared with the server,
 *      the load generator and other work, it is often well below 2.
 * One tsi server (child process) holds every model; the load comes from wrk when installed, else
 * bench/load.ts. Each model gets binary-extension requests with the same inputs.
 *
 * Run:  npm run bench:python               (or: npx tsx bench/python.ts)
 * Flags: --duration <s> per measurement (2)  --rounds <n> (5)  --work-ms <ms> (2)  --client wrk|node
 *        --server dist|tsx (dist when built with the python backend)  --json <file>
 * Needs python3 with numpy, and the generated models (`npm run models`) for `simple`.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildRequest, hasWrk, runLoad, runWrk, wrkScript, type LoadResult } from './load.js';
import { spawnServer, stopServer, tsiServer, type Child } from './servers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..');

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '5' },
    'work-ms': { type: 'string', default: '2' },
    client: { type: 'string' },
    server: { type: 'string' },
    json: { type: 'string' },
  },
});
const durationMs = Number(args.duration) * 1000;
const rounds = Math.max(1, Number(args.rounds));
const workMs = Number(args['work-ms']);

// ---- the repository ------------------------------------------------------------------------------
const work = mkdtempSync(join(tmpdir(), 'tsi-bench-python-'));
const repo = join(work, 'repo');
const io16 = (batch: number) => `max_batch_size: ${batch}
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`;
const identityIo = `max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]`;

const PY_ADD_SUB = `import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
`;
const JS_ADD_SUB = `export default class {
  execute(requests) {
    return requests.map((r) => {
      const a = r.input('INPUT0').data, b = r.input('INPUT1').data;
      const s = new Int32Array(a.length), d = new Int32Array(a.length);
      for (let i = 0; i < a.length; i++) { s[i] = a[i] + b[i]; d[i] = a[i] - b[i]; }
      return { outputs: { OUTPUT0: { data: s, shape: r.input('INPUT0').shape }, OUTPUT1: { data: d, shape: r.input('INPUT1').shape } } };
    });
  }
}
`;
const PY_IDENTITY = `import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`;
const JS_IDENTITY = `export default class {
  execute(requests) { return requests.map((r) => ({ outputs: { OUTPUT0: r.input('INPUT0').data } })); }
}
`;
// Pure-Python CPU work (GIL-bound): the same number of loop steps in both work models, calibrated
// once here (fastest of several runs, so a busy moment does not shrink it) to about --work-ms.
const BURN = `def burn(n):
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1000003
    return acc
`;
function calibrate(): number {
  const probe = `${BURN}\nimport time\nbest = 1e9\nfor _ in range(7):\n    t = time.perf_counter(); burn(200000); best = min(best, time.perf_counter() - t)\nprint(int(200000 * ${workMs / 1000} / best))`;
  const r = spawnSync('python3', ['-c', probe], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`python3 could not run the calibration: ${r.stderr || r.error?.message}`);
  return Number(r.stdout.trim());
}
const burnSteps = calibrate();

/**
 * How much parallelism the machine offers right now: the same pure-Python work in one process, then
 * in two at once; 2 × (one alone) / (each of the pair) is ~2 on two idle cores and ~1 when other
 * load leaves room for one. The two-instance ratio cannot exceed it.
 */
async function parallelism(): Promise<number> {
  const code = `${BURN}\nimport time\nt = time.perf_counter(); burn(${burnSteps * 150}); print(time.perf_counter() - t)`;
  const one = () => new Promise<number>((resolve, reject) => {
    const c = spawn('python3', ['-c', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', () => resolve(Number(out.trim())));
  });
  const alone = await one();
  const pair = await Promise.all([one(), one()]);
  return (2 * alone) / Math.max(pair[0]!, pair[1]!);
}
const PY_WORK = `import triton_python_backend_utils as pb_utils

${BURN}
class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            burn(${burnSteps})
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT1", a)]))
        return responses
`;

function model(name: string, config: string, file: string, text: string): void {
  mkdirSync(join(repo, name, '1'), { recursive: true });
  writeFileSync(join(repo, name, 'config.pbtxt'), `name: "${name}"\n${config}\n`);
  writeFileSync(join(repo, name, '1', file), text);
}
model('add_sub_py', `backend: "python"\n${io16(8)}\ninstance_group [ { kind: KIND_CPU count: 1 } ]`, 'model.py', PY_ADD_SUB);
model('add_sub_js', `backend: "javascript"\n${io16(8)}\ninstance_group [ { kind: KIND_CPU count: 1 } ]`, 'model.mjs', JS_ADD_SUB);
model('identity_py', `backend: "python"\n${identityIo}`, 'model.py', PY_IDENTITY);
model('identity_js', `backend: "javascript"\n${identityIo}`, 'model.mjs', JS_IDENTITY);
for (const count of [1, 2]) {
  model(`work_py_${count}`, `backend: "python"\n${io16(8)}\ninstance_group [ { kind: KIND_CPU count: ${count} } ]`, 'model.py', PY_WORK);
}
const simple = join(ROOT, 'models', 'simple');
if (!existsSync(join(simple, '1', 'model.onnx'))) {
  process.stderr.write(`${simple}/1/model.onnx is missing: run \`npm run models\` first.\n`);
  process.exit(1);
}
cpSync(simple, join(repo, 'simple'), { recursive: true, filter: (src) => !src.endsWith('.onnx') });
symlinkSync(join(simple, '1', 'model.onnx'), join(repo, 'simple', '1', 'model.onnx'));

// ---- requests ------------------------------------------------------------------------------------
function binaryRequest(inputs: { name: string; datatype: string; shape: number[]; bytes: Uint8Array }[]) {
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape, parameters: { binary_data_size: i.bytes.byteLength } })),
    parameters: { binary_data_output: true },
  }));
  const body = new Uint8Array(header.byteLength + inputs.reduce((n, i) => n + i.bytes.byteLength, 0));
  body.set(header);
  let off = header.byteLength;
  for (const i of inputs) {
    body.set(i.bytes, off);
    off += i.bytes.byteLength;
  }
  return { body, headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.byteLength) } };
}
const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const addSubBody = binaryRequest(['INPUT0', 'INPUT1'].map((name, k) => ({
  name, datatype: 'INT32', shape: [1, 16], bytes: bytes(Int32Array.from({ length: 16 }, (_, i) => i * (k + 1))),
})));
const MB4 = (4 * 1024 * 1024) / 4;
const identityBody = binaryRequest([{ name: 'INPUT0', datatype: 'FP32', shape: [MB4], bytes: bytes(Float32Array.from({ length: MB4 }, (_, i) => i % 977)) }]);

const client = args.client ?? (hasWrk() ? 'wrk' : 'node');
function loader(modelName: string, req: ReturnType<typeof binaryRequest>) {
  const path = `/v2/models/${modelName}/infer`;
  const script = join(work, `${modelName}.lua`);
  if (client === 'wrk') {
    writeFileSync(join(work, `${modelName}.bin`), req.body);
    writeFileSync(script, wrkScript(join(work, `${modelName}.bin`), req.headers));
  }
  const raw = buildRequest(path, req.headers, req.body);
  return (port: number, connections: number): Promise<LoadResult> => client === 'wrk'
    ? runWrk({ url: `http://127.0.0.1:${port}${path}`, script, connections, durationMs })
    : runLoad({ port, request: raw, connections, durationMs });
}
const loads = {
  add_sub_py: loader('add_sub_py', addSubBody),
  add_sub_js: loader('add_sub_js', addSubBody),
  simple: loader('simple', addSubBody),
  identity_py: loader('identity_py', identityBody),
  identity_js: loader('identity_js', identityBody),
  work_py_1: loader('work_py_1', addSubBody),
  work_py_2: loader('work_py_2', addSubBody),
};

// ---- the server: tsi (compiled from dist/ when built with the python backend, else the sources) ----
async function startTsi(): Promise<Child> {
  const built = existsSync(join(ROOT, 'dist', 'runtime-node', 'python', 'stub', 'tsi_python_stub.py'));
  const { argv, build } = tsiServer(repo, work, { server: args.server ?? (built ? undefined : 'tsx') });
  process.stderr.write(`tsi: ${build}; load: ${client}; ${rounds} round(s) of ${durationMs / 1000} s per measurement\n`);
  return spawnServer(argv, 'tsi');
}

/** Total compute_infer time (ms) and executions of a model so far, from tsi's statistics. */
async function computeMs(port: number, name: string): Promise<{ ms: number; n: number }> {
  const stats = await (await fetch(`http://127.0.0.1:${port}/v2/models/${name}/stats`)).json() as {
    model_stats: { inference_stats: { compute_infer: { ns: number; count: number } } }[];
  };
  const c = stats.model_stats[0]!.inference_stats.compute_infer;
  return { ms: Number(c.ns) / 1e6, n: Number(c.count) };
}

// ---- measuring ------------------------------------------------------------------------------------
type Row = Record<string, number>;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f2 = (x: number) => x.toFixed(2);
const f3 = (x: number) => x.toFixed(3);

async function main(): Promise<void> {
  const server = await startTsi();
  const results: { round: number; oneClient: Row; many: Row; identity: Row; scaling: Row }[] = [];
  try {
    for (let round = 1; round <= rounds; round++) {
      const oneClient: Row = {};
      const many: Row = {};
      // One-client latencies in ABBA order (each side measured twice, averaged), so a drift of the
      // machine's speed during the round weighs on both sides alike.
      const abba = async (names: readonly (keyof typeof loads)[], out: Row) => {
        for (const m of [...names, ...[...names].reverse()]) out[m] = (out[m] ?? 0) + (await loads[m](server.port, 1)).p50Ms / 2;
      };
      await abba(['add_sub_js', 'add_sub_py', 'simple'], oneClient);
      for (const m of ['add_sub_js', 'add_sub_py', 'simple'] as const) many[m] = (await loads[m](server.port, 64)).rps;
      const identity: Row = {};
      await abba(['identity_js', 'identity_py'], identity);
      const scaling: Row = { parallelism: await parallelism() };
      for (const m of ['work_py_1', 'work_py_2'] as const) {
        const before = await computeMs(server.port, m);
        const r = await loads[m](server.port, 64);
        const after = await computeMs(server.port, m);
        scaling[m] = r.rps;
        scaling[`${m}_ms`] = (after.ms - before.ms) / Math.max(1, after.n - before.n);
      }
      results.push({ round, oneClient, many, identity, scaling });
      process.stderr.write(`round ${round}: added p50 ${f3(oneClient.add_sub_py! - oneClient.add_sub_js!)} ms, `
        + `identity ${f2(identity.identity_py! / identity.identity_js!)}x, scaling ${f2(scaling.work_py_2! / scaling.work_py_1!)}x `
        + `(parallelism on offer ${f2(scaling.parallelism!)})\n`);
    }
  } finally {
    await stopServer(server.child);
  }
  report(results);
  if (args.json) writeFileSync(args.json, JSON.stringify({ client, durationMs, workMs, results }, null, 2));
  rmSync(work, { recursive: true, force: true });
}

function report(results: { round: number; oneClient: Row; many: Row; identity: Row; scaling: Row }[]): void {
  const out: string[] = [];
  out.push(`\n### add/sub, INT32[16] (p50 ms at 1 client, mean of an ABBA pair; req/s at 64 clients)\n`);
  out.push('| round | JS p50 | Python p50 | ONNX p50 | Python − JS | JS req/s | Python req/s | ONNX req/s |');
  out.push('|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    const o = r.oneClient;
    const m = r.many;
    out.push(`| ${r.round} | ${f3(o.add_sub_js!)} | ${f3(o.add_sub_py!)} | ${f3(o.simple!)} | **${f3(o.add_sub_py! - o.add_sub_js!)}** | ${m.add_sub_js!.toFixed(0)} | ${m.add_sub_py!.toFixed(0)} | ${m.simple!.toFixed(0)} |`);
  }
  out.push(`\nmedian added p50 (Python − JS): **${f3(median(results.map((r) => r.oneClient.add_sub_py! - r.oneClient.add_sub_js!)))} ms** (target ≤ 0.3)`);
  out.push(`\n### 4 MB FP32 identity, 1 client (p50 ms, mean of an ABBA pair)\n`);
  out.push('| round | JS | Python | Python / JS |');
  out.push('|---|---|---|---|');
  for (const r of results) out.push(`| ${r.round} | ${f2(r.identity.identity_js!)} | ${f2(r.identity.identity_py!)} | **${f2(r.identity.identity_py! / r.identity.identity_js!)}** |`);
  out.push(`\nmedian ratio: **${f2(median(results.map((r) => r.identity.identity_py! / r.identity.identity_js!)))}×** (target ≤ 1.5)`);
  out.push(`\n### ${burnSteps} steps of pure-Python work per request (~${workMs} ms on an idle core), 64 clients\n`);
  out.push('| round | count 1 req/s | count 2 req/s | count 2 / count 1 | execute ms (count 1) | execute ms (count 2) | parallelism on offer |');
  out.push('|---|---|---|---|---|---|---|');
  for (const r of results) {
    const sc = r.scaling;
    out.push(`| ${r.round} | ${sc.work_py_1!.toFixed(0)} | ${sc.work_py_2!.toFixed(0)} | **${f2(sc.work_py_2! / sc.work_py_1!)}** | ${f2(sc.work_py_1_ms!)} | ${f2(sc.work_py_2_ms!)} | ${f2(sc.parallelism!)} |`);
  }
  out.push(`\nmedian ratio: **${f2(median(results.map((r) => r.scaling.work_py_2! / r.scaling.work_py_1!)))}×** (target ≥ 1.6)`);
  process.stdout.write(out.join('\n') + '\n');
}

await main();
