/**
 * tiny_gpt's files served under another name with a chat template that renders `tools`, an
 * assistant's tool calls (Hermes' `<tool_call>`) and tool results, for the tests of function calling
 * (llm-tools) and of the APIs built on chat (llm-responses-messages).
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODELS } from './server.js';

const src = join(MODELS, 'tiny_gpt', '1');
const file = (f: string) => readFileSync(join(src, f));
// Newlines written as expressions: the renderer drops a newline that follows a block tag (trim_blocks).
const NL = '{{ "\\n" }}';
export const TOOLS_TEMPLATE = `{% if tools %}tools: {% for t in tools %}{{ t.function.name }} {{ t.function.parameters | tojson }};{% endfor %}${NL}{% endif %}`
  + `{% for m in messages %}{% if m.tool_calls %}{{ m.role }}: {% for c in m.tool_calls %}<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>{% endfor %}${NL}`
  + `{% elif m.role == 'tool' %}tool {{ m.tool_call_id }}: {{ m.content }}${NL}{% else %}{{ m.role }}: {{ m.content }}${NL}{% endif %}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}`;

/** The model's repository entry (for tempRepo), read with `parser` as its tool_call_parser when given. */
export function toolChatModel(name: string, parser?: string): Record<string, string | Uint8Array> {
  const params = parser ? `parameters [ { key: "tool_call_parser" value: { string_value: "${parser}" } } ]` : '';
  return {
    [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "llm"\n${params}\n`,
    [`${name}/1/model.onnx`]: file('model.onnx'),
    [`${name}/1/tokenizer.json`]: file('tokenizer.json'),
    [`${name}/1/config.json`]: file('config.json'),
    [`${name}/1/generation_config.json`]: file('generation_config.json'),
    [`${name}/1/tokenizer_config.json`]: JSON.stringify({ eos_token: '<|endoftext|>', chat_template: TOOLS_TEMPLATE }),
  };
}
