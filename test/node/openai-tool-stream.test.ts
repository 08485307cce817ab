/**
 * Streamed tool calls as OpenAI sends them, through the official `openai` client against the real
 * Node server: each call's first delta (index, id, type, name, arguments "") as soon as its name is
 * written, then its arguments in pieces as they are generated, parallel calls at their own indices,
 * no markup in `content`; the pieces join into the non-streamed answer's calls, and the SDK's stream
 * helpers (`stream().finalChatCompletion()`, `runTools`) accumulate them. A random-weight model never
 * writes two calls, so the model here is the real `llm` backend (scheduler, engine, tokenizer, chat
 * template, OpenAI routes) over a decoder session that writes a fixed answer, chosen by a word in the
 * prompt, token by token (tiny_gpt's tokenizer): one model per tool-call parser.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { RunnableToolFunctionWithParse } from 'openai/lib/RunnableFunction';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLlmBackend, type DecoderRuntime } from '../../core/llm/backend.js';
import type { DecoderSession, StepRequest, StepResult } from '../../core/llm/decoder.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { MODELS, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const src = join(MODELS, 'tiny_gpt', '1');
const tokenizerJson = readFileSync(join(src, 'tokenizer.json'), 'utf8');
const tokenizer = Tokenizer.fromJson(tokenizerJson);
const EOS = 2047;

const LONG = 'remember to water the plants on the balcony, buy bread and milk, call the plumber about the kitchen sink, and send the report before friday';
/** What the model answers when the prompt holds the key, per parser. */
const SCRIPTS: Record<string, string> = {
  hermes_two: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n'
    + `<tool_call>\n{"name": "write_note", "arguments": {"text": "${LONG}", "tags": ["home", "todo"]}}\n</tool_call>`,
  hermes_text: 'No call here: 3 < 4 and <tool is not a tag.',
  hermes_cut: `<tool_call>\n{"name": "write_note", "arguments": {"text": "${LONG}"}}\n</tool_call>`,
  hermes_result: 'It is sunny in Paris.',
  llama_two: '<|python_tag|>{"name": "get_time", "parameters": {"zone": "UTC"}}; {"name": "write_note", "parameters": {"text": "buy bread", "tags": []}}',
  mistral_two: '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "CET"}}, {"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}]',
};
const scriptTokens = new Map(Object.entries(SCRIPTS).map(([k, v]) => [k, [...tokenizer.encode(v, { addSpecialTokens: false }), EOS]]));

/** A decoder session that writes the script its prompt names; every sequence from its first token on. */
function scriptedSession(): DecoderSession {
  const V = tokenizer.vocabSize;
  const seqs = new Map<number, { script: number[]; at: number }>();
  const pick = (tokens: number[]) => {
    const prompt = tokenizer.decode(tokens);
    // A tool's result in the prompt: the answer after the calls.
    const key = prompt.includes('RESULT') ? 'hermes_result' : [...scriptTokens.keys()].find((k) => prompt.includes(`[${k}]`));
    if (!key) throw new Error(`no script named in the prompt: ${prompt}`);
    return scriptTokens.get(key)!;
  };
  return {
    device: 'cpu',
    async step(req: StepRequest): Promise<StepResult> {
      for (const id of req.free) seqs.delete(id);
      const next: number[] = [];
      if (req.kind === 'prefill') {
        for (const r of req.rows) {
          const script = pick(r.tokens);
          for (const id of [r.seq, ...(r.forks ?? [])]) seqs.set(id, { script, at: 0 });
          next.push(script[0]!);
        }
      } else if (req.kind === 'decode') {
        for (const r of req.rows) {
          const s = seqs.get(r.seq)!;
          next.push(s.script[Math.min(++s.at, s.script.length - 1)]!);
        }
      }
      const base = { vocab: V, kvBytes: 0, inferNs: 0, inputNs: 0 };
      if (req.kind === 'free') return base;
      if (req.greedy) return { ...base, tokens: Int32Array.from(next) };
      const logits = new Float32Array(next.length * V).fill(-30);
      next.forEach((t, r) => (logits[r * V + t] = 30));
      return { ...base, logits };
    },
    async close() {},
  };
}

const scripted: DecoderRuntime = {
  async describe() {
    const kv = (name: string) => ({ name, datatype: 'float32', shape: ['batch', 1, 'seq', 8] as (number | string)[] });
    return {
      inputs: [{ name: 'input_ids', datatype: 'int64', shape: ['batch', 'seq'] }, { name: 'attention_mask', datatype: 'int64', shape: ['batch', 'seq'] },
        kv('past_key_values.0.key'), kv('past_key_values.0.value')],
      outputs: [{ name: 'logits', datatype: 'float32', shape: ['batch', 'seq', 2048] }, kv('present.0.key'), kv('present.0.value')],
    };
  },
  async open() {
    return scriptedSession();
  },
};

const TEMPLATE = '{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:';
function model(name: string, parser: string): Record<string, string> {
  return {
    [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "scripted"\nparameters [ { key: "tool_call_parser" value: { string_value: "${parser}" } } ]\n`,
    [`${name}/1/model.onnx`]: 'the scripted session reads no weights',
    [`${name}/1/tokenizer.json`]: tokenizerJson,
    [`${name}/1/config.json`]: JSON.stringify({ n_positions: 512 }),
    [`${name}/1/generation_config.json`]: JSON.stringify({ do_sample: false, eos_token_id: EOS }),
    [`${name}/1/tokenizer_config.json`]: JSON.stringify({ eos_token: '<|endoftext|>', chat_template: TEMPLATE }),
  };
}

let repo: ReturnType<typeof tempRepo>;
let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  repo = tempRepo({ ...model('hermes_bot', 'hermes'), ...model('llama_bot', 'llama3_json'), ...model('mistral_bot', 'mistral') });
  server = await startTestServer({ modelRepositories: [repo.path], extraBackends: { scripted: () => createLlmBackend(scripted) } });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  repo?.cleanup();
});

const fn = (name: string, properties: Record<string, unknown>) => ({ type: 'function' as const, function: { name, parameters: { type: 'object', properties } } });
const TOOLS = [
  fn('get_weather', { city: { type: 'string' }, days: { type: 'integer' } }),
  fn('get_time', { zone: { type: 'string' } }),
  fn('write_note', { text: { type: 'string' }, tags: { type: 'array', items: { type: 'string' } } }),
];

type Call = { name: string; arguments: string };
type Chunk = OpenAI.ChatCompletionChunk;

/** A streamed answer: its chunks, its content, its calls by index (pieces joined), and each call's argument pieces. */
async function streamed(body: Omit<OpenAI.ChatCompletionCreateParamsStreaming, 'stream'>) {
  const chunks: Chunk[] = [];
  for await (const c of await client.chat.completions.create({ ...body, stream: true })) chunks.push(c);
  const calls: Call[] = [];
  const pieces: string[][] = [];
  const firsts: unknown[] = [];
  let content = '';
  let finish: string | null = null;
  for (const c of chunks) {
    const ch = c.choices[0];
    if (!ch) continue;
    content += ch.delta.content ?? '';
    finish = ch.finish_reason ?? finish;
    for (const d of ch.delta.tool_calls ?? []) {
      if (!calls[d.index]) {
        firsts[d.index] = d;
        calls[d.index] = { name: d.function!.name!, arguments: d.function!.arguments! };
        pieces[d.index] = [];
      } else {
        expect(d.id).toBeUndefined();
        expect(d.function?.name).toBeUndefined();
        calls[d.index]!.arguments += d.function!.arguments!;
        pieces[d.index]!.push(d.function!.arguments!);
      }
    }
  }
  return { chunks, calls, pieces, firsts, content, finish };
}

async function whole(body: Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, 'stream'>) {
  const r = await client.chat.completions.create(body);
  const c = r.choices[0]!;
  const calls = (c.message.tool_calls ?? []).map((t) => ({ name: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }));
  return { content: c.message.content, calls, finish: c.finish_reason };
}

const ask = (model: string, key: string, extra: Record<string, unknown> = {}) => ({ model, tools: TOOLS, temperature: 0, max_tokens: 300, messages: [{ role: 'user' as const, content: `Do it [${key}]` }], ...extra });

describe('streamed tool calls', () => {
  it('hermes: content, then two parallel calls at their own indices, the long arguments in many pieces, equal to the whole answer', async () => {
    const w = await whole(ask('hermes_bot', 'hermes_two'));
    expect(w.finish).toBe('tool_calls');
    expect(w.content).toBe('Let me check.');
    expect(w.calls).toEqual([
      { name: 'get_weather', arguments: '{"city":"Paris","days":2}' },
      { name: 'write_note', arguments: JSON.stringify({ text: LONG, tags: ['home', 'todo'] }) },
    ]);
    const s = await streamed(ask('hermes_bot', 'hermes_two'));
    expect(s.finish).toBe('tool_calls');
    expect(s.content).toBe('Let me check.');
    expect(s.calls).toEqual(w.calls);
    // OpenAI's first delta of a call: index, id, type and name, arguments empty.
    for (const [i, first] of s.firsts.entries()) {
      expect(first).toEqual({ index: i, id: expect.stringMatching(/^call_/), type: 'function', function: { name: w.calls[i]!.name, arguments: '' } });
    }
    expect(s.pieces[1]!.length).toBeGreaterThan(10);
    expect(s.pieces[1]!.every((p) => p.length > 0)).toBe(true);
    // The arguments went out while the call was being written: chunks of both calls, in order, before the finish.
    const order = s.chunks.flatMap((c) => (c.choices[0]?.delta.tool_calls ?? []).map((d) => d.index));
    expect(order.indexOf(1)).toBeGreaterThan(order.lastIndexOf(0));
    for (const c of s.chunks) expect(c.choices[0]?.delta.content ?? '').not.toMatch(/tool_call|[{}]/);
  });

  it('llama3_json and mistral: parallel calls streamed as they are written, no markup as content', async () => {
    for (const [model, key] of [['llama_bot', 'llama_two'], ['mistral_bot', 'mistral_two']] as const) {
      const w = await whole(ask(model, key));
      expect(w.finish).toBe('tool_calls');
      expect(w.content).toBeNull();
      expect(w.calls.length).toBe(2);
      const s = await streamed(ask(model, key));
      expect(s.finish).toBe('tool_calls');
      expect(s.content).toBe('');
      expect(s.calls).toEqual(w.calls);
      expect(s.pieces.every((p) => p.length > 1)).toBe(true);
    }
    expect((await whole(ask('mistral_bot', 'mistral_two'))).calls).toEqual([
      { name: 'get_time', arguments: '{"zone":"CET"}' }, { name: 'get_weather', arguments: '{"city":"Rome","days":1}' },
    ]);
  });

  it('parallel_tool_calls false keeps the first call, streamed and whole', async () => {
    const extra = { parallel_tool_calls: false };
    const w = await whole(ask('hermes_bot', 'hermes_two', extra));
    const s = await streamed(ask('hermes_bot', 'hermes_two', extra));
    expect(w.calls.map((c) => c.name)).toEqual(['get_weather']);
    expect(s.calls).toEqual(w.calls);
    expect(s.content).toBe(w.content);
  });

  it('streams text that only looks like markup as content, all of it', async () => {
    const s = await streamed(ask('hermes_bot', 'hermes_text'));
    expect(s.calls).toEqual([]);
    expect(s.finish).toBe('stop');
    expect(s.content).toBe(SCRIPTS.hermes_text);
    expect(await whole(ask('hermes_bot', 'hermes_text'))).toEqual({ content: SCRIPTS.hermes_text, calls: [], finish: 'stop' });
  });

  it('a call cut by max_tokens: the stream has sent its start and says length; the whole answer is text', async () => {
    const s = await streamed(ask('hermes_bot', 'hermes_cut', { max_tokens: 40 }));
    expect(s.finish).toBe('length');
    expect(s.calls.map((c) => c.name)).toEqual(['write_note']);
    expect(s.content).toBe('');
    const w = await whole(ask('hermes_bot', 'hermes_cut', { max_tokens: 40 }));
    expect(w.finish).toBe('length');
    expect(w.calls).toEqual([]);
    expect(w.content).toMatch(/^<tool_call>\n\{"name": "write_note"/);
  });

  it("the SDK's stream helpers accumulate the calls: stream().finalChatCompletion() and runTools", async () => {
    const argsDeltas: string[] = [];
    const st = client.chat.completions.stream(ask('hermes_bot', 'hermes_two'));
    st.on('tool_calls.function.arguments.delta', (e) => argsDeltas.push(e.arguments_delta));
    const final = await st.finalChatCompletion();
    const w = await whole(ask('hermes_bot', 'hermes_two'));
    expect(final.choices[0]!.message.tool_calls!.map((t) => ({ name: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (t as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }))).toEqual(w.calls);
    expect(argsDeltas.join('')).toBe(w.calls.map((c) => c.arguments).join(''));

    const got: unknown[] = [];
    const tools: RunnableToolFunctionWithParse<object>[] = TOOLS.map((t) => ({
      type: 'function',
      function: { ...t.function, parameters: t.function.parameters as RunnableToolFunctionWithParse<object>['function']['parameters'], description: t.function.name, parse: (s: string) => JSON.parse(s) as object, function: (args: object) => (got.push(args), `RESULT ${t.function.name}`) },
    }));
    const runner = client.chat.completions.runTools({
      model: 'hermes_bot', temperature: 0, max_tokens: 300, stream: true, tools,
      messages: [{ role: 'user', content: 'Do it [hermes_two]' }],
    });
    expect(await runner.finalContent()).toBe(SCRIPTS.hermes_result);
    expect(got).toEqual([{ city: 'Paris', days: 2 }, { text: LONG, tags: ['home', 'todo'] }]);
  });
});
