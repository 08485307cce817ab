/**
 * Reasoning models' thinking, read apart from their answer: a model that thinks writes
 * `<think>…</think>` before its answer (Qwen3, DeepSeek-R1, QwQ), and the OpenAI-compatible servers
 * (vLLM, llama.cpp) return the thinking as `reasoning_content` beside `content`. The model's config
 * parameter `reasoning_parser` names the family's style, as vLLM's `--reasoning-parser` does:
 *
 * - `deepseek_r1`: the answer starts inside the thinking (R1's template opens `<think>` in the
 *   prompt, or the model writes it first); everything before `</think>` is thinking, and an answer that
 *   never closes it is all thinking.
 * - `qwen3`: the thinking is there only if it is open — the model's answer begins with `<think>`, or the
 *   prompt ends inside one (a template that opens it, as Qwen3's thinking models do); otherwise, e.g.
 *   with `enable_thinking: false` (the template writes an empty `<think></think>`), all is answer.
 *
 * Without the parameter, a chat template that writes `<think>` selects `qwen3`. The split is done on
 * text by one reader fed piece by piece, so a stream (whose pieces may cut a marker, `<th` + `ink>`) and
 * a whole answer split alike: text that may still turn out to be a marker is held back until it cannot.
 */

import { TsiError } from '../errors.js';
import type { Tokenizer } from './tokenizer.js';

export type ReasoningParser = 'deepseek_r1' | 'qwen3';
export const REASONING_PARSERS: readonly ReasoningParser[] = ['deepseek_r1', 'qwen3'];

const OPEN = '<think>';
const CLOSE = '</think>';

/** The parser a model's config names, or the one its chat template implies; undefined: none. */
export function reasoningParserOf(param: string | undefined, templateThinks: boolean, model: string): ReasoningParser | undefined {
  if (param === undefined || param === '') return templateThinks ? 'qwen3' : undefined;
  if (param === 'none') return undefined;
  if (!(REASONING_PARSERS as readonly string[]).includes(param)) {
    throw new TsiError('INVALID_ARG', `model '${model}': the config parameter reasoning_parser is '${param}'; one of ${REASONING_PARSERS.join(', ')} (or none)`);
  }
  return param as ReasoningParser;
}

/** Whether a prompt ends inside an open `<think>` (the template began the thinking). */
export function promptOpensThinking(prompt: string): boolean {
  const open = prompt.lastIndexOf(OPEN);
  return open >= 0 && prompt.lastIndexOf(CLOSE) < open;
}

/** A piece of the answer, split: thinking first, then answer (either may be empty). */
export interface ReasoningPiece {
  reasoning: string;
  content: string;
}

/** Length of the longest end of `text` that begins `marker` (a marker cut by a piece boundary). */
function partialEnd(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) if (marker.startsWith(text.slice(text.length - n))) return n;
  return 0;
}

/**
 * Splits one choice's output into thinking and answer as it comes. `push` returns what may be sent
 * now; at `final` everything held back is let go.
 */
export class ReasoningStream {
  /** Where the reader is: before knowing whether thinking opens, in the thinking, or in the answer. */
  private state: 'start' | 'thinking' | 'answer';
  private held = '';
  /** Whether a leading `<think>` may still come (a model may write it even after a template opened it, as R1 did). */
  private skipOpen = true;
  /** The whole thinking so far, and whether it was closed. */
  reasoning = '';
  closed = false;

  constructor(readonly parser: ReasoningParser, promptOpen: boolean) {
    this.state = parser === 'deepseek_r1' || promptOpen ? 'thinking' : 'start';
  }

  push(text: string, final: boolean): ReasoningPiece {
    const out: ReasoningPiece = { reasoning: '', content: '' };
    let t = this.held + text;
    this.held = '';
    if (this.skipOpen) {
      // Leading whitespace, then maybe `<think>`: undecided until enough has come.
      const lead = t.length - t.trimStart().length;
      const rest = t.slice(lead);
      if (rest.startsWith(OPEN)) {
        t = rest.slice(OPEN.length);
        this.skipOpen = false;
        if (this.state === 'start') this.state = 'thinking';
      } else if (!final && OPEN.startsWith(rest)) {
        this.held = t;
        return out;
      } else {
        this.skipOpen = false;
        if (this.state === 'start') this.state = 'answer';
      }
    }
    if (this.state === 'thinking') {
      const at = t.indexOf(CLOSE);
      if (at >= 0) {
        out.reasoning = t.slice(0, at);
        out.content = t.slice(at + CLOSE.length);
        this.state = 'answer';
        this.closed = true;
      } else {
        const keep = final ? 0 : partialEnd(t, CLOSE);
        out.reasoning = t.slice(0, t.length - keep);
        this.held = t.slice(t.length - keep);
      }
    } else out.content = t;
    this.reasoning += out.reasoning;
    return out;
  }
}

/** How one request's answer is read for thinking. */
export interface ReasoningPlan {
  parser: ReasoningParser;
  promptOpen: boolean;
}

/**
 * Plans a chat request's reasoning and sets what the scheduler needs on its generation request: the
 * end-of-thinking token (counted), and for an answer a grammar constrains (response_format, a forced
 * tool call), that the grammar waits until the thinking ends. Such an answer is read for thinking only
 * when the thinking is open from its start (R1's style, or a template that opened it) and `</think>` is
 * one token; otherwise the grammar writes from the first token and there is no thinking to read.
 */
export function planReasoning(
  parser: ReasoningParser | undefined, prompt: string, constrained: boolean, tokenizer: Tokenizer,
  generation: { thinkEndId?: number; thinkOpen?: boolean },
): ReasoningPlan | undefined {
  if (!parser) return undefined;
  const promptOpen = promptOpensThinking(prompt);
  const endId = thinkEndId(tokenizer);
  if (constrained) {
    if (!(parser === 'deepseek_r1' || promptOpen) || endId === undefined) return undefined;
    generation.thinkOpen = true;
  }
  generation.thinkEndId = endId;
  return { parser, promptOpen };
}

/** The end-of-thinking marker's token id, when the tokenizer has it as one token (Qwen3, DeepSeek-R1 do). */
export function thinkEndId(tokenizer: Tokenizer): number | undefined {
  return tokenizer.tokenId(CLOSE);
}

/**
 * Tokens of a choice's thinking, markers included: up to the end-of-thinking token where the scheduler
 * saw it (`think_end_at`), every token when the thinking never closed, none when there was none; a
 * marker that is no single token leaves only the thinking's text, encoded.
 */
export function thinkingTokens(s: ReasoningStream, thinkEndAt: number | undefined, completionTokens: number, tokenizer: Tokenizer): number {
  if (!s.closed) return s.reasoning === '' ? 0 : completionTokens;
  return thinkEndAt ?? tokenizer.encode(s.reasoning + CLOSE, { addSpecialTokens: false }).length;
}

/** A whole answer split as a stream of it would be. */
export function splitReasoning(text: string, parser: ReasoningParser, promptOpen: boolean): ReasoningPiece {
  return new ReasoningStream(parser, promptOpen).push(text, true);
}

type Json = Record<string, any>;

/** Variables the template may not take from `chat_template_kwargs`: the server sets them. */
const RESERVED_VARS = new Set(['messages', 'tools', 'documents', 'add_generation_prompt']);

/**
 * The chat template's extra variables a request gives: `chat_template_kwargs` (vLLM's; Qwen3 reads
 * `enable_thinking`) and `reasoning_effort` (OpenAI's; gpt-oss-style templates read it), as vLLM
 * passes them.
 */
export function templateVariables(kwargs: unknown, effort: unknown, field = 'chat_template_kwargs'): Json {
  const out: Json = {};
  if (kwargs !== undefined && kwargs !== null) {
    if (typeof kwargs !== 'object' || Array.isArray(kwargs)) {
      throw Object.assign(new TsiError('INVALID_ARG', `'${field}' must be an object of template variables, e.g. {"enable_thinking": false}`), { param: field });
    }
    for (const [k, v] of Object.entries(kwargs)) if (!RESERVED_VARS.has(k)) out[k] = v;
  }
  if (effort !== undefined && effort !== null) {
    if (typeof effort !== 'string') throw Object.assign(new TsiError('INVALID_ARG', `'reasoning_effort' must be a string such as "low", "medium" or "high"`), { param: 'reasoning_effort' });
    out.reasoning_effort = effort;
  }
  return out;
}
