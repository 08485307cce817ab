/**
 * One chat turn for the APIs that are not OpenAI's chat completions but mean the same thing —
 * OpenAI's Responses API (openai-responses.ts) and Anthropic's Messages API (anthropic-messages.ts):
 * each turns its request into a chat-completions-shaped body, and this file plans it exactly as
 * `/v1/chat/completions` does (the same model lookup, chat template, sampling fields, tools and
 * reasoning parser, from openai.ts) and runs it as one choice, reading the model's output as it comes
 * into what those APIs are made of: thinking, answer text, and tool calls (a call's start, then its
 * arguments in pieces), then the finish with its token counts. The routes shape these events as
 * their own streams, or gather them into one answer.
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { decodeString, encodeString } from '../tensor.js';
import type { InferRequest, InferResponse } from '../types.js';
import type { LlmModelInfo } from '../llm/backend.js';
import { readGenerationRequest } from '../llm/params.js';
import { ReasoningStream, planReasoning, thinkingTokens, type ReasoningPlan } from '../llm/reasoning.js';
import { ToolCallStream, parseToolCalls, type ToolCall } from '../llm/tool-stream.js';
import { planTools, type ToolParser } from '../llm/tools.js';
import { bad } from './openai-answer.js';
import { chatPrompt, modelOf, reasoningOf, samplingParameters, toolParserOf } from './openai.js';
import type { InferOptions } from '../backend.js';

type Json = Record<string, any>;

/** A chat request planned: what to run, and how to read its output. */
export interface ChatPlan {
  model: string;
  info: LlmModelInfo;
  prompt: string;
  request: InferRequest;
  tools?: { parser: ToolParser; parallel: boolean };
  reasoning?: ReasoningPlan;
}

/** Plans a chat-completions-shaped body (one choice) as /v1/chat/completions would. */
export function planChat(server: InferenceServer, body: Json): ChatPlan {
  const { name, info } = modelOf(server, body);
  const parser = toolParserOf(server, name);
  const tools = planTools(body, parser);
  const prompt = chatPrompt(body, info, tools);
  const { p } = samplingParameters(body, true, undefined);
  if (tools.guided) {
    if (p.response_format !== undefined) throw bad(`a JSON format cannot be combined with a forced tool call`, 'tool_choice');
    p.guided_tool_call = tools.guided;
  }
  if (tools.parse && parser === 'mistral') p.skip_special_tokens = false;
  p.stream = true;
  p.exclude_input_in_output = true;
  p.add_special_tokens = false;
  const generation = readGenerationRequest((k) => p[k]);
  const reasoning = planReasoning(reasoningOf(server, name, info), prompt, !!tools.guided || p.response_format !== undefined, info.tokenizer, generation);
  return {
    model: name, info, prompt,
    request: {
      model_name: name,
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1], data: [encodeString(prompt)] }],
      generation,
    },
    tools: tools.parse ? { parser, parallel: tools.parallel } : undefined,
    reasoning,
  };
}

/** What a turn says as it runs, in order. */
export type TurnEvent =
  | { kind: 'reasoning'; text: string }
  | { kind: 'text'; text: string }
  | { kind: 'call'; index: number; id: string; name: string }
  | { kind: 'args'; index: number; text: string };

/** A finished turn, whole. */
export interface TurnResult {
  reasoning: string;
  text: string;
  /** Calls read from the whole answer (the same reader as the stream's). */
  calls: ToolCall[];
  /** `stop`, `length`, or `tool_calls` when the answer is calls. */
  finish: string;
  /** The stop string that ended it, when one did. */
  stopString?: string;
  promptTokens: number;
  cachedTokens?: number;
  completionTokens: number;
  reasoningTokens: number;
}

function pieceText(r: InferResponse): string {
  const t = r.outputs.find((o) => o.name === 'text_output');
  return t ? (t.data as Uint8Array[]).map(decodeString).join('') : '';
}

/**
 * Runs a planned turn. `onEvent` sees each event as it is generated; the returned `started` settles
 * when the first output (or an error before any) arrives, so a streaming route can still answer an
 * early error with a status; `done` settles with the whole turn, or rejects with the error.
 */
export function runTurn(
  server: InferenceServer, plan: ChatPlan, options: InferOptions, onEvent?: (e: TurnEvent) => void,
): { started: Promise<TsiError | undefined>; done: Promise<TurnResult> } {
  const thinker = plan.reasoning ? new ReasoningStream(plan.reasoning.parser, plan.reasoning.promptOpen) : undefined;
  const caller = plan.tools ? new ToolCallStream(plan.tools.parser, plan.tools.parallel) : undefined;
  let text = '';
  let result: TurnResult | undefined;
  let error: TsiError | undefined;
  let signalStart!: (e: TsiError | undefined) => void;
  const started = new Promise<TsiError | undefined>((resolve) => (signalStart = resolve));
  const done = server.inferStream(plan.request, (r) => {
    if (r instanceof TsiError) {
      error ??= r;
      signalStart(r);
      return;
    }
    signalStart(undefined);
    const q = r.parameters ?? {};
    const final = q.finish_reason !== undefined;
    let piece = pieceText(r);
    if (thinker) {
      const split = thinker.push(piece, final);
      if (split.reasoning) onEvent?.({ kind: 'reasoning', text: split.reasoning });
      piece = split.content;
    }
    text += piece;
    if (caller) {
      for (const e of caller.push(piece, final)) {
        if (e.kind === 'content') onEvent?.({ kind: 'text', text: e.text });
        else if (e.kind === 'call') onEvent?.({ kind: 'call', index: e.index, id: e.id, name: e.name });
        else onEvent?.({ kind: 'args', index: e.index, text: e.text });
      }
    } else if (piece) onEvent?.({ kind: 'text', text: piece });
    if (!final) return;
    const whole = plan.tools ? parseToolCalls(text, plan.tools.parser, plan.tools.parallel) : { content: text, calls: [] };
    const thought = thinker?.reasoning ?? '';
    result = {
      reasoning: thought,
      text: plan.tools ? whole.content ?? '' : text,
      // A stream's calls are the ones whose start went out; the whole answer's are read again the same way.
      calls: whole.calls,
      finish: whole.calls.length > 0 || caller?.called ? 'tool_calls' : String(q.finish_reason),
      ...(q.stop_reason !== undefined ? { stopString: String(q.stop_reason) } : {}),
      promptTokens: Number(q.num_input_tokens ?? 0),
      ...(q.num_cached_tokens !== undefined ? { cachedTokens: Number(q.num_cached_tokens) } : {}),
      completionTokens: Number(q.num_output_tokens ?? 0),
      reasoningTokens: thinker ? thinkingTokens(thinker, q.think_end_at === undefined ? undefined : Number(q.think_end_at), Number(q.num_output_tokens ?? 0), plan.info.tokenizer) : 0,
    };
  }, options).then(() => {
    if (error) throw error;
    if (!result) throw new TsiError('INTERNAL', 'the model ended the request without a finish reason');
    return result;
  }, (err) => {
    signalStart(err instanceof TsiError ? err : new TsiError('INTERNAL', String(err)));
    throw err;
  });
  // Callers read `started` first; a rejection they handle through `done` must not go unhandled here.
  done.catch(() => undefined);
  return { started, done };
}

export { bad };
