/**
 * A tiny Whisper with seeded random weights, written as the folder the onnx-community publishes and
 * transformers.js reads (`automatic-speech-recognition`):
 *
 *   config.json  generation_config.json  preprocessor_config.json  tokenizer.json  tokenizer_config.json
 *   onnx/encoder_model.onnx          input_features [batch, mels, 3000] → last_hidden_state [batch, 1500, d]
 *   onnx/decoder_model_merged.onnx   input_ids, encoder_hidden_states, past_key_values.{i}.decoder/encoder.key/value,
 *                                    use_cache_branch → logits, present.{i}.decoder/encoder.key/value
 *
 * The architecture is Whisper's: two convolutions (the second with stride 2) with exact GELU, sinusoidal
 * encoder positions, pre-LayerNorm blocks (k without bias), learned decoder positions read from the
 * cache's length, cross-attention on the encoder's states, and logits tied to the token embedding.
 * Optimum merges the first and later decoder steps with an `If` on `use_cache_branch`; this graph
 * keeps the same inputs and outputs and does it without a subgraph: the cross-attention keys and
 * values are the past ones followed by those computed from `encoder_hidden_states`, cut to zero rows
 * when `use_cache_branch` is true (so later steps may pass an empty `encoder_hidden_states`).
 *
 * The tokenizer is Whisper's layout on a small byte-level BPE: tiny_gpt's (GPT-2's byte alphabet and
 * first merges, GPT-2's ids, as Whisper's English vocabulary is GPT-2's) up to `<|endoftext|>`, then
 * `<|startoftranscript|>`, the 100 language tokens, `<|translate|>`, `<|transcribe|>`,
 * `<|startoflm|>`, `<|startofprev|>`, `<|nospeech|>`, `<|notimestamps|>` and the 1501 timestamp
 * tokens `<|0.00|>` … `<|30.00|>`, in Whisper's order (ids shifted down with the smaller vocabulary).
 */

import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GraphBuilder, encodeModelParts, fillUniform } from '../graph/onnx-builder.js';

/** Whisper's language codes in token order (large-v3 adds yue). */
export const WHISPER_LANGUAGES = [
  'en', 'zh', 'de', 'es', 'ru', 'ko', 'fr', 'ja', 'pt', 'tr', 'pl', 'ca', 'nl', 'ar', 'sv', 'it', 'id', 'hi', 'fi', 'vi',
  'he', 'uk', 'el', 'ms', 'cs', 'ro', 'da', 'hu', 'ta', 'no', 'th', 'ur', 'hr', 'bg', 'lt', 'la', 'mi', 'ml', 'cy', 'sk',
  'te', 'fa', 'lv', 'bn', 'sr', 'az', 'sl', 'kn', 'et', 'mk', 'br', 'eu', 'is', 'hy', 'ne', 'mn', 'bs', 'kk', 'sq', 'sw',
  'gl', 'mr', 'pa', 'si', 'km', 'sn', 'yo', 'so', 'af', 'oc', 'ka', 'be', 'tg', 'sd', 'gu', 'am', 'yi', 'lo', 'uz', 'fo',
  'ht', 'ps', 'tk', 'nn', 'mt', 'sa', 'lb', 'my', 'bo', 'tl', 'mg', 'as', 'tt', 'haw', 'ln', 'ha', 'ba', 'jw', 'su', 'yue',
];

export interface WhisperSpec {
  mels: number;
  dModel: number;
  heads: number;
  encoderLayers: number;
  decoderLayers: number;
  ffn: number;
  /** Decoder positions: the longest prompt plus output of one window. */
  targetPositions: number;
  seed: number;
}

export const TINY_WHISPER: WhisperSpec = { mels: 80, dModel: 64, heads: 4, encoderLayers: 2, decoderLayers: 2, ffn: 128, targetPositions: 64, seed: 31 };

const SOURCE_POSITIONS = 1500;

/** The special tokens' ids for a text vocabulary whose `<|endoftext|>` is `eot`. */
export function whisperIds(eot: number) {
  const sot = eot + 1;
  const lang0 = sot + 1;
  const translate = lang0 + WHISPER_LANGUAGES.length;
  return {
    eot, sot, lang0, translate, transcribe: translate + 1, startoflm: translate + 2, startofprev: translate + 3,
    nospeech: translate + 4, notimestamps: translate + 5, timestamp0: translate + 6, vocab: translate + 6 + 1501,
  };
}

/** The Whisper tokenizer.json built on tiny_gpt's byte-level BPE (`gpt2Json`, its `<|endoftext|>` last). */
export function whisperTokenizerJson(gpt2Json: string): { json: string; ids: ReturnType<typeof whisperIds> } {
  const tok = JSON.parse(gpt2Json) as { added_tokens: { id: number; content: string }[]; model: { vocab: Record<string, number> }; post_processor: unknown };
  const eot = tok.model.vocab['<|endoftext|>']!;
  const ids = whisperIds(eot);
  const added = (id: number, content: string, special = true) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special });
  const names: [number, string, boolean][] = [
    [ids.eot, '<|endoftext|>', true], [ids.sot, '<|startoftranscript|>', true],
    ...WHISPER_LANGUAGES.map((l, i): [number, string, boolean] => [ids.lang0 + i, `<|${l}|>`, true]),
    [ids.translate, '<|translate|>', true], [ids.transcribe, '<|transcribe|>', true], [ids.startoflm, '<|startoflm|>', true],
    [ids.startofprev, '<|startofprev|>', true], [ids.nospeech, '<|nospeech|>', true], [ids.notimestamps, '<|notimestamps|>', true],
  ];
  for (let i = 0; i <= 1500; i++) names.push([ids.timestamp0 + i, `<|${(i * 0.02).toFixed(2)}|>`, false]);
  tok.added_tokens = names.map(([id, c, s]) => added(id, c, s));
  for (const [id, c] of names) tok.model.vocab[c] = id;
  // Whisper's post-processor adds <|startoftranscript|> and <|notimestamps|>; the ASR path never uses it.
  tok.post_processor = { type: 'TemplateProcessing', single: [{ Sequence: { id: 'A', type_id: 0 } }], pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 0 } }], special_tokens: {} };
  return { json: JSON.stringify(tok), ids };
}

function builders(g: GraphBuilder, seed0: number) {
  let seed = seed0;
  const rand = (n: number, scale: number) => fillUniform(new Float32Array(n), seed++, -scale, scale);
  const i64 = (values: number[], dims = [values.length]) => g.initializer(`c${seed++}`, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const f32 = (v: number) => g.initializer(`f${seed++}`, 'FLOAT', [], Float32Array.of(v));
  const weight = (name: string, dims: number[], scale: number) => g.initializer(name, 'FLOAT', dims, rand(dims.reduce((a, b) => a * b, 1), scale));
  const linear = (x: string, name: string, K: number, N: number, scale: number, bias = true) => {
    const y = g.op('MatMul', [x, weight(`${name}.weight`, [K, N], scale)]);
    return bias ? g.op('Add', [y, weight(`${name}.bias`, [N], 0.1)]) : y;
  };
  const layerNorm = (x: string, name: string, D: number) =>
    g.op('LayerNormalization', [x, g.initializer(`${name}.weight`, 'FLOAT', [D], fillUniform(new Float32Array(D), seed++, 0.8, 1.2)), weight(`${name}.bias`, [D], 0.05)], { axis: -1, epsilon: 1e-5 });
  const gelu = (x: string) => g.op('Mul', [g.op('Mul', [x, f32(0.5)]), g.op('Add', [g.op('Erf', [g.op('Mul', [x, f32(Math.SQRT1_2)])]), f32(1)])]);
  return { rand, i64, f32, weight, linear, layerNorm, gelu };
}

/** The encoder graph: log-mel features to the encoder's hidden states. */
export function whisperEncoder(spec: WhisperSpec = TINY_WHISPER): Uint8Array {
  const { mels, dModel: D, heads: H, ffn } = spec;
  const hd = D / H;
  const g = new GraphBuilder('tiny_whisper_encoder', { opset: 17, docString: `Whisper encoder: ${spec.encoderLayers} layers, d=${D}, ${H} heads, ${mels} mels, seed ${spec.seed}` });
  const b = builders(g, spec.seed * 1000);
  const features = g.input('input_features', 'FLOAT', ['batch_size', mels, 3000]);
  let x = b.gelu(g.op('Conv', [features, b.weight('conv1.weight', [D, mels, 3], 0.15), b.weight('conv1.bias', [D], 0.1)], { pads: [1, 1], kernel_shape: [3] }));
  x = b.gelu(g.op('Conv', [x, b.weight('conv2.weight', [D, D, 3], 0.15), b.weight('conv2.bias', [D], 0.1)], { pads: [1, 1], kernel_shape: [3], strides: [2] }));
  // Whisper's sinusoidal positions: sin over the first half of the channels, cos over the second.
  const pos = new Float32Array(SOURCE_POSITIONS * D);
  const half = D / 2;
  for (let p = 0; p < SOURCE_POSITIONS; p++) {
    for (let i = 0; i < half; i++) {
      const t = p * Math.exp((-Math.log(10000) / (half - 1)) * i);
      pos[p * D + i] = Math.sin(t);
      pos[p * D + half + i] = Math.cos(t);
    }
  }
  x = g.op('Add', [g.op('Transpose', [x], { perm: [0, 2, 1] }), g.initializer('embed_positions.weight', 'FLOAT', [SOURCE_POSITIONS, D], pos)]);
  const toHeads = (t: string) => g.op('Transpose', [g.op('Reshape', [t, b.i64([0, 0, H, hd])])], { perm: [0, 2, 1, 3] });
  const merge = (t: string) => g.op('Reshape', [g.op('Transpose', [t], { perm: [0, 2, 1, 3] }), b.i64([0, 0, D])]);
  for (let l = 0; l < spec.encoderLayers; l++) {
    const p = `layers.${l}`;
    const h = b.layerNorm(x, `${p}.self_attn_layer_norm`, D);
    const q = toHeads(g.op('Mul', [b.linear(h, `${p}.self_attn.q_proj`, D, D, 0.3), b.f32(1 / Math.sqrt(hd))]));
    const k = toHeads(b.linear(h, `${p}.self_attn.k_proj`, D, D, 0.3, false));
    const v = toHeads(b.linear(h, `${p}.self_attn.v_proj`, D, D, 0.3));
    const probs = g.op('Softmax', [g.op('MatMul', [q, g.op('Transpose', [k], { perm: [0, 1, 3, 2] })])], { axis: -1 });
    x = g.op('Add', [x, b.linear(merge(g.op('MatMul', [probs, v])), `${p}.self_attn.out_proj`, D, D, 0.3)]);
    const h2 = b.layerNorm(x, `${p}.final_layer_norm`, D);
    x = g.op('Add', [x, b.linear(b.gelu(b.linear(h2, `${p}.fc1`, D, ffn, 0.3)), `${p}.fc2`, ffn, D, 0.2)]);
  }
  g.op('Identity', [b.layerNorm(x, 'layer_norm', D)], undefined, 'last_hidden_state');
  g.output('last_hidden_state', 'FLOAT', ['batch_size', SOURCE_POSITIONS, D]);
  return g.encode();
}

/** The merged decoder graph (first step and steps with past in one, chosen by `use_cache_branch`). */
export function whisperDecoder(spec: WhisperSpec, vocab: number, eot: number): Uint8Array {
  const { dModel: D, heads: H, ffn } = spec;
  const hd = D / H;
  const g = new GraphBuilder('tiny_whisper_decoder', { opset: 17, docString: `Whisper merged decoder: ${spec.decoderLayers} layers, d=${D}, ${H} heads, vocab ${vocab}, seed ${spec.seed}` });
  const b = builders(g, spec.seed * 1000 + 500);
  const ids = g.input('input_ids', 'INT64', ['batch_size', 'decoder_sequence_length']);
  const enc = g.input('encoder_hidden_states', 'FLOAT', ['batch_size', 'encoder_sequence_length', D]);
  const pastShape = ['batch_size', H, 'past_decoder_sequence_length', hd];
  const encShape = ['batch_size', H, 'encoder_sequence_length_out', hd];
  const past = Array.from({ length: spec.decoderLayers }, (_, l) => ({
    k: g.input(`past_key_values.${l}.decoder.key`, 'FLOAT', pastShape),
    v: g.input(`past_key_values.${l}.decoder.value`, 'FLOAT', pastShape),
    ek: g.input(`past_key_values.${l}.encoder.key`, 'FLOAT', encShape),
    ev: g.input(`past_key_values.${l}.encoder.value`, 'FLOAT', encShape),
  }));
  const useCache = g.input('use_cache_branch', 'BOOL', [1]);
  const embed = b.rand(vocab * D, 1);
  const embedW = g.initializer('embed_tokens.weight', 'FLOAT', [vocab, D], embed);
  const shapeAt = (t: string, axis: number) => g.op('Gather', [g.op('Shape', [t]), b.i64([axis])], { axis: 0 });
  const pastLen = shapeAt(past[0]!.k, 2);
  const newLen = shapeAt(ids, 1);
  const total = g.op('Add', [pastLen, newLen]);
  const positions = g.op('Slice', [b.weight('embed_positions.weight', [spec.targetPositions, D], 0.3), pastLen, total, b.i64([0])]);
  let x = g.op('Add', [g.op('Gather', [embedW, ids], { axis: 0 }), positions]);
  // Causal: query i (at pastLen + i) sees keys 0 … pastLen + i.
  const scalar = (t: string) => g.op('Squeeze', [t, b.i64([0])]);
  const kpos = g.op('Range', [b.i64([0], []), scalar(total), b.i64([1], [])]);
  const qpos = g.op('Unsqueeze', [g.op('Range', [scalar(pastLen), scalar(total), b.i64([1], [])]), b.i64([1])]);
  const allowed = g.op('LessOrEqual', [kpos, qpos]);
  const neg = b.f32(-1e9);
  // Rows of the freshly computed cross-attention states to keep: all on the first step, none after.
  const keep = g.op('Mul', [shapeAt(enc, 1), g.op('Cast', [g.op('Not', [useCache])], { to: 7 })]);
  const toHeads = (t: string) => g.op('Transpose', [g.op('Reshape', [t, b.i64([0, 0, H, hd])])], { perm: [0, 2, 1, 3] });
  const merge = (t: string) => g.op('Reshape', [g.op('Transpose', [t], { perm: [0, 2, 1, 3] }), b.i64([0, 0, D])]);
  const attend = (q: string, k: string, v: string, masked: boolean) => {
    let s = g.op('MatMul', [q, g.op('Transpose', [k], { perm: [0, 1, 3, 2] })]);
    if (masked) s = g.op('Where', [allowed, s, neg]);
    return merge(g.op('MatMul', [g.op('Softmax', [s], { axis: -1 }), v]));
  };
  const scale = b.f32(1 / Math.sqrt(hd));
  for (let l = 0; l < spec.decoderLayers; l++) {
    const p = `layers.${l}`;
    const pk = past[l]!;
    const h = b.layerNorm(x, `${p}.self_attn_layer_norm`, D);
    const q = toHeads(g.op('Mul', [b.linear(h, `${p}.self_attn.q_proj`, D, D, 0.3), scale]));
    const k = g.op('Concat', [pk.k, toHeads(b.linear(h, `${p}.self_attn.k_proj`, D, D, 0.3, false))], { axis: 2 }, `present.${l}.decoder.key`);
    const v = g.op('Concat', [pk.v, toHeads(b.linear(h, `${p}.self_attn.v_proj`, D, D, 0.3))], { axis: 2 }, `present.${l}.decoder.value`);
    x = g.op('Add', [x, b.linear(attend(q, k, v, true), `${p}.self_attn.out_proj`, D, D, 0.3)]);
    const hc = b.layerNorm(x, `${p}.encoder_attn_layer_norm`, D);
    const qc = toHeads(g.op('Mul', [b.linear(hc, `${p}.encoder_attn.q_proj`, D, D, 0.3), scale]));
    const fresh = (t: string) => g.op('Slice', [t, b.i64([0]), keep, b.i64([2])]);
    const kc = g.op('Concat', [pk.ek, fresh(toHeads(b.linear(enc, `${p}.encoder_attn.k_proj`, D, D, 0.3, false)))], { axis: 2 }, `present.${l}.encoder.key`);
    const vc = g.op('Concat', [pk.ev, fresh(toHeads(b.linear(enc, `${p}.encoder_attn.v_proj`, D, D, 0.3)))], { axis: 2 }, `present.${l}.encoder.value`);
    x = g.op('Add', [x, b.linear(attend(qc, kc, vc, false), `${p}.encoder_attn.out_proj`, D, D, 0.3)]);
    const h2 = b.layerNorm(x, `${p}.final_layer_norm`, D);
    x = g.op('Add', [x, b.linear(b.gelu(b.linear(h2, `${p}.fc1`, D, ffn, 0.3)), `${p}.fc2`, ffn, D, 0.2)]);
    g.output(`present.${l}.decoder.key`, 'FLOAT', ['batch_size', H, 'past_decoder_sequence_length + 1', hd]);
    g.output(`present.${l}.decoder.value`, 'FLOAT', ['batch_size', H, 'past_decoder_sequence_length + 1', hd]);
    g.output(`present.${l}.encoder.key`, 'FLOAT', ['batch_size', H, 'encoder_sequence_length_out', hd]);
    g.output(`present.${l}.encoder.value`, 'FLOAT', ['batch_size', H, 'encoder_sequence_length_out', hd]);
  }
  const last = b.layerNorm(x, 'layer_norm', D);
  // Tied output: the embedding table, transposed.
  const t = new Float32Array(D * vocab);
  for (let v = 0; v < vocab; v++) for (let d = 0; d < D; d++) t[d * vocab + v] = embed[v * D + d]!;
  const logits = g.op('MatMul', [last, g.initializer('proj_out.weight', 'FLOAT', [D, vocab], t)]);
  // Not Whisper's: <|endoftext|>'s logit grows with the position, so the random model's transcripts
  // end after a few dozen tokens, as a trained model's do, instead of always running to max_length.
  const eotRow = new Float32Array(vocab);
  eotRow[eot] = 1;
  const ramp = g.op('Mul', [g.op('Cast', [qpos], { to: 1 }), b.f32(0.8)]);
  g.op('Add', [logits, g.op('Mul', [ramp, g.initializer('eot_bias', 'FLOAT', [vocab], eotRow)])], undefined, 'logits');
  g.output('logits', 'FLOAT', ['batch_size', 'decoder_sequence_length', vocab]);
  return encodeModelParts(g.spec()).model;
}

/** config.json, generation_config.json, preprocessor_config.json and tokenizer_config.json of `spec`. */
export function whisperConfigs(spec: WhisperSpec, ids: ReturnType<typeof whisperIds>): Record<string, unknown> {
  const lang_to_id = Object.fromEntries(WHISPER_LANGUAGES.map((l, i) => [`<|${l}|>`, ids.lang0 + i]));
  return {
    'config.json': {
      architectures: ['WhisperForConditionalGeneration'], model_type: 'whisper', is_encoder_decoder: true,
      vocab_size: ids.vocab, num_mel_bins: spec.mels, d_model: spec.dModel,
      encoder_layers: spec.encoderLayers, decoder_layers: spec.decoderLayers, encoder_attention_heads: spec.heads, decoder_attention_heads: spec.heads,
      encoder_ffn_dim: spec.ffn, decoder_ffn_dim: spec.ffn, max_source_positions: SOURCE_POSITIONS, max_target_positions: spec.targetPositions,
      activation_function: 'gelu', scale_embedding: false, tie_word_embeddings: true,
      bos_token_id: ids.eot, eos_token_id: ids.eot, pad_token_id: ids.eot, decoder_start_token_id: ids.sot,
      begin_suppress_tokens: [220, ids.eot], suppress_tokens: [],
    },
    'generation_config.json': {
      bos_token_id: ids.eot, eos_token_id: ids.eot, pad_token_id: ids.eot, decoder_start_token_id: ids.sot,
      max_length: spec.targetPositions, is_multilingual: true, lang_to_id,
      task_to_id: { translate: ids.translate, transcribe: ids.transcribe },
      no_timestamps_token_id: ids.notimestamps, prev_sot_token_id: ids.startofprev, max_initial_timestamp_index: 50,
      begin_suppress_tokens: [220, ids.eot],
      // Whisper suppresses symbols such as these; a few, so the processor is exercised.
      suppress_tokens: [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93],
      forced_decoder_ids: [[1, null], [2, ids.transcribe]],
    },
    'preprocessor_config.json': {
      feature_extractor_type: 'WhisperFeatureExtractor', feature_size: spec.mels, sampling_rate: 16000, hop_length: 160,
      n_fft: 400, chunk_length: 30, n_samples: 480000, nb_max_frames: 3000, padding_side: 'right', padding_value: 0,
      return_attention_mask: false, processor_class: 'WhisperProcessor',
    },
    'tokenizer_config.json': {
      tokenizer_class: 'WhisperTokenizer', bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>',
      pad_token: '<|endoftext|>', model_max_length: 1024, clean_up_tokenization_spaces: true, errors: 'replace',
    },
  };
}

/** Writes the tiny Whisper folder into `dir` (a model version folder), its tokenizer built on `gpt2TokenizerPath`. */
export async function writeWhisperFolder(dir: string, gpt2TokenizerPath: string, spec: WhisperSpec = TINY_WHISPER): Promise<void> {
  const { json, ids } = whisperTokenizerJson(readFileSync(gpt2TokenizerPath, 'utf8'));
  await mkdir(join(dir, 'onnx'), { recursive: true });
  await writeFile(join(dir, 'tokenizer.json'), json);
  for (const [name, body] of Object.entries(whisperConfigs(spec, ids))) await writeFile(join(dir, name), JSON.stringify(body, null, 2));
  await writeFile(join(dir, 'onnx', 'encoder_model.onnx'), whisperEncoder(spec));
  await writeFile(join(dir, 'onnx', 'decoder_model_merged.onnx'), whisperDecoder(spec, ids.vocab, ids.eot));
}
