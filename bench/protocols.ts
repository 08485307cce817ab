/**
 * Is every client path fast (issue #20)? One tsi server (a child process, from the build) serves
 * `simple` and a generated FP32 identity model over HTTP/1.1 and gRPC; independent C load generators
 * — wrk on HTTP, h2load on gRPC — and `tsi-node perf` measure it in interleaved rounds, and the bench
 * prints each ratio the issue sets a target for, from numbers taken in this run:
 *   - gRPC req/s ÷ HTTP req/s on `simple` at 8 and 64 in flight, and on a 4 MB FP32 tensor (target ≥ 1.0, ≥ 1.2);
 *   - `tsi-node perf` ÷ wrk and ÷ h2load on `simple` at concurrency 8 (target 0.8–1.2);
 *   - encoding a 265,000-element FP32 JSON output ÷ JSON.stringify of the same numbers (target ≤ 1.2),
 *     and decoding one from a JSON request ÷ JSON.parse of its text (and 265,000 INT64 past 2^53, read exactly);
 * and, from bench/protocols-served.ts, on the same server:
 *   - large: a 4 MB and a 64 MB FP32 identity over HTTP binary, gRPC raw contents and system shared
 *     memory in MB/s against a memcpy (target for 64 MB over shared memory: ≤ 1.2× memcpy); keep
 *     --seconds ≥ 4: a 64 MB request can take over 2 s on a loaded host, and a window with none shows 0;
 *   - conv: served/raw on an 11.3 M-parameter conv model with a 1 MiB output, HTTP (fetch's default
 *     headers) and gRPC, client in its own process, vs onnxruntime-node with the same threads
 *     (targets ≥ 0.9 at 8 clients, ≤ 1.25× raw latency at 1 client);
 *   - fetch: Node fetch with its default headers against tsi vs against a minimal node:http server (≤ 1.3×);
 *   - page: from a page in headless Chromium, the demo's JSON inference vs a bare fetch round trip (≤ 1.5×).
 *
 *   npm run build && npm run bench:protocols -- [--seconds 4] [--rounds 2] [--dist dist]
 *     [--parts simple,large,conv,fetch,page] [--conv-threads 1]
 *
 * Needs wrk and h2load (`apt-get install wrk nghttp2-client`). With two or more cores the server is
 * pinned to core 0 and every load generator to core 1 (taskset), as bench/perf-compare.ts does.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import * as protoLoader from '@grpc/proto-loader';
import { encodeInferRequest } from '../client/http.js';
import { defaultProtoDir } from '../client/grpc.js';
import { buildInferRequest } from '../client/grpc-codec.js';
import { normalizeInput } from '../client/tensor.js';
import { decodeInferRequest, encodeInferResponse } from '../core/protocol/v2-codec.js';
import type { InferInputSpec } from '../client/types.js';
import { DEFAULT_MODELS, identityModel } from '../scripts/gen-models.js';
import { wrkScript } from './load.js';
import { addConvModel, fetchVsNodeHttp, largeTensors, pageFetch, servedVsRaw, type BenchContext, type Case } from './protocols-served.js';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '4' }, rounds: { type: 'string', default: '2' }, dist: { type: 'string', default: 'dist' },
    parts: { type: 'string', default: 'simple,large,conv,fetch,page' }, 'conv-threads': { type: 'string', default: '1' },
  },
});
const PARTS = new Set(args.parts!.split(',').map((p) => p.trim()));
for (const p of PARTS) if (!['simple', 'large', 'conv', 'fetch', 'page'].includes(p)) throw new Error(`--parts: unknown part '${p}' (simple, large, conv, fetch, page)`);
// The conv model's intra-op threads, raw and served alike: with pinning the server and the raw loop
// share core 0, so one thread is what that core holds.
const CONV_THREADS = Number(args['conv-threads']);
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const ROOT = resolve(new URL('..', import.meta.url).pathname);
const DIST = resolve(ROOT, args.dist!);
const PIN = availableParallelism() >= 2 && spawnSync('taskset', ['-V']).status === 0;
const work = mkdtempSync(join(tmpdir(), 'tsi-protocols-'));
const BIG = (4 * 1024 * 1024) / 4;

for (const tool of ['wrk', 'h2load']) {
  if (spawnSync(tool, ['--version']).error) throw new Error(`${tool} is not installed (apt-get install wrk nghttp2-client)`);
}

function run(core: number, cmd: string, argv: string[]): Promise<string> {
  const [c, a] = PIN ? ['taskset', ['-c', String(core), cmd, ...argv]] : [cmd, argv];
  return new Promise((res, rej) => {
    const child = spawn(c, a, { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('close', (code) => (code === 0 ? res(out) : rej(new Error(`${cmd} exited with ${code}: ${out.slice(-2000)}`))));
  });
}

/** The server: startServer from the build over the bench's repository, client shared memory allowed. */
async function startTsi(repo: string): Promise<{ child: ChildProcess; http: number; grpc: number }> {
  const code = `const { startServer } = await import(${JSON.stringify(join(DIST, 'runtime-node', 'index.js'))});
const r = await startServer({ modelRepositories: [${JSON.stringify(repo)}], httpPort: 0, httpAddress: '127.0.0.1', grpcPort: 0, grpcAddress: '127.0.0.1', allowClientShm: true, maxInputSize: 2 ** 28, logVerbose: 0 });
process.stdout.write('PORTS ' + r.http.port + ' ' + r.grpc.port + '\\n');
process.on('SIGTERM', () => r.stop(1000).then(() => process.exit(0)));`;
  // A file, not `-e`: the server's worker threads inherit the process's flags, and --input-type with them.
  const file = join(work, 'server.mjs');
  writeFileSync(file, code);
  const argv = [file];
  const [c, a] = PIN ? ['taskset', ['-c', '0', process.execPath, ...argv]] : [process.execPath, argv];
  const child = spawn(c, a, { stdio: ['ignore', 'pipe', 'inherit'], cwd: ROOT });
  return new Promise((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      const m = /PORTS (\d+) (\d+)/.exec(out);
      if (m) res({ child, http: Number(m[1]), grpc: Number(m[2]) });
    });
    child.once('exit', (code) => rej(new Error(`the server exited with code ${code}`)));
  });
}

function prepare(name: string, model: string, inputs: InferInputSpec[]): Case {
  const { body, headerLength } = encodeInferRequest(inputs.map(normalizeInput), { binaryOutputs: true });
  const httpFile = join(work, `${name}.http`);
  writeFileSync(httpFile, body);
  writeFileSync(`${httpFile}.lua`, wrkScript(httpFile, { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(headerLength) }));
  const pkg = protoLoader.loadSync(['grpc_service.proto'], { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [defaultProtoDir()] });
  const msg = (pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition).ModelInfer!.requestSerialize(buildInferRequest(model, inputs, {}));
  const frame = Buffer.alloc(5 + msg.byteLength);
  frame.writeUInt32BE(msg.byteLength, 1);
  msg.copy(frame, 5);
  const grpcFile = join(work, `${name}.grpc`);
  writeFileSync(grpcFile, frame);
  const bytes = inputs.reduce((n, i) => n + (i.data as Float32Array).byteLength, 0);
  return { model, inputs, httpFile, headerLength: headerLength!, grpcFile, bytes };
}

async function wrk(port: number, c: Case, conns: number): Promise<number> {
  const out = await run(1, 'wrk', ['-t', '1', '-c', String(conns), '-d', `${SECONDS}s`, '--timeout', '60s', '-s', `${c.httpFile}.lua`, `http://127.0.0.1:${port}/v2/models/${c.model}/infer`]);
  if (/Non-2xx/.test(out)) {
    const res = await fetch(`http://127.0.0.1:${port}/v2/models/${c.model}/infer`, { method: "POST", body: readFileSync(c.httpFile), headers: { "Inference-Header-Content-Length": String(c.headerLength) } });
    throw new Error(`wrk saw failed answers (${res.status} ${(await res.text()).slice(0, 300)}): ${out}`);
  }
  return Number(/Requests\/sec:\s+([\d.]+)/.exec(out)![1]);
}

// h2load's windows (-w/-W 30: 1 GiB a stream and a connection) and frames (16 KiB) are spelled out:
// they stand in for a gRPC C++ client (tritonclient, perf_analyzer), which starts at 64 KiB but grows
// its windows from measured bandwidth-delay (BDP probing) and keeps gRPC core's 16 KiB frames.
async function h2load(port: number, c: Case, streams: number): Promise<number> {
  const out = await run(1, 'h2load', ['-c', '1', '-m', String(streams), '-D', String(SECONDS), '--warm-up-time', '1', '-w', '30', '-W', '30', '-f', '16K', '-d', c.grpcFile,
    '-H', 'content-type: application/grpc', '-H', 'te: trailers', `http://127.0.0.1:${port}/inference.GRPCInferenceService/ModelInfer`]);
  if (!/status codes: \d+ 2xx, 0 3xx, 0 4xx, 0 5xx/.test(out)) throw new Error(`h2load saw failed answers: ${out}`);
  return Number(/finished in [\d.]+s, ([\d.]+) req\/s/.exec(out)![1]);
}

async function perf(protocol: 'http' | 'grpc', port: number, model: string, concurrency: number): Promise<number> {
  const code = `const { perfCommand } = await import(${JSON.stringify(join(DIST, 'runtime-node', 'perf', 'cli.js'))});
await perfCommand().parseAsync(process.argv.slice(2), { from: 'user' });`;
  const file = join(work, 'perf.mjs');
  writeFileSync(file, code);
  const out = await run(1, process.execPath, [file, '-m', model, '-i', protocol, '-u', `127.0.0.1:${port}`,
    '--concurrency-range', String(concurrency), '-p', String(Math.round((SECONDS * 1000) / 3)), '--input-data', 'zero', '--warmup-request-count', '200']);
  return Number(/Throughput: ([\d.]+) infer\/sec/.exec(out)![1]);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f = (x: number, d = 2) => x.toFixed(d);

/**
 * A 265,000-element FP32 tensor as JSON both ways, against the plain JSON work on the same numbers:
 * encoding an answer vs JSON.stringify of them, decoding a request vs JSON.parse of its text. Best of
 * interleaved repetitions (the least disturbed by other work on the host).
 */
function jsonRatio(): { codecMs: number; stringifyMs: number; decodeMs: number; parseMs: number; wideMs: number; wideParseMs: number } {
  const data = new Float32Array(265_000);
  for (let i = 0; i < data.length; i++) data[i] = Math.sin(i) * 100;
  const numbers = Array.from(data);
  const resp = { model_name: 'm', model_version: '1', outputs: [{ name: 'OUT', datatype: 'FP32' as const, shape: [1, 265_000], data }] };
  const request = new TextEncoder().encode(JSON.stringify({ inputs: [{ name: 'IN', datatype: 'FP32', shape: [1, 265_000], data: numbers }] }));
  const config = () => ({ name: 'm' });
  // INT64 values past 2^53: read a second time, exactly (core/protocol/json-exact.ts).
  const wideText = `{"inputs":[{"name":"IN","datatype":"INT64","shape":[265000],"data":[${Array.from({ length: 265_000 }, (_, i) => 2n ** 60n + BigInt(i)).join(',')}]}]}`;
  const wide = new TextEncoder().encode(wideText);
  let wideMs = Infinity;
  let wideParseMs = Infinity;
  let codecMs = Infinity;
  let stringifyMs = Infinity;
  let decodeMs = Infinity;
  let parseMs = Infinity;
  for (let r = 0; r < 15; r++) {
    let t = performance.now();
    encodeInferResponse(resp, { binaryDefault: false, binary: new Map() });
    codecMs = Math.min(codecMs, performance.now() - t);
    t = performance.now();
    JSON.stringify(numbers);
    stringifyMs = Math.min(stringifyMs, performance.now() - t);
    t = performance.now();
    decodeInferRequest(request, undefined, 'm', undefined, config);
    decodeMs = Math.min(decodeMs, performance.now() - t);
    t = performance.now();
    JSON.parse(new TextDecoder().decode(request));
    parseMs = Math.min(parseMs, performance.now() - t);
    if (r % 3 !== 0) continue;
    t = performance.now();
    decodeInferRequest(wide, undefined, 'm', undefined, config);
    wideMs = Math.min(wideMs, performance.now() - t);
    t = performance.now();
    JSON.parse(new TextDecoder().decode(wide));
    wideParseMs = Math.min(wideParseMs, performance.now() - t);
  }
  return { codecMs, stringifyMs, decodeMs, parseMs, wideMs, wideParseMs };
}

const repo = join(work, 'models');
mkdirSync(join(repo, 'identity_fp32', '1'), { recursive: true });
writeFileSync(join(repo, 'identity_fp32', 'config.pbtxt'),
  'name: "identity_fp32"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n');
writeFileSync(join(repo, 'identity_fp32', '1', 'model.onnx'), identityModel('FP32', { batch: false }));
// `simple` from its generator, not models/ (whose .onnx files a concurrent build may be rewriting).
mkdirSync(join(repo, 'simple', '1'), { recursive: true });
writeFileSync(join(repo, 'simple', 'config.pbtxt'), readFileSync(join(ROOT, 'models', 'simple', 'config.pbtxt')));
writeFileSync(join(repo, 'simple', '1', 'model.onnx'), DEFAULT_MODELS.simple!());

const simple = prepare('simple', 'simple', [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16) },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16) },
]);
const conv = PARTS.has('conv') ? addConvModel(repo, CONV_THREADS) : undefined;
const big = prepare('big', 'identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [BIG], data: new Float32Array(BIG).fill(0.5) }]);

const server = await startTsi(repo);
const rows: Record<string, number[]> = {};
const add = (k: string, v: number) => (rows[k] ??= []).push(v);

/** CPU seconds the server's main thread and the whole process have used so far (Linux /proc; 0 elsewhere). */
function serverCpu(): { main: number; all: number } {
  const ticks = (file: string) => {
    try {
      const f = readFileSync(file, 'utf8').split(') ')[1]!.split(' ');
      return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in USER_HZ (100 on Linux)
    } catch { return 0; }
  };
  return { main: ticks(`/proc/${server.child.pid}/task/${server.child.pid}/stat`), all: ticks(`/proc/${server.child.pid}/stat`) };
}
/** Runs one load and records its req/s and the server's CPU µs per request (main thread, whole process). */
async function measured(key: string, load: () => Promise<number>): Promise<void> {
  const c0 = serverCpu();
  const t0 = performance.now();
  const rps = await load();
  const secs = (performance.now() - t0) / 1000;
  const c1 = serverCpu();
  add(key, rps);
  // The load tools' own windows are a little shorter than ours (start-up, h2load's warm-up), so per
  // request CPU is taken over our window with their rate: a slight over-estimate, the same for both.
  const requests = rps * secs;
  add(`${key} main us`, ((c1.main - c0.main) / requests) * 1e6);
  add(`${key} all us`, ((c1.all - c0.all) / requests) * 1e6);
}
const extra: string[] = [];
try {
  for (let r = 0; PARTS.has('simple') && r < ROUNDS; r++) {
    for (const n of [8, 64]) {
      await measured(`simple http ${n}`, () => wrk(server.http, simple, n));
      await measured(`simple grpc ${n}`, () => h2load(server.grpc, simple, n));
    }
    add('perf http 8', await perf('http', server.http, 'simple', 8));
    add('perf grpc 8', await perf('grpc', server.grpc, 'simple', 8));
    add('big http 4', await wrk(server.http, big, 4));
    add('big grpc 4', await h2load(server.grpc, big, 4));
    process.stderr.write(`round ${r + 1}/${ROUNDS} done\n`);
  }
  const ctx: BenchContext = {
    root: ROOT, work, seconds: SECONDS, rounds: ROUNDS, pin: PIN, http: server.http, grpc: server.grpc, run, prepare, wrk, h2load,
  };
  if (PARTS.has('large')) extra.push(...await largeTensors(ctx));
  if (conv) extra.push(...await servedVsRaw(ctx, conv, CONV_THREADS));
  if (PARTS.has('fetch')) extra.push(...await fetchVsNodeHttp(ctx, simple));
  if (PARTS.has('page')) extra.push(...await pageFetch(ctx, simple));
} finally {
  server.child.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}

const m = (k: string) => median(rows[k]!);
const json = jsonRatio();
const simpleRows = !PARTS.has('simple') ? [] : [
  ...[8, 64].map((n) => `| simple, ${n} in flight: gRPC (h2load) / HTTP (wrk) req/s | ${f(m(`simple grpc ${n}`), 0)} / ${f(m(`simple http ${n}`), 0)} | ${f(m(`simple grpc ${n}`) / m(`simple http ${n}`))} | ≥ 1.0 |`),
  ...[8, 64].map((n) => `| simple, ${n} in flight: server CPU µs a request, main thread / whole process, gRPC vs HTTP | ${f(m(`simple grpc ${n} main us`), 0)} / ${f(m(`simple grpc ${n} all us`), 0)} vs ${f(m(`simple http ${n} main us`), 0)} / ${f(m(`simple http ${n} all us`), 0)} | ${f(m(`simple http ${n} all us`) / m(`simple grpc ${n} all us`))} | |`),
  `| 4 MB FP32 identity, 4 in flight: gRPC / HTTP req/s | ${f(m('big grpc 4'), 1)} / ${f(m('big http 4'), 1)} | ${f(m('big grpc 4') / m('big http 4'))} | ≥ 1.2 |`,
  `| tsi-node perf / wrk, simple, concurrency 8 (HTTP) | ${f(m('perf http 8'), 0)} / ${f(m('simple http 8'), 0)} | ${f(m('perf http 8') / m('simple http 8'))} | 0.8–1.2 |`,
  `| tsi-node perf / h2load, simple, concurrency 8 (gRPC) | ${f(m('perf grpc 8'), 0)} / ${f(m('simple grpc 8'), 0)} | ${f(m('perf grpc 8') / m('simple grpc 8'))} | 0.8–1.2 |`,
];
const lines = [
  `${availableParallelism()} cores, ${PIN ? 'server on core 0, load generators on core 1' : 'no pinning'}; median of ${ROUNDS} interleaved rounds of ${SECONDS} s (range in brackets)`,
  '',
  '| measure | value | ratio | target |',
  '|---|---:|---:|---:|',
  ...simpleRows,
  `| 265,000 FP32 as a JSON answer / JSON.stringify of the numbers, ms | ${f(json.codecMs)} / ${f(json.stringifyMs)} | ${f(json.codecMs / json.stringifyMs)} | ≤ 1.2 |`,
  `| 265,000 FP32 from a JSON request / JSON.parse of its text, ms | ${f(json.decodeMs)} / ${f(json.parseMs)} | ${f(json.decodeMs / json.parseMs)} | |`,
  `| 265,000 INT64 past 2^53 from a JSON request (exact) / JSON.parse of its text, ms | ${f(json.wideMs)} / ${f(json.wideParseMs)} | ${f(json.wideMs / json.wideParseMs)} | |`,
  ...extra,
];
process.stdout.write(`${lines.join('\n')}\n`);
