/**
 * The GPU benchmark (issue 12, part 7): a convolutional image model (bench/conv-model.ts, ResNet-18
 * shaped, 11.7 M parameters at width 64) on every onnxruntime-node execution provider here — CPU
 * always, WebGPU when a session can be created — measured side by side in one run:
 *   raw    — onnxruntime-node in this process on that provider: batch 1 back to back, batch 32, and a
 *            replay of exactly the batch sizes tsi formed in the same round (the ceiling for tsi);
 *   served — tsi (compiled from dist/ when built: bench/servers.ts) serving the same file on the same
 *            provider (KIND_CPU / KIND_GPU), with dynamic batching, to closed-loop clients sending one
 *            image each as a binary v2 request, at 1 and 64 clients.
 * The target is served/raw ≥ 0.90 at 64 clients. Rounds interleave providers and sides (batching.ts
 * explains why); ratios are taken per round and shown with their range. Also printed: CPU vs WebGPU
 * (raw images/s at batch 1 and 32), the outputs' agreement across providers, and, at the highest
 * concurrency, where the served time goes (ORT inside tsi vs raw, instance busy time, hand-over),
 * and, where PyTorch with CUDA is installed, torchvision's ResNet-18 eager on the same card
 * (bench/torch-peer.ts) beside the raw WebGPU session.
 *
 * Segments last `--duration` seconds or longer where the device is slow: on a software WebGPU device
 * (Mesa's lavapipe runs shaders on the CPU, ~50× slower than onnxruntime's own CPU kernels here) a
 * batch of 32 takes seconds, so each segment spans a few batches, the client is bench/load.ts instead
 * of wrk (wrk drops answers slower than its 2-s timeout) and the served rate is taken by Little's law.
 *
 * Run:  npm run bench:gpu          (or: npx tsx bench/gpu.ts)
 * Flags: --size <px> (224 on a hardware GPU adapter, else 64)  --width <ch> (64 there, else 32)
 *        --duration <s> (3)  --rounds <n> (3)  --concurrency 1,64  --eps cpu,webgpu  --server dist|tsx  --client wrk|node
 *        --threads <n> (intra-op threads, raw and served alike; default: all cores)  --json <file>
 *        --eps cpu,webgpu,cuda: cuda needs the process started with the CUDA provider's core and libraries
 *        (TSI_ORT_DIR, LD_LIBRARY_PATH: bench/gpu-kit.sh run-cuda sets them)
 *        --onnx <file> --arch resnet50: a model exported by PyTorch instead of ours (input 'image', output
 *        'logits', batch dimension dynamic: `python3 bench/torch_peer.py export --arch resnet50`), and the
 *        PyTorch peer of that architecture
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type * as Ort from 'onnxruntime-node';
import { loadOrt } from '../runtime-node/gpu/ort.js';
import { compareOutputs, CONV_INPUT, CONV_OUTPUT, convImages, outputStats, writeConvModel, type Diff } from './conv-model.js';
import { buildRequest, hasWrk, mergeLoads, runLoad, runWrk, wrkScript, type LoadResult } from './load.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';
import { torchConv, torchLabel, torchMissing } from './torch-peer.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** onnxruntime-node as tsi loads it: the CUDA-matched core when TSI_ORT_DIR names one (bench/gpu-kit.sh run-cuda). */
const ort = loadOrt();
const MAX_BATCH = 32;
const t0 = performance.now();
const log = (s: string) => process.stderr.write(`${s}\n`);

const { values: args } = parseArgs({
  options: {
    size: { type: 'string' },
    width: { type: 'string' },
    duration: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '1,64' },
    eps: { type: 'string', default: 'cpu,webgpu' },
    onnx: { type: 'string' },
    arch: { type: 'string', default: 'resnet18' },
    server: { type: 'string' },
    client: { type: 'string' },
    threads: { type: 'string' },
    json: { type: 'string' },
  },
});
const durationMs = Number(args.duration) * 1000;
const rounds = Math.max(1, Number(args.rounds));
const levels = args.concurrency!.split(',').map(Number);
const threads = Number(args.threads ?? availableParallelism());
const work = mkdtempSync(join(tmpdir(), 'tsi-gpu-bench-'));
// Mesa prints an error on every start without it; set before anything loads Vulkan.
if (!process.env.XDG_RUNTIME_DIR) {
  process.env.XDG_RUNTIME_DIR = join(work, 'xdg');
  mkdirSync(process.env.XDG_RUNTIME_DIR, { mode: 0o700 });
}

// ---- the machine, and whether its WebGPU adapter is hardware (which decides the default size) ----
interface Adapter { vendor: string; architecture: string; description: string; fallback: boolean }

/** Dawn's high-performance adapter as the optional `webgpu` package names it, probed in a child process (Dawn's warnings and Vulkan instance stay out of this one). */
function probeAdapter(): { adapter?: Adapter; reason?: string } {
  const code = `let m; try { m = await import('webgpu'); } catch { console.log(JSON.stringify({ reason: 'the optional webgpu package is not installed' })); process.exit(0); }
Object.assign(globalThis, m.globals);
const a = await m.create([]).requestAdapter({ powerPreference: 'high-performance' }).catch(() => null);
const i = a?.info;
console.log(JSON.stringify(i ? { adapter: { vendor: i.vendor, architecture: i.architecture, description: i.description, fallback: i.isFallbackAdapter === true || a.isFallbackAdapter === true || i.architecture === 'software' } } : { reason: 'Dawn offers no adapter' }));
process.exit(0);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  const line = (r.stdout ?? '').split('\n').find((l) => l.startsWith('{'));
  return line ? JSON.parse(line) : { reason: `the adapter probe failed (${r.error?.message ?? `exit ${r.status}`})` };
}

function nvidiaGpus(): string[] {
  try {
    return readdirSync('/proc/driver/nvidia/gpus').map((d) =>
      /Model:\s*(.+)/.exec(readFileSync(join('/proc/driver/nvidia/gpus', d, 'information'), 'utf8'))?.[1]?.trim() ?? d);
  } catch {
    return [];
  }
}

const probe = probeAdapter();
const nvidia = nvidiaGpus();
const hardwareGpu = probe.adapter ? !probe.adapter.fallback : nvidia.length > 0;
const size = Number(args.size ?? (hardwareGpu ? 224 : 64));
const sizeWhy = args.size ? 'from --size' : hardwareGpu ? 'default on a hardware GPU' : 'default without a hardware GPU adapter (224 with one, or --size 224)';
// Without a hardware GPU the WebGPU side runs on lavapipe, whose time follows the channels rather than
// the pixels (64×64 is no faster than 32×32 there): half the width runs ~3.5× faster, which keeps a
// default run within ~5 minutes on a busy 2-core host. `--width 64` is the 11.7 M-parameter model.
const width = Number(args.width ?? (hardwareGpu ? 64 : 32));
const widthWhy = args.width ? 'from --width' : hardwareGpu ? 'default' : 'default without a hardware GPU (64 with one, or --width 64)';
const adapterText = probe.adapter
  ? `${[probe.adapter.vendor, probe.adapter.architecture, probe.adapter.description].filter(Boolean).join(', ')}${probe.adapter.fallback ? ' (software/fallback adapter: CPU numbers)' : ''}`
  : `unknown (${probe.reason})`;
const machine = `${cpus()[0]?.model.trim() ?? 'unknown CPU'}, ${availableParallelism()} cores${nvidia.length ? `; ${nvidia.join(', ')}` : '; no NVIDIA GPU'}; WebGPU adapter: ${adapterText}`;
log(`machine: ${machine}`);

// ---- the model, and a raw session per provider that can run it ----
mkdirSync(join(work, 'model'));
const arch = args.arch as 'resnet18' | 'resnet50';
const model = args.onnx
  ? { path: args.onnx, classes: 1000, describe: `torchvision ${arch} exported by PyTorch (random weights), ${args.onnx}` }
  : writeConvModel(join(work, 'model'), { size, width });
log(`model: ${model.describe}; input ${size}×${size} (${sizeWhy}), width ${width} (${widthWhy})`);

type Ep = 'cpu' | 'webgpu' | 'cuda';
const MODEL_OF: Record<Ep, string> = { cpu: 'conv_cpu', webgpu: 'conv_webgpu', cuda: 'conv_cuda' };
const sessions = new Map<Ep, Ort.InferenceSession>();
const skipped: Record<string, string> = {};
for (const ep of args.eps!.split(',').map((s) => s.trim()) as Ep[]) {
  if (!(ep in MODEL_OF)) throw new Error(`--eps: unknown provider '${ep}' (cpu, webgpu, cuda)`);
  try {
    const provider = ep === 'cuda' ? { name: 'cuda', deviceId: 0 } : ep;
    sessions.set(ep, await ort.InferenceSession.create(model.path, { executionProviders: [provider], intraOpNumThreads: threads, graphOptimizationLevel: 'all' }));
  } catch (err) {
    skipped[ep] = (err as Error).message.split('\n')[0]!;
    log(`${ep}: skipped, no session: ${skipped[ep]}`);
  }
}
const eps = [...sessions.keys()];
if (eps.length === 0) throw new Error('no execution provider could create a session');

const feeds = new Map<number, Record<string, Ort.Tensor>>();
const feed = (b: number) => {
  let f = feeds.get(b);
  if (!f) feeds.set(b, (f = { [CONV_INPUT]: new ort.Tensor('float32', convImages(size, b), [b, 3, size, size]) }));
  return f;
};

// ---- correctness: every provider against the CPU, and (below) tsi against raw ----
const reference = new Map<Ep, Float32Array>();
for (const [ep, s] of sessions) reference.set(ep, (await s.run(feed(2)))[CONV_OUTPUT]!.data as Float32Array);
const checks: string[] = [];
for (const [ep, out] of reference) {
  const st = outputStats(out);
  checks.push(`${ep}: logits of 2 images mean ${st.mean.toFixed(3)}, std ${st.std.toFixed(3)}, ${st.finite ? 'all finite' : 'NOT ALL FINITE'}`);
}
const fmtDiff = (d: Diff) => `max |diff| ${d.maxAbs.toExponential(2)} (${d.maxRel.toExponential(2)} of the largest |logit|; largest elementwise relative ${d.maxElemRel.toExponential(2)})${d.finite ? '' : ', NOT FINITE'}`;
for (const gpuEp of ['webgpu', 'cuda'] as const) {
  if (reference.has(gpuEp) && reference.has('cpu')) checks.push(`${gpuEp} vs cpu: ${fmtDiff(compareOutputs(reference.get(gpuEp)!, reference.get('cpu')!))}`);
}

// ---- raw runs ----
interface Raw { images: number; ms: number; runs: number; p50Ms: number; p50ByBatch: Record<number, number> }
/** Per provider and batch size, the latest p50 of one run: segment lengths and the client choice follow it. */
const runMs = new Map<Ep, Map<number, number>>(eps.map((ep) => [ep, new Map()]));
const estMs = (ep: Ep, b: number): number => {
  const m = runMs.get(ep)!;
  const one = m.get(1) ?? 1;
  return m.get(b) ?? one + ((m.get(MAX_BATCH) ?? one * MAX_BATCH) - one) * (b - 1) / (MAX_BATCH - 1);
};

/** Runs the batch-size mix for at least `ms` and `minRuns` runs; a fast size gets one untimed run first (the server ran in between and took the caches). */
async function raw(ep: Ep, mix: ReadonlyMap<number, number>, ms: number, minRuns: number): Promise<Raw> {
  const s = sessions.get(ep)!;
  const order: number[] = [];
  for (const [b, k] of mix) for (let i = 0; i < k; i++) order.push(b);
  order.sort((x, y) => ((x * 2654435761) % 97) - ((y * 2654435761) % 97));
  for (const b of mix.keys()) if (!runMs.get(ep)!.has(b) || estMs(ep, b) < 200) await s.run(feed(b));
  const times = new Map<number, number[]>();
  let images = 0;
  let runs = 0;
  const start = performance.now();
  while (performance.now() - start < ms || runs < minRuns) {
    const b = order[runs % order.length]!;
    const t = performance.now();
    await s.run(feed(b));
    (times.get(b) ?? times.set(b, []).get(b)!).push(performance.now() - t);
    images += b;
    runs++;
  }
  const p50 = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  for (const [b, xs] of times) runMs.get(ep)!.set(b, p50(xs));
  const all = [...times.values()].flat();
  return { images, ms: performance.now() - start, runs, p50Ms: p50(all), p50ByBatch: Object.fromEntries([...times].map(([b, xs]) => [b, p50(xs)])) };
}
const imgPerSec = (r: readonly Raw[]) => r.reduce((k, x) => k + x.images, 0) / (r.reduce((k, x) => k + x.ms, 0) / 1000);

// ---- the server: one tsi over a repository holding the model once per provider ----
const repo = join(work, 'repo');
for (const ep of eps) {
  const dir = join(repo, MODEL_OF[ep]);
  mkdirSync(join(dir, '1'), { recursive: true });
  try {
    symlinkSync(model.path, join(dir, '1', 'model.onnx'));
  } catch {
    copyFileSync(model.path, join(dir, '1', 'model.onnx'));
  }
  const dims = `dims: [ 3, ${size}, ${size} ]`;
  const warm = (b: number) => `{ name: "batch ${b}" batch_size: ${b} inputs { key: "${CONV_INPUT}" value: { data_type: TYPE_FP32 ${dims} zero_data: true } } }`;
  // Batching: with one instance busy on a batch and one queued behind it, the queue fills while it
  // computes, so at 64 clients every batch is a full 32 with no delay; a delay would only add latency
  // at 1 client. Hence no max_queue_delay and preferred = max (the defaults, spelled out).
  // Warm-up at 1 and 32 moves the first run of each shape (WebGPU compiles its shaders then) out of
  // the measurement, as the raw side's untimed first runs do.
  writeFileSync(join(dir, 'config.pbtxt'), `name: "${MODEL_OF[ep]}"
backend: "onnxruntime"
max_batch_size: ${MAX_BATCH}
input [ { name: "${CONV_INPUT}" data_type: TYPE_FP32 ${dims} } ]
output [ { name: "${CONV_OUTPUT}" data_type: TYPE_FP32 dims: [ ${model.classes} ] } ]
instance_group [ { count: 1 kind: ${ep === 'cpu' ? 'KIND_CPU' : 'KIND_GPU'} } ]
${ep === 'cpu' ? '' : `optimization { execution_accelerators { gpu_execution_accelerator [ { name: "${ep}" } ] } }`}
dynamic_batching { preferred_batch_size: [ ${MAX_BATCH} ] max_queue_delay_microseconds: 0 }
parameters { key: "intra_op_thread_count" value: { string_value: "${threads}" } }
model_warmup [ ${warm(1)}, ${warm(MAX_BATCH)} ]
`);
}

const image = convImages(size, 1);
const reqHeader = new TextEncoder().encode(JSON.stringify({
  inputs: [{ name: CONV_INPUT, datatype: 'FP32', shape: [1, 3, size, size], parameters: { binary_data_size: image.byteLength } }],
  outputs: [{ name: CONV_OUTPUT, parameters: { binary_data: true } }],
}));
const body = new Uint8Array(reqHeader.byteLength + image.byteLength);
body.set(reqHeader);
body.set(new Uint8Array(image.buffer), reqHeader.byteLength);
const reqHeaders = { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(reqHeader.byteLength) };
writeFileSync(join(work, 'body.bin'), body);
writeFileSync(join(work, 'infer.lua'), wrkScript(join(work, 'body.bin'), reqHeaders));
const wrkInstalled = hasWrk();

const { argv, build } = tsiServer(repo, work, { server: args.server });
log(`tsi server: ${build}; loading ${eps.map((ep) => MODEL_OF[ep]).join(', ')} (with warm-up)`);
const srv = await spawnServer(argv, 'the tsi server');
// Should anything below throw, the server must not outlive the bench.
process.once('exit', () => {
  srv.child.kill();
  rmSync(work, { recursive: true, force: true });
});
const base = `http://127.0.0.1:${srv.port}/v2/models`;

/** Where each served model really runs: the config as loaded says KIND_CPU when a KIND_GPU instance fell back. */
const servedKind = new Map<Ep, string>();
for (const ep of eps) {
  const cfg = (await (await fetch(`${base}/${MODEL_OF[ep]}/config`)).json()) as { instance_group?: { kind?: string }[] };
  servedKind.set(ep, cfg.instance_group?.[0]?.kind ?? '?');
  if (ep !== 'cpu' && servedKind.get(ep) !== 'KIND_GPU') log(`WARNING: tsi's ${MODEL_OF[ep]} fell back to the CPU (see the server's log line naming the provider above)`);
  const r = await fetch(`${base}/${MODEL_OF[ep]}/infer`, { method: 'POST', headers: reqHeaders, body });
  const bytes = new Uint8Array(await r.arrayBuffer());
  const jsonLen = Number(r.headers.get('inference-header-content-length'));
  if (!r.ok || !jsonLen) throw new Error(`tsi ${MODEL_OF[ep]}: ${r.status} ${new TextDecoder().decode(bytes).slice(0, 300)}`);
  const got = new Float32Array(bytes.slice(jsonLen).buffer);
  checks.push(`tsi ${MODEL_OF[ep]} (${servedKind.get(ep)}) vs raw ${ep}, image 0: ${fmtDiff(compareOutputs(got, reference.get(ep)!.subarray(0, model.classes)))}`);
}

// ---- served segments ----
interface Snapshot { batches: Map<number, { count: number; ns: number }>; stats: Record<string, { count: number; ns: number }> }
async function snapshot(ep: Ep): Promise<Snapshot> {
  const st = (await (await fetch(`${base}/${MODEL_OF[ep]}/stats`)).json()) as {
    model_stats: { inference_stats: Record<string, { count: number; ns: number }>; batch_stats: { batch_size: number; compute_infer: { count: number; ns: number } }[] }[];
  };
  const m = st.model_stats[0]!;
  return { batches: new Map(m.batch_stats.map((b) => [b.batch_size, { ...b.compute_infer }])), stats: m.inference_stats };
}
/** What happened between two snapshots: batches formed (size → count, ORT ns) and request-level durations. */
function delta(a: Snapshot, b: Snapshot): Snapshot {
  const batches = new Map<number, { count: number; ns: number }>();
  for (const [k, v] of b.batches) {
    const count = v.count - (a.batches.get(k)?.count ?? 0);
    if (count > 0) batches.set(k, { count, ns: v.ns - (a.batches.get(k)?.ns ?? 0) });
  }
  const stats: Snapshot['stats'] = {};
  for (const [k, v] of Object.entries(b.stats)) stats[k] = { count: v.count - (a.stats[k]?.count ?? 0), ns: v.ns - (a.stats[k]?.ns ?? 0) };
  return { batches, stats };
}

/**
 * Waits until the model's instance is idle and returns its statistics then. Clients leave with
 * batches still running and queued in the server; those would otherwise compete with the next raw
 * segment, and they belong to this segment's batch mix. Idle: no request answered for longer than a
 * batch takes (a queued batch starts the moment the running one ends).
 */
async function settle(ep: Ep, batchMs: number): Promise<Snapshot> {
  const answered = (s: Snapshot) => (s.stats.success?.count ?? 0) + (s.stats.fail?.count ?? 0);
  let last = await snapshot(ep);
  let since = performance.now();
  for (;;) {
    await new Promise((r) => setTimeout(r, Math.min(250, batchMs / 2)));
    const next = await snapshot(ep);
    if (answered(next) !== answered(last)) {
      last = next;
      since = performance.now();
    } else if (performance.now() - since > 1.2 * batchMs + 50) return next;
  }
}

interface Served {
  load: LoadResult;
  client: string;
  /** Images a second, the measure of served/raw. */
  rate: number;
  little: boolean;
  /** Batches tsi formed from the start of the load until its instance went idle (the raw replay's mix). */
  formed: Snapshot;
  /** What tsi's statistics say happened in the measured window. */
  inWindow: Snapshot;
  windowMs: number;
}

/** Per provider and batch size, how long tsi's own ORT runs took lately (slower than raw when the host is busy). */
const tsiRunMs = new Map<Ep, Map<number, number>>(eps.map((ep) => [ep, new Map()]));

async function served(ep: Ep, c: number): Promise<Served> {
  const b = Math.min(c, MAX_BATCH);
  // A busy host can make tsi's runs slower than the raw ones just measured (×3 seen here): until tsi
  // has run this batch size, assume twice the raw time, and a quarter more than the slower one after.
  const seen = tsiRunMs.get(ep)!.get(b);
  const batchMs = seen === undefined ? 2 * estMs(ep, b) : 1.25 * Math.max(estMs(ep, b), seen);
  // A request waits for the batch ahead of it (the instance runs one and holds one queued), then its own.
  const latency = Math.ceil(c / MAX_BATCH) * batchMs;
  // The rate: answers counted in the window, which is off by up to a batch at each end, so the window
  // spans 20 batches or more; where that would take over 4 × --duration (a slow device), a window of
  // 1.5 round trips (every client answered once or twice) and clients / mean latency (Little's law: exact
  // for a closed loop in steady state, and blind to where batch boundaries fall). Either way 1.5 round
  // trips of warm-up first: the first batches after a start are small, their latencies short.
  const little = 20 * batchMs > 4 * durationMs;
  const windowMs = little ? Math.max(durationMs, 1.5 * latency) : Math.max(durationMs, 20 * batchMs);
  const warmupMs = Math.max(500, 1.5 * latency);
  // wrk (C: half a Node client's CPU per request) starts its measured run on fresh connections, while
  // the server still holds batches of its warm-up run: a start-up transient of 2–3 batches. That is
  // noise only when the window holds ~100 batches; wrk also drops answers slower than 2 s. Otherwise
  // bench/load.ts, whose warm-up runs on the same connections, so the window starts in steady state.
  const client = args.client ?? (wrkInstalled && windowMs / batchMs >= 100 && latency < 1000 ? 'wrk' : 'node');
  const before = await snapshot(ep);
  // tsi's statistics at the window's ends (wrk runs whole seconds) say what the instance did in it.
  const whole = (ms: number) => Math.max(1, Math.round(ms / 1000)) * 1000;
  const [from, span] = client === 'wrk' ? [whole(warmupMs), whole(windowMs)] : [warmupMs, windowMs];
  const at = (ms: number) => new Promise<Snapshot>((r) => setTimeout(() => r(snapshot(ep)), ms));
  const ends = [at(from), at(from + span)];
  const load = client === 'wrk'
    ? await runWrk({ url: `${base}/${MODEL_OF[ep]}/infer`, script: join(work, 'infer.lua'), connections: c, durationMs: windowMs, warmupMs })
    : await runLoad({ port: srv.port, request: buildRequest(`/v2/models/${MODEL_OF[ep]}/infer`, reqHeaders, body), connections: c, durationMs: windowMs, warmupMs });
  const inWindow = delta(await ends[0]!, await ends[1]!);
  const formed = delta(before, await settle(ep, batchMs));
  for (const [size, v] of formed.batches) tsiRunMs.get(ep)!.set(size, v.ns / v.count / 1e6);
  // Little's law needs the steady state; with fewer answers than clients in the window (the device
  // slowed down after the estimate) there is no rate to trust, and the round has no ratio.
  const rate = !little ? load.rps : load.requests >= c ? c / (load.meanMs / 1000) : NaN;
  if (Number.isNaN(rate)) log(`${ep} c=${c}: only ${load.requests} answers in the ${(windowMs / 1000).toFixed(0)}-s window, fewer than the clients: no rate this round`);
  return { load, client, rate, little, formed, inWindow, windowMs: span };
}

// ---- the rounds ----
interface Point { served: Served[]; replay: Raw[] }
interface EpResult { b1: Raw[]; b32: Raw[]; points: Record<number, Point> }
const results = new Map<Ep, EpResult>(eps.map((ep) => [ep, { b1: [], b32: [], points: Object.fromEntries(levels.map((c) => [c, { served: [], replay: [] }])) }]));
const meanBatch = (s: Snapshot) => {
  let rows = 0;
  let n = 0;
  for (const [b, v] of s.batches) {
    rows += b * v.count;
    n += v.count;
  }
  return n === 0 ? 0 : rows / n;
};
log(`${rounds} interleaved rounds of ≥ ${durationMs / 1000} s per side; ${threads} intra-op thread(s); client: ${args.client ?? (wrkInstalled ? 'wrk where a window holds ≥ 100 batches, else bench/load.ts' : 'bench/load.ts (wrk not installed)')}`);
for (let r = 0; r < rounds; r++) {
  for (const ep of eps) {
    const res = results.get(ep)!;
    const b1 = await raw(ep, new Map([[1, 1]]), durationMs, 3);
    const b32 = await raw(ep, new Map([[MAX_BATCH, 1]]), durationMs, 1);
    res.b1.push(b1);
    res.b32.push(b32);
    log(`round ${r + 1} ${ep}: raw batch 1 ${imgPerSec([b1]).toFixed(1)} img/s (${b1.p50Ms.toFixed(1)} ms), batch ${MAX_BATCH} ${imgPerSec([b32]).toFixed(1)} img/s (${b32.p50Ms.toFixed(1)} ms)`);
    for (const c of levels) {
      const s = await served(ep, c);
      const mix = new Map([...s.formed.batches].map(([b, v]) => [b, v.count]));
      const replay = mix.size === 0 ? { images: 0, ms: 1, runs: 0, p50Ms: NaN, p50ByBatch: {} }
        : mix.size === 1 && mix.has(1) ? b1 : await raw(ep, mix, durationMs, 1);
      res.points[c]!.served.push(s);
      res.points[c]!.replay.push(replay);
      log(`round ${r + 1} ${ep} c=${c}: tsi ${s.rate.toFixed(1)} img/s${s.little ? ' (Little)' : ''} via ${s.client}, counted ${s.load.rps.toFixed(1)} req/s, batches ${[...s.formed.batches].map(([b, v]) => `${v.count}×${b}`).join(' ')}, raw at those batches ${imgPerSec([replay]).toFixed(1)} img/s: served/raw ${(s.rate / imgPerSec([replay])).toFixed(2)}`);
    }
  }
}
await stopServer(srv.child);
for (const s of sessions.values()) await s.release();
rmSync(work, { recursive: true, force: true });

// ---- report ----
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
// Rounds without a rate (NaN) are left out of medians and ranges.
const median = (xs: readonly number[]) => {
  const ok = xs.filter(Number.isFinite).sort((x, y) => x - y);
  return ok.length ? ok[Math.floor(ok.length / 2)]! : NaN;
};
const range = (xs: number[]) => {
  const ok = xs.filter(Number.isFinite);
  return ok.length ? `${f2(Math.min(...ok))}–${f2(Math.max(...ok))}` : '–';
};
const withRange = (xs: number[]) => `${f2(median(xs))} (${range(xs)})`;
const out: string[] = [
  `machine: ${machine}`,
  `model: ${model.describe}; input ${size}×${size} (${sizeWhy}), width ${width} (${widthWhy}); ${threads} intra-op thread(s); request body ${(body.byteLength / 1024).toFixed(1)} KiB`,
  `tsi: ${build}; max_batch_size ${MAX_BATCH}, dynamic batching with no delay; ${rounds} interleaved rounds of ≥ ${durationMs / 1000} s per side`,
  ...Object.entries(skipped).map(([ep, why]) => `${ep}: skipped (${why})`),
  '',
  ...checks.map((c) => `- ${c}`),
  '',
  '| EP | served as | raw b1 img/s | raw b1 p50 ms | raw b32 img/s | raw b32 p50 ms | b32 / b1 |',
  '|---|---|---:|---:|---:|---:|---:|',
];
for (const [ep, res] of results) {
  out.push(`| ${ep} | ${servedKind.get(ep)} | ${f1(imgPerSec(res.b1))} | ${f2(median(res.b1.map((x) => x.p50Ms)))} | ${f1(imgPerSec(res.b32))} | ${f2(median(res.b32.map((x) => x.p50Ms)))} | ${f2(imgPerSec(res.b32) / imgPerSec(res.b1))} |`);
}
out.push('', '| EP | clients | client | tsi img/s | tsi p50 / p99 ms | mean batch | raw at tsi\'s batches img/s | served / raw (rounds) |', '|---|---:|---|---:|---:|---:|---:|---:|');
const summary: string[] = [];
for (const [ep, res] of results) {
  for (const c of levels) {
    const p = res.points[c]!;
    const ratios = p.served.map((s, i) => s.rate / imgPerSec([p.replay[i]!]));
    const l = mergeLoads(p.served.map((s) => s.load));
    const rate = median(p.served.map((s) => s.rate));
    const batches: Snapshot = { batches: new Map(), stats: {} };
    for (const s of p.served) for (const [b, v] of s.formed.batches) {
      const acc = batches.batches.get(b) ?? { count: 0, ns: 0 };
      batches.batches.set(b, { count: acc.count + v.count, ns: acc.ns + v.ns });
    }
    const clients = [...new Set(p.served.map((s) => s.client))].join('/');
    out.push(`| ${ep} | ${c} | ${clients} | ${f1(rate)}${p.served.some((s) => s.little) ? ' †' : ''} | ${f2(l.p50Ms)} / ${f2(l.p99Ms)} | ${meanBatch(batches).toFixed(1)} | ${f1(imgPerSec(p.replay))} | ${withRange(ratios)} |`);
    if (c >= 64) summary.push(`served/raw ${ep} at ${c} clients = ${withRange(ratios)} median of ${ratios.filter(Number.isFinite).length} rounds (target ≥ 0.90)${l.errors ? `; ${l.errors} failed requests` : ''}`);
  }
}
if ([...results.values()].some((r) => Object.values(r.points).some((p) => p.served.some((x) => x.little)))) out.push('', '† clients / mean latency (Little\'s law): 20 batches, which counting answers needs to be off by under 5 %, would take over 4 × --duration here.');
const cpu = results.get('cpu');
for (const [gpuEp, label] of [['webgpu', 'WebGPU'], ['cuda', 'CUDA']] as const) {
  const gpu = results.get(gpuEp);
  if (!cpu || !gpu) continue;
  const per = (f: (r: EpResult) => Raw[]) => f(gpu).map((x, i) => imgPerSec([x]) / imgPerSec([f(cpu)[i]!]));
  summary.push(`${label} / CPU raw images/s: batch 1 ${withRange(per((r) => r.b1))}, batch ${MAX_BATCH} ${withRange(per((r) => r.b32))} (per round)${gpuEp === 'webgpu' && probe.adapter?.fallback ? ' — a software adapter: both run on the CPU' : ''}`);
}
// Where the served time goes at the highest concurrency, from tsi's own statistics over the measured
// windows: served/raw ≈ (share of the window the instance spends in ORT) × (raw ORT time / ORT time in tsi).
const top = Math.max(...levels);
for (const [ep, res] of results) {
  const p = res.points[top]!;
  let inferNs = 0;
  let windowMs = 0;
  let full = { count: 0, ns: 0 };
  const req: Record<string, { count: number; ns: number }> = {};
  for (const s of p.served) {
    windowMs += s.windowMs;
    for (const v of s.inWindow.batches.values()) inferNs += v.ns;
    const f = s.inWindow.batches.get(MAX_BATCH);
    if (f) full = { count: full.count + f.count, ns: full.ns + f.ns };
    for (const [k, v] of Object.entries(s.inWindow.stats)) req[k] = { count: (req[k]?.count ?? 0) + v.count, ns: (req[k]?.ns ?? 0) + v.ns };
  }
  const per = (k: string) => (req[k] && req[k]!.count > 0 ? req[k]!.ns / req[k]!.count / 1e6 : NaN);
  const tsiRun = full.count ? full.ns / full.count / 1e6 : NaN;
  const rawRun = median(p.replay.map((x) => x.p50ByBatch[MAX_BATCH] ?? NaN));
  summary.push(`where the time goes, ${ep} at ${top} clients: the instance runs ORT ${(100 * inferNs / 1e6 / windowMs).toFixed(0)} % of the measured time; an ORT run of ${MAX_BATCH} images takes ${f2(tsiRun)} ms in tsi vs ${f2(rawRun)} ms raw in the replays (×${f2(tsiRun / rawRun)}); `
    + `a request spends ${f2(per('success'))} ms in tsi, ${f2(per('queue'))} ms of it queued, and its batch ${f2(per('compute_input'))} + ${f2(per('compute_output'))} ms in input + output `
    + `(tsi's compute_input/output, which include a batch's wait behind the one running); request bodies ${f1(median(p.served.map((s) => s.rate)) * body.byteLength / 1e6)} MB/s`);
}
// PyTorch on the same card: torchvision's ResNet-18 (this model's shape at width 64) or the exported
// architecture (--onnx, --arch), eager, where it runs; beside it each GPU provider's raw session.
const torchWhy = !args.onnx && width !== 64 ? `the model's width is ${width}, not ResNet-18's 64` : torchMissing();
if (torchWhy) summary.push(`PyTorch peer: absent (${torchWhy})`);
else {
  const peer = torchConv([1, MAX_BATCH], size, arch);
  const gpus = (['webgpu', 'cuda'] as const).filter((e) => results.has(e));
  const label = (e: string) => (e === 'cuda' ? 'CUDA' : 'WebGPU');
  out.push('', `PyTorch (${torchLabel()}), torchvision ${arch} eager, ${size}×${size}:`, '',
    `| batch | PyTorch fp32 img/s | PyTorch fp16 img/s | ${gpus.map((e) => `tsi ${label(e)} raw img/s | ${label(e)} raw / PyTorch fp32`).join(' | ')} |`,
    `|---:|---:|---:|${gpus.map(() => '---:|---:|').join('')}`);
  for (const [b, p] of peer) {
    const cells = gpus.map((e) => {
      const r = results.get(e)!;
      const mine = imgPerSec(b === 1 ? r.b1 : r.b32);
      return `${f1(mine)} | ${f2(mine / p.fp32)}×`;
    });
    out.push(`| ${b} | ${f1(p.fp32)} | ${f1(p.fp16)} | ${cells.join(' | ')} |`);
  }
}
out.push('', ...summary.map((s) => `- ${s}`), `- whole run: ${((performance.now() - t0) / 1000).toFixed(0)} s`);
process.stdout.write(`${out.join('\n')}\n`);

if (args.json) {
  const plain = (x: Snapshot) => ({ batches: Object.fromEntries(x.batches), stats: x.stats });
  const strip = (s: Served) => ({ ...s, load: { ...s.load, latencies: undefined }, formed: plain(s.formed), inWindow: plain(s.inWindow) });
  writeFileSync(args.json, JSON.stringify({
    machine, adapter: probe.adapter ?? null, adapterReason: probe.reason ?? null, nvidia, model: { ...model, bytes: undefined, path: undefined },
    size, threads, durationMs, rounds, levels, skipped, checks, servedKind: Object.fromEntries(servedKind),
    results: Object.fromEntries([...results].map(([ep, r]) => [ep, {
      b1: r.b1, b32: r.b32,
      points: Object.fromEntries(levels.map((c) => [c, { served: r.points[c]!.served.map(strip), replay: r.points[c]!.replay }])),
    }])),
  }, null, 2));
}
