/**
 * A PNG decoder in plain JavaScript: what a chat image sent as `data:image/png` needs, in Node and the
 * page alike. The zlib stream is inflated with the Web-standard `DecompressionStream('deflate')` (Node
 * 18+, every current browser), so no dependency; the rest is the format: chunks, the five filters, bit
 * depths 1–16, grey, grey + alpha, RGB, RGBA and palette (with its tRNS), Adam7 interlacing. Pixels
 * come out as 8 bits a channel (16-bit samples keep their high byte), in the PNG's own channel count,
 * as sharp (transformers.js's decoder in Node) hands them to the processor.
 */

import { TsiError } from '../errors.js';

export interface DecodedImage {
  width: number;
  height: number;
  /** 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA). */
  channels: number;
  /** Row-major, `channels` bytes a pixel. */
  data: Uint8Array;
}

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];
/**
 * Images bigger than this many pixels are refused before their pixels are decoded (a decompression
 * bomb: a few kilobytes of PNG or JPEG can claim gigabytes). 40 megapixels is above any phone
 * camera's photo; its 8-bit RGBA is 160 MB, and the processor's float copy of a photo it does not
 * resize 480 MB.
 */
export const MAX_IMAGE_PIXELS = 40_000_000;

/** Refuses (INVALID_ARG) a width × height over MAX_IMAGE_PIXELS, in words that name the limit. */
export function checkImagePixels(width: number, height: number): void {
  const n = width * height;
  if (n > MAX_IMAGE_PIXELS) throw new TsiError('INVALID_ARG', `the image is ${width}×${height} (${n} pixels), more than the ${MAX_IMAGE_PIXELS} pixels tsi decodes`);
}

export function isPng(b: Uint8Array): boolean {
  return b.length >= 8 && SIGNATURE.every((v, i) => b[i] === v);
}

async function inflate(data: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([data as Uint8Array<ArrayBuffer>]).stream().pipeThrough(new DecompressionStream('deflate'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** Decodes a PNG file; a malformed one is an INVALID_ARG saying what is wrong. */
export async function decodePng(b: Uint8Array): Promise<DecodedImage> {
  const fail = (why: string) => new TsiError('INVALID_ARG', `not a valid PNG image: ${why}`);
  if (!isPng(b)) throw fail('no PNG signature');
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 8;
  let width = 0, height = 0, depth = 0, color = -1, interlace = 0;
  let palette: Uint8Array | undefined;
  let trns: Uint8Array | undefined;
  const idat: Uint8Array[] = [];
  while (at + 8 <= b.length) {
    const len = view.getUint32(at);
    const type = String.fromCharCode(b[at + 4]!, b[at + 5]!, b[at + 6]!, b[at + 7]!);
    const body = at + 8;
    if (body + len + 4 > b.length) throw fail(`chunk '${type}' runs past the end of the file`);
    const chunk = b.subarray(body, body + len);
    if (type === 'IHDR') {
      width = view.getUint32(body);
      height = view.getUint32(body + 4);
      depth = b[body + 8]!;
      color = b[body + 9]!;
      interlace = b[body + 12]!;
    } else if (type === 'PLTE') palette = chunk;
    else if (type === 'tRNS') trns = chunk;
    else if (type === 'IDAT') idat.push(chunk);
    else if (type === 'IEND') break;
    at = body + len + 4;
  }
  const CHANNELS: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
  const ch = CHANNELS[color];
  if (!width || !height || ch === undefined) throw fail('no valid IHDR chunk');
  if (![1, 2, 4, 8, 16].includes(depth) || (color !== 0 && color !== 3 && depth < 8) || (color === 3 && depth > 8)) throw fail(`bit depth ${depth} with colour type ${color}`);
  checkImagePixels(width, height);
  if (color === 3 && !palette) throw fail('a palette image without a PLTE chunk');
  if (idat.length === 0) throw fail('no image data (IDAT)');
  let raw: Uint8Array;
  try {
    const joined = new Uint8Array(idat.reduce((n, c) => n + c.length, 0));
    let o = 0;
    for (const c of idat) {
      joined.set(c, o);
      o += c.length;
    }
    raw = await inflate(joined);
  } catch (err) {
    throw fail(`the compressed data does not inflate (${(err as Error).message})`);
  }
  const bitsPerPixel = ch * depth;
  const bpp = Math.max(1, bitsPerPixel >> 3);
  // The sample grid of a pass (Adam7: 7 passes; else one): starts and steps in x and y.
  const passes = interlace === 1
    ? [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]]
    : [[0, 0, 1, 1]];
  // 8-bit grey / RGB / alpha without interlacing (what encoders write by default): rows are the
  // pixels once unfiltered, copied straight out; the rest goes through 16-bit samples.
  const direct = depth === 8 && color !== 3 && interlace !== 1 ? new Uint8Array(width * height * ch) : undefined;
  const samples = direct ? new Uint16Array(0) : new Uint16Array(width * height * ch);
  let pos = 0;
  for (const [x0, y0, dx, dy] of passes as [number, number, number, number][]) {
    const pw = Math.ceil((width - x0) / dx), ph = Math.ceil((height - y0) / dy);
    if (pw <= 0 || ph <= 0) continue;
    const stride = Math.ceil((pw * bitsPerPixel) / 8);
    let prev: Uint8Array = new Uint8Array(stride);
    for (let y = 0; y < ph; y++) {
      if (pos + 1 + stride > raw.length) throw fail('the image data is shorter than its size says');
      const filter = raw[pos]!;
      // Unfiltered in place: the inflated buffer is this decoder's own.
      const line = raw.subarray(pos + 1, pos + 1 + stride);
      pos += 1 + stride;
      unfilter(filter, line, prev, bpp, fail);
      prev = line;
      if (direct) {
        direct.set(line, y * stride);
        continue;
      }
      for (let x = 0; x < pw; x++) {
        const out = ((y0 + y * dy) * width + (x0 + x * dx)) * ch;
        for (let c = 0; c < ch; c++) samples[out + c] = sample(line, x * ch + c, depth);
      }
    }
  }
  if (direct) return { width, height, channels: ch, data: direct };
  return toEightBit(samples, width, height, ch, depth, color, palette, trns);
}

function unfilter(filter: number, line: Uint8Array, prev: Uint8Array, bpp: number, fail: (why: string) => Error): void {
  const n = line.length;
  switch (filter) {
    case 0: return;
    case 1: for (let i = bpp; i < n; i++) line[i] = (line[i]! + line[i - bpp]!) & 255; return;
    case 2: for (let i = 0; i < n; i++) line[i] = (line[i]! + prev[i]!) & 255; return;
    // The first pixel's bytes have no left neighbour (0); the loops after it need no test for that.
    case 3:
      for (let i = 0; i < bpp && i < n; i++) line[i] = (line[i]! + (prev[i]! >> 1)) & 255;
      for (let i = bpp; i < n; i++) line[i] = (line[i]! + ((line[i - bpp]! + prev[i]!) >> 1)) & 255;
      return;
    case 4:
      // Paeth with a = c = 0 is the byte above.
      for (let i = 0; i < bpp && i < n; i++) line[i] = (line[i]! + prev[i]!) & 255;
      for (let i = bpp; i < n; i++) {
        const a = line[i - bpp]!, up = prev[i]!, c = prev[i - bpp]!;
        // p - a = up - c, p - up = a - c, p - c = a + up - 2c.
        const pa = up > c ? up - c : c - up, pb = a > c ? a - c : c - a, pcs = a + up - 2 * c, pc = pcs < 0 ? -pcs : pcs;
        line[i] = (line[i]! + (pa <= pb && pa <= pc ? a : pb <= pc ? up : c)) & 255;
      }
      return;
    default: throw fail(`unknown row filter ${filter}`);
  }
}

/** The k-th sample of a row at `depth` bits. */
function sample(line: Uint8Array, k: number, depth: number): number {
  if (depth === 8) return line[k]!;
  if (depth === 16) return (line[2 * k]! << 8) | line[2 * k + 1]!;
  const bit = k * depth;
  return (line[bit >> 3]! >> (8 - depth - (bit & 7))) & ((1 << depth) - 1);
}

function toEightBit(s: Uint16Array, width: number, height: number, ch: number, depth: number, color: number, palette?: Uint8Array, trns?: Uint8Array): DecodedImage {
  const n = width * height;
  if (color === 3) {
    // Palette: RGB, or RGBA when tRNS gives alphas.
    const outCh = trns ? 4 : 3;
    const data = new Uint8Array(n * outCh);
    for (let i = 0; i < n; i++) {
      const idx = s[i]!;
      data[i * outCh] = palette![idx * 3] ?? 0;
      data[i * outCh + 1] = palette![idx * 3 + 1] ?? 0;
      data[i * outCh + 2] = palette![idx * 3 + 2] ?? 0;
      if (trns) data[i * outCh + 3] = trns[idx] ?? 255;
    }
    return { width, height, channels: outCh, data };
  }
  const data = new Uint8Array(n * ch);
  const scale = depth < 8 ? 255 / ((1 << depth) - 1) : 1;
  for (let i = 0; i < s.length; i++) data[i] = depth === 16 ? s[i]! >> 8 : depth < 8 ? Math.round(s[i]! * scale) : s[i]!;
  return { width, height, channels: ch, data };
}
