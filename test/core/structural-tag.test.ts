/**
 * Structural tags' frame of the grammar automaton (core/llm/grammar.ts, structuralTagGrammar in
 * grammar-schema.ts), stepped character by character: free text (empty too) until a trigger, which
 * must go on as a tag's begin, its JSON and its end; at_least_one's answer is whole only after a tag,
 * and the fewest characters to close count the rest of a trigger begun; stop_after_first ends the
 * answer with the first tag. The sampled answers are test/node/llm-structured.test.ts's.
 */

import { describe, expect, it } from 'vitest';
import { complete, minRemaining, step, type Stack } from '../../core/llm/grammar.js';
import { structuralTagGrammar, type GNode } from '../../core/llm/grammar-schema.js';

/** The stack after `text`, or 'reject'. */
function walk(node: GNode, text: string): Stack | 'reject' {
  let s: Stack | undefined = { t: 'V', node, next: null };
  for (const c of text) {
    s = step(s, c);
    if (s === undefined) return 'reject';
  }
  return s;
}

const state = (node: GNode, text: string) => {
  const s = walk(node, text);
  return s === 'reject' ? 'reject' : { complete: complete(s), min: minRemaining(s), done: s === null };
};

describe('structural tags', () => {
  const one = structuralTagGrammar('f', { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<f='], tags: [{ begin: '<f=a>', content: { type: 'json_schema', json_schema: { type: 'integer' } }, end: '</f>' }], at_least_one: true, stop_after_first: true } });
  const free = structuralTagGrammar('f', { structures: [{ begin: '<t>', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }, end: '</t>' }], triggers: ['<t>'] });

  const whole = { complete: true, min: 0, done: false };
  const cases: [string, GNode, [string, ReturnType<typeof state>][]][] = [
    ['leaves text free until a trigger, which opens the tag; free again after its end', free, [
      ['', whole], ['hello <b>', whole],
      // A partial trigger is text; one found after a false start (`<<t>`) still opens the tag.
      ['a<t', whole], ['a<<t>{"a":12}</t> and <t>{"a":3}</t>!', whole],
      ['a<t>x', 'reject'], ['<t>{"a":1}</x', 'reject'],
      // Inside a tag the answer is not whole: the end must still come.
      ['<t>{"a":1}', { complete: false, min: 4, done: false }],
    ]],
    ['at_least_one and stop_after_first: whole only after one tag, and ended by it', one, [
      ['', { complete: false, min: 10, done: false }], ['xy', { complete: false, min: 10, done: false }],
      // The rest of a trigger begun is what is left to write.
      ['x<f', { complete: false, min: 8, done: false }],
      ['<f=a>1</f>', { complete: true, min: 0, done: true }], ['<f=a>1</f>z', 'reject'], ['<f=b>', 'reject'],
    ]],
  ];
  it.each(cases)('%s', (_, node, texts) => {
    for (const [text, want] of texts) expect({ text, got: state(node, text) }).toEqual({ text, got: want });
  });
});
