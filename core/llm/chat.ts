/**
 * Chat prompts: the model's own chat template (the Jinja `chat_template` of its
 * `tokenizer_config.json`, or its `chat_template.jinja`) rendered exactly as transformers.js
 * `apply_chat_template` renders it: the same variables (`messages`, `add_generation_prompt`, `tools`,
 * `documents`, the special tokens bos/eos/unk/sep/pad/cls/mask), and among named templates the
 * `tool_use` one when tools are given, else `default`. @huggingface/jinja is that renderer, pure
 * JavaScript, so real models' templates (loops, conditionals, filters, `raise_exception`) work
 * unchanged. A model without a template gets a plain "role: content" transcript ending in "assistant:".
 */

import { Template } from '@huggingface/jinja';
import { TsiError } from '../errors.js';
import { tokenText } from './tokenizer.js';

export interface ChatMessage {
  role: string;
  content: unknown;
  [key: string]: unknown;
}

export interface ChatOptions {
  /** End with the start of the assistant's turn (default true: the server asks for a reply). */
  add_generation_prompt?: boolean;
  /** JSON-schema function descriptions, as the OpenAI API's `tools` (a template may read them). */
  tools?: unknown[] | null;
  /** Retrieved documents for templates that take them (`documents`). */
  documents?: unknown[] | null;
  /** Further variables a template reads. */
  [key: string]: unknown;
}

type Json = Record<string, any>;

const SPECIAL_TOKENS = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

export class ChatTemplate {
  /** Named templates (a single template is `default`). */
  private readonly templates = new Map<string, Template>();
  private readonly vars: Record<string, string> = {};
  /** Whether a template writes `<think>` (a reasoning model's: core/llm/reasoning.ts picks its parser by it). */
  readonly thinks: boolean = false;

  /** `jinja` is the folder's chat_template.jinja, used when tokenizer_config.json has no template. */
  constructor(tokenizerConfig: Json | undefined, jinja?: string) {
    const cfg = tokenizerConfig ?? {};
    const src = (cfg.chat_template as unknown) ?? jinja;
    const named: [string, unknown][] = Array.isArray(src)
      ? src.map((t: Json) => [String(t?.name), t?.template])
      : src && typeof src === 'object' ? Object.entries(src) : [['default', src]];
    for (const [name, text] of named) {
      if (typeof text !== 'string' || text.length === 0) continue;
      if (text.includes('<think>')) this.thinks = true;
      try {
        this.templates.set(name, new Template(text));
      } catch (err) {
        throw new TsiError('INVALID_ARG', `tokenizer_config.json: the chat_template${name === 'default' ? '' : ` '${name}'`} does not parse: ${(err as Error).message}`);
      }
    }
    for (const k of SPECIAL_TOKENS) {
      const t = tokenText(cfg[k]);
      if (t) this.vars[k] = t;
    }
  }

  get hasTemplate(): boolean {
    return this.templates.size > 0;
  }

  /** The prompt for `messages`; by default it ends where the assistant's answer starts. */
  render(messages: ChatMessage[], opts: ChatOptions = {}): string {
    const { add_generation_prompt = true, tools = null, documents = null, ...extra } = opts;
    if (!this.hasTemplate) {
      return messages.map((m) => `${m.role}: ${typeof m.content === 'string' ? m.content : JSON.stringify(m.content)}\n`).join('') + (add_generation_prompt ? 'assistant:' : '');
    }
    const template = (tools && this.templates.get('tool_use')) || this.templates.get('default');
    if (!template) throw new TsiError('INVALID_ARG', `the model has several chat templates (${[...this.templates.keys()].join(', ')}) and none named 'default'`);
    try {
      return template.render({ messages, add_generation_prompt, tools, documents, ...this.vars, ...extra });
    } catch (err) {
      throw new TsiError('INVALID_ARG', `the chat template refused the messages: ${(err as Error).message}`);
    }
  }
}
