/**
 * A Llama-shaped decoder's weights, and the graph onnxruntime-genai's model builder lays such a decoder
 * out as (the `gqa` layout): com.microsoft GroupQueryAttention with the rotary inside (cos/sin caches
 * in the graph, each row's length read from the mask, rows right-padded), SimplifiedLayerNormalization
 * and SkipSimplifiedLayerNormalization (the residual add fused into the norm), one projection for
 * q/k/v and one for gate/up, MatMulNBits with int8 activations (accuracy_level 4) where asked.
 *
 * Two writers feed it: scripts/llm-families.ts (seeded weights, `layout: 'gqa'`) and plain-decoder.ts
 * (the weights read out of an Optimum-shaped graph, so a downloaded plain folder is served fused).
 */
import { GraphBuilder, attrFloat, encodeModelParts } from './onnx-builder.js';

/** One projection x @ W (+ bias), W [K, N]: float32, or int4 blocks as MatMulNBits stores them. */
export type Linear = { K: number; N: number; bias?: Float32Array } & (
  | { kind: 'float'; w: Float32Array }
  /** b [N, K/blockSize, blockSize/2] (low nibble first), scales [N·K/blockSize], zeroPoints packed per row of N. */
  | { kind: 'int4'; blockSize: number; b: Uint8Array; scales: Float32Array; zeroPoints?: Uint8Array; accuracyLevel?: number }
);

export interface DecoderLayerWeights {
  inputNorm: Float32Array;
  q: Linear; k: Linear; v: Linear; o: Linear;
  postNorm: Float32Array;
  gate: Linear; up: Linear; down: Linear;
}

export interface DecoderWeights {
  heads: number; kvHeads: number; headDim: number;
  /** RMSNorm's epsilon (one for every norm). */
  eps: number;
  /** [vocab, d] */
  embed: Float32Array;
  /** Gemma's √d on the embeddings. */
  embedScale?: number;
  /** RoPE's inverse frequencies (headDim / 2, rope scaling applied), rotate-half pairing. */
  invFreq: Float32Array;
  /** Positions the cos/sin caches cover. */
  context: number;
  layers: DecoderLayerWeights[];
  finalNorm: Float32Array;
  lmHead: Linear;
  /** The MLP's gate activation. */
  activation: 'silu' | 'gelu_tanh';
}

/** Linears side by side along N (q|k|v, gate|up): x @ [W_1 … W_n] then splits into the x @ W_i. */
export function concatLinears(parts: readonly Linear[]): Linear {
  const K = parts[0]!.K, N = parts.reduce((a, p) => a + p.N, 0);
  const bias = parts.some((p) => p.bias) ? Float32Array.from(parts.flatMap((p) => [...(p.bias ?? new Float32Array(p.N))])) : undefined;
  const first = parts[0]!;
  if (first.kind === 'float') {
    const w = new Float32Array(K * N);
    for (let k = 0; k < K; k++) {
      let at = k * N;
      for (const p of parts as Extract<Linear, { kind: 'float' }>[]) {
        w.set(p.w.subarray(k * p.N, (k + 1) * p.N), at);
        at += p.N;
      }
    }
    return { kind: 'float', K, N, w, bias };
  }
  // int4 rows are per output column n, so the concatenation along N is the rows one after another.
  const q = parts as Extract<Linear, { kind: 'int4' }>[];
  const cat = <T extends Uint8Array | Float32Array>(xs: T[], make: (n: number) => T): T => {
    const out = make(xs.reduce((a, x) => a + x.length, 0));
    let at = 0;
    for (const x of xs) { out.set(x, at); at += x.length; }
    return out;
  };
  return {
    kind: 'int4', K, N, blockSize: first.blockSize, bias, accuracyLevel: first.accuracyLevel,
    b: cat(q.map((p) => p.b), (n) => new Uint8Array(n)),
    scales: cat(q.map((p) => p.scales), (n) => new Float32Array(n)),
    zeroPoints: first.zeroPoints ? cat(q.map((p) => p.zeroPoints!), (n) => new Uint8Array(n)) : undefined,
  };
}

/**
 * The fused graph of `w`: inputs `input_ids`, `attention_mask`, `past_key_values.{i}.key/value`;
 * outputs `logits`, `present.{i}.key/value`. `external`: its large initializers in a data file of
 * that name (as the plain fp32 folders hold theirs).
 */
export function fusedDecoderModel(w: DecoderWeights, opts: { name: string; docString?: string; external?: string; int8Activations?: boolean }): { model: Uint8Array; data?: Uint8Array } {
  const { heads: H, kvHeads: KVH, headDim: hd } = w;
  const D = w.finalNorm.length, V = w.embed.length / D;
  const g = new GraphBuilder(opts.name, { opset: 17, docString: opts.docString ?? '' });
  const i64 = (name: string, values: number[], dims = [values.length]) => g.initializer(name, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const f32 = (name: string, v: number) => g.initializer(name, 'FLOAT', [], Float32Array.of(v));
  const linear = (x: string, name: string, l: Linear): string => {
    let y: string;
    if (l.kind === 'int4') {
      const b = g.initializer(`${name}.weight_Q4`, 'UINT8', [l.N, l.K / l.blockSize, l.blockSize / 2], l.b);
      const s = g.initializer(`${name}.weight_scales`, 'FLOAT', [l.scales.length], l.scales);
      const zp = l.zeroPoints ? [g.initializer(`${name}.weight_zp`, 'UINT8', [l.zeroPoints.length], l.zeroPoints)] : [];
      y = g.op('MatMulNBits', [x, b, s, ...zp], { K: l.K, N: l.N, bits: 4, block_size: l.blockSize, accuracy_level: opts.int8Activations ? 4 : l.accuracyLevel ?? 0 }, undefined, 'com.microsoft');
    } else y = g.op('MatMul', [x, g.initializer(`${name}.weight`, 'FLOAT', [l.K, l.N], l.w)]);
    return l.bias ? g.op('Add', [y, g.initializer(`${name}.bias`, 'FLOAT', [l.N], l.bias)]) : y;
  };
  const eps = attrFloat(w.eps);
  const skipNorm = (y: string, skip: string, name: string, weight: Float32Array): [string, string] => {
    const [out, sum] = [`${name}.out`, `${name}.sum`];
    g.node('SkipSimplifiedLayerNormalization', [y, skip, g.initializer(`${name}.weight`, 'FLOAT', [D], weight)], [out, '', '', sum], { epsilon: eps }, 'com.microsoft');
    return [out, sum];
  };
  const activation = (gate: string, p: string): string => {
    if (w.activation === 'silu') return g.op('Mul', [gate, g.op('Sigmoid', [gate])]);
    const inner = g.op('Mul', [g.op('Add', [gate, g.op('Mul', [g.op('Mul', [g.op('Mul', [gate, gate]), gate]), f32(`${p}.gelu_c`, 0.044715)])]), f32(`${p}.gelu_k`, Math.sqrt(2 / Math.PI))]);
    return g.op('Mul', [g.op('Mul', [gate, f32(`${p}.half`, 0.5)]), g.op('Add', [g.op('Tanh', [inner]), f32(`${p}.gelu_one`, 1)])]);
  };

  const inputIds = g.input('input_ids', 'INT64', ['batch_size', 'sequence_length']);
  const mask = g.input('attention_mask', 'INT64', ['batch_size', 'total_sequence_length']);
  let x = g.op('Gather', [g.initializer('model.embed_tokens.weight', 'FLOAT', [V, D], w.embed), inputIds], { axis: 0 });
  if (w.embedScale !== undefined) x = g.op('Mul', [x, f32('model.embed_scale', w.embedScale)]);
  // seqlens_k = Σ mask − 1 and total_sequence_length = the mask's width, as onnxruntime-genai feeds them.
  const lastAt = g.op('Sub', [g.op('ReduceSum', [mask, i64('mask_axis', [1])], { keepdims: 0 }), i64('one', [1], [])]);
  const width = g.op('Gather', [g.op('Shape', [mask]), i64('mask_width', [1], [])], { axis: 0 });
  const seqlensK = g.op('Cast', [lastAt], { to: 6 });
  const total = g.op('Cast', [width], { to: 6 });
  // RoPE's cos/sin per position and frequency, as GroupQueryAttention's rotary reads them.
  const half = hd / 2;
  const cosCache = new Float32Array(w.context * half), sinCache = new Float32Array(w.context * half);
  for (let t = 0; t < w.context; t++) {
    for (let i = 0; i < half; i++) {
      cosCache[t * half + i] = Math.cos(t * w.invFreq[i]!);
      sinCache[t * half + i] = Math.sin(t * w.invFreq[i]!);
    }
  }
  const cos = g.initializer('rope.cos_cache', 'FLOAT', [w.context, half], cosCache);
  const sin = g.initializer('rope.sin_cache', 'FLOAT', [w.context, half], sinCache);
  const first = w.layers[0]!;
  let h = g.op('SimplifiedLayerNormalization', [x, g.initializer('model.layers.0.input_layernorm.weight', 'FLOAT', [D], first.inputNorm)], { axis: -1, epsilon: eps });
  w.layers.forEach((layer, l) => {
    const p = `model.layers.${l}`;
    const qkv = linear(h, `${p}.self_attn.qkv_proj`, concatLinears([layer.q, layer.k, layer.v]));
    const attn = `${p}.attn`;
    g.node('GroupQueryAttention', [qkv, '', '', `past_key_values.${l}.key`, `past_key_values.${l}.value`, seqlensK, total, cos, sin], [attn, `present.${l}.key`, `present.${l}.value`], {
      num_heads: H, kv_num_heads: KVH, scale: attrFloat(1 / Math.sqrt(hd)), do_rotary: 1, rotary_interleaved: 0,
    }, 'com.microsoft');
    g.input(`past_key_values.${l}.key`, 'FLOAT', ['batch_size', KVH, 'past_sequence_length', hd]);
    g.input(`past_key_values.${l}.value`, 'FLOAT', ['batch_size', KVH, 'past_sequence_length', hd]);
    let h2: string;
    [h2, x] = skipNorm(linear(attn, `${p}.self_attn.o_proj`, layer.o), x, `${p}.post_attention_layernorm`, layer.postNorm);
    const ffn = layer.gate.N;
    const [gate, up] = [`${p}.mlp.gate`, `${p}.mlp.up`];
    g.node('Split', [linear(h2, `${p}.mlp.gate_up_proj`, concatLinears([layer.gate, layer.up])), i64(`${p}.mlp.split`, [ffn, ffn])], [gate, up], { axis: -1 });
    const down = linear(g.op('Mul', [activation(gate, p), up]), `${p}.mlp.down_proj`, layer.down);
    const last = l + 1 === w.layers.length;
    [h, x] = skipNorm(down, x, last ? 'model.norm' : `model.layers.${l + 1}.input_layernorm`, last ? w.finalNorm : w.layers[l + 1]!.inputNorm);
    g.output(`present.${l}.key`, 'FLOAT', ['batch_size', KVH, 'total_sequence_length', hd]);
    g.output(`present.${l}.value`, 'FLOAT', ['batch_size', KVH, 'total_sequence_length', hd]);
  });
  // Logits for each row's last `num_logits_to_keep` tokens only (transformers' input; 0 keeps every
  // position): a step reads one, as llama.cpp computes them, so a prompt's other positions skip the
  // lm_head, which at a 512-token prefill is a fifth of the work (a quarter at a 152k vocabulary) and
  // its logits hundreds of MB; a prefill whose rows want their prompt's log-probabilities keeps all.
  // A row's last token sits at its length − 1 − the past (right padding; a decode's is 0 for every
  // row), and its last K at max(that − K + 1, 0) + j, which for K = the run's length is every position.
  const S = g.op('Gather', [g.op('Shape', [h]), i64('seq_axis', [1], [])], { axis: 0 });
  const at = g.op('Max', [g.op('Sub', [lastAt, g.op('Sub', [width, S])]), i64('zero', [0], [])]);
  const keep = g.op('Unsqueeze', [g.input('num_logits_to_keep', 'INT64', []), i64('keep_axis', [0])]);
  const K = g.op('Min', [g.op('Where', [g.op('Equal', [keep, i64('keep_all', [0])]), S, keep]), S]);
  const start = g.op('Max', [g.op('Add', [g.op('Sub', [at, K]), i64('one_more', [1])]), i64('zero_start', [0])]);
  const span = g.op('Range', [i64('range_start', [0], []), g.op('Squeeze', [K, i64('k_axis', [0])]), i64('range_step', [1], [])]);
  const index = g.op('Add', [g.op('Unsqueeze', [start, i64('start_axis', [1])]), g.op('Unsqueeze', [span, i64('span_axis', [0])])]);
  const kept = g.op('GatherND', [h, g.op('Unsqueeze', [index, i64('index_axis', [2])])], { batch_dims: 1 });
  g.op('Identity', [linear(kept, 'lm_head', w.lmHead)], undefined, 'logits');
  g.output('logits', 'FLOAT', ['batch_size', 'logits_length', V]);
  return encodeModelParts(g.spec(), opts.external ? { location: opts.external } : undefined);
}
