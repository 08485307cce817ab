/**
 * OpenAI's Responses API over `llm` models: `POST /v1/responses`, `GET` and `DELETE
 * /v1/responses/{id}`, what the official client's `responses.create`, `responses.stream` and
 * `responses.retrieve` call (agents speak it; vLLM and llama.cpp's server serve it). A request becomes
 * the chat-completions body it means — `instructions` and the `input` (a string, or items: messages
 * with text parts, `function_call` and `function_call_output` items, `reasoning` items) as chat
 * messages, function `tools`, `tool_choice`, `text.format` as `response_format`, `reasoning.effort` as
 * the template's `reasoning_effort`, `max_output_tokens` — and runs through chat-run.ts. The answer's
 * `output` holds a reasoning item (when the model thinks), a message with `output_text`, and
 * `function_call` items; streamed, the Responses events (response.created, output_item.added,
 * content_part.added, output_text.delta, reasoning_text.delta, function_call_arguments.delta, their
 * `.done`s, response.completed) each with its `sequence_number`.
 *
 * `previous_response_id` continues a stored response: its input and output come before the new input
 * (its `instructions` do not, as OpenAI's do not). Responses are stored unless `store: false`, in memory,
 * least recently used first out, within RESPONSE_STORE_LIMITS (a server restart forgets them).
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { SSE_HEADERS, SseStream, cancelOn } from './sse.js';
import { openAiError, readOpenAiBody } from './openai-answer.js';
import { bad, planChat, runTurn, type TurnEvent, type TurnResult } from './chat-run.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** The store's bounds: at most this many responses, and this many bytes of their JSON. */
export const RESPONSE_STORE_LIMITS = { responses: 1000, bytes: 64 * 1024 * 1024 };

interface Stored {
  response: Json;
  /** The conversation as chat messages: the inputs so far and this response's output. */
  history: Json[];
  bytes: number;
}

/** Stored responses, least recently used first (a Map keeps insertion order; a read moves one to the end). */
export class ResponseStore {
  private readonly map = new Map<string, Stored>();
  private bytes = 0;

  constructor(private readonly limits = RESPONSE_STORE_LIMITS) {}

  get(id: string): Stored | undefined {
    const s = this.map.get(id);
    if (s) {
      this.map.delete(id);
      this.map.set(id, s);
    }
    return s;
  }

  put(id: string, response: Json, history: Json[]): void {
    const bytes = JSON.stringify(response).length + JSON.stringify(history).length;
    this.delete(id);
    this.map.set(id, { response, history, bytes });
    this.bytes += bytes;
    for (const [k, v] of this.map) {
      if (this.map.size <= this.limits.responses && this.bytes <= this.limits.bytes) break;
      this.map.delete(k);
      this.bytes -= v.bytes;
    }
  }

  delete(id: string): boolean {
    const s = this.map.get(id);
    if (!s) return false;
    this.map.delete(id);
    this.bytes -= s.bytes;
    return true;
  }
}

const stores = new WeakMap<InferenceServer, ResponseStore>();
const storeOf = (server: InferenceServer) => {
  let s = stores.get(server);
  if (!s) stores.set(server, (s = new ResponseStore()));
  return s;
};

const newId = (prefix: string) => `${prefix}_${crypto.randomUUID().replace(/-/g, '')}`;

/** A message's content as text: a string, or input_text / output_text parts. */
function partsText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(`${where} must be a string or a list of content parts`, 'input');
  return content.map((p: Json, j: number) => {
    if ((p?.type === 'input_text' || p?.type === 'output_text' || p?.type === 'text') && typeof p.text === 'string') return p.text;
    throw bad(`${where}[${j}]: only text parts are supported (input_text, output_text), got ${JSON.stringify(p?.type)}`, 'input');
  }).join('');
}

/** The request's `input` as chat messages. */
function inputMessages(input: unknown): Json[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) throw bad(`'input' must be a string or a list of items`, 'input');
  const out: Json[] = [];
  let thought: string | undefined;
  /** The assistant message a function_call joins: the one just before it, else a new one. */
  const assistant = () => {
    const last = out[out.length - 1];
    if (last?.role === 'assistant') return last;
    const m: Json = { role: 'assistant', content: '' };
    out.push(m);
    return m;
  };
  input.forEach((item: Json, i: number) => {
    const where = `input[${i}]`;
    const type = item?.type ?? 'message';
    if (type === 'message') {
      const role = item.role === 'developer' ? 'system' : item.role;
      if (!['user', 'system', 'assistant'].includes(role)) throw bad(`${where}.role must be user, system, developer or assistant`, 'input');
      const m: Json = { role, content: partsText(item.content, `${where}.content`) };
      if (role === 'assistant' && thought !== undefined) m.reasoning_content = thought;
      thought = undefined;
      out.push(m);
    } else if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string') throw bad(`${where}: a function_call needs a string 'call_id' and 'name'`, 'input');
      const m = assistant();
      if (thought !== undefined) m.reasoning_content = thought;
      thought = undefined;
      (m.tool_calls ??= []).push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: typeof item.arguments === 'string' ? item.arguments : JSON.stringify(item.arguments ?? {}) } });
    } else if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw bad(`${where}.call_id must be a string`, 'input');
      out.push({ role: 'tool', tool_call_id: item.call_id, content: partsText(item.output ?? '', `${where}.output`) });
    } else if (type === 'reasoning') {
      // Its text goes with the assistant turn it came before, as reasoning_content (templates keep or drop it).
      const parts = Array.isArray(item.content) ? item.content : [];
      thought = parts.map((p: Json) => (typeof p?.text === 'string' ? p.text : '')).join('');
    } else throw bad(`${where}: items of type ${JSON.stringify(type)} are not supported (message, function_call, function_call_output, reasoning are)`, 'input');
  });
  return out;
}

/** The chat-completions body a Responses request means, and the conversation it continues. */
function chatBody(server: InferenceServer, body: Json): { chat: Json; history: Json[] } {
  if (typeof body.model !== 'string' || body.model === '') throw bad(`'model' is required: the name of a model (GET /v1/models lists them)`, 'model');
  for (const k of ['background', 'conversation', 'prompt']) {
    if (body[k] !== undefined && body[k] !== null && body[k] !== false) throw bad(`'${k}' is not supported`, k);
  }
  let history: Json[] = [];
  if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
    const prev = storeOf(server).get(String(body.previous_response_id));
    if (!prev) throw new TsiError('NOT_FOUND', `Previous response with id '${body.previous_response_id}' not found (responses are kept in memory, the last ${RESPONSE_STORE_LIMITS.responses} or ${RESPONSE_STORE_LIMITS.bytes / 1024 / 1024} MiB)`);
    history = prev.history;
  }
  if (body.input === undefined || body.input === null) throw bad(`'input' is required`, 'input');
  const conversation = [...history, ...inputMessages(body.input)];
  const instructions = body.instructions;
  if (instructions !== undefined && instructions !== null && typeof instructions !== 'string') throw bad(`'instructions' must be a string`, 'instructions');
  const chat: Json = { model: body.model, messages: instructions ? [{ role: 'system', content: instructions }, ...conversation] : conversation };
  if (body.max_output_tokens !== undefined) chat.max_tokens = body.max_output_tokens;
  for (const k of ['temperature', 'top_p', 'parallel_tool_calls', 'seed', 'top_k', 'stop', 'chat_template_kwargs']) if (body[k] !== undefined) chat[k] = body[k];
  if (body.reasoning?.effort !== undefined && body.reasoning.effort !== null) chat.reasoning_effort = body.reasoning.effort;
  if (body.tools !== undefined && body.tools !== null) {
    if (!Array.isArray(body.tools)) throw bad(`'tools' must be a list of {"type": "function", "name": ..., "parameters": {...}}`, 'tools');
    chat.tools = body.tools.map((t: Json, i: number) => {
      if (t?.type !== 'function') throw bad(`tools[${i}]: only function tools are supported, got ${JSON.stringify(t?.type)}`, 'tools');
      return { type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters ?? { type: 'object' } } };
    });
  }
  const choice = body.tool_choice;
  if (choice !== undefined && choice !== null) {
    chat.tool_choice = typeof choice === 'object' && choice.type === 'function' ? { type: 'function', function: { name: choice.name } } : choice;
  }
  const format = body.text?.format;
  if (format !== undefined && format !== null && format.type !== 'text') {
    if (format.type === 'json_schema') chat.response_format = { type: 'json_schema', json_schema: { name: format.name, schema: format.schema, strict: format.strict } };
    else if (format.type === 'json_object') chat.response_format = { type: 'json_object' };
    else throw bad(`text.format.type must be text, json_schema or json_object`, 'text');
  }
  return { chat, history: conversation };
}

/** The response object around `output` (OpenAI's fields, with what the request asked). */
function responseObject(id: string, created: number, body: Json, status: string, output: Json[], r?: TurnResult): Json {
  const incomplete = r?.finish === 'length';
  return {
    id, object: 'response', created_at: created, status: r ? (incomplete ? 'incomplete' : 'completed') : status,
    background: false, error: null, incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: body.instructions ?? null, max_output_tokens: body.max_output_tokens ?? null, metadata: body.metadata ?? {},
    model: body.model, output, parallel_tool_calls: body.parallel_tool_calls ?? true, previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: null }, store: body.store !== false,
    temperature: body.temperature ?? null, text: { format: body.text?.format ?? { type: 'text' } }, tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [], top_p: body.top_p ?? null, truncation: 'disabled', user: body.user ?? null,
    usage: r ? {
      input_tokens: r.promptTokens, input_tokens_details: { cached_tokens: r.cachedTokens ?? 0 },
      output_tokens: r.completionTokens, output_tokens_details: { reasoning_tokens: r.reasoningTokens },
      total_tokens: r.promptTokens + r.completionTokens,
    } : null,
  };
}

const reasoningItem = (id: string, text: string, status = 'completed') => ({ type: 'reasoning', id, summary: [], content: [{ type: 'reasoning_text', text }], status });
const textPart = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });
const messageItem = (id: string, text: string, status = 'completed') => ({ type: 'message', id, status, role: 'assistant', content: [textPart(text)] });
const callItem = (id: string, callId: string, name: string, args: string, status = 'completed') => ({ type: 'function_call', id, call_id: callId, name, arguments: args, status });

/** The conversation after this response: its inputs, then its output as an assistant turn. */
function withOutput(history: Json[], r: TurnResult): Json[] {
  const m: Json = { role: 'assistant', content: r.text };
  if (r.reasoning) m.reasoning_content = r.reasoning;
  if (r.calls.length > 0) m.tool_calls = r.calls;
  return [...history, m];
}

/** `POST /v1/responses`. */
export async function createResponse(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  let body: Json;
  let plan: ReturnType<typeof planChat>;
  let history: Json[];
  try {
    body = await readOpenAiBody(req, maxInput);
    const c = chatBody(server, body);
    history = c.history;
    plan = planChat(server, c.chat);
  } catch (err) {
    return openAiError(err);
  }
  const id = newId('resp');
  const created = Math.floor(Date.now() / 1000);
  const keep = (response: Json, r: TurnResult) => {
    if (body.store !== false) storeOf(server).put(id, response, withOutput(history, r));
  };
  if (body.stream !== true) {
    try {
      const r = await runTurn(server, plan, cancelOn(req.signal)).done;
      const output: Json[] = [];
      if (r.reasoning) output.push(reasoningItem(newId('rs'), r.reasoning));
      if (r.text || r.calls.length === 0) output.push(messageItem(newId('msg'), r.text));
      for (const c of r.calls) output.push(callItem(newId('fc'), c.id, c.function.name, c.function.arguments));
      const response = responseObject(id, created, body, 'completed', output, r);
      keep(response, r);
      return new Response(JSON.stringify(response), { headers: JSON_HEADERS });
    } catch (err) {
      return openAiError(err);
    }
  }
  return stream(server, plan, req.signal, id, created, body, keep);
}

/** The Responses event stream: an output item opened as the output changes kind, each closed (`.done`) before the next. */
async function stream(
  server: InferenceServer, plan: ReturnType<typeof planChat>, signal: AbortSignal, id: string, created: number, body: Json,
  keep: (response: Json, r: TurnResult) => void,
): Promise<Response> {
  const sse = new SseStream('/v1/responses');
  // 0 and 1 are response.created's and response.in_progress's, which go out once the request has started.
  let seq = 2;
  let pending: string[] | undefined = [];
  const emit = (text: string) => (pending ? pending.push(text) : sse.send(text));
  const send = (type: string, data: Json) => emit(`event: ${type}\ndata: ${JSON.stringify({ type, ...data, sequence_number: seq++ })}\n\n`);
  const output: Json[] = [];
  /** The item being written: its index in `output`, and its text so far. */
  let open: { index: number; item: Json; text: string } | undefined;
  const close = () => {
    if (!open) return;
    const { index, item, text } = open;
    open = undefined;
    const base = { item_id: item.id, output_index: index };
    if (item.type === 'message') {
      send('response.output_text.done', { ...base, content_index: 0, text, logprobs: [] });
      send('response.content_part.done', { ...base, content_index: 0, part: textPart(text) });
      output[index] = messageItem(item.id, text);
    } else if (item.type === 'reasoning') {
      send('response.reasoning_text.done', { ...base, content_index: 0, text });
      send('response.content_part.done', { ...base, content_index: 0, part: { type: 'reasoning_text', text } });
      output[index] = reasoningItem(item.id, text);
    } else {
      send('response.function_call_arguments.done', { ...base, name: item.name, arguments: text });
      output[index] = callItem(item.id, item.call_id, item.name, text);
    }
    send('response.output_item.done', { output_index: index, item: output[index] });
  };
  const begin = (item: Json, part?: Json) => {
    close();
    const index = output.length;
    output.push(item);
    open = { index, item, text: '' };
    send('response.output_item.added', { output_index: index, item });
    if (part) send('response.content_part.added', { item_id: item.id, output_index: index, content_index: 0, part });
  };
  const onEvent = (e: TurnEvent) => {
    if (e.kind === 'reasoning') {
      if (open?.item.type !== 'reasoning') begin({ type: 'reasoning', id: newId('rs'), summary: [], content: [], status: 'in_progress' }, { type: 'reasoning_text', text: '' });
      open!.text += e.text;
      send('response.reasoning_text.delta', { item_id: open!.item.id, output_index: open!.index, content_index: 0, delta: e.text });
    } else if (e.kind === 'text') {
      if (open?.item.type !== 'message') begin({ type: 'message', id: newId('msg'), status: 'in_progress', role: 'assistant', content: [] }, textPart(''));
      open!.text += e.text;
      send('response.output_text.delta', { item_id: open!.item.id, output_index: open!.index, content_index: 0, delta: e.text, logprobs: [] });
    } else if (e.kind === 'call') {
      begin(callItem(newId('fc'), e.id, e.name, '', 'in_progress'));
    } else if (open) {
      open.text += e.text;
      send('response.function_call_arguments.delta', { item_id: open.item.id, output_index: open.index, delta: e.text });
    }
  };
  const turn = runTurn(server, plan, sse.inferOptions(signal), onEvent);
  const first = await turn.started;
  if (first) return openAiError(first);
  const initial = responseObject(id, created, body, 'in_progress', []);
  // The first piece's events were made as it arrived, before `started` was read: they follow these.
  for (const [type, n] of [['response.created', 0], ['response.in_progress', 1]] as const) {
    sse.send(`event: ${type}\ndata: ${JSON.stringify({ type, response: initial, sequence_number: n })}\n\n`);
  }
  for (const text of pending!) sse.send(text);
  pending = undefined;
  turn.done.then((r) => {
    close();
    if (output.length === 0) {
      begin({ type: 'message', id: newId('msg'), status: 'in_progress', role: 'assistant', content: [] }, textPart(''));
      close();
    }
    const response = responseObject(id, created, body, 'completed', output, r);
    keep(response, r);
    send(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
    sse.close();
  }, (err) => {
    send('error', { code: null, message: err instanceof Error ? err.message : String(err), param: null });
    sse.close();
  });
  return new Response(sse.body, { headers: SSE_HEADERS });
}

/** `GET /v1/responses/{id}`. */
export function getResponse(server: InferenceServer, id: string): Response {
  const s = storeOf(server).get(id);
  if (!s) return openAiError(new TsiError('NOT_FOUND', `Response with id '${id}' not found`));
  return new Response(JSON.stringify(s.response), { headers: JSON_HEADERS });
}

/** `DELETE /v1/responses/{id}`. */
export function deleteResponse(server: InferenceServer, id: string): Response {
  if (!storeOf(server).delete(id)) return openAiError(new TsiError('NOT_FOUND', `Response with id '${id}' not found`));
  return new Response(JSON.stringify({ id, object: 'response', deleted: true }), { headers: JSON_HEADERS });
}
