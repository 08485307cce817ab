/**
 * `POST /v1/embeddings` over `embedding` models (core/encoders/embedding.ts), in OpenAI's shapes: `input` a
 * string or a list of strings, `encoding_format` `float` (lists of numbers) or `base64` (each vector's
 * little-endian float32 bytes, which the official clients ask for by default and decode), `dimensions`
 * for models that allow shorter vectors (the backend refuses it for others), and `usage` token counts.
 * Each text becomes its own infer request, so the model's dynamic batcher gathers them (and those of
 * other clients) into the batches its instances run.
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { encodeString } from '../tensor.js';
import type { InferResponse } from '../types.js';
import { bad, openAiError, readOpenAiBody } from './openai-answer.js';

type Json = Record<string, any>;

/** Whether a loaded model is an embedding model. */
export function isEmbeddingModel(server: InferenceServer, name: string): boolean {
  try {
    return server.model(name).config.backend === 'embedding';
  } catch {
    return false;
  }
}

function base64(v: Float32Array): string {
  const bytes = new Uint8Array(v.length * 4);
  const view = new DataView(bytes.buffer);
  v.forEach((x, i) => view.setFloat32(i * 4, x, true));
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function inputsOf(body: Json): string[] {
  const input = body.input;
  if (typeof input === 'string') return [input];
  if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'string')) return input as string[];
  if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'number' || Array.isArray(s))) {
    throw bad(`'input' as token ids is not supported: send text`, 'input');
  }
  throw bad(`'input' must be a string or a non-empty list of strings`, 'input');
}

/** `POST /v1/embeddings`. */
export async function embeddings(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  try {
    const body = await readOpenAiBody(req, maxInput);
    const name = body.model;
    if (typeof name !== 'string' || name === '') throw bad(`'model' is required: the name of a model (GET /v1/models lists them)`, 'model');
    if (!isEmbeddingModel(server, name)) throw new TsiError('NOT_FOUND', `The model '${name}' does not exist or is not an embedding model (GET /v1/models lists those served)`);
    const texts = inputsOf(body);
    const format = body.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64') throw bad(`'encoding_format' must be "float" or "base64", got ${JSON.stringify(format)}`, 'encoding_format');
    const dims = body.dimensions;
    if (dims !== undefined && dims !== null && (typeof dims !== 'number' || !Number.isInteger(dims) || dims < 1)) {
      throw bad(`'dimensions' must be a positive integer, got ${JSON.stringify(dims)}`, 'dimensions');
    }
    const batched = (server.model(name).config.max_batch_size ?? 0) > 0;
    const answers = await Promise.all(texts.map((text) => server.infer({
      model_name: name,
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: batched ? [1, 1] : [1], data: [encodeString(text)] }],
      outputs: [{ name: 'embedding' }, { name: 'num_tokens' }],
      parameters: typeof dims === 'number' ? { dimensions: dims } : {},
    }).catch((err: unknown) => {
      // The backend's refusal of `dimensions` is about that field.
      if (err instanceof TsiError && typeof dims === 'number' && /'dimensions'/.test(err.message)) throw Object.assign(err, { param: 'dimensions' });
      throw err;
    })));
    let tokens = 0;
    const data = answers.map((r: InferResponse, index) => {
      const v = r.outputs.find((o) => o.name === 'embedding')!.data as Float32Array;
      tokens += Number((r.outputs.find((o) => o.name === 'num_tokens')!.data as Int32Array)[0]);
      return { object: 'embedding', index, embedding: format === 'base64' ? base64(v) : Array.from(v) };
    });
    return new Response(JSON.stringify({ object: 'list', data, model: name, usage: { prompt_tokens: tokens, total_tokens: tokens } }), {
      headers: { 'Content-Type': 'application/json' },
    });
  } catch (err) {
    return openAiError(err);
  }
}
