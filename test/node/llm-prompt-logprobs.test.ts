/**
 * vLLM's `prompt_logprobs` on the real Node server through the official `openai` client: tiny Llama
 * models in both export layouts (plain: left-padded rows; gqa: GroupQueryAttention, right-padded
 * rows) answer each prompt token's log-probability, rank and top k as a full-sequence run of the same
 * ONNX graph with raw onnxruntime-node (batch of one, no cache, no padding) gives them, within 1e-4;
 * also when the prompt shares a prefill with prompts of other lengths that do not ask (padding, a
 * prefill run in parts), and when its prefix is in the prefix cache (bypassed for it: every position
 * is computed), and on tiny_gpt, whose graph computes the last position unless num_logits_to_keep asks
 * for more; completions carry them in each choice, chat beside the choices, as vLLM does.
 */

import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { tinySpec, writeFamilyFolder, type Layout } from '../../scripts/llm-families.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';

type Obj = Record<string, any>;
const LAYOUTS: Layout[] = ['plain', 'gqa'];
const root = join(tmpdir(), `tsi-llm-prompt-logprobs-${process.pid}`);
const K = 5;
let server: TestServer;
let client: OpenAI;
let tokenizer: Tokenizer;
/** The graphs by served model: the two layouts, and tiny_gpt (which takes num_logits_to_keep). */
const sessions = new Map<string, ort.InferenceSession>();

beforeAll(async () => {
  const tokDir = join(MODELS, 'tiny_gpt', '1');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  tokenizer = Tokenizer.fromJson(tok.json, tok.config);
  for (const layout of LAYOUTS) {
    const dir = join(root, `llama_${layout}`);
    const spec = { ...tinySpec('llama', tokenizer.vocabSize, tokenizer.bosId ?? tokenizer.eosId!, tokenizer.eosId!), layout };
    await writeFamilyFolder(join(dir, '1'), spec, tok, ['model']);
    // The plain layout as exported (left-padded rows), not rewritten into the fused one at load.
    const keepPlain = layout === 'plain' ? 'parameters { key: "rewrite_plain_layout" value { string_value: "false" } }\n' : '';
    writeFileSync(join(dir, 'config.pbtxt'), `backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n${keepPlain}`);
    sessions.set(`llama_${layout}`, await ort.InferenceSession.create(join(dir, '1', 'onnx', 'model.onnx'), { intraOpNumThreads: 1 }));
  }
  sessions.set('tiny_gpt', await ort.InferenceSession.create(join(MODELS, 'tiny_gpt', '1', 'model.onnx'), { intraOpNumThreads: 1 }));
  server = await startTestServer({ modelRepositories: [root, MODELS], modelControlMode: 'explicit', loadModels: ['llama_plain', 'llama_gqa', 'tiny_gpt'] });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 300_000);

afterAll(async () => {
  await server?.stop();
  for (const s of sessions.values()) await s.release();
  rmSync(root, { recursive: true, force: true });
});

/**
 * The reference: the whole prompt in one run of the graph (no past), each position's log-softmax in
 * float64, the prompt token's rank counted, the top k sorted out of the whole row.
 */
async function reference(model: string, ids: number[]): Promise<{ logprob: number; rank: number; top: [number, number][] }[]> {
  const s = sessions.get(model)!;
  const i64 = (v: number[]) => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), [1, v.length]);
  const feeds: Record<string, ort.Tensor> = { input_ids: i64(ids), attention_mask: i64(ids.map(() => 1)) };
  if (s.inputNames.includes('position_ids')) feeds.position_ids = i64(ids.map((_, k) => k));
  if (s.inputNames.includes('num_logits_to_keep')) feeds.num_logits_to_keep = new ort.Tensor('int64', BigInt64Array.of(BigInt(ids.length)), []);
  const [heads, headDim] = model === 'tiny_gpt' ? [TINY_GPT.n_head, TINY_GPT.n_embd / TINY_GPT.n_head] : [2, 16];
  for (const name of s.inputNames.filter((n) => n.startsWith('past_key_values.'))) feeds[name] = new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, headDim]);
  const logits = (await s.run(feeds)).logits!;
  const V = logits.dims[2]!;
  const data = logits.data as Float32Array;
  const out = [];
  for (let j = 1; j < ids.length; j++) {
    const row = Array.from(data.subarray((j - 1) * V, j * V));
    const max = Math.max(...row);
    const logZ = max + Math.log(row.reduce((a, x) => a + Math.exp(x - max), 0));
    const own = row[ids[j]!]!;
    const order = row.map((x, v) => [v, x - logZ] as [number, number]).sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    out.push({ logprob: own - logZ, rank: 1 + row.filter((x) => x > own).length, top: order.slice(0, K) });
  }
  return out;
}

/** The server's prompt_logprobs against the reference: null first, then the prompt token and the top k at each position. */
function expectMatches(got: (Obj | null)[], ids: number[], ref: Awaited<ReturnType<typeof reference>>, k = K): void {
  expect(got.length).toBe(ids.length);
  expect(got[0]).toBeNull();
  ref.forEach((r, p) => {
    const entry = got[p + 1]!;
    const own = entry[String(ids[p + 1])];
    expect({ p, rank: own.rank, decoded: own.decoded_token }).toEqual({ p, rank: r.rank, decoded: tokenizer.decode([ids[p + 1]!], { skipSpecialTokens: false }) });
    expect(Math.abs(own.logprob - r.logprob)).toBeLessThan(1e-4);
    const top = r.top.slice(0, k);
    // The prompt token and the k likeliest, each once.
    expect(Object.keys(entry).sort()).toEqual([...new Set([String(ids[p + 1]), ...top.map(([t]) => String(t))])].sort());
    top.forEach(([t, lp], i) => {
      expect({ p, t, rank: entry[String(t)].rank }).toEqual({ p, t, rank: t === ids[p + 1] ? r.rank : i + 1 });
      expect(Math.abs(entry[String(t)].logprob - lp)).toBeLessThan(1e-4);
    });
  });
}

const PROMPT = 'the quick brown fox jumps over a lazy dog while seven wizards';
const TINY_GPT = JSON.parse(readFileSync(join(MODELS, 'tiny_gpt', '1', 'config.json'), 'utf8')) as { n_head: number; n_embd: number };

describe.each(LAYOUTS)('prompt_logprobs on the %s layout', (layout) => {
  const model = `llama_${layout}`;

  it('equal a full-sequence run of the same graph (completions, official client)', async () => {
    const ids = tokenizer.encode(PROMPT);
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 2, temperature: 0, prompt_logprobs: K } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(r.usage!.prompt_tokens).toBe(ids.length);
    expectMatches((r.choices[0] as Obj).prompt_logprobs, ids, await reference(model, ids));
  }, 60_000);

  it('are right beside prompts of other lengths that do not ask (one prefill, padded and in parts)', async () => {
    const words = PROMPT.split(' ');
    const prompts = [3, 11, 6, 9, 1, 12].map((n, i) => words.slice(i % 3, i % 3 + n).join(' '));
    const asks = [true, false, true, false, true, false];
    const answers = await Promise.all(prompts.map((prompt, i) => client.completions.create({
      model, prompt, max_tokens: 3, temperature: 0, ...(asks[i] ? { prompt_logprobs: 2 } : {}),
    } as OpenAI.CompletionCreateParamsNonStreaming)));
    for (const [i, a] of answers.entries()) {
      const c = a.choices[0] as Obj;
      if (!asks[i]) {
        expect(c.prompt_logprobs).toBeUndefined();
        continue;
      }
      const ids = tokenizer.encode(prompts[i]!);
      expectMatches(c.prompt_logprobs, ids, await reference(model, ids), 2);
    }
  }, 60_000);

  it('compute every position when the prompt\'s prefix is cached (the cache is bypassed for the request)', async () => {
    const prompt = `${PROMPT} quietly hex every jovial sphinx`;
    const ids = tokenizer.encode(prompt);
    const plain = { model, prompt, max_tokens: 1, temperature: 0 };
    await client.completions.create(plain);
    const warm = await client.completions.create(plain);
    expect(warm.usage!.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
    const r = await client.completions.create({ ...plain, prompt_logprobs: K } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(r.usage!.prompt_tokens_details?.cached_tokens).toBe(0);
    expectMatches((r.choices[0] as Obj).prompt_logprobs, ids, await reference(model, ids));
  }, 60_000);
});

it('tiny_gpt, whose graph keeps the last position\'s logits unless asked (num_logits_to_keep), gives every position', async () => {
  const ids = tokenizer.encode(PROMPT);
  const [alone, beside] = await Promise.all([PROMPT, 'a lazy dog'].map((prompt, i) => client.completions.create({
    model: 'tiny_gpt', prompt, max_tokens: 2, temperature: 0, ...(i === 0 ? { prompt_logprobs: K } : {}),
  } as OpenAI.CompletionCreateParamsNonStreaming)));
  expectMatches((alone!.choices[0] as Obj).prompt_logprobs, ids, await reference('tiny_gpt', ids));
  expect((beside!.choices[0] as Obj).prompt_logprobs).toBeUndefined();
}, 60_000);

describe('prompt_logprobs as vLLM answers them', () => {
  it('chat: beside the choices, for the templated prompt', async () => {
    const r = await client.chat.completions.create({ model: 'llama_plain', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 1, prompt_logprobs: 1 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const got = (r as Obj).prompt_logprobs as (Obj | null)[];
    expect(got.length).toBe(r.usage!.prompt_tokens);
    expect(got[0]).toBeNull();
    for (const e of got.slice(1)) {
      const ranks = Object.values(e!).map((x: Obj) => x.rank);
      expect(ranks).toContain(1);
      expect(ranks.length).toBeLessThanOrEqual(2);
    }
    expect((r.choices[0] as Obj).prompt_logprobs).toBeUndefined();
  }, 60_000);

  it('n choices each carry the same list; 0 gives the prompt token only', async () => {
    const r = await client.completions.create({ model: 'llama_gqa', prompt: 'a lazy dog', max_tokens: 2, n: 2, temperature: 1, seed: 3, prompt_logprobs: 0 } as OpenAI.CompletionCreateParamsNonStreaming);
    const [a, b] = r.choices.map((c) => (c as Obj).prompt_logprobs as (Obj | null)[]);
    expect(a).toEqual(b);
    const ids = tokenizer.encode('a lazy dog');
    expect(a!.slice(1).map((e) => Object.keys(e!))).toEqual(ids.slice(1).map((t) => [String(t)]));
  }, 60_000);

  it('refuses what vLLM refuses: with stream, negative, more than 20', async () => {
    for (const [extra, text] of [
      [{ prompt_logprobs: 1, stream: true }, /'prompt_logprobs' are not available when 'stream' is true/],
      [{ prompt_logprobs: -1 }, /'prompt_logprobs' must be an integer in \[0, 20\]/],
      [{ prompt_logprobs: 21 }, /'prompt_logprobs' must be an integer in \[0, 20\]/],
    ] as const) {
      const r = await postJson(`${server.url}/v1/completions`, { model: 'llama_plain', prompt: 'x', max_tokens: 1, ...extra });
      expect([r.status, r.body.error?.param, r.body.error?.message]).toEqual([400, 'prompt_logprobs', expect.stringMatching(text)]);
    }
    // generate (sampling_parameters) takes it too: the response parameter carries the same list.
    const g = await postJson(`${server.url}/v2/models/llama_plain/generate`, { text_input: 'a lazy dog', max_tokens: 1, prompt_logprobs: 1 });
    expect(g.status).toBe(200);
    expect(JSON.parse(g.body.prompt_logprobs).length).toBe(tokenizer.encode('a lazy dog').length);
  }, 60_000);
});
