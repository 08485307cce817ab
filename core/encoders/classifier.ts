/**
 * The `classifier` backend (`backend: "classifier"` in config.pbtxt): a BERT- or XLM-R-style encoder
 * with a sequence-classification head, exported to ONNX the way Optimum and the onnx-community write
 * it (inputs `input_ids`, `attention_mask`, `token_type_ids` where the model has them; output
 * `logits` [batch, labels]). With one label and a pair of texts in, it is a cross-encoder reranker
 * (ms-marco MiniLM, bge-reranker); with several labels, a text (or pair) classifier. A version folder
 * holds what such a Hub repository downloads:
 *
 *   <model>/1/model.onnx or onnx/model*.onnx   the encoder with its head (model-folder.ts picks the file)
 *   <model>/1/tokenizer.json, tokenizer_config.json  WordPiece, Unigram (XLM-R), BPE...; model_max_length
 *   <model>/1/config.json                       id2label, problem_type, max_position_embeddings
 *
 * Pairs are tokenized as transformers does with `truncation="only_second"` (Tokenizer.encodePair: the
 * second text is cut, the special tokens stay); a single text longer than the limit is refused. The
 * activation is the one transformers' text-classification pipeline applies: none for `problem_type`
 * "regression", sigmoid for "multi_label_classification" or one label, softmax otherwise; a
 * sentence-transformers CrossEncoder's own `activation_fn` in config.json, or the config parameter
 * `activation` (sigmoid, softmax, none), overrides it. `max_seq_length` overrides the length limit.
 *
 * Inputs: `text_input` (BYTES, one text per batch row) and optional `text_pair` (BYTES, the same
 * rows); outputs: `scores` (FP32 [labels], activated), `label` (BYTES [1], the best label's name) and
 * `num_tokens` (INT32 [1]). Each gathered batch runs as one padded ONNX request (encoder.ts).
 */

import type { Backend, BackendInstance, BackendRequest, ModelLoadContext } from '../backend.js';
import type { ResponsePayload } from '../execution.js';
import type { Tensor } from '../types.js';
import type { ModelConfig, ModelInput, ModelOutput } from '../config/model-config.js';
import { TsiError } from '../errors.js';
import { decodeString, encodeString } from '../tensor.js';
import { EncoderInstance, encoderBackend, loadEncoder, maxLengthOf, param, readJson, type Encoder, type LoadedEncoder, type TokenRow } from './encoder.js';

type Json = Record<string, any>;

export const ACTIVATIONS = ['sigmoid', 'softmax', 'none'] as const;
export type Activation = (typeof ACTIVATIONS)[number];

export const CLASSIFIER_INPUTS: ModelInput[] = [
  { name: 'text_input', data_type: 'TYPE_STRING', dims: [1] },
  { name: 'text_pair', data_type: 'TYPE_STRING', dims: [1], optional: true },
];
export const CLASSIFIER_OUTPUTS: ModelOutput[] = [
  { name: 'scores', data_type: 'TYPE_FP32', dims: [-1] },
  { name: 'label', data_type: 'TYPE_STRING', dims: [1] },
  { name: 'num_tokens', data_type: 'TYPE_INT32', dims: [1] },
];

export interface ClassifierSettings {
  labels: string[];
  activation: Activation;
  maxLength: number;
}

/** `innerBackend`: the runtime's onnxruntime backend, which runs the encoder. */
export function createClassifierBackend(innerBackend: () => Promise<Backend>): Backend {
  return encoderBackend('classifier', CLASSIFIER_INPUTS, CLASSIFIER_OUTPUTS, innerBackend, loadClassifier);
}

/** The activation config.json asks for (transformers' pipeline rule, a CrossEncoder's activation_fn first). */
export function activationOf(hf: Json, labels: number): Activation {
  const st = String(hf.sentence_transformers?.activation_fn ?? hf.sbert_ce_default_activation_function ?? '');
  if (/Identity$/.test(st)) return 'none';
  if (/Sigmoid$/.test(st)) return 'sigmoid';
  if (/Softmax$/.test(st)) return 'softmax';
  if (hf.problem_type === 'regression') return 'none';
  if (hf.problem_type === 'multi_label_classification' || labels === 1) return 'sigmoid';
  return 'softmax';
}

/** `logits` of one row activated; float64 inside so softmax sums exactly as the reference's. */
export function activate(logits: ArrayLike<number>, activation: Activation): Float32Array {
  const n = logits.length;
  const out = new Float32Array(n);
  if (activation === 'none') for (let i = 0; i < n; i++) out[i] = logits[i]!;
  else if (activation === 'sigmoid') for (let i = 0; i < n; i++) out[i] = 1 / (1 + Math.exp(-logits[i]!));
  else {
    let max = -Infinity;
    for (let i = 0; i < n; i++) max = Math.max(max, logits[i]!);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += Math.exp(logits[i]! - max);
    for (let i = 0; i < n; i++) out[i] = Math.exp(logits[i]! - max) / sum;
  }
  return out;
}

/** Labels (id2label in id order, else LABEL_i), activation and length limit, from the parameters or the folder. */
export function classifierSettings(config: ModelConfig, hf: Json, tokConfig: Json, outputLabels?: number): ClassifierSettings {
  const name = config.name ?? '';
  const id2label = (hf.id2label ?? {}) as Record<string, string>;
  const count = outputLabels ?? (Number(hf.num_labels) || Object.keys(id2label).length || 1);
  const labels = Array.from({ length: count }, (_, i) => String(id2label[String(i)] ?? `LABEL_${i}`));
  const asked = param(config, 'activation') as Activation | undefined;
  if (asked !== undefined && !ACTIVATIONS.includes(asked)) {
    throw new TsiError('INVALID_ARG', `model '${name}': config parameter 'activation' is '${asked}'; one of ${ACTIVATIONS.join(', ')}`);
  }
  const modelMax = Number(tokConfig.model_max_length);
  // tokenizer_config.json writes "no limit" as 1e30; then the positions bound it.
  const st = Number.isInteger(modelMax) && modelMax > 0 && modelMax < 1e6 ? { max_seq_length: Math.min(modelMax, hf.max_position_embeddings ?? modelMax) } : {};
  return { labels, activation: asked ?? activationOf(hf, count), maxLength: maxLengthOf(config, hf, st) };
}

async function loadClassifier(ctx: ModelLoadContext, onnx: Backend): Promise<LoadedEncoder> {
  const { config } = ctx;
  const name = config.name ?? '';
  if (!(config.input ?? []).some((i) => i.name === 'text_input') || !(config.output ?? []).some((o) => o.name === 'scores')) {
    throw new TsiError('INVALID_ARG', `model '${name}': a classifier model takes 'text_input' (TYPE_STRING, and optionally 'text_pair') and returns 'scores' (TYPE_FP32)`);
  }
  const enc = await loadEncoder(ctx, onnx, (io) => io?.outputs.find((o) => o.name === 'logits')?.name ?? io?.outputs.find((o) => o.shape.length === 2)?.name,
    "'logits' ([batch, labels]: a sequence-classification head)", [-1]);
  const dims = enc.io?.outputs.find((o) => o.name === enc.output)?.shape[1];
  const settings = classifierSettings(config, enc.hf, (await readJson(ctx, `${ctx.version}/tokenizer_config.json`)) ?? {}, typeof dims === 'number' && dims > 0 ? dims : undefined);
  ctx.log.info(`model '${name}': cross-encoder ${enc.file}, ${settings.labels.length} label(s) (${settings.labels.slice(0, 4).join(', ')}${settings.labels.length > 4 ? '…' : ''}), ${settings.activation}, up to ${settings.maxLength} tokens`);
  return { inner: enc.inner, instance: (inner) => new ClassifierInstance(name, inner, enc, settings) };
}

class ClassifierInstance extends EncoderInstance {
  constructor(model: string, inner: BackendInstance, enc: Encoder, private readonly settings: ClassifierSettings) {
    super(model, inner, enc);
  }

  protected rowsOf(req: BackendRequest): TokenRow[] {
    const texts = req.inputs.get('text_input')!.data as Uint8Array[];
    const pairs = req.inputs.get('text_pair')?.data as Uint8Array[] | undefined;
    if (pairs && pairs.length !== texts.length) {
      throw new TsiError('INVALID_ARG', `model '${this.model}': input 'text_pair' has ${pairs.length} texts, 'text_input' ${texts.length}; each first text needs its second`);
    }
    const max = this.settings.maxLength;
    return texts.map((t, i) => {
      if (pairs) {
        try {
          return this.tokenizer.encodePair(decodeString(t), decodeString(pairs[i]!), max);
        } catch (err) {
          throw new TsiError('INVALID_ARG', `model '${this.model}': input 'text_input': ${(err as Error).message}`);
        }
      }
      const ids = this.tokenizer.encode(decodeString(t));
      if (ids.length > max) throw new TsiError('INVALID_ARG', `model '${this.model}': input 'text_input' is ${ids.length} tokens, more than the model's ${max}`);
      return { ids };
    });
  }

  protected respond(req: BackendRequest, out: Tensor, first: number, rows: TokenRow[]): ResponsePayload {
    const logits = out.data as Float32Array;
    const labels = out.shape[1]!;
    const scores = new Float32Array(rows.length * labels);
    const best: Uint8Array[] = [];
    const counts = new Int32Array(rows.length);
    rows.forEach((r, k) => {
      const s = activate(logits.subarray((first + k) * labels, (first + k + 1) * labels), this.settings.activation);
      scores.set(s, k * labels);
      let top = 0;
      for (let j = 1; j < labels; j++) if (s[j]! > s[top]!) top = j;
      best.push(encodeString(this.settings.labels[top] ?? `LABEL_${top}`));
      counts[k] = r.ids.length;
    });
    const shape = (row: number[]) => this.shapeFor(req, rows.length, row);
    return {
      outputs: [
        { name: 'scores', datatype: 'FP32', shape: shape([labels]), data: scores },
        { name: 'label', datatype: 'BYTES', shape: shape([1]), data: best },
        { name: 'num_tokens', datatype: 'INT32', shape: shape([1]), data: counts },
      ],
    };
  }
}
