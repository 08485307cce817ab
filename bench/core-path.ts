/**
 * The core-path microbenchmark: what core itself costs per inference request, with no HTTP and no
 * real model. An InferenceServer over an in-memory repository serves an `mlp_batch`-shaped model
 * (FP32 INPUT0 [1024] → OUTPUT0 [1024], max_batch_size 32, dynamic batching with max_queue_delay 0)
 * from a trivial in-process backend that gathers the batch with `concatBatch`, yields one macrotask
 * (standing in for the worker round trip of the Node ONNX backend; about 1.4 µs of CPU by itself),
 * echoes the input as the output and splits it back with `splitBatch`. Closed-loop clients each await
 * `server.infer` and send the next request at once. Printed per case: CPU per request
 * (process.cpuUsage delta / requests; only the main thread works), requests/s, the mean batch size
 * the batcher formed, and garbage collections per 1000 requests with their wall time per request
 * (GC work per request grows with what each request keeps alive across the await, so it shows
 * per-request allocations that CPU time alone blurs). `--ensemble` adds a one-step ensemble over the
 * same model and prints what it adds per request over calling the model directly.
 *
 * Run:  npx tsx bench/core-path.ts
 * Flags: --requests <n> (20000 per measurement)  --concurrency 1,64  --runs <n> (3)  --ensemble
 *        --core <dir>[,<dir>...]  core folders to compare (default: this checkout's core). With
 *        several, every run measures each folder in turn, so machine noise hits them alike: A/B in
 *        one process. A folder holding index.js runs as built JS, else as TypeScript through tsx,
 *        whose transform wraps every closure in a `__name` call; the server runs built JS, so compare
 *        built copies, e.g. with the baseline in /tmp/base (a copy of core/ from before a change):
 *          npx esbuild /tmp/base/*.ts --outdir=/tmp/base-js --format=esm --target=es2022
 *          npx esbuild core/*.ts --outdir=/tmp/new-js --format=esm --target=es2022
 *          npx tsx bench/core-path.ts --runs 7 --core /tmp/base-js,/tmp/new-js
 * Profile:  node --cpu-prof --import tsx bench/core-path.ts --runs 1 --requests 200000 --concurrency 64
 *        (the largest .cpuprofile written is the main thread's; the others are tsx's loader thread)
 */

import { existsSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

type Core = typeof import('../core/index.js');

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '1,64' },
    runs: { type: 'string', default: '3' },
    ensemble: { type: 'boolean', default: false },
    core: { type: 'string' },
  },
});

const REQUESTS = Number(args.requests);
const CONCURRENCY = args.concurrency!.split(',').map(Number);
const RUNS = Number(args.runs);
// Folders given are relative to the working directory; the default is this checkout's core.
const CORES = args.core ? args.core.split(',') : [join(dirname(fileURLToPath(import.meta.url)), '..', 'core')];
const ROW = 1024;

const MODEL = {
  name: 'mlp', backend: 'copy', max_batch_size: 32,
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [ROW] }],
  output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [ROW] }],
  dynamic_batching: { max_queue_delay_microseconds: 0 },
  instance_group: [{ kind: 'KIND_CPU', count: 1 }],
};
const ENSEMBLE = {
  name: 'ens', platform: 'ensemble', max_batch_size: 32,
  input: [{ name: 'IN', data_type: 'TYPE_FP32', dims: [ROW] }],
  output: [{ name: 'OUT', data_type: 'TYPE_FP32', dims: [ROW] }],
  ensemble_scheduling: { step: [{ model_name: 'mlp', model_version: -1, input_map: { INPUT0: 'IN' }, output_map: { OUTPUT0: 'OUT' } }] },
};

/** The trivial backend: gather, one macrotask, copy, split. Pipelined like the Node ONNX backend. */
function copyBackend(core: Core): import('../core/index.js').Backend {
  const tick = () => new Promise<void>((r) => setImmediate(r));
  return {
    name: 'copy',
    loadModel: async () => ({
      unload: async () => {},
      createInstance: async (spec) => ({
        spec, device: 'cpu', pipelined: true, unload: async () => {},
        execute: async (requests) => {
          const inputs = core.concatBatch(requests.map((r) => r.inputs.get('INPUT0')!));
          await tick();
          const out = { name: 'OUTPUT0', datatype: 'FP32' as const, shape: inputs.shape, data: inputs.data };
          const parts = core.splitBatch(out, requests.map((r) => r.batchSize));
          for (let i = 0; i < requests.length; i++) requests[i]!.send({ outputs: [parts[i]!] }, true);
          return { waitNs: 0, computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0 };
        },
      }),
    }),
  };
}

async function startServer(core: Core) {
  const configs: Record<string, object> = { mlp: MODEL, ens: ENSEMBLE };
  const source: import('../core/index.js').RepositorySource = {
    location: 'memory',
    listModels: async () => Object.keys(configs),
    files: (model) => ({
      read: async (p) => {
        if (p === 'config.json') return new TextEncoder().encode(JSON.stringify(configs[model]));
        throw new Error(`no file ${model}/${p}`);
      },
      exists: async (p) => p === 'config.json' || p === '1',
      list: async (d) => (d === '' ? [{ name: 'config.json', isDir: false }, { name: '1', isDir: true }] : []),
    }),
  };
  const backends = new core.BackendRegistry();
  backends.register('copy', () => copyBackend(core));
  const server = new core.InferenceServer({ sources: [source], backends });
  await server.start();
  for (const m of ['mlp', 'ens']) if (!server.isModelReady(m)) throw new Error(`model ${m} did not load: ${JSON.stringify(server.repositoryIndex())}`);
  return server;
}

const data = new Float32Array(ROW).fill(0.5);

// Every collection, with its wall time (a scavenge's helper threads add CPU elsewhere).
let gcCount = 0;
let gcMs = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gcCount++;
    gcMs += e.duration;
  }
}).observe({ entryTypes: ['gc'] });
/** GC entries are delivered asynchronously: let the ones of a measurement arrive before reading. */
const settleGc = () => new Promise((r) => setTimeout(r, 5));

/** `requests` requests from `concurrency` closed-loop clients: µs CPU per request, req/s, batch size, GC. */
async function drive(server: import('../core/index.js').InferenceServer, model: string, input: string, requests: number, concurrency: number) {
  let left = requests;
  const client = async () => {
    while (left > 0) {
      left--;
      // A fresh request each time, as a transport builds one per call.
      const r = await server.infer({ model_name: model, inputs: [{ name: input, datatype: 'FP32', shape: [1, ROW], data }] });
      if (r.outputs.length !== 1) throw new Error('bad response');
    }
  };
  await settleGc();
  const gc0 = gcCount;
  const gcMs0 = gcMs;
  const s0 = execStats(server);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, client));
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const s1 = execStats(server);
  await settleGc();
  return {
    cpuUs: (cpu.user + cpu.system) / requests, rps: requests / (wallMs / 1000), batch: (s1.rows - s0.rows) / (s1.executions - s0.executions),
    gcs: ((gcCount - gc0) * 1000) / requests, gcUs: ((gcMs - gcMs0) * 1000) / requests,
  };
}

/** The backend model's rows and executions so far (an ensemble's requests run there too). */
function execStats(server: import('../core/index.js').InferenceServer) {
  const s = server.statistics('mlp').model_stats[0] as { inference_count: number; execution_count: number };
  return { rows: s.inference_count, executions: s.execution_count };
}

const cores: { dir: string; server: import('../core/index.js').InferenceServer }[] = [];
for (const dir of CORES) {
  const js = resolve(dir, 'index.js');
  const core = (await import(pathToFileURL(existsSync(js) ? js : resolve(dir, 'index.ts')).href)) as Core;
  cores.push({ dir, server: await startServer(core) });
}

const cases: { model: string; input: string; c: number }[] = [];
for (const c of CONCURRENCY) {
  cases.push({ model: 'mlp', input: 'INPUT0', c });
  if (args.ensemble) cases.push({ model: 'ens', input: 'IN', c });
}

// Warm-up: let the JIT settle on every path before anything is measured.
for (const { server } of cores) for (const k of cases) await drive(server, k.model, k.input, Math.min(REQUESTS, 5000), k.c);

type Row = { cpu: number[]; rps: number[]; batch: number[]; gcs: number[]; gcUs: number[] };
const results = new Map<string, Row>();
for (let run = 0; run < RUNS; run++) {
  for (const k of cases) {
    for (const { dir, server } of cores) {
      const r = await drive(server, k.model, k.input, REQUESTS, k.c);
      const key = `${k.model}\tc=${k.c}\t${relative(process.cwd(), dir) || dir}`;
      let e = results.get(key);
      if (!e) results.set(key, (e = { cpu: [], rps: [], batch: [], gcs: [], gcUs: [] }));
      e.cpu.push(r.cpuUs);
      e.rps.push(r.rps);
      e.batch.push(r.batch);
      e.gcs.push(r.gcs);
      e.gcUs.push(r.gcUs);
    }
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f1 = (x: number) => x.toFixed(1);
console.log(`${REQUESTS} requests per measurement, ${RUNS} run(s); CPU µs/request (median, then every run), then medians of`
  + ' requests/s, mean batch size, GCs per 1000 requests and GC wall µs per request');
console.log(['model', 'conc', 'core', 'µs/req', 'runs', 'req/s', 'batch', 'gc/1k', 'gc µs'].join('\t'));
for (const [key, e] of results) {
  const m = (xs: number[]) => f1(median(xs));
  console.log(`${key}\t${m(e.cpu)}\t${e.cpu.map(f1).join(' ')}\t${Math.round(median(e.rps))}\t${m(e.batch)}\t${m(e.gcs)}\t${median(e.gcUs).toFixed(2)}`);
}
if (args.ensemble) {
  console.log('ensemble over the plain model: added CPU µs/request (medians), throughput ratio');
  for (const { dir } of cores) {
    for (const c of CONCURRENCY) {
      const at = (model: string) => results.get(`${model}\tc=${c}\t${relative(process.cwd(), dir) || dir}`)!;
      const [plain, ens] = [at('mlp'), at('ens')];
      console.log(`c=${c}\t${relative(process.cwd(), dir) || dir}\t+${f1(median(ens.cpu) - median(plain.cpu))}\t×${(median(ens.rps) / median(plain.rps)).toFixed(2)}`);
    }
  }
}
for (const { server } of cores) await server.stop();
