/**
 * The OpenAI-compatible API over `llm` models, as `(Request) => Promise<Response>` like the rest of
 * core's HTTP: `GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions`, with
 * server-sent-event streaming (`data: {chunk}\n\n` ... `data: [DONE]\n\n`) and `usage` counts, the
 * field names and shapes OpenAI's clients parse (as Triton's OpenAI frontend and vLLM serve them).
 * A request becomes one generate request to the model's scheduler (the prompt in `text_input`, the
 * sampling fields as request parameters, always streamed inside so each token goes out as it
 * comes); chat messages go through the model's chat template first. Sampling fields a client leaves
 * out take the model's `generation_config.json` defaults (vLLM's behaviour), not OpenAI's temperature 1.
 * Errors use OpenAI's `{"error": {"message", "type", "param", "code"}}` body.
 */

import { HTTP_STATUS, TsiError, asTsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { SSE_HEADERS, SseStream } from '../sse.js';
import { decodeString, encodeString } from '../tensor.js';
import type { InferRequest, InferResponse, Parameters } from '../types.js';
import { llmModelOf, type LlmModelInfo } from './backend.js';
import type { ChatMessage } from './chat.js';
import { MAX_N, MAX_TOP_LOGPROBS } from './params.js';
import { TOOL_PARSERS, callStart, parseToolCalls, planTools, templateMessage, type ToolCall, type ToolParser, type ToolPlan } from './tools.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** OpenAI's completions default when max_tokens is absent. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export function openAiError(err: unknown): Response {
  const e = asTsiError(err);
  const status = HTTP_STATUS[e.code] ?? 400;
  const type = status === 404 ? 'NotFoundError' : status >= 500 ? 'InternalServerError' : 'BadRequestError';
  const param = (err as { param?: string } | undefined)?.param ?? null;
  return new Response(JSON.stringify({ error: { message: plain(e.message), type, param, code: status } }), { status, headers: JSON_HEADERS });
}

/** The scheduler's message without Triton's `[request id: ...]` prefix, which means nothing here. */
const plain = (message: string) => message.replace(/^\[request id: [^\]]*\] /, '');

/** A refusal; `param` names the field it is about (OpenAI's error `param`). */
const bad = (message: string, param?: string) => Object.assign(new TsiError('INVALID_ARG', message), { param });

/** Ready `llm` models, one entry each (their newest ready version). */
function llmModels(server: InferenceServer): { name: string; info: LlmModelInfo }[] {
  const out = new Map<string, LlmModelInfo>();
  for (const e of server.repositoryIndex(true)) {
    if (out.has(e.name)) continue;
    try {
      const info = llmModelOf(server.model(e.name).stats);
      if (info) out.set(e.name, info);
    } catch {
      // Unloaded between the index and the lookup.
    }
  }
  return [...out].map(([name, info]) => ({ name, info }));
}

/** `GET /v1/models`. */
export function listModels(server: InferenceServer, nowS = Math.floor(Date.now() / 1000)): Response {
  const data = llmModels(server).map(({ name }) => ({ id: name, object: 'model', created: nowS, owned_by: 'tsi' }));
  return new Response(JSON.stringify({ object: 'list', data }), { headers: JSON_HEADERS });
}

/** `GET /v1/models/{model}`. */
export function getModel(server: InferenceServer, name: string): Response {
  const hit = llmModels(server).find((m) => m.name === name);
  if (!hit) return openAiError(new TsiError('NOT_FOUND', `The model '${name}' does not exist`));
  return new Response(JSON.stringify({ id: name, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'tsi' }), { headers: JSON_HEADERS });
}

async function readBody(req: Request, maxInput: number): Promise<Json> {
  const raw = new Uint8Array(await req.arrayBuffer());
  if (raw.byteLength > maxInput) throw bad(`the request body is ${raw.byteLength} bytes, more than the ${maxInput} allowed (--http-max-input-size)`);
  let body: unknown;
  try {
    body = JSON.parse(decodeString(raw));
  } catch (err) {
    throw bad(`the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw bad('the request body must be a JSON object');
  return body as Json;
}

/** The model a request names, which must be a ready `llm` model. */
function modelOf(server: InferenceServer, body: Json): { name: string; info: LlmModelInfo } {
  if (typeof body.model !== 'string' || body.model === '') throw bad(`'model' is required: the name of a model (GET /v1/models lists them)`);
  let info: LlmModelInfo | undefined;
  try {
    info = llmModelOf(server.model(body.model).stats);
  } catch {
    info = undefined;
  }
  if (!info) throw new TsiError('NOT_FOUND', `The model '${body.model}' does not exist or is not a language model (GET /v1/models lists those served)`);
  return { name: body.model, info };
}

/** A field that must be an integer in a range, or absent. */
function intField(body: Json, name: string, min: number, max: number): number | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw bad(`'${name}' must be an integer in [${min}, ${max}], got ${JSON.stringify(v)}`, name);
  return v;
}

/** What one request asks for beyond the generate parameters: its choices and log-probabilities. */
interface Wants {
  n: number;
  /** Completions' best_of: candidates generated, the n likeliest returned. */
  bestOf: number;
  /** Top log-probabilities per token to return; undefined: none. */
  logprobs?: number;
}

/** Sampling fields → request parameters the llm scheduler reads (params.ts); absent ones stay absent. */
function samplingParameters(body: Json, chat: boolean, maxTokensDefault: number | undefined): { p: Parameters; wants: Wants } {
  // Features a client relies on for the answer's content: refused rather than ignored. Their empty
  // forms (what some clients send by default) change nothing and pass.
  if (body.suffix !== undefined && body.suffix !== null && body.suffix !== '') throw bad(`'suffix' is not supported`, 'suffix');
  const bias = body.logit_bias;
  if (typeof bias === 'object' && bias !== null && Object.keys(bias).length > 0) throw bad(`'logit_bias' is not supported`, 'logit_bias');
  if (body.audio !== undefined && body.audio !== null) throw bad(`'audio' output is not supported`, 'audio');
  if (Array.isArray(body.modalities) && body.modalities.some((m: unknown) => m !== 'text')) throw bad(`'modalities' other than "text" are not supported`, 'modalities');
  if (body.prediction !== undefined && body.prediction !== null) throw bad(`'prediction' (predicted outputs) is not supported`, 'prediction');
  const n = intField(body, 'n', 1, MAX_N) ?? 1;
  let logprobs: number | undefined;
  if (chat) {
    if (body.logprobs !== undefined && body.logprobs !== null && typeof body.logprobs !== 'boolean') throw bad(`'logprobs' must be a boolean`, 'logprobs');
    const top = intField(body, 'top_logprobs', 0, MAX_TOP_LOGPROBS);
    if (top !== undefined && body.logprobs !== true) throw bad(`'top_logprobs' needs 'logprobs': true`, 'top_logprobs');
    if (body.logprobs === true) logprobs = top ?? 0;
  } else logprobs = intField(body, 'logprobs', 0, MAX_TOP_LOGPROBS);
  const bestOf = chat ? n : intField(body, 'best_of', 1, MAX_N) ?? n;
  if (bestOf < n) throw bad(`'best_of' must be at least 'n' (${n})`, 'best_of');
  if (bestOf > n && body.stream === true) throw bad(`'best_of' greater than 'n' cannot be streamed`, 'best_of');
  const p: Parameters = {};
  const copy = (from: string, to = from) => {
    const v = body[from];
    if (v === undefined || v === null) return;
    if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean') p[to] = v;
    else if (Array.isArray(v)) p[to] = JSON.stringify(v);
    else throw bad(`'${from}' must be a number, string, boolean or list, got ${JSON.stringify(v)}`, from);
  };
  for (const k of ['temperature', 'top_p', 'top_k', 'seed', 'stop', 'stop_token_ids', 'presence_penalty', 'frequency_penalty',
    'repetition_penalty', 'min_tokens', 'ignore_eos', 'skip_special_tokens']) copy(k);
  copy(body.max_completion_tokens !== undefined && body.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens', 'max_tokens');
  if (p.max_tokens === undefined && maxTokensDefault !== undefined) p.max_tokens = maxTokensDefault;
  if (bestOf > 1) p.n = bestOf;
  // best_of ranks candidates by their cumulative log-probability, which the logprobs carry.
  if (logprobs !== undefined || bestOf > n) p.logprobs = logprobs ?? 0;
  const format = body.response_format;
  if (format !== undefined && format !== null) {
    if (typeof format !== 'object' || Array.isArray(format)) throw bad(`'response_format' must be an object such as {"type": "json_object"}`, 'response_format');
    if (format.type !== 'text') p.response_format = JSON.stringify(format);
  }
  return { p, wants: { n, bestOf, logprobs } };
}

function messageText(m: Json, i: number): string {
  const c = m.content;
  if (typeof c === 'string') return c;
  if (c === null || c === undefined) return '';
  if (Array.isArray(c)) {
    return c.map((part: Json, j: number) => {
      if (part?.type === 'text' && typeof part.text === 'string') return part.text;
      throw bad(`messages[${i}].content[${j}]: only text parts are supported (type 'text')`);
    }).join('');
  }
  throw bad(`messages[${i}].content must be a string or a list of text parts`);
}

function chatPrompt(body: Json, info: LlmModelInfo, tools: ToolPlan): string {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw bad(`'messages' must be a non-empty list of {role, content}`, 'messages');
  const messages: ChatMessage[] = msgs.map((m: Json, i: number) => {
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') throw bad(`messages[${i}] must be an object with a string 'role'`, 'messages');
    // An assistant's tool calls and a tool's result reach the template as transformers passes them.
    return { role: m.role, content: messageText(m, i), ...templateMessage(m) };
  });
  return info.chat.render(messages, tools.templateTools ? { tools: tools.templateTools } : {});
}

/** The model's tool-call format (config parameter `tool_call_parser`). */
function toolParserOf(server: InferenceServer, name: string): ToolParser {
  const v = server.model(name).config.parameters?.tool_call_parser?.string_value ?? 'hermes';
  if (!(TOOL_PARSERS as readonly string[]).includes(v)) {
    throw new TsiError('INVALID_ARG', `model '${name}': the config parameter tool_call_parser is '${v}'; one of ${TOOL_PARSERS.join(', ')}`);
  }
  return v as ToolParser;
}

function completionPrompt(body: Json): string {
  const p = body.prompt;
  if (typeof p === 'string') return p;
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') return p[0];
  throw bad(`'prompt' must be a string (or a list of one string)`);
}

interface Finish {
  reason: string;
  promptTokens: number;
  completionTokens: number;
  cumulativeLogprob: number;
}

/** One token's log-probabilities as the scheduler sends them (scheduler.ts, logprobJson). */
interface TokenLp {
  token_id: number;
  token: string;
  bytes: number[];
  logprob: number;
  top_logprobs: Omit<TokenLp, 'top_logprobs'>[];
}

/** What the scheduler sends back: a choice's text piece, its log-probabilities, and the finish. */
interface Piece {
  index: number;
  text: string;
  logprobs?: TokenLp[];
  finish?: Finish;
}

function pieceOf(r: InferResponse): Piece {
  const t = r.outputs.find((o) => o.name === 'text_output');
  const text = t ? (t.data as Uint8Array[]).map(decodeString).join('') : '';
  const q = r.parameters ?? {};
  const piece: Piece = { index: Number(q.index ?? 0), text };
  if (typeof q.logprobs === 'string') piece.logprobs = JSON.parse(q.logprobs) as TokenLp[];
  if (q.finish_reason !== undefined) {
    piece.finish = { reason: String(q.finish_reason), promptTokens: Number(q.num_input_tokens ?? 0), completionTokens: Number(q.num_output_tokens ?? 0), cumulativeLogprob: Number(q.cumulative_logprob ?? 0) };
  }
  return piece;
}

function usageOf(finishes: Finish[]): Json {
  const prompt = finishes[0]?.promptTokens ?? 0;
  const completion = finishes.reduce((n, f) => n + f.completionTokens, 0);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** How one endpoint shapes its answers. */
interface Shape {
  idPrefix: string;
  object: string;
  chunkObject: string;
  /** `logprobs` of a choice (or chunk) for these tokens; `offset`: where their text starts (completions). */
  logprobs(tokens: TokenLp[], offset: number): Json;
  choice(index: number, text: string, finish: string | null, logprobs: Json | null): Json;
  /** Streamed chunks' choices for one piece (chat adds a role chunk first and a separate finish). */
  chunkChoices(index: number, text: string, finish: string | null, first: boolean, logprobs: Json | null): Json[];
}

const COMPLETION: Shape = {
  idPrefix: 'cmpl-',
  object: 'text_completion',
  chunkObject: 'text_completion',
  logprobs: (tokens, offset) => {
    const text_offset: number[] = [];
    for (const t of tokens) {
      text_offset.push(offset);
      offset += t.token.length;
    }
    return {
      tokens: tokens.map((t) => t.token),
      token_logprobs: tokens.map((t) => t.logprob),
      top_logprobs: tokens.map((t) => Object.fromEntries(t.top_logprobs.map((x) => [x.token, x.logprob]))),
      text_offset,
    };
  },
  choice: (index, text, finish, logprobs) => ({ index, text, logprobs, finish_reason: finish }),
  chunkChoices: (index, text, finish, _first, logprobs) => [{ index, text, logprobs, finish_reason: finish }],
};

const CHAT: Shape = {
  idPrefix: 'chatcmpl-',
  object: 'chat.completion',
  chunkObject: 'chat.completion.chunk',
  logprobs: (tokens) => ({
    content: tokens.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes, top_logprobs: t.top_logprobs.map((x) => ({ token: x.token, logprob: x.logprob, bytes: x.bytes })) })),
    refusal: null,
  }),
  choice: (index, text, finish, logprobs) => ({ index, message: { role: 'assistant', content: text, refusal: null }, logprobs, finish_reason: finish }),
  chunkChoices: (index, text, finish, first, logprobs) => {
    const out: Json[] = [];
    if (first) out.push({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null });
    if (text.length > 0 || logprobs) out.push({ index, delta: { content: text }, logprobs, finish_reason: null });
    if (finish !== null) out.push({ index, delta: {}, logprobs: null, finish_reason: finish });
    return out;
  },
};

/** `POST /v1/completions` and `POST /v1/chat/completions`. */
export async function completions(server: InferenceServer, req: Request, chat: boolean, maxInput: number): Promise<Response> {
  let request: InferRequest;
  let body: Json;
  let wants: Wants;
  let echo = '';
  let tools: ToolPlan = { parse: false, parallel: false };
  let toolParser: ToolParser = 'hermes';
  try {
    body = await readBody(req, maxInput);
    const { name, info } = modelOf(server, body);
    const parser = toolParserOf(server, name);
    tools = chat ? planTools(body, parser) : { parse: false, parallel: false };
    const prompt = chat ? chatPrompt(body, info, tools) : completionPrompt(body);
    const sp = samplingParameters(body, chat, chat ? undefined : COMPLETIONS_DEFAULT_MAX_TOKENS);
    const parameters = sp.p;
    wants = sp.wants;
    if (tools.guided) {
      if (parameters.response_format !== undefined) throw bad(`'response_format' cannot be combined with a forced tool call ('tool_choice')`, 'response_format');
      parameters.guided_tool_call = tools.guided;
    }
    // Mistral's [TOOL_CALLS] is a special token: the parser must see it.
    if (tools.parse && parser === 'mistral') parameters.skip_special_tokens = false;
    toolParser = parser;
    parameters.stream = true;
    // The prompt is echoed here, once per choice, not by the scheduler.
    parameters.exclude_input_in_output = true;
    if (body.echo === true && !chat) echo = prompt;
    // A chat template writes its own special tokens.
    if (chat) parameters.add_special_tokens = false;
    request = {
      model_name: name,
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1], data: [encodeString(prompt)] }],
      parameters,
    };
  } catch (err) {
    return openAiError(err);
  }
  const shape = chat ? CHAT : COMPLETION;
  const id = shape.idPrefix + crypto.randomUUID().replace(/-/g, '');
  const created = Math.floor(Date.now() / 1000);
  const head = { id, object: shape.object, created, model: body.model as string };
  const answer: Answer = { shape, wants, echo, tools: tools.parse ? { parser: toolParser, parallel: tools.parallel } : undefined };
  return body.stream === true
    ? streamed(server, request, req.signal, answer, { ...head, object: shape.chunkObject }, body.stream_options?.include_usage === true)
    : whole(server, request, req.signal, answer, head);
}

/** What shapes one request's answer. */
interface Answer {
  shape: Shape;
  wants: Wants;
  /** Completions' `echo`: the prompt, put before each choice's text. */
  echo: string;
  /** Chat with tools: the output is parsed for calls. */
  tools?: { parser: ToolParser; parallel: boolean };
}

/** A choice's text as content and tool calls (only the first unless parallel calls are allowed). */
function toolSplit(text: string, t: NonNullable<Answer['tools']>): { content: string | null; calls: ToolCall[] } {
  const r = parseToolCalls(text, t.parser);
  return { content: r.content, calls: t.parallel ? r.calls : r.calls.slice(0, 1) };
}

const cancelOn = (signal: AbortSignal) => (cancel: () => void) => signal.addEventListener('abort', cancel, { once: true });

/** One choice as it accumulates in a non-streamed answer. */
interface Gathered {
  text: string;
  tokens: TokenLp[];
  finish?: Finish;
}

async function whole(server: InferenceServer, request: InferRequest, signal: AbortSignal, a: Answer, head: Json): Promise<Response> {
  const choices: Gathered[] = [];
  let error: TsiError | undefined;
  try {
    await server.inferStream(request, (r) => {
      if (r instanceof TsiError) {
        error ??= r;
        return;
      }
      const piece = pieceOf(r);
      const c = (choices[piece.index] ??= { text: a.echo, tokens: [] });
      c.text += piece.text;
      if (piece.logprobs) c.tokens.push(...piece.logprobs);
      c.finish ??= piece.finish;
    }, { onCancel: cancelOn(signal) });
  } catch (err) {
    return openAiError(err);
  }
  if (error) return openAiError(error);
  if (choices.length !== a.wants.bestOf || choices.some((c) => !c?.finish)) {
    return openAiError(new TsiError('INTERNAL', 'the model ended the request without a finish reason'));
  }
  const finishes = choices.map((c) => c.finish!);
  // best_of: the n candidates most likely under the model, likeliest first.
  const kept = a.wants.bestOf > a.wants.n
    ? [...choices].sort((x, y) => y.finish!.cumulativeLogprob - x.finish!.cumulativeLogprob).slice(0, a.wants.n)
    : choices;
  const out = kept.map((c, i) => {
    const choice = a.shape.choice(i, c.text, c.finish!.reason, a.wants.logprobs !== undefined ? a.shape.logprobs(c.tokens, a.echo.length) : null);
    if (a.tools) {
      const { content, calls } = toolSplit(c.text, a.tools);
      if (calls.length > 0) {
        choice.message = { ...choice.message, content, tool_calls: calls };
        choice.finish_reason = 'tool_calls';
      }
    }
    return choice;
  });
  return new Response(JSON.stringify({ ...head, choices: out, usage: usageOf(finishes) }), { headers: JSON_HEADERS });
}

/**
 * The SSE answer. The status goes out with the first piece: an error before it (a prompt longer than
 * the context, an unknown parameter value) is a plain JSON error with its status; one after it is an
 * `{"error": ...}` event, then the stream ends.
 */
function streamed(server: InferenceServer, request: InferRequest, signal: AbortSignal, a: Answer, head: Json, includeUsage: boolean): Promise<Response> {
  // A client that goes away cancels the request: the sequence leaves the batch at the next step.
  const sse = new SseStream(a.shape.object);
  // The events of one response go out as one chunk (one socket write), and a chunk event is the
  // request's fixed head around its choice: JSON.stringify({ ...head, choices: [c], usage }) in the
  // same key order, without rebuilding and re-serialising the head for every token.
  let events = '';
  const event = (data: unknown) => {
    events += `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  };
  const chunkOpen = `data: ${JSON.stringify(head).slice(0, -1)},"choices":[`;
  const chunkClose = includeUsage ? '],"usage":null}\n\n' : ']}\n\n';
  const flush = () => {
    sse.send(events);
    events = '';
  };
  const { n } = a.wants;
  // Per choice: whether its first chunk went out, and where its text has got to (completions' text_offset).
  const started = new Array<boolean>(n).fill(false);
  const offsets = new Array<number>(n).fill(a.echo.length);
  const finishes: Finish[] = [];
  const toolText: { full: string; sent: number }[] = [];
  return new Promise<Response>((resolve) => {
    let begun = false;
    const begin = () => {
      if (begun) return;
      begun = true;
      resolve(new Response(sse.body, { headers: SSE_HEADERS }));
    };
    server.inferStream(request, (r, final) => {
      if (r instanceof TsiError) {
        if (!begun) {
          begun = true;
          resolve(openAiError(r));
          return;
        }
        event({ error: { message: plain(r.message), type: 'BadRequestError', param: null, code: HTTP_STATUS[r.code] ?? 400 } });
      } else {
        begin();
        const piece = pieceOf(r);
        const i = piece.index;
        const first = !started[i];
        let text = piece.text;
        if (first && a.echo) text = a.echo + text;
        const finishReason = piece.finish?.reason ?? null;
        if (a.tools) {
          // Content streams up to where a call may begin; the rest is parsed at the finish.
          const t = (toolText[i] ??= { full: '', sent: 0 });
          t.full += text;
          if (piece.finish) {
            const { calls } = toolSplit(t.full, a.tools);
            if (calls.length > 0) {
              const at = callStart(t.full, a.tools.parser);
              text = at > t.sent ? t.full.slice(t.sent, at) : '';
              if (first) events += chunkOpen + JSON.stringify(a.shape.chunkChoices(i, '', null, true, null)[0]) + chunkClose;
              if (text) events += chunkOpen + JSON.stringify({ index: i, delta: { content: text }, logprobs: null, finish_reason: null }) + chunkClose;
              calls.forEach((c, k) => {
                events += chunkOpen + JSON.stringify({ index: i, delta: { tool_calls: [{ index: k, ...c }] }, logprobs: null, finish_reason: null }) + chunkClose;
              });
              events += chunkOpen + JSON.stringify({ index: i, delta: {}, logprobs: null, finish_reason: 'tool_calls' }) + chunkClose;
              started[i] = true;
              finishes.push(piece.finish);
              if (includeUsage && finishes.length === n) event({ ...head, choices: [], usage: usageOf(finishes) });
              if (final) event('[DONE]');
              flush();
              if (final) sse.close();
              return;
            }
            text = t.full.slice(t.sent);
            t.sent = t.full.length;
          } else {
            const at = callStart(t.full, a.tools.parser);
            const end = at < 0 ? t.full.length : Math.max(at, t.sent);
            text = t.full.slice(t.sent, end);
            t.sent = end;
          }
        }
        const lp = a.wants.logprobs !== undefined && piece.logprobs?.length ? a.shape.logprobs(piece.logprobs, offsets[i]!) : null;
        offsets[i]! += piece.text.length;
        if (text.length > 0 || piece.finish || first || lp) {
          started[i] = true;
          for (const c of a.shape.chunkChoices(i, text, finishReason, first, lp)) events += chunkOpen + JSON.stringify(c) + chunkClose;
        }
        if (piece.finish) finishes.push(piece.finish);
        if (piece.finish && includeUsage && finishes.length === n) event({ ...head, choices: [], usage: usageOf(finishes) });
      }
      if (final && begun) event('[DONE]');
      flush();
      if (final && begun) sse.close();
    }, sse.inferOptions(signal)).catch((err) => {
      if (!begun) {
        begun = true;
        resolve(openAiError(err));
      }
    });
  });
}
