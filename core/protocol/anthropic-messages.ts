/**
 * Anthropic's Messages API over `llm` models: `POST /v1/messages` and `/v1/messages/count_tokens`
 * in Anthropic's shapes, so clients written for it (coding agents, the official `@anthropic-ai/sdk`)
 * talk to a model served here, as vLLM and llama.cpp's server let them. A request becomes the
 * chat-completions body it means (`system` and the messages' content blocks as chat messages, tool_use
 * and tool_result blocks as an assistant's tool calls and tool messages, thinking blocks as
 * `reasoning_content`, `tools` with their `input_schema`, `tool_choice` auto/any/tool/none,
 * `stop_sequences`, `thinking` as the template's `enable_thinking`) and runs through chat-run.ts; the
 * answer comes back as content blocks (thinking, text, tool_use) with Anthropic's stop reasons and
 * usage, or as its event stream (message_start, content_block_start / delta / stop, message_delta,
 * message_stop). Errors are Anthropic's `{"type": "error", "error": {"type", "message"}}`.
 */

import { HTTP_STATUS, asTsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { SSE_HEADERS, SseStream, cancelOn } from './sse.js';
import { readOpenAiBody } from './openai-answer.js';
import { bad, planChat, runTurn, type TurnEvent, type TurnResult } from './chat-run.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** Anthropic's error types by HTTP status. */
const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error',
  413: 'request_too_large', 429: 'rate_limit_error', 500: 'api_error', 503: 'overloaded_error',
};

export function anthropicErrorBody(status: number, message: string): Json {
  return { type: 'error', error: { type: ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error'), message } };
}

export function anthropicError(err: unknown): Response {
  const e = asTsiError(err);
  const status = HTTP_STATUS[e.code] ?? 400;
  const message = e.message.replace(/^\[request id: [^\]]*\] /, '');
  return new Response(JSON.stringify(anthropicErrorBody(status, message)), { status, headers: JSON_HEADERS });
}

/** A content field as text: a string, or text blocks. */
function blockText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (content === undefined || content === null) return '';
  if (!Array.isArray(content)) throw bad(`${where} must be a string or a list of content blocks`);
  return content.map((b: Json, j: number) => {
    if (b?.type === 'text' && typeof b.text === 'string') return b.text;
    throw bad(`${where}[${j}]: only text blocks are supported here (type 'text'), got ${JSON.stringify(b?.type)}`);
  }).join('');
}

/** Anthropic's messages as chat messages (tool results become tool messages, before the user's text). */
function chatMessages(body: Json): Json[] {
  const out: Json[] = [];
  if (body.system !== undefined && body.system !== null) out.push({ role: 'system', content: blockText(body.system, 'system') });
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw bad(`messages: a non-empty list of {role, content} is required`);
  body.messages.forEach((m: Json, i: number) => {
    const where = `messages[${i}]`;
    if (m?.role !== 'user' && m?.role !== 'assistant') throw bad(`${where}.role must be "user" or "assistant"`);
    if (typeof m.content === 'string') {
      out.push({ role: m.role, content: m.content });
      return;
    }
    if (!Array.isArray(m.content)) throw bad(`${where}.content must be a string or a list of content blocks`);
    let text = '';
    let thinking = '';
    const calls: Json[] = [];
    m.content.forEach((b: Json, j: number) => {
      const at = `${where}.content[${j}]`;
      switch (b?.type) {
        case 'text':
          if (typeof b.text !== 'string') throw bad(`${at}.text must be a string`);
          text += b.text;
          break;
        case 'thinking':
          if (m.role !== 'assistant') throw bad(`${at}: thinking blocks belong to assistant messages`);
          thinking += typeof b.thinking === 'string' ? b.thinking : '';
          break;
        case 'redacted_thinking':
          break;
        case 'tool_use':
          if (m.role !== 'assistant') throw bad(`${at}: tool_use blocks belong to assistant messages`);
          if (typeof b.id !== 'string' || typeof b.name !== 'string') throw bad(`${at}: a tool_use block needs a string 'id' and 'name'`);
          calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
          break;
        case 'tool_result':
          if (m.role !== 'user') throw bad(`${at}: tool_result blocks belong to user messages`);
          if (typeof b.tool_use_id !== 'string') throw bad(`${at}.tool_use_id must be a string`);
          out.push({ role: 'tool', tool_call_id: b.tool_use_id, content: blockText(b.content, `${at}.content`) });
          break;
        default:
          throw bad(`${at}: content blocks of type ${JSON.stringify(b?.type)} are not supported (text, thinking, tool_use, tool_result are)`);
      }
    });
    if (text === '' && calls.length === 0 && thinking === '' && m.role === 'user') return;
    out.push({ role: m.role, content: text, ...(calls.length > 0 ? { tool_calls: calls } : {}), ...(thinking ? { reasoning_content: thinking } : {}) });
  });
  return out;
}

/** The chat-completions body a Messages request means. */
function chatBody(body: Json, counting: boolean): Json {
  if (typeof body.model !== 'string' || body.model === '') throw bad(`model: a string is required`);
  if (!counting && (typeof body.max_tokens !== 'number' || !Number.isInteger(body.max_tokens) || body.max_tokens < 1)) {
    throw bad(`max_tokens: a positive integer is required`);
  }
  const out: Json = { model: body.model, messages: chatMessages(body) };
  if (!counting) {
    out.max_tokens = body.max_tokens;
    for (const k of ['temperature', 'top_p', 'top_k']) if (body[k] !== undefined) out[k] = body[k];
    if (body.stop_sequences !== undefined) {
      if (!Array.isArray(body.stop_sequences) || body.stop_sequences.some((s: unknown) => typeof s !== 'string')) throw bad(`stop_sequences must be a list of strings`);
      out.stop = body.stop_sequences;
    }
  }
  if (body.tools !== undefined && body.tools !== null) {
    if (!Array.isArray(body.tools)) throw bad(`tools must be a list of {name, description, input_schema}`);
    out.tools = body.tools.map((t: Json, i: number) => {
      if (t?.type !== undefined && t.type !== 'custom') throw bad(`tools[${i}]: server tools (type ${JSON.stringify(t.type)}) are not supported; give {name, description, input_schema}`);
      if (typeof t?.name !== 'string') throw bad(`tools[${i}].name must be a string`);
      return { type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema ?? { type: 'object' } } };
    });
  }
  const choice = body.tool_choice;
  if (choice !== undefined && choice !== null) {
    if (choice.type === 'auto') out.tool_choice = 'auto';
    else if (choice.type === 'any') out.tool_choice = 'required';
    else if (choice.type === 'none') out.tool_choice = 'none';
    else if (choice.type === 'tool' && typeof choice.name === 'string') out.tool_choice = { type: 'function', function: { name: choice.name } };
    else throw bad(`tool_choice must be {"type": "auto" | "any" | "none"} or {"type": "tool", "name": ...}`);
    if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  }
  const thinking = body.thinking;
  if (thinking !== undefined && thinking !== null) {
    if (!['enabled', 'disabled', 'adaptive', 'between_tools'].includes(thinking.type)) throw bad(`thinking.type must be "enabled", "adaptive" or "disabled"`);
    out.chat_template_kwargs = { enable_thinking: thinking.type !== 'disabled' };
  }
  const output = body.output_config;
  if (output !== undefined && output !== null) {
    if (output.effort !== undefined && output.effort !== null) out.reasoning_effort = output.effort;
    const format = output.format;
    if (format !== undefined && format !== null) {
      if (format.type !== 'json_schema' || typeof format.schema !== 'object') throw bad(`output_config.format must be {"type": "json_schema", "schema": {...}}`);
      if (!counting) out.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: format.schema } };
    }
  }
  return out;
}

const stopReason = (r: TurnResult) =>
  r.finish === 'tool_calls' ? 'tool_use' : r.finish === 'length' ? 'max_tokens' : r.stopString !== undefined ? 'stop_sequence' : 'end_turn';

const toolUseId = (callId: string) => callId.replace(/^call_/, 'toolu_');

const parseArgs = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
};

function usage(r: TurnResult): Json {
  return {
    input_tokens: r.promptTokens, output_tokens: r.completionTokens, cache_read_input_tokens: r.cachedTokens ?? 0, cache_creation_input_tokens: 0,
    ...(r.reasoning ? { output_tokens_details: { thinking_tokens: r.reasoningTokens } } : {}),
  };
}

/** `POST /v1/messages`. */
export async function messages(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  let body: Json;
  let plan: ReturnType<typeof planChat>;
  try {
    body = await readOpenAiBody(req, maxInput);
    plan = planChat(server, chatBody(body, false));
  } catch (err) {
    return anthropicError(err);
  }
  const id = `msg_${crypto.randomUUID().replace(/-/g, '')}`;
  const head = { id, type: 'message', role: 'assistant', model: body.model as string };
  if (body.stream !== true) {
    try {
      const r = await runTurn(server, plan, cancelOn(req.signal)).done;
      const content: Json[] = [];
      if (r.reasoning) content.push({ type: 'thinking', thinking: r.reasoning, signature: '' });
      if (r.text) content.push({ type: 'text', text: r.text });
      for (const c of r.calls) content.push({ type: 'tool_use', id: toolUseId(c.id), name: c.function.name, input: parseArgs(c.function.arguments) });
      return new Response(JSON.stringify({ ...head, content, stop_reason: stopReason(r), stop_sequence: r.stopString ?? null, usage: usage(r) }), { headers: JSON_HEADERS });
    } catch (err) {
      return anthropicError(err);
    }
  }
  return stream(server, plan, req.signal, head);
}

/** The Messages event stream: content blocks opened as the output changes kind, each closed before the next. */
async function stream(server: InferenceServer, plan: ReturnType<typeof planChat>, signal: AbortSignal, head: Json): Promise<Response> {
  const sse = new SseStream('/v1/messages');
  // Events made before message_start went out (the first piece's) wait for it.
  let pending: string[] | undefined = [];
  const send = (type: string, data: Json) => {
    const text = `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    if (pending) pending.push(text);
    else sse.send(text);
  };
  // The prompt's tokens, for message_start (the finish says them again).
  const inputTokens = plan.info.tokenizer.encode(plan.prompt, { addSpecialTokens: false }).length;
  let index = -1;
  let open: 'thinking' | 'text' | 'tool_use' | undefined;
  let calls = 0;
  const close = () => {
    if (open === undefined) return;
    if (open === 'thinking') send('content_block_delta', { index, delta: { type: 'signature_delta', signature: '' } });
    send('content_block_stop', { index });
    open = undefined;
  };
  const begin = (kind: 'thinking' | 'text' | 'tool_use', block: Json) => {
    close();
    index++;
    open = kind;
    send('content_block_start', { index, content_block: block });
  };
  const onEvent = (e: TurnEvent) => {
    if (e.kind === 'reasoning') {
      if (open !== 'thinking') begin('thinking', { type: 'thinking', thinking: '', signature: '' });
      send('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: e.text } });
    } else if (e.kind === 'text') {
      if (open !== 'text') begin('text', { type: 'text', text: '' });
      send('content_block_delta', { index, delta: { type: 'text_delta', text: e.text } });
    } else if (e.kind === 'call') {
      calls++;
      begin('tool_use', { type: 'tool_use', id: toolUseId(e.id), name: e.name, input: {} });
    } else send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: e.text } });
  };
  const turn = runTurn(server, plan, sse.inferOptions(signal), onEvent);
  // message_start goes out before any block; an error before the first output is a plain error answer.
  const first = await turn.started;
  if (first) return anthropicError(first);
  sse.send(`event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { ...head, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: inputTokens, output_tokens: 0 } } })}\n\n`);
  for (const text of pending!) sse.send(text);
  pending = undefined;
  turn.done.then((r) => {
    close();
    // A call that was cut keeps its streamed start; the stop reason says what the whole answer holds.
    const reason = calls > 0 && r.finish !== 'length' ? 'tool_use' : stopReason(r);
    send('message_delta', { delta: { stop_reason: reason, stop_sequence: r.stopString ?? null }, usage: { output_tokens: r.completionTokens } });
    send('message_stop', {});
    sse.close();
  }, (err) => {
    const e = asTsiError(err);
    send('error', anthropicErrorBody(HTTP_STATUS[e.code] ?? 500, e.message));
    sse.close();
  });
  return new Response(sse.body, { headers: SSE_HEADERS });
}

/** `POST /v1/messages/count_tokens`: the prompt the request would run, counted. */
export async function countTokens(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  try {
    const body = await readOpenAiBody(req, maxInput);
    const plan = planChat(server, chatBody(body, true));
    return new Response(JSON.stringify({ input_tokens: plan.info.tokenizer.encode(plan.prompt, { addSpecialTokens: false }).length }), { headers: JSON_HEADERS });
  } catch (err) {
    return anthropicError(err);
  }
}
