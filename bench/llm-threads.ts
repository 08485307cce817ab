/**
 * The decoding and prefill workers' intra-op threads, swept: each model served by one server as
 * several models that differ only in `decode_thread_count` / `prefill_thread_count` /
 * `decode_spinning` (or set none: the server's default rule), each driven the same way (closed-loop
 * generate_stream streams over HTTP, as a user serves it), the variants alternating over rounds (the
 * order reversed every other round) so that a neighbour's load falls on all of them alike. Prints
 * tokens/s, TTFT p50, the ratio to the first variant of the same round, and where a decode step's
 * time went (llm_stats.decode_step_split, ms per step: the graph, the inputs, sampling on the server's
 * thread, streaming, the decoder idle between steps), per variant and round, then the medians.
 *
 * Models: mid_gpt (tiny_gpt's tokenizer, 4 layers), or a Llama at SmolLM2-135M's shape in the fused
 * (gqa) export layout with the Llama 2 tokenizer (vocab 32000), int4 (`smollm_q4`) or fp32 (`smollm`).
 *
 * Run:  npx tsx bench/llm-threads.ts [--models mid_gpt,smollm_q4,smollm] [--streams 1,8] [--tokens 32]
 *       [--requests 2] [--rounds 2] [--threads 1:1,auto,2:2:spin] [--markdown]
 *       (a variant is decode:prefill threads, then `:spin` / `:nospin` for decode_spinning true / false,
 *       else the rule's; `auto` sets no thread parameter at all: the server's default rule)
 *       npm run bench:llm-threads
 */

import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { decoderModel } from '../scripts/llm-model.js';
import { writeFamilyFolder, type FamilySpec } from '../scripts/llm-families.js';
import { drive, MID_GPT, pct, tsiRequest, writeGptFolder } from './llm-common.js';
import { MARKDOWN, markdownTable } from './markdown.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

const { values: args } = parseArgs({
  options: {
    models: { type: 'string', default: 'mid_gpt' },
    model: { type: 'string' },
    streams: { type: 'string', default: '8' },
    tokens: { type: 'string', default: '32' },
    requests: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '2' },
    threads: { type: 'string', default: '1:1,2:1,1:2,2:2' },
  },
});
const SMOLLM: FamilySpec = { family: 'llama', vocab: 32000, dModel: 576, heads: 9, kvHeads: 3, headDim: 64, layers: 30, ffn: 1536, context: 2048, seed: 3, bos: 1, eos: 2, layout: 'gqa' };
const MODELS = (args.model ?? args.models).split(',');
for (const m of MODELS) if (!['mid_gpt', 'smollm_q4', 'smollm'].includes(m)) throw new Error(`--models: '${m}' is not mid_gpt, smollm_q4 or smollm`);
const STREAMS = args.streams.split(',').map(Number);

interface Variant { label: string; params: Record<string, string> }
const variants: Variant[] = args.threads.split(',').map((v) => {
  if (v === 'auto') return { label: 'default rule', params: {} };
  const [d, p, spin] = v.split(':');
  const params: Record<string, string> = { decode_thread_count: d!, prefill_thread_count: p ?? d! };
  if (spin) params.decode_spinning = String(spin === 'spin');
  return { label: `decode ${d}, prefill ${p ?? d}${spin ? (spin === 'spin' ? ', spinning' : ', not spinning') : ''}`, params };
});
const work = mkdtempSync(join(tmpdir(), 'tsi-bench-threads-'));
const repo = join(work, 'repo');
mkdirSync(repo);
const nameOf = (model: string, i: number) => `${model}_v${i}`;
const paramLines = (params: Record<string, string>) => Object.entries(params).map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }\n`).join('');
for (const m of MODELS) {
  if (m === 'mid_gpt') {
    const model = decoderModel(MID_GPT);
    variants.forEach((v, i) => {
      const dir = join(repo, nameOf(m, i));
      writeGptFolder(dir, MID_GPT, 128 * 2 ** 20, 'KIND_CPU', nameOf(m, i), model);
      const cfg = join(dir, 'config.pbtxt');
      writeFileSync(cfg, readFileSync(cfg, 'utf8') + paramLines(v.params));
    });
    continue;
  }
  const tokDir = join(import.meta.dirname, '..', 'node_modules', '@lenml', 'tokenizer-llama2', 'models');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  const variant = m === 'smollm_q4' ? 'model_q4' : 'model';
  // One version folder written; the other variants link to it (one copy on disk, loaded per model).
  const first = join(repo, nameOf(m, 0), '1');
  await writeFamilyFolder(first, SMOLLM, tok, [variant]);
  for (const [i, v] of variants.entries()) {
    const dir = join(repo, nameOf(m, i));
    if (i > 0) {
      mkdirSync(dir, { recursive: true });
      symlinkSync(first, join(dir, '1'));
    }
    writeFileSync(join(dir, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "${variant}" } }\nparameters { key: "kv_cache_bytes" value { string_value: "67108864" } }\n${paramLines(v.params)}`);
  }
}
const { argv } = tsiServer(repo, work);
const server = await spawnServer(argv, 'tsi');
const tokens = Number(args.tokens);

interface Split { steps: number; graph_ns: number; inputs_ns: number; sampling_ns: number; streaming_ns: number; idle_ns: number }
const splitOf = async (name: string): Promise<Split> => {
  const r = await fetch(`http://127.0.0.1:${server.port}/v2/models/${name}/stats`);
  return ((await r.json()) as { model_stats: { llm_stats: { decode_step_split: Split } }[] }).model_stats[0]!.llm_stats.decode_step_split;
};
const perStep = (a: Split, b: Split, k: keyof Split) => (b[k] - a[k]) / Math.max(1, b.steps - a.steps) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const head = `${tokens} tokens, ${args.requests} requests a stream, ${args.rounds} rounds; ${availableParallelism()} cores, load average ${loadavg()[0]!.toFixed(1)} at the start (a shared machine: compare variants within a round)`;
console.log(head);
const rounds: (string | number)[][] = [['model', 'streams', 'round', 'variant', 'tokens/s', 'vs first', 'TTFT p50 (ms)', 'graph', 'inputs', 'sampling', 'streaming', 'idle']];
const summary: (string | number)[][] = [['model', 'streams', 'variant', 'tokens/s', 'vs first', 'TTFT p50 (ms)', 'graph', 'inputs', 'sampling', 'streaming', 'idle']];
try {
  for (const m of MODELS) {
    const names = variants.map((_, i) => nameOf(m, i));
    for (const name of names) await drive(1, (p, f) => tsiRequest(server.port, name, p, tokens, f), 1);
    for (const streams of STREAMS) {
      const got = variants.map(() => ({ rate: [] as number[], ratio: [] as number[], ttft: [] as number[], split: [] as number[][] }));
      for (let r = 1; r <= Number(args.rounds); r++) {
        const order = r % 2 ? [...names.keys()] : [...names.keys()].reverse();
        const rows: (string | number)[][] = [];
        const rate: number[] = [];
        for (const i of order) {
          const before = await splitOf(names[i]!);
          const res = await drive(streams, (p, f) => tsiRequest(server.port, names[i]!, p, tokens, f), Number(args.requests));
          const after = await splitOf(names[i]!);
          const split = (['graph_ns', 'inputs_ns', 'sampling_ns', 'streaming_ns', 'idle_ns'] as const).map((k) => perStep(before, after, k));
          rate[i] = res.tokensPerS;
          got[i]!.rate.push(res.tokensPerS);
          got[i]!.ttft.push(pct(res.ttftMs, 50));
          got[i]!.split.push(split);
          rows[i] = [m, streams, r, variants[i]!.label, res.tokensPerS.toFixed(1), '', pct(res.ttftMs, 50).toFixed(1), ...split.map((x) => x.toFixed(2))];
        }
        for (const [i, row] of rows.entries()) {
          row[5] = `${(rate[i]! / rate[0]!).toFixed(2)}×`;
          got[i]!.ratio.push(rate[i]! / rate[0]!);
          rounds.push(row);
          console.log(`| ${row.join(' | ')} |`);
        }
      }
      for (const [i, g] of got.entries()) {
        summary.push([m, streams, variants[i]!.label, median(g.rate).toFixed(1), `${median(g.ratio).toFixed(2)}×`, median(g.ttft).toFixed(1), ...[0, 1, 2, 3, 4].map((k) => median(g.split.map((s) => s[k]!)).toFixed(2))]);
        console.log(`| median | ${summary.at(-1)!.join(' | ')} |`);
      }
    }
  }
} finally {
  await stopServer(server.child);
  rmSync(work, { recursive: true, force: true });
}
if (MARKDOWN) {
  markdownTable(`${head}. Medians over the rounds; "vs first": the median of each round's ratio to the first variant in that round. graph … idle: llm_stats.decode_step_split, ms per decode step (graph and inputs in the decoding worker; sampling and streaming on the server's thread; idle: the decoder between steps).`, summary);
  markdownTable('Each round', rounds);
}
