/**
 * What `model_warmup` buys the first client on a GPU: the WebGPU provider compiles its shaders and
 * sizes its buffer pools on a session's first runs, and without warmup the first client's request pays
 * for that. Each round starts a fresh server (the compiled build, a new process, so nothing is cached)
 * serving the conv model of bench/conv-model.ts as KIND_GPU, once with a `model_warmup` sample (zero
 * data, batch 1) and once without, alternately; it times the load (until READY), the first request,
 * and the median of the next ones. Ratios are per round.
 *
 * Run:  npx tsx bench/warmup.ts [--size 64] [--rounds 3] [--requests 20] [--kind KIND_GPU|KIND_CPU] [--json file]
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CONV_INPUT, CONV_OUTPUT, convImages, writeConvModel } from './conv-model.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

const { values: args } = parseArgs({
  options: {
    size: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
    requests: { type: 'string', default: '20' },
    kind: { type: 'string', default: 'KIND_GPU' },
    json: { type: 'string' },
    server: { type: 'string' },
    dist: { type: 'string' },
  },
});
const size = Number(args.size);
const rounds = Number(args.rounds);
const requests = Number(args.requests);
process.env.XDG_RUNTIME_DIR ??= '/tmp';

const work = mkdtempSync(join(tmpdir(), 'tsi-warmup-bench-'));
const modelDir = join(work, 'src');
mkdirSync(modelDir);
const model = writeConvModel(modelDir, { size });

function repo(name: string, warm: boolean): string {
  const dir = join(work, name);
  mkdirSync(join(dir, 'conv', '1'), { recursive: true });
  writeFileSync(join(dir, 'conv', '1', 'model.onnx'), model.bytes);
  writeFileSync(join(dir, 'conv', 'config.pbtxt'), `name: "conv"
backend: "onnxruntime"
max_batch_size: 1
input [ { name: "${CONV_INPUT}" data_type: TYPE_FP32 dims: [ 3, ${size}, ${size} ] } ]
output [ { name: "${CONV_OUTPUT}" data_type: TYPE_FP32 dims: [ ${model.classes} ] } ]
instance_group [ { kind: ${args.kind} count: 1 } ]
${warm ? `model_warmup [ { name: "zeros" batch_size: 1 inputs { key: "${CONV_INPUT}" value: { data_type: TYPE_FP32 dims: [ 3, ${size}, ${size} ] zero_data: true } } } ]` : ''}
`);
  return dir;
}

const image = convImages(size, 1);
const header = JSON.stringify({ inputs: [{ name: CONV_INPUT, datatype: 'FP32', shape: [1, 3, size, size], parameters: { binary_data_size: image.byteLength } }], outputs: [{ name: CONV_OUTPUT, parameters: { binary_data: true } }] });
const body = Buffer.concat([Buffer.from(header), Buffer.from(image.buffer)]);

async function infer(port: number): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/conv/infer`, {
    method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(header.length) },
  });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`infer answered ${r.status}`);
  return performance.now() - t0;
}

interface Side { loadMs: number; firstMs: number; steadyMs: number }

async function measure(dir: string): Promise<Side> {
  const { argv } = tsiServer(dir, work, { server: args.server, dist: args.dist });
  const t0 = performance.now();
  const { child, port } = await spawnServer(argv, 'tsi');
  const loadMs = performance.now() - t0;
  try {
    const firstMs = await infer(port);
    const rest: number[] = [];
    for (let i = 0; i < requests; i++) rest.push(await infer(port));
    rest.sort((a, b) => a - b);
    return { loadMs, firstMs, steadyMs: rest[Math.floor(rest.length / 2)]! };
  } finally {
    await stopServer(child);
  }
}

const warmRepo = repo('warm', true);
const coldRepo = repo('cold', false);
process.stdout.write(`model: ${model.describe}; ${args.kind}; ${rounds} rounds, ${requests} steady requests each\n`);
const rows: { round: number; cold: Side; warm: Side }[] = [];
for (let r = 1; r <= rounds; r++) {
  // Alternate which goes first, so a drift in the host's speed does not favour one side.
  const order = r % 2 === 1 ? ['cold', 'warm'] as const : ['warm', 'cold'] as const;
  const got: Partial<Record<'cold' | 'warm', Side>> = {};
  for (const side of order) got[side] = await measure(side === 'warm' ? warmRepo : coldRepo);
  rows.push({ round: r, cold: got.cold!, warm: got.warm! });
  const f = (s: Side) => `load ${s.loadMs.toFixed(0)} ms, first ${s.firstMs.toFixed(1)} ms, then ${s.steadyMs.toFixed(1)} ms`;
  process.stdout.write(`round ${r}: without warmup: ${f(got.cold!)} | with warmup: ${f(got.warm!)}\n`);
}
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const firstCold = med(rows.map((r) => r.cold.firstMs));
const firstWarm = med(rows.map((r) => r.warm.firstMs));
const steady = med(rows.flatMap((r) => [r.cold.steadyMs, r.warm.steadyMs]));
process.stdout.write(`\n| | without warmup | with warmup |\n|---|---:|---:|\n`);
process.stdout.write(`| load until READY (median) | ${med(rows.map((r) => r.cold.loadMs)).toFixed(0)} ms | ${med(rows.map((r) => r.warm.loadMs)).toFixed(0)} ms |\n`);
process.stdout.write(`| first request (median) | ${firstCold.toFixed(1)} ms | ${firstWarm.toFixed(1)} ms |\n`);
process.stdout.write(`| later requests (median) | ${med(rows.map((r) => r.cold.steadyMs)).toFixed(1)} ms | ${med(rows.map((r) => r.warm.steadyMs)).toFixed(1)} ms |\n`);
process.stdout.write(`\nfirst request / steady request: ${(firstCold / steady).toFixed(1)}x without warmup, ${(firstWarm / steady).toFixed(1)}x with it\n`);
if (args.json) writeFileSync(args.json, JSON.stringify({ model: model.describe, kind: args.kind, rows }, null, 2));
rmSync(work, { recursive: true, force: true });
