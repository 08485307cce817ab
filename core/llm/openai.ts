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
import { readWebBody } from '../http-body.js';
import { SSE_HEADERS, SseStream } from '../sse.js';
import { decodeString, encodeString } from '../tensor.js';
import type { InferRequest, InferResponse, Parameters } from '../types.js';
import { llmModelOf, type LlmModelInfo } from './backend.js';
import type { ChatMessage } from './chat.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** OpenAI's completions default when max_tokens is absent. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export function openAiError(err: unknown): Response {
  const e = asTsiError(err);
  const status = HTTP_STATUS[e.code] ?? 400;
  const type = status === 404 ? 'NotFoundError' : status >= 500 ? 'InternalServerError' : 'BadRequestError';
  return new Response(JSON.stringify({ error: { message: plain(e.message), type, param: null, code: status } }), { status, headers: JSON_HEADERS });
}

/** The scheduler's message without Triton's `[request id: ...]` prefix, which means nothing here. */
const plain = (message: string) => message.replace(/^\[request id: [^\]]*\] /, '');

const bad = (message: string) => new TsiError('INVALID_ARG', message);

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

/** Sampling fields → request parameters the llm scheduler reads (params.ts); absent ones stay absent. */
function samplingParameters(body: Json, maxTokensDefault: number | undefined): Parameters {
  if (body.n !== undefined && body.n !== null && body.n !== 1) throw bad(`'n' must be 1: one choice per request is supported`);
  if (body.best_of !== undefined && body.best_of !== null && body.best_of !== 1) throw bad(`'best_of' must be 1`);
  if (body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false) throw bad(`'logprobs' is not supported`);
  if (body.suffix !== undefined && body.suffix !== null) throw bad(`'suffix' is not supported`);
  // Features a client relies on for the answer's content: refused rather than ignored. Their empty
  // forms (what some clients send by default) change nothing and pass.
  const bias = body.logit_bias;
  if (typeof bias === 'object' && bias !== null && Object.keys(bias).length > 0) throw bad(`'logit_bias' is not supported`);
  if (Array.isArray(body.tools) && body.tools.length > 0) throw bad(`'tools' (function calling) is not supported`);
  const format = body.response_format;
  if (format !== undefined && format !== null && format.type !== 'text') {
    throw bad(`'response_format' ${JSON.stringify(format.type ?? format).slice(0, 40)} is not supported: only {"type": "text"}`);
  }
  const p: Parameters = {};
  const copy = (from: string, to = from) => {
    const v = body[from];
    if (v === undefined || v === null) return;
    if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean') p[to] = v;
    else if (Array.isArray(v)) p[to] = JSON.stringify(v);
    else throw bad(`'${from}' must be a number, string, boolean or list, got ${JSON.stringify(v)}`);
  };
  for (const k of ['temperature', 'top_p', 'top_k', 'seed', 'stop', 'stop_token_ids', 'presence_penalty', 'frequency_penalty',
    'repetition_penalty', 'min_tokens', 'ignore_eos', 'skip_special_tokens']) copy(k);
  copy(body.max_completion_tokens !== undefined && body.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens', 'max_tokens');
  if (p.max_tokens === undefined && maxTokensDefault !== undefined) p.max_tokens = maxTokensDefault;
  return p;
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

function chatPrompt(body: Json, info: LlmModelInfo): string {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw bad(`'messages' must be a non-empty list of {role, content}`);
  const messages: ChatMessage[] = msgs.map((m: Json, i: number) => {
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') throw bad(`messages[${i}] must be an object with a string 'role'`);
    return { role: m.role, content: messageText(m, i) };
  });
  return info.chat.render(messages);
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
}

/** What the scheduler sends back, as text pieces and a finish. */
function pieceOf(r: InferResponse): { text: string; finish?: Finish } {
  const t = r.outputs.find((o) => o.name === 'text_output');
  const text = t ? (t.data as Uint8Array[]).map(decodeString).join('') : '';
  const reason = r.parameters?.finish_reason;
  if (reason === undefined) return { text };
  return { text, finish: { reason: String(reason), promptTokens: Number(r.parameters?.num_input_tokens ?? 0), completionTokens: Number(r.parameters?.num_output_tokens ?? 0) } };
}

const usageOf = (f: Finish) => ({ prompt_tokens: f.promptTokens, completion_tokens: f.completionTokens, total_tokens: f.promptTokens + f.completionTokens });

/** How one endpoint shapes its answers. */
interface Shape {
  idPrefix: string;
  object: string;
  chunkObject: string;
  choice(text: string, finish: string | null): Json;
  /** Streamed chunks' choices for one piece (chat adds a role chunk first and a separate finish). */
  chunkChoices(text: string, finish: string | null, first: boolean): Json[];
}

const COMPLETION: Shape = {
  idPrefix: 'cmpl-',
  object: 'text_completion',
  chunkObject: 'text_completion',
  choice: (text, finish) => ({ index: 0, text, logprobs: null, finish_reason: finish }),
  chunkChoices: (text, finish) => [{ index: 0, text, logprobs: null, finish_reason: finish }],
};

const CHAT: Shape = {
  idPrefix: 'chatcmpl-',
  object: 'chat.completion',
  chunkObject: 'chat.completion.chunk',
  choice: (text, finish) => ({ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }),
  chunkChoices: (text, finish, first) => {
    const out: Json[] = [];
    if (first) out.push({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null });
    if (text.length > 0) out.push({ index: 0, delta: { content: text }, logprobs: null, finish_reason: null });
    if (finish !== null) out.push({ index: 0, delta: {}, logprobs: null, finish_reason: finish });
    return out;
  },
};

/** `POST /v1/completions` and `POST /v1/chat/completions`. */
export async function completions(server: InferenceServer, req: Request, chat: boolean, maxInput: number): Promise<Response> {
  let request: InferRequest;
  let body: Json;
  try {
    body = await readBody(req, maxInput);
    const { name, info } = modelOf(server, body);
    const prompt = chat ? chatPrompt(body, info) : completionPrompt(body);
    const parameters = samplingParameters(body, chat ? undefined : COMPLETIONS_DEFAULT_MAX_TOKENS);
    parameters.stream = true;
    parameters.exclude_input_in_output = !(body.echo === true && !chat);
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
  return body.stream === true
    ? streamed(server, request, req.signal, shape, { ...head, object: shape.chunkObject }, body.stream_options?.include_usage === true)
    : whole(server, request, req.signal, shape, head);
}

const cancelOn = (signal: AbortSignal) => (cancel: () => void) => signal.addEventListener('abort', cancel, { once: true });

async function whole(server: InferenceServer, request: InferRequest, signal: AbortSignal, shape: Shape, head: Json): Promise<Response> {
  let text = '';
  let finish: Finish | undefined;
  let error: TsiError | undefined;
  try {
    await server.inferStream(request, (r) => {
      if (r instanceof TsiError) {
        error ??= r;
        return;
      }
      const piece = pieceOf(r);
      text += piece.text;
      finish ??= piece.finish;
    }, { onCancel: cancelOn(signal) });
  } catch (err) {
    return openAiError(err);
  }
  if (error) return openAiError(error);
  if (!finish) return openAiError(new TsiError('INTERNAL', 'the model ended the request without a finish reason'));
  return new Response(JSON.stringify({ ...head, choices: [shape.choice(text, finish.reason)], usage: usageOf(finish) }), { headers: JSON_HEADERS });
}

/**
 * The SSE answer. The status goes out with the first piece: an error before it (a prompt longer than
 * the context, an unknown parameter value) is a plain JSON error with its status; one after it is an
 * `{"error": ...}` event, then the stream ends.
 */
function streamed(server: InferenceServer, request: InferRequest, signal: AbortSignal, shape: Shape, head: Json, includeUsage: boolean): Promise<Response> {
  // A client that goes away cancels the request: the sequence leaves the batch at the next step.
  const sse = new SseStream(shape.object);
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
  return new Promise<Response>((resolve) => {
    let started = false;
    const begin = () => {
      if (started) return;
      started = true;
      resolve(new Response(sse.body, { headers: SSE_HEADERS }));
    };
    let first = true;
    server.inferStream(request, (r, final) => {
      if (r instanceof TsiError) {
        if (!started) {
          started = true;
          resolve(openAiError(r));
          return;
        }
        event({ error: { message: plain(r.message), type: 'BadRequestError', param: null, code: HTTP_STATUS[r.code] ?? 400 } });
      } else {
        begin();
        const piece = pieceOf(r);
        if (piece.text.length > 0 || piece.finish || first) {
          const choices = shape.chunkChoices(piece.text, piece.finish?.reason ?? null, first);
          first = false;
          for (const c of choices) events += chunkOpen + JSON.stringify(c) + chunkClose;
        }
        if (piece.finish && includeUsage) event({ ...head, choices: [], usage: usageOf(piece.finish) });
      }
      if (final && started) event('[DONE]');
      flush();
      if (final && started) sse.close();
    }, sse.inferOptions(signal)).catch((err) => {
      if (!started) {
        started = true;
        resolve(openAiError(err));
      }
    });
  });
}
