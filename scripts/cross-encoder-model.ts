/**
 * The default repository's cross-encoders, in the layout Optimum and the onnx-community publish for
 * sequence-classification models (config.json with `id2label`, tokenizer.json, tokenizer_config.json,
 * the ONNX export with a `logits` output):
 *
 * - `tiny_rerank`: BERT-style (ms-marco MiniLM's shape): WordPiece, `[CLS] a [SEP] b [SEP]`, token
 *   type ids, one label (a relevance logit; sigmoid makes it a score).
 * - `tiny_rerank_xlmr`: XLM-R-style (bge-reranker's shape): a Unigram SentencePiece tokenizer with
 *   Metaspace, `<s> a </s></s> b </s>`, no token_type_ids input, positions from 2, one label.
 * - `tiny_classify`: BERT-style with three labels (softmax), a sentiment-shaped text classifier.
 *
 * The encoder graphs come from embedding-model.ts (same body, a classification head on the first
 * token), seeded random weights: the scores mean nothing, they only have to match the references. The
 * ONNX files are generated at build time (gen-models.ts); the JSON files are committed, written by
 * running this file (`tsx scripts/cross-encoder-model.ts`). Lengths are short (64 tokens) so tests
 * can exceed them.
 */

import { realpathSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encoderModel, wordPieceTokenizer, wordPieceVocab, type EncoderSpec } from './embedding-model.js';

const MAX = 64;
const SP = '\u2581';

/** XLM-R's specials at its ids (0-3), characters, then whole words; `<mask>` last as in XLM-R. */
const XLMR_SPECIALS = ['<s>', '<pad>', '</s>', '<unk>'];
const XLMR_WORDS = ['the', 'a', 'is', 'of', 'and', 'to', 'in', 'cat', 'dog', 'sat', 'on', 'mat', 'model', 'server', 'search', 'query',
  'document', 'tensor', 'triton', 'token', 'fast', 'what', 'how', 'rerank', 'embed', 'vector', 'passage', 'answer'];
const XLMR_CHARS = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?;:\'"()-/'];

/** The Unigram pieces with their log-probability scores (words outscore their letters, so they win). */
export function unigramVocab(): [string, number][] {
  return [
    ...XLMR_SPECIALS.map((t): [string, number] => [t, 0]),
    [SP, -3],
    ...XLMR_CHARS.map((c): [string, number] => [c, -6]),
    ...XLMR_CHARS.filter((c) => /[a-z]/.test(c)).map((c): [string, number] => [`${SP}${c}`, -6.5]),
    ...XLMR_WORDS.map((w): [string, number] => [`${SP}${w}`, -4]),
    ['<mask>', 0],
  ];
}

/** An XLM-R `tokenizer.json` (the shape transformers' XLMRobertaTokenizerFast saves, less the precompiled normalizer). */
export function unigramTokenizer(vocab: [string, number][]): Record<string, unknown> {
  const id = (t: string) => vocab.findIndex(([p]) => p === t);
  const special = (t: string) => ({ id: id(t), content: t, single_word: false, lstrip: t === '<mask>', rstrip: false, normalized: false, special: true });
  const tok = (t: string) => ({ SpecialToken: { id: t, type_id: 0 } });
  const seq = (s: 'A' | 'B') => ({ Sequence: { id: s, type_id: 0 } });
  const metaspace = { type: 'Metaspace', replacement: SP, add_prefix_space: true, prepend_scheme: 'always', split: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [...XLMR_SPECIALS, '<mask>'].map(special),
    normalizer: { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
    pre_tokenizer: metaspace,
    post_processor: {
      type: 'TemplateProcessing',
      single: [tok('<s>'), seq('A'), tok('</s>')],
      pair: [tok('<s>'), seq('A'), tok('</s>'), tok('</s>'), seq('B'), tok('</s>')],
      special_tokens: Object.fromEntries(['<s>', '</s>'].map((t) => [t, { id: t, ids: [id(t)], tokens: [t] }])),
    },
    decoder: metaspace,
    model: { type: 'Unigram', unk_id: id('<unk>'), vocab, byte_fallback: false },
  };
}

export const TINY_RERANK: EncoderSpec = { vocab: wordPieceVocab().length, hidden: 32, maxPositions: MAX, ffn: 64, seed: 44 };
export const TINY_RERANK_XLMR: EncoderSpec = { vocab: unigramVocab().length, hidden: 32, maxPositions: MAX, ffn: 64, seed: 45 };
export const TINY_CLASSIFY: EncoderSpec = { ...TINY_RERANK, seed: 46 };
const SENTIMENT = ['negative', 'neutral', 'positive'];

/** `model.onnx` of each cross-encoder. */
export const CROSS_ENCODER_MODELS: Record<string, () => Uint8Array> = {
  tiny_rerank: () => encoderModel(TINY_RERANK, { name: 'tiny_rerank', labels: 1 }),
  tiny_rerank_xlmr: () => encoderModel(TINY_RERANK_XLMR, { name: 'tiny_rerank_xlmr', labels: 1, tokenTypes: false, positionOffset: 2 }),
  tiny_classify: () => encoderModel(TINY_CLASSIFY, { name: 'tiny_classify', labels: SENTIMENT.length }),
};

function bertConfig(spec: EncoderSpec, labels: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['BertForSequenceClassification'], model_type: 'bert', hidden_size: spec.hidden, num_hidden_layers: 1, num_attention_heads: 1,
    intermediate_size: spec.ffn, max_position_embeddings: spec.maxPositions, vocab_size: spec.vocab, type_vocab_size: 2, pad_token_id: 0,
    id2label: Object.fromEntries(labels.map((l, i) => [String(i), l])), label2id: Object.fromEntries(labels.map((l, i) => [l, i])), ...extra,
  };
}

const BERT_TOKENIZER_CONFIG = { do_lower_case: true, model_max_length: MAX, cls_token: '[CLS]', sep_token: '[SEP]', pad_token: '[PAD]', unk_token: '[UNK]', mask_token: '[MASK]', tokenizer_class: 'BertTokenizer' };

/** The committed files of each cross-encoder's version folder, besides model.onnx. */
export function crossEncoderFiles(): Record<string, Record<string, unknown>> {
  const bert = wordPieceTokenizer(wordPieceVocab());
  return {
    tiny_rerank: { 'tokenizer.json': bert, 'tokenizer_config.json': BERT_TOKENIZER_CONFIG, 'config.json': bertConfig(TINY_RERANK, ['LABEL_0']) },
    tiny_classify: {
      'tokenizer.json': bert, 'tokenizer_config.json': BERT_TOKENIZER_CONFIG,
      'config.json': bertConfig(TINY_CLASSIFY, SENTIMENT, { problem_type: 'single_label_classification' }),
    },
    tiny_rerank_xlmr: {
      'tokenizer.json': unigramTokenizer(unigramVocab()),
      'tokenizer_config.json': { model_max_length: MAX, bos_token: '<s>', eos_token: '</s>', sep_token: '</s>', cls_token: '<s>', unk_token: '<unk>', pad_token: '<pad>', mask_token: '<mask>', tokenizer_class: 'XLMRobertaTokenizer' },
      'config.json': {
        architectures: ['XLMRobertaForSequenceClassification'], model_type: 'xlm-roberta', hidden_size: TINY_RERANK_XLMR.hidden, num_hidden_layers: 1,
        num_attention_heads: 1, intermediate_size: TINY_RERANK_XLMR.ffn, max_position_embeddings: MAX + 2, vocab_size: TINY_RERANK_XLMR.vocab,
        type_vocab_size: 1, pad_token_id: 1, bos_token_id: 0, eos_token_id: 2, id2label: { 0: 'LABEL_0' }, label2id: { LABEL_0: 0 },
      },
    },
  };
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', 'models');
  for (const [model, files] of Object.entries(crossEncoderFiles())) {
    for (const [name, json] of Object.entries(files)) {
      await mkdir(join(root, model, '1'), { recursive: true });
      await writeFile(join(root, model, '1', name), `${JSON.stringify(json, null, 2)}\n`);
    }
    console.log(`wrote ${join(root, model, '1')}`);
  }
}
