/**
 * The parts of bench/protocols.ts that measure tsi on real work rather than on `simple` (issue #20,
 * items 5 and 6, and the fetch target), each in interleaved rounds against a baseline taken in the
 * same run, each returning its rows of the bench's table:
 *   - largeTensors: a 4 MB and a 64 MB FP32 identity over HTTP binary (wrk), gRPC raw contents
 *     (h2load) and system shared memory (a small JSON request naming /dev/shm regions the bench
 *     registered), one request in flight, in MB/s moved (in + out) against a memcpy in this process;
 *     for the 64 MB shared-memory case also what getting the input from the region into the tensor
 *     the server runs costs against a memcpy (the mapped view, its crossing to the worker by address,
 *     the copy that crossing used to be, the pread fallback), onnxruntime-node's identity alone, and where the server's time went;
 *   - servedVsRaw: a ResNet-style model with a dense head (bench/conv-model.ts: 11.3 M parameters,
 *     1 MiB FP32 output) served over HTTP binary with fetch's default headers and over gRPC (grpc-js),
 *     the client a process of its own (bench/protocols-client.ts), vs onnxruntime-node in a loop with
 *     the same intra-op threads on the same core, at 1 and 8 clients;
 *   - fetchVsNodeHttp: Node fetch with its default headers, one client, `simple` against tsi vs the same
 *     loop against a minimal node:http server answering the very bytes tsi answers;
 *   - pageFetch: the demo page's server column: from a page in headless Chromium, `simple` inferred with
 *     the demo's JSON request vs a bare fetch round trip to the same server (GET /v2/health/live).
 */

import { spawn } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as ort from 'onnxruntime-node';
import type { InferInputSpec } from '../client/types.js';
import { fromBytes } from '../core/index.js';
import { nodeShmProvider } from '../runtime-node/shm.js';
import { mappedAddress } from '../runtime-node/shm-map.js';
import { identityModel } from '../scripts/gen-models.js';
import { CHROMIUM } from '../test/browser/chromium.js';
import { launchChromium } from '../test/browser/static-server.js';
import { CONV_INPUT, convImages, writeConvModel, type ConvModel } from './conv-model.js';
import { wrkScript } from './load.js';

/** A request prepared for every tool (see protocols.ts's prepare). */
export interface Case { model: string; inputs: InferInputSpec[]; httpFile: string; headerLength: number; grpcFile: string; bytes: number }

export interface BenchContext {
  root: string;
  work: string;
  seconds: number;
  rounds: number;
  /** Whether the server runs on core 0 and the load on core 1 (run() pins accordingly). */
  pin: boolean;
  http: number;
  grpc: number;
  run(core: number, cmd: string, argv: string[]): Promise<string>;
  prepare(name: string, model: string, inputs: InferInputSpec[]): Case;
  wrk(port: number, c: Case, conns: number): Promise<number>;
  h2load(port: number, c: Case, streams: number): Promise<number>;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f = (x: number, d = 2) => x.toFixed(d);
/** A median with its range over the rounds, e.g. "0.93 (0.90–0.97)". */
const ranged = (xs: number[], d = 2) => (xs.length > 1 ? `${f(median(xs), d)} (${f(Math.min(...xs), d)}–${f(Math.max(...xs), d)})` : f(xs[0]!, d));

/** MB/s of copying `bytes` once, in this process, into a buffer already touched (best of 30). */
export function memcpyMBs(bytes: number): number {
  const src = new Uint8Array(bytes).fill(7);
  const dst = new Uint8Array(bytes);
  for (let i = 0; i < 3; i++) dst.set(src);
  let best = Infinity;
  for (let i = 0; i < 30; i++) {
    const t0 = performance.now();
    dst.set(src);
    best = Math.min(best, performance.now() - t0);
  }
  return bytes / 1e6 / (best / 1000);
}

// ---------------------------------------------------------------- large tensors

const SIZES_MB = [4, 64];
const shmKey = (what: string, mb: number) => `/tsi-bench-${process.pid}-${what}-${mb}`;

/** Registers one input and one output region per size and prepares the HTTP, gRPC and shm requests. */
async function largeCases(ctx: BenchContext): Promise<{ mb: number; bytes: number; http: Case; shm: Case }[]> {
  const out = [];
  for (const mb of SIZES_MB) {
    const bytes = mb * 1024 * 1024;
    const n = bytes / 4;
    const http = ctx.prepare(`big${mb}`, 'identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [n], data: new Float32Array(n).fill(0.5) }]);
    // The client's shm_open + ftruncate + memcpy of the input; the output region starts zeroed.
    writeFileSync(`/dev/shm${shmKey('in', mb)}`, Buffer.alloc(bytes, 1));
    writeFileSync(`/dev/shm${shmKey('out', mb)}`, Buffer.alloc(bytes));
    for (const what of ['in', 'out']) {
      const r = await fetch(`http://127.0.0.1:${ctx.http}/v2/systemsharedmemory/region/${what}${mb}/register`, {
        method: 'POST', body: JSON.stringify({ key: shmKey(what, mb), offset: 0, byte_size: bytes }),
      });
      if (!r.ok) throw new Error(`registering ${shmKey(what, mb)}: ${r.status} ${await r.text()}`);
    }
    const body = JSON.stringify({
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [n], parameters: { shared_memory_region: `in${mb}`, shared_memory_byte_size: bytes } }],
      outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: `out${mb}`, shared_memory_byte_size: bytes } }],
    });
    const file = join(ctx.work, `shm${mb}.json`);
    writeFileSync(file, body);
    writeFileSync(`${file}.lua`, wrkScript(file, { 'Content-Type': 'application/json' }));
    out.push({ mb, bytes, http, shm: { model: 'identity_fp32', inputs: [], httpFile: file, headerLength: 0, grpcFile: '', bytes } });
  }
  return out;
}

/**
 * Best-of ms of getting a 64 MB FP32 input from a registered region into the tensor the server runs,
 * through the server's own shm provider (runtime-node/shm.ts, registered here as the server does):
 * the mapped path's view, then with its crossing to the onnxruntime worker as onnx-backend makes it
 * (the view's address posted, the worker viewing the same pages through koffi, as shm-map's viewAt),
 * and with the copy into a fresh buffer that crossing used to be; and the pread fallback, a fresh
 * buffer per read.
 */
async function inputPathMs(key: string, bytes: number): Promise<Record<'view' | 'viewAddress' | 'viewFresh' | 'pread', number>> {
  const best = async (fn: () => Promise<unknown>) => {
    let ms = Infinity;
    for (let i = 0; i < 8; i++) {
      const t0 = performance.now();
      await fn();
      ms = Math.min(ms, performance.now() - t0);
    }
    return ms;
  };
  const worker = new Worker(`
    const { parentPort } = require('node:worker_threads');
    const koffi = require(${JSON.stringify(createRequire(import.meta.url).resolve('koffi'))});
    parentPort.on('message', ({ address, byteLength }) => {
      const t = new Float32Array(koffi.view(koffi.decode(BigUint64Array.of(address), 'void *'), byteLength));
      parentPort.postMessage(t.length);
    });`, { eval: true });
  const crossed = (t: Float32Array) => new Promise((resolve) => {
    worker.once('message', resolve);
    worker.postMessage({ address: mappedAddress(t.buffer)! + BigInt(t.byteOffset), byteLength: t.byteLength });
  });
  const out: Record<string, number> = {};
  for (const io of ['mmap', 'pread'] as const) {
    const region = await nodeShmProvider({ io })!.open(key, 0, bytes, 'bench');
    const tensor = async () => fromBytes('FP32', await region.read(0, bytes)) as Float32Array;
    try {
      if (io === 'pread') out.pread = await best(tensor);
      else {
        out.view = await best(tensor);
        out.viewAddress = await best(async () => crossed(await tensor()));
        out.viewFresh = await best(async () => (await tensor()).slice());
      }
    } finally {
      await region.close();
    }
  }
  await worker.terminate();
  return out as Record<'view' | 'viewAddress' | 'viewFresh' | 'pread', number>;
}

/** Best-of MB/s (in + out) of onnxruntime-node's identity on `bytes` in this process (one thread). */
async function ortIdentityMBs(bytes: number): Promise<number> {
  const s = await ort.InferenceSession.create(identityModel('FP32', { batch: false }), { intraOpNumThreads: 1 });
  const x = new ort.Tensor('float32', new Float32Array(bytes / 4), [bytes / 4]);
  let best = Infinity;
  for (let i = 0; i < 8; i++) {
    const t0 = performance.now();
    await s.run({ INPUT0: x });
    best = Math.min(best, performance.now() - t0);
  }
  await s.release();
  return (2 * bytes) / 1e6 / (best / 1000);
}

interface Stat { count: number; ns: number }
async function modelStats(port: number, model: string): Promise<Record<string, Stat>> {
  const st = (await (await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`)).json()) as { model_stats: { inference_stats: Record<string, Stat> }[] };
  return st.model_stats[0]!.inference_stats;
}

export async function largeTensors(ctx: BenchContext): Promise<string[]> {
  const cases = await largeCases(ctx);
  const rows: Record<string, number[]> = {};
  const add = (k: string, v: number) => (rows[k] ??= []).push(v);
  let shmRps = 0;
  let before: Record<string, Stat> | undefined;
  let after: Record<string, Stat> | undefined;
  const big = cases.find((c) => c.mb === 64)!;
  let input: Awaited<ReturnType<typeof inputPathMs>>;
  try {
    for (let r = 0; r < ctx.rounds; r++) {
      for (const c of cases) {
        add(`http ${c.mb}`, await ctx.wrk(ctx.http, c.http, 1));
        add(`grpc ${c.mb}`, await ctx.h2load(ctx.grpc, c.http, 1));
        const s0 = c.mb === 64 ? await modelStats(ctx.http, 'identity_fp32') : undefined;
        const rps = await ctx.wrk(ctx.http, c.shm, 1);
        add(`shm ${c.mb}`, rps);
        if (s0) {
          before = s0;
          after = await modelStats(ctx.http, 'identity_fp32');
          shmRps = rps;
        }
      }
      process.stderr.write(`large tensors: round ${r + 1}/${ctx.rounds} done\n`);
    }
    input = await inputPathMs(shmKey('in', 64), big.bytes);
  } finally {
    for (const c of cases) {
      for (const what of ['in', 'out']) {
        await fetch(`http://127.0.0.1:${ctx.http}/v2/systemsharedmemory/region/${what}${c.mb}/unregister`, { method: 'POST' }).catch(() => undefined);
        rmSync(`/dev/shm${shmKey(what, c.mb)}`, { force: true });
      }
    }
  }
  const ortMBs = await ortIdentityMBs(big.bytes);
  const lines: string[] = [];
  for (const c of cases) {
    const memcpy = memcpyMBs(c.bytes);
    for (const [k, what] of [['http', 'HTTP binary'], ['grpc', 'gRPC raw contents'], ['shm', 'system shared memory']] as const) {
      const mbs = rows[`${k} ${c.mb}`]!.map((rps) => (rps * 2 * c.bytes) / 1e6);
      const target = k === 'shm' && c.mb === 64 ? '≥ 0.83 (≤ 1.2× memcpy)' : '';
      lines.push(`| ${c.mb} MB FP32 identity, 1 in flight, in + out: ${what} MB/s / memcpy MB/s | ${ranged(mbs, 0)} / ${f(memcpy, 0)} | ${ranged(mbs.map((x) => x / memcpy))} | ${target} |`);
    }
  }
  const memcpy64 = memcpyMBs(big.bytes);
  const copyMs = big.bytes / 1e6 / memcpy64 * 1000;
  const costs: [string, number][] = [
    ['mapped (mmap): a view of the region', input.view],
    ['mapped, + the crossing to the worker (its address; the worker views the same pages)', input.viewAddress],
    ['mapped, + the copy that crossing used to be (a fresh buffer)', input.viewFresh],
    ['pread fallback: a fresh buffer read from the region', input.pread],
  ];
  for (const [what, ms] of costs) {
    const target = what.includes('its address') ? '≤ 1.2' : '';
    lines.push(`| 64 MB shm input, region → the tensor the server runs, ms: ${what} / memcpy | ${f(ms, 2)} / ${f(copyMs, 2)} | ${f(ms / copyMs)}× | ${target} |`);
  }
  lines.push(`| 64 MB, floors under the shm path: onnxruntime-node identity alone (in + out) / memcpy MB/s | ${f(ortMBs, 0)} / ${f(memcpy64, 0)} | ${f(ortMBs / memcpy64)} | |`);
  if (before && after && shmRps > 0) {
    const per = (k: string) => ((after![k]!.ns - before![k]!.ns) / Math.max(1, after![k]!.count - before![k]!.count)) / 1e6;
    const total = 1000 / shmRps;
    const inModel = per('compute_input') + per('compute_infer') + per('compute_output');
    lines.push(`| 64 MB shm request, ms: whole / queue / compute input / infer / output / rest (region read + write, HTTP) | ${f(total, 1)} / ${f(per('queue'), 1)} / ${f(per('compute_input'), 1)} / ${f(per('compute_infer'), 1)} / ${f(per('compute_output'), 1)} / ${f(total - inModel - per('queue'), 1)} | | |`);
  }
  return lines;
}

// ---------------------------------------------------------------- served vs raw on a realistic model

export const CONV_MODEL = 'conv_dense';
const CONV_SIZE = 128;
const CONV_DENSE = 256;

/** Writes the dense-head conv model into `repo` (one instance, no batching, `threads` intra-op threads). */
export function addConvModel(repo: string, threads: number): ConvModel & { path: string } {
  const dir = join(repo, CONV_MODEL);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, '1'), { recursive: true });
  const m = writeConvModel(join(dir, '1'), { size: CONV_SIZE, dense: CONV_DENSE });
  writeFileSync(join(dir, 'config.pbtxt'), `name: "${CONV_MODEL}"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "${CONV_INPUT}" data_type: TYPE_FP32 dims: [ -1, 3, ${CONV_SIZE}, ${CONV_SIZE} ] } ]
output [ { name: "${m.output}" data_type: TYPE_FP32 dims: [ -1, ${m.outputDims.join(', ')} ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "${threads}" } }
`);
  return m;
}

interface Load { requests: number; rps: number; p50Ms: number; p90Ms: number }
const parseLoad = (out: string): Load => JSON.parse(out.trim().split('\n').pop()!) as Load;

export async function servedVsRaw(ctx: BenchContext, model: ConvModel & { path: string }, threads: number): Promise<string[]> {
  const image = convImages(CONV_SIZE, 1);
  const c = ctx.prepare('conv', CONV_MODEL, [{ name: CONV_INPUT, datatype: 'FP32', shape: [1, 3, CONV_SIZE, CONV_SIZE], data: image }]);
  const message = join(ctx.work, 'conv.grpcmsg');
  writeFileSync(message, readFileSync(c.grpcFile).subarray(5));
  const imageFile = join(ctx.work, 'conv.image');
  writeFileSync(imageFile, image);
  const ortEntry = pathToFileURL(createRequire(import.meta.url).resolve('onnxruntime-node')).href;
  const rawFile = join(ctx.work, 'raw.mjs');
  // onnxruntime-node's run() is synchronous on the calling thread, so 8 callers of one session take
  // turns exactly as 1 does: one loop is the raw side at 1 and at 8 clients.
  writeFileSync(rawFile, `import * as ort from ${JSON.stringify(ortEntry)};
import { readFileSync } from 'node:fs';
const [model, threads, seconds] = process.argv.slice(2);
const s = await ort.InferenceSession.create(model, { intraOpNumThreads: Number(threads), graphOptimizationLevel: 'all' });
const b = readFileSync(${JSON.stringify(imageFile)});
const feeds = { ${JSON.stringify(CONV_INPUT)}: new ort.Tensor('float32', new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4), [1, 3, ${CONV_SIZE}, ${CONV_SIZE}]) };
const t = performance.now();
while (performance.now() - t < 1000) await s.run(feeds);
const lat = [];
const t0 = performance.now();
while (performance.now() - t0 < Number(seconds) * 1000) { const t1 = performance.now(); await s.run(feeds); lat.push(performance.now() - t1); }
lat.sort((a, b) => a - b);
console.log(JSON.stringify({ requests: lat.length, rps: lat.length / ((performance.now() - t0) / 1000), p50Ms: lat[lat.length >> 1], p90Ms: lat[Math.floor(lat.length * 0.9)] }));
`);
  const client = (mode: 'fetch' | 'grpc', clients: number) => ctx.run(1, process.execPath, [
    '--import', 'tsx', join(ctx.root, 'bench', 'protocols-client.ts'), '--mode', mode, '--clients', String(clients), '--seconds', String(ctx.seconds),
    ...(mode === 'fetch'
      ? ['--url', `http://127.0.0.1:${ctx.http}/v2/models/${CONV_MODEL}/infer`, '--body', c.httpFile, '--header-length', String(c.headerLength)]
      : ['--target', `127.0.0.1:${ctx.grpc}`, '--body', message]),
  ]).then(parseLoad);
  const raw: Load[] = [];
  const served: Record<string, Load[]> = {};
  const before = await modelStats(ctx.http, CONV_MODEL);
  for (let r = 0; r < ctx.rounds; r++) {
    raw.push(parseLoad(await ctx.run(0, process.execPath, [rawFile, model.path, String(threads), String(ctx.seconds)])));
    for (const mode of ['fetch', 'grpc'] as const) {
      for (const n of [1, 8]) (served[`${mode} ${n}`] ??= []).push(await client(mode, n));
    }
    process.stderr.write(`served vs raw: round ${r + 1}/${ctx.rounds} done\n`);
  }
  const after = await modelStats(ctx.http, CONV_MODEL);
  const per = (k: string) => ((after[k]!.ns - before[k]!.ns) / Math.max(1, after[k]!.count - before[k]!.count)) / 1e6;
  const lines = [`| ${CONV_MODEL}: ${model.describe}; raw onnxruntime-node, ${threads} intra-op thread(s): req/s, p50 ms | ${ranged(raw.map((x) => x.rps), 1)}, ${ranged(raw.map((x) => x.p50Ms), 1)} | | |`];
  for (const [mode, what] of [['fetch', 'HTTP binary, fetch default headers'], ['grpc', 'gRPC (grpc-js)']] as const) {
    const one = served[`${mode} 1`]!;
    const eight = served[`${mode} 8`]!;
    lines.push(`| ${CONV_MODEL}, ${what}, 1 client: served p50 / raw p50 ms | ${ranged(one.map((x) => x.p50Ms), 1)} / ${ranged(raw.map((x) => x.p50Ms), 1)} | ${ranged(one.map((x, i) => x.p50Ms / raw[i]!.p50Ms))} | ≤ 1.25 |`);
    lines.push(`| ${CONV_MODEL}, ${what}, 8 clients: served / raw req/s | ${ranged(eight.map((x) => x.rps), 1)} / ${ranged(raw.map((x) => x.rps), 1)} | ${ranged(eight.map((x, i) => x.rps / raw[i]!.rps))} | ≥ 0.9 |`);
  }
  // Where a served request's time went inside tsi, over every served run above: the model's own time
  // against the raw loop's says how much of the gap is onnxruntime running slower beside the server
  // (threads and cores shared with it and the client) and how much is the server's own work.
  lines.push(`| ${CONV_MODEL} inside tsi, mean ms a request over all served runs: in server / queue / onnxruntime (compute_infer) / compute input + output | ${f(per('success'), 1)} / ${f(per('queue'), 1)} / ${f(per('compute_infer'), 1)} / ${f(per('compute_input') + per('compute_output'), 1)} | | |`);
  return lines;
}

// ---------------------------------------------------------------- fetch vs a minimal node:http server

/** A node:http server answering every POST, once its body is read, with tsi's own answer to `c`. */
async function minimalServer(ctx: BenchContext, c: Case): Promise<{ port: number; stop: () => void }> {
  const res = await fetch(`http://127.0.0.1:${ctx.http}/v2/models/${c.model}/infer`, {
    method: 'POST', body: readFileSync(c.httpFile),
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(c.headerLength) },
  });
  const answer = join(ctx.work, 'answer.bin');
  writeFileSync(answer, new Uint8Array(await res.arrayBuffer()));
  const headerLength = res.headers.get('inference-header-content-length');
  const file = join(ctx.work, 'minimal-server.mjs');
  writeFileSync(file, `import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
const body = readFileSync(${JSON.stringify(answer)});
const headers = { 'Content-Type': ${JSON.stringify(res.headers.get('content-type'))}, 'Content-Length': body.byteLength${headerLength ? `, 'Inference-Header-Content-Length': ${JSON.stringify(headerLength)}` : ''} };
const s = createServer((req, res) => { req.on('data', () => {}); req.on('end', () => { res.writeHead(200, headers); res.end(body); }); });
s.listen(0, '127.0.0.1', () => process.stdout.write('PORT ' + s.address().port + '\\n'));
`);
  const [cmd, argv] = ctx.pin ? ['taskset', ['-c', '0', process.execPath, file]] : [process.execPath, [file]];
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`the minimal node:http server exited with code ${code}`)));
  });
  return { port, stop: () => child.kill() };
}

export async function fetchVsNodeHttp(ctx: BenchContext, c: Case): Promise<string[]> {
  const minimal = await minimalServer(ctx, c);
  const loop = (port: number) => ctx.run(1, process.execPath, [
    '--import', 'tsx', join(ctx.root, 'bench', 'protocols-client.ts'), '--mode', 'fetch', '--clients', '1', '--seconds', String(ctx.seconds),
    '--url', `http://127.0.0.1:${port}/v2/models/${c.model}/infer`, '--body', c.httpFile, '--header-length', String(c.headerLength),
  ]).then(parseLoad);
  const tsi: Load[] = [];
  const bare: Load[] = [];
  try {
    for (let r = 0; r < ctx.rounds; r++) {
      tsi.push(await loop(ctx.http));
      bare.push(await loop(minimal.port));
    }
  } finally {
    minimal.stop();
  }
  return [
    `| ${c.model}, Node fetch (default headers), 1 client: tsi p50 / minimal node:http p50 ms | ${ranged(tsi.map((x) => x.p50Ms), 3)} / ${ranged(bare.map((x) => x.p50Ms), 3)} | ${ranged(tsi.map((x, i) => x.p50Ms / bare[i]!.p50Ms))} | ≤ 1.3 |`,
    `| ${c.model}, Node fetch (default headers), 1 client: minimal node:http / tsi req/s | ${ranged(bare.map((x) => x.rps), 0)} / ${ranged(tsi.map((x) => x.rps), 0)} | ${ranged(bare.map((x, i) => x.rps / tsi[i]!.rps))} | ≤ 1.3 |`,
  ];
}

// ---------------------------------------------------------------- a page's fetch

/** The page's side of pageFetch: p50 ms of each loop, half of `seconds` each. */
const PAGE_LOOP = `async ({ model, body, seconds }) => {
  const p50 = async (once) => {
    for (let i = 0; i < 100; i++) await once();
    const lat = [];
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 500) {
      const t = performance.now();
      await once();
      lat.push(performance.now() - t);
    }
    return lat.sort((a, b) => a - b)[lat.length >> 1];
  };
  const infer = async () => {
    const res = await fetch('/v2/models/' + model + '/infer', { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
    if (!res.ok) throw new Error(res.status + ' ' + await res.text());
    return res.json();
  };
  const live = () => fetch('/v2/health/live').then((res) => res.arrayBuffer());
  return { infer: await p50(infer), live: await p50(live) };
}`;

/**
 * The demo page's server column against a bare fetch round trip, in headless Chromium: the page (on
 * the tsi server's origin) times `simple` inferred with a JSON request as the demo sends it, and
 * GET /v2/health/live on the same server, which does no work: what is left is what inference adds to
 * a browser's round trip. Median of each round's p50s.
 */
export async function pageFetch(ctx: BenchContext, c: Case): Promise<string[]> {
  if (!existsSync(CHROMIUM)) return [`| page fetch: not measured (no Chromium at ${CHROMIUM}) | | | |`];
  const body = JSON.stringify({
    inputs: c.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape, data: Array.from(i.data as ArrayLike<number>) })),
  });
  const browser = await launchChromium();
  const infer: number[] = [];
  const bare: number[] = [];
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${ctx.http}/v2/health/live`);
    for (let r = 0; r < ctx.rounds; r++) {
      // A string, not a function: tsx would wrap a function's closures in helpers the page lacks.
      const got = await page.evaluate(`(${PAGE_LOOP})(${JSON.stringify({ model: c.model, body, seconds: ctx.seconds })})`) as { infer: number; live: number };
      infer.push(got.infer);
      bare.push(got.live);
    }
  } finally {
    await browser.close();
  }
  return [
    `| ${c.model} from a page (headless Chromium), the demo's JSON request: infer p50 / a bare fetch round trip p50 (GET /v2/health/live, same server) ms | ${ranged(infer, 3)} / ${ranged(bare, 3)} | ${ranged(infer.map((x, i) => x / bare[i]!))} | ≤ 1.5 |`,
  ];
}

