/**
 * The `llm` backend in the page (runtime-browser/llm-backend.ts), in real headless Chromium against
 * the real Node server serving the same tiny_gpt: greedy generations in the page equal the Node
 * server's, through Triton's generate, the in-page `inferStream` and the OpenAI routes of `fetch`;
 * streams arrive piece by piece while the sequence still runs; concurrent page requests share decode
 * steps and each still gets its own answer; a stream left early or aborted frees its sequence; the
 * instance reports the execution provider it got: wasm, and WebGPU on SwiftShader (no adapter: a named
 * skip on a developer's machine, a failure under CI).
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TsiError, createLogger } from '../../core/index.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';
import { requireCapability } from '../helpers/capability.js';

const NODE = inject('nodeUrl');
const log = createLogger(() => {}, 0);
type Obj = Record<string, any>;

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms))]);
}

const post = (body: Obj): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });

async function nodeJson(path: string, body: Obj): Promise<{ status: number; body: Obj }> {
  const r = await fetch(`${NODE}${path}`, post(body));
  return { status: r.status, body: await r.json() };
}

async function pageJson(s: BrowserServer, path: string, body: Obj): Promise<{ status: number; body: Obj }> {
  const r = await within(60_000, s.fetch(path, post(body)), path);
  return { status: r.status, body: await r.json() };
}

/** `data:` payloads of a server-sent-event body. */
const events = (text: string) => text.split('\n\n').filter((e) => e.length > 0).map((e) => e.replace(/^data: /, ''));

const llmStats = (s: BrowserServer): Obj => (s.stats('tiny_gpt').model_stats[0] as Obj).llm_stats;

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed * 3) % WORDS.length]).join(' ');

let wasm: BrowserServer;
let gpu: BrowserServer | undefined;
/** Why this Chromium has no WebGPU adapter; undefined when it has one. */
let gpuMissing: string | undefined;
const CI = inject('ci');

beforeAll(async () => {
  wasm = await within(90_000, createServer({ repository: `${NODE}/repository/`, models: ['tiny_gpt'], device: 'wasm', log }), 'createServer(wasm)');
  const webgpu = wasm.environment.webgpu;
  if (webgpu.available) {
    gpu = await within(90_000, createServer({ repository: `${NODE}/repository/`, models: ['tiny_gpt'], device: 'webgpu', log }), 'createServer(webgpu)');
  } else {
    gpuMissing = webgpu.reason;
    console.warn(`[tsi] tiny_gpt on WebGPU not tried: ${gpuMissing}`);
  }
});

afterAll(async () => {
  await wasm?.stop(5000);
  await gpu?.stop(5000);
});

describe('tiny_gpt in the page', () => {
  it('loads as an llm model on wasm', () => {
    expect(wasm.index()).toMatchObject([{ name: 'tiny_gpt', version: '1', state: 'READY' }]);
    expect(wasm.instances('tiny_gpt')).toEqual([{ name: 'tiny_gpt_0_0', kind: 'KIND_CPU', device: 'wasm' }]);
  });

  it('loads as an llm model on WebGPU, with no fallback', (ctx) => {
    requireCapability(ctx, CI, 'WebGPU adapter in Chromium', gpuMissing);
    expect(gpu!.instances('tiny_gpt')).toEqual([{ name: 'tiny_gpt_0_0', kind: 'KIND_CPU', device: 'webgpu' }]);
  });

  it('falls back to wasm, saying why, when the WebGPU decoder cannot be made', async () => {
    const ort = await import('onnxruntime-web');
    // The real module, but WebGPU sessions fail to create (as on a browser whose WebGPU lacks an op).
    const broken = {
      ...ort,
      InferenceSession: {
        create: (model: Uint8Array, o?: { executionProviders?: unknown[] }) => (o?.executionProviders?.includes('webgpu')
          ? Promise.reject(new Error('no decoder on this adapter')) : ort.InferenceSession.create(model, o as never)),
      },
    } as unknown as typeof ort;
    const s = await within(60_000, createServer({ repository: `${NODE}/repository/`, models: ['tiny_gpt'], device: 'webgpu', ort: broken, log }), 'createServer(broken webgpu)');
    try {
      const reason = wasm.environment.webgpu.available ? 'webgpu decoder failed: no decoder on this adapter' : wasm.environment.webgpu.reason;
      expect(s.instances('tiny_gpt')).toEqual([{ name: 'tiny_gpt_0_0', kind: 'KIND_CPU', device: 'wasm', fallbackReason: reason }]);
      const r = await pageJson(s, '/v2/models/tiny_gpt/generate', { text_input: 'hi', max_tokens: 3, ignore_eos: true });
      expect(r.body.num_output_tokens).toBe(3);
    } finally {
      await s.stop(5000);
    }
  });

  it('generates greedily the Node server\'s tokens, one request at a time and 4 at once (batched)', async () => {
    const reqs = Array.from({ length: 4 }, (_, i) => ({
      text_input: promptOf(1 + i * 6, i), max_tokens: 6 + i * 7, temperature: 0, ignore_eos: true, exclude_input_in_output: true,
    }));
    const want = await Promise.all(reqs.map((r) => nodeJson('/v2/models/tiny_gpt/generate', r)));
    for (const w of want) expect(w.status).toBe(200);
    const alone = [];
    for (const r of reqs) alone.push(await pageJson(wasm, '/v2/models/tiny_gpt/generate', r));
    const before = llmStats(wasm);
    const together = await Promise.all(reqs.map((r) => pageJson(wasm, '/v2/models/tiny_gpt/generate', r)));
    const after = llmStats(wasm);
    const pick = (a: { status: number; body: Obj }) => ({ status: a.status, text: a.body.text_output, n: a.body.num_output_tokens, finish: a.body.finish_reason });
    expect(alone.map(pick)).toEqual(want.map(pick));
    expect(together.map(pick)).toEqual(want.map(pick));
    expect(want.map((w) => w.body.num_output_tokens)).toEqual(reqs.map((r) => r.max_tokens));
    // One at a time a token takes a step; batched, the four shared their decode steps.
    const tokens = reqs.reduce((n, r) => n + r.max_tokens, 0);
    expect(after.generation_tokens - before.generation_tokens).toBe(tokens);
    expect(after.steps - before.steps).toBeLessThan(tokens / 2);
    expect(after.running_sequences).toBe(0);
    expect(after.kv_cache.reserved_tokens).toBe(0);
  });

  it('gives the same greedy text on WebGPU as on the Node server', async (ctx) => {
    requireCapability(ctx, CI, 'WebGPU adapter in Chromium', gpuMissing);
    const req = { text_input: promptOf(5, 5), max_tokens: 5, temperature: 0, ignore_eos: true };
    const want = await nodeJson('/v2/models/tiny_gpt/generate', req);
    const got = await pageJson(gpu!, '/v2/models/tiny_gpt/generate', req);
    expect({ status: got.status, text: got.body.text_output }).toEqual({ status: 200, text: want.body.text_output });
  });

  it('streams through inferStream piece by piece, while the sequence is still running', async () => {
    const req = { text_input: promptOf(5, 2), max_tokens: 40, temperature: 0, ignore_eos: true, exclude_input_in_output: true };
    const want = await nodeJson('/v2/models/tiny_gpt/generate', req);
    const pieces: string[] = [];
    const runningAt: number[] = [];
    for await (const out of wasm.inferStream({
      model: 'tiny_gpt', inputs: { text_input: [req.text_input], stream: [true] },
      parameters: { max_tokens: req.max_tokens, temperature: 0, ignore_eos: true },
    })) {
      pieces.push((out.text_output as string[]).join(''));
      runningAt.push(llmStats(wasm).running_sequences);
    }
    expect(pieces.join('')).toBe(want.body.text_output);
    // A piece per token, but for tokens that end inside a UTF-8 character (held back until it is whole).
    expect(pieces.length).toBeGreaterThan(req.max_tokens * 0.75);
    expect(runningAt[0]).toBe(1);
    expect(runningAt.at(-1)).toBe(0);
  });

  it('serves generate_stream and the OpenAI chat API (SSE) with the Node server\'s text', async () => {
    const gen = { text_input: promptOf(3, 7), max_tokens: 12, temperature: 0, ignore_eos: true, stream: true };
    const [nodeGen, pageGen] = await Promise.all([
      fetch(`${NODE}/v2/models/tiny_gpt/generate_stream`, post(gen)).then((r) => r.text()),
      wasm.fetch('/v2/models/tiny_gpt/generate_stream', post(gen)).then((r) => r.text()),
    ]);
    const texts = (sse: string) => events(sse).map((e) => JSON.parse(e).text_output as string).join('');
    expect(texts(pageGen)).toBe(texts(nodeGen));
    expect(events(pageGen).length).toBeGreaterThan(6);

    const chat = {
      model: 'tiny_gpt', stream: true, stream_options: { include_usage: true }, max_tokens: 10, temperature: 0,
      messages: [{ role: 'user', content: 'Hello there!' }],
    };
    const page = await wasm.fetch('/v1/chat/completions', post(chat));
    expect(page.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const pageEv = events(await page.text());
    const nodeEv = events(await (await fetch(`${NODE}/v1/chat/completions`, post(chat))).text());
    expect(pageEv.at(-1)).toBe('[DONE]');
    const content = (ev: string[]) => ev.slice(0, -1).map((e) => JSON.parse(e).choices[0]?.delta?.content ?? '').join('');
    expect(content(pageEv)).toBe(content(nodeEv));
    expect(JSON.parse(pageEv.at(-2)!).usage).toEqual(JSON.parse(nodeEv.at(-2)!).usage);
    const models = await (await wasm.fetch('/v1/models')).json();
    expect(models.data.map((m: Obj) => m.id)).toEqual(['tiny_gpt']);
  });

  it('constrains sampled answers by structured_outputs (regex, choice, GBNF, structural_tag) as the Node server does', async () => {
    const regex = '[0-9]{1,3}(-[a-z]{2,4})?';
    const grammar = 'root ::= "[" (v ("," v)*)? "]"\nv ::= [0-9] | root';
    const bodies: [Obj, (t: string) => boolean][] = [
      [{ structured_outputs: { regex } }, (t) => new RegExp(`^(?:${regex})$`).test(t)],
      [{ structured_outputs: { choice: ['red', 'green', 'blue'] } }, (t) => ['red', 'green', 'blue'].includes(t)],
      [{ grammar }, (t) => /^[[\]0-9,]+$/.test(t) && JSON.stringify(JSON.parse(t)) === t],
      // A structural tag: every 'e' opens `e<{"n":<integer>}>`, free text around.
      [{ structured_outputs: { structural_tag: { structures: [{ begin: 'e<', schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }, end: '>' }], triggers: ['e'] } } },
        (t) => !t.replace(/e<\{"n":-?[0-9]+\}>/g, '').includes('e')],
    ];
    for (const [extra, valid] of bodies) {
      const body = { model: 'tiny_gpt', messages: [{ role: 'user', content: 'Pick' }], max_tokens: 10, n: 8, temperature: 1, seed: 9, ...extra };
      const page = await pageJson(wasm, '/v1/chat/completions', body);
      const node = await nodeJson('/v1/chat/completions', body);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      const texts = page.body.choices.map((c: Obj) => c.message.content as string);
      expect(texts.filter((t: string) => !valid(t)), JSON.stringify(extra)).toEqual([]);
      // Seeded: the page draws what the Node server draws.
      expect(texts).toEqual(node.body.choices.map((c: Obj) => c.message.content));
    }
    const bad = await pageJson(wasm, '/v1/completions', { model: 'tiny_gpt', prompt: 'x', structured_outputs: { regex: '(?=a)' } });
    expect([bad.status, bad.body.error.param]).toEqual([400, 'structured_outputs.regex']);
  });

  it('answers prompt_logprobs as the Node server does, beside a prompt that does not ask', async () => {
    const body = { model: 'tiny_gpt', prompt: promptOf(9, 2), max_tokens: 2, temperature: 0, prompt_logprobs: 3 };
    // Two at once: one prefill of rows of unlike lengths (left padding), only one keeping every position.
    const [page, other] = await Promise.all([pageJson(wasm, '/v1/completions', body), pageJson(wasm, '/v1/completions', { ...body, prompt: promptOf(3, 1), prompt_logprobs: undefined })]);
    const node = await nodeJson('/v1/completions', body);
    expect([page.status, other.status]).toEqual([200, 200]);
    expect(other.body.choices[0].prompt_logprobs).toBeUndefined();
    const got = page.body.choices[0].prompt_logprobs as (Obj | null)[];
    const want = node.body.choices[0].prompt_logprobs as (Obj | null)[];
    expect(got.length).toBe(page.body.usage.prompt_tokens);
    expect(got.map((e) => e && Object.keys(e))).toEqual(want.map((e) => e && Object.keys(e)));
    got.forEach((e, p) => {
      for (const [id, x] of Object.entries(e ?? {})) {
        expect({ p, id, rank: x.rank, decoded: x.decoded_token }).toEqual({ p, id, rank: want[p]![id].rank, decoded: want[p]![id].decoded_token });
        expect(Math.abs(x.logprob - want[p]![id].logprob)).toBeLessThan(1e-4);
      }
    });
  });

  it('cancels a stream left early or aborted, and frees its sequence', async () => {
    const tokensBefore = llmStats(wasm).generation_tokens;
    const call = {
      model: 'tiny_gpt', inputs: { text_input: ['once upon a time'], stream: [true] },
      parameters: { max_tokens: 400, ignore_eos: true },
    };
    let seen = 0;
    for await (const _ of wasm.inferStream(call)) if (++seen === 3) break;
    const ac = new AbortController();
    const aborted = (async () => {
      for await (const _ of wasm.inferStream(call, { signal: ac.signal })) if (++seen === 6) ac.abort();
    })();
    await expect(within(30_000, aborted, 'aborted stream')).rejects.toSatisfy((e) => e instanceof TsiError && e.code === 'CANCELLED');
    // An HTTP-shaped client going away: the fetch's signal.
    const ac2 = new AbortController();
    const res = await wasm.fetch('/v1/completions', { ...post({ model: 'tiny_gpt', prompt: 'hi', max_tokens: 400, ignore_eos: true, stream: true }), signal: ac2.signal });
    const reader = res.body!.getReader();
    await reader.read();
    ac2.abort();
    await reader.cancel().catch(() => {});
    // Cancelled sequences leave at the next step boundary.
    const deadline = Date.now() + 20_000;
    while (llmStats(wasm).running_sequences > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const s = llmStats(wasm);
    expect({ running: s.running_sequences, reserved: s.kv_cache.reserved_tokens, held: s.kv_cache.held_bytes }).toEqual({ running: 0, reserved: 0, held: 0 });
    // None ran on to its 400 tokens.
    expect(s.generation_tokens - tokensBefore).toBeLessThan(100);
    const again = await pageJson(wasm, '/v2/models/tiny_gpt/generate', { text_input: 'hi', max_tokens: 3, ignore_eos: true });
    expect(again.body.num_output_tokens).toBe(3);
  });
});
