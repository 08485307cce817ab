/**
 * Audio made in the tests: espeak-ng speech written to WAV (real speech, where espeak-ng is installed;
 * .ci/run installs it), a seeded chirp with noise (everywhere), and FLAC files made by the reference
 * `flac` encoder from WAV bytes (.ci/run installs it too).
 */

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeWav, SAMPLE_RATE } from '../../core/speech/audio.js';

/** Why espeak-ng cannot speak here, or undefined when it can. */
export const espeakMissing = (() => { try { execFileSync('espeak-ng', ['--version'], { stdio: 'ignore' }); return undefined; } catch { return 'espeak-ng is not installed'; } })();

/** espeak-ng speech as WAV bytes (22050 Hz 16-bit mono, as espeak-ng writes it). */
export function speechWav(text: string): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), 'tsi-speech-'));
  try {
    const path = join(dir, 'speech.wav');
    execFileSync('espeak-ng', ['-w', path, text]);
    return new Uint8Array(readFileSync(path));
  } finally { rmSync(dir, { recursive: true, force: true }); }
}

/** A chirp from 100 Hz to 6 kHz with seeded noise: every mel band sees energy. */
export function chirp(seconds: number, seed = 1): Float32Array {
  const n = Math.round(seconds * SAMPLE_RATE);
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (s * 1664525 + 1013904223) >>> 0;
    const t = i / SAMPLE_RATE;
    x[i] = 0.4 * Math.sin(2 * Math.PI * (100 * t + (5900 / (2 * seconds)) * t * t)) + 0.05 * (s / 2 ** 32 - 0.5);
  }
  return x;
}


/** Why the flac encoder cannot run here, or undefined when it can. */
export const flacMissing = (() => { try { execFileSync('flac', ['--version'], { stdio: 'ignore' }); return undefined; } catch { return 'flac is not installed'; } })();

/** `wav` encoded by the reference flac encoder with `flags` (-0 … -8, -e…). */
export function flacOf(wav: Uint8Array, flags: string[]): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), 'tsi-flac-'));
  try {
    writeFileSync(join(dir, 'in.wav'), wav);
    execFileSync('flac', ['-s', '-f', ...flags, '-o', join(dir, 'out.flac'), join(dir, 'in.wav')]);
    return new Uint8Array(readFileSync(join(dir, 'out.flac')));
  } finally { rmSync(dir, { recursive: true, force: true }); }
}

/** A two-channel WAV whose channels differ (`left`, `right` of equal length): what stereo decorrelation needs. */
export function stereoWav(left: Float32Array, right: Float32Array, rate: number, bits: 16 | 24): Uint8Array {
  const inter = new Float32Array(left.length * 2);
  left.forEach((v, i) => { inter[2 * i] = v; inter[2 * i + 1] = right[i]!; });
  // Written as mono at twice the frames, then the header says two channels.
  const wav = encodeWav(inter, rate, { bits });
  const v = new DataView(wav.buffer);
  v.setUint16(22, 2, true);
  v.setUint32(28, rate * 2 * (bits / 8), true);
  v.setUint16(32, 2 * (bits / 8), true);
  return wav;
}
