/**
 * Audio made in the tests: espeak-ng speech written to WAV (real speech, where espeak-ng is installed;
 * .ci/run installs it) and a seeded chirp with noise (everywhere).
 */

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SAMPLE_RATE } from '../../core/speech/audio.js';

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

