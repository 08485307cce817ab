/**
 * The classifier backend's pure parts: which activation a config.json asks for (transformers'
 * text-classification pipeline rule, a sentence-transformers CrossEncoder's own activation_fn first),
 * the activations themselves, and Tokenizer.encodePair's only_second cut on the default repository's
 * BERT tokenizer: the template kept, the second text cut from its end, an empty second text kept as
 * an empty sequence, a first text too long on its own refused.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { activate, activationOf } from '../../core/index.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { MODELS } from '../helpers/server.js';

describe('activationOf', () => {
  it('follows problem_type, then the label count, with a CrossEncoder activation_fn first', () => {
    expect(activationOf({}, 1)).toBe('sigmoid');
    expect(activationOf({}, 3)).toBe('softmax');
    expect(activationOf({ problem_type: 'multi_label_classification' }, 3)).toBe('sigmoid');
    expect(activationOf({ problem_type: 'single_label_classification' }, 2)).toBe('softmax');
    expect(activationOf({ problem_type: 'regression' }, 1)).toBe('none');
    expect(activationOf({ sentence_transformers: { activation_fn: 'torch.nn.modules.linear.Identity' } }, 1)).toBe('none');
    expect(activationOf({ sbert_ce_default_activation_function: 'torch.nn.modules.activation.Sigmoid' }, 2)).toBe('sigmoid');
  });

  it('activates: sigmoid per value, softmax over the row, none as it is', () => {
    expect(Array.from(activate([0, 2], 'sigmoid'))).toEqual([0.5, Math.fround(1 / (1 + Math.exp(-2)))]);
    const s = activate([1000, 1000, 1000 - Math.log(2)], 'softmax');
    expect(Array.from(s)).toEqual([0.4, 0.4, 0.2].map(Math.fround));
    expect(Array.from(activate([-3, 7], 'none'))).toEqual([-3, 7]);
  });
});

describe('Tokenizer.encodePair', () => {
  const dir = join(MODELS, 'tiny_rerank', '1');
  const tok = Tokenizer.fromJson(readFileSync(join(dir, 'tokenizer.json'), 'utf8'), readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
  const [CLS, SEP] = [tok.tokenId('[CLS]')!, tok.tokenId('[SEP]')!];
  const a = tok.encode('the cat', { addSpecialTokens: false });
  const b = tok.encode('the dog sat on the mat and the cat', { addSpecialTokens: false });

  it('writes [CLS] a [SEP] b [SEP] with type ids 0 then 1 when it fits', () => {
    expect(tok.encodePair('the cat', 'the dog sat on the mat and the cat', 64)).toEqual({
      ids: [CLS, ...a, SEP, ...b, SEP], typeIds: [0, ...a.map(() => 0), 0, ...b.map(() => 1), 1],
    });
  });

  it('cuts only the second text, from its end, keeping the last [SEP]', () => {
    const max = a.length + 3 + 2;
    expect(tok.encodePair('the cat', 'the dog sat on the mat and the cat', max).ids).toEqual([CLS, ...a, SEP, ...b.slice(0, 2), SEP]);
  });

  it('keeps an empty second text as an empty sequence, as transformers does', () => {
    expect(tok.encodePair('the cat', '', 64)).toEqual({ ids: [CLS, ...a, SEP, SEP], typeIds: [0, ...a.map(() => 0), 0, 1] });
  });

  it('refuses a first text longer than the limit on its own', () => {
    expect(() => tok.encodePair('the cat '.repeat(40), 'x', 16)).toThrow(/first text is \d+ tokens with the special tokens, more than the model's 16/);
  });
});
