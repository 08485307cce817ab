/**
 * fp16 vision-language folders: the tiny SmolVLM's `_fp16` files (scripts/vlm-model.ts: float16
 * weights, embed_tokens giving float16 inputs_embeds, the encoder float16 image_features, the decoder
 * taking float16 inputs_embeds with an fp16 KV cache and logits), served with `variant: "fp16"`
 * against transformers.js with `dtype: 'fp16'` on the same files: greedy tokens alone and 4 at once
 * with text-only requests. Then an encoder taking float16 pixel_values too (which transformers.js
 * cannot feed) served with the same answers, and a graph of another float type refused by name.
 */

import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForVision2Seq, AutoProcessor, env } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { GraphBuilder, encodeModel } from '../../graph/onnx-builder.js';
import { tinyVlmSpec, writeVlmFolder } from '../../scripts/vlm-model.js';
import { encodePng } from '../helpers/png.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceTokens } from '../helpers/vlm-reference.js';

env.allowRemoteModels = false;

const root = join(tmpdir(), `tsi-vlm-fp16-${process.pid}`);
const repo = join(root, 'repo');
const MAX_TOKENS = 10;
const PBTXT = (variant: string) => `backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "variant" value { string_value: "${variant}" } }\n`;

function pattern(width: number, height: number, seed: number): Uint8Array {
  const data = new Uint8Array(width * height * 3);
  for (let i = 0; i < data.length; i++) data[i] = (i * seed + ((i * i) >> 3)) % 256;
  return encodePng(width, height, 3, data);
}
const IMAGES = [pattern(20, 13, 37), pattern(41, 29, 91)];

let tok: Tokenizer;
let processor: any;
let model: any;
let server: TestServer;

const content = (image: number | undefined, text: string, url: boolean) => [
  ...(image !== undefined ? [url ? { type: 'image_url', image_url: { url: `data:image/png;base64,${Buffer.from(IMAGES[image]!).toString('base64')}` } } : { type: 'image' }] : []),
  { type: 'text', text },
];

async function reference(image: number | undefined, text: string): Promise<number[]> {
  return referenceTokens({ processor, model, tok, maxTokens: MAX_TOKENS }, content(image, text, false), image !== undefined ? [IMAGES[image]!] : []);
}

const ask = (name: string, image: number | undefined, text: string) => postJson(`${server.url}/v1/chat/completions`, {
  model: name, max_tokens: MAX_TOKENS, temperature: 0, messages: [{ role: 'user', content: content(image, text, true) }],
});

beforeAll(async () => {
  const folder = join(repo, 'vlm_fp16', '1');
  await writeVlmFolder(folder, tinyVlmSpec(), { variants: ['fp16'] });
  writeFileSync(join(repo, 'vlm_fp16', 'config.pbtxt'), PBTXT('fp16'));
  // The same folder, its encoder taking float16 pixel_values too.
  const halfPixels = join(repo, 'vlm_fp16_pixels', '1');
  await writeVlmFolder(halfPixels, tinyVlmSpec(), { variants: ['fp16'], halfPixels: true });
  writeFileSync(join(repo, 'vlm_fp16_pixels', 'config.pbtxt'), PBTXT('fp16'));
  // An encoder giving double features: it does not load, and says which graph and output.
  const f64 = join(repo, 'vlm_f64', '1');
  await writeVlmFolder(f64);
  const g = new GraphBuilder('f64', { opset: 17 });
  g.input('pixel_values', 'FLOAT', ['b', 'n', 3, 32, 32]);
  g.op('Cast', ['pixel_values'], { to: 11 }, 'image_features');
  g.output('image_features', 'DOUBLE', ['b', 'n', 3, 32, 32]);
  writeFileSync(join(f64, 'onnx', 'vision_encoder.onnx'), encodeModel(g.spec()));
  writeFileSync(join(repo, 'vlm_f64', 'config.pbtxt'), 'backend: "llm"\n');
  tok = Tokenizer.fromJson(readFileSync(join(folder, 'tokenizer.json'), 'utf8'), readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
  env.localModelPath = join(repo, 'vlm_fp16') + '/';
  processor = await AutoProcessor.from_pretrained('1');
  model = await AutoModelForVision2Seq.from_pretrained('1', { dtype: 'fp16', device: 'cpu' });
  server = await startTestServer({ modelRepositories: [repo] });
}, 120_000);

afterAll(async () => {
  await Promise.all([server?.stop(), model?.dispose()]);
  rmSync(root, { recursive: true, force: true });
});

describe('an fp16 vision-language folder', () => {
  const ASKS: [number | undefined, string][] = [[0, 'What is this?'], [undefined, 'hello there'], [1, 'What is this?'], [1, 'Describe it']];
  let expected: number[][];
  beforeAll(async () => {
    expected = [];
    for (const [image, text] of ASKS) expected.push(await reference(image, text));
  }, 60_000);

  it('gives transformers.js\'s greedy tokens (dtype fp16), alone and 4 at once with text-only requests', async () => {
    expect(expected.flat().length).toBeGreaterThan(ASKS.length * 3);
    expect(expected[0]).not.toEqual(expected[2]);
    const one = await ask('vlm_fp16', ...ASKS[0]!);
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.choices[0].message.content).toBe(tok.decode(expected[0]!));
    const all = await Promise.all(ASKS.map(([image, text]) => ask('vlm_fp16', image, text)));
    all.forEach((r, i) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect({ i, text: r.body.choices[0].message.content }).toEqual({ i, text: tok.decode(expected[i]!) });
    });
  }, 60_000);

  it('feeds float16 pixel_values to an encoder that takes them', async () => {
    // The pixels rounded to float16 move the features by ~1e-3; these seeded weights keep the tokens.
    const r = await ask('vlm_fp16_pixels', ...ASKS[2]!);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.choices[0].message.content).toBe(tok.decode(expected[2]!));
  });

  it('refuses an encoder of another float type by name', async () => {
    const index = (await postJson(`${server.url}/v2/repository/index`, {})).body as { name: string; reason?: string }[];
    expect(index.find((e) => e.name === 'vlm_f64')?.reason).toBe("model 'vlm_f64': 1/onnx/vision_encoder.onnx output 'image_features' is float64; tsi serves float32 and float16 vision-language graphs");
    expect((await ask('vlm_fp16', undefined, 'still serving')).status).toBe(200);
  });
});
