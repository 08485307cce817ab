/**
 * Whisper's input features, computed by core/speech/audio.ts, against transformers.js's
 * `WhisperFeatureExtractor` on the same 16 kHz samples: espeak-ng speech (real audio made here) and a
 * generated chirp with noise, at 80 and 128 mels, within 1e-4 everywhere. Also: the WAV decoder reads
 * every PCM layout the route accepts to the same samples, and names what is accepted when refusing.
 */

import { describe, expect, it } from 'vitest';
import { WhisperFeatureExtractor } from '@huggingface/transformers';
import { audioSamples, decodeAudio, encodeWav, logMel, logMelWhole, resample, SAMPLE_RATE, WINDOW_FRAMES } from '../../core/speech/audio.js';
import { describeWith } from '../helpers/capability.js';
import { chirp, espeakMissing, flacMissing, flacOf, speechWav, stereoWav } from '../helpers/audio.js';

async function reference(samples: Float32Array, mels: number): Promise<Float32Array> {
  const fe = new WhisperFeatureExtractor({
    feature_size: mels, sampling_rate: SAMPLE_RATE, hop_length: 160, n_fft: 400, chunk_length: 30, n_samples: 480000, nb_max_frames: 3000,
  });
  const { input_features } = await fe(samples);
  return input_features.data as Float32Array;
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

describe('Whisper log-mel features', () => {
  for (const mels of [80, 128]) {
    it(`equal transformers.js's WhisperFeatureExtractor on a chirp, ${mels} mels`, async () => {
      const x = chirp(7.3);
      const ours = logMel(x, mels);
      expect(ours.length).toBe(mels * WINDOW_FRAMES);
      expect(maxDiff(ours, await reference(x, mels))).toBeLessThan(1e-4);
    });
  }

  it('cut to the first 30 s of longer audio, as the extractor does', async () => {
    const x = chirp(31);
    expect(maxDiff(logMel(x, 80), await reference(x, 80))).toBeLessThan(1e-4);
  });

  it('of a whole recording longer than 30 s equal the extractor run with its length (the long-form features)', async () => {
    const x = chirp(33, 7);
    const fe = new WhisperFeatureExtractor({ feature_size: 80, sampling_rate: SAMPLE_RATE, hop_length: 160, n_fft: 400, chunk_length: 30, n_samples: x.length, nb_max_frames: 1e9 });
    const { input_features } = await fe(x, { max_length: x.length });
    const { features, frames } = logMelWhole(x, 80);
    expect(frames).toBe(input_features.dims[2]);
    expect(maxDiff(features, input_features.data as Float32Array)).toBeLessThan(1e-4);
  });

  describeWith(!!process.env.CI, 'espeak-ng', espeakMissing)('on speech', () => {
    it('equal transformers.js on espeak-ng speech resampled to 16 kHz', async () => {
      const { samples, seconds } = audioSamples(speechWav('The quick brown fox jumps over the lazy dog. Speech to text.'));
      expect(seconds).toBeGreaterThan(1);
      expect(maxDiff(logMel(samples, 80), await reference(samples, 80))).toBeLessThan(1e-4);
      expect(maxDiff(logMel(samples, 128), await reference(samples, 128))).toBeLessThan(1e-4);
    });
  });
});

describe('WAV decoding', () => {
  const x = chirp(0.5);
  it('reads 8, 16, 24, 32-bit PCM and float32, mono and stereo, to the same samples', () => {
    for (const [opts, tol] of [[{ bits: 8 }, 1 / 64], [{ bits: 16 }, 1e-4], [{ bits: 24 }, 1e-6], [{ bits: 32 }, 1e-6], [{ float: true }, 0]] as const) {
      for (const channels of [1, 2]) {
        const a = decodeAudio(encodeWav(x, SAMPLE_RATE, { ...opts, channels }));
        expect(a.channels).toBe(channels);
        expect(a.samples.length).toBe(x.length);
        expect(maxDiff(a.samples, x)).toBeLessThanOrEqual(tol);
      }
    }
  });

  it('resamples 48 kHz to 16 kHz keeping a 1 kHz tone', () => {
    const n = 48000;
    const tone = Float32Array.from({ length: n }, (_, i) => Math.sin((2 * Math.PI * 1000 * i) / 48000));
    const y = resample(tone, 48000);
    expect(y.length).toBe(16000);
    let d = 0;
    for (let i = 100; i < y.length - 100; i++) d = Math.max(d, Math.abs(y[i]! - Math.sin((2 * Math.PI * 1000 * i) / 16000)));
    expect(d).toBeLessThan(0.01);
  });

  it('refuses other formats naming the format and what is accepted', () => {
    const ogg = new TextEncoder().encode('OggS\0\x02 and the rest of an ogg file');
    expect(() => decodeAudio(ogg, "file 'a.ogg'")).toThrow(/file 'a.ogg': it is Ogg, not WAV or FLAC; accepted: WAV .* and FLAC/);
    expect(() => decodeAudio(new Uint8Array(3))).toThrow(/too short/);
    // A FLAC whose STREAMINFO says 34 bytes and holds 8.
    const cut = Uint8Array.from([...'fLaC'].map((c) => c.charCodeAt(0)).concat([0x80, 0, 0, 0x22, 0, 0, 0, 0, 0, 0, 0, 0]));
    expect(() => decodeAudio(cut, 'x')).toThrow(/^x: the FLAC stream ends inside a frame; accepted: WAV/);
  });
});

describeWith(!!process.env.CI, 'the flac encoder', flacMissing)('FLAC decoding', () => {
  // The reference flac encoder's choices: fixed predictors (-0), LPC up to order 12 (-8), stereo
  // decorrelation, 24-bit and 8-bit samples, other rates; each decodes to the WAV's samples exactly.
  const cases: [string, Float32Array, Parameters<typeof encodeWav>[2], number, string[]][] = [
    ['16-bit mono, fixed predictors', chirp(1.3, 3), { bits: 16 }, 16000, ['-0']],
    ['16-bit mono, LPC', chirp(1.3, 4), { bits: 16 }, 16000, ['-8']],
    ['16-bit stereo, mid/side', chirp(0.9, 5), { bits: 16, channels: 2 }, 44100, ['-5']],
    ['24-bit stereo, LPC exhaustive', chirp(0.7, 6), { bits: 24, channels: 2 }, 48000, ['-8', '-e']],
    ['8-bit mono', chirp(0.5, 7), { bits: 8 }, 8000, ['-3']],
  ];
  for (const [name, bits, flags] of [['16-bit stereo, channels apart, mid/side chosen per frame', 16, ['-8', '-M']], ['24-bit stereo, channels apart, exhaustive', 24, ['-8', '-e', '-m']]] as const) {
    it(name, () => {
      const left = chirp(0.8, 8);
      const right = chirp(0.8, 9).map((v, i) => 0.7 * v + 0.3 * left[i]!);
      const wav = stereoWav(left, right, 44100, bits);
      const a = decodeAudio(flacOf(wav, [...flags]));
      const b = decodeAudio(wav);
      expect(a.channels).toBe(2);
      expect(maxDiff(a.samples, b.samples)).toBe(0);
    });
  }
  for (const [name, x, opts, rate, flags] of cases) {
    it(name, () => {
      const wav = encodeWav(x, rate, opts);
      const flac = flacOf(wav, flags);
      const a = decodeAudio(flac);
      const b = decodeAudio(wav);
      expect(a.sampleRate).toBe(rate);
      expect(a.channels).toBe(b.channels);
      expect(a.samples.length).toBe(b.samples.length);
      expect(maxDiff(a.samples, b.samples)).toBe(0);
    });
  }

  it('espeak-ng speech as FLAC gives the WAV\'s features', (ctx) => {
    if (espeakMissing) return ctx.skip(espeakMissing);
    const wav = speechWav('Lossless audio decodes to the same samples.');
    expect(maxDiff(audioSamples(flacOf(wav, ['-8'])).samples, audioSamples(wav).samples)).toBe(0);
  });
});
