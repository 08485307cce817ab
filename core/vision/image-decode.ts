/**
 * Image bytes from a chat request: `data:` URLs read, the format told by the bytes (not by the URL's
 * media type, which clients get wrong), and PNG or JPEG decoded to 8-bit pixels in plain JavaScript,
 * so the same code runs in Node and the page. PNG is ours (png.ts); JPEG is jpeg-js (pure JavaScript,
 * BSD-3, no Buffer needed with `useTArray`), whose decode is close to libjpeg's but not bit-equal
 * (IDCT rounding), so a JPEG's pixels may differ by a step from what sharp gives transformers.js.
 */

import jpeg from 'jpeg-js';
import { TsiError } from '../errors.js';
import { MAX_IMAGE_PIXELS, checkImagePixels, decodePng, isPng, type DecodedImage } from './png.js';

export type { DecodedImage };

/** What the decoders take, for the messages that say what was refused. */
export const IMAGE_FORMATS = 'PNG or JPEG';

const isJpeg = (b: Uint8Array) => b.length > 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff;

/** The bytes of a `data:` URL (base64 or percent-encoded); `what` names the field in refusals. */
export function dataUrlBytes(url: string, what: string): { mediaType: string; bytes: Uint8Array } {
  const comma = url.indexOf(',');
  if (!url.startsWith('data:') || comma < 0) throw new TsiError('INVALID_ARG', `${what}: not a data: URL`);
  const meta = url.slice(5, comma).split(';');
  const mediaType = (meta[0] || 'text/plain').toLowerCase();
  if (!mediaType.startsWith('image/')) throw new TsiError('INVALID_ARG', `${what}: a data: URL of '${mediaType}', not an image (${IMAGE_FORMATS} expected)`);
  const body = url.slice(comma + 1);
  if (meta.includes('base64')) return { mediaType, bytes: base64Bytes(body, `${what}: the data: URL's base64 does not decode`) };
  return { mediaType, bytes: new TextEncoder().encode(decodeURIComponent(body)) };
}

function base64Bytes(text: string, refusal: string): Uint8Array {
  let bin: string;
  try {
    bin = atob(text.replace(/\s+/g, ''));
  } catch {
    throw new TsiError('INVALID_ARG', refusal);
  }
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

/**
 * One element of a Triton request's `image` input (BYTES): the image file itself (PNG or JPEG, told
 * by its first bytes), its base64 as Triton's vLLM backend takes it, or a `data:` URL.
 */
export function imageElementBytes(element: Uint8Array, what: string): Uint8Array {
  if (isPng(element) || isJpeg(element)) return element;
  const text = new TextDecoder().decode(element).trim();
  if (text.startsWith('data:')) return dataUrlBytes(text, what).bytes;
  return base64Bytes(text, `${what}: neither ${IMAGE_FORMATS} bytes, their base64, nor a data: URL`);
}

/** Decodes PNG or JPEG bytes; anything else, or a broken file, is an INVALID_ARG naming `what`. */
export async function decodeImage(bytes: Uint8Array, what: string): Promise<DecodedImage> {
  try {
    if (isPng(bytes)) return await decodePng(bytes);
    if (isJpeg(bytes)) {
      const size = jpegSize(bytes);
      if (size) checkImagePixels(size.width, size.height);
      const img = jpeg.decode(bytes, { useTArray: true, formatAsRGBA: false, maxResolutionInMP: MAX_IMAGE_PIXELS / 1e6, maxMemoryUsageInMB: 1024 });
      return { width: img.width, height: img.height, channels: img.data.length / (img.width * img.height), data: img.data };
    }
  } catch (err) {
    const why = err instanceof TsiError ? err.message : `not a valid JPEG image: ${(err as Error).message}`;
    throw new TsiError('INVALID_ARG', `${what}: ${why}`);
  }
  throw new TsiError('INVALID_ARG', `${what}: the bytes are not an image tsi decodes (${IMAGE_FORMATS})`);
}

/**
 * A JPEG's size from its frame header (SOF0..SOF15 but DHT, JPG and DAC), read before jpeg-js
 * allocates for it; undefined when the markers end first (jpeg-js then says what is wrong).
 */
function jpegSize(b: Uint8Array): { width: number; height: number } | undefined {
  let at = 2;
  while (at + 9 < b.length) {
    if (b[at] !== 0xff) return undefined;
    const marker = b[at + 1]!;
    // Fill bytes, and markers without a length (RSTn, TEM).
    if (marker === 0xff) {
      at++;
      continue;
    }
    if ((marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) {
      at += 2;
      continue;
    }
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { height: (b[at + 5]! << 8) | b[at + 6]!, width: (b[at + 7]! << 8) | b[at + 8]! };
    }
    at += 2 + ((b[at + 2]! << 8) | b[at + 3]!);
  }
  return undefined;
}
