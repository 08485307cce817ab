/**
 * The LLM serving benchmark (issue 21): output tokens/s and time to first token (p50, p99) at 1, 8
 * and 32 concurrent streams on three models — tiny_gpt (the test model: so small that a step is
 * per-call overhead), mid_gpt (made here: d=384, 4 layers, 36 MB of weights, so a decode step is
 * bound by reading the weights, as a real LLM's is) and tiny_llama (a Llama-architecture model in
 * the onnx-community layout, scripts/llm-families.ts) — four ways, in one run:
 *   (a) naive — one request at a time on raw onnxruntime-node in this process (no HTTP, no batching:
 *               prefill, then one token per session.run with the KV cache fed back), requests waiting
 *               their turn in arrival order: what serving an LLM without a token loop scheduler is;
 *   (b) tsi   — the tsi server in a child process, `generate_stream` over HTTP with server-sent
 *               events, in-flight batching (max_num_seqs 32), its defaults otherwise (a decode and
 *               a prefill worker); the client is node:http on keep-alive connections opened by
 *               the warm-up;
 *   (c) transformers.js sequential — @huggingface/transformers' generate() on the same folder, one
 *               request at a time in this process: what a Node server wrapping it does;
 *   (d) transformers.js batched — its generate() over each round of the streams' prompts at once,
 *               left-padded: the best it can do, knowing every prompt up front (bench/llm-transformers.ts).
 * Each stream is a closed-loop client sending its requests one after another; every request
 * generates exactly --tokens tokens (ignore_eos) from a prompt of 5 to 40 words. The naive side runs
 * ORT on all the cores (its fastest). The last column is CPU time per 1000 tokens (tsi: the server
 * process, all its threads — in brackets its main thread, which handles requests and every token's
 * response — plus the client's; naive: this process): on a shared machine the tokens/s of both sides
 * move with the neighbours' load, the CPU each token costs much less. The TTFT column adds in
 * brackets the server's own mean (its statistics API: request arrival to first token sent), which
 * leaves out the client and the loopback.
 *
 * Run:  npm run bench:llm   (`-- --llamacpp`: the comparison with llama.cpp on the same weights,
 *       bench/llm-llamacpp.ts, instead; flags: --streams 1,8,32  --requests <per stream; default: 4, and at
 *       least 16 in all>  --tokens <64>
 *       --models tiny_gpt,mid_gpt,tiny_llama  --server tsx|dist (tsx: the sources; dist needs a fresh `npm run build`)
 *       --grammar-only: only the structured-output comparison (benchGrammar); --prefix-only: only the
 *       prefix-cache one; --skip-extras: neither; --markdown: the tables become docs/performance.md's section)
 * First it prints tokenizer throughput, the tokenizer against the byte-level BPE it replaced.
 * Targets (issue 36), printed met or missed: on mid_gpt, tsi ≥ 4× naive tokens/s at 32 streams, TTFT
 * p50 at 8 streams ≤ 2× at 1, and at 8 streams ≥ 4× transformers.js sequential and ≥ 1.5× its
 * batched generate; on tiny_gpt, the server's CPU per 1000 tokens at 32 streams ≤ 110 ms (its main
 * thread and the rest — decode and prefill workers, GC — shown apart).
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import { markdownTable } from './markdown.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { computeCores } from '../runtime-node/onnx/session-options.js';
import { TINY_GPT } from '../scripts/llm-model.js';
import { Tokenizer } from '../core/llm/tokenizer.js';
import { tinySpec, writeFamilyFolder } from '../scripts/llm-families.js';
import { referenceDecoder } from '../test/node/llm-reference.js';
import { Tokenizer as ByteBpeTokenizer } from './byte-bpe-tokenizer.js';
import { drive as driveStreams, MID_GPT, pct, tsiRequest, writeGptFolder, type Result } from './llm-common.js';
import { oneAtATime, transformersPeer } from './llm-transformers.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

// --llamacpp: tsi against llama.cpp on the same weights instead (bench/llm-llamacpp.ts, its own
// flags and its own section of docs/performance.md, named after the script at exit).
const llamacpp = process.argv.indexOf('--llamacpp');
if (llamacpp >= 0) {
  process.argv.splice(llamacpp, 1);
  process.argv[1] = join(ROOT, 'bench', 'llm-llamacpp.ts');
  await import('./llm-llamacpp.js');
  process.exit(0);
}

const { values: args } = parseArgs({
  options: {
    streams: { type: 'string', default: '1,8,32' },
    requests: { type: 'string' },
    tokens: { type: 'string', default: '64' },
    server: { type: 'string', default: 'tsx' },
    models: { type: 'string', default: 'tiny_gpt,mid_gpt,tiny_llama' },
    // The structured-output comparison only (no naive side, no model table).
    'grammar-only': { type: 'boolean', default: false },
    // The prefix-cache comparison only.
    'prefix-only': { type: 'boolean', default: false },
    // The model table only (no grammar or prefix-cache comparison).
    'skip-extras': { type: 'boolean', default: false },
  },
});
const STREAMS = args.streams.split(',').map(Number);
// Every stream starts at once, so each stream's first request meets a burst the later ones do not:
// 4 a stream keeps that to a quarter of the samples (and 16 at least, for percentiles).
const perStreamAt = (streams: number) => (args.requests ? Number(args.requests) : Math.max(4, Math.ceil(16 / streams)));
const TOKENS = Number(args.tokens);
const drive = (streams: number, one: (prompt: string, firstToken: () => void) => Promise<number>, perStream = perStreamAt(streams)) => driveStreams(streams, one, perStream);
const MODELS = args.models.split(',');
for (const m of MODELS) if (!['tiny_gpt', 'mid_gpt', 'tiny_llama'].includes(m)) throw new Error(`--models: '${m}' is not tiny_gpt, mid_gpt or tiny_llama`);

/**
 * The third: a tiny Llama (RoPE, grouped-query attention with 2 KV heads for 4, RMSNorm, SwiGLU) in
 * the onnx-community layout (onnx/model.onnx with external data), with tiny_gpt's tokenizer.
 */
async function writeTinyLlama(dir: string): Promise<void> {
  const tiny = join(ROOT, 'models', 'tiny_gpt');
  const tok = { json: readFileSync(join(tiny, '1', 'tokenizer.json'), 'utf8'), config: readFileSync(join(tiny, '1', 'tokenizer_config.json'), 'utf8') };
  await writeFamilyFolder(join(dir, '1'), tinySpec('llama', TINY_GPT.vocab, TINY_GPT.vocab - 1, TINY_GPT.vocab - 1), tok, ['model']);
  const config = readFileSync(join(tiny, 'config.pbtxt'), 'utf8').replace(/^#.*\n/gm, '').replace('name: "tiny_gpt"', 'name: "tiny_llama"');
  writeFileSync(join(dir, 'config.pbtxt'), config);
}

/**
 * Tokenizer throughput: tokens/s encoded by the tokenizer (@huggingface/tokenizers) against the
 * hand-written byte-level BPE it replaced, on the same text with the same files, ids checked equal.
 */
function tokenizerThroughput(): void {
  const text = readFileSync(join(ROOT, 'docs', 'llm.md'), 'utf8') + readFileSync(join(ROOT, 'core', 'llm', 'engine.ts'), 'utf8');
  const files = [['tiny_gpt', join(ROOT, 'models', 'tiny_gpt', '1')], ['llama3', join(ROOT, 'node_modules', '@lenml', 'tokenizer-llama3', 'models')]];
  console.log('\n| tokenizer.json | new tokens/s | old tokens/s | new / old |\n|---|---:|---:|---:|');
  for (const [name, dir] of files) {
    const json = readFileSync(join(dir!, 'tokenizer.json'), 'utf8');
    const neu = Tokenizer.fromJson(json, readFileSync(join(dir!, 'tokenizer_config.json'), 'utf8'));
    const old = new ByteBpeTokenizer(JSON.parse(json));
    // Distinct chunks, so neither side's per-word cache sees the same text twice in a row.
    const chunks = Array.from({ length: 8 }, (_, i) => text.slice(i * 97) + String(i));
    const rate = (enc: (s: string) => number[]) => {
      enc(chunks[0]!);
      let tokens = 0;
      const t0 = performance.now();
      for (const c of chunks) tokens += enc(c).length;
      return tokens / ((performance.now() - t0) / 1000);
    };
    const a = neu.encode(chunks[1]!, { addSpecialTokens: false }).join();
    const b = old.encode(chunks[1]!, { addSpecialTokens: false }).join();
    if (a !== b) throw new Error(`${name}: the two tokenizers disagree`);
    const rn = rate((s) => neu.encode(s, { addSpecialTokens: false }));
    const ro = rate((s) => old.encode(s, { addSpecialTokens: false }));
    console.log(`| ${name} | ${rn.toFixed(0)} | ${ro.toFixed(0)} | ${(rn / ro).toFixed(2)}× |`);
  }
  console.log('(numbers from a loaded, shared machine: compare the ratio, not the rates)');
}

/** The server's own TTFT sum and count (statistics API): arrival to first token, without the client. */
async function serverTtft(model: string): Promise<{ ns: number; count: number }> {
  const stats = (await (await fetch(`http://127.0.0.1:${server.port}/v2/models/${model}/stats`)).json()) as { model_stats: { llm_stats: { time_to_first_token: { count: number; ns: number } } }[] };
  return stats.model_stats[0]!.llm_stats.time_to_first_token;
}

const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/**
 * CPU time of the server process, all its threads (Linux: /proc, in clock ticks of 10 ms); NaN
 * elsewhere. With the client's, it is what tsi spends per token, whatever else the machine runs.
 */
function serverCpuMs(thread?: 'main'): number {
  try {
    const pid = server.child.pid!;
    // A process's main thread is the task whose id is the pid's.
    const fields = readFileSync(thread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return NaN;
  }
}

// The naive side gets the thread count that is fastest for one request at a time: all the cores.
const threads = Math.max(1, computeCores(availableParallelism()));

const work = mkdtempSync(join(tmpdir(), 'tsi-bench-llm-'));
const repo = join(work, 'repo');
mkdirSync(repo);
symlinkSync(join(ROOT, 'models', 'tiny_gpt'), join(repo, 'tiny_gpt'));
// Its KV cache is 6× tiny_gpt's per token: 32 streams of up to 40 + 64 tokens take ~40 MB.
if (MODELS.includes('mid_gpt')) writeGptFolder(join(repo, 'mid_gpt'), MID_GPT, 128 * 2 ** 20);
if (MODELS.includes('tiny_llama')) await writeTinyLlama(join(repo, 'tiny_llama'));
// mid_gpt with a 2,048-token context, twice: prefix caching on (the default) and off.
const PREFIX_GPT = { ...MID_GPT, context: 2048, name: 'prefix_gpt' };
const prefixModel = writeGptFolder(join(repo, 'prefix_gpt'), PREFIX_GPT, 64 * 2 ** 20);
writeGptFolder(join(repo, 'prefix_gpt_off'), PREFIX_GPT, 64 * 2 ** 20, 'KIND_CPU', 'prefix_gpt_off', prefixModel);
const offConfig = join(repo, 'prefix_gpt_off', 'config.pbtxt');
writeFileSync(offConfig, readFileSync(offConfig, 'utf8').replace('parameters [', 'parameters [\n  { key: "enable_prefix_caching" value: { string_value: "false" } },'));
tokenizerThroughput();
const { argv, build } = tsiServer(repo, work, { server: args.server });
const server = await spawnServer(argv, 'tsi');
console.log(`${build}, ${TOKENS} tokens per request, ${STREAMS.map((n) => `${perStreamAt(n)} requests per stream at ${n}`).join(', ')}, naive ORT threads ${threads}, ${availableParallelism()} cores`);

interface Row {
  model: string;
  streams: number;
  tsi: Result;
  naive: Result;
  /** transformers.js: one request at a time, and each round of requests as one batch. */
  tfSeq: Result;
  tfBatch: Result;
  serverTtftMs: number;
  cpu: { server: number; main: number; client: number; naive: number };
}

/** Both sides on one model, at every stream count. */
async function benchModel(model: string): Promise<Row[]> {
  const ref = await referenceDecoder(join(repo, model), threads);
  const peer = await transformersPeer(join(repo, model), work, ref.tokenizer, TOKENS, threads);
  // The naive server: one request at a time, in arrival order.
  const naiveRequest = oneAtATime(async (prompt: string, firstToken: () => void) => (await ref.greedy(prompt, TOKENS, { ignoreEos: true, onToken: firstToken })).length);
  const tsi = (p: string, f: () => void) => tsiRequest(server.port, model, p, TOKENS, f);
  try {
    // Warm both sides (first runs allocate), and open the clients' keep-alive connections to tsi: a
    // TCP handshake is the client's cost, not the server's time to first token.
    await drive(Math.max(2, ...STREAMS), tsi, 1);
    await drive(1, naiveRequest);
    await drive(1, peer.sequential);
    await peer.batched(2, 1);
    const rows: Row[] = [];
    for (const streams of STREAMS) {
      let cpu = process.cpuUsage();
      const naive = await drive(streams, naiveRequest);
      const naiveCpu = cpuMs(process.cpuUsage(cpu));
      const tfSeq = await drive(streams, peer.sequential);
      const tfBatch = await peer.batched(streams, perStreamAt(streams));
      const ttft0 = await serverTtft(model);
      cpu = process.cpuUsage();
      const server0 = serverCpuMs();
      const main0 = serverCpuMs('main');
      const res = await drive(streams, tsi);
      const client = cpuMs(process.cpuUsage(cpu));
      const server1 = serverCpuMs();
      const main1 = serverCpuMs('main');
      const ttft1 = await serverTtft(model);
      rows.push({
        model, streams, tsi: res, naive, tfSeq, tfBatch, serverTtftMs: (ttft1.ns - ttft0.ns) / 1e6 / (ttft1.count - ttft0.count),
        cpu: { server: server1 - server0, main: main1 - main0, client, naive: naiveCpu },
      });
    }
    return rows;
  } finally {
    await ref.release();
    await peer.release();
  }
}

/**
 * What the grammar costs a token: tiny_gpt sampled at temperature 1, free and constrained by a JSON
 * schema (an object holding a list of strings, which a random model fills until the budget closes
 * it, so both sides write about --tokens tokens), by a regular expression and by a GBNF grammar
 * (words and nested lists), at the largest stream count, all over HTTP, in this run. The cost per token is the server's main thread's CPU (where masks are computed) per
 * token, constrained minus free.
 */
async function benchGrammar(): Promise<void> {
  const streams = Math.max(...STREAMS);
  const schema = JSON.stringify({ type: 'object', properties: { items: { type: 'array', items: { type: 'string' } } }, required: ['items'] });
  let seed = 0;
  // A regular expression and a GBNF grammar (grammar-cfg.ts) that a random model can also fill for --tokens tokens.
  const regex = '([a-z]+[ ,.])*[a-z]*';
  const gbnf = 'root ::= item ("," item)*\nitem ::= [a-z ]+ | "(" root ")"';
  const sides = { free: {}, constrained: { guided_json: schema }, regex: { guided_regex: regex }, gbnf: { guided_grammar: gbnf } } as const;
  const out: Record<string, { res: Result; mainMs: number }> = {};
  for (const [name, extra] of Object.entries(sides)) {
    const one = (p: string, f: () => void) => tsiRequest(server.port, 'tiny_gpt', p, TOKENS, f, { ...extra, temperature: 1, seed: seed++ });
    await drive(streams, one, 1);
    const main0 = serverCpuMs('main');
    const res = await drive(streams, one);
    out[name] = { res, mainMs: serverCpuMs('main') - main0 };
  }
  const f = (x: number, d = 1) => x.toFixed(d);
  console.log(`\n| tiny_gpt, ${streams} streams, temperature 1 | tokens/s | tokens | server main thread CPU ms per 1k tokens |`);
  console.log('|---|---:|---:|---:|');
  for (const [name, { res, mainMs }] of Object.entries(out)) console.log(`| ${name} | ${f(res.tokensPerS, 0)} | ${res.tokens} | ${f((mainMs * 1000) / res.tokens, 0)} |`);
  const fr = out.free!;
  for (const name of ['constrained', 'regex', 'gbnf']) {
    const c = out[name]!;
    console.log(`grammar (${name === 'constrained' ? 'JSON schema' : name}): constrained / free tokens/s ${f(c.res.tokensPerS / fr.res.tokensPerS, 2)}×; mask cost ≈ ${f(c.mainMs / c.res.tokens - fr.mainMs / fr.res.tokens, 2)} ms of main-thread CPU per token (loaded shared machine: compare the rows, not absolute numbers)`);
  }
}

/**
 * What automatic prefix caching saves: a ~1,000-token system prompt, then 16 requests that share it
 * (each its own question), one at a time, TTFT p50 with the cache and without (the same model twice,
 * one with enable_prefix_caching false), in this run. Each side is warmed with the prompt once.
 */
async function benchPrefix(): Promise<void> {
  const system = Array.from({ length: 450 }, (_, i) => `w${(i * 7) % 97}`).join(' ');
  const p50: Record<string, number> = {};
  for (const model of ['prefix_gpt', 'prefix_gpt_off']) {
    await tsiRequest(server.port, model, `${system}\nwarm up`, 2, () => {});
    const ttft: number[] = [];
    for (let i = 0; i < 16; i++) {
      const t0 = performance.now();
      await tsiRequest(server.port, model, `${system}\nquestion ${i}: why?`, 2, () => ttft.push(performance.now() - t0));
    }
    p50[model] = pct(ttft, 50);
  }
  const f = (x: number) => x.toFixed(1);
  console.log(`\nprefix cache (mid_gpt, ~1,000-token shared system prompt, 16 requests one at a time): TTFT p50 ${f(p50.prefix_gpt!)} ms with, ${f(p50.prefix_gpt_off!)} ms without: ${f(p50.prefix_gpt_off! / p50.prefix_gpt!)}× (loaded shared machine: compare the two, not absolute numbers)`);
}

try {
  const rows: Row[] = [];
  if (args['prefix-only']) {
    await benchPrefix();
    MODELS.length = 0;
  }
  if (args['grammar-only']) {
    await benchGrammar();
    MODELS.length = 0;
  }
  for (const model of MODELS) rows.push(...(await benchModel(model)));
  if (!args['grammar-only'] && !args['prefix-only'] && !args['skip-extras']) {
    await benchGrammar();
    await benchPrefix();
  }
  const f = (x: number, d = 1) => x.toFixed(d);
  const head = ['model', 'streams', 'tsi tokens/s', 'naive tokens/s', 'tsi / naive', 'transformers.js sequential / batched tokens/s', 'tsi / transformers.js sequential / batched', 'tsi TTFT p50 / p99 (ms) [server-side mean]', 'naive TTFT p50 / p99 (ms)', 'transformers.js sequential / batched TTFT p50 (ms)', 'CPU ms per 1k tokens: tsi server = its main thread + the rest (workers, GC); client; naive'];
  const perK = (ms: number, res: Result) => (Number.isNaN(ms) ? '–' : f((ms * 1000) / res.tokens, 0));
  const table = rows.map((r) => [
    r.model, r.streams, f(r.tsi.tokensPerS, 0), f(r.naive.tokensPerS, 0), `${f(r.tsi.tokensPerS / r.naive.tokensPerS, 2)}×`,
    `${f(r.tfSeq.tokensPerS, 0)} / ${f(r.tfBatch.tokensPerS, 0)}`, `${f(r.tsi.tokensPerS / r.tfSeq.tokensPerS, 2)}× / ${f(r.tsi.tokensPerS / r.tfBatch.tokensPerS, 2)}×`,
    `${f(pct(r.tsi.ttftMs, 50))} / ${f(pct(r.tsi.ttftMs, 99))} [${f(r.serverTtftMs)}]`, `${f(pct(r.naive.ttftMs, 50))} / ${f(pct(r.naive.ttftMs, 99))}`,
    `${f(pct(r.tfSeq.ttftMs, 50))} / ${f(pct(r.tfBatch.ttftMs, 50))}`,
    `${perK(r.cpu.server, r.tsi)} = ${perK(r.cpu.main, r.tsi)} + ${perK(r.cpu.server - r.cpu.main, r.tsi)}; ${perK(r.cpu.client, r.tsi)}; ${perK(r.cpu.naive, r.naive)}`,
  ]);
  if (rows.length > 0) {
    console.log(`\n| ${head.join(' | ')} |\n|---|${head.slice(1).map(() => '---:').join('|')}|`);
    for (const r of table) console.log(`| ${r.join(' | ')} |`);
    markdownTable('tsi against the naive loop and transformers.js (ratios from this run; each side runs at its own time, so a neighbour\'s load falls on one side only)', [head, ...table]);
  }
  // The issue's targets, each with this run's number.
  const targets: (string | number)[][] = [['target', 'measured', '']];
  const target = (what: string, value: number, met: boolean, unit = '×') => {
    targets.push([what, `${f(value, unit === '×' ? 2 : 0)}${unit}`, met ? 'met' : 'missed']);
    console.log(`${what}: ${f(value, unit === '×' ? 2 : 0)}${unit} ${met ? 'MET' : 'MISSED'}`);
  };
  console.log();
  for (const model of MODELS) {
    const at = (n: number) => rows.find((r) => r.model === model && r.streams === n);
    const r32 = at(32);
    const r1 = at(1);
    const r8 = at(8);
    // Issue 36's targets: throughput and TTFT on mid_gpt (memory-bound steps, like a real LLM's), serving cost on tiny_gpt.
    if (r8 && model === 'mid_gpt') {
      const seq = r8.tsi.tokensPerS / r8.tfSeq.tokensPerS;
      const batch = r8.tsi.tokensPerS / r8.tfBatch.tokensPerS;
      target(`${model}: tsi ≥ 4× transformers.js sequential at 8 streams`, seq, seq >= 4);
      target(`${model}: tsi ≥ 1.5× transformers.js batched at 8 streams`, batch, batch >= 1.5);
    }
    if (r32 && model === 'mid_gpt') target(`${model}: tsi ≥ 4× naive at 32 streams`, r32.tsi.tokensPerS / r32.naive.tokensPerS, r32.tsi.tokensPerS >= 4 * r32.naive.tokensPerS);
    if (r1 && r8 && model === 'mid_gpt') {
      const ratio = pct(r8.tsi.ttftMs, 50) / pct(r1.tsi.ttftMs, 50);
      target(`${model}: tsi TTFT p50 at 8 streams ≤ 2× at 1`, ratio, ratio <= 2);
    }
    if (r32 && model === 'tiny_gpt' && !Number.isNaN(r32.cpu.server)) {
      const perToken = (ms: number) => (ms * 1000) / r32.tsi.tokens;
      target(`tiny_gpt: server CPU per 1k tokens at 32 streams ≤ 110 ms (main thread ${f(perToken(r32.cpu.main), 0)}, workers and the rest ${f(perToken(r32.cpu.server - r32.cpu.main), 0)})`, perToken(r32.cpu.server), perToken(r32.cpu.server) <= 110, ' ms');
    }
  }
  if (targets.length > 1) markdownTable('Targets (issue 36)', targets);
} finally {
  await stopServer(server.child);
  rmSync(work, { recursive: true, force: true });
}
