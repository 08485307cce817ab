/**
 * The LLM GPU benchmark (issue 36, part 4): one generated GPT-style decoder served by one tsi server
 * twice, as a KIND_CPU model and as a KIND_GPU copy (onnxruntime-node's WebGPU provider on whatever
 * adapter Dawn finds), driven the same way at 1, 8 and 32 concurrent streams, side by side in one
 * run: output tokens/s and time to first token for each, and the GPU/CPU ratio. First it checks that
 * both give the same greedy text for a few prompts (a GPU's float sums may differ in the last bits,
 * so a near-tie between two tokens can flip: the count that agree is printed, not asserted).
 *
 * The model is made at every run: `big_gpt` (d=1024, 8 layers, ~420 MB, a GPU's size of work) on a
 * hardware adapter, `mid_gpt` (36 MB) on a software one (Mesa's lavapipe runs shaders on the CPU:
 * numbers there show overhead, not GPU speed). The KV caches live in the decoder worker's memory
 * and cross to the device and back at every step (runtime-node/llm/decoder-worker.ts): the GPU's
 * numbers include that traffic.
 *
 * Run:  npm run bench:llm-gpu   (flags: --model big_gpt|mid_gpt  --streams 1,8,32  --tokens <32>
 *       --requests <per stream; default max(2, 16 / streams)>  --server tsx|dist)
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { adapterLabel, probeWebGpu, queryNvidiaGpus } from '../runtime-node/gpu/index.js';
import { BIG_GPT, drive, greedyText, MID_GPT, pct, promptOf, tsiRequest, writeGptFolder, type Result } from './llm-common.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

process.env.XDG_RUNTIME_DIR ??= '/tmp';
const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    streams: { type: 'string', default: '1,8,32' },
    tokens: { type: 'string', default: '32' },
    requests: { type: 'string' },
    server: { type: 'string' },
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
process.stderr.write(`made ${spec.name} twice in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
const { argv, build } = tsiServer(repo, work, { server: args.server });
const server = await spawnServer(argv, 'tsi');
console.log(`${spec.name} (d=${spec.dModel}, ${spec.layers} layers), ${build}, ${TOKENS} tokens per request; CPU: ${cpus()[0]?.model} × ${availableParallelism()}; GPU: ${nvidia ? `${nvidia.name}, ` : ''}${adapter ? adapterLabel(adapter) : 'adapter not probed (the webgpu package is not installed)'}`);

try {
  const prompts = [0, 1, 2, 3].map(promptOf);
  const texts = await Promise.all(prompts.map(async (p) => [await greedyText(server.port, 'cpu', p, TOKENS), await greedyText(server.port, 'gpu', p, TOKENS)]));
  console.log(`greedy text equal on GPU and CPU: ${texts.filter(([c, g]) => c === g).length} of ${prompts.length} prompts`);
  const side = (model: string) => (p: string, f: () => void) => tsiRequest(server.port, model, p, TOKENS, f);
  // Warm both (first runs compile the GPU's shaders and allocate), and open the keep-alive connections.
  await drive(Math.max(...STREAMS), side('cpu'), 1);
  await drive(Math.max(...STREAMS), side('gpu'), 1);
  const rows: { streams: number; cpu: Result; gpu: Result }[] = [];
  for (const streams of STREAMS) {
    const cpu = await drive(streams, side('cpu'), perStream(streams));
    const gpu = await drive(streams, side('gpu'), perStream(streams));
    rows.push({ streams, cpu, gpu });
    process.stderr.write(`${streams} streams done\n`);
  }
  const f = (x: number, d = 1) => x.toFixed(d);
  console.log('\n| streams | CPU tokens/s | GPU tokens/s | GPU / CPU | CPU TTFT p50 / p99 (ms) | GPU TTFT p50 / p99 (ms) |');
  console.log('|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    console.log(`| ${r.streams} | ${f(r.cpu.tokensPerS, 0)} | ${f(r.gpu.tokensPerS, 0)} | ${f(r.gpu.tokensPerS / r.cpu.tokensPerS, 2)}× | ${f(pct(r.cpu.ttftMs, 50))} / ${f(pct(r.cpu.ttftMs, 99))} | ${f(pct(r.gpu.ttftMs, 50))} / ${f(pct(r.gpu.ttftMs, 99))} |`);
  }
} finally {
  await stopServer(server.child);
  rmSync(work, { recursive: true, force: true });
}
