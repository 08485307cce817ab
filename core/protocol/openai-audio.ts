/**
 * `POST /v1/audio/transcriptions` and `/v1/audio/translations` over `whisper` models
 * (core/speech/whisper.ts), as OpenAI's API takes them: multipart/form-data with `file`, `model`,
 * `language`, `prompt`, `response_format` (`json`, `text`, `srt`, `vtt`, `verbose_json`),
 * `temperature` and `timestamp_granularities[]` (`segment`; `word` is refused: it needs the
 * cross-attention alignment heads). The body is read under the server's input limit like every other
 * (`--http-max-input-size`), then parsed by the platform's own multipart reader (`Response.formData`,
 * in Node and in the page). Each file becomes one infer request of the model, so its dynamic batcher
 * gathers concurrent uploads into one encoder batch.
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { decodeString } from '../tensor.js';
import { bad, openAiError } from './openai-answer.js';
import { readWebBody } from './http-body.js';
import type { Segment } from '../speech/whisper.js';

const FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];

/** Whether a loaded model is a whisper model. */
export function isWhisperModel(server: InferenceServer, name: string): boolean {
  try {
    return server.model(name).config.backend === 'whisper';
  } catch {
    return false;
  }
}

const clock = (s: number, sep: string) => {
  const ms = Math.round(s * 1000);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(Math.floor(ms / 3600000))}:${p(Math.floor(ms / 60000) % 60)}:${p(Math.floor(ms / 1000) % 60)}${sep}${p(ms % 1000, 3)}`;
};

/** SubRip and WebVTT captions of the segments. */
export function captions(segments: Segment[], format: 'srt' | 'vtt'): string {
  const sep = format === 'srt' ? ',' : '.';
  const cues = segments.map((s, i) => `${format === 'srt' ? `${i + 1}\n` : ''}${clock(s.start, sep)} --> ${clock(s.end, sep)}\n${s.text.trim()}\n`);
  return (format === 'vtt' ? 'WEBVTT\n\n' : '') + cues.join('\n');
}

/** `POST /v1/audio/transcriptions` (`translate` false) and `/v1/audio/translations`. */
export async function audioRoute(server: InferenceServer, req: Request, translate: boolean, maxInput: number): Promise<Response> {
  try {
    const type = req.headers.get('content-type') ?? '';
    if (!/^multipart\/form-data\s*;/i.test(type)) throw bad(`the request must be multipart/form-data (with 'file' and 'model'), got '${type || 'no Content-Type'}'`);
    const raw = await readWebBody(req, maxInput);
    let form: FormData;
    try {
      form = await new Response(raw as BodyInit, { headers: { 'content-type': type } }).formData();
    } catch (err) {
      throw bad(`the multipart body could not be read: ${(err as Error).message}`);
    }
    const field = (k: string) => {
      const v = form.get(k);
      return typeof v === 'string' ? v : undefined;
    };
    const name = field('model');
    if (!name) throw bad(`'model' is required: the name of a whisper model (GET /v1/models lists them)`, 'model');
    if (!isWhisperModel(server, name)) throw new TsiError('NOT_FOUND', `The model '${name}' does not exist or is not a speech recognition (whisper) model`);
    const file = form.get('file');
    if (file === null || typeof file === 'string') throw bad(`'file' is required: the audio file, as a file part`, 'file');
    const format = field('response_format') ?? 'json';
    if (!FORMATS.includes(format)) throw bad(`'response_format' must be one of ${FORMATS.join(', ')}, got '${format}'`, 'response_format');
    const grains = [...form.getAll('timestamp_granularities[]'), ...form.getAll('timestamp_granularities')].map(String);
    for (const g of grains) if (g !== 'segment') throw bad(`'timestamp_granularities[]' supports 'segment' only, got '${g}'`, 'timestamp_granularities[]');
    const tRaw = field('temperature');
    const temperature = tRaw === undefined ? 0 : Number(tRaw);
    if (!(temperature >= 0 && temperature <= 1)) throw bad(`'temperature' must be a number between 0 and 1, got '${tRaw}'`, 'temperature');
    const timestamps = format === 'srt' || format === 'vtt' || format === 'verbose_json' || grains.includes('segment');
    const language = field('language');
    const prompt = field('prompt');
    const bytes = new Uint8Array(await file.arrayBuffer());
    const batched = (server.model(name).config.max_batch_size ?? 0) > 0;
    const res = await server.infer({
      model_name: name,
      inputs: [{ name: 'audio', datatype: 'BYTES', shape: batched ? [1, 1] : [1], data: [bytes] }],
      outputs: [{ name: 'text' }, { name: 'segments' }],
      parameters: {
        task: translate ? 'translate' : 'transcribe', timestamps, temperature,
        ...(language ? { language } : {}),
        ...(prompt ? { prompt } : {}),
      },
    }).catch((err: unknown) => {
      if (err instanceof TsiError && /'audio'/.test(err.message)) throw Object.assign(new TsiError('INVALID_ARG', err.message.replace(/input 'audio'/, `'file' (${file.name || 'unnamed'})`)), { param: 'file' });
      if (err instanceof TsiError && /'language'/.test(err.message)) throw Object.assign(err, { param: 'language' });
      throw err;
    });
    const text = decodeString((res.outputs.find((o) => o.name === 'text')!.data as Uint8Array[])[0]!).trim();
    const info = JSON.parse(decodeString((res.outputs.find((o) => o.name === 'segments')!.data as Uint8Array[])[0]!)) as { duration: number; language: string; segments: Segment[] };
    if (format === 'text') return new Response(text + '\n', { headers: { 'Content-Type': 'text/plain; charset=utf-8' } });
    if (format === 'srt' || format === 'vtt') return new Response(captions(info.segments, format), { headers: { 'Content-Type': format === 'srt' ? 'application/x-subrip' : 'text/vtt' } });
    const body = format === 'verbose_json'
      ? {
        task: translate ? 'translate' : 'transcribe', language: info.language, duration: info.duration, text,
        segments: info.segments.map((s) => ({ ...s, text: s.text, temperature, avg_logprob: null, compression_ratio: null, no_speech_prob: null })),
      }
      : { text };
    return new Response(JSON.stringify(body), { headers: { 'Content-Type': 'application/json' } });
  } catch (err) {
    return openAiError(err);
  }
}

