/**
 * Idefics3 / SmolVLM, the vision-language family tsi serves: the onnx-community folder read, and the
 * image processor and prompt expansion done as transformers.js's `Idefics3ImageProcessor` and
 * `Idefics3Processor` do them, so a served folder sees the pixels and tokens transformers.js gives it.
 *
 * Why this family: transformers.js runs it as three graphs (vision_encoder, embed_tokens,
 * decoder_model_merged) whose decoder is a plain Llama with a KV cache, so tsi's engine, batching and
 * prefix cache serve it unchanged once the decoder is fed embeddings; its image tokens are one id
 * repeated (positions are ordinary 1-D ones: no Qwen2-VL M-RoPE grid to compute); and its processor is
 * a few steps that can be matched exactly: RGB; with `do_resize` the 8-bit image brought to
 * `size.longest_edge` by sharp's Lanczos (vips-resize.ts); rescale, normalise (in that order,
 * float32); then onnxruntime's bilinear `Resize` (half_pixel) to the frame side, or, with
 * `do_image_splitting`, to a multiple of it cut into frames plus the whole image as a last frame.
 */

import type { ModelFiles } from '../backend.js';
import type { ModelConfig } from '../config/model-config.js';
import { TsiError } from '../errors.js';
import { decodeString } from '../tensor.js';
import { decodeImage, type DecodedImage } from './image-decode.js';
import { resizeLanczos3 } from './vips-resize.js';
import { IMAGE_KEY_BASE, IMAGE_KEY_SPAN, type ImageProcessor, type PreparedImage } from './image-input.js';

type Json = Record<string, any>;

/** The three graphs of a vision-language folder (paths in the model's files). */
export interface VisionPaths {
  decoder: string;
  embed: string;
  encoder: string;
}

const GRAPHS = { decoder: 'decoder_model_merged', embed: 'embed_tokens', encoder: 'vision_encoder' } as const;
const FAMILIES = ['idefics3', 'smolvlm'];

async function json(files: ModelFiles, path: string): Promise<Json | undefined> {
  if (!(await files.exists(path))) return undefined;
  try {
    return JSON.parse(decodeString(await files.read(path))) as Json;
  } catch (err) {
    throw new TsiError('INVALID_ARG', `'${path}' is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * The folder's vision-language graphs and processor, or undefined when it is a text-only folder
 * (no `onnx/vision_encoder*.onnx`). `variant` (config parameter) picks the files' suffix: `fp16`,
 * `q4`, `quantized`… (`model_q4` reads as `q4`); default the fp32 files.
 */
export async function readVisionFolder(files: ModelFiles, dir: string, config: ModelConfig): Promise<{ paths: VisionPaths; processor: Idefics3Processor } | undefined> {
  // Listed, not exists(): the page's sources answer exists() for files alone.
  if (!(await files.list(dir)).some((e) => e.isDir && e.name === 'onnx')) return undefined;
  const names = (await files.list(`${dir}/onnx`).catch(() => [])).map((e) => e.name);
  if (!names.some((n) => n.startsWith(`${GRAPHS.encoder}`) && n.endsWith('.onnx'))) return undefined;
  const name = config.name ?? '';
  const hf = (await json(files, `${dir}/config.json`)) ?? {};
  if (!FAMILIES.includes(hf.model_type)) {
    throw new TsiError('INVALID_ARG', `model '${name}': a vision-language folder of model_type '${hf.model_type}'; tsi serves ${FAMILIES.join(' and ')} (SmolVLM / Idefics3) folders`);
  }
  const raw = config.parameters?.variant?.string_value?.trim() ?? '';
  const variant = raw.replace(/^model_?/, '');
  const suffix = variant && variant !== 'fp32' ? `_${variant}` : '';
  const paths = Object.fromEntries(Object.entries(GRAPHS).map(([k, base]) => [k, `${dir}/onnx/${base}${suffix}.onnx`])) as unknown as VisionPaths;
  for (const p of Object.values(paths)) {
    if (!(await files.exists(p))) throw new TsiError('INVALID_ARG', `model '${name}': '${p}' is missing (variant '${raw || 'fp32'}'; onnx/ holds ${names.join(', ')})`);
  }
  const pre = await json(files, `${dir}/preprocessor_config.json`);
  const proc = await json(files, `${dir}/processor_config.json`);
  if (!pre) throw new TsiError('INVALID_ARG', `model '${name}': a vision-language folder needs preprocessor_config.json`);
  return { paths, processor: new Idefics3Processor(pre, proc ?? {}, hf, name) };
}

/** The Idefics3 processor: images to pixel_values, and the prompt's `<image>` expanded. */
export class Idefics3Processor implements ImageProcessor {
  readonly imageToken = '<image>';
  readonly imageTokenId: number;
  private readonly seqLen: number;
  private readonly side: number;

  constructor(private readonly pre: Json, proc: Json, hf: Json, private readonly model: string) {
    this.imageTokenId = hf.image_token_id ?? hf.image_token_index;
    this.seqLen = proc.image_seq_len ?? pre.image_seq_len;
    this.side = pre.max_image_size?.longest_edge;
    if (typeof this.imageTokenId !== 'number') throw new TsiError('INVALID_ARG', `model '${model}': config.json has no image_token_id`);
    if (!Number.isInteger(this.seqLen) || this.seqLen <= 0) throw new TsiError('INVALID_ARG', `model '${model}': processor_config.json has no image_seq_len`);
    if (!Number.isInteger(this.side) || this.side <= 0) throw new TsiError('INVALID_ARG', `model '${model}': preprocessor_config.json has no max_image_size.longest_edge`);
  }

  /**
   * Where the pixel step (decode, resize, normalise, split: seconds of CPU for a phone photo) runs:
   * this thread unless the runtime gives another (runtime-node: a worker pool, so the thread that
   * reads requests keeps answering). Set once, before the model serves.
   */
  runPixels: PixelRunner = idefics3Pixels;

  /** An image's bytes (PNG or JPEG) made ready for the model; `what` names the request's part in refusals. */
  async prepare(bytes: Uint8Array, what: string): Promise<PreparedImage> {
    // Hashed before the job: a runner may take the bytes away (transferred to another thread).
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
    const { pixels, frames, rows, cols } = await this.runPixels({ pre: this.pre, side: this.side, bytes, what });
    const tokens = frames * this.seqLen;
    if (tokens >= IMAGE_KEY_SPAN) throw new TsiError('INVALID_ARG', `${what}: the image takes ${tokens} image tokens, more than ${IMAGE_KEY_SPAN - 1}`);
    // 39 bits of the hash: key + span stays an exact integer in a double.
    const h = (digest[0]! * 2 ** 31 + digest[1]! * 2 ** 23 + digest[2]! * 2 ** 15 + digest[3]! * 2 ** 7 + (digest[4]! >> 1));
    return { key: IMAGE_KEY_BASE + h * IMAGE_KEY_SPAN, tokenId: this.imageTokenId, tokens, pixels, dims: [1, frames, 3, this.side, this.side], rows, cols };
  }

  /** pixel_values of a decoded image (pixelValuesOf with this processor's settings). */
  pixelValues(img: DecodedImage, what = 'the image'): PixelValues {
    return pixelValuesOf(this.pre, this.side, img, what);
  }

  /** The prompt with each `<image>` replaced by the image's tokens, as Idefics3Processor writes them. */
  expandPrompt(text: string, images: readonly { rows: number; cols: number; tokens: number }[]): string {
    const parts = text.split(this.imageToken);
    if (parts.length - 1 !== images.length) {
      throw new TsiError('INVALID_ARG', `model '${this.model}': the chat template wrote ${parts.length - 1} '${this.imageToken}' for ${images.length} image(s) (the text parts may not contain '${this.imageToken}')`);
    }
    const fake = '<fake_token_around_image>', global = '<global-img>';
    const run = this.imageToken.repeat(this.seqLen);
    let out = parts[0]!;
    images.forEach((img, j) => {
      let s = '';
      if (img.rows === 0 && img.cols === 0) s = `${fake}${global}${run}${fake}`;
      else {
        for (let r = 0; r < img.rows; r++) {
          for (let c = 0; c < img.cols; c++) s += `${fake}<row_${r + 1}_col_${c + 1}>${run}`;
          s += '\n';
        }
        s += `\n${fake}${global}${run}${fake}`;
      }
      out += s + parts[j + 1]!;
    });
    return out;
  }
}

/** The pixel step's input: the processor's settings (plain data, so a job can cross threads) and the image's bytes. */
export interface PixelJob {
  /** preprocessor_config.json. */
  pre: Json;
  /** The frame side (max_image_size.longest_edge). */
  side: number;
  bytes: Uint8Array;
  /** The request's part, for refusals. */
  what: string;
}

/** pixel_values [frames, 3, side, side] and the split grid (0 × 0: one frame). */
export interface PixelValues {
  pixels: Float32Array;
  frames: number;
  rows: number;
  cols: number;
}

/** Runs a pixel job somewhere; a refusal is an INVALID_ARG TsiError naming `job.what`. */
export type PixelRunner = (job: PixelJob) => Promise<PixelValues>;

/** The pixel step in this thread: decode, then pixelValuesOf. */
export async function idefics3Pixels(job: PixelJob): Promise<PixelValues> {
  return pixelValuesOf(job.pre, job.side, await decodeImage(job.bytes, job.what), job.what);
}

/**
 * transformers.js's preprocess and `_call`: RGB, the 8-bit resize (`do_resize`), then HWC float32
 * rescaled and normalised, then resized / split. The resize is sharp's lanczos3 whatever
 * `resample` says: Idefics3 folders say 1 (Lanczos); transformers.js would run sharp's affine
 * bilinear / bicubic for 2 / 3.
 */
export function pixelValuesOf(pre: Json, L: number, img: DecodedImage, what: string): PixelValues {
  let rgb = toRgb(img);
  let { width: w, height: h } = img;
  if (pre.do_resize ?? pre.size !== undefined) {
    const [nw, nh] = resizeTarget(w, h, pre.size ?? {});
    if (nw < 1 || nh < 1) throw new TsiError('INVALID_ARG', `${what}: the ${w}×${h} image resizes to ${nw}×${nh} (size ${JSON.stringify(pre.size)}); each side must come to at least 1 pixel`);
    rgb = resizeLanczos3({ data: rgb, width: w, height: h, channels: 3 }, nw, nh).data;
    [w, h] = [nw, nh];
  }
  const chw = new Float32Array(3 * w * h);
  const rescale = pre.do_rescale ?? true;
  const factor = pre.rescale_factor ?? 1 / 255;
  const normalize = pre.do_normalize === true;
  const mean = expand(pre.image_mean), std = expand(pre.image_std);
  // A channel's float depends on its byte alone: 3 × 256 values computed once, then looked up.
  const table = new Float32Array(3 * 256);
  for (let c = 0; c < 3; c++) {
    for (let b = 0; b < 256; b++) {
      let v = Math.fround(b);
      if (rescale) v = Math.fround(factor * v);
      if (normalize) v = Math.fround((v - mean[c]!) / std[c]!);
      table[c * 256 + b] = v;
    }
  }
  const n = w * h;
  for (let i = 0, p = 0; i < n; i++, p += 3) {
    chw[i] = table[rgb[p]!]!;
    chw[n + i] = table[256 + rgb[p + 1]!]!;
    chw[2 * n + i] = table[512 + rgb[p + 2]!]!;
  }
  if (pre.do_image_splitting ?? true) {
    const target = splitTarget(w, h, L);
    const resized = resizeBilinear(chw, 3, h, w, target.height, target.width);
    return splitFrames(resized, target.height, target.width, L);
  }
  return { pixels: resizeBilinear(chw, 3, h, w, L, L), frames: 1, rows: 0, cols: 0 };
}

function expand(v: unknown): number[] {
  if (Array.isArray(v)) return v as number[];
  return [0, 0, 0].map(() => (typeof v === 'number' ? v : 0));
}

/** RGB bytes of a decoded image (grey replicated, alpha dropped, as RawImage.rgb()). */
function toRgb(img: DecodedImage): Uint8Array {
  const { data, channels: ch } = img;
  if (ch === 3) return data;
  const n = img.width * img.height;
  const out = new Uint8Array(n * 3);
  for (let i = 0; i < n; i++) {
    const grey = ch <= 2;
    out[i * 3] = data[i * ch]!;
    out[i * 3 + 1] = data[i * ch + (grey ? 0 : 1)]!;
    out[i * 3 + 2] = data[i * ch + (grey ? 0 : 2)]!;
  }
  return out;
}

/** ImageProcessor.get_resize_output_image_size for `{longest_edge}` / `{shortest_edge}` sizes. */
function resizeTarget(w: number, h: number, size: Json): [number, number] {
  if (typeof size.width === 'number' && typeof size.height === 'number' && size.longest_edge === undefined) return [size.width, size.height];
  const short = size.shortest_edge === undefined ? 1 : Math.max(size.shortest_edge / w, size.shortest_edge / h);
  const nw = w * short, nh = h * short;
  const long = size.longest_edge === undefined ? 1 : Math.min(size.longest_edge / nw, size.longest_edge / nh);
  return [Math.floor(Number((nw * long).toFixed(2))), Math.floor(Number((nh * long).toFixed(2)))];
}

/** Idefics3ImageProcessor.get_resize_for_vision_encoder. */
function splitTarget(width: number, height: number, L: number): { width: number; height: number } {
  const aspect = width / height;
  if (width >= height) {
    width = Math.ceil(width / L) * L;
    height = Math.floor(width / aspect);
    height = Math.ceil(height / L) * L;
  } else {
    height = Math.ceil(height / L) * L;
    width = Math.floor(height * aspect);
    width = Math.ceil(width / L) * L;
  }
  return { width, height };
}

/** Idefics3ImageProcessor.split_image: frames of the grid, then the whole image at L × L. */
function splitFrames(chw: Float32Array, h: number, w: number, L: number): { pixels: Float32Array; frames: number; rows: number; cols: number } {
  if (h <= L && w <= L) return { pixels: chw, frames: 1, rows: 0, cols: 0 };
  const rows = Math.ceil(h / L), cols = Math.ceil(w / L);
  const oh = Math.ceil(h / rows), ow = Math.ceil(w / cols);
  const frames: Float32Array[] = [];
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const y0 = r === rows - 1 ? h - oh : r * oh;
      const x0 = c === cols - 1 ? w - ow : c * ow;
      const f = new Float32Array(3 * oh * ow);
      for (let ch = 0; ch < 3; ch++) for (let y = 0; y < oh; y++) f.set(chw.subarray(ch * h * w + (y0 + y) * w + x0, ch * h * w + (y0 + y) * w + x0 + ow), ch * oh * ow + y * ow);
      frames.push(f);
    }
  }
  frames.push(h !== L || w !== L ? resizeBilinear(chw, 3, h, w, L, L) : chw);
  // Frames are cat'ed along the batch axis: each must be L × L (transformers.js would fail otherwise).
  if (oh !== L || ow !== L) throw new TsiError('INVALID_ARG', `the image splits into ${oh}×${ow} frames, not the processor's ${L}×${L}`);
  const out = new Float32Array(frames.length * 3 * L * L);
  frames.forEach((f, i) => out.set(f, i * 3 * L * L));
  return { pixels: out, frames: frames.length, rows, cols };
}

/**
 * onnxruntime's `Resize` (mode linear, coordinate_transformation_mode half_pixel, the ONNX default),
 * what transformers.js's interpolate_4d runs, step for step in float32: each output coordinate
 * mapped back, clamped, its two neighbours weighted by their distances.
 */
export function resizeBilinear(src: Float32Array, channels: number, H: number, W: number, outH: number, outW: number): Float32Array {
  const f = Math.fround;
  const axis = (n: number, outN: number) => {
    const scale = f(outN / n);
    const i1 = new Int32Array(outN), i2 = new Int32Array(outN), d1 = new Float32Array(outN), d2 = new Float32Array(outN);
    for (let o = 0; o < outN; o++) {
      let x = scale === 1 ? o : f(f(f(o + 0.5) / scale) - 0.5);
      x = Math.max(0, Math.min(x, n - 1));
      const a = Math.min(Math.trunc(x), n - 1), b = Math.min(a + 1, n - 1);
      i1[o] = a;
      i2[o] = b;
      d1[o] = a === b ? 0.5 : f(Math.abs(x - a));
      d2[o] = a === b ? 0.5 : f(Math.abs(x - b));
    }
    return { i1, i2, d1, d2 };
  };
  const ys = axis(H, outH), xs = axis(W, outW);
  const out = new Float32Array(channels * outH * outW);
  for (let c = 0; c < channels; c++) {
    const base = c * H * W, ob = c * outH * outW;
    for (let y = 0; y < outH; y++) {
      const r1 = base + ys.i1[y]! * W, r2 = base + ys.i2[y]! * W, dy1 = ys.d1[y]!, dy2 = ys.d2[y]!;
      for (let x = 0; x < outW; x++) {
        const x1 = xs.i1[x]!, x2 = xs.i2[x]!, dx1 = xs.d1[x]!, dx2 = xs.d2[x]!;
        const a = f(f(f(dx2 * dy2) * src[r1 + x1]!) + f(f(dx1 * dy2) * src[r1 + x2]!));
        const b = f(a + f(f(dx2 * dy1) * src[r2 + x1]!));
        out[ob + y * outW + x] = f(b + f(f(dx1 * dy1) * src[r2 + x2]!));
      }
    }
  }
  return out;
}
