/**
 * The `embedding` backend (`backend: "embedding"` in config.pbtxt): a sentence encoder exported to
 * ONNX the way Optimum writes BERT-style models (inputs `input_ids`, `attention_mask` and, where the
 * model has it, `token_type_ids`; output `last_hidden_state`), served as text in, one vector out per
 * row, as sentence-transformers computes it. A version folder holds what a sentence-transformers
 * repository downloads:
 *
 *   <model>/1/model.onnx (or onnx/<variant>.onnx)   the encoder (model-folder.ts picks the file)
 *   <model>/1/tokenizer.json, tokenizer_config.json any tokenizer @huggingface/tokenizers reads (WordPiece...)
 *   <model>/1/1_Pooling/config.json                 pooling_mode_mean_tokens / _cls_token / _lasttoken / _max_tokens
 *   <model>/1/modules.json or 2_Normalize/          a Normalize module: unit-length vectors
 *   <model>/1/config.json                           max_position_embeddings; is_matryoshka / matryoshka_dimensions
 *
 * Config parameters override the files: `pooling` (mean, cls, last, max), `normalize` (true/false),
 * `max_seq_length`, `matryoshka` (true: requests may ask for fewer dimensions). Inputs: `text_input`
 * (BYTES, one text per batch row); outputs: `embedding` (FP32 [dim]) and `num_tokens` (INT32 [1]); a
 * request parameter `dimensions` truncates a matryoshka model's vectors and renormalises them, as
 * OpenAI does for its text-embedding-3 models, and is refused for other models.
 *
 * The encoder runs on the runtime's `onnxruntime` backend (its sessions, worker threads, providers):
 * this backend loads the same file there under a config of its own and hands each gathered batch to
 * it as one padded [rows, longest] request, so the dynamic batcher's batches become one ONNX run.
 */

import type { Backend, BackendInstance, BackendRequest, ModelLoadContext } from '../backend.js';
import type { ResponsePayload } from '../execution.js';
import type { Tensor } from '../types.js';
import type { ModelInput, ModelOutput } from '../config/model-config.js';
import { TsiError } from '../errors.js';
import { decodeString } from '../tensor.js';
import { EncoderInstance, boolParam, encoderBackend, loadEncoder, maxLengthOf, param, readJson, type Encoder, type LoadedEncoder, type TokenRow } from './encoder.js';

type Json = Record<string, any>;

export const POOLINGS = ['mean', 'cls', 'last', 'max'] as const;
export type Pooling = (typeof POOLINGS)[number];

export const EMBEDDING_INPUTS: ModelInput[] = [{ name: 'text_input', data_type: 'TYPE_STRING', dims: [1] }];
export const EMBEDDING_OUTPUTS: ModelOutput[] = [
  { name: 'embedding', data_type: 'TYPE_FP32', dims: [-1] },
  { name: 'num_tokens', data_type: 'TYPE_INT32', dims: [1] },
];

/** sentence-transformers' pooling flags → the one mode served (concatenations are refused). */
const POOLING_FLAGS: Record<string, Pooling | undefined> = {
  pooling_mode_mean_tokens: 'mean', pooling_mode_cls_token: 'cls', pooling_mode_lasttoken: 'last', pooling_mode_max_tokens: 'max',
  pooling_mode_mean_sqrt_len_tokens: undefined, pooling_mode_weightedmean_tokens: undefined,
};

export interface EmbeddingSettings {
  pooling: Pooling;
  normalize: boolean;
  maxLength: number;
  matryoshka: boolean;
}

/** `innerBackend`: the runtime's onnxruntime backend, which runs the encoder. */
export function createEmbeddingBackend(innerBackend: () => Promise<Backend>): Backend {
  return encoderBackend('embedding', EMBEDDING_INPUTS, EMBEDDING_OUTPUTS, innerBackend, loadEmbedding);
}

/** The pooling, normalisation, length limit and matryoshka flag, from the parameters or the folder's files. */
export async function embeddingSettings(ctx: ModelLoadContext, dir: string): Promise<EmbeddingSettings> {
  const { config } = ctx;
  const name = config.name ?? '';
  const modules = (await readJson(ctx, `${dir}/modules.json`)) as Json[] | undefined;
  const poolPath = modules?.find((m) => String(m.type).endsWith('.Pooling'))?.path ?? '1_Pooling';
  let pooling = param(config, 'pooling') as Pooling | undefined;
  if (pooling !== undefined && !POOLINGS.includes(pooling)) {
    throw new TsiError('INVALID_ARG', `model '${name}': config parameter 'pooling' is '${pooling}'; one of ${POOLINGS.join(', ')}`);
  }
  if (pooling === undefined) {
    const pool = await readJson(ctx, `${dir}/${poolPath}/config.json`);
    const on = Object.keys(POOLING_FLAGS).filter((k) => pool?.[k] === true);
    if (on.length > 1 || (on.length === 1 && POOLING_FLAGS[on[0]!] === undefined)) {
      throw new TsiError('UNSUPPORTED', `model '${name}': ${dir}/${poolPath}/config.json sets ${on.join(', ')}; one of pooling_mode_mean_tokens, _cls_token, _lasttoken, _max_tokens is supported`);
    }
    // sentence-transformers' default for a model without a pooling module is mean pooling.
    pooling = on.length === 1 ? POOLING_FLAGS[on[0]!]! : 'mean';
  }
  const normalize = boolParam(config, 'normalize') ?? (modules?.some((m) => String(m.type).endsWith('.Normalize')) || (await ctx.files.exists(`${dir}/2_Normalize`)));
  const hf = (await readJson(ctx, `${dir}/config.json`)) ?? {};
  const maxLength = maxLengthOf(config, hf, (await readJson(ctx, `${dir}/sentence_bert_config.json`)) ?? {});
  const matryoshka = boolParam(config, 'matryoshka') ?? (hf.is_matryoshka === true || Array.isArray(hf.matryoshka_dimensions));
  return { pooling, normalize, maxLength, matryoshka };
}

/** One row's vector from last_hidden_state `h` ([rows, seq, dim], row `r` with `len` real tokens). */
export function pool(h: Float32Array, r: number, seq: number, dim: number, len: number, mode: Pooling): Float32Array {
  const out = new Float32Array(dim);
  const at = (t: number) => (r * seq + t) * dim;
  if (mode === 'cls' || mode === 'last') {
    out.set(h.subarray(at(mode === 'cls' ? 0 : len - 1), at(mode === 'cls' ? 0 : len - 1) + dim));
    return out;
  }
  if (mode === 'max') out.fill(-Infinity);
  const acc = new Float64Array(dim);
  for (let t = 0; t < len; t++) {
    const o = at(t);
    for (let j = 0; j < dim; j++) {
      if (mode === 'max') out[j] = Math.max(out[j]!, h[o + j]!);
      else acc[j]! += h[o + j]!;
    }
  }
  if (mode === 'mean') for (let j = 0; j < dim; j++) out[j] = acc[j]! / len;
  return out;
}

/** Scales `v` to unit length (a zero vector stays zero, as torch's normalize leaves it). */
export function normalized(v: Float32Array): Float32Array {
  let s = 0;
  for (const x of v) s += x * x;
  const n = Math.max(Math.sqrt(s), 1e-12);
  return v.map((x) => x / n);
}

async function loadEmbedding(ctx: ModelLoadContext, onnx: Backend): Promise<LoadedEncoder> {
  const { config } = ctx;
  const name = config.name ?? '';
  if (!(config.input ?? []).some((i) => i.name === 'text_input') || !(config.output ?? []).some((o) => o.name === 'embedding')) {
    throw new TsiError('INVALID_ARG', `model '${name}': an embedding model takes 'text_input' (TYPE_STRING) and returns 'embedding' (TYPE_FP32)`);
  }
  const settings = await embeddingSettings(ctx, String(ctx.version));
  const enc = await loadEncoder(ctx, onnx, (io) => io?.outputs.find((o) => o.name === 'last_hidden_state')?.name ?? io?.outputs.find((o) => o.shape.length === 3)?.name,
    "'last_hidden_state' ([batch, sequence, hidden])", [-1, -1]);
  ctx.log.info(`model '${name}': encoder ${enc.file}, ${settings.pooling} pooling${settings.normalize ? ', normalized' : ''}, up to ${settings.maxLength} tokens${settings.matryoshka ? ', matryoshka dimensions' : ''}`);
  return { inner: enc.inner, instance: (inner) => new EmbeddingInstance(name, inner, enc, settings) };
}

class EmbeddingInstance extends EncoderInstance {
  constructor(model: string, inner: BackendInstance, enc: Encoder, private readonly settings: EmbeddingSettings) {
    super(model, inner, enc);
  }

  /** The request's `dimensions` parameter, checked; undefined: the model's own. */
  private dimensionsOf(req: BackendRequest, dim: number): number | undefined {
    const v = req.parameters.dimensions;
    if (v === undefined) return undefined;
    if (!this.settings.matryoshka) {
      throw new TsiError('INVALID_ARG', `model '${this.model}' does not support 'dimensions' (its vectors cannot be shortened; set the config parameter matryoshka to allow it)`);
    }
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > dim) throw new TsiError('INVALID_ARG', `model '${this.model}': 'dimensions' must be an integer in [1, ${dim}], got ${String(v)}`);
    return n;
  }

  protected rowsOf(req: BackendRequest): TokenRow[] {
    const texts = req.inputs.get('text_input')!.data as Uint8Array[];
    return texts.map((t) => {
      const ids = this.tokenizer.encode(decodeString(t));
      if (ids.length > this.settings.maxLength) {
        throw new TsiError('INVALID_ARG', `model '${this.model}': input 'text_input' is ${ids.length} tokens, more than the model's ${this.settings.maxLength}`);
      }
      return { ids };
    });
  }

  protected respond(req: BackendRequest, h: Tensor, first: number, rows: TokenRow[], L: number): ResponsePayload {
    const dim = h.shape[2]!;
    const want = this.dimensionsOf(req, dim) ?? dim;
    const out = new Float32Array(rows.length * want);
    const counts = new Int32Array(rows.length);
    rows.forEach((r, k) => {
      let v = pool(h.data as Float32Array, first + k, L, dim, r.ids.length, this.settings.pooling);
      if (this.settings.normalize) v = normalized(v);
      if (want < dim) v = normalized(v.subarray(0, want));
      out.set(v, k * want);
      counts[k] = r.ids.length;
    });
    return {
      outputs: [
        { name: 'embedding', datatype: 'FP32', shape: this.shapeFor(req, rows.length, [want]), data: out },
        { name: 'num_tokens', datatype: 'INT32', shape: this.shapeFor(req, rows.length, [1]), data: counts },
      ],
    };
  }
}
