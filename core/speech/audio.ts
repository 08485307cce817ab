/**
 * Audio in, Whisper's input features out: a WAV decoder (PCM 8/16/24/32-bit integers and 32/64-bit
 * floats, any channel count, mixed down to mono), a band-limited resampler to 16 kHz, and the log-mel
 * spectrogram exactly as Whisper's feature extractor computes it (Hann window of n_fft 400, hop 160,
 * reflect-padded centre frames, power spectrum, Slaney-scale Slaney-normalised mel filters up to 8 kHz,
 * log10 of max(x, 1e-10), clamped to the window's maximum minus 8, then (x + 4) / 4; the last frame
 * dropped). Pure arithmetic on typed arrays, so the page and Node compute the same features.
 *
 * WAV is decoded here and FLAC by flac.ts; other containers are refused with a message naming what is
 * accepted, so a client learns to convert instead of guessing (`AUDIO_ACCEPTED`).
 */

import { TsiError } from '../errors.js';
import { decodeFlac } from './flac.js';

export const SAMPLE_RATE = 16000;
export const N_FFT = 400;
export const HOP = 160;
/** Samples in one 30 s window, and its frames. */
export const WINDOW_SAMPLES = 30 * SAMPLE_RATE;
export const WINDOW_FRAMES = WINDOW_SAMPLES / HOP;

export const AUDIO_ACCEPTED = 'WAV (RIFF/RIFX or WAVE_FORMAT_EXTENSIBLE: PCM 8, 16, 24 or 32-bit integers, 32 or 64-bit floats) and FLAC, any channel count and sample rate';

export interface DecodedAudio {
  /** Mono samples in [-1, 1]. */
  samples: Float32Array;
  sampleRate: number;
  channels: number;
}

/** What a file's first bytes say it is, for a refusal that names it. */
function sniff(b: Uint8Array): string {
  const ascii = (o: number, n: number) => String.fromCharCode(...b.subarray(o, o + n));
  if (ascii(0, 4) === 'fLaC') return 'FLAC';
  if (ascii(0, 4) === 'OggS') return 'Ogg';
  if (ascii(0, 3) === 'ID3' || (b[0] === 0xff && ((b[1] ?? 0) & 0xe0) === 0xe0)) return 'MP3';
  if (ascii(4, 4) === 'ftyp') return 'MP4/M4A';
  if (b[0] === 0x1a && b[1] === 0x45 && b[2] === 0xdf && b[3] === 0xa3) return 'WebM/Matroska';
  return 'an unknown format';
}

/** Decodes a WAV or FLAC file to mono float samples; `what` names the upload in errors. */
export function decodeAudio(bytes: Uint8Array, what = 'the audio file'): DecodedAudio {
  const refuse = (why: string) => new TsiError('INVALID_ARG', `${what}: ${why}; accepted: ${AUDIO_ACCEPTED}`);
  if (bytes.length < 12) throw refuse(`${bytes.length} bytes is too short for an audio file`);
  const head = String.fromCharCode(...bytes.subarray(0, 4));
  if (head === 'fLaC') {
    try {
      return decodeFlac(bytes, what);
    } catch (err) {
      throw refuse((err as Error).message.slice(what.length + 2));
    }
  }
  const little = head === 'RIFF';
  if ((!little && head !== 'RIFX') || String.fromCharCode(...bytes.subarray(8, 12)) !== 'WAVE') {
    throw refuse(`it is ${sniff(bytes)}, not WAV or FLAC`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let fmt: { tag: number; channels: number; rate: number; bits: number; align: number } | undefined;
  let data: Uint8Array | undefined;
  for (let o = 12; o + 8 <= bytes.length;) {
    const id = String.fromCharCode(...bytes.subarray(o, o + 4));
    const size = view.getUint32(o + 4, little);
    const body = o + 8;
    if (id === 'fmt ') {
      if (size < 16 || body + 16 > bytes.length) throw refuse('its fmt chunk is truncated');
      let tag = view.getUint16(body, little);
      // WAVE_FORMAT_EXTENSIBLE: the real tag is the first two bytes of the sub-format GUID.
      if (tag === 0xfffe && size >= 40 && body + 26 <= bytes.length) tag = view.getUint16(body + 24, little);
      fmt = {
        tag, channels: view.getUint16(body + 2, little), rate: view.getUint32(body + 4, little),
        align: view.getUint16(body + 12, little), bits: view.getUint16(body + 14, little),
      };
    } else if (id === 'data') {
      // Streaming writers leave the size 0 or 0xffffffff: the data runs to the end of the file.
      const end = size === 0 || size === 0xffffffff ? bytes.length : Math.min(bytes.length, body + size);
      data = bytes.subarray(body, end);
      break;
    }
    o = body + size + (size & 1);
  }
  if (!fmt) throw refuse('it has no fmt chunk');
  if (!data) throw refuse('it has no data chunk');
  const { tag, channels, rate, bits } = fmt;
  if (channels < 1) throw refuse('it says it has 0 channels');
  if (!(rate >= 1000 && rate <= 384000)) throw refuse(`its sample rate ${rate} Hz is out of range`);
  const isFloat = tag === 3;
  if (!(tag === 1 || isFloat)) throw refuse(`its format tag is ${tag} (1 is PCM, 3 is IEEE float)`);
  if (isFloat ? bits !== 32 && bits !== 64 : ![8, 16, 24, 32].includes(bits)) {
    throw refuse(`${bits}-bit ${isFloat ? 'float' : 'integer'} samples are not supported`);
  }
  const bytesPer = bits / 8;
  const frameBytes = bytesPer * channels;
  const frames = Math.floor(data.length / frameBytes);
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const read = (o: number): number => {
    if (isFloat) return bits === 32 ? dv.getFloat32(o, little) : dv.getFloat64(o, little);
    switch (bits) {
      case 8: return (dv.getUint8(o) - 128) / 128;
      case 16: return dv.getInt16(o, little) / 32768;
      case 24: {
        const v = little
          ? dv.getUint8(o) | (dv.getUint8(o + 1) << 8) | (dv.getInt8(o + 2) << 16)
          : dv.getUint8(o + 2) | (dv.getUint8(o + 1) << 8) | (dv.getInt8(o) << 16);
        return v / 8388608;
      }
      default: return dv.getInt32(o, little) / 2147483648;
    }
  };
  const samples = new Float32Array(frames);
  for (let f = 0; f < frames; f++) {
    let sum = 0;
    for (let c = 0; c < channels; c++) sum += read(f * frameBytes + c * bytesPer);
    samples[f] = sum / channels;
  }
  return { samples, sampleRate: rate, channels };
}

/**
 * Resamples to `to` Hz with a Hann-windowed sinc low-passed at the lower of the two Nyquist rates
 * (16 zero crossings each side), so speech recorded at 44.1 or 48 kHz keeps no aliases above 8 kHz.
 */
export function resample(x: Float32Array, from: number, to = SAMPLE_RATE): Float32Array {
  if (from === to) return x;
  const ratio = to / from;
  const n = Math.floor(x.length * ratio);
  const out = new Float32Array(n);
  const cutoff = Math.min(1, ratio);
  const zeros = 16;
  const half = zeros / cutoff;
  for (let i = 0; i < n; i++) {
    const t = i / ratio;
    const lo = Math.max(0, Math.ceil(t - half));
    const hi = Math.min(x.length - 1, Math.floor(t + half));
    let acc = 0;
    for (let j = lo; j <= hi; j++) {
      const d = j - t;
      const a = Math.PI * d * cutoff;
      const sinc = a === 0 ? 1 : Math.sin(a) / a;
      const w = 0.5 + 0.5 * Math.cos((Math.PI * d) / half);
      acc += x[j]! * sinc * w;
    }
    out[i] = acc * cutoff;
  }
  return out;
}

/** Audio bytes to 16 kHz mono samples. */
export function audioSamples(bytes: Uint8Array, what?: string): { samples: Float32Array; seconds: number } {
  const a = decodeAudio(bytes, what);
  const samples = resample(a.samples, a.sampleRate);
  return { samples, seconds: samples.length / SAMPLE_RATE };
}

const hzToMel = (f: number) => (f < 1000 ? (3 * f) / 200 : 15 + (Math.log(f / 1000) * 27) / Math.log(6.4));
const melToHz = (m: number) => (m < 15 ? (200 * m) / 3 : 1000 * Math.exp((Math.log(6.4) * (m - 15)) / 27));

/** Slaney-scale, Slaney-normalised triangular filters, `[mels][bins]`, from 0 to 8 kHz. */
export function melFilters(mels: number, nFft = N_FFT, rate = SAMPLE_RATE, fMax = 8000): Float64Array[] {
  const bins = nFft / 2 + 1;
  const fft = Array.from({ length: bins }, (_, i) => (i * (rate / 2)) / (bins - 1));
  const mMin = hzToMel(0);
  const mMax = hzToMel(fMax);
  const edges = Array.from({ length: mels + 2 }, (_, i) => melToHz(mMin + ((mMax - mMin) * i) / (mels + 1)));
  const out: Float64Array[] = [];
  for (let m = 0; m < mels; m++) {
    const row = new Float64Array(bins);
    const enorm = 2 / (edges[m + 2]! - edges[m]!);
    for (let k = 0; k < bins; k++) {
      const down = (fft[k]! - edges[m]!) / (edges[m + 1]! - edges[m]!);
      const up = (edges[m + 2]! - fft[k]!) / (edges[m + 2]! - edges[m + 1]!);
      row[k] = Math.max(0, Math.min(down, up)) * enorm;
    }
    out.push(row);
  }
  return out;
}

/** A complex FFT of any size whose factors are small (400 = 2^4 · 5^2), by recursive mixed radix. */
class Fft {
  private readonly cos: Float64Array;
  private readonly sin: Float64Array;
  private readonly factors: number[] = [];
  constructor(readonly n: number) {
    this.cos = new Float64Array(n);
    this.sin = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      this.cos[i] = Math.cos((-2 * Math.PI * i) / n);
      this.sin[i] = Math.sin((-2 * Math.PI * i) / n);
    }
    let m = n;
    for (const p of [4, 2, 3, 5]) while (m % p === 0) { this.factors.push(p); m /= p; }
    for (let p = 7; m > 1; p++) while (m % p === 0) { this.factors.push(p); m /= p; }
  }

  /** In: re/im of length n. Out: written to outRe/outIm. */
  run(re: Float64Array, im: Float64Array, outRe: Float64Array, outIm: Float64Array): void {
    this.rec(re, im, 0, 1, this.n, outRe, outIm, 0, 0);
  }

  private rec(re: Float64Array, im: Float64Array, off: number, stride: number, n: number, oRe: Float64Array, oIm: Float64Array, oOff: number, level: number): void {
    if (n === 1) { oRe[oOff] = re[off]!; oIm[oOff] = im[off]!; return; }
    const p = this.factors[level]!;
    const m = n / p;
    // p sub-transforms of length m over the decimated inputs, laid out one after another.
    for (let q = 0; q < p; q++) this.rec(re, im, off + q * stride, stride * p, m, oRe, oIm, oOff + q * m, level + 1);
    const tw = this.n / n;
    const tRe = new Float64Array(p);
    const tIm = new Float64Array(p);
    for (let k = 0; k < m; k++) {
      for (let q = 0; q < p; q++) {
        const idx = oOff + q * m + k;
        const w = (q * k * tw) % this.n;
        const c = this.cos[w]!, s = this.sin[w]!;
        tRe[q] = oRe[idx]! * c - oIm[idx]! * s;
        tIm[q] = oRe[idx]! * s + oIm[idx]! * c;
      }
      for (let j = 0; j < p; j++) {
        let sr = 0, si = 0;
        for (let q = 0; q < p; q++) {
          const w = ((q * j) % p) * (this.n / p);
          const c = this.cos[w]!, s = this.sin[w]!;
          sr += tRe[q]! * c - tIm[q]! * s;
          si += tRe[q]! * s + tIm[q]! * c;
        }
        oRe[oOff + j * m + k] = sr;
        oIm[oOff + j * m + k] = si;
      }
    }
  }
}

const ffts = new Map<number, Fft>();
const filterCache = new Map<number, Float64Array[]>();

/**
 * Whisper's input features of one window: `samples` (16 kHz) padded with zeros or cut to 30 s,
 * `[mels][3000]` row-major. `filters` (from preprocessor_config.json's `mel_filters`) overrides the
 * computed bank.
 */
export function logMel(samples: Float32Array, mels = 80, filters?: Float64Array[]): Float32Array {
  const wave = new Float32Array(WINDOW_SAMPLES);
  wave.set(samples.length > WINDOW_SAMPLES ? samples.subarray(0, WINDOW_SAMPLES) : samples);
  return spectrogram(wave, WINDOW_FRAMES, mels, filters);
}

/**
 * The features of a whole recording longer than a window, `[mels][frames]` with frames =
 * floor(samples / 160), normalised by the recording's maximum: what long-form decoding slices its
 * 30 s windows from (as transformers.js's seek loop and Whisper's `transcribe` do).
 */
export function logMelWhole(samples: Float32Array, mels = 80, filters?: Float64Array[]): { features: Float32Array; frames: number } {
  const frames = Math.floor(samples.length / HOP);
  return { features: spectrogram(samples, frames, mels, filters), frames };
}

function spectrogram(wave: Float32Array, frames: number, mels: number, filters?: Float64Array[]): Float32Array {
  const bank = filters ?? filterCache.get(mels) ?? (filterCache.set(mels, melFilters(mels)), filterCache.get(mels)!);
  const fft = ffts.get(N_FFT) ?? (ffts.set(N_FFT, new Fft(N_FFT)), ffts.get(N_FFT)!);
  const pad = N_FFT / 2;
  const n = wave.length;
  // Reflect padding (numpy's 'reflect': the edge sample is not repeated).
  const at = (i: number) => (i < 0 ? wave[-i]! : i >= n ? wave[2 * (n - 1) - i]! : wave[i]!);
  const window = new Float64Array(N_FFT);
  for (let i = 0; i < N_FFT; i++) window[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N_FFT); // periodic Hann
  const bins = N_FFT / 2 + 1;
  const re = new Float64Array(N_FFT), im = new Float64Array(N_FFT);
  const oRe = new Float64Array(N_FFT), oIm = new Float64Array(N_FFT);
  const power = new Float64Array(bins);
  const out = new Float32Array(mels * frames);
  let max = -Infinity;
  for (let f = 0; f < frames; f++) {
    const start = f * HOP - pad;
    for (let i = 0; i < N_FFT; i++) { re[i] = at(start + i) * window[i]!; im[i] = 0; }
    fft.run(re, im, oRe, oIm);
    for (let k = 0; k < bins; k++) power[k] = oRe[k]! * oRe[k]! + oIm[k]! * oIm[k]!;
    for (let m = 0; m < mels; m++) {
      const row = bank[m]!;
      let acc = 0;
      for (let k = 0; k < bins; k++) acc += row[k]! * power[k]!;
      const v = Math.log10(Math.max(acc, 1e-10));
      out[m * frames + f] = v;
      if (v > max) max = v;
    }
  }
  const floor = max - 8;
  for (let i = 0; i < out.length; i++) out[i] = (Math.max(out[i]!, floor) + 4) / 4;
  return out;
}

/** Writes mono float samples as a 16-bit PCM WAV (tests, benches and examples make audio with it). */
export function encodeWav(samples: Float32Array, sampleRate = SAMPLE_RATE, opts: { bits?: 8 | 16 | 24 | 32; float?: boolean; channels?: number } = {}): Uint8Array {
  const bits = opts.float ? 32 : opts.bits ?? 16;
  const channels = opts.channels ?? 1;
  const bytesPer = bits / 8;
  const dataBytes = samples.length * bytesPer * channels;
  const out = new Uint8Array(44 + dataBytes);
  const v = new DataView(out.buffer);
  const str = (o: number, s: string) => { for (let i = 0; i < s.length; i++) out[o + i] = s.charCodeAt(i); };
  str(0, 'RIFF'); v.setUint32(4, 36 + dataBytes, true); str(8, 'WAVE');
  str(12, 'fmt '); v.setUint32(16, 16, true); v.setUint16(20, opts.float ? 3 : 1, true); v.setUint16(22, channels, true);
  v.setUint32(24, sampleRate, true); v.setUint32(28, sampleRate * bytesPer * channels, true);
  v.setUint16(32, bytesPer * channels, true); v.setUint16(34, bits, true);
  str(36, 'data'); v.setUint32(40, dataBytes, true);
  let o = 44;
  for (const s of samples) {
    const x = Math.max(-1, Math.min(1, s));
    for (let c = 0; c < channels; c++, o += bytesPer) {
      if (opts.float) v.setFloat32(o, s, true);
      else if (bits === 8) v.setUint8(o, Math.round(x * 127) + 128);
      else if (bits === 16) v.setInt16(o, Math.round(x * 32767), true);
      else if (bits === 24) { const n = Math.round(x * 8388607); v.setUint8(o, n & 0xff); v.setUint8(o + 1, (n >> 8) & 0xff); v.setInt8(o + 2, n >> 16); }
      else v.setInt32(o, Math.round(x * 2147483647), true);
    }
  }
  return out;
}
