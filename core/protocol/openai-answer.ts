/**
 * The answers of the OpenAI API (openai.ts builds the request): what the scheduler sends back —
 * each choice's text pieces, log-probabilities and finish — shaped as OpenAI's completions and chat
 * completions, whole (n choices, best_of's pick, tool calls parsed) or as server-sent events (each
 * choice's chunks by its index, tool calls as `tool_calls` deltas — each call's name, then its
 * arguments in pieces as they are generated (core/llm/tool-stream.ts) — the usage chunk, `[DONE]`), and
 * OpenAI's error body.
 */

import { HTTP_STATUS, TsiError, asTsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { SSE_HEADERS, SseStream, cancelOn } from './sse.js';
import { readWebBody } from './http-body.js';
import { decodeString } from '../tensor.js';
import type { InferRequest, InferResponse } from '../types.js';
import type { Trace } from '../trace.js';
import type { ToolParser } from '../llm/tools.js';
import { ToolCallStream, parseToolCalls, type ToolCall, type ToolEvent } from '../llm/tool-stream.js';
import { ReasoningStream, thinkingTokens, type ReasoningParser } from '../llm/reasoning.js';
import type { Tokenizer } from '../llm/tokenizer.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

export function openAiError(err: unknown): Response {
  const e = asTsiError(err);
  const status = HTTP_STATUS[e.code] ?? 400;
  const type = status === 404 ? 'NotFoundError' : status >= 500 ? 'InternalServerError' : 'BadRequestError';
  const param = (err as { param?: string } | undefined)?.param ?? null;
  return new Response(JSON.stringify({ error: { message: plain(e.message), type, param, code: status } }), { status, headers: JSON_HEADERS });
}

/** A refusal of the request's `param` field, as OpenAI's error body names it. */
export const bad = (message: string, param?: string) => Object.assign(new TsiError('INVALID_ARG', message), { param });

/** The request's body, which must be one JSON object (bounded by the server's input limit). */
export async function readOpenAiBody(req: Request, maxInput: number): Promise<Json> {
  const raw = await readWebBody(req, maxInput);
  let body: unknown;
  try {
    body = JSON.parse(decodeString(raw));
  } catch (err) {
    throw bad(`the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw bad('the request body must be a JSON object');
  return body as Json;
}

/** The scheduler's message without Triton's `[request id: ...]` prefix, which means nothing here. */
const plain = (message: string) => message.replace(/^\[request id: [^\]]*\] /, '');

/** What one request asks for beyond the generate parameters: its choices and log-probabilities. */
export interface Wants {
  n: number;
  /** Completions' best_of: candidates generated, the n likeliest returned. */
  bestOf: number;
  /** Top log-probabilities per token to return; undefined: none. */
  logprobs?: number;
}

interface Finish {
  reason: string;
  promptTokens: number;
  /** Prompt tokens the prefix cache had (num_cached_tokens, as vLLM names it). */
  cachedTokens?: number;
  completionTokens: number;
  cumulativeLogprob: number;
  /** Tokens of the choice's thinking, when a reasoning parser read it. */
  reasoningTokens?: number;
  /** Where the end-of-thinking token came (the scheduler's `think_end_at`). */
  thinkEndAt?: number;
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
  /** vLLM's prompt_logprobs, as the scheduler wrote them (on a request's first piece). */
  promptLogprobs?: unknown[];
  finish?: Finish;
}

function pieceOf(r: InferResponse): Piece {
  const t = r.outputs.find((o) => o.name === 'text_output');
  const text = t ? (t.data as Uint8Array[]).map(decodeString).join('') : '';
  const q = r.parameters ?? {};
  const piece: Piece = { index: Number(q.index ?? 0), text };
  if (typeof q.logprobs === 'string') piece.logprobs = JSON.parse(q.logprobs) as TokenLp[];
  if (typeof q.prompt_logprobs === 'string') piece.promptLogprobs = JSON.parse(q.prompt_logprobs) as unknown[];
  if (q.finish_reason !== undefined) {
    piece.finish = {
      reason: String(q.finish_reason), promptTokens: Number(q.num_input_tokens ?? 0),
      ...(q.num_cached_tokens !== undefined ? { cachedTokens: Number(q.num_cached_tokens) } : {}), completionTokens: Number(q.num_output_tokens ?? 0), cumulativeLogprob: Number(q.cumulative_logprob ?? 0),
      ...(q.think_end_at !== undefined ? { thinkEndAt: Number(q.think_end_at) } : {}) };
  }
  return piece;
}

function usageOf(finishes: Finish[]): Json {
  const prompt = finishes[0]?.promptTokens ?? 0;
  const completion = finishes.reduce((n, f) => n + f.completionTokens, 0);
  const cached = finishes[0]?.cachedTokens;
  // OpenAI's shape for the prompt tokens the prefix cache had (a backend that says: the llm one).
  const details: Json = cached !== undefined ? { prompt_tokens_details: { cached_tokens: cached } } : {};
  if (finishes.some((f) => f.reasoningTokens !== undefined)) {
    details.completion_tokens_details = { reasoning_tokens: finishes.reduce((n, f) => n + (f.reasoningTokens ?? 0), 0) };
  }
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, ...details };
}

/** How one endpoint shapes its answers. */
export interface Shape {
  idPrefix: string;
  object: string;
  chunkObject: string;
  /** `logprobs` of a choice (or chunk) for these tokens; `offset`: where their text starts (completions). */
  logprobs(tokens: TokenLp[], offset: number): Json;
  choice(index: number, text: string, finish: string | null, logprobs: Json | null): Json;
  /** Streamed chunks' choices for one piece (chat adds a role chunk first and a separate finish). */
  chunkChoices(index: number, text: string, finish: string | null, first: boolean, logprobs: Json | null): Json[];
  /** vLLM's prompt_logprobs go beside the choices (chat), not in each (completions). */
  promptLogprobsAtTop?: boolean;
}

export const COMPLETION: Shape = {
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

export const CHAT: Shape = {
  idPrefix: 'chatcmpl-',
  object: 'chat.completion',
  chunkObject: 'chat.completion.chunk',
  promptLogprobsAtTop: true,
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

/** What shapes one request's answer. */
export interface Answer {
  shape: Shape;
  wants: Wants;
  /** Completions' `echo`: the prompt, put before each choice's text. */
  echo: string;
  /** Chat with tools: the output is parsed for calls. */
  tools?: { parser: ToolParser; parallel: boolean };
  /** A reasoning model's answer: its thinking goes out as `reasoning_content` (core/llm/reasoning.ts). */
  reasoning?: { parser: ReasoningParser; promptOpen: boolean; tokenizer: Tokenizer };
  /** The request's trace, when traced: its first token and usage are recorded, and it ends with the answer. */
  trace?: Trace;
}

/** A traced request's first piece: Triton-style FIRST_TOKEN stamp, and vLLM's time-to-first-token attribute. */
function firstToken(a: Answer): void {
  const t = a.trace;
  if (!t || t.attributes['gen_ai.latency.time_to_first_token'] !== undefined) return;
  t.mark('FIRST_TOKEN');
  const stamps = t.stamps;
  t.attributes['gen_ai.latency.time_to_first_token'] = (stamps[stamps.length - 1]!.ns - stamps[0]!.ns) / 1e9;
}

/** A traced request's answer is complete (or failed): the GenAI usage attributes, then the trace ends. */
function traceDone(a: Answer, finishes: Finish[], error?: string): void {
  const t = a.trace;
  if (!t) return;
  if (finishes.length > 0) {
    const u = usageOf(finishes);
    t.attributes['gen_ai.usage.input_tokens'] = u.prompt_tokens as number;
    t.attributes['gen_ai.usage.output_tokens'] = u.completion_tokens as number;
    t.attributes['gen_ai.response.finish_reasons'] = finishes.map((f) => f.reason);
  }
  if (error !== undefined) t.error ??= error;
  t.mark('HTTP_SEND_END');
  // Once only: a stream's failure after its final response must not end the trace again.
  a.trace = undefined;
  t.finish();
}

/** One event of a choice's tool-call reader as a chunk's choice, in OpenAI's delta shapes. */
function toolDelta(i: number, e: ToolEvent): Json {
  const delta = e.kind === 'content' ? { content: e.text }
    : e.kind === 'call' ? { tool_calls: [{ index: e.index, id: e.id, type: 'function', function: { name: e.name, arguments: '' } }] }
    : { tool_calls: [{ index: e.index, function: { arguments: e.text } }] };
  return { index: i, delta, logprobs: null, finish_reason: null };
}

/** One choice as it accumulates in a non-streamed answer. */
interface Gathered {
  text: string;
  tokens: TokenLp[];
  finish?: Finish;
}

export async function whole(server: InferenceServer, request: InferRequest, signal: AbortSignal, a: Answer, head: Json): Promise<Response> {
  const choices: Gathered[] = [];
  let promptLogprobs: unknown[] | undefined;
  let error: TsiError | undefined;
  try {
    await server.inferStream(request, (r) => {
      if (r instanceof TsiError) {
        error ??= r;
        return;
      }
      const piece = pieceOf(r);
      firstToken(a);
      const c = (choices[piece.index] ??= { text: a.echo, tokens: [] });
      c.text += piece.text;
      if (piece.logprobs) c.tokens.push(...piece.logprobs);
      promptLogprobs ??= piece.promptLogprobs;
      c.finish ??= piece.finish;
    }, cancelOn(signal));
  } catch (err) {
    traceDone(a, [], err instanceof Error ? err.message : String(err));
    return openAiError(err);
  }
  if (error || choices.length !== a.wants.bestOf || choices.some((c) => !c?.finish)) {
    error ??= new TsiError('INTERNAL', 'the model ended the request without a finish reason');
    traceDone(a, [], error.message);
    return openAiError(error);
  }
  const finishes = choices.map((c) => c.finish!);
  traceDone(a, finishes);
  // best_of: the n candidates most likely under the model, likeliest first.
  const kept = a.wants.bestOf > a.wants.n
    ? [...choices].sort((x, y) => y.finish!.cumulativeLogprob - x.finish!.cumulativeLogprob).slice(0, a.wants.n)
    : choices;
  const out = kept.map((c, i) => {
    let text = c.text;
    let thought: Json = {};
    if (a.reasoning) {
      // The thinking apart; tool calls are read from the answer only.
      const thinker = new ReasoningStream(a.reasoning.parser, a.reasoning.promptOpen);
      const split = thinker.push(text, true);
      text = split.content;
      // Both names: DeepSeek's API, llama.cpp and older vLLM write `reasoning_content`, vLLM since 0.11 `reasoning`.
      thought = { reasoning: split.reasoning || null, reasoning_content: split.reasoning || null };
      c.finish!.reasoningTokens = thinkingTokens(thinker, c.finish!.thinkEndAt, c.finish!.completionTokens, a.reasoning.tokenizer);
    }
    const choice = a.shape.choice(i, text, c.finish!.reason, a.wants.logprobs !== undefined ? a.shape.logprobs(c.tokens, a.echo.length) : null);
    if (a.reasoning) choice.message = { ...choice.message, content: text || null, ...thought };
    if (a.tools) {
      const { content, calls } = parseToolCalls(text, a.tools.parser, a.tools.parallel);
      if (calls.length > 0) {
        choice.message = { ...choice.message, content, tool_calls: calls };
        choice.finish_reason = 'tool_calls';
      }
    }
    // vLLM puts prompt_logprobs in each completion choice, and once beside a chat's choices.
    if (promptLogprobs && !a.shape.promptLogprobsAtTop) choice.prompt_logprobs = promptLogprobs;
    return choice;
  });
  const top = promptLogprobs && a.shape.promptLogprobsAtTop ? { prompt_logprobs: promptLogprobs } : {};
  return new Response(JSON.stringify({ ...head, choices: out, usage: usageOf(finishes), ...top }), { headers: JSON_HEADERS });
}

/**
 * The SSE answer. The status goes out with the first piece: an error before it (a prompt longer than
 * the context, an unknown parameter value) is a plain JSON error with its status; one after it is an
 * `{"error": ...}` event, then the stream ends.
 */
export function streamed(server: InferenceServer, request: InferRequest, signal: AbortSignal, a: Answer, head: Json, includeUsage: boolean): Promise<Response> {
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
  const toolReaders: ToolCallStream[] = [];
  const thinkers: ReasoningStream[] = [];
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
        firstToken(a);
        const i = piece.index;
        const first = !started[i];
        let text = piece.text;
        if (first && a.echo) text = a.echo + text;
        const lp = a.wants.logprobs !== undefined && piece.logprobs?.length ? a.shape.logprobs(piece.logprobs, offsets[i]!) : null;
        offsets[i]! += piece.text.length;
        let thinking: Json | undefined;
        if (a.reasoning) {
          // The thinking as `reasoning_content` deltas, before the answer's; a marker cut between pieces is held until whole.
          const thinker = (thinkers[i] ??= new ReasoningStream(a.reasoning.parser, a.reasoning.promptOpen));
          const split = thinker.push(text, piece.finish !== undefined);
          if (split.reasoning) thinking = { index: i, delta: { reasoning: split.reasoning, reasoning_content: split.reasoning }, logprobs: null, finish_reason: null };
          text = split.content;
          if (piece.finish) piece.finish.reasoningTokens = thinkingTokens(thinker, piece.finish.thinkEndAt, piece.finish.completionTokens, a.reasoning.tokenizer);
        }
        if (thinking) {
          if (first) events += chunkOpen + JSON.stringify(a.shape.chunkChoices(i, '', null, true, null)[0]!) + chunkClose;
          started[i] = true;
          events += chunkOpen + JSON.stringify(thinking) + chunkClose;
        }
        const opening = !started[i];
        if (a.tools) {
          // Content and calls as they are generated: a call's first delta once its name is whole, then its arguments piece by piece.
          const reader = (toolReaders[i] ??= new ToolCallStream(a.tools.parser, a.tools.parallel));
          const chunks = reader.push(text, piece.finish !== undefined).map((e) => toolDelta(i, e));
          if (lp) {
            if (chunks.length > 0) chunks[0]!.logprobs = lp;
            else chunks.push({ index: i, delta: { content: '' }, logprobs: lp, finish_reason: null });
          }
          if (opening) chunks.unshift(a.shape.chunkChoices(i, '', null, true, null)[0]!);
          if (piece.finish) chunks.push({ index: i, delta: {}, logprobs: null, finish_reason: reader.called ? 'tool_calls' : piece.finish.reason });
          started[i] = true;
          for (const c of chunks) events += chunkOpen + JSON.stringify(c) + chunkClose;
        } else if (text.length > 0 || piece.finish || opening || lp) {
          started[i] = true;
          for (const c of a.shape.chunkChoices(i, text, piece.finish?.reason ?? null, opening, lp)) events += chunkOpen + JSON.stringify(c) + chunkClose;
        }
        if (piece.finish) finishes.push(piece.finish);
        if (piece.finish && includeUsage && finishes.length === n) event({ ...head, choices: [], usage: usageOf(finishes) });
      }
      if (final && begun) event('[DONE]');
      flush();
      if (final && begun) sse.close();
      if (final) traceDone(a, finishes, r instanceof TsiError ? r.message : undefined);
    }, sse.inferOptions(signal)).catch((err) => {
      traceDone(a, finishes, err instanceof Error ? err.message : String(err));
      if (!begun) {
        begun = true;
        resolve(openAiError(err));
      }
    });
  });
}
