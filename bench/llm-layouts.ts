/**
 * The decode step of a Llama at SmolLM2-135M's shape (d 576, 30 layers, 9 / 3 heads × 64, ffn 1536,
 * vocab 32000) in the two export layouts tsi's builder writes: Optimum's plain graph (attention from
 * MatMul/Softmax, the KV cache concatenated by the graph) and onnxruntime-genai's fused one
 * (GroupQueryAttention with rotary inside, SimplifiedLayerNormalization, one MatMulNBits for q/k/v and
 * one for gate/up, int8 activations in the int4 variant). Each is run through core's KvBatch as the
 * decoding worker runs it, rounds alternating between layouts so a loaded machine hurts both alike;
 * printed: median ms per step, the ratio, and onnxruntime's profile (kernel time by operator) of one
 * extra round per layout: its decode steps, and a prompt of PREFILL tokens (where a time to first token goes).
 * `rewritten` is the plain graph as the server serves it by default (graph/plain-decoder.ts read into
 * graph/fused-decoder.ts: the fused layout, int8 activations for int4), `rewritten_exact` the same with
 * the export's own accuracy level (rewrite_plain_layout: exact).
 *
 * Run:  npx tsx bench/llm-layouts.ts   (env: ROWS=1,8  VARIANTS=model_q4,model  ROUNDS=3  STEPS=24
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { layoutOf } from '../core/llm/decoder.js';
import { KvBatch, type KvArray, type TensorKit } from '../core/llm/kv-batch.js';
import { readOnnxIo } from '../runtime-node/onnx/info.js';
import { markdownTable } from './markdown.js';
import { opCell, profileDecoder } from './ort-profile.js';
import { familyConfig, familyModel, type FamilySpec, type Variant } from '../scripts/llm-families.js';
import { fusedDecoderModel } from '../graph/fused-decoder.js';
import { readPlainDecoder } from '../graph/plain-decoder.js';

const SMOLLM: FamilySpec = { family: 'llama', vocab: 32000, dModel: 576, heads: 9, kvHeads: 3, headDim: 64, layers: Number(process.env.LAYERS ?? 30), ffn: 1536, context: 2048, seed: 3, bos: 1, eos: 2 };
/** The builder's two layouts, and the plain one rewritten as the server does at load. */
type Layout = 'plain' | 'gqa' | 'rewritten' | 'rewritten_exact';
const list = (v: string | undefined, d: string) => (v ?? d).split(',').filter(Boolean);
const ROWS = list(process.env.ROWS, '1,8').map(Number);
const VARIANTS = list(process.env.VARIANTS, 'model_q4,model') as Variant[];
const LAYOUTS = list(process.env.LAYOUTS, 'plain,rewritten,gqa') as Layout[];
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const STEPS = Number(process.env.STEPS ?? 24);
const THREADS = Number(process.env.THREADS ?? cpus().length);
const PREFILL = Number(process.env.PREFILL ?? 512);
const cacheDir = join(tmpdir(), 'tsi-llm-layouts');

/** What writes the models: a folder built by other sources is not this one. */
const builderKey = createHash('sha256').update(await readFile(new URL('../scripts/llm-families.ts', import.meta.url))).update(await readFile(new URL('../graph/onnx-builder.ts', import.meta.url))).update(await readFile(new URL('../graph/fused-decoder.ts', import.meta.url))).update(await readFile(new URL('../graph/plain-decoder.ts', import.meta.url))).digest('hex').slice(0, 12);

/** The model's folder, built once per machine and builder (the weights are seeded: the same bytes every time). */
async function modelFile(variant: Variant, layout: Layout): Promise<string> {
  const dir = join(cacheDir, `${SMOLLM.layers}_${layout}_${variant}_${builderKey}`);
  const file = join(dir, 'model.onnx');
  if (await stat(file).then(() => true, () => false)) return file;
  let model: Uint8Array, data: Uint8Array | undefined;
  if (layout === 'rewritten' || layout === 'rewritten_exact') {
    const plain = await modelFile(variant, 'plain');
    const t0 = performance.now();
    const bytes = await readFile(plain);
    let external: Uint8Array | undefined;
    const read = readPlainDecoder(bytes, { context: SMOLLM.context, external: () => (external ??= new Uint8Array(readFileSync(join(plain, '..', 'model.onnx_data')))) });
    if (!read.ok) throw new Error(`the plain graph was not recognised: ${read.reason}`);
    ({ model, data } = fusedDecoderModel(read.weights, { name: 'rewritten', external: 'model.onnx_data', int8Activations: layout === 'rewritten' }));
    console.log(`${variant}: the plain graph read and rewritten in ${((performance.now() - t0) / 1000).toFixed(1)} s (${read.summary})`);
  } else ({ model, data } = familyModel({ ...SMOLLM, layout }, variant));
  await mkdir(dir, { recursive: true });
  if (data) await writeFile(join(dir, 'model.onnx_data'), data);
  await writeFile(file, model);
  return file;
}

interface Run { ms: number; graphMs: number; inputMs: number; tokens: number[] }

async function open(variant: Variant, layout: Layout) {
  const path = await modelFile(variant, layout);
  const session = await ort.InferenceSession.create(path, { intraOpNumThreads: THREADS });
  const io = readOnnxIo(await readFile(path));
  const lay = layoutOf(io, familyConfig(SMOLLM));
  const kvType = lay.kvType;
  const kit: TensorKit<ort.Tensor> = {
    int64: (d, dims) => new ort.Tensor('int64', d, dims),
    bool: (d, dims) => new ort.Tensor('bool', d, dims),
    kv: (d, dims) => new ort.Tensor(kvType, d as KvArray, dims),
    data: (t) => t.data as Float32Array,
    dims: (t) => t.dims,
    run: (f, fe) => session.run(f, fe) as Promise<Record<string, ort.Tensor>>,
  };
  return { session, lay, kit };
}

/** STEPS greedy decode steps of B rows after their prompts; ms per step (the first, re-layout, left out). */
async function decode(s: Awaited<ReturnType<typeof open>>, B: number): Promise<Run> {
  const batch = new KvBatch(s.lay);
  const rows = Array.from({ length: B }, (_, i) => ({ seq: i, tokens: Array.from({ length: 20 + (i % 5) * 3 }, (_, k) => 3 + ((k * 7 + i * 13) % 31000)) }));
  let next = (await batch.step({ kind: 'prefill', free: [], rows, greedy: true }, s.kit));
  let toks = argmax(next.logits!, next.vocab);
  const out: number[] = [toks[0]!];
  let wall = 0, graph = 0, input = 0;
  for (let k = 0; k < STEPS; k++) {
    const t0 = performance.now();
    next = await batch.step({ kind: 'decode', free: [], rows: rows.map((r, b) => ({ seq: r.seq, token: toks[b]! })), greedy: true }, s.kit);
    toks = argmax(next.logits!, next.vocab);
    const dt = performance.now() - t0;
    out.push(toks[0]!);
    if (k === 0) continue;
    wall += dt;
    graph += next.inferNs / 1e6;
    input += next.inputNs / 1e6;
  }
  batch.dispose();
  const n = STEPS - 1;
  return { ms: wall / n, graphMs: graph / n, inputMs: input / n, tokens: out };
}

function argmax(logits: Float32Array, V: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < logits.length / V; r++) {
    let best = 0;
    for (let v = 1; v < V; v++) if (logits[r * V + v]! > logits[r * V + best]!) best = v;
    out.push(best);
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

console.log(`SmolLM2-135M shape (${SMOLLM.layers} layers), ${THREADS} intra-op threads, ${STEPS} steps × ${ROUNDS} alternating rounds (medians; on a shared machine compare within a row)`);
const table: (string | number)[][] = [['variant', 'rows', 'layout', 'ms/step', 'graph ms', 'inputs ms', 'tokens/s', `vs ${LAYOUTS[0]}`, `greedy tokens = ${LAYOUTS[0]}'s`]];
const profiles: (string | number)[][] = [['variant', 'layout', 'run', 'kernel time by operator (share, × calls a run)']];
for (const variant of VARIANTS) {
  const sessions = new Map<Layout, Awaited<ReturnType<typeof open>>>();
  for (const layout of LAYOUTS) sessions.set(layout, await open(variant, layout));
  for (const B of ROWS) {
    const runs = new Map<Layout, Run[]>(LAYOUTS.map((l) => [l, []]));
    for (let r = 0; r < ROUNDS; r++) for (const layout of r % 2 ? [...LAYOUTS].reverse() : LAYOUTS) runs.get(layout)!.push(await decode(sessions.get(layout)!, B));
    const base = median(runs.get(LAYOUTS[0]!)!.map((x) => x.ms));
    for (const layout of LAYOUTS) {
      const rs = runs.get(layout)!;
      const ms = median(rs.map((x) => x.ms));
      const same = rs[0]!.tokens.every((t, k) => t === runs.get(LAYOUTS[0]!)![0]!.tokens[k]);
      table.push([variant, B, layout, ms.toFixed(2), median(rs.map((x) => x.graphMs)).toFixed(2), median(rs.map((x) => x.inputMs)).toFixed(2), ((B * 1000) / ms).toFixed(1), `${(base / ms).toFixed(2)}×`, same ? 'yes' : 'no']);
      console.log(table.at(-1)!.join(' | '));
    }
  }
  for (const s of sessions.values()) await s.session.release();
  if (process.env.PROFILE !== '0') {
    for (const layout of LAYOUTS) {
      const p = await profileDecoder(await modelFile(variant, layout), familyConfig(SMOLLM), { decodeRows: [1], steps: STEPS, prefillTokens: PREFILL, threads: THREADS, spinning: true });
      profiles.push([variant, layout, 'decode step, 1 row', opCell(p.decode.get(1)!, 2)]);
      profiles.push([variant, layout, `prefill, ${PREFILL} tokens`, opCell(p.prefill!, 0)]);
      console.log(profiles.slice(-2).map((r) => r.join(' | ')).join('\n'));
    }
  }
}
markdownTable(`Decode steps of the SmolLM2-135M shape (${SMOLLM.layers} layers), ${THREADS} intra-op threads, ${STEPS} steps × ${ROUNDS} alternating rounds (medians; ratios from this run). \`rewritten\` is the plain graph as the server serves it by default (rewritten into the fused layout at load), \`rewritten_exact\` with rewrite_plain_layout: exact. The int4 gqa and rewritten graphs compute MatMulNBits with int8 activations, so their greedy tokens may part from the plain graph's; fp32 and rewritten_exact must not.`, table);
if (profiles.length > 1) markdownTable('onnxruntime profile (enableProfiling), kernel time by operator', profiles);
