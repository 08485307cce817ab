/**
 * OpenAI's Responses API and Anthropic's Messages API through their official clients (`openai`'s
 * `responses.create` / `responses.stream` / `responses.retrieve`, `@anthropic-ai/sdk`'s
 * `messages.create` / `messages.stream` / `messages.countTokens`) against the real Node server, on
 * tiny_gpt's files with a chat template that renders tools and tool messages (Hermes calls). Each
 * answer is held to the chat-completions answer of the same conversation (same prompt tokens, same
 * greedy text), tool calls are forced by the grammar (a random-weight model never calls by itself) and
 * go round trip, and the streams' events come in the APIs' orders.
 */

import Anthropic from '@anthropic-ai/sdk';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { toolChatModel } from '../helpers/tool-chat-model.js';

const repo = tempRepo(toolChatModel('chat_gpt'));
const MODEL = 'chat_gpt';
const KEY = 'k-messages-test';
let server: TestServer;
let keyed: TestServer;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  server = await startTestServer({ modelRepositories: [repo.path] });
  keyed = await startTestServer({ modelRepositories: [repo.path], apiKeys: [KEY] });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await keyed?.stop();
  repo.cleanup();
});

const WEATHER_PARAMS = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false };
const WEATHER_CHAT = { type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_PARAMS } };

/** The chat-completions answer of a conversation (greedy). */
async function chat(messages: any[], max = 12, extra: Record<string, unknown> = {}) {
  const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: max, temperature: 0, ...extra } as any) as OpenAI.ChatCompletion;
  return { text: r.choices[0]!.message.content ?? '', prompt: r.usage!.prompt_tokens, finish: r.choices[0]!.finish_reason };
}

describe('/v1/responses (openai client)', () => {
  it('answers text input with instructions as chat completions does', async () => {
    const ref = await chat([{ role: 'system', content: 'Be brief' }, { role: 'user', content: 'Hello there' }]);
    const r = await openai.responses.create({ model: MODEL, input: 'Hello there', instructions: 'Be brief', max_output_tokens: 12, temperature: 0 });
    expect(r.object).toBe('response');
    expect(r.id).toMatch(/^resp_/);
    expect(r.output_text).toBe(ref.text);
    expect(r.usage!.input_tokens).toBe(ref.prompt);
    expect(r.status).toBe(ref.finish === 'length' ? 'incomplete' : 'completed');
    if (r.status === 'incomplete') expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    // Items as input, a developer message as the system one: the same prompt.
    const items = await openai.responses.create({ model: MODEL, max_output_tokens: 12, temperature: 0, input: [
      { role: 'developer', content: 'Be brief' }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] },
    ] });
    expect(items.output_text).toBe(ref.text);
    expect((await openai.responses.retrieve(r.id)).output_text).toBe(ref.text);
  });

  it('streams the Responses events in order, numbered, joining into the final response', async () => {
    const whole = await openai.responses.create({ model: MODEL, input: 'Tell me a story', max_output_tokens: 16, temperature: 0 });
    const stream = openai.responses.stream({ model: MODEL, input: 'Tell me a story', max_output_tokens: 16, temperature: 0 });
    const types: string[] = [];
    const seqs: number[] = [];
    let deltas = '';
    for await (const e of stream) {
      types.push(e.type);
      seqs.push(e.sequence_number);
      if (e.type === 'response.output_text.delta') deltas += e.delta;
    }
    const final = await stream.finalResponse();
    expect(deltas).toBe(whole.output_text);
    expect(final.output_text).toBe(whole.output_text);
    expect(seqs).toEqual(seqs.map((_, i) => i));
    const firstDelta = types.indexOf('response.output_text.delta');
    expect(types.slice(0, firstDelta)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(1);
    expect(types.slice(types.lastIndexOf('response.output_text.delta') + 1)).toEqual([
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', whole.status === 'incomplete' ? 'response.incomplete' : 'response.completed',
    ]);
  });

  it('round-trips a function call: function_call item out, function_call_output in, by previous_response_id or by items', async () => {
    const tools = [{ type: 'function' as const, name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_PARAMS, strict: true }];
    const first = await openai.responses.create({ model: MODEL, input: 'Weather in Paris?', tools, tool_choice: { type: 'function', name: 'get_weather' }, temperature: 1, top_p: 1, max_output_tokens: 80 });
    const call = first.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', call_id: expect.stringMatching(/^call_/), status: 'completed' });
    expect(new Ajv().validate(WEATHER_PARAMS, JSON.parse(call.arguments))).toBe(true);
    // The same call streamed: its arguments in pieces.
    const s = openai.responses.stream({ model: MODEL, input: 'Weather in Paris?', tools, tool_choice: 'required', temperature: 1, seed: 4, max_output_tokens: 80 } as any);
    let args = '';
    let pieces = 0;
    for await (const e of s) if (e.type === 'response.function_call_arguments.delta') (args += e.delta, pieces++);
    const done = (await s.finalResponse()).output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    expect(args).toBe(done.arguments);
    expect(pieces).toBeGreaterThan(1);

    const result = { type: 'function_call_output' as const, call_id: call.call_id, output: '21 C' };
    const next = await openai.responses.create({ model: MODEL, previous_response_id: first.id, input: [result], tools, max_output_tokens: 6, temperature: 0 });
    expect(next.previous_response_id).toBe(first.id);
    // The same conversation sent whole, and as chat completions: the same prompt and answer.
    const explicit = await openai.responses.create({ model: MODEL, tools, max_output_tokens: 6, temperature: 0, input: [
      { role: 'user', content: 'Weather in Paris?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, result,
    ] });
    const ref = await chat([
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: call.call_id, content: '21 C' },
    ], 6, { tools: [WEATHER_CHAT] });
    expect(next.usage!.input_tokens).toBe(ref.prompt);
    expect(explicit.usage!.input_tokens).toBe(ref.prompt);
    expect(next.output_text).toBe(ref.text);
  });

  it('keeps nothing with store: false, and answers an unknown previous_response_id with a 404', async () => {
    const r = await openai.responses.create({ model: MODEL, input: 'Hi', max_output_tokens: 2, store: false });
    expect((r as { store?: boolean }).store).toBe(false);
    await expect(openai.responses.create({ model: MODEL, input: 'Again', previous_response_id: r.id, max_output_tokens: 2 }))
      .rejects.toMatchObject({ status: 404, message: expect.stringContaining(`Previous response with id '${r.id}' not found`) });
    await expect(openai.responses.create({ model: MODEL, input: [{ type: 'input_image', image_url: 'x' } as any], max_output_tokens: 2 }))
      .rejects.toMatchObject({ status: 400, error: { param: 'input' } });
  });
});

describe('/v1/messages (@anthropic-ai/sdk)', () => {
  const SYSTEM = 'You are terse.';
  const USER: Anthropic.MessageParam[] = [{ role: 'user', content: 'Hello there' }];

  it('answers with a text block as chat completions does, and counts the same prompt tokens', async () => {
    const ref = await chat([{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Hello there' }], 10);
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 10, system: SYSTEM, messages: USER });
    expect(m).toMatchObject({ type: 'message', role: 'assistant', model: MODEL, id: expect.stringMatching(/^msg_/) });
    expect(m.content).toEqual([{ type: 'text', text: ref.text }]);
    expect(m.stop_reason).toBe(ref.finish === 'length' ? 'max_tokens' : 'end_turn');
    expect(m.usage.input_tokens).toBe(ref.prompt);
    const counted = await anthropic.messages.countTokens({ model: MODEL, system: [{ type: 'text', text: SYSTEM }], messages: USER });
    expect(counted.input_tokens).toBe(ref.prompt);
  });

  it('stops at a stop sequence and names it', async () => {
    const long = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: USER });
    const text = (long.content[0] as Anthropic.TextBlock).text;
    const stop = text.slice(6, 9);
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: USER, stop_sequences: ['never-there', stop] });
    expect(m.stop_reason).toBe('stop_sequence');
    expect(m.stop_sequence).toBe(stop);
    expect((m.content[0] as Anthropic.TextBlock).text).toBe(text.slice(0, text.indexOf(stop)));
  });

  it('streams message_start, the block events, message_delta and message_stop, joining into the message', async () => {
    const whole = await anthropic.messages.create({ model: MODEL, max_tokens: 12, messages: USER });
    const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 12, messages: USER });
    const types: string[] = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const final = await stream.finalMessage();
    expect(final.content).toEqual(whole.content);
    expect(final.stop_reason).toBe(whole.stop_reason);
    expect(final.usage.input_tokens).toBe(whole.usage.input_tokens);
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
    expect(types.slice(0, 2)).toEqual(['message_start', 'content_block_start']);
    expect(types.filter((t) => t === 'content_block_delta').length).toBeGreaterThan(1);
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
  });

  it('uses a tool: a tool_use block (forced), streamed as input_json_delta, then a tool_result round trip', async () => {
    const tools: Anthropic.Tool[] = [{ name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_PARAMS as Anthropic.Tool.InputSchema }];
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 80, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: { type: 'tool', name: 'get_weather' } });
    expect(m.stop_reason).toBe('tool_use');
    const use = m.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', id: expect.stringMatching(/^toolu_/) });
    expect(new Ajv().validate(WEATHER_PARAMS, use.input)).toBe(true);

    const s = anthropic.messages.stream({ model: MODEL, max_tokens: 80, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: { type: 'any' } });
    let json = '';
    s.on('inputJson', (d) => (json += d));
    const final = await s.finalMessage();
    const streamedUse = final.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(JSON.parse(json)).toEqual(streamedUse.input);
    expect(final.stop_reason).toBe('tool_use');

    const back = await anthropic.messages.create({ model: MODEL, max_tokens: 6, tools, messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [use] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C' }] },
    ] });
    const ref = await chat([
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: use.id, type: 'function', function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, content: '21 C' },
    ], 6, { tools: [WEATHER_CHAT] });
    expect(back.usage.input_tokens).toBe(ref.prompt);
    expect(back.content).toEqual(ref.text ? [{ type: 'text', text: ref.text }] : []);
  });

  it("answers errors in Anthropic's shape, and honours x-api-key where keys are on", async () => {
    const bad = await fetch(`${server.url}/v1/messages`, { method: 'POST', body: JSON.stringify({ model: MODEL, messages: USER }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: a positive integer is required' } });
    await expect(anthropic.messages.create({ model: 'nope', max_tokens: 4, messages: USER }))
      .rejects.toMatchObject({ status: 404, error: { type: 'error', error: { type: 'not_found_error' } } });
    await expect(anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'x' } }] }] }))
      .rejects.toMatchObject({ status: 400, error: { error: { type: 'invalid_request_error', message: expect.stringContaining("messages[0].content[0]: content blocks of type \"image\"") } } });

    const ok = new Anthropic({ baseURL: keyed.url, apiKey: KEY, maxRetries: 0 });
    expect((await ok.messages.create({ model: MODEL, max_tokens: 2, messages: USER })).type).toBe('message');
    const wrong = new Anthropic({ baseURL: keyed.url, apiKey: 'not-the-key', maxRetries: 0 });
    await expect(wrong.messages.create({ model: MODEL, max_tokens: 2, messages: USER }))
      .rejects.toMatchObject({ status: 401, error: { type: 'error', error: { type: 'authentication_error', message: 'the API key is not valid' } } });
  });
});
