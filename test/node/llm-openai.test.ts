/**
 * The OpenAI API as applications use it, driven by the official `openai` npm client against the real
 * Node server and the default repository's tiny_gpt (random weights: its text is gibberish, which is
 * what makes structured output a real test): n choices from one prompt run, best_of, logprobs from the
 * sampler's distribution (checked against raw onnxruntime's logits), JSON mode and JSON schemas
 * (every sampled answer parses and validates with ajv), OpenAI-shaped refusals.
 */

import { join } from 'node:path';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

let server: TestServer;
let ref: ReferenceDecoder;
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['tiny_gpt'] });
  ref = await referenceDecoder(join(MODELS, 'tiny_gpt'));
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await ref?.release();
  await server?.stop();
});

const llmStats = async () => (await getJson(`${server.url}/v2/models/tiny_gpt/stats`)).body.model_stats[0].llm_stats;

/** log-softmax of one row of logits, at `id`. */
function logSoftmax(row: Float32Array, id: number): number {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  return row[id]! - max - Math.log(sum);
}

describe('n and best_of', () => {
  it('returns n sampled choices from one prompt run, the same streamed as whole', async () => {
    const before = await llmStats();
    const body = { model: 'tiny_gpt', messages: [{ role: 'user' as const, content: 'Tell me a story' }], max_tokens: 12, n: 3, temperature: 1, seed: 5 };
    const whole = await client.chat.completions.create(body);
    expect(whole.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const texts = whole.choices.map((c) => c.message.content);
    // Seeded per choice: three different draws.
    expect(new Set(texts).size).toBe(3);
    const after = await llmStats();
    // The prompt ran once for the three choices.
    expect(after.prompt_tokens - before.prompt_tokens).toBe(whole.usage!.prompt_tokens);
    expect(whole.usage!.completion_tokens).toBe(whole.choices.length * 12 - whole.choices.filter((c) => c.finish_reason === 'stop').length * 0);

    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    const streamed = ['', '', ''];
    const finished: (string | null)[] = [null, null, null];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        streamed[c.index] += c.delta.content ?? '';
        if (c.finish_reason) finished[c.index] = c.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(streamed).toEqual(texts);
    expect(finished).toEqual(whole.choices.map((c) => c.finish_reason));
    // The same prompt again: its whole blocks came from the prefix cache this time.
    const cached = Math.floor((whole.usage!.prompt_tokens - 1) / 16) * 16;
    expect(usage).toEqual({ ...whole.usage, prompt_tokens_details: { cached_tokens: cached } });
  }, 60_000);

  it('gives n greedy choices equal to the greedy text', async () => {
    const expected = ref.tokenizer.decode(await ref.greedy('once upon a time', 8));
    const r = await client.completions.create({ model: 'tiny_gpt', prompt: 'once upon a time', max_tokens: 8, n: 2, temperature: 0 });
    expect(r.choices.map((c) => [c.index, c.text])).toEqual([[0, expected], [1, expected]]);
  });

  it('answers best_of with the candidates most likely under the model', async () => {
    const body = { model: 'tiny_gpt', prompt: 'the fox', max_tokens: 6, temperature: 1, seed: 11 };
    const all = await client.completions.create({ ...body, n: 4, logprobs: 0 });
    const sums = all.choices.map((c) => c.logprobs!.token_logprobs!.reduce((a, b) => a + b, 0));
    const order = sums.map((s, i) => [s, i] as const).sort((a, b) => b[0] - a[0]).map(([, i]) => i);
    const best = await client.completions.create({ ...body, n: 2, best_of: 4 });
    expect(best.choices.map((c) => c.text)).toEqual([all.choices[order[0]!]!.text, all.choices[order[1]!]!.text]);
    expect(best.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(best.choices[0]!.logprobs).toBeNull();
    // Every candidate's tokens are counted.
    expect(best.usage!.completion_tokens).toBe(all.usage!.completion_tokens);
  });
});

describe('logprobs', () => {
  it("returns chat logprobs and top_logprobs from the model's distribution", async () => {
    const prompt = 'user: Hello!\nassistant:';
    const rows: Float32Array[] = [];
    const ids = await ref.greedy(prompt, 6, { onToken: (_, row) => rows.push(row), addSpecialTokens: false });
    const r = await client.chat.completions.create({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(ids.length);
    content.forEach((t, i) => {
      expect(t.logprob).toBeCloseTo(logSoftmax(rows[i]!, ids[i]!), 4);
      expect(t.top_logprobs.length).toBe(3);
      // Greedy: the chosen token is the likeliest.
      expect(t.top_logprobs[0]).toEqual({ token: t.token, logprob: t.logprob, bytes: t.bytes });
      expect(t.top_logprobs[1]!.logprob).toBeLessThanOrEqual(t.logprob);
      expect(Buffer.from(t.bytes!).toString('latin1')).toBe(Buffer.from(ref.tokenizer.tokenBytes(ids[i]!)).toString('latin1'));
    });
    expect(Buffer.concat(content.map((t) => Buffer.from(t.bytes!))).toString('utf8')).toBe(r.choices[0]!.message.content);

    // Sampled at temperature 0.5: the distribution the token was drawn from is the logits over 0.5.
    const s = await client.chat.completions.create({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 1, temperature: 0.5, seed: 3, logprobs: true });
    const t = s.choices[0]!.logprobs!.content![0]!;
    const id = Array.from({ length: ref.tokenizer.vocabSize }, (_, i) => i).find((i) => Buffer.from(ref.tokenizer.tokenBytes(i)).equals(Buffer.from(t.bytes!)))!;
    expect(t.logprob).toBeCloseTo(logSoftmax(rows[0]!.map((v) => v / 0.5), id), 4);

    const stream = await client.chat.completions.create({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
    const streamed: unknown[] = [];
    for await (const chunk of stream) for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
    expect(streamed).toEqual(content);
  });

  it('returns completions logprobs in the legacy shape, and on Triton generate', async () => {
    const r = await client.completions.create({ model: 'tiny_gpt', prompt: 'the fox', max_tokens: 4, temperature: 0, logprobs: 2 });
    const lp = r.choices[0]!.logprobs!;
    expect(lp.tokens!.length).toBe(4);
    expect(lp.top_logprobs!.every((t) => Object.keys(t).length === 2)).toBe(true);
    expect(lp.text_offset![0]).toBe(0);
    expect(lp.text_offset![1]).toBe(lp.tokens![0]!.length);
    const g = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, { text_input: 'the fox', max_tokens: 4, temperature: 0, logprobs: 2, exclude_input_in_output: true });
    expect(g.status).toBe(200);
    const tokens = JSON.parse(g.body.logprobs);
    expect(tokens.map((t: { logprob: number }) => t.logprob)).toEqual(lp.token_logprobs!.map((x) => expect.closeTo(x, 5)));
    expect(g.body.cumulative_logprob).toBeCloseTo(lp.token_logprobs!.reduce((a, b) => a + b, 0), 4);
  });
});

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 24 },
    age: { type: 'integer' },
    score: { type: 'number' },
    tags: { type: 'array', items: { type: 'string', enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
    active: { type: 'boolean' },
    note: { type: ['string', 'null'] },
    address: { type: 'object', properties: { city: { type: 'string' }, zip: { type: 'integer' } }, required: ['city'], additionalProperties: false },
  },
  required: ['name', 'age', 'tags', 'active', 'address'],
  additionalProperties: false,
};

describe('structured output', () => {
  it('answers 200 sampled JSON-schema requests with JSON that validates', async () => {
    const validate = new Ajv({ strict: false }).compile(SCHEMA);
    const answers: string[] = [];
    // 10 requests of 20 choices each, at temperature 1: the grammar alone keeps them valid.
    await Promise.all(Array.from({ length: 10 }, async (_, i) => {
      const r = await client.chat.completions.create({
        model: 'tiny_gpt', messages: [{ role: 'user', content: `Person ${i} as JSON` }], n: 20, temperature: 1, seed: i, max_tokens: 160,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA, strict: true } },
      });
      for (const c of r.choices) {
        expect(c.finish_reason).toBe('stop');
        answers.push(c.message.content!);
      }
    }));
    expect(answers.length).toBe(200);
    const invalid = answers.filter((a) => {
      try {
        return !validate(JSON.parse(a));
      } catch {
        return true;
      }
    });
    expect(invalid).toEqual([]);
    // Sampled, not one fixed answer.
    expect(new Set(answers).size).toBeGreaterThan(150);
  }, 300_000);

  it('answers json_object with a JSON object, streamed too, and on generate', async () => {
    const body = { model: 'tiny_gpt', messages: [{ role: 'user' as const, content: 'JSON please' }], temperature: 1, seed: 2, max_tokens: 40, response_format: { type: 'json_object' as const } };
    const whole = await client.chat.completions.create(body);
    const value = JSON.parse(whole.choices[0]!.message.content!);
    expect(typeof value === 'object' && value !== null && !Array.isArray(value)).toBe(true);
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe(whole.choices[0]!.message.content);
    const g = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, {
      text_input: 'x', max_tokens: 60, temperature: 1, seed: 4, exclude_input_in_output: true, guided_json: JSON.stringify({ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }),
    });
    expect(g.status).toBe(200);
    expect(Object.keys(JSON.parse(g.body.text_output))).toEqual(['a']);
  });

  it('refuses a schema keyword it cannot enforce, by name', async () => {
    const err = await client.chat.completions.create({
      model: 'tiny_gpt', messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^a+$' } } } } },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/'pattern'/);
  });
});

describe('fields and errors', () => {
  it('takes max_completion_tokens, ignores unknown fields, refuses known unsupported ones by name', async () => {
    const r = await client.chat.completions.create({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 3, temperature: 0, ignore_eos: true, store: false, metadata: { a: 'b' }, user: 'u', service_tier: 'auto', parallel_tool_calls: true } as never);
    expect((r as OpenAI.ChatCompletion).usage!.completion_tokens).toBe(3);
    const unknown = await postJson(`${server.url}/v1/completions`, { model: 'tiny_gpt', prompt: 'x', max_tokens: 1, some_future_field: { x: 1 } });
    expect(unknown.status).toBe(200);
    for (const [extra, param] of [[{ prompt_logprobs: 2, stream: true }, 'prompt_logprobs'], [{ audio: { voice: 'alloy', format: 'wav' } }, 'audio'], [{ n: 0 }, 'n'], [{ top_logprobs: 2 }, 'top_logprobs']] as const) {
      const err = await client.chat.completions.create({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'x' }], max_tokens: 1, ...extra } as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
    }
    const missing = await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
