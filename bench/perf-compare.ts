/**
 * Is `tsi-node perf` telling the truth? This bench measures the same server, model, request bytes and
 * concurrency with `tsi-node perf` and with independent load generators — wrk (C, µs latencies) and
 * autocannon over HTTP/1.1, h2load (nghttp2, C++) over gRPC's HTTP/2 — and prints their throughput and
 * latency side by side (autocannon's histogram has 1 ms resolution, so its sub-ms latencies are coarse),
 * plus how many requests the server's statistics extension counted during each run, so a tool that
 * miscounts shows up against the server's own numbers.
 *
 *   npm run bench:perf-compare -- [--model simple] [--concurrency 1,2,4,8] [--seconds 8] [--no-pin]
 *
 * Needs `npm run build` (it runs bin/tsi-node.js), and wrk and h2load (`apt-get install wrk nghttp2-client`);
 * a missing one is left out.
 * With two or more cores the server is pinned to core 0 and every load generator to core 1 (taskset),
 * so no tool steals the server's CPU; the server's ORT worker threads inherit its pinning.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import { encodeInferRequest } from '../client/http.js';
import { defaultProtoDir } from '../client/grpc.js';
import { buildInferRequest } from '../client/grpc-codec.js';
import { normalizeInput } from '../client/tensor.js';
import { percentileOf } from '../runtime-node/perf/measure.js';
import { wrkMs, wrkScript } from './load.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
};
const MODEL = arg('model', 'simple');
const CONCURRENCY = arg('concurrency', '1,2,4,8').split(',').map(Number);
const SECONDS = Number(arg('seconds', '8'));
const PIN = !process.argv.includes('--no-pin') && availableParallelism() >= 2 && spawnSync('taskset', ['-V']).status === 0;
const HTTP_PORT = 18_700;
const GRPC_PORT = 18_701;
const ROOT = new URL('..', import.meta.url).pathname;
const BIN = join(ROOT, 'bin', 'tsi-node.js');
const dir = mkdtempSync(join(tmpdir(), 'tsi-perf-compare-'));

const pinned = (core: number, cmd: string, args: string[]) => (PIN ? ['taskset', ['-c', String(core), cmd, ...args]] as const : [cmd, args] as const);

function run(core: number, cmd: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [c, a] = pinned(core, cmd, args);
  return new Promise((resolve) => {
    const child = spawn(c, a, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function startServer(): Promise<ChildProcess> {
  const [c, a] = pinned(0, process.execPath, [BIN, 'serve', '--http-port', String(HTTP_PORT), '--grpc-port', String(GRPC_PORT),
    '--http-address', '127.0.0.1', '--grpc-address', '127.0.0.1', '--metrics-port', '18702', '--model-control-mode', 'explicit', '--load-model', MODEL]);
  const child = spawn(c, a, { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 300; i++) {
    const ok = await fetch(`http://127.0.0.1:${HTTP_PORT}/v2/health/ready`).then((r) => r.ok, () => false);
    if (ok) return child;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the server did not become ready');
}

async function serverSuccessCount(): Promise<number> {
  const s = (await (await fetch(`http://127.0.0.1:${HTTP_PORT}/v2/models/${MODEL}/stats`)).json()) as any;
  return Number(s.model_stats[0].inference_stats.success.count);
}

/** The request every tool sends: zero-filled inputs, as `tsi-node perf --input-data zero` builds them. */
async function zeroInputs() {
  const meta = (await (await fetch(`http://127.0.0.1:${HTTP_PORT}/v2/models/${MODEL}`)).json()) as any;
  const cfg = (await (await fetch(`http://127.0.0.1:${HTTP_PORT}/v2/models/${MODEL}/config`)).json()) as any;
  const batching = (cfg.max_batch_size ?? 0) > 0;
  return meta.inputs.map((i: any) => {
    const shape = batching ? [1, ...i.shape.slice(1)] : i.shape;
    const n = shape.reduce((x: number, y: number) => x * y, 1);
    const data = i.datatype === 'BYTES' ? Array.from({ length: n }, () => '0') : new (i.datatype === 'FP32' ? Float32Array : Int32Array)(n);
    return { name: i.name, datatype: i.datatype, shape, data };
  });
}

interface Row {
  protocol: string;
  concurrency: number;
  tool: string;
  throughput: number;
  avgMs: number;
  p50Ms: number;
  p99Ms: number;
  /** Completed requests per second as the server's statistics counted them during the run. */
  serverRate: number;
  /** tsi-node perf only: its own CPU use, % of one core. */
  clientCpu?: number;
}

async function viaPerf(protocol: 'http' | 'grpc', c: number): Promise<Row> {
  const csv = join(dir, `perf-${protocol}-${c}.csv`);
  const url = protocol === 'http' ? `127.0.0.1:${HTTP_PORT}` : `127.0.0.1:${GRPC_PORT}`;
  const r = await run(1, process.execPath, [BIN, 'perf', '-m', MODEL, '-i', protocol, '-u', url, '--concurrency-range', String(c),
    '-p', String(Math.round((SECONDS * 1000) / 3)), '--input-data', 'zero', '--warmup-request-count', '200', '-f', csv]);
  if (r.code !== 0) throw new Error(`tsi-node perf failed: ${r.stderr}`);
  const [head, row] = readFileSync(csv, 'utf8').trim().split('\n');
  const v = Object.fromEntries(head!.split(',').map((k, i) => [k, Number(row!.split(',')[i])]));
  // The server's own count over perf's reported windows: successes × (throughput / client-counted requests).
  const num = (re: RegExp) => Number(re.exec(r.stdout)?.[1] ?? NaN);
  const serverRate = num(/Successful request count: (\d+)/) * num(/Throughput: ([\d.]+) infer\/sec/) / num(/Request count: (\d+)/);
  return {
    protocol, concurrency: c, tool: 'tsi-node perf', throughput: v['Inferences/Second']!, avgMs: v['Avg latency']! / 1000,
    p50Ms: v['p50 latency']! / 1000, p99Ms: v['p99 latency']! / 1000, serverRate, clientCpu: num(/Client CPU: (\d+)%/),
  };
}

async function viaAutocannon(c: number, body: Uint8Array, headerLength: number): Promise<Row> {
  const file = join(dir, 'http-body.bin');
  writeFileSync(file, body);
  const before = await serverSuccessCount();
  const r = await run(1, process.execPath, [join(ROOT, 'node_modules', 'autocannon', 'autocannon.js'), '-c', String(c), '-d', String(SECONDS), '-m', 'POST',
    '-H', `Inference-Header-Content-Length=${headerLength}`, '-H', 'Content-Type=application/octet-stream', '-i', file, '-j',
    `http://127.0.0.1:${HTTP_PORT}/v2/models/${MODEL}/infer`]);
  const done = await serverSuccessCount() - before;
  const j = JSON.parse(r.stdout);
  if (j.non2xx || j.errors) throw new Error(`autocannon saw ${j.non2xx} non-2xx answers and ${j.errors} errors`);
  return {
    protocol: 'http', concurrency: c, tool: 'autocannon', throughput: j.requests.total / j.duration, avgMs: j.latency.average,
    p50Ms: j.latency.p50, p99Ms: j.latency.p99, serverRate: done / j.duration,
  };
}

async function viaWrk(c: number, body: Uint8Array, headerLength: number): Promise<Row> {
  const file = join(dir, 'http-body.bin');
  const script = join(dir, 'infer.lua');
  writeFileSync(file, body);
  writeFileSync(script, wrkScript(file, { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(headerLength) }));
  const before = await serverSuccessCount();
  const r = await run(1, 'wrk', ['-t', '1', '-c', String(c), '-d', `${SECONDS}s`, '--latency', '-s', script, `http://127.0.0.1:${HTTP_PORT}/v2/models/${MODEL}/infer`]);
  const done = await serverSuccessCount() - before;
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(r.stdout);
  const avg = /Latency\s+(\S+)/.exec(r.stdout);
  const pct = (p: number) => wrkMs(new RegExp(`\\s${p}%\\s+(\\S+)`).exec(r.stdout)![1]!);
  const total = /(\d+) requests in ([\d.]+)s/.exec(r.stdout);
  if (!rps || !avg || !total || /Non-2xx/.test(r.stdout)) throw new Error(`wrk: ${r.stdout}\n${r.stderr}`);
  return {
    protocol: 'http', concurrency: c, tool: 'wrk', throughput: Number(rps[1]), avgMs: wrkMs(avg[1]!), p50Ms: pct(50), p99Ms: pct(99),
    serverRate: done / Number(total[2]),
  };
}

/** gRPC's length-prefixed ModelInferRequest, serialised by the client's own proto definitions. */
function grpcFrame(inputs: any[]): Uint8Array {
  const pkg = protoLoader.loadSync(['grpc_service.proto'], { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [defaultProtoDir()] });
  const svc = pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition;
  const msg = svc.ModelInfer!.requestSerialize(buildInferRequest(MODEL, inputs, {}));
  const frame = new Uint8Array(5 + msg.byteLength);
  new DataView(frame.buffer).setUint32(1, msg.byteLength);
  frame.set(msg, 5);
  return frame;
}

async function viaH2load(c: number, frame: Uint8Array): Promise<Row> {
  const file = join(dir, 'grpc-frame.bin');
  const log = join(dir, `h2load-${c}.log`);
  writeFileSync(file, frame);
  const before = await serverSuccessCount();
  const t0 = performance.now();
  const r = await run(1, 'h2load', ['-c', '1', '-m', String(c), '-D', String(SECONDS), '--warm-up-time', '1', '-d', file, '--log-file', log,
    '-H', 'content-type: application/grpc', '-H', 'te: trailers', `http://127.0.0.1:${GRPC_PORT}/inference.GRPCInferenceService/ModelInfer`]);
  const wall = (performance.now() - t0) / 1000;
  const done = await serverSuccessCount() - before;
  const m = /finished in ([\d.]+)s, ([\d.]+) req\/s/.exec(r.stdout);
  if (!m || !/status codes: \d+ 2xx, 0 3xx, 0 4xx, 0 5xx/.test(r.stdout)) throw new Error(`h2load: ${r.stdout}\n${r.stderr}`);
  // --log-file lines: <start time> <status> <latency µs>.
  const lat = readFileSync(log, 'utf8').trim().split('\n').map((l) => Number(l.split('\t')[2]) / 1000).sort((x, y) => x - y);
  return {
    protocol: 'grpc', concurrency: c, tool: 'h2load', throughput: Number(m[2]), avgMs: lat.reduce((s, x) => s + x, 0) / lat.length,
    p50Ms: percentileOf(lat, 50), p99Ms: percentileOf(lat, 99), serverRate: done / wall,
  };
}

const server = await startServer();
try {
  const wire = (await zeroInputs()).map((i: any) => normalizeInput(i));
  const { body, headerLength } = encodeInferRequest(wire, {});
  const frame = grpcFrame(await zeroInputs());
  const hasH2load = spawnSync('h2load', ['--version']).status === 0;
  const hasWrk = spawnSync('wrk', ['--version']).error === undefined;
  const rows: Row[] = [];
  const load = loadavg()[0]!.toFixed(2);
  for (const c of CONCURRENCY) {
    rows.push(await viaPerf('http', c));
    if (hasWrk) rows.push(await viaWrk(c, body, headerLength!));
    rows.push(await viaAutocannon(c, body, headerLength!));
    rows.push(await viaPerf('grpc', c));
    if (hasH2load) rows.push(await viaH2load(c, frame));
    process.stderr.write(`concurrency ${c} done\n`);
  }
  const f = (x: number, d = 2) => x.toFixed(d);
  const lines = [
    `model ${MODEL}, ${availableParallelism()} cores, ${PIN ? 'server pinned to core 0, load generators to core 1' : 'no pinning'}; load average ${load} before, ${loadavg()[0]!.toFixed(2)} after`,
    '',
    '| protocol | concurrency | tool | infer/sec | avg ms | p50 ms | p99 ms | server-counted req/sec | perf CPU |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.protocol} | ${r.concurrency} | ${r.tool} | ${f(r.throughput, 1)} | ${f(r.avgMs, 3)} | ${f(r.p50Ms, 3)} | ${f(r.p99Ms, 3)} | ${f(r.serverRate, 1)} | ${r.clientCpu === undefined ? '' : `${r.clientCpu}%`} |`),
  ];
  process.stdout.write(lines.join('\n') + '\n');
} finally {
  server.kill('SIGTERM');
}
