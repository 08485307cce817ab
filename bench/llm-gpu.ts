/**
 * The LLM GPU benchmark: one generated GPT-style decoder served by one tsi server three times — as a
 * KIND_CPU model, as a KIND_GPU copy (onnxruntime-node's WebGPU provider on whatever adapter Dawn
 * finds) with its KV caches on the device (the default), and as a KIND_GPU copy with
 * `kv_cache_location: host` (the caches cross to the device and back each step: the path before
 * device caches) — driven the same way at 1, 8 and 32 concurrent streams, side by side in one run:
 * output tokens/s and time to first token for each, the ratios, the bytes moved host↔device per
 * generated token (the server's `tsi_llm_device_bytes_total`, read from its stats), and each GPU
 * step's split as the server measured it (inputs built and batch changes queued / the decoder run until
 * its ids or logits are on the host / sampling, text and streaming on the host). Where `python3 -c "import torch, transformers"` works
 * and CUDA is visible, PyTorch on the same card is the peer: transformers' `generate` on a GPT-2 of
 * the same shape, fp32 and fp16 (bench/torch-peer.ts). First it checks that CPU and GPU give the same
 * greedy text for a few prompts (a GPU's float sums may differ in the last bits, so a near-tie
 * between two tokens can flip: the count that agree is printed, not asserted).
 *
 * The model is made at every run: `big_gpt` (d=1024, 8 layers, ~420 MB, a GPU's size of work) on a
 * hardware adapter, `mid_gpt` (36 MB) on a software one (Mesa's lavapipe runs shaders on the CPU:
 * numbers there show overhead, not GPU speed).
 *
 * Run:  npm run bench:llm-gpu   (flags: --model big_gpt|mid_gpt  --streams 1,8,32  --tokens <32>
 *       --requests <per stream; default max(2, 16 / streams)>  --server tsx|dist  --no-host-kv  --no-torch
 *       --accelerator cuda|webgpu: the KIND_GPU copies name that provider (gpu_execution_accelerator); cuda
 *       needs the CUDA provider's core and libraries in the environment, as bench/gpu-kit.sh run-cuda sets)
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { adapterLabel, probeWebGpu, queryNvidiaGpus } from '../runtime-node/gpu/index.js';
import { BIG_GPT, drive, greedyText, MID_GPT, pct, promptOf, tsiRequest, writeGptFolder, type Result } from './llm-common.js';
import { markdownTable } from './markdown.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';
import { torchLabel, torchLlm, torchMissing } from './torch-peer.js';

process.env.XDG_RUNTIME_DIR ??= '/tmp';
const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    streams: { type: 'string', default: '1,8,32' },
    tokens: { type: 'string', default: '32' },
    requests: { type: 'string' },
    server: { type: 'string' },
    'no-host-kv': { type: 'boolean' },
    'no-torch': { type: 'boolean' },
    accelerator: { type: 'string' },
  },
});

const probe = await probeWebGpu();
// Without the optional `webgpu` package the adapter cannot be named (the server's provider still finds it).
const adapter = probe.adapters[0];
if (!adapter && probe.packageInstalled) throw new Error(`no WebGPU adapter: ${probe.reason}`);
const software = !!adapter && (adapter.fallback || adapter.architecture === 'software' || /llvmpipe|swiftshader/i.test(adapter.description));
const spec = (args.model ?? (software ? 'mid_gpt' : 'big_gpt')) === 'big_gpt' ? BIG_GPT : MID_GPT;
const STREAMS = args.streams.split(',').map(Number);
const TOKENS = Number(args.tokens);
const perStream = (streams: number) => (args.requests ? Number(args.requests) : Math.max(2, Math.ceil(16 / streams)));
const nvidia = (await queryNvidiaGpus()).gpus[0];

const work = mkdtempSync(join(tmpdir(), 'tsi-bench-llm-gpu-'));
const repo = join(work, 'repo');
mkdirSync(repo);
const t0 = performance.now();
// 32 streams of up to 40 + TOKENS tokens fit with room to spare.
const kvBytes = 2 * spec.layers * spec.dModel * 4 * 32 * (48 + TOKENS) * 2;
const model = writeGptFolder(join(repo, 'cpu'), spec, kvBytes, 'KIND_CPU', 'cpu');
writeGptFolder(join(repo, 'gpu'), spec, kvBytes, 'KIND_GPU', 'gpu', model);
const hostKv = !args['no-host-kv'];
if (hostKv) {
  writeGptFolder(join(repo, 'gpu_host_kv'), spec, kvBytes, 'KIND_GPU', 'gpu_host_kv', model);
  const cfg = join(repo, 'gpu_host_kv', 'config.pbtxt');
  writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('parameters [', 'parameters [\n  { key: "kv_cache_location" value: { string_value: "host" } },'));
}
// A named provider: the GPU copies run on it or fail to load (the default order would pick CUDA where installed).
if (args.accelerator) {
  for (const m of ['gpu', ...(hostKv ? ['gpu_host_kv'] : [])]) {
    const cfg = join(repo, m, 'config.pbtxt');
    writeFileSync(cfg, `${readFileSync(cfg, 'utf8')}\noptimization { execution_accelerators { gpu_execution_accelerator [ { name: "${args.accelerator}" } ] } }\n`);
  }
}
process.stderr.write(`made ${spec.name} twice in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
const { argv, build } = tsiServer(repo, work, { server: args.server });
const server = await spawnServer(argv, 'tsi');
console.log(`${spec.name} (d=${spec.dModel}, ${spec.layers} layers), ${build}, ${TOKENS} tokens per request; CPU: ${cpus()[0]?.model} × ${availableParallelism()}; GPU: ${nvidia ? `${nvidia.name}, ` : ''}${adapter ? adapterLabel(adapter) : 'adapter not probed (the webgpu package is not installed)'}`);

/** The server's statistics of one model: steps and their split, and the bytes its sessions moved. */
async function statsOf(model: string): Promise<{ steps: number; inputNs: number; inferNs: number; outputNs: number; toDevice: number; toHost: number; kvCrossed: number }> {
  const r = await fetch(`http://127.0.0.1:${server.port}/v2/models/${model}/stats`);
  const m = ((await r.json()) as { model_stats: any[] }).model_stats[0];
  const sum = (o: Record<string, number> = {}) => Object.values(o).reduce((a, b) => a + b, 0);
  const d = m.llm_stats?.device;
  // A step is an execution: its split is in batch_stats (inference_stats time whole requests).
  const steps = (k: string) => (m.batch_stats as Record<string, { ns: number }>[]).reduce((n, b) => n + b[k]!.ns, 0);
  return {
    steps: m.execution_count, inputNs: steps('compute_input'), inferNs: steps('compute_infer'), outputNs: steps('compute_output'),
    toDevice: sum(d?.bytes_to_device), toHost: sum(d?.bytes_to_host), kvCrossed: (d?.bytes_to_device?.kv ?? 0) + (d?.bytes_to_host?.kv ?? 0),
  };
}

type Side = Result & { split?: string; bytesPerToken?: number; kvPerToken?: number };

/** One side at `streams` streams, with its step split and bytes per token from the server's stats. */
async function measure(model: string, streams: number): Promise<Side> {
  const before = await statsOf(model);
  const r = await drive(streams, (p, f) => tsiRequest(server.port, model, p, TOKENS, f), perStream(streams));
  const after = await statsOf(model);
  const steps = Math.max(1, after.steps - before.steps);
  const ms = (k: 'inputNs' | 'inferNs' | 'outputNs') => ((after[k] - before[k]) / steps / 1e6).toFixed(2);
  return {
    ...r, split: `${ms('inputNs')} / ${ms('inferNs')} / ${ms('outputNs')}`,
    bytesPerToken: (after.toDevice + after.toHost - before.toDevice - before.toHost) / r.tokens,
    kvPerToken: (after.kvCrossed - before.kvCrossed) / r.tokens,
  };
}

const missingTorch = args['no-torch'] ? 'not asked for (--no-torch)' : torchMissing();
try {
  const prompts = [0, 1, 2, 3].map(promptOf);
  const texts = await Promise.all(prompts.map(async (p) => [await greedyText(server.port, 'cpu', p, TOKENS), await greedyText(server.port, 'gpu', p, TOKENS)]));
  console.log(`greedy text equal on GPU and CPU: ${texts.filter(([c, g]) => c === g).length} of ${prompts.length} prompts`);
  const side = (model: string) => (p: string, f: () => void) => tsiRequest(server.port, model, p, TOKENS, f);
  const models = hostKv ? ['cpu', 'gpu', 'gpu_host_kv'] : ['cpu', 'gpu'];
  // Warm every side (first runs compile the GPU's shaders and allocate), and open the keep-alive connections.
  for (const m of models) await drive(Math.max(...STREAMS), side(m), 1);
  const rows: { streams: number; sides: Record<string, Side> }[] = [];
  for (const streams of STREAMS) {
    const sides: Record<string, Side> = {};
    for (const m of models) sides[m] = await measure(m, streams);
    rows.push({ streams, sides });
    process.stderr.write(`${streams} streams done\n`);
  }
  const torch = missingTorch ? undefined : torchLlm(spec, STREAMS, TOKENS);
  console.log(torch ? `PyTorch peer: ${torchLabel()}; transformers generate, a batch of <streams> 40-token prompts, ${TOKENS} new tokens each` : `PyTorch peer: absent (${missingTorch})`);
  const f = (x: number, d = 1) => x.toFixed(d);
  const x = (a: number, b: number | undefined) => (b ? `${f(a / b, 2)}×` : '–');
  const head = ['streams', 'tsi CPU tok/s', 'tsi GPU tok/s', ...(hostKv ? ['GPU, KV on host'] : []), 'PyTorch fp32', 'PyTorch fp16', 'GPU / CPU', 'GPU / PyTorch fp32',
    ...(hostKv ? ['GPU / KV on host'] : []), 'TTFT p50 CPU / GPU (ms)', 'GPU bytes/token (KV)', 'GPU step: inputs+moves / run+read / host (ms)'];
  const table: string[][] = [head];
  for (const r of rows) {
    const { cpu, gpu } = r.sides as { cpu: Side; gpu: Side };
    const hk = r.sides.gpu_host_kv;
    const pt = torch?.get(r.streams);
    table.push([
      String(r.streams), f(cpu.tokensPerS, 0), f(gpu.tokensPerS, 0), ...(hk ? [f(hk.tokensPerS, 0)] : []), pt ? f(pt.fp32, 0) : '–', pt ? f(pt.fp16, 0) : '–',
      x(gpu.tokensPerS, cpu.tokensPerS), x(gpu.tokensPerS, pt?.fp32), ...(hk ? [x(gpu.tokensPerS, hk.tokensPerS)] : []),
      `${f(pct(cpu.ttftMs, 50))} / ${f(pct(gpu.ttftMs, 50))}`, `${f(gpu.bytesPerToken!, 0)} (${f(gpu.kvPerToken!, 0)})`, gpu.split!,
    ]);
  }
  console.log();
  for (const [k, r] of table.entries()) {
    console.log(`| ${r.join(' | ')} |`);
    if (k === 0) console.log(`|${r.map(() => '---').join('|')}|`);
  }
  if (hostKv) {
    const hk = rows.map((r) => `${r.streams}: ${f(r.sides.gpu_host_kv!.bytesPerToken!, 0)}`).join(', ');
    console.log(`\nKV on host, bytes/token by streams: ${hk}`);
  }
  markdownTable(`${spec.name} (d=${spec.dModel}, ${spec.layers} layers), ${TOKENS} tokens per request; GPU: ${nvidia ? `${nvidia.name}, ` : ''}${adapter ? adapterLabel(adapter) : 'adapter not probed'}; ${torch ? `PyTorch: ${torchLabel()}` : `PyTorch: absent (${missingTorch})`}`, table);
} finally {
  await stopServer(server.child);
  rmSync(work, { recursive: true, force: true });
}
