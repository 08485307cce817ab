/**
 * Chat prompts: the model's own chat template (the Jinja `chat_template` of its
 * `tokenizer_config.json`, as transformers' `apply_chat_template` renders it, with `messages`,
 * `add_generation_prompt`, `bos_token`, `eos_token` and the file's other special tokens), rendered by
 * @huggingface/jinja — the renderer transformers.js uses, pure JavaScript — so real models' templates
 * (loops, conditionals, filters, `raise_exception`) work unchanged. A model without a template gets a
 * plain "role: content" transcript ending in "assistant:".
 */

import { Template } from '@huggingface/jinja';
import { TsiError } from '../errors.js';

export interface ChatMessage {
  role: string;
  content: string;
  [key: string]: unknown;
}

type Json = Record<string, any>;

/** A special token in tokenizer_config.json: a string or an AddedToken object. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content;
  return undefined;
}

export class ChatTemplate {
  private readonly template?: Template;
  private readonly vars: Record<string, unknown>;

  constructor(tokenizerConfig: Json | undefined) {
    const cfg = tokenizerConfig ?? {};
    let src = cfg.chat_template as unknown;
    // A list of named templates: the default one.
    if (Array.isArray(src)) src = (src.find((t: Json) => t?.name === 'default') ?? src[0])?.template;
    if (typeof src === 'string' && src.length > 0) {
      try {
        this.template = new Template(src);
      } catch (err) {
        throw new TsiError('INVALID_ARG', `tokenizer_config.json: the chat_template does not parse: ${(err as Error).message}`);
      }
    }
    this.vars = {};
    for (const k of ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token']) {
      const t = tokenText(cfg[k]);
      if (t !== undefined) this.vars[k] = t;
    }
  }

  get hasTemplate(): boolean {
    return this.template !== undefined;
  }

  /** The prompt for `messages`, ending where the assistant's answer starts. */
  render(messages: ChatMessage[], extra: Record<string, unknown> = {}): string {
    if (!this.template) {
      return messages.map((m) => `${m.role}: ${m.content}\n`).join('') + 'assistant:';
    }
    try {
      return this.template.render({ ...this.vars, ...extra, messages, add_generation_prompt: true });
    } catch (err) {
      throw new TsiError('INVALID_ARG', `the chat template refused the messages: ${(err as Error).message}`);
    }
  }
}
