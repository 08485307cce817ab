/**
 * The tool-call reader (core/llm/tool-stream.ts) on outputs cut into pieces of every size from 1 to 8
 * characters: the events of a stream always join into what the whole text reads as (calls, their
 * arguments, content), calls start with their name before any argument, and a text that is no call
 * streams as all of itself.
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

const CASES: [ToolParser, string][] = [
  ['hermes', 'Sure.\n<tool_call>\n{"name": "a", "arguments": {"x": "1 }{ 2", "y": [1, {"z": null}]}}\n</tool_call>\n<tool_call>{"arguments": {"q": "\\"hi\\""}, "name": "b"}</tool_call> done'],
  ['hermes', '<tool_call>{"name": "a"}</tool_call>'],
  ['hermes', '<tool_call>{"name": "a", "arguments": "{\\"k\\": 1}"}'],
  ['hermes', 'a <tool_call>{"name": 3}</tool_call>'],
  ['hermes', 'plain <tool_ text <tool_call'],
  ['llama3_json', '{"name": "a", "parameters": {"x": 1.50}}'],
  ['llama3_json', ' <|python_tag|>{"name": "a", "parameters": {}} ; {"name": "b", "parameters": {"c": true}}'],
  ['llama3_json', '<|python'],
  ['llama3_json', ' \n '],
  ['llama3_json', 'The answer is {"name": "a"}'],
  ['mistral', 'ok [TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"t": "x"}}]'],
  ['mistral', '[TOOL_CALLS]{"name": "a", "arguments": {"t": 1}}'],
  ['mistral', '[TOOL_CALLS][]'],
];

describe('tool-call reader', () => {
  it('streams in pieces of any size what the whole text reads as', () => {
    for (const [parser, text] of CASES) {
      const whole = parseToolCalls(text, parser);
      for (let size = 1; size <= 8; size++) {
        const s = streamOf(text, parser, size);
        if (whole.calls.length > 0) {
          expect(s.called).toBe(true);
          expect(s.calls).toEqual(whole.calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })));
          expect(s.content.trim()).toBe(whole.content ?? '');
        } else {
          expect(s.called, `${parser} ${text}`).toBe(false);
          expect(s.calls).toEqual([]);
          expect(s.content).toBe(text);
        }
      }
    }
  });

  it('reads arguments as the model wrote them, minified; a string of JSON as its text; none as {}', () => {
    const args = (text: string, parser: ToolParser = 'hermes') => parseToolCalls(text, parser).calls.map((c) => c.function.arguments);
    expect(args(CASES[0]![1])).toEqual(['{"x":"1 }{ 2","y":[1,{"z":null}]}', '{"q":"\\"hi\\""}']);
    expect(args(CASES[1]![1])).toEqual(['{}']);
    expect(args(CASES[2]![1])).toEqual(['{"k": 1}']);
    expect(args(CASES[5]![1], 'llama3_json')).toEqual(['{"x":1.50}']);
    expect(parseToolCalls(CASES[3]![1], 'hermes')).toEqual({ content: CASES[3]![1], calls: [] });
  });

  it('keeps the first call only when parallel calls are off, and the text after it as content', () => {
    const s = streamOf(CASES[0]![1], 'hermes', 3, false);
    expect(s.calls.map((c) => c.name)).toEqual(['a']);
    expect(parseToolCalls(CASES[0]![1], 'hermes', false).content).toBe('Sure. done');
  });
});
