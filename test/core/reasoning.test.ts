/**
 * The reasoning parsers (core/llm/reasoning.ts) on text: each style's split of a whole answer, and the
 * same split from a stream of it cut at every place (markers cut `<th` + `ink>` included) and in
 * one-character pieces, as chunks arrive from the scheduler.
 */

import { describe, expect, it } from 'vitest';
import { ReasoningStream, promptOpensThinking, reasoningParserOf, splitReasoning, templateVariables, type ReasoningParser } from '../../core/llm/reasoning.js';

const CASES: { parser: ReasoningParser; open: boolean; text: string; reasoning: string; content: string }[] = [
  { parser: 'qwen3', open: false, text: '<think>\nplan a b\n</think>\n\nThe answer.', reasoning: '\nplan a b\n', content: '\n\nThe answer.' },
  { parser: 'qwen3', open: false, text: '  <think>x</think>y', reasoning: 'x', content: 'y' },
  { parser: 'qwen3', open: false, text: 'No thinking here </think> at all', reasoning: '', content: 'No thinking here </think> at all' },
  { parser: 'qwen3', open: true, text: 'thinking on</think>answer', reasoning: 'thinking on', content: 'answer' },
  { parser: 'qwen3', open: true, text: 'never closed <th', reasoning: 'never closed <th', content: '' },
  { parser: 'qwen3', open: false, text: '<thin', reasoning: '', content: '<thin' },
  { parser: 'deepseek_r1', open: false, text: 'R1 thinks</think>then answers', reasoning: 'R1 thinks', content: 'then answers' },
  { parser: 'deepseek_r1', open: true, text: '<think>written again</think>ok', reasoning: 'written again', content: 'ok' },
  { parser: 'deepseek_r1', open: false, text: 'all thinking, cut by max_tokens', reasoning: 'all thinking, cut by max_tokens', content: '' },
  { parser: 'deepseek_r1', open: true, text: 'a</think>b</think>c', reasoning: 'a', content: 'b</think>c' },
];

function streamed(parser: ReasoningParser, open: boolean, pieces: string[]): { reasoning: string; content: string } {
  const s = new ReasoningStream(parser, open);
  const out = { reasoning: '', content: '' };
  pieces.forEach((p, i) => {
    const r = s.push(p, i === pieces.length - 1);
    // Thinking never follows answer text.
    if (r.reasoning) expect(out.content).toBe('');
    out.reasoning += r.reasoning;
    out.content += r.content;
  });
  return out;
}

describe('reasoning parsers', () => {
  it('split a whole answer by style', () => {
    for (const c of CASES) expect({ ...c, ...splitReasoning(c.text, c.parser, c.open) }).toEqual(c);
  });

  it('split a stream cut anywhere, and one character at a time, exactly as the whole', () => {
    for (const c of CASES) {
      for (let cut = 0; cut <= c.text.length; cut++) {
        for (let cut2 = cut; cut2 <= c.text.length; cut2 += 3) {
          const got = streamed(c.parser, c.open, [c.text.slice(0, cut), c.text.slice(cut, cut2), c.text.slice(cut2)]);
          expect({ text: c.text, cut, cut2, ...got }).toEqual({ text: c.text, cut, cut2, reasoning: c.reasoning, content: c.content });
        }
      }
      expect(streamed(c.parser, c.open, [...c.text, ''])).toEqual({ reasoning: c.reasoning, content: c.content });
    }
  });

  it('holds back a cut marker until it is whole', () => {
    const s = new ReasoningStream('qwen3', true);
    expect(s.push('abc</th', false)).toEqual({ reasoning: 'abc', content: '' });
    expect(s.push('ink>def', false)).toEqual({ reasoning: '', content: 'def' });
    const t = new ReasoningStream('qwen3', false);
    expect(t.push('<th', false)).toEqual({ reasoning: '', content: '' });
    expect(t.push('ink>x', false)).toEqual({ reasoning: 'x', content: '' });
  });

  it('chooses the parser by config or template, and reads the prompt', () => {
    expect(reasoningParserOf(undefined, true, 'm')).toBe('qwen3');
    expect(reasoningParserOf(undefined, false, 'm')).toBeUndefined();
    expect(reasoningParserOf('deepseek_r1', false, 'm')).toBe('deepseek_r1');
    expect(reasoningParserOf('none', true, 'm')).toBeUndefined();
    expect(() => reasoningParserOf('granite', false, 'm')).toThrow(/model 'm': the config parameter reasoning_parser is 'granite'; one of deepseek_r1, qwen3/);
    expect(promptOpensThinking('<|im_start|>assistant\n<think>\n')).toBe(true);
    expect(promptOpensThinking('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(false);
    expect(templateVariables({ enable_thinking: false, messages: [] }, 'low')).toEqual({ enable_thinking: false, reasoning_effort: 'low' });
    expect(() => templateVariables('x', undefined)).toThrow(/chat_template_kwargs/);
  });
});
