/**
 * The default repository's `rag` example end to end on the real Node server: a decoupled JavaScript
 * model that calls tiny_embed, tiny_rerank and tiny_gpt through BLS. Its answer is rebuilt step by step
 * from the public routes a client would call itself — `/v1/embeddings` for the question and the shipped
 * passages, cosine similarity by hand, `/v1/rerank` over the top_k, then tiny_gpt's greedy `generate`
 * on the same prompt — and the streamed events must carry the same passages, scores and text.
 */

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';
// @ts-expect-error: a plain JavaScript model file of the default repository, without types.
import { prompt } from '../../models/rag/1/model.js';

let server: TestServer;
let passages: string[];

beforeAll(async () => {
  passages = JSON.parse(await readFile(join(MODELS, 'rag', '1', 'passages.json'), 'utf8')) as string[];
  server = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['rag', 'tiny_embed', 'tiny_rerank', 'tiny_gpt'] });
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

/** generate_stream's events, parsed. */
async function stream(model: string, body: unknown): Promise<{ status: number; events: any[] }> {
  const r = await fetch(`${server.url}/v2/models/${model}/generate_stream`, { method: 'POST', body: JSON.stringify(body) });
  const text = await r.text();
  const events = text.split('\n\n').filter(Boolean).map((chunk) => {
    expect(chunk.startsWith('data: ')).toBe(true);
    return JSON.parse(chunk.slice(6));
  });
  return { status: r.status, events };
}

/** What the pipeline should choose and say, from the public routes. */
async function reference(question: string, topK: number, topN: number, maxTokens: number) {
  const emb = await postJson(`${server.url}/v1/embeddings`, { model: 'tiny_embed', input: [...passages, question] });
  const vecs = emb.body.data.map((d: { embedding: number[] }) => d.embedding) as number[][];
  const q = vecs.pop()!;
  const dot = (v: number[]) => v.reduce((s, x, i) => s + x * q[i]!, 0);
  const retrieved = vecs.map((v, i) => ({ i, cos: dot(v) })).sort((a, b) => b.cos - a.cos || a.i - b.i).slice(0, topK);
  const rr = await postJson(`${server.url}/v1/rerank`, { model: 'tiny_rerank', query: question, documents: retrieved.map((r) => passages[r.i]), top_n: topN });
  const kept = rr.body.results.map((r: { index: number; relevance_score: number }) => ({ text: passages[retrieved[r.index]!.i]!, score: r.relevance_score }));
  const gen = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, {
    text_input: prompt(question, kept.map((k: { text: string }) => k.text)), max_tokens: maxTokens, exclude_input_in_output: true,
  });
  return { kept, text: gen.body.text_output as string };
}

describe('rag', () => {
  it('streams the passages it kept, then the answer, as the steps called one by one give them', async () => {
    for (const [question, params] of [['what does the dynamic batcher do?', {}], ['where did the cat sit?', { top_k: 6, top_n: 3, max_tokens: 12 }]] as const) {
      const p = { top_k: 4, top_n: 2, max_tokens: 32, ...params };
      const want = await reference(question, p.top_k, p.top_n, p.max_tokens);
      const got = await stream('rag', { text_input: question, ...params });
      expect(got.status).toBe(200);
      const [first, ...rest] = got.events;
      expect(first.passages).toEqual(want.kept.map((k: { text: string }) => k.text));
      first.relevance.forEach((s: number, i: number) => expect(Math.abs(s - want.kept[i].score)).toBeLessThan(1e-6));
      // The answer arrives in pieces as it is generated.
      expect(rest.length).toBeGreaterThan(1);
      expect(rest.map((e) => e.text_output).join('')).toBe(want.text);
      expect(want.text.length).toBeGreaterThan(0);
    }
  }, 120_000);

  it('refuses a bad parameter with a clear error and keeps serving', async () => {
    const bad = await stream('rag', { text_input: 'x', top_k: 0 });
    expect(JSON.stringify(bad.events)).toMatch(/top_k.*positive integer/);
    const ok = await stream('rag', { text_input: 'still here', max_tokens: 4 });
    expect(ok.events[0].passages).toHaveLength(2);
  }, 60_000);
});
