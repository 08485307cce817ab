/**
 * Function calling for the OpenAI API: a request's `tools` and `tool_choice` checked and turned into
 * what the chat template renders (`tools`, and the messages' `tool_calls` / `tool` results) and, for
 * `required` or a named function, a grammar that makes the model's answer a call; the model's output
 * parsed back into `tool_calls`. Models write calls in their own format, which the model's config
 * parameter `tool_call_parser` names (vLLM's `--tool-call-parser` names): `hermes` (Hermes, Qwen:
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, the default), `llama3_json` (Llama 3.x:
 * the answer is `{"name": …, "parameters": {…}}`) and `mistral` (`[TOOL_CALLS][{"name": …, "arguments": {…}}]`);
 * tool-stream.ts reads them, as they are generated or whole.
 */

import { TsiError } from '../errors.js';

type Json = Record<string, any>;

export type ToolParser = 'hermes' | 'llama3_json' | 'mistral';
export const TOOL_PARSERS: readonly ToolParser[] = ['hermes', 'llama3_json', 'mistral'];

interface Format {
  /** Text around one forced call, and the key of its arguments. */
  prefix: string;
  suffix: string;
  argsKey: string;
}

const FORMATS: Record<ToolParser, Format> = {
  hermes: { prefix: '<tool_call>\n', suffix: '\n</tool_call>', argsKey: 'arguments' },
  llama3_json: { prefix: '', suffix: '', argsKey: 'parameters' },
  mistral: { prefix: '[TOOL_CALLS][', suffix: ']', argsKey: 'arguments' },
};

const bad = (message: string, param: string) => Object.assign(new TsiError('INVALID_ARG', message), { param });

export interface ToolPlan {
  /** For the chat template's `tools` variable (undefined: no tools offered). */
  templateTools?: Json[];
  /**
   * The grammar forcing a call (tool_choice `required` or a named function), as the parameter
   * `guided_tool_call` gives it (params.ts).
   */
  guided?: Json;
  /** Whether the output is parsed for calls. */
  parse: boolean;
  parallel: boolean;
}

/** Checks `tools`, `tool_choice` and `parallel_tool_calls` and plans the request. */
export function planTools(body: Json, parser: ToolParser): ToolPlan {
  const tools = body.tools;
  if (tools === undefined || tools === null || (Array.isArray(tools) && tools.length === 0)) {
    const choice = body.tool_choice;
    if (choice !== undefined && choice !== null && choice !== 'none' && choice !== 'auto') throw bad(`'tool_choice' needs 'tools'`, 'tool_choice');
    return { parse: false, parallel: false };
  }
  if (!Array.isArray(tools)) throw bad(`'tools' must be a list of {"type": "function", "function": {...}}`, 'tools');
  const fns = tools.map((t: Json, i: number) => {
    if (t?.type !== 'function' || typeof t.function?.name !== 'string' || t.function.name === '') {
      throw bad(`tools[${i}] must be {"type": "function", "function": {"name": ..., "parameters": {...}}}`, 'tools');
    }
    return t.function as Json;
  });
  const names = new Set<string>();
  for (const f of fns) {
    if (names.has(f.name)) throw bad(`tools: the function name '${f.name}' is given twice`, 'tools');
    names.add(f.name);
  }
  const choice = body.tool_choice ?? 'auto';
  const parallel = body.parallel_tool_calls !== false;
  if (choice === 'none') return { parse: false, parallel: false };
  const format = FORMATS[parser];
  const forced = (list: Json[]) => ({ ...format, functions: list.map((f) => ({ name: f.name, parameters: f.parameters ?? { type: 'object' } })) });
  const templateTools = tools as Json[];
  if (choice === 'auto') return { templateTools, parse: true, parallel };
  if (choice === 'required') return { templateTools, guided: forced(fns), parse: true, parallel };
  if (typeof choice === 'object' && choice.type === 'function' && typeof choice.function?.name === 'string') {
    const f = fns.find((x) => x.name === choice.function.name);
    if (!f) throw bad(`'tool_choice' names the function '${choice.function.name}', which is not in 'tools'`, 'tool_choice');
    return { templateTools, guided: forced([f]), parse: true, parallel };
  }
  throw bad(`'tool_choice' must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`, 'tool_choice');
}

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
};

/** Messages for the chat template: tool calls' arguments as objects, tool results as they came. */
export function templateMessage(m: Json): Json {
  const out: Json = {};
  if (Array.isArray(m.tool_calls)) {
    out.tool_calls = m.tool_calls.map((c: Json) => {
      const args = c?.function?.arguments;
      const parsed = typeof args === 'string' ? parseJson(args) : args;
      return { id: c?.id, type: 'function', function: { name: c?.function?.name, arguments: parsed ?? args } };
    });
  }
  if (typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
  if (typeof m.name === 'string') out.name = m.name;
  return out;
}
