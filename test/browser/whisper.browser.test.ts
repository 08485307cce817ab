/**
 * The `whisper` backend in the page, in real headless Chromium: the default repository's tiny Whisper
 * read by URL from the Node server, its encoder and merged decoder on onnxruntime-web (wasm), the WAV
 * decoding, log-mel features and decoding core's. `/v1/audio/transcriptions` through the page's
 * handler (a multipart upload, as the official clients send it) answers what the Node server answers
 * for the same file: the text, and with verbose_json the same segments; two uploads at once are
 * batched and still answer the same; an Ogg file is refused naming what is accepted.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../../core/index.js';
import { encodeWav } from '../../core/speech/audio.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';

const NODE = inject('nodeUrl');
const log = createLogger(() => {}, 0);

/** A 3 s tone sweep, the same in Node and the page. */
function clip(seconds: number, f0: number): Uint8Array {
  const n = Math.round(seconds * 16000);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = 0.4 * Math.sin(2 * Math.PI * (f0 * (i / 16000) + 300 * (i / 16000) ** 2));
  return encodeWav(x);
}

function form(wav: Uint8Array, format: string, name = 'a.wav'): FormData {
  const f = new FormData();
  f.set('model', 'whisper');
  f.set('response_format', format);
  f.set('file', new Blob([wav as BlobPart]), name);
  return f;
}

let page: BrowserServer;

beforeAll(async () => {
  page = await createServer({ repository: `${NODE}/repository/`, models: ['whisper'], device: 'wasm', log });
});

afterAll(async () => {
  await page?.stop(5000);
});

describe('whisper in the page', () => {
  it('answers /v1/audio/transcriptions as the Node server does: json one at a time, verbose_json two at once', async () => {
    const wavs = [clip(3, 200), clip(4, 500)];
    const node = (w: Uint8Array, format: string) => fetch(`${NODE}/v1/audio/transcriptions`, { method: 'POST', body: form(w, format) }).then((r) => r.json());
    const inPage = async (w: Uint8Array, format: string) => {
      const r = await page.fetch('/v1/audio/transcriptions', { method: 'POST', body: form(w, format) });
      expect(r.status).toBe(200);
      return r.json();
    };
    for (const w of wavs) expect(await inPage(w, 'json')).toEqual(await node(w, 'json'));
    const want = await Promise.all(wavs.map((w) => node(w, 'verbose_json')));
    expect(want[0].segments.length).toBeGreaterThan(0);
    expect(await Promise.all(wavs.map((w) => inPage(w, 'verbose_json')))).toEqual(want);
  });

  it('refuses an Ogg file naming what is accepted', async () => {
    const r = await page.fetch('/v1/audio/transcriptions', { method: 'POST', body: form(new TextEncoder().encode('OggS\0\x02 rest of an ogg page'), 'json', 'a.ogg') });
    expect(r.status).toBe(400);
    expect((await r.json()).error.message).toMatch(/it is Ogg, not WAV or FLAC; accepted: WAV/);
  });
});
