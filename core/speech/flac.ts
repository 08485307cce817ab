/**
 * A FLAC decoder in plain TypeScript (FLAC is the lossless format people upload beside WAV, and no
 * npm decoder of it is pure JavaScript and kept up): STREAMINFO, then each frame's header, its
 * subframes (constant, verbatim, fixed predictors of order 0-4, LPC up to order 32, wasted bits),
 * Rice-coded residuals (4- and 5-bit parameters, escapes) and the stereo decorrelations (left/side,
 * side/right, mid/side). Checksums are not verified: a corrupt frame decodes to noise or is refused
 * where its structure breaks, and either way the words say which.
 */

import { TsiError } from '../errors.js';

class Bits {
  pos = 0;
  constructor(private readonly b: Uint8Array, readonly what: string) {}

  get bytePos(): number {
    return this.pos >> 3;
  }

  bit(): number {
    const byte = this.b[this.pos >> 3];
    if (byte === undefined) throw new TsiError('INVALID_ARG', `${this.what}: the FLAC stream ends inside a frame`);
    const v = (byte >> (7 - (this.pos & 7))) & 1;
    this.pos++;
    return v;
  }

  /** `n` bits (n ≤ 53), unsigned. */
  read(n: number): number {
    let v = 0;
    while (n > 0 && (this.pos & 7) !== 0) { v = v * 2 + this.bit(); n--; }
    while (n >= 8) {
      const byte = this.b[this.pos >> 3];
      if (byte === undefined) throw new TsiError('INVALID_ARG', `${this.what}: the FLAC stream ends inside a frame`);
      v = v * 256 + byte;
      this.pos += 8;
      n -= 8;
    }
    while (n > 0) { v = v * 2 + this.bit(); n--; }
    return v;
  }

  signed(n: number): number {
    if (n === 0) return 0;
    const v = this.read(n);
    return v >= 2 ** (n - 1) ? v - 2 ** n : v;
  }

  unary(): number {
    let n = 0;
    while (this.bit() === 0) n++;
    return n;
  }

  align(): void {
    this.pos = (this.pos + 7) & ~7;
  }
}

const BLOCK = [0, 192, 576, 1152, 2304, 4608, 0, 0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];
const RATE = [0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000];
const BITS = [0, 8, 12, 0, 16, 20, 24, 32];

/** Decodes a FLAC file to mono samples in [-1, 1] (channels averaged). */
export function decodeFlac(bytes: Uint8Array, what: string): { samples: Float32Array; sampleRate: number; channels: number } {
  const fail = (why: string) => new TsiError('INVALID_ARG', `${what}: ${why}`);
  let o = 4;
  let info: { rate: number; channels: number; bps: number; total: number } | undefined;
  for (let last = false; !last;) {
    if (o + 4 > bytes.length) throw fail('the FLAC metadata is truncated');
    last = (bytes[o]! & 0x80) !== 0;
    const type = bytes[o]! & 0x7f;
    const len = (bytes[o + 1]! << 16) | (bytes[o + 2]! << 8) | bytes[o + 3]!;
    if (type === 0) {
      const r = new Bits(bytes.subarray(o + 4, o + 4 + len), what);
      r.read(16); r.read(16); r.read(24); r.read(24);
      info = { rate: r.read(20), channels: r.read(3) + 1, bps: r.read(5) + 1, total: r.read(36) };
    }
    o += 4 + len;
  }
  if (!info) throw fail('the FLAC stream has no STREAMINFO block');
  const { channels } = info;
  const out: Float64Array[] = Array.from({ length: channels }, () => new Float64Array(info!.total || 0));
  let written = 0;
  const grow = (n: number) => {
    if (written + n <= out[0]!.length) return;
    for (let c = 0; c < channels; c++) {
      const next = new Float64Array(Math.max(written + n, out[c]!.length * 2));
      next.set(out[c]!);
      out[c] = next;
    }
  };
  const r = new Bits(bytes, what);
  r.pos = o * 8;
  let rate = info.rate;
  while (r.bytePos + 2 < bytes.length) {
    if (r.read(14) !== 0x3ffe) throw fail(`a FLAC frame at byte ${r.bytePos} has no sync code`);
    r.read(2);
    const bsCode = r.read(4);
    const rateCode = r.read(4);
    const chCode = r.read(4);
    const sizeCode = r.read(3);
    r.read(1);
    // The frame or sample number, UTF-8 coded.
    const first = r.read(8);
    for (let extra = first >= 0xfc ? 5 : first >= 0xf8 ? 4 : first >= 0xf0 ? 3 : first >= 0xe0 ? 2 : first >= 0xc0 ? 1 : 0; extra > 0; extra--) r.read(8);
    const block = bsCode === 6 ? r.read(8) + 1 : bsCode === 7 ? r.read(16) + 1 : BLOCK[bsCode]!;
    if (rateCode === 12) rate = r.read(8) * 1000;
    else if (rateCode === 13) rate = r.read(16);
    else if (rateCode === 14) rate = r.read(16) * 10;
    else if (rateCode > 0 && rateCode < 12) rate = RATE[rateCode]!;
    r.read(8); // CRC-8
    const bps = sizeCode === 0 ? info.bps : BITS[sizeCode]!;
    if (!block || !bps || chCode > 10) throw fail(`a FLAC frame at byte ${r.bytePos} has a reserved header value`);
    const nch = chCode < 8 ? chCode + 1 : 2;
    if (nch !== channels) throw fail(`a FLAC frame has ${nch} channels, the stream ${channels}`);
    const sub: Float64Array[] = [];
    for (let c = 0; c < nch; c++) {
      const side = (chCode === 8 && c === 1) || (chCode === 9 && c === 0) || (chCode === 10 && c === 1);
      sub.push(subframe(r, block, bps + (side ? 1 : 0), fail));
    }
    if (chCode >= 8) {
      const [a, b] = sub as [Float64Array, Float64Array];
      for (let i = 0; i < block; i++) {
        if (chCode === 8) b[i] = a[i]! - b[i]!;
        else if (chCode === 9) a[i] = a[i]! + b[i]!;
        else {
          const mid = a[i]! * 2 + (b[i]! & 1);
          a[i] = Math.floor((mid + b[i]!) / 2);
          b[i] = Math.floor((mid - b[i]!) / 2);
        }
      }
    }
    r.align();
    r.read(16); // CRC-16
    grow(block);
    const scale = 2 ** (bps - 1);
    for (let c = 0; c < channels; c++) for (let i = 0; i < block; i++) out[c]![written + i] = sub[c]![i]! / scale;
    written += block;
  }
  const samples = new Float32Array(written);
  for (let i = 0; i < written; i++) {
    let s = 0;
    for (let c = 0; c < channels; c++) s += out[c]![i]!;
    samples[i] = s / channels;
  }
  return { samples, sampleRate: rate, channels };
}

function subframe(r: Bits, n: number, bps: number, fail: (why: string) => TsiError): Float64Array {
  r.read(1);
  const type = r.read(6);
  let wasted = 0;
  if (r.bit()) wasted = r.unary() + 1;
  const bits = bps - wasted;
  const s = new Float64Array(n);
  if (type === 0) s.fill(r.signed(bits));
  else if (type === 1) for (let i = 0; i < n; i++) s[i] = r.signed(bits);
  else if (type >= 8 && type <= 12) {
    const order = type - 8;
    for (let i = 0; i < order; i++) s[i] = r.signed(bits);
    residual(r, s, n, order, fail);
    for (let i = order; i < n; i++) {
      const p = order === 0 ? 0 : order === 1 ? s[i - 1]! : order === 2 ? 2 * s[i - 1]! - s[i - 2]!
        : order === 3 ? 3 * s[i - 1]! - 3 * s[i - 2]! + s[i - 3]! : 4 * s[i - 1]! - 6 * s[i - 2]! + 4 * s[i - 3]! - s[i - 4]!;
      s[i] = s[i]! + p;
    }
  } else if (type >= 32) {
    const order = type - 31;
    for (let i = 0; i < order; i++) s[i] = r.signed(bits);
    const precision = r.read(4) + 1;
    if (precision === 16) throw fail('a FLAC subframe has an invalid LPC precision');
    const shift = r.signed(5);
    const coefs = Array.from({ length: order }, () => r.signed(precision));
    residual(r, s, n, order, fail);
    const div = 2 ** shift;
    for (let i = order; i < n; i++) {
      let sum = 0;
      for (let j = 0; j < order; j++) sum += coefs[j]! * s[i - 1 - j]!;
      s[i] = s[i]! + Math.floor(sum / div);
    }
  } else throw fail(`a FLAC subframe has the reserved type ${type}`);
  if (wasted > 0) for (let i = 0; i < n; i++) s[i] = s[i]! * 2 ** wasted;
  return s;
}

/** Reads the Rice-coded residual of samples order … n-1 into `s`. */
function residual(r: Bits, s: Float64Array, n: number, order: number, fail: (why: string) => TsiError): void {
  const method = r.read(2);
  if (method > 1) throw fail('a FLAC residual uses a reserved coding method');
  const pbits = method === 0 ? 4 : 5;
  const escape = method === 0 ? 15 : 31;
  const porder = r.read(4);
  const parts = 1 << porder;
  let i = order;
  for (let p = 0; p < parts; p++) {
    const count = (n >> porder) - (p === 0 ? order : 0);
    const k = r.read(pbits);
    if (k === escape) {
      const raw = r.read(5);
      for (let j = 0; j < count; j++) s[i++] = r.signed(raw);
    } else {
      for (let j = 0; j < count; j++) {
        const v = r.unary() * 2 ** k + r.read(k);
        s[i++] = v % 2 === 0 ? v / 2 : -(v + 1) / 2;
      }
    }
  }
}
