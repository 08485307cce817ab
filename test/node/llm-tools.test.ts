/**
 * Function calling through the official `openai` client against the real Node server: tiny_gpt's
 * files served under two more names, one whose chat template renders `tools` and tool messages
 * (Hermes format, the default parser) and one read with the `llama3_json` parser. With random weights
 * only a forced call (`required`, a named function) is ever a call: the grammar makes it one, the
 * parser reads it back, and the round trip (the assistant's call and the tool's result) renders.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { MODELS, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { toolChatModel } from '../helpers/tool-chat-model.js';

const src = join(MODELS, 'tiny_gpt', '1');
/** JSON as the template's tojson writes it (a space after ':' and ','), for these plain schemas. */
const tojson = (v: unknown) => JSON.stringify(v).replace(/":/g, '": ').replace(/,"/g, ', "');
const model = toolChatModel;

let repo: ReturnType<typeof tempRepo>;
let server: TestServer;
let client: OpenAI;
const tokenizer = Tokenizer.fromJson(readFileSync(join(src, 'tokenizer.json'), 'utf8'));

beforeAll(async () => {
  repo = tempRepo({ ...model('hermes_gpt'), ...model('llama_gpt', 'llama3_json') });
  server = await startTestServer({ modelRepositories: [repo.path] });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  repo?.cleanup();
});

const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false },
  },
};
const TIME = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } } };
const user = [{ role: 'user' as const, content: 'Weather in Paris?' }];

describe('tools', () => {
  it('renders tools through the chat template and forces a named call that parses and validates', async () => {
    const r = await client.chat.completions.create({ model: 'hermes_gpt', messages: user, tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_weather' } }, temperature: 1, seed: 1, max_tokens: 80 });
    const prompt = `tools: get_weather ${tojson(WEATHER.function.parameters)};get_time ${tojson(TIME.function.parameters)};\nuser: Weather in Paris?\nassistant:`;
    expect(r.usage!.prompt_tokens).toBe(tokenizer.encode(prompt).length);
    const c = r.choices[0]!;
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBeNull();
    expect(c.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather', arguments: expect.any(String) } }]);
    const call = c.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(new Ajv().validate(WEATHER.function.parameters, JSON.parse(call.function.arguments))).toBe(true);

    // The round trip: a call and the tool's result go back in the messages (the arguments reach the template as an object).
    const sent = { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Paris","days":2}' } };
    const back = await client.chat.completions.create({ model: 'hermes_gpt', tools: [WEATHER], max_tokens: 4, temperature: 0, messages: [
      ...user, { role: 'assistant', content: null, tool_calls: [sent] }, { role: 'tool', tool_call_id: sent.id, content: '21 C' },
    ] });
    const backPrompt = `tools: get_weather ${tojson(WEATHER.function.parameters)};\nuser: Weather in Paris?\n`
      + 'assistant: <tool_call>get_weather {"city": "Paris", "days": 2}</tool_call>\ntool call_1: 21 C\nassistant:';
    expect(back.usage!.prompt_tokens).toBe(tokenizer.encode(backPrompt).length);
    expect(back.choices[0]!.finish_reason).not.toBe('tool_calls');
  });

  it('forces some call with required, one per choice, and streams its arguments in pieces as tool-call deltas', async () => {
    const body = { model: 'hermes_gpt', messages: user, tools: [WEATHER, TIME], tool_choice: 'required' as const, temperature: 1, seed: 3, max_tokens: 80, n: 4 };
    const whole = await client.chat.completions.create(body);
    for (const c of whole.choices) {
      expect(c.finish_reason).toBe('tool_calls');
      const call = c.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
      const tool = [WEATHER, TIME].find((t) => t.function.name === call.function.name)!;
      expect(new Ajv().validate(tool.function.parameters, JSON.parse(call.function.arguments))).toBe(true);
    }
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const calls: { name: string; arguments: string }[][] = [[], [], [], []];
    const argPieces = [0, 0, 0, 0];
    const reasons: (string | null)[] = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        for (const d of c.delta.tool_calls ?? []) {
          const slot = (calls[c.index]![d.index] ??= { name: '', arguments: '' });
          slot.name += d.function?.name ?? '';
          slot.arguments += d.function?.arguments ?? '';
          if (d.function?.arguments) argPieces[c.index]!++;
        }
        if (c.finish_reason) reasons[c.index] = c.finish_reason;
      }
    }
    expect(reasons).toEqual(['tool_calls', 'tool_calls', 'tool_calls', 'tool_calls']);
    // The arguments arrive as the model writes them, token by token, not whole at the finish.
    for (const k of argPieces) expect(k).toBeGreaterThan(1);
    expect(calls).toEqual(whole.choices.map((c) => c.message.tool_calls!.map((t) => ({ name: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }))));
  });

  it('reads calls with the parser the model config names (llama3_json)', async () => {
    const r = await client.chat.completions.create({ model: 'llama_gpt', messages: user, tools: [TIME], tool_choice: 'required', temperature: 1, seed: 2, max_tokens: 40 });
    const call = r.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_time');
    expect(['UTC', 'CET']).toContain(JSON.parse(call.function.arguments).zone);
  });

  it("answers text with tool_choice none or auto (a random model's answer is no call), and refuses bad choices by name", async () => {
    for (const tool_choice of ['none', 'auto'] as const) {
      const r = await client.chat.completions.create({ model: 'hermes_gpt', messages: user, tools: [WEATHER], tool_choice, max_tokens: 5, temperature: 0 });
      expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
      expect(typeof r.choices[0]!.message.content).toBe('string');
    }
    const err = await client.chat.completions.create({ model: 'hermes_gpt', messages: user, tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('tool_choice');
  });
});
