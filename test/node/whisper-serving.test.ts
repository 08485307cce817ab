/**
 * The `whisper` backend and OpenAI's audio routes on the real Node server, with the tiny Whisper that
 * scripts/whisper-model.ts generates in the onnx-community layout. The oracle is transformers.js
 * (devDependency) on the same folder: its `automatic-speech-recognition` pipeline's model and
 * feature extractor, greedy, with and without timestamps — the pipeline's features for audio up to
 * 30 s, and for longer audio the whole recording's features through `generate` (its seek loop with
 * timestamps; window after window without). Requests go 1, 4 and 16 at once, so the dynamic batcher
 * gathers them into shared encoder and decoder batches; the tokens must not change.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { env, pipeline, WhisperFeatureExtractor, type AutomaticSpeechRecognitionPipeline } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { audioSamples, encodeWav, SAMPLE_RATE } from '../../core/speech/audio.js';
import { writeWhisperFolder } from '../../scripts/whisper-model.js';
import { getJson, MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { chirp, espeakMissing, flacMissing, flacOf, speechWav } from '../helpers/audio.js';
import { requireCapability } from '../helpers/capability.js';

let server: TestServer;
let repo: string;
let asr: AutomaticSpeechRecognitionPipeline;
let http: HttpClient;
let client: OpenAI;
const MAX_INPUT = 4 << 20;

/** Audio of `seconds`: a chirp with a seeded noise floor, different per seed. */
const clip = (seconds: number, seed: number) => chirp(seconds, seed).map((v, i) => v * (0.5 + 0.5 * Math.sin((i / SAMPLE_RATE) * (1 + seed))));

beforeAll(async () => {
  repo = await mkdtemp(join(tmpdir(), 'tsi-whisper-'));
  await writeWhisperFolder(join(repo, 'whisper', '1'), join(MODELS, 'tiny_gpt', '1', 'tokenizer.json'));
  await writeFile(join(repo, 'whisper', 'config.pbtxt'), 'backend: "whisper"\nmax_batch_size: 16\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n');
  // A cache budget under one window's (64 + 1500 positions of 1 KiB): refused at load, naming the parameter.
  await writeWhisperFolder(join(repo, 'whisper_tight', '1'), join(MODELS, 'tiny_gpt', '1', 'tokenizer.json'));
  await writeFile(join(repo, 'whisper_tight', 'config.pbtxt'), 'backend: "whisper"\nmax_batch_size: 4\nparameters { key: "kv_cache_bytes" value { string_value: "1000000" } }\n');
  server = await startTestServer({ modelRepositories: [repo], maxInputSize: MAX_INPUT });
  http = new HttpClient(server.url.replace('http://', ''));
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  env.localModelPath = repo;
  env.allowRemoteModels = false;
  // transformers.js reads <localModelPath>/<name>/: point it at the version folder.
  asr = await pipeline('automatic-speech-recognition', 'whisper/1', { dtype: 'fp32' }) as AutomaticSpeechRecognitionPipeline;
}, 120_000);

afterAll(async () => {
  await server?.stop();
  await asr?.dispose();
  if (repo) await rm(repo, { recursive: true, force: true });
});

/** transformers.js's tokens for `x`: after the forced tokens, without the final <|endoftext|>. */
async function reference(x: Float32Array, timestamps: boolean): Promise<number[]> {
  const model = asr.model as any;
  const eot = 2047;
  const strip = (seq: bigint[], init: number) => {
    const t = seq.map(Number).slice(init);
    if (t.at(-1) === eot) t.pop();
    return t;
  };
  const init = timestamps ? 3 : 4;
  if (x.length <= 30 * SAMPLE_RATE) {
    const { input_features } = await asr.processor(x);
    const out = await model.generate({ inputs: input_features, return_timestamps: timestamps });
    return strip(out.tolist()[0], init);
  }
  const fe = new WhisperFeatureExtractor({ feature_size: 80, sampling_rate: 16000, hop_length: 160, n_fft: 400, chunk_length: 30, n_samples: x.length, nb_max_frames: 1e9 });
  const { input_features } = await fe(x, { max_length: x.length });
  if (timestamps) return strip((await model.generate({ inputs: input_features, return_timestamps: true })).tolist()[0], init);
  const frames = input_features.dims[2];
  const tokens: number[] = [];
  for (let seek = 0; seek < frames; seek += 3000) {
    const n = Math.min(3000, frames - seek);
    const w = new Float32Array(80 * 3000);
    const src = input_features.slice(null, null, [seek, seek + n]).data as Float32Array;
    for (let m = 0; m < 80; m++) w.set(src.subarray(m * n, (m + 1) * n), m * 3000);
    const { Tensor } = await import('@huggingface/transformers');
    const out = await model.generate({ inputs: new Tensor('float32', w, [1, 80, 3000]), return_timestamps: false });
    tokens.push(...strip(out.tolist()[0], init));
  }
  return tokens;
}

async function served(x: Float32Array, timestamps: boolean): Promise<number[]> {
  const r = await http.infer('whisper', [{ name: 'audio', datatype: 'BYTES', shape: [1, 1], data: [encodeWav(x, SAMPLE_RATE, { float: true })] }], { parameters: { timestamps } });
  return Array.from(r.data<Int32Array>('tokens'));
}

/** The clips: three short ones (espeak-ng speech among them where it is installed) and one of 36 s. */
function clips(): { name: string; x: Float32Array }[] {
  const speech = espeakMissing === undefined ? audioSamples(speechWav('Speech recognition serves many models. The quick brown fox.')).samples : clip(6.2, 4);
  return [
    { name: 'short 4.5 s', x: clip(4.5, 1) },
    { name: 'speech', x: speech },
    { name: 'short 9 s', x: clip(9, 2) },
    { name: 'long 36 s', x: clip(36, 3) },
  ];
}

const refs = new Map<string, number[]>();
async function want(c: { name: string; x: Float32Array }, timestamps: boolean): Promise<number[]> {
  const key = `${c.name}/${timestamps}`;
  if (!refs.has(key)) refs.set(key, await reference(c.x, timestamps));
  return refs.get(key)!;
}

describe('whisper: tokens equal transformers.js', () => {
  for (const timestamps of [false, true]) {
    for (const n of [1, 4, 16]) {
      it(`${n} request(s) at once, ${timestamps ? 'with' : 'without'} timestamps, short and long audio`, async () => {
        const all = clips();
        // One long clip in each batch (the first alone), the short ones around it.
        const batch = Array.from({ length: n }, (_, i) => all[n === 1 || i === 3 ? 3 : i % 3]!);
        const expected: number[][] = [];
        for (const c of batch) expected.push(await want(c, timestamps));
        for (const e of expected) expect(e.length).toBeGreaterThan(0);
        const got = await Promise.all(batch.map((c) => served(c.x, timestamps)));
        got.forEach((g, i) => expect(g, `${batch[i]!.name}`).toEqual(expected[i]));
      }, 300_000);
    }
  }

  it("Triton's infer takes the samples too (audio_pcm, FP32 at 16 kHz): the same tokens as the WAV file", async () => {
    const x = clip(4.5, 1);
    const r = await http.infer('whisper', [{ name: 'audio_pcm', datatype: 'FP32', shape: [1, x.length], data: x }], { parameters: { timestamps: true } });
    expect(Array.from(r.data<Int32Array>('tokens'))).toEqual(await want({ name: 'short 4.5 s', x }, true));
  }, 60_000);

  it("Triton's generate takes the samples as a JSON array and the options as fields", async () => {
    const x = clip(4.5, 1);
    const r = await postJson(`${server.url}/v2/models/whisper/generate`, { audio_pcm: Array.from(x), timestamps: true, language: 'en' });
    expect(r.status).toBe(200);
    expect(r.body.tokens).toEqual(await want({ name: 'short 4.5 s', x }, true));
    expect(typeof r.body.text).toBe('string');
    expect(JSON.parse(r.body.segments).segments.length).toBeGreaterThan(0);
  }, 60_000);

  it('the long clip spans several windows (the seek loop ran)', async () => {
    const long = clips()[3]!;
    const r = await http.infer('whisper', [{ name: 'audio', datatype: 'BYTES', shape: [1, 1], data: [encodeWav(long.x)] }], { parameters: { timestamps: true } });
    const info = JSON.parse(new TextDecoder().decode((r.data<Uint8Array[]>('segments'))[0]));
    expect(info.duration).toBeCloseTo(36, 1);
    expect(Math.max(...info.segments.map((s: { seek: number }) => s.seek))).toBeGreaterThan(0);
  }, 120_000);
});

describe('whisper: the decoder on the in-flight batching engine', () => {
  const stats = async () => (await getJson(`${server.url}/v2/models/whisper/stats`)).body.model_stats[0].whisper_stats as Record<string, number>;

  it('requests join a running decode batch and leave it when their windows end, each with its own tokens', async () => {
    // A first request of five 30 s windows decodes on; the others (4.5 s, 9 s and 36 s: one window,
    // one, two) are sent once it is decoding (the statistics say so, not a timer). Between its windows
    // a recording waits for the encoder, so the rows meet in the engine one way or the other: the
    // others join its running batch, or its next window joins theirs; all finish long before it.
    const long = { name: 'long 150 s', x: clip(150, 6) };
    const all = clips();
    const short = [all[0]!, all[2]!, all[3]!];
    const expectLong = await want(long, false);
    const expectShort = await Promise.all(short.map((c) => want(c, false)));
    const before = await stats();
    const done: string[] = [];
    const first = served(long.x, false).then((t) => (done.push(long.name), t));
    while ((await stats()).decode_steps === before.decode_steps) await new Promise((r) => setTimeout(r, 5));
    const others = await Promise.all(short.map((c) => served(c.x, false).then((t) => (done.push(c.name), t))));
    expect(await first).toEqual(expectLong);
    others.forEach((t, i) => expect(t, short[i]!.name).toEqual(expectShort[i]));
    const after = await stats();
    expect(after.windows - before.windows).toBe(5 + 1 + 1 + 2);
    expect(after.joined_sequences - before.joined_sequences).toBeGreaterThan(0);
    expect(after.max_rows_in_step).toBeGreaterThanOrEqual(2);
    // Mixed lengths finish independently: the shorter recordings are answered while the long one decodes.
    expect(done.at(-1)).toBe(long.name);
  }, 300_000);

  it('a kv_cache_bytes under one window refuses the model at load, naming the parameter and what a window needs', async () => {
    const index = (await postJson(`${server.url}/v2/repository/index`, {})).body as { name: string; state?: string; reason?: string }[];
    const tight = index.find((e) => e.name === 'whisper_tight');
    expect(tight?.state).toBe('UNAVAILABLE');
    expect(tight?.reason).toMatch(/config parameter 'kv_cache_bytes' holds 976 cache positions; a window needs 1564 \(max_length 64 \+ 1500 encoder positions, 1024 bytes each\)/);
  });
});

describe('/v1/audio/transcriptions with the official openai client', () => {
  const wav = () => encodeWav(clip(4.5, 1));
  it('json, text, srt, vtt and verbose_json', async () => {
    const text = (await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav') })).text;
    expect(typeof text).toBe('string');
    const plain = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), response_format: 'text' });
    expect(String(plain).trim()).toBe(text);
    const verbose = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), response_format: 'verbose_json', timestamp_granularities: ['segment'], language: 'en' });
    expect(verbose.duration).toBeCloseTo(4.5, 1);
    expect(verbose.language).toBe('en');
    expect(verbose.segments!.length).toBeGreaterThan(0);
    for (const seg of verbose.segments!) expect(seg.end).toBeGreaterThanOrEqual(seg.start);
    const srt = String(await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), response_format: 'srt' }));
    expect(srt).toMatch(/^1\n\d\d:\d\d:\d\d,\d\d\d --> \d\d:\d\d:\d\d,\d\d\d\n/);
    const vtt = String(await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), response_format: 'vtt' }));
    expect(vtt).toMatch(/^WEBVTT\n\n\d\d:\d\d:\d\d\.\d\d\d --> /);
    // The segments' text is the transcript's, with the timestamps' tokens taken out.
    expect(verbose.segments!.map((s) => s.text).join('').trim().length).toBeGreaterThan(0);
  }, 120_000);

  it('a FLAC upload transcribes as the WAV it was made from', async (ctx) => {
    requireCapability(ctx, !!process.env.CI, 'the flac encoder', flacMissing);
    const w = wav();
    const fromWav = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(w, 'a.wav'), response_format: 'verbose_json' });
    const fromFlac = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(flacOf(w, ['-8']), 'a.flac'), response_format: 'verbose_json' });
    expect(fromFlac).toEqual(fromWav);
  }, 60_000);

  it('translations go through the translate task token', async () => {
    const t = await client.audio.translations.create({ model: 'whisper', file: await toFile(wav(), 'a.wav') });
    expect(typeof t.text).toBe('string');
  }, 60_000);

  it('a malformed file, another format, a bad field and an unknown model are 400/404s naming what is accepted', async () => {
    const refuse = async (p: Promise<unknown>) => p.then(() => { throw new Error('accepted'); }, (e: any) => e);
    const ogg = new TextEncoder().encode('OggS\0\x02 not really');
    let e = await refuse(client.audio.transcriptions.create({ model: 'whisper', file: await toFile(ogg, 'a.ogg') }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/'file' \(a\.ogg\): it is Ogg, not WAV or FLAC; accepted: WAV .* and FLAC/);
    e = await refuse(client.audio.transcriptions.create({ model: 'whisper', file: await toFile(new Uint8Array([82, 73, 70, 70, 0, 0, 0, 0, 87, 65, 86, 69, 1]), 'bad.wav') }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/fmt chunk.*accepted: WAV/);
    e = await refuse(client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), language: 'xx' }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/'language' "xx" is not one of its languages \(en, zh/);
    e = await refuse(client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav'), response_format: 'mp3' as any }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/'response_format' must be one of json, text, srt, verbose_json, vtt/);
    e = await refuse(client.audio.transcriptions.create({ model: 'nope', file: await toFile(wav(), 'a.wav') }));
    expect(e.status).toBe(404);
    // The server still serves.
    expect(typeof (await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(wav(), 'a.wav') })).text).toBe('string');
  }, 60_000);

  it('an upload over --http-max-input-size is refused', async () => {
    const big = encodeWav(clip(20, 5), SAMPLE_RATE, { float: true, channels: 4 });
    expect(big.length).toBeGreaterThan(MAX_INPUT);
    const form = new FormData();
    form.set('model', 'whisper');
    form.set('file', new Blob([big as BlobPart]), 'big.wav');
    const r = await fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
    expect(r.status).toBe(400);
    expect((await r.json()).error.message).toMatch(/size|limit|exceed/i);
  }, 60_000);
});
