/**
 * The tool-call reader (core/llm/tool-stream.ts) on outputs of each parser (hermes, llama3_json,
 * mistral), whole and cut into pieces of every size from 1 to 8 characters: both read as the calls,
 * arguments and content written out here by hand, calls start with their name before any argument,
 * and a text that is no call streams as all of itself.
 */

import { describe, expect, it } from 'vitest';
import { ToolCallStream, parseToolCalls } from '../../core/llm/tool-stream.js';
import type { ToolParser } from '../../core/llm/tools.js';

function streamOf(text: string, parser: ToolParser, size: number, parallel = true) {
  const s = new ToolCallStream(parser, parallel);
  const calls: { name: string; arguments: string }[] = [];
  let content = '';
  for (let i = 0; i < text.length || i === 0; i += size) {
    for (const e of s.push(text.slice(i, i + size), i + size >= text.length)) {
      if (e.kind === 'content') content += e.text;
      else if (e.kind === 'call') calls[e.index] = { name: e.name, arguments: '' };
      else {
        expect(calls[e.index]).toBeDefined();
        calls[e.index]!.arguments += e.text;
      }
    }
  }
  return { calls, content, called: s.called };
}

/**
 * Each text with what it reads as, written out by hand (Hermes', Llama 3's and Mistral's formats as
 * vLLM's parsers read them): the content around the calls (null when there is none) and each call's
 * name and arguments, minified as the model wrote them (a string of JSON as its text, none as {}).
 * A text that is no call is content, all of it.
 */
type Expected = { content: string | null; calls: [name: string, args: string][] };
const CASES: [ToolParser, string, Expected][] = [
  ['hermes', 'Sure.\n<tool_call>\n{"name": "a", "arguments": {"x": "1 }{ 2", "y": [1, {"z": null}]}}\n</tool_call>\n<tool_call>{"arguments": {"q": "\\"hi\\""}, "name": "b"}</tool_call> done',
    { content: 'Sure. done', calls: [['a', '{"x":"1 }{ 2","y":[1,{"z":null}]}'], ['b', '{"q":"\\"hi\\""}']] }],
  ['hermes', '<tool_call>{"name": "a"}</tool_call>', { content: null, calls: [['a', '{}']] }],
  ['hermes', '<tool_call>{"name": "a", "arguments": "{\\"k\\": 1}"}', { content: null, calls: [['a', '{"k": 1}']] }],
  ['hermes', 'a <tool_call>{"name": 3}</tool_call>', { content: 'a <tool_call>{"name": 3}</tool_call>', calls: [] }],
  ['hermes', 'plain <tool_ text <tool_call', { content: 'plain <tool_ text <tool_call', calls: [] }],
  ['llama3_json', '{"name": "a", "parameters": {"x": 1.50}}', { content: null, calls: [['a', '{"x":1.50}']] }],
  ['llama3_json', ' <|python_tag|>{"name": "a", "parameters": {}} ; {"name": "b", "parameters": {"c": true}}',
    { content: null, calls: [['a', '{}'], ['b', '{"c":true}']] }],
  ['llama3_json', '<|python', { content: '<|python', calls: [] }],
  ['llama3_json', ' \n ', { content: ' \n ', calls: [] }],
  ['llama3_json', 'The answer is {"name": "a"}', { content: 'The answer is {"name": "a"}', calls: [] }],
  ['mistral', 'ok [TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"t": "x"}}]',
    { content: 'ok', calls: [['a', '{}'], ['b', '{"t":"x"}']] }],
  ['mistral', '[TOOL_CALLS]{"name": "a", "arguments": {"t": 1}}', { content: null, calls: [['a', '{"t":1}']] }],
  ['mistral', '[TOOL_CALLS][]', { content: '[TOOL_CALLS][]', calls: [] }],
];

describe('tool-call reader', () => {
  it('reads each text, whole and in pieces of any size, as written out', () => {
    for (const [parser, text, expected] of CASES) {
      const whole = parseToolCalls(text, parser);
      const calls = expected.calls.map(([name, args]) => ({ name, arguments: args }));
      expect({ content: whole.content, calls: whole.calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })) }, `${parser} ${text}`)
        .toEqual({ content: expected.content, calls });
      for (let size = 1; size <= 8; size++) {
        const s = streamOf(text, parser, size);
        expect(s.called, `${parser} ${text} in pieces of ${size}`).toBe(calls.length > 0);
        expect(s.calls).toEqual(calls);
        if (calls.length > 0) expect(s.content.trim()).toBe(expected.content ?? '');
        else expect(s.content).toBe(text);
      }
    }
  });

  it('keeps the first call only when parallel calls are off, and the text after it as content', () => {
    const s = streamOf(CASES[0]![1], 'hermes', 3, false);
    expect(s.calls.map((c) => c.name)).toEqual(['a']);
    expect(parseToolCalls(CASES[0]![1], 'hermes', false).content).toBe('Sure. done');
  });
});
