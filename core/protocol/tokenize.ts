/**
 * vLLM's `/tokenize` and `/detokenize` over `llm` models: a client counts a prompt's tokens before it
 * sends it (to fit the context, to budget max_tokens), with the model's own tokenizer and, for
 * `messages`, its chat template rendered as /v1/chat/completions renders it. The shapes are vLLM's:
 * `{model, prompt, add_special_tokens = true}` or `{model, messages, add_generation_prompt = true,
 * continue_final_message, tools, chat_template_kwargs, add_special_tokens = false}`, with
 * `return_token_strs`, answered `{count, max_model_len, tokens, token_strs}`; `{model, tokens}` is
 * answered `{prompt}`. `model` may be left out while one language model is served.
 */

import type { InferenceServer } from '../server.js';
import type { LlmModelInfo } from '../llm/backend.js';
import { planTools } from '../llm/tools.js';
import { bad, openAiError, readOpenAiBody } from './openai-answer.js';
import { chatPrompt, llmModels, modelOf, toolParserOf } from './openai.js';
import { json } from './http-common.js';

type Json = Record<string, any>;

/** The model a body names, or the only one served. */
function modelFor(server: InferenceServer, body: Json): { name: string; info: LlmModelInfo } {
  if (body.model === undefined || body.model === null) {
    const all = llmModels(server);
    if (all.length === 1) return all[0]!;
  }
  return modelOf(server, body);
}

function boolField(body: Json, name: string, dflt: boolean): boolean {
  const v = body[name];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') throw bad(`'${name}' must be a boolean`, name);
  return v;
}

/** `POST /tokenize`. */
export async function tokenize(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  try {
    const body = await readOpenAiBody(req, maxInput);
    const { name, info } = modelFor(server, body);
    let text: string;
    let special: boolean;
    if (body.messages !== undefined) {
      if (body.prompt !== undefined) throw bad(`give either 'prompt' or 'messages', not both`, 'prompt');
      const gen = boolField(body, 'add_generation_prompt', true);
      const cont = boolField(body, 'continue_final_message', false);
      if (gen && cont) throw bad(`'continue_final_message' and 'add_generation_prompt' cannot both be true`, 'continue_final_message');
      const tools = planTools({ tools: body.tools }, toolParserOf(server, name));
      text = chatPrompt({ ...body, tool_choice: undefined }, info, tools, gen);
      if (cont) {
        // The last message left open, as vLLM's continue_final_message: the rendered text up to its end.
        const last = body.messages[body.messages.length - 1];
        const content = typeof last?.content === 'string' ? last.content : '';
        const at = content === '' ? -1 : text.lastIndexOf(content);
        if (at >= 0) text = text.slice(0, at + content.length);
      }
      special = boolField(body, 'add_special_tokens', false);
    } else {
      if (typeof body.prompt !== 'string') throw bad(`'prompt' must be a string (or give 'messages')`, 'prompt');
      text = body.prompt;
      special = boolField(body, 'add_special_tokens', true);
    }
    const tokens = info.tokenizer.encode(text, { addSpecialTokens: special });
    const strs = boolField(body, 'return_token_strs', false) ? tokens.map((t) => info.tokenizer.token(t) ?? '') : null;
    return json({ count: tokens.length, max_model_len: info.maxContext, tokens, token_strs: strs });
  } catch (err) {
    return openAiError(err);
  }
}

/** `POST /detokenize`. */
export async function detokenize(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  try {
    const body = await readOpenAiBody(req, maxInput);
    const { info } = modelFor(server, body);
    const ids = body.tokens;
    const vocab = info.tokenizer.vocabSize;
    if (!Array.isArray(ids) || ids.some((t) => !Number.isInteger(t) || t < 0 || t >= vocab)) {
      throw bad(`'tokens' must be a list of token ids, integers in [0, ${vocab - 1}]`, 'tokens');
    }
    // Special tokens stay, as vLLM's detokenize keeps them: the text tokenizes back to the same ids.
    return json({ prompt: info.tokenizer.decode(ids as number[], { skipSpecialTokens: false }) });
  } catch (err) {
    return openAiError(err);
  }
}
