/**
 * A tiny vision-language model in the Idefics3 / SmolVLM layout the onnx-community publishes and
 * transformers.js runs (`Idefics3ForConditionalGeneration`), with seeded random weights:
 *
 *   config.json                 model_type idefics3, image_token_id, text_config (a Llama), vision_config
 *   processor_config.json       image_seq_len (image tokens per frame)
 *   preprocessor_config.json    Idefics3ImageProcessor: rescale, normalize, max_image_size; no resize
 *                               and no splitting (the frame is the image brought to max_image_size)
 *   tokenizer.json, tokenizer_config.json (SmolVLM's chat template), generation_config.json
 *   onnx/vision_encoder.onnx    pixel_values [batch, frames, 3, S, S], pixel_attention_mask → image_features
 *   onnx/embed_tokens.onnx      input_ids → inputs_embeds
 *   onnx/decoder_model_merged.onnx   inputs_embeds, attention_mask, position_ids, past → logits, present
 *
 * The vision encoder is small but of the real kind: the frame cut into patches (a patch is a token),
 * each patch projected, a tanh MLP and a position embedding, out at the text model's width. The
 * decoder is llm-families.ts's Llama taking `inputs_embeds`. The tokenizer is tiny_gpt's byte-level
 * BPE with Idefics3's special tokens added after its vocabulary.
 *
 * Asked for (`variants: ['fp16']`), the `_fp16` files beside them, as fp16 exports are written: the
 * weights stored as float16, the embed table giving float16 `inputs_embeds`, the encoder float16
 * `image_features` (its `pixel_values` float32, as transformers.js hands them; `halfPixels` makes
 * them float16 too), the decoder taking float16 `inputs_embeds` with an fp16 KV cache and logits.
 */

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GraphBuilder, encodeModel, fillUniform } from '../graph/onnx-builder.js';
import { familyConfig, familyModel, tinySpec, toHalf, type FamilySpec } from './llm-families.js';
import { gpt2TokenizerJson } from './llm-model.js';

/** The tokens Idefics3's processor and chat template write, after the BPE's 2048. */
export const VLM_SPECIAL = ['<image>', '<fake_token_around_image>', '<global-img>', '<end_of_utterance>', '<|im_start|>',
  ...Array.from({ length: 16 }, (_, i) => `<row_${Math.floor(i / 4) + 1}_col_${(i % 4) + 1}>`)];

const BPE_VOCAB = 2048;

export interface VlmSpec {
  text: FamilySpec;
  /** Frame side (max_image_size.longest_edge) and patch side: (image / patch)² image tokens a frame. */
  image: number;
  patch: number;
  visionHidden: number;
  seed: number;
}

export function tinyVlmSpec(): VlmSpec {
  const vocab = BPE_VOCAB + VLM_SPECIAL.length;
  const eos = BPE_VOCAB + VLM_SPECIAL.indexOf('<end_of_utterance>');
  return { text: { ...tinySpec('llama', vocab, BPE_VOCAB + 4, eos), seed: 17 }, image: 32, patch: 8, visionHidden: 96, seed: 23 };
}

/** SmolVLM's chat template: content is a list of text and image parts. */
export const SMOLVLM_CHAT_TEMPLATE = "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

/** Image tokens per frame. */
export const imageSeqLen = (spec: VlmSpec): number => (spec.image / spec.patch) ** 2;

/** The vision encoder: frames → patches → projection, tanh MLP, position embedding → [frames, tokens, d]. */
export function visionEncoderModel(spec: VlmSpec, half: { features?: boolean; pixels?: boolean } = {}): Uint8Array {
  const { image: S, patch: P, visionHidden: H } = spec;
  const D = spec.text.dModel;
  const n = S / P, T = n * n, PD = 3 * P * P;
  const g = new GraphBuilder('tiny_vlm_vision', { opset: 17, docString: `tiny Idefics3 vision encoder: ${S}×${S} frames, ${P}×${P} patches → ${T} tokens × ${D}, seed ${spec.seed}` });
  let seed = spec.seed * 1000;
  // Weights drawn in float32; the fp16 file stores them as float16 (cast back for the computation).
  const rand = (name: string, dims: number[], scale: number) => {
    const data = fillUniform(new Float32Array(dims.reduce((a, b) => a * b, 1)), seed++, -scale, scale);
    return half.features ? g.op('Cast', [g.initializer(name, 'FLOAT16', dims, toHalf(data))], { to: 1 }) : g.initializer(name, 'FLOAT', dims, data);
  };
  const i64 = (name: string, values: number[]) => g.initializer(name, 'INT64', [values.length], BigInt64Array.from(values.map(BigInt)));
  const pixelsIn = g.input('pixel_values', half.pixels ? 'FLOAT16' : 'FLOAT', ['batch_size', 'num_images', 3, S, S]);
  const pixels = half.pixels ? g.op('Cast', [pixelsIn], { to: 1 }) : pixelsIn;
  const mask = g.input('pixel_attention_mask', 'BOOL', ['batch_size', 'num_images', S, S]);
  // Padding frames (a batch of unlike frame counts) are zeroed, as the real encoder ignores them.
  const kept = g.op('Mul', [pixels, g.op('Unsqueeze', [g.op('Cast', [mask], { to: 1 }), i64('ax2', [2])])]);
  const patches = g.op('Reshape', [
    g.op('Transpose', [g.op('Reshape', [kept, i64('grid', [-1, 3, n, P, n, P])])], { perm: [0, 2, 4, 1, 3, 5] }),
    i64('tokens', [-1, T, PD]),
  ]);
  const h = g.op('Tanh', [g.op('Add', [g.op('MatMul', [patches, rand('patch_embed.weight', [PD, H], 0.1)]), rand('patch_embed.bias', [H], 0.1)])]);
  const out = g.op('Add', [g.op('MatMul', [h, rand('connector.proj.weight', [H, D], 0.5)]), rand('position_embedding', [T, D], 0.5)]);
  if (half.features) g.op('Cast', [out], { to: 10 }, 'image_features');
  else g.op('Identity', [out], undefined, 'image_features');
  g.output('image_features', half.features ? 'FLOAT16' : 'FLOAT', ['num_frames', T, D]);
  return encodeModel(g.spec());
}

/** The embed-tokens graph: the decoder's table (llm-families.ts draws it first from the text seed). */
export function embedTokensModel(spec: VlmSpec, half = false): Uint8Array {
  const { vocab: V, dModel: D } = spec.text;
  const g = new GraphBuilder('tiny_vlm_embed', { opset: 17, docString: `tiny Idefics3 embed_tokens${half ? ' (fp16)' : ''}: vocab ${V} × ${D}` });
  const ids = g.input('input_ids', 'INT64', ['batch_size', 'sequence_length']);
  const data = fillUniform(new Float32Array(V * D), spec.text.seed * 1000, -1, 1);
  const table = half ? g.initializer('model.embed_tokens.weight', 'FLOAT16', [V, D], toHalf(data)) : g.initializer('model.embed_tokens.weight', 'FLOAT', [V, D], data);
  g.op('Gather', [table, ids], { axis: 0 }, 'inputs_embeds');
  g.output('inputs_embeds', half ? 'FLOAT16' : 'FLOAT', ['batch_size', 'sequence_length', D]);
  return encodeModel(g.spec());
}

/** tiny_gpt's BPE with the special tokens appended as added tokens. */
function vlmTokenizerJson(): string {
  const t = JSON.parse(gpt2TokenizerJson(BPE_VOCAB)) as { added_tokens: unknown[] };
  t.added_tokens.push(...VLM_SPECIAL.map((content, i) => ({ id: BPE_VOCAB + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })));
  return JSON.stringify(t);
}

/** Writes the tiny VLM's folder (the onnx-community layout) into `dir`. */
export async function writeVlmFolder(dir: string, spec: VlmSpec = tinyVlmSpec(), opts: { variants?: 'fp16'[]; halfPixels?: boolean } = {}): Promise<void> {
  await mkdir(join(dir, 'onnx'), { recursive: true });
  const text = familyConfig(spec.text);
  delete text['transformers.js_config'];
  const imageTokenId = BPE_VOCAB + VLM_SPECIAL.indexOf('<image>');
  const config = {
    architectures: ['Idefics3ForConditionalGeneration'], model_type: 'idefics3', image_token_id: imageTokenId, scale_factor: 1,
    vocab_size: spec.text.vocab, text_config: text, torch_dtype: 'float32',
    vision_config: { model_type: 'idefics3_vision', image_size: spec.image, patch_size: spec.patch, hidden_size: spec.visionHidden, num_channels: 3 },
  };
  const files: Record<string, unknown> = {
    'config.json': config,
    'generation_config.json': { bos_token_id: spec.text.bos, eos_token_id: spec.text.eos },
    'processor_config.json': { image_seq_len: imageSeqLen(spec), processor_class: 'Idefics3Processor' },
    'preprocessor_config.json': {
      image_processor_type: 'Idefics3ImageProcessor', processor_class: 'Idefics3Processor',
      do_convert_rgb: true, do_resize: false, size: { longest_edge: spec.image }, resample: 1,
      do_rescale: true, rescale_factor: 1 / 255, do_normalize: true, image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5],
      do_pad: false, do_image_splitting: false, max_image_size: { longest_edge: spec.image },
    },
    'tokenizer_config.json': {
      bos_token: '<|im_start|>', eos_token: '<end_of_utterance>', unk_token: '<|endoftext|>', pad_token: '<|endoftext|>',
      chat_template: SMOLVLM_CHAT_TEMPLATE, model_max_length: spec.text.context, tokenizer_class: 'GPT2Tokenizer',
    },
  };
  for (const [name, body] of Object.entries(files)) await writeFile(join(dir, name), JSON.stringify(body, null, 2));
  await writeFile(join(dir, 'tokenizer.json'), vlmTokenizerJson());
  await writeFile(join(dir, 'onnx', 'vision_encoder.onnx'), visionEncoderModel(spec));
  await writeFile(join(dir, 'onnx', 'embed_tokens.onnx'), embedTokensModel(spec));
  await writeFile(join(dir, 'onnx', 'decoder_model_merged.onnx'), familyModel(spec.text, 'model', { inputsEmbeds: true }).model);
  if (opts.variants?.includes('fp16')) {
    await writeFile(join(dir, 'onnx', 'vision_encoder_fp16.onnx'), visionEncoderModel(spec, { features: true, pixels: opts.halfPixels }));
    await writeFile(join(dir, 'onnx', 'embed_tokens_fp16.onnx'), embedTokensModel(spec, true));
    await writeFile(join(dir, 'onnx', 'decoder_model_merged_fp16.onnx'), familyModel(spec.text, 'model_fp16', { inputsEmbeds: 'float16' }).model);
  }
}
