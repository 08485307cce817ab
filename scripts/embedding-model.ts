/**
 * Builds a BERT-shaped sentence encoder in the layout Hugging Face Optimum exports and
 * sentence-transformers folders hold: inputs `input_ids`, `attention_mask`, `token_type_ids`
 * ([batch, sequence] int64), output `last_hidden_state` ([batch, sequence, hidden] fp32), beside a
 * WordPiece `tokenizer.json` (BERT's normalizer, pre-tokenizer and `[CLS] … [SEP]` template) and the
 * sentence-transformers module files (`modules.json`, `1_Pooling/config.json`). The default
 * repository's `tiny_embed` is one: word, position and token-type embeddings, one self-attention
 * layer that honours the padding mask (so a padded row embeds as it would alone) and a small MLP,
 * seeded random weights. `model.onnx` is generated at build time (gen-models.ts); the JSON files are
 * committed, written by running this file (`tsx scripts/embedding-model.ts`).
 */

import { realpathSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GraphBuilder, attrFloat, fillUniform } from '../graph/onnx-builder.js';

export interface EncoderSpec {
  vocab: number;
  hidden: number;
  maxPositions: number;
  ffn: number;
  seed: number;
}

const SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
const WORDS = ['the', 'a', 'is', 'of', 'and', 'to', 'in', 'it', 'that', 'cat', 'dog', 'sat', 'on', 'mat', 'model', 'server',
  'text', 'embed', 'search', 'query', 'document', 'hello', 'world', 'vector', 'tensor', 'triton', 'token', 'fast', 'slow'];
const PUNCT = [...'.,!?;:\'"()-/[]{}@#$%&*+=<>_~`|\\^'];
const CHARS = [...'abcdefghijklmnopqrstuvwxyz0123456789'];

/** The WordPiece vocabulary: specials, whole characters and punctuation, `##` continuations, a few words and suffixes. */
export function wordPieceVocab(): string[] {
  return [...SPECIALS, ...CHARS, ...PUNCT, ...CHARS.map((c) => `##${c}`), ...WORDS, '##s', '##ing', '##ed', '##er', '##ly', '##ding'];
}

export const TINY_EMBED: EncoderSpec = { vocab: wordPieceVocab().length, hidden: 32, maxPositions: 128, ffn: 64, seed: 35 };

/** A BERT `tokenizer.json` (the shape transformers' BertTokenizerFast saves) over `vocab`. */
export function wordPieceTokenizer(vocab: readonly string[]): Record<string, unknown> {
  const id = (t: string) => vocab.indexOf(t);
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIALS.map((t) => ({ id: id(t), content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } },
        { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [id('[CLS]')], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [id('[SEP]')], tokens: ['[SEP]'] },
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
      vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
    },
  };
}

function uniform(n: number, seed: number, scale: number): Float32Array {
  return fillUniform(new Float32Array(n), seed, -scale, scale);
}

/**
 * What else an encoder may be: without `token_type_ids` (XLM-R, RoBERTa), with positions counted from
 * `positionOffset` (XLM-R's start after its padding index, 2), and with a sequence-classification head
 * of `labels` outputs on the first token (BERT's pooler: dense + tanh, then the classifier), written
 * as `logits` [batch, labels] instead of `last_hidden_state`.
 */
export interface EncoderOptions {
  name?: string;
  tokenTypes?: boolean;
  positionOffset?: number;
  labels?: number;
}

/** The encoder graph (opset 17: LayerNormalization). */
export function encoderModel(spec: EncoderSpec = TINY_EMBED, opts: EncoderOptions = {}): Uint8Array {
  const { vocab, hidden: d, maxPositions, ffn, seed } = spec;
  const g = new GraphBuilder(opts.name ?? 'tiny_embed', { opset: 17, docString: 'tsi test encoder: seeded random weights' });
  const ids = g.input('input_ids', 'INT64', ['batch_size', 'sequence_length']);
  const mask = g.input('attention_mask', 'INT64', ['batch_size', 'sequence_length']);
  const types = opts.tokenTypes === false ? undefined : g.input('token_type_ids', 'INT64', ['batch_size', 'sequence_length']);
  const w = (name: string, dims: number[], s: number, scale: number) => g.initializer(name, 'FLOAT', dims, uniform(dims.reduce((a, b) => a * b, 1), seed * 100 + s, scale));
  const ones = g.initializer('ln.gamma', 'FLOAT', [d], new Float32Array(d).fill(1));
  const zeros = g.initializer('ln.beta', 'FLOAT', [d], new Float32Array(d));
  const i64 = (name: string, values: number[], dims = [values.length]) => g.initializer(name, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const ln = (x: string) => g.op('LayerNormalization', [x, ones, zeros], { axis: -1, epsilon: attrFloat(1e-12) });

  const S = g.op('Gather', [g.op('Shape', [ids]), i64('one', [1], [])], { axis: 0 });
  const offset = opts.positionOffset ?? 0;
  const positions = offset === 0 ? g.op('Range', [i64('zero', [0], []), S, i64('step', [1], [])])
    : g.op('Range', [i64('zero', [offset], []), g.op('Add', [S, i64('offset', [offset], [])]), i64('step', [1], [])]);
  const words = g.op('Add', [g.op('Gather', [w('word', [vocab, d], 1, 1), ids]), g.op('Gather', [w('pos', [maxPositions + offset, d], 2, 0.5), positions])]);
  const emb = types ? g.op('Add', [words, g.op('Gather', [w('type', [2, d], 3, 0.5), types])]) : words;
  const x = ln(emb);
  const scale = 1 / Math.sqrt(d);
  const q = g.op('MatMul', [x, w('wq', [d, d], 4, scale * 2)]);
  const k = g.op('MatMul', [x, w('wk', [d, d], 5, scale * 2)]);
  const v = g.op('MatMul', [x, w('wv', [d, d], 6, scale * 2)]);
  const scores = g.op('Mul', [g.op('MatMul', [q, g.op('Transpose', [k], { perm: [0, 2, 1] })]), g.initializer('scale', 'FLOAT', [], Float32Array.of(scale))]);
  // Padding keys get -1e4 before the softmax: exp underflows to exactly 0, so padding changes nothing.
  const maskF = g.op('Cast', [mask], { to: 1 });
  const bias = g.op('Mul', [g.op('Sub', [g.initializer('f1', 'FLOAT', [], Float32Array.of(1)), maskF]), g.initializer('neg', 'FLOAT', [], Float32Array.of(-1e4))]);
  const probs = g.op('Softmax', [g.op('Add', [scores, g.op('Unsqueeze', [bias, i64('ax1', [1])])])], { axis: -1 });
  const h = ln(g.op('Add', [x, g.op('MatMul', [probs, v])]));
  const ff = g.op('MatMul', [g.op('Tanh', [g.op('MatMul', [h, w('w1', [d, ffn], 7, scale * 2)])]), w('w2', [ffn, d], 8, 1 / Math.sqrt(ffn))]);
  if (opts.labels === undefined) {
    g.output(g.op('LayerNormalization', [g.op('Add', [h, ff]), ones, zeros], { axis: -1, epsilon: attrFloat(1e-12) }, 'last_hidden_state'),
      'FLOAT', ['batch_size', 'sequence_length', d]);
    return g.encode();
  }
  const last = ln(g.op('Add', [h, ff]));
  const first = g.op('Gather', [last, i64('zero_idx', [0], [])], { axis: 1 });
  const pooled = g.op('Tanh', [g.op('Add', [g.op('MatMul', [first, w('pooler', [d, d], 9, scale * 2)]), w('pooler.b', [d], 10, 0.1)])]);
  g.output(g.op('Add', [g.op('MatMul', [pooled, w('classifier', [d, opts.labels], 11, scale * 4)]), w('classifier.b', [opts.labels], 12, 0.5)], {}, 'logits'),
    'FLOAT', ['batch_size', opts.labels]);
  return g.encode();
}

/** The committed files of `models/tiny_embed/1` besides model.onnx. */
export function tinyEmbedFiles(): Record<string, unknown> {
  const vocab = wordPieceVocab();
  return {
    'tokenizer.json': wordPieceTokenizer(vocab),
    'tokenizer_config.json': { do_lower_case: true, model_max_length: TINY_EMBED.maxPositions, cls_token: '[CLS]', sep_token: '[SEP]', pad_token: '[PAD]', unk_token: '[UNK]', mask_token: '[MASK]', tokenizer_class: 'BertTokenizer' },
    'config.json': { model_type: 'bert', hidden_size: TINY_EMBED.hidden, num_hidden_layers: 1, num_attention_heads: 1, intermediate_size: TINY_EMBED.ffn, max_position_embeddings: TINY_EMBED.maxPositions, vocab_size: vocab.length, type_vocab_size: 2, is_matryoshka: true },
    'modules.json': [
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
      { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
      { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' },
    ],
    '1_Pooling/config.json': { word_embedding_dimension: TINY_EMBED.hidden, pooling_mode_cls_token: false, pooling_mode_mean_tokens: true, pooling_mode_max_tokens: false, pooling_mode_mean_sqrt_len_tokens: false, pooling_mode_weightedmean_tokens: false, pooling_mode_lasttoken: false, include_prompt: true },
  };
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  const dir = join(dirname(fileURLToPath(import.meta.url)), '..', 'models', 'tiny_embed', '1');
  for (const [name, json] of Object.entries(tinyEmbedFiles())) {
    await mkdir(dirname(join(dir, name)), { recursive: true });
    await writeFile(join(dir, name), `${JSON.stringify(json, null, 2)}\n`);
  }
  console.log(`wrote ${dir}`);
}
