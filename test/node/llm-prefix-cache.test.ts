/**
 * Automatic prefix caching in the `llm` backend (core/llm/prefix-cache.ts), through a real server and
 * tiny_gpt: requests sharing a long prefix get the same greedy tokens with the cache as without it and
 * as the reference decoder, both with a prefill worker (the cache lives there) and with one worker;
 * `usage.prompt_tokens_details.cached_tokens` says how much came from the cache; the vLLM counters
 * count it; and under many distinct prefixes the cache and the running reservations stay inside
 * `kv_cache_bytes`.
 */

import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

let server: TestServer;
let ref: ReferenceDecoder;
let repo: string;

/** tiny_gpt under another name, with these config parameters set. */
function variant(name: string, params: Record<string, string>): void {
  const dir = join(repo, name);
  mkdirSync(dir);
  const { kv_cache_bytes: kvBytes, ...rest } = params;
  const extra = Object.entries(rest).map(([k, v]) => `  { key: "${k}" value: { string_value: "${v}" } },`).join('\n');
  let config = readFileSync(join(MODELS, 'tiny_gpt', 'config.pbtxt'), 'utf8').replace('name: "tiny_gpt"', `name: "${name}"`);
  if (kvBytes) config = config.replace('"33554432"', `"${kvBytes}"`);
  writeFileSync(join(dir, 'config.pbtxt'), config.replace('parameters [', `parameters [\n${extra}`));
  symlinkSync(join(MODELS, 'tiny_gpt', '1'), join(dir, '1'));
}

const MODELS_HERE = ['cached', 'uncached', 'cached_one_worker', 'cached_small', 'bad_flag'];

beforeAll(async () => {
  repo = mkdtempSync(join(tmpdir(), 'tsi-llm-prefix-'));
  variant('cached', {});
  variant('uncached', { enable_prefix_caching: 'false' });
  variant('cached_one_worker', { separate_prefill: 'false' });
  // 160 KiB: 160 tokens of tiny_gpt's cache (1 KiB a token), so a few prompts fill it.
  variant('cached_small', { kv_cache_bytes: String(160 * 1024) });
  variant('bad_flag', { enable_prefix_caching: 'maybe' });
  server = await startTestServer({
    modelRepositories: [repo], modelControlMode: 'explicit', loadModels: MODELS_HERE.slice(0, 4), metricsPort: 0,
  });
  ref = await referenceDecoder(join(MODELS, 'tiny_gpt'));
}, 120_000);

afterAll(async () => {
  await ref?.release();
  await server?.stop();
  rmSync(repo, { recursive: true, force: true });
});

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx of black quartz'.split(' ');
/** About 200 tokens of system prompt every request starts with. */
const SYSTEM = Array.from({ length: 90 }, (_, i) => WORDS[(i * 7) % WORDS.length]).join(' ');
const QUESTIONS = ['why is the sky blue', 'tell me about foxes', 'what do wizards hex', 'name a quartz colour', 'one more'];

const complete = (model: string, prompt: string, maxTokens = 8) =>
  postJson(`${server.url}/v1/completions`, { model, prompt, max_tokens: maxTokens, temperature: 0 });

describe('prefix caching', () => {
  for (const model of ['cached', 'cached_one_worker']) {
    it(`gives requests sharing a long prefix the greedy tokens they get without the cache (${model})`, async () => {
      const prompts = QUESTIONS.map((q) => `${SYSTEM}\n${q}`);
      const promptTokens = ref.tokenizer.encode(prompts[0]!).length;
      expect(promptTokens).toBeGreaterThan(150);
      // The first request fills the cache; the rest, one by one and then together, find it there.
      const first = await complete(model, prompts[0]!);
      expect(first.status).toBe(200);
      expect(first.body.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
      const alone = [first];
      for (const p of prompts.slice(1)) alone.push(await complete(model, p));
      const together = await Promise.all(prompts.map((p) => complete(model, p)));
      const without = await Promise.all(prompts.map((p) => complete('uncached', p)));
      for (let i = 0; i < prompts.length; i++) {
        const expected = ref.tokenizer.decode(await ref.greedy(prompts[i]!, 8));
        const texts = { i, alone: alone[i]!.body.choices[0].text, together: together[i]!.body.choices[0].text, without: without[i]!.body.choices[0].text };
        expect(texts).toEqual({ i, alone: expected, together: expected, without: expected });
        expect(without[i]!.body.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
      }
      for (const a of [...alone.slice(1), ...together]) {
        const cached = a.body.usage.prompt_tokens_details.cached_tokens as number;
        // Whole 16-token blocks of the shared system prompt, at least its first 150 tokens.
        expect(cached % 16).toBe(0);
        expect(cached).toBeGreaterThanOrEqual(144);
        expect(cached).toBeLessThan(a.body.usage.prompt_tokens);
      }
      // The same prompt again: all of it but its last token's block remainder.
      const again = await complete(model, prompts[0]!);
      expect(again.body.usage.prompt_tokens_details.cached_tokens).toBe(Math.floor((promptTokens - 1) / 16) * 16);
      expect(again.body.choices[0].text).toBe(first.body.choices[0].text);
    }, 120_000);
  }

  it('reports cached tokens in streamed usage', async () => {
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cached', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }], max_tokens: 4, stream: true, stream_options: { include_usage: true } }),
    });
    await r.text();
    const s = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cached', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hello there' }], max_tokens: 4, stream: true, stream_options: { include_usage: true } }),
    });
    const events = (await s.text()).split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
    const usage = events[events.length - 1].usage;
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(144);
  }, 60_000);

  it('counts queried and hit tokens under vLLM names, and in llm_stats', async () => {
    const text = await (await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`)).text();
    const value = (name: string, model: string) => Number(new RegExp(`^${name}\\{model="${model}",version="1"\\} (\\S+)$`, 'm').exec(text)?.[1]);
    const queries = value('vllm:prefix_cache_queries_total', 'cached');
    const hits = value('vllm:prefix_cache_hits_total', 'cached');
    expect(hits).toBeGreaterThan(0);
    expect(queries).toBeGreaterThan(hits);
    expect(value('vllm:prefix_cache_hits_total', 'uncached')).toBe(0);
    const stats = (await getJson(`${server.url}/v2/models/cached/stats`)).body.model_stats[0].llm_stats;
    expect(stats.kv_cache.prefix_cache).toEqual({ bytes: expect.any(Number), queried_tokens: queries, hit_tokens: hits });
    expect(stats.kv_cache.prefix_cache.bytes).toBeGreaterThan(0);
  });

  it('keeps cache and reservations inside kv_cache_bytes under many distinct prefixes', async () => {
    const budget = 160 * 1024;
    const check = async () => {
      const kv = (await getJson(`${server.url}/v2/models/cached_small/stats`)).body.model_stats[0].llm_stats.kv_cache;
      expect(kv.prefix_cache.bytes + kv.reserved_tokens * kv.bytes_per_token).toBeLessThanOrEqual(budget);
      return kv.prefix_cache.bytes as number;
    };
    let most = 0;
    // Distinct ~60-token prompts, one by one and four at a time: each would keep 3 blocks.
    for (let round = 0; round < 6; round++) {
      const prompts = Array.from({ length: 4 }, (_, k) => Array.from({ length: 30 }, (_, i) => WORDS[(i * (round * 4 + k + 2)) % WORDS.length]).join(' ') + ` ${round} ${k}`);
      const rs = round % 2 === 0
        ? await Promise.all(prompts.map((p) => complete('cached_small', p, 4)))
        : await (async () => { const out = []; for (const p of prompts) { out.push(await complete('cached_small', p, 4)); most = Math.max(most, await check()); } return out; })();
      for (const r of rs) expect(r.status).toBe(200);
      most = Math.max(most, await check());
    }
    expect(most).toBeGreaterThan(0);
    // Still right after all that eviction.
    const p = `${SYSTEM.slice(0, 150)} and then`;
    const a = await complete('cached_small', p, 6);
    const b = await complete('cached_small', p, 6);
    expect(b.body.choices[0].text).toBe(ref.tokenizer.decode(await ref.greedy(p, 6)));
    expect(a.body.choices[0].text).toBe(b.body.choices[0].text);
    expect(b.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
  }, 120_000);

  it('refuses to load a model whose enable_prefix_caching is not a boolean', async () => {
    const r = await postJson(`${server.url}/v2/repository/models/bad_flag/load`, {});
    expect(r.status).toBe(400);
    expect(JSON.stringify(r.body)).toMatch(/enable_prefix_caching' must be true or false, got 'maybe'/);
  });
});
