/**
 * What the LLM benches share: the decoder folders they generate (tiny_gpt's tokenizer with a larger
 * body, so that a step is bound by reading the weights as a real LLM's is), and the client side:
 * closed-loop streams of generate_stream requests to a tsi server (node:http on keep-alive
 * connections, reading server-sent events), each request's time to first token, and the percentiles
 * the tables print. bench/llm.ts and bench/llm-gpu.ts measure the server the same way through it.
 */

import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decoderModel, hfConfigJson, TINY_GPT, type DecoderSpec } from '../scripts/llm-model.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** d=384, 4 layers, 36 MB: memory-bound steps, and the naive loop still makes a few hundred tokens/s on 2 cores. */
export const MID_GPT: DecoderSpec = { ...TINY_GPT, dModel: 384, heads: 6, layers: 4, ffn: 1536, seed: 22, name: 'mid_gpt' };
/** d=1024, 8 layers, ~420 MB: a GPU's size of work (a decode step of 32 rows is ~3 GFLOP). */
export const BIG_GPT: DecoderSpec = { ...TINY_GPT, dModel: 1024, heads: 16, layers: 8, ffn: 4096, seed: 23, name: 'big_gpt' };

/**
 * Writes a model folder serving `spec` with tiny_gpt's tokenizer and config, its KV budget set to
 * `kvBytes` and its instance group to `kind`.
 */
export function writeGptFolder(
  dir: string, spec: DecoderSpec, kvBytes: number, kind: 'KIND_CPU' | 'KIND_GPU' = 'KIND_CPU', name = spec.name!, model = decoderModel(spec),
): Uint8Array {
  const tiny = join(ROOT, 'models', 'tiny_gpt');
  mkdirSync(join(dir, '1'), { recursive: true });
  const config = readFileSync(join(tiny, 'config.pbtxt'), 'utf8').replace(/^#.*\n/gm, '').replace('name: "tiny_gpt"', `name: "${name}"`)
    .replace(/("kv_cache_bytes" value: \{ string_value: ")\d+/, `$1${kvBytes}`).replace('kind: KIND_CPU', `kind: ${kind}`);
  writeFileSync(join(dir, 'config.pbtxt'), config);
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(tiny, '1', f), join(dir, '1', f));
  writeFileSync(join(dir, '1', 'config.json'), hfConfigJson(spec));
  writeFileSync(join(dir, '1', 'model.onnx'), model);
  return model;
}

export interface Result {
  tokens: number;
  tokensPerS: number;
  ttftMs: number[];
}

export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx of black quartz'.split(' ');
/** Request i's prompt: 5 to 40 words. */
export const promptOf = (i: number) => Array.from({ length: 5 + ((i * 13) % 36) }, (_, k) => WORDS[(k * 5 + i) % WORDS.length]).join(' ');

/** C closed-loop streams, each sending `perStream` requests through `one` (which reports its first token). */
export async function drive(streams: number, one: (prompt: string, firstToken: () => void) => Promise<number>, perStream: number): Promise<Result> {
  const ttftMs: number[] = [];
  let tokens = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: streams }, async (_, s) => {
    for (let r = 0; r < perStream; r++) {
      const start = performance.now();
      let first = false;
      const n = await one(promptOf(s * perStream + r), () => {
        if (!first) ttftMs.push(performance.now() - start);
        first = true;
      });
      tokens += n;
    }
  }));
  return { tokens, tokensPerS: tokens / ((performance.now() - t0) / 1000), ttftMs };
}

// node:http rather than fetch: the client shares the cores with the server, and fetch's streams
// cost several times more per server-sent event than the server spends sending it.
const agent = new Agent({ keepAlive: true, maxSockets: Infinity });

/**
 * One generate_stream request of exactly `tokens` tokens (ignore_eos), with `extra` fields beside the
 * prompt; resolves with the count the server reports.
 */
export function tsiRequest(
  port: number, model: string, prompt: string, tokens: number, firstToken: () => void, extra: Record<string, unknown> = {},
): Promise<number> {
  const body = { text_input: prompt, max_tokens: tokens, ignore_eos: true, stream: true, ...extra };
  return postEvents(port, `/v2/models/${model}/generate_stream`, body, firstToken, (text) => {
    const last = JSON.parse(text.trim().split('\n\n').at(-1)!.slice('data: '.length));
    return last.num_output_tokens as number;
  });
}

/**
 * POSTs `body` as JSON to `path` and reads the server-sent events it answers: `firstToken` at the
 * first event that carries a token (`first` tells, on the text so far; the first event by default),
 * then `count` of the whole text when it ends.
 */
export function postEvents(
  port: number, path: string, body: unknown, firstToken: () => void, count: (text: string) => number, first = (text: string) => text.includes('data: '),
): Promise<number> {
  const json = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json) } }, (res) => {
      res.setEncoding('utf8');
      let text = '';
      let seen = false;
      res.on('data', (chunk: string) => {
        text += chunk;
        if (!seen && first(text)) {
          seen = true;
          firstToken();
        }
      });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`tsi answered ${res.statusCode}: ${text}`));
        try {
          resolve(count(text));
        } catch (e) {
          reject(e as Error);
        }
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(json);
  });
}

/** Greedy text of `prompt` from `model` (non-streaming generate), for agreement checks. */
export async function greedyText(port: number, model: string, prompt: string, tokens: number): Promise<string> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/generate`, {
    method: 'POST', body: JSON.stringify({ text_input: prompt, max_tokens: tokens, exclude_input_in_output: true }),
  });
  const body = (await r.json()) as { text_output?: string; error?: string };
  if (r.status !== 200) throw new Error(`${model} answered ${r.status}: ${body.error}`);
  return body.text_output!;
}
