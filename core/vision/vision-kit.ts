/**
 * Image features into a decoder that takes embeddings: the part of a vision-language decoder session
 * that is the same on every runtime. It wraps a session's TensorKit (kv-batch.ts) so that KvBatch,
 * the prefix cache and the batching see only token ids, as for a text model: a prompt's image tokens
 * are ids `key + k` above the vocabulary (image-input.ts), and at each run the wrapper turns
 * `input_ids` into `inputs_embeds` — the embed-tokens graph for ordinary ids, the vision encoder's
 * features for image ids — as transformers.js's merge does (`default_merge_input_ids_with_features`:
 * the k-th image token takes the k-th feature row). Text-only rows in the same batch pass through the
 * same embed run, so they batch with image rows.
 *
 * Float16 graphs (`_fp16`, `q4f16` files) are served by converting at the edges: the embed and
 * encoder outputs (float32, or float16 as its bits) are read as float32, the features spliced, and
 * `inputs_embeds` (and `pixel_values`) handed over in the type the graph takes, rounded to nearest
 * even as onnxruntime's Cast does. A half that went through float32 comes back the same, so an fp16
 * folder's decoder sees what transformers.js hands it.
 *
 * Features are computed when a run first needs them, from the pixels a prefill row brought
 * (`ImageBank.offer`; pixels a step did not need are dropped with `stepDone`), and kept for a few images (a prefix-cache miss on part of an image, n > 1
 * forks and a request's retry reuse them). One bank per session; not shared across threads.
 */

import { TsiError } from '../errors.js';
import type { TensorKit } from '../llm/kv-batch.js';
import { halfToFloat } from '../llm/step-rows.js';
import { IMAGE_KEY_BASE, IMAGE_KEY_SPAN, type ImageInput } from './image-input.js';

/** Float data as a runtime hands it: float32, or float16 as its IEEE bits. */
export type Floats = Float32Array | Uint16Array;

/** What a runtime runs for the wrapper: its two extra graphs, and tensors it cannot make through the kit. */
export interface VisionRunner<T> {
  /** `embed_tokens`: ids [B, S] → [B, S, hidden] in the graph's output type. */
  embed(ids: BigInt64Array, dims: number[]): Promise<Floats>;
  /** `vision_encoder`: pixel_values [1, frames, 3, L, L] (and an all-true pixel_attention_mask) → [frames × tokens, hidden]. */
  encode(pixels: Floats, dims: number[]): Promise<Floats>;
  /** A float tensor for `inputs_embeds`: float32, or float16 from a Uint16Array's bits. */
  floats(data: Floats, dims: number[]): T;
  /** The int64 data of a tensor the kit made. */
  ids(t: T): BigInt64Array;
}

/** The float types the graphs take (core reads them from the graphs when the model loads). */
export interface VisionTypes {
  /** The vision encoder's `pixel_values`. */
  pixels: 'float32' | 'float16';
  /** The decoder's `inputs_embeds`. */
  inputsEmbeds: 'float32' | 'float16';
}

/** float32 values of float32 or half data (float32 data as it is). */
export function floatsOf(data: Floats): Float32Array {
  if (data instanceof Float32Array) return data;
  const out = new Float32Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = halfToFloat(data[i]!);
  return out;
}

/** float32 values to IEEE half bits, rounded to nearest even (overflow to infinity). */
export function halfBitsOf(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  const u = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const x = u[i]!;
    const sign = (x >>> 16) & 0x8000;
    const exp = (x >>> 23) & 0xff;
    const man = x & 0x7fffff;
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (man ? 0x200 : 0);
      continue;
    }
    const e = exp - 127 + 15;
    if (e >= 31) {
      out[i] = sign | 0x7c00;
      continue;
    }
    // The significand with its implicit bit, and how far it shifts right to land in 10 bits.
    const full = man | 0x800000;
    const shift = e <= 0 ? 14 - e : 13;
    if (shift > 24) {
      out[i] = sign;
      continue;
    }
    let h = full >>> shift;
    const rest = full & ((1 << shift) - 1), halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (h & 1))) h++;
    // Normal numbers carry their exponent; a rounding carry into the exponent field is what IEEE wants.
    out[i] = sign | (e <= 0 ? h : ((e << 10) + (h - 0x400)));
  }
  return out;
}

const KEPT = 16;

/** Pixels offered by prefill rows, and features computed, by image key. */
export class ImageBank {
  private readonly offered = new Map<number, ImageInput>();
  private readonly features = new Map<number, Float32Array>();

  /** A prefill's rows' images (before the step that may need them). */
  offer(images: readonly ImageInput[] | undefined): void {
    for (const img of images ?? []) if (!this.features.has(img.key)) this.offered.set(img.key, img);
  }

  async featuresOf(key: number, runner: VisionRunner<unknown>, pixelType: VisionTypes['pixels'] = 'float32'): Promise<Float32Array> {
    let f = this.features.get(key);
    if (f) {
      // Most recently used last.
      this.features.delete(key);
      this.features.set(key, f);
      return f;
    }
    const img = this.offered.get(key);
    if (!img) throw new TsiError('INTERNAL', 'an image token came without its image');
    f = floatsOf(await runner.encode(pixelType === 'float16' ? halfBitsOf(img.pixels) : img.pixels, img.dims));
    this.offered.delete(key);
    this.features.set(key, f);
    while (this.features.size > KEPT) this.features.delete(this.features.keys().next().value!);
    return f;
  }

  /** The step the offers were for is over: pixels it did not need (its image came from the prefix cache) are dropped. */
  stepDone(): void {
    this.offered.clear();
  }
}

/** The image an id belongs to and its token index there, or undefined for a vocabulary id. */
export function imageTokenOf(id: number): { key: number; k: number } | undefined {
  if (id < IMAGE_KEY_BASE) return undefined;
  const k = (id - IMAGE_KEY_BASE) % IMAGE_KEY_SPAN;
  return { key: id - k, k };
}

/**
 * The prompt's ids with each image's tokens (runs of `tokenId`, in order) written as its key ids;
 * refused when the prompt holds a different number of image tokens than the images take.
 */
export function imagePromptIds(ids: readonly number[], images: readonly ImageInput[]): number[] {
  const out = [...ids];
  let img = 0, k = 0;
  for (let i = 0; i < out.length; i++) {
    const cur = images[img];
    if (!cur || out[i] !== cur.tokenId) continue;
    out[i] = cur.key + k;
    if (++k === cur.tokens) {
      img++;
      k = 0;
    }
  }
  const want = images.reduce((n, m) => n + m.tokens, 0);
  const have = ids.filter((id) => id === images[0]?.tokenId).length;
  if (img !== images.length || have !== want) throw new TsiError('INVALID_ARG', `the prompt holds ${have} image tokens where its ${images.length} image(s) take ${want} (a text part may not write the image token itself)`);
  return out;
}

/** `kit` with `input_ids` fed as `inputs_embeds` (see the file comment). */
export function visionKit<T>(kit: TensorKit<T>, runner: VisionRunner<T>, bank: ImageBank, names: { inputIds: string; inputsEmbeds: string; imageTokenId: number; types: VisionTypes }): TensorKit<T> {
  return {
    ...kit,
    run: async (feeds, fetches) => {
      const idsT = feeds[names.inputIds];
      if (idsT === undefined) return kit.run(feeds, fetches);
      const ids = runner.ids(idsT);
      const dims = [...kit.dims(idsT)];
      const plain = new BigInt64Array(ids.length);
      const images: { at: number; key: number; k: number }[] = [];
      for (let i = 0; i < ids.length; i++) {
        const img = imageTokenOf(Number(ids[i]));
        if (img) images.push({ at: i, ...img });
        plain[i] = img ? BigInt(names.imageTokenId) : ids[i]!;
      }
      const embeds = floatsOf(await runner.embed(plain, dims));
      const hidden = embeds.length / ids.length;
      for (const { at, key, k } of images) {
        const f = await bank.featuresOf(key, runner as VisionRunner<unknown>, names.types.pixels);
        if ((k + 1) * hidden > f.length) throw new TsiError('INTERNAL', `the vision encoder gave ${f.length / hidden} image features, fewer than the prompt's image tokens`);
        embeds.set(f.subarray(k * hidden, (k + 1) * hidden), at * hidden);
      }
      const rest = { ...feeds };
      delete rest[names.inputIds];
      rest[names.inputsEmbeds] = runner.floats(names.types.inputsEmbeds === 'float16' ? halfBitsOf(embeds) : embeds, [...dims, hidden]);
      return kit.run(rest, fetches);
    },
  };
}
