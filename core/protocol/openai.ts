/**
 * The OpenAI-compatible API over `llm` models (embeddings: openai-embeddings.ts), as `(Request) => Promise<Response>` like the rest of
 * core's HTTP: `GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions`, with
 * server-sent-event streaming (`data: {chunk}\n\n` ... `data: [DONE]\n\n`) and `usage` counts, the
 * field names and shapes OpenAI's clients parse (as Triton's OpenAI frontend and vLLM serve them).
 * A request becomes one generate request to the model's scheduler (the prompt in `text_input`, the
 * sampling fields parsed by params.ts and carried on the request as `generation`, always streamed
 * inside so each token goes out as it comes); chat messages go through the model's chat template first. Sampling fields a client leaves
 * out take the model's `generation_config.json` defaults (vLLM's behaviour), not OpenAI's temperature 1.
 * Here: the request (fields checked, unknown ones ignored, known unsupported ones refused by name,
 * tools planned); openai-answer.ts shapes the answer.
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { decodeString, encodeString } from '../tensor.js';
import type { InferRequest } from '../types.js';
import { traceContextOf, type TraceManager } from '../trace.js';
import { llmModelOf, type LlmModelInfo } from '../llm/backend.js';
import type { ChatMessage } from '../llm/chat.js';
import { CHAT, COMPLETION, bad, openAiError, readOpenAiBody, streamed, whole, type Answer, type Wants } from './openai-answer.js';
import { MAX_N, MAX_TOP_LOGPROBS, readGenerationRequest } from '../llm/params.js';
import { isEmbeddingModel } from './openai-embeddings.js';
import { isWhisperModel } from './openai-audio.js';
import { isClassifierModel } from './openai-scoring.js';
import { TOOL_PARSERS, planTools, templateMessage, type ToolParser, type ToolPlan } from '../llm/tools.js';
import { planReasoning, reasoningParserOf, templateVariables, type ReasoningParser } from '../llm/reasoning.js';
import type { ImageInput } from '../vision/image-input.js';
import { imagePartAt, visionMessages, type ImageFetcher } from './openai-images.js';

export { openAiError };

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

const GRAMMAR_AND_BIAS = ['logit_bias', 'structured_outputs', 'grammar', 'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar'];

/** OpenAI's completions default when max_tokens is absent. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/** A refusal; `param` names the field it is about (OpenAI's error `param`). */

/** Ready `llm` models, one entry each (their newest ready version). */
export function llmModels(server: InferenceServer): { name: string; info: LlmModelInfo }[] {
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

/** Ready `llm`, `embedding` and `classifier` models, by name. */
function servedModels(server: InferenceServer): string[] {
  const names = new Set(llmModels(server).map((m) => m.name));
  for (const e of server.repositoryIndex(true)) if (isEmbeddingModel(server, e.name) || isClassifierModel(server, e.name) || isWhisperModel(server, e.name)) names.add(e.name);
  return [...names];
}

/** `GET /v1/models`. */
export function listModels(server: InferenceServer, nowS = Math.floor(Date.now() / 1000)): Response {
  const data = servedModels(server).map((name) => ({ id: name, object: 'model', created: nowS, owned_by: 'tsi' }));
  return new Response(JSON.stringify({ object: 'list', data }), { headers: JSON_HEADERS });
}

/** `GET /v1/models/{model}`. */
export function getModel(server: InferenceServer, name: string): Response {
  const hit = servedModels(server).includes(name);
  if (!hit) return openAiError(new TsiError('NOT_FOUND', `The model '${name}' does not exist`));
  return new Response(JSON.stringify({ id: name, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'tsi' }), { headers: JSON_HEADERS });
}

/** The model a request names, which must be a ready `llm` model. */
export function modelOf(server: InferenceServer, body: Json): { name: string; info: LlmModelInfo } {
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


/**
 * Sampling fields under the names params.ts reads, as the client gave them (lists as lists); absent
 * ones stay absent.
 */
export function samplingParameters(body: Json, chat: boolean, maxTokensDefault: number | undefined): { p: Json; wants: Wants } {
  // Features a client relies on for the answer's content: refused rather than ignored. Their empty
  // forms (what some clients send by default) change nothing and pass.
  if (body.suffix !== undefined && body.suffix !== null && body.suffix !== '') throw bad(`'suffix' is not supported`, 'suffix');
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
  // vLLM's prompt_logprobs: an answer whole only (a stream has no place for them), as vLLM says.
  const promptLogprobs = intField(body, 'prompt_logprobs', 0, MAX_TOP_LOGPROBS);
  if (promptLogprobs !== undefined && promptLogprobs > 0 && body.stream === true) throw bad(`'prompt_logprobs' are not available when 'stream' is true`, 'prompt_logprobs');
  const bestOf = chat ? n : intField(body, 'best_of', 1, MAX_N) ?? n;
  if (bestOf < n) throw bad(`'best_of' must be at least 'n' (${n})`, 'best_of');
  if (bestOf > n && body.stream === true) throw bad(`'best_of' greater than 'n' cannot be streamed`, 'best_of');
  const p: Json = {};
  const copy = (from: string, to = from) => {
    const v = body[from];
    if (v === undefined || v === null) return;
    if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean' || Array.isArray(v)) p[to] = v;
    else throw bad(`'${from}' must be a number, string, boolean or list, got ${JSON.stringify(v)}`, from);
  };
  for (const k of ['temperature', 'top_p', 'top_k', 'seed', 'stop', 'stop_token_ids', 'presence_penalty', 'frequency_penalty',
    'repetition_penalty', 'min_tokens', 'ignore_eos', 'skip_special_tokens', 'min_p', 'truncate_prompt_tokens']) copy(k);
  // Read by params.ts as they are: logit_bias, vLLM's structured_outputs (and its older guided_*), llama.cpp's grammar.
  for (const k of GRAMMAR_AND_BIAS) if (body[k] !== undefined && body[k] !== null) p[k] = body[k];
  copy(body.max_completion_tokens !== undefined && body.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens', 'max_tokens');
  if (p.max_tokens === undefined && maxTokensDefault !== undefined) p.max_tokens = maxTokensDefault;
  if (bestOf > 1) p.n = bestOf;
  // best_of ranks candidates by their cumulative log-probability, which the logprobs carry.
  if (logprobs !== undefined || bestOf > n) p.logprobs = logprobs ?? 0;
  if (promptLogprobs !== undefined && body.stream !== true) p.prompt_logprobs = promptLogprobs;
  const format = body.response_format;
  if (format !== undefined && format !== null) {
    if (typeof format !== 'object' || Array.isArray(format)) throw bad(`'response_format' must be an object such as {"type": "json_object"}`, 'response_format');
    if (format.type !== 'text') p.response_format = format;
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

/** The template's options: its variables (chat_template_kwargs, reasoning_effort), the generation prompt, tools. */
function templateOptions(body: Json, tools: ToolPlan, generationPrompt: boolean): Record<string, unknown> {
  const vars = templateVariables(body.chat_template_kwargs, body.reasoning_effort);
  return { ...vars, add_generation_prompt: generationPrompt, ...(tools.templateTools ? { tools: tools.templateTools } : {}) };
}

/** The prompt of a text-only chat (image parts are refused by chatPromptWithImages before this). */
export function chatPrompt(body: Json, info: LlmModelInfo, tools: ToolPlan, generationPrompt = true): string {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw bad(`'messages' must be a non-empty list of {role, content}`, 'messages');
  const messages: ChatMessage[] = msgs.map((m: Json, i: number) => {
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') throw bad(`messages[${i}] must be an object with a string 'role'`, 'messages');
    // An assistant's tool calls and a tool's result reach the template as transformers passes them.
    // A reasoning model's past thinking goes back to the template under both names clients send it by
    // (templates such as Qwen3's read `reasoning_content`, and drop or keep it).
    const past = typeof m.reasoning_content === 'string' ? m.reasoning_content : typeof m.reasoning === 'string' ? m.reasoning : undefined;
    const thought = past !== undefined ? { reasoning_content: past, reasoning: past } : {};
    return { role: m.role, content: messageText(m, i), ...templateMessage(m), ...thought };
  });
  return info.chat.render(messages, templateOptions(body, tools, generationPrompt));
}

/**
 * The prompt of a chat that may hold image parts: a vision-language model's template takes content as
 * parts, images among them (openai-images.ts); any other model refuses them, naming the part.
 */
async function chatPromptWithImages(body: Json, name: string, info: LlmModelInfo, tools: ToolPlan, images: ImageOptions): Promise<{ prompt: string; images?: ImageInput[] }> {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw bad(`'messages' must be a non-empty list of {role, content}`, 'messages');
  if (info.vision) {
    const v = await visionMessages(msgs, info, name, templateMessage, images.fetchImage, images.maxBytes);
    return { prompt: info.vision.expandPrompt(info.chat.render(v.messages, templateOptions(body, tools, true)), v.images), images: v.images.length > 0 ? v.images : undefined };
  }
  const at = imagePartAt(msgs);
  if (at) throw bad(`${at}: model '${name}' takes no images (it is not a vision-language model)`, 'messages');
  return { prompt: chatPrompt(body, info, tools) };
}

/** How image_url parts are read: the fetcher for http(s) URLs (--allow-image-urls), and the size bound. */
export interface ImageOptions {
  fetchImage?: ImageFetcher;
  maxBytes: number;
}

/** The model's tool-call format (config parameter `tool_call_parser`). */
export function toolParserOf(server: InferenceServer, name: string): ToolParser {
  const v = server.model(name).config.parameters?.tool_call_parser?.string_value ?? 'hermes';
  if (!(TOOL_PARSERS as readonly string[]).includes(v)) {
    throw new TsiError('INVALID_ARG', `model '${name}': the config parameter tool_call_parser is '${v}'; one of ${TOOL_PARSERS.join(', ')}`);
  }
  return v as ToolParser;
}

/** The model's reasoning parser (config parameter `reasoning_parser`, or its chat template's `<think>`). */
export function reasoningOf(server: InferenceServer, name: string, info: LlmModelInfo): ReasoningParser | undefined {
  return reasoningParserOf(server.model(name).config.parameters?.reasoning_parser?.string_value, info.chat.thinks, name);
}

function completionPrompt(body: Json): string {
  const p = body.prompt;
  if (typeof p === 'string') return p;
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') return p[0];
  throw bad(`'prompt' must be a string (or a list of one string)`);
}

/** `POST /v1/completions` and `POST /v1/chat/completions`. */
export async function completions(server: InferenceServer, req: Request, chat: boolean, maxInput: number, traces?: TraceManager, fetchImage?: ImageFetcher): Promise<Response> {
  const received = server.clock.nowNs();
  let request: InferRequest;
  let body: Json;
  let wants: Wants;
  let echo = '';
  let tools: ToolPlan = { parse: false, parallel: false };
  let toolParser: ToolParser = 'hermes';
  let reasoning: Answer['reasoning'];
  try {
    body = await readOpenAiBody(req, maxInput);
    const { name, info } = modelOf(server, body);
    const parser = toolParserOf(server, name);
    tools = chat ? planTools(body, parser) : { parse: false, parallel: false };
    const asked = chat ? await chatPromptWithImages(body, name, info, tools, { fetchImage, maxBytes: maxInput }) : { prompt: completionPrompt(body) };
    const prompt = asked.prompt;
    const sp = samplingParameters(body, chat, chat ? undefined : COMPLETIONS_DEFAULT_MAX_TOKENS);
    const parameters = sp.p;
    wants = sp.wants;
    if (tools.guided) {
      for (const k of ['response_format', ...GRAMMAR_AND_BIAS.slice(1)]) {
        if (parameters[k] !== undefined) throw bad(`'${k}' cannot be combined with a forced tool call ('tool_choice')`, k);
      }
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
    // Parsed once, here (the same checks and messages as Triton's generate), and carried typed to the scheduler.
    request = {
      model_name: name,
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1], data: [encodeString(prompt)] }],
      generation: { ...readGenerationRequest((k) => parameters[k]), ...(asked.images ? { images: asked.images } : {}) },
    };
    const thinking = chat ? planReasoning(reasoningOf(server, name, info), prompt, !!tools.guided || parameters.response_format !== undefined, info.tokenizer, request.generation!) : undefined;
    if (thinking) reasoning = { ...thinking, tokenizer: info.tokenizer };
  } catch (err) {
    return openAiError(err);
  }
  const shape = chat ? CHAT : COMPLETION;
  const id = shape.idPrefix + crypto.randomUUID().replace(/-/g, '');
  const created = Math.floor(Date.now() / 1000);
  const head = { id, object: shape.object, created, model: body.model as string };
  const answer: Answer = { shape, wants, echo, tools: tools.parse ? { parser: toolParser, parallel: tools.parallel } : undefined, reasoning };
  const trace = traces?.sample(request.model_name, { name: 'HTTP_RECV_START', ns: received }, traceContextOf((h) => req.headers.get(h) ?? undefined));
  if (trace) {
    trace.mark('HTTP_RECV_END');
    request.trace = trace;
    // The GenAI semantic conventions' request attributes (the usage ones come with the finish).
    const g = request.generation!;
    Object.assign(trace.attributes, {
      'gen_ai.operation.name': chat ? 'chat' : 'text_completion', 'gen_ai.request.model': String(body.model), 'gen_ai.response.id': id,
      ...(g.maxTokens !== undefined ? { 'gen_ai.request.max_tokens': g.maxTokens } : {}),
      ...(g.temperature !== undefined ? { 'gen_ai.request.temperature': g.temperature } : {}),
      ...(g.topP !== undefined ? { 'gen_ai.request.top_p': g.topP } : {}),
    });
    answer.trace = trace;
  }
  return body.stream === true
    ? streamed(server, request, req.signal, answer, { ...head, object: shape.chunkObject }, body.stream_options?.include_usage === true)
    : whole(server, request, req.signal, answer, head);
}

