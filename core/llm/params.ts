/**
 * Generation parameters of one request, from wherever the client put them: Triton generate's flat
 * keys and `parameters` (which reach the backend as request parameters), the optional input tensors
 * Triton's vLLM backend declares (`stream`, `exclude_input_in_output`, `sampling_parameters` as a JSON
 * string), and the names of both of Triton's LLM backends (vLLM's `max_tokens`, `seed`, `stop`,
 * `stop_token_ids`; TensorRT-LLM's `random_seed`, `stop_words`, `end_id`, `runtime_top_k`...). Defaults
 * come from the model's `generation_config.json`. Every bad value is an INVALID_ARG naming the
 * parameter and what it must be. A front end that reads the fields itself (the OpenAI API) parses
 * them here too, once, and hands the result on the request (`InferRequest.generation`) instead of
 * writing them back into request parameters.
 */

import type { ImageInput } from '../vision/image-input.js';
import { TsiError } from '../errors.js';
import { choiceGrammar, grammarError } from './grammar-cfg.js';
import { gbnfGrammar } from './grammar-gbnf.js';
import { regexGrammar } from './grammar-regex.js';
import { compileSchema, responseFormatGrammar, structuralTagGrammar, toolCallGrammar, type GNode } from './grammar-schema.js';
import type { SamplingParams } from './sampling.js';

/** Structured output: the answer's grammar, optionally between fixed texts (a tool call's markers). */
export interface GrammarSpec {
  root: GNode;
  prefix?: string;
  suffix?: string;
}

export interface GenerationParams extends SamplingParams {
  /** Undefined: up to the context length. */
  maxTokens?: number;
  minTokens: number;
  seed?: number;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  stream: boolean;
  /** Leave the prompt out of `text_output` (vLLM's default when streaming). */
  excludeInput: boolean;
  skipSpecialTokens: boolean;
  /** A reasoning model's end-of-thinking token: where it is first generated is reported (`think_end_at`). */
  thinkEndId?: number;
  /** The answer starts inside the thinking: a grammar applies only after the end-of-thinking token. */
  thinkOpen?: boolean;
  /** Sequences generated from the one prompt (its cache computed once). */
  n: number;
  /** Return each chosen token's log-probability and the k likeliest (0: the chosen one only). */
  logprobs?: number;
  /** vLLM's prompt_logprobs: each prompt token's log-probability and rank, and the k likeliest per position (0: the prompt token's only). */
  promptLogprobs?: number;
  grammar?: GrammarSpec;
  /** Keep only the prompt's last N tokens (vLLM's truncate_prompt_tokens; -1: as many as the context leaves room for). */
  truncatePromptTokens?: number;
}

/** Most choices one request may ask for, and most top log-probabilities per token (OpenAI's 20). */
export const MAX_N = 128;
export const MAX_TOP_LOGPROBS = 20;

/** Model-level defaults, from `generation_config.json` (Hugging Face's GenerationConfig). */
export interface GenerationDefaults {
  temperature: number;
  topK: number;
  topP: number;
  repetitionPenalty: number;
  maxTokens?: number;
  eosTokenIds: number[];
}

type Json = Record<string, any>;

export function generationDefaults(gc: Json | undefined, hf: Json | undefined, eosFromTokenizer: number | undefined): GenerationDefaults {
  const eos = gc?.eos_token_id ?? hf?.eos_token_id ?? eosFromTokenizer;
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).filter((x: unknown): x is number => typeof x === 'number');
  if (!gc) return { temperature: 1, topK: 0, topP: 1, repetitionPenalty: 1, eosTokenIds };
  // do_sample false (the transformers default) means greedy whatever temperature the file also holds.
  const sample = gc.do_sample === true;
  return {
    temperature: sample ? num(gc.temperature, 1) : 0,
    topK: sample ? num(gc.top_k, 0) : 0,
    topP: sample ? num(gc.top_p, 1) : 1,
    repetitionPenalty: num(gc.repetition_penalty, 1),
    maxTokens: typeof gc.max_new_tokens === 'number' ? gc.max_new_tokens : undefined,
    eosTokenIds,
  };
}

const num = (v: unknown, d: number) => (typeof v === 'number' && Number.isFinite(v) ? v : d);

/** Reads one parameter by any of its names; values may be numbers, strings, booleans or arrays. */
export type ParamSource = (name: string) => unknown;

function bad(name: string, what: string, v: unknown): TsiError {
  return new TsiError('INVALID_ARG', `parameter '${name}' must be ${what}, got ${JSON.stringify(v)}`);
}

function first(get: ParamSource, names: string[]): [string, unknown] | undefined {
  for (const n of names) {
    const v = get(n);
    if (v !== undefined && v !== null) return [n, v];
  }
  return undefined;
}

function number(get: ParamSource, names: string[], check: (v: number) => boolean, what: string): number | undefined {
  const hit = first(get, names);
  if (!hit) return undefined;
  const [n, raw] = hit;
  const v = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : typeof raw === 'bigint' ? Number(raw) : raw;
  if (typeof v !== 'number' || !Number.isFinite(v) || !check(v)) throw bad(n, what, raw);
  return v;
}

function bool(get: ParamSource, names: string[]): boolean | undefined {
  const hit = first(get, names);
  if (!hit) return undefined;
  const [n, v] = hit;
  if (typeof v === 'boolean') return v;
  if (v === 'true' || v === 1) return true;
  if (v === 'false' || v === 0) return false;
  throw bad(n, 'a boolean', v);
}

/** A list given as an array, a JSON array in a string, or (strings) one plain string. */
function list(get: ParamSource, names: string[], kind: 'string' | 'int'): unknown[] | undefined {
  const hit = first(get, names);
  if (!hit) return undefined;
  const [n, raw] = hit;
  let v: unknown = raw;
  if (typeof raw === 'string' && raw.trim().startsWith('[')) {
    try {
      v = JSON.parse(raw);
    } catch {
      v = raw;
    }
  }
  if (!Array.isArray(v)) v = [v];
  // An empty stop string stops nothing: TensorRT-LLM's ensembles send `stop_words: ""` for none.
  const arr = kind === 'string' ? (v as unknown[]).filter((x) => x !== '') : v as unknown[];
  const ok = kind === 'string'
    ? arr.every((x) => typeof x === 'string' && x.length > 0)
    : arr.every((x) => (typeof x === 'number' && Number.isInteger(x) && x >= 0) || (typeof x === 'string' && /^\d+$/.test(x)));
  if (!ok) throw bad(n, kind === 'string' ? 'a non-empty string or a list of them' : 'a token id or a list of token ids', raw);
  return kind === 'int' ? arr.map(Number) : arr;
}

const isInt = (v: number) => Number.isInteger(v);

/**
 * What one request asks for, parsed and checked, before the model's defaults fill the rest: what a
 * front end that parsed a request's fields itself (the OpenAI API) hands the llm scheduler on the
 * request (`InferRequest.generation`), and what request parameters read as (`readGenerationRequest`).
 */
export interface GenerationRequest {
  temperature?: number;
  topK?: number;
  topP?: number;
  repetitionPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  maxTokens?: number;
  minTokens?: number;
  seed?: number;
  stop?: string[];
  stopTokenIds?: number[];
  ignoreEos?: boolean;
  stream?: boolean;
  excludeInput?: boolean;
  skipSpecialTokens?: boolean;
  n?: number;
  logprobs?: number;
  promptLogprobs?: number;
  grammar?: GrammarSpec;
  minP?: number;
  logitBias?: [number, number][];
  truncatePromptTokens?: number;
  /** False: the prompt is encoded without the tokenizer's special tokens (a chat template wrote its own). */
  addSpecialTokens?: boolean;
  /** Set by the OpenAI routes for a reasoning model (core/llm/reasoning.ts), never read from a request's parameters. */
  thinkEndId?: number;
  thinkOpen?: boolean;
  /** A vision-language chat's images, in the prompt's order (core/vision/). */
  images?: readonly ImageInput[];
}

/** A request's generation parameters, by any of their names (see the file comment); none filled in. */
export function readGenerationRequest(get: ParamSource): GenerationRequest {
  // vLLM's `sampling_parameters` input: a JSON object whose keys read like parameters.
  const sp = get('sampling_parameters');
  let fromJson: Json = {};
  if (sp !== undefined && sp !== null) {
    if (typeof sp !== 'string') throw bad('sampling_parameters', 'a JSON object in a string', sp);
    try {
      fromJson = JSON.parse(sp) as Json;
    } catch {
      throw bad('sampling_parameters', 'a JSON object in a string', sp);
    }
    if (typeof fromJson !== 'object' || fromJson === null || Array.isArray(fromJson)) throw bad('sampling_parameters', 'a JSON object in a string', sp);
  }
  const look: ParamSource = (n) => get(n) ?? fromJson[n];
  const temperature = number(look, ['temperature'], (v) => v >= 0, 'a number >= 0');
  const topK = number(look, ['top_k', 'runtime_top_k'], (v) => isInt(v) && v >= -1, 'an integer >= 0 (0 or -1: off)');
  const topP = number(look, ['top_p', 'runtime_top_p'], (v) => v > 0 && v <= 1, 'a number in (0, 1]');
  const stream = bool(look, ['stream']);
  const excludeInput = bool(look, ['exclude_input_in_output']);
  const addSpecial = get('add_special_tokens');
  return {
    temperature, topK, topP,
    repetitionPenalty: number(look, ['repetition_penalty'], (v) => v > 0, 'a number > 0'),
    presencePenalty: number(look, ['presence_penalty'], (v) => v >= -2 && v <= 2, 'a number in [-2, 2]'),
    frequencyPenalty: number(look, ['frequency_penalty'], (v) => v >= -2 && v <= 2, 'a number in [-2, 2]'),
    maxTokens: number(look, ['max_tokens', 'max_new_tokens'], (v) => isInt(v) && v >= 1, 'an integer >= 1'),
    minTokens: number(look, ['min_tokens', 'min_length'], (v) => isInt(v) && v >= 0, 'an integer >= 0'),
    seed: number(look, ['seed', 'random_seed'], (v) => isInt(v), 'an integer'),
    stop: list(look, ['stop', 'stop_words'], 'string') as string[] | undefined,
    stopTokenIds: stopTokenIds(look),
    ignoreEos: bool(look, ['ignore_eos']),
    stream,
    excludeInput,
    skipSpecialTokens: bool(look, ['skip_special_tokens']),
    n: number(look, ['n'], (v) => isInt(v) && v >= 1 && v <= MAX_N, `an integer in [1, ${MAX_N}]`),
    logprobs: number(look, ['logprobs'], (v) => isInt(v) && v >= 0 && v <= MAX_TOP_LOGPROBS, `an integer in [0, ${MAX_TOP_LOGPROBS}]`),
    // vLLM takes -1 (the whole vocabulary) only where its max_logprobs allows; at its default (20), as here, it refuses it.
    promptLogprobs: number(look, ['prompt_logprobs'], (v) => isInt(v) && v >= 0 && v <= MAX_TOP_LOGPROBS, `an integer in [0, ${MAX_TOP_LOGPROBS}]`),
    grammar: grammarOf(look),
    minP: number(look, ['min_p'], (v) => v >= 0 && v <= 1, 'a number in [0, 1]'),
    logitBias: logitBias(look),
    truncatePromptTokens: number(look, ['truncate_prompt_tokens'], (v) => isInt(v) && (v >= 1 || v === -1), 'an integer >= 1 (or -1: what the context holds)'),
    addSpecialTokens: addSpecial === undefined || addSpecial === null ? undefined : addSpecial !== false && addSpecial !== 'false',
  };
}

/** OpenAI's logit_bias: {"token id": bias in [-100, 100]}, as an object or its JSON text. */
function logitBias(look: ParamSource): [number, number][] | undefined {
  const v = object(look, 'logit_bias');
  if (v === undefined || v === null) return undefined;
  const what = 'an object mapping token ids to biases in [-100, 100], such as {"50256": -100}';
  if (typeof v !== 'object' || Array.isArray(v)) throw bad('logit_bias', what, v);
  const out: [number, number][] = [];
  for (const [k, b] of Object.entries(v as Record<string, unknown>)) {
    if (!/^\d+$/.test(k) || typeof b !== 'number' || !Number.isFinite(b) || b < -100 || b > 100) throw bad('logit_bias', what, v);
    out.push([Number(k), b]);
  }
  return out.length > 0 ? out : undefined;
}

/** `stop_token_ids` and TensorRT-LLM's `end_id` together; undefined when neither is given. */
function stopTokenIds(look: ParamSource): number[] | undefined {
  const ids = list(look, ['stop_token_ids'], 'int') as number[] | undefined;
  const end = list(look, ['end_id'], 'int') as number[] | undefined;
  return ids || end ? [...(ids ?? []), ...(end ?? [])] : undefined;
}

/** A request's parameters with the model's defaults where it gave none. */
export function withDefaults(r: GenerationRequest, d: GenerationDefaults): GenerationParams {
  const topK = r.topK ?? d.topK;
  const stream = r.stream ?? false;
  return {
    temperature: r.temperature ?? d.temperature,
    topK: topK < 0 ? 0 : topK,
    topP: r.topP ?? d.topP,
    repetitionPenalty: r.repetitionPenalty ?? d.repetitionPenalty,
    presencePenalty: r.presencePenalty ?? 0,
    frequencyPenalty: r.frequencyPenalty ?? 0,
    maxTokens: r.maxTokens ?? d.maxTokens,
    minTokens: r.minTokens ?? 0,
    seed: r.seed,
    stop: r.stop ?? [],
    stopTokenIds: r.stopTokenIds ?? [],
    ignoreEos: r.ignoreEos ?? false,
    stream,
    // As Triton's vLLM backend: the prompt is part of text_output unless streaming or asked otherwise.
    excludeInput: r.excludeInput ?? stream,
    skipSpecialTokens: r.skipSpecialTokens ?? true,
    thinkEndId: r.thinkEndId,
    thinkOpen: r.thinkOpen,
    n: r.n ?? 1,
    logprobs: r.logprobs,
    promptLogprobs: r.promptLogprobs,
    grammar: r.grammar,
    minP: r.minP,
    logitBias: r.logitBias,
    truncatePromptTokens: r.truncatePromptTokens,
  };
}

/** The parameters of one request; `get` looks a name up in the request (see the file comment). */
export function parseGenerationParams(get: ParamSource, d: GenerationDefaults): GenerationParams {
  return withDefaults(readGenerationRequest(get), d);
}

/** An object given as itself or as JSON text. */
function object(get: ParamSource, name: string): unknown {
  const v = get(name);
  if (typeof v !== 'string') return v;
  try {
    return JSON.parse(v);
  } catch {
    throw bad(name, 'a JSON object (or its JSON text)', v);
  }
}

/**
 * The answer's grammar, from whichever field the client used (one only): OpenAI's `response_format`,
 * vLLM's `structured_outputs` {json, regex, choice, grammar, json_object, structural_tag} and its older `guided_json`,
 * `guided_regex`, `guided_choice`, `guided_grammar`, llama.cpp's `grammar` (GBNF); `guided_prefix` and
 * `guided_suffix` put fixed text around it (the OpenAI layer's forced tool calls use them).
 */
function grammarOf(get: ParamSource): GrammarSpec | undefined {
  const tool = object(get, 'guided_tool_call') as Record<string, any> | undefined;
  if (tool !== undefined && tool !== null) {
    if (typeof tool !== 'object') throw bad('guided_tool_call', 'a JSON object', tool);
    return { root: toolCallGrammar(tool), prefix: String(tool.prefix ?? ''), suffix: String(tool.suffix ?? '') };
  }
  const given = GRAMMAR_FIELDS.filter((f) => get(f) !== undefined && get(f) !== null && !(f === 'response_format' && isTextFormat(get(f))));
  if (given.length > 1) throw grammarError(given[1]!, `only one structured output may be asked for; the request also has '${given[0]}'`);
  const field = given[0];
  if (field === undefined) return undefined;
  const root = grammarField(field, field === 'structured_outputs' || field === 'response_format' || field === 'guided_json' ? object(get, field) : get(field));
  if (!root) return undefined;
  const text = (name: string) => {
    const v = get(name);
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') throw bad(name, 'a string', v);
    return v;
  };
  return { root, prefix: text('guided_prefix'), suffix: text('guided_suffix') };
}

const GRAMMAR_FIELDS = ['response_format', 'structured_outputs', 'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'grammar'] as const;

const isTextFormat = (v: unknown) => typeof v === 'object' && v !== null && (v as Json).type === 'text';

/** The kinds of vLLM's `structured_outputs` tsi enforces (its other keys are options that change nothing here). */
const STRUCTURED_KINDS = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'] as const;

function grammarField(field: (typeof GRAMMAR_FIELDS)[number], v: unknown): GNode | undefined {
  switch (field) {
    case 'response_format': return responseFormatGrammar(v);
    case 'guided_json': return compileSchema(v);
    case 'guided_regex': return { k: 'cfg', cfg: regexGrammar(field, v) };
    case 'guided_choice': return { k: 'cfg', cfg: choiceGrammar(field, typeof v === 'string' ? parseList(field, v) : v) };
    case 'guided_grammar': case 'grammar': return { k: 'cfg', cfg: gbnfGrammar(field, v) };
    case 'structured_outputs': {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw grammarError(field, `must be an object such as {"regex": "[0-9]+"}, got ${JSON.stringify(v)}`);
      const so = v as Json;
      const kinds = STRUCTURED_KINDS.filter((k) => so[k] !== undefined && so[k] !== null && so[k] !== false);
      if (kinds.length !== 1) throw grammarError(field, `must have exactly one of ${STRUCTURED_KINDS.join(', ')}${kinds.length > 1 ? `, got ${kinds.join(' and ')}` : ''}`);
      const kind = kinds[0]!;
      const sub = `${field}.${kind}`;
      switch (kind) {
        case 'json': {
          let schema = so.json;
          if (typeof schema === 'string') {
            try {
              schema = JSON.parse(schema);
            } catch {
              throw grammarError(sub, 'must be a JSON schema (an object, or its JSON text)');
            }
          }
          return compileSchema(schema);
        }
        case 'json_object': return { k: 'anyobject' };
        case 'regex': return { k: 'cfg', cfg: regexGrammar(sub, so.regex) };
        case 'choice': return { k: 'cfg', cfg: choiceGrammar(sub, so.choice) };
        case 'grammar': return { k: 'cfg', cfg: gbnfGrammar(sub, so.grammar) };
        case 'structural_tag': return structuralTagGrammar(sub, so.structural_tag);
      }
    }
  }
  return undefined;
}

/** A list given as JSON text (generate's parameters are flat). */
function parseList(field: string, v: string): unknown {
  try {
    return JSON.parse(v);
  } catch {
    throw grammarError(field, `must be a list of strings (or its JSON text), got ${JSON.stringify(v)}`);
  }
}
