/**
 * The `llm` backend served by the real Node server over real sockets, with the default repository's
 * tiny_gpt: in-flight batching gives every request exactly the tokens it gets decoded alone with raw
 * onnxruntime-node; sampling, stop strings, max_tokens, cancellation (the cache is freed), the context
 * limit; Triton's generate / generate_stream and gRPC stream; the OpenAI-compatible API (shapes, SSE
 * framing, usage); /metrics and llm_stats.
 */

import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcClient, parsePrometheus, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

let server: TestServer;
let ref: ReferenceDecoder;
let grpc: GrpcTestClient;

beforeAll(async () => {
  server = await startTestServer({
    modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['tiny_gpt', 'simple'], grpcPort: 0, grpcAddress: '127.0.0.1', metricsPort: 0,
  });
  ref = await referenceDecoder(join(MODELS, 'tiny_gpt'));
  grpc = grpcClient(`127.0.0.1:${server.grpc!.port}`);
}, 60_000);

afterAll(async () => {
  grpc?.close();
  await ref?.release();
  await server?.stop();
});

const generate = (body: Obj) => postJson(`${server.url}/v2/models/tiny_gpt/generate`, body);
const llmStats = async () => (await getJson(`${server.url}/v2/models/tiny_gpt/stats`)).body.model_stats[0].llm_stats;

/** Server-sent events of a response body: each `data:` payload, in order. */
async function sse(r: Response): Promise<string[]> {
  const text = await r.text();
  expect(text.endsWith('\n\n')).toBe(true);
  return text.split('\n\n').filter((e) => e.length > 0).map((e) => {
    expect(e.startsWith('data: ')).toBe(true);
    return e.slice('data: '.length);
  });
}

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx of black quartz'.split(' ');
/** A prompt of about `n` words, different for each `seed`. */
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed * 3) % WORDS.length]).join(' ');

describe('in-flight batching', () => {
  for (const concurrency of [1, 4, 16]) {
    it(`gives each of ${concurrency} concurrent requests the tokens it gets decoded alone`, async () => {
      const before = await llmStats();
      const reqs = Array.from({ length: concurrency }, (_, i) => ({ prompt: promptOf(1 + ((i * 5) % 23), i + concurrency), maxTokens: 4 + ((i * 11) % 29) }));
      const answers = await Promise.all(reqs.map((r) => generate({ text_input: r.prompt, max_tokens: r.maxTokens, exclude_input_in_output: true })));
      for (let i = 0; i < reqs.length; i++) {
        const expected = await ref.greedy(reqs[i]!.prompt, reqs[i]!.maxTokens);
        const a = answers[i]!;
        expect(a.status).toBe(200);
        expect({ i, text: a.body.text_output, tokens: a.body.num_output_tokens }).toEqual({ i, text: ref.tokenizer.decode(expected), tokens: expected.length });
        expect(a.body.num_input_tokens).toBe(ref.tokenizer.encode(reqs[i]!.prompt).length);
        expect(a.body.finish_reason).toBe(expected.length < reqs[i]!.maxTokens ? 'stop' : 'length');
      }
      const after = await llmStats();
      const tokens = after.generation_tokens - before.generation_tokens;
      const steps = after.steps - before.steps;
      expect(tokens).toBe(answers.reduce((n, a) => n + a.body.num_output_tokens, 0));
      // Batched: far fewer model steps than tokens once several requests run together.
      if (concurrency === 16) expect(steps).toBeLessThan(tokens / 3);
    }, 60_000);
  }
});

describe('generation controls', () => {
  it('samples reproducibly with a seed, whatever runs beside it', async () => {
    const body = { text_input: 'once upon a time', max_tokens: 24, temperature: 0.9, top_k: 40, top_p: 0.95, exclude_input_in_output: true };
    const a = await generate({ ...body, seed: 7 });
    const [b] = await Promise.all([generate({ ...body, seed: 7 }), generate({ text_input: 'noise', max_tokens: 30 }), generate({ text_input: 'more noise here', max_tokens: 12 })]);
    const c = await generate({ ...body, seed: 8 });
    expect(a.status).toBe(200);
    expect(b!.body.text_output).toBe(a.body.text_output);
    expect(c.body.text_output).not.toBe(a.body.text_output);
    const greedy = ref.tokenizer.decode(await ref.greedy(body.text_input, 24));
    expect(a.body.text_output).not.toBe(greedy);
  });

  it('gives seeded sampled requests that join a running decode loop the tokens they get alone', async () => {
    // Drawn in the decoding worker's loop: a join stops it and the next one carries the PRNG on.
    const kinds = [
      { temperature: 0.9, top_k: 40 }, { temperature: 1.1, top_p: 0.9, repetition_penalty: 1.4 }, { temperature: 0.8, presence_penalty: 1, frequency_penalty: 0.6 },
      { temperature: 1.2, min_tokens: 20 }, { temperature: 0, repetition_penalty: 1.7, min_tokens: 10 }, { temperature: 1, top_k: 5, top_p: 0.8 },
    ];
    const bodies = kinds.map((k, i) => ({ text_input: promptOf(2 + i * 3, i), max_tokens: 24 + i * 3, seed: 40 + i, exclude_input_in_output: true, ...k }));
    const alone = [];
    for (const b of bodies) alone.push((await generate(b)).body.text_output);
    // A long request is decoding (its first token came) when they come: each joins a running loop,
    // which the server counts.
    const before = (await llmStats()).joined_sequences;
    const anchor = await fetch(`${server.url}/v2/models/tiny_gpt/generate_stream`, {
      method: 'POST', body: JSON.stringify({ text_input: 'a long one', max_tokens: 480, min_tokens: 480, stream: true }),
    });
    const reader = anchor.body!.getReader();
    let head = '';
    while (!head.includes('data: ')) {
      const { done, value } = await reader.read();
      if (done) break;
      head += new TextDecoder().decode(value);
    }
    const together = await Promise.all(bodies.map(async (b, i) => {
      await new Promise((r) => setTimeout(r, i * 15));
      return (await generate(b)).body.text_output;
    }));
    const running = (await llmStats()).running_sequences;
    while (!(await reader.read()).done);
    expect(together).toEqual(alone);
    expect(running, 'the long request still decoding when the others were done').toBe(1);
    expect((await llmStats()).joined_sequences - before).toBeGreaterThanOrEqual(bodies.length);
  });

  it('ends at a stop string, leaving it out, and at max_tokens', async () => {
    const full = await generate({ text_input: 'a lazy dog', max_tokens: 40, exclude_input_in_output: true });
    const text: string = full.body.text_output;
    const stop = text.slice(12, 16);
    const cut = text.indexOf(stop);
    const stopped = await generate({ text_input: 'a lazy dog', max_tokens: 40, exclude_input_in_output: true, stop });
    expect(stopped.body).toMatchObject({ text_output: text.slice(0, cut), finish_reason: 'stop' });
    // The same through generate_stream: no piece ever shows part of the stop string.
    const r = await fetch(`${server.url}/v2/models/tiny_gpt/generate_stream`, { method: 'POST', body: JSON.stringify({ text_input: 'a lazy dog', max_tokens: 40, stream: true, stop }) });
    const events = (await sse(r)).map((e) => JSON.parse(e));
    expect(events.map((e) => e.text_output).join('')).toBe(text.slice(0, cut));
    expect(events.at(-1)).toMatchObject({ finish_reason: 'stop' });
    const short = await generate({ text_input: 'a lazy dog', max_tokens: 3 });
    expect(short.body).toMatchObject({ num_output_tokens: 3, finish_reason: 'length' });
    expect(short.body.text_output.startsWith('a lazy dog')).toBe(true);
  });

  it('answers a prompt longer than the context with a 400 that says so', async () => {
    const long = 'dog '.repeat(600);
    const r = await generate({ text_input: long });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/maximum context length is 512 tokens\. However, the prompt is \d+ tokens long, which leaves no room for the completion/);
    const over = await generate({ text_input: 'dog '.repeat(210), max_tokens: 100 });
    expect(over.status).toBe(400);
    expect(over.body.error).toMatch(/you requested 5\d\d tokens \(4\d\d in the prompt, 100 for the completion\)/);
    const bad = await generate({ text_input: 'x', temperature: -1 });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/parameter 'temperature' must be a number >= 0, got -1/);
  });

  it('frees a sequence and its cache when its client goes away mid-stream', async () => {
    const before = await llmStats();
    const ac = new AbortController();
    const r = await fetch(`${server.url}/v2/models/tiny_gpt/generate_stream`, {
      method: 'POST', body: JSON.stringify({ text_input: 'the fox', max_tokens: 500, stream: true, ignore_eos: true }), signal: ac.signal,
    });
    const reader = r.body!.getReader();
    await reader.read();
    expect((await llmStats()).running_sequences).toBe(1);
    ac.abort();
    let s = await llmStats();
    for (let i = 0; i < 100 && (s.running_sequences > 0 || s.kv_cache.held_bytes > 0); i++) {
      await new Promise((res) => setTimeout(res, 20));
      s = await llmStats();
    }
    expect(s).toMatchObject({ running_sequences: 0, waiting_sequences: 0, kv_cache: { reserved_tokens: 0, held_bytes: 0 } });
    const stats = (await getJson(`${server.url}/v2/models/tiny_gpt/stats`)).body.model_stats[0];
    expect(stats.inference_stats.fail.count).toBeGreaterThan(0);
    // It stopped well before its 500 tokens.
    expect(s.generation_tokens - before.generation_tokens).toBeLessThan(400);
  });
});

describe('gRPC ModelStreamInfer', () => {
  it('streams the tokens of a request as responses', async () => {
    const bytes = (s: string) => {
      const b = Buffer.from(s);
      const out = Buffer.alloc(4 + b.length);
      out.writeUInt32LE(b.length, 0);
      b.copy(out, 4);
      return out;
    };
    const msgs = await streamAll(grpc, [{
      model_name: 'tiny_gpt', inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1] }], raw_input_contents: [bytes('a lazy dog')],
      parameters: { stream: { bool_param: true }, max_tokens: { int64_param: 10 } },
    }]);
    const text = msgs.map((m) => Buffer.from(m.infer_response.raw_output_contents[0]).subarray(4).toString()).join('');
    expect(text).toBe(ref.tokenizer.decode(await ref.greedy('a lazy dog', 10)));
    expect(msgs.at(-1)!.infer_response.parameters.finish_reason.string_param).toBe('length');
    // Triton flags every streamed response: only the final one says true.
    const flags = msgs.map((m) => m.infer_response.parameters.triton_final_response.bool_param);
    expect(flags).toEqual(msgs.map((_, i) => i === msgs.length - 1));
  });
});

describe('OpenAI-compatible API', () => {
  it('lists the language models only', async () => {
    const r = await getJson(`${server.url}/v1/models`);
    expect(r.body).toEqual({ object: 'list', data: [{ id: 'tiny_gpt', object: 'model', created: expect.any(Number), owned_by: 'tsi' }] });
    expect((await getJson(`${server.url}/v1/models/tiny_gpt`)).body.id).toBe('tiny_gpt');
  });

  it('answers /v1/completions with the greedy text and usage', async () => {
    const r = await postJson(`${server.url}/v1/completions`, { model: 'tiny_gpt', prompt: 'once upon a time', max_tokens: 9 });
    const expected = await ref.greedy('once upon a time', 9);
    const promptTokens = ref.tokenizer.encode('once upon a time').length;
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: expect.stringMatching(/^cmpl-/), object: 'text_completion', created: expect.any(Number), model: 'tiny_gpt',
      choices: [{ index: 0, text: ref.tokenizer.decode(expected), logprobs: null, finish_reason: 'length' }],
      usage: { prompt_tokens: promptTokens, completion_tokens: 9, total_tokens: promptTokens + 9, prompt_tokens_details: { cached_tokens: 0 } },
    });
  });

  it('streams /v1/chat/completions as chunks, a usage chunk and [DONE]', async () => {
    const body = { model: 'tiny_gpt', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }], max_tokens: 12 };
    const whole = await postJson(`${server.url}/v1/chat/completions`, body);
    expect(whole.body).toMatchObject({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant' }, finish_reason: 'length' }] });
    // The model's chat template made the prompt (tokenizer_config.json).
    const prompt = 'system: Be brief.\nuser: Hello!\nassistant:';
    expect(whole.body.usage.prompt_tokens).toBe(ref.tokenizer.encode(prompt).length);
    expect(whole.body.choices[0].message.content).toBe(ref.tokenizer.decode(await ref.greedy(prompt, 12)));

    const r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await sse(r);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    for (const c of chunks) expect(c).toMatchObject({ id: chunks[0].id, object: 'chat.completion.chunk', model: 'tiny_gpt' });
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    // The same prompt again: its whole blocks came from the prefix cache this time.
    const cached = Math.floor((whole.body.usage.prompt_tokens - 1) / 16) * 16;
    expect(usage.usage).toEqual({ ...whole.body.usage, prompt_tokens_details: { cached_tokens: cached } });
    const finish = chunks.at(-2);
    expect(finish.choices[0]).toMatchObject({ delta: {}, finish_reason: 'length' });
    expect(chunks.slice(1, -2).map((c) => c.choices[0].delta.content).join('')).toBe(whole.body.choices[0].message.content);
  });

  it('answers OpenAI-style errors', async () => {
    const missing = await postJson(`${server.url}/v1/chat/completions`, { model: 'simple', messages: [{ role: 'user', content: 'x' }] });
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatchObject({ type: 'NotFoundError', message: expect.stringContaining("'simple'") });
    const long = await postJson(`${server.url}/v1/completions`, { model: 'tiny_gpt', prompt: 'dog '.repeat(600), stream: true });
    expect(long.status).toBe(400);
    expect(long.body.error.message).toMatch(/^This model's maximum context length is 512 tokens/);
    const n = await postJson(`${server.url}/v1/completions`, { model: 'tiny_gpt', prompt: 'x', n: 0 });
    expect(n.status).toBe(400);
    expect(n.body.error).toMatchObject({ param: 'n', message: expect.stringMatching(/'n' must be an integer in \[1, 128\]/) });
    // What would change the answer's content is refused, not ignored; the empty forms clients send pass.
    const chat = (extra: Record<string, unknown>) => postJson(`${server.url}/v1/chat/completions`,
      { model: 'tiny_gpt', messages: [{ role: 'user', content: 'x' }], max_tokens: 1, ...extra });
    for (const [extra, text] of [
      [{ prompt_logprobs: 1, stream: true }, /'prompt_logprobs' are not available when 'stream' is true/],
      [{ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'always' }, /'tool_choice' must be "none", "auto", "required"/],
      [{ response_format: { type: 'yaml' } }, /'response_format' type "yaml" is not supported/],
    ] as const) {
      const r = await chat(extra);
      expect([r.status, r.body.error?.message]).toEqual([400, expect.stringMatching(text)]);
    }
    for (const extra of [{ logit_bias: {} }, { logit_bias: null }, { tools: [] }, { response_format: { type: 'text' } }]) {
      expect((await chat(extra)).status).toBe(200);
    }
  });
});

describe('metrics and statistics', () => {
  it('reports vLLM-named metrics and llm_stats', async () => {
    const r = await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`);
    const m = parsePrometheus(await r.text());
    const value = (name: string) => m.samples.find((s) => s.name === name && s.labels.model === 'tiny_gpt')?.value;
    expect(value('vllm:time_to_first_token_seconds_count')).toBeGreaterThan(0);
    expect(value('vllm:time_per_output_token_seconds_count')).toBeGreaterThan(0);
    expect(value('vllm:generation_tokens_total')).toBeGreaterThan(0);
    expect(value('vllm:num_requests_running')).toBe(0);
    expect(value('vllm:num_requests_waiting')).toBe(0);
    expect(value('vllm:gpu_cache_usage_perc')).toBe(0);
    const s = await llmStats();
    expect(s.generation_tokens).toBe(value('vllm:generation_tokens_total'));
    expect(s).toMatchObject({ max_num_seqs: 32, kv_cache: { max_tokens: 32768, bytes_per_token: 1024 } });
  });
});
