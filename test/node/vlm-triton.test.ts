/**
 * Images for Triton users: the tiny SmolVLM folder through Triton's generate endpoint and gRPC's
 * ModelStreamInfer, with the images in an `image` BYTES input (Triton's vLLM backend's input: one image
 * an element, base64; the file's bytes and data: URLs also taken) and `<image>` written in
 * `text_input` where each goes. Against transformers.js on the same prompt text and images: greedy
 * tokens over HTTP and gRPC, 8 concurrent generate requests mixed with text-only ones, two images in
 * one prompt; the prefix cache keyed by the image bytes; the refusals (a text model, a broken image,
 * a count of `<image>` unlike the images').
 */

import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForVision2Seq, AutoProcessor, env } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { writeVlmFolder } from '../../scripts/vlm-model.js';
import { grpcClient, streamAll, type GrpcTestClient } from '../helpers/grpc.js';
import { encodePng } from '../helpers/png.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceTokens } from '../helpers/vlm-reference.js';

env.allowRemoteModels = false;

const root = join(tmpdir(), `tsi-vlm-triton-${process.pid}`);
const repo = join(root, 'repo');
const MAX_TOKENS = 10;

function pattern(width: number, height: number, seed: number): Uint8Array {
  const data = new Uint8Array(width * height * 3);
  for (let i = 0; i < data.length; i++) data[i] = (i * seed + ((i * i) >> 3)) % 256;
  return encodePng(width, height, 3, data);
}
const IMAGES = [pattern(20, 13, 37), pattern(41, 29, 91), pattern(32, 32, 53), pattern(17, 40, 71)];
const b64 = (i: number) => Buffer.from(IMAGES[i]!).toString('base64');

let tok: Tokenizer;
let processor: any;
let model: any;
let server: TestServer;
let grpc: GrpcTestClient;

/** SmolVLM's template for one user turn (what a Triton client writes itself): `<image>` where each image goes. */
const promptOf = (images: number, text: string) => `<|im_start|>User:${images ? '<image>'.repeat(images) : ' '}${text}<end_of_utterance>\nAssistant:`;

async function reference(images: number[], text: string): Promise<number[]> {
  const content = [...images.map(() => ({ type: 'image' })), { type: 'text', text }];
  expect(processor.apply_chat_template([{ role: 'user', content }], { add_generation_prompt: true })).toBe(promptOf(images.length, text));
  return referenceTokens({ processor, model, tok, maxTokens: MAX_TOKENS }, content, images.map((i) => IMAGES[i]!));
}

const generate = (name: string, body: Record<string, unknown>) =>
  postJson(`${server.url}/v2/models/${name}/generate`, { max_tokens: MAX_TOKENS, temperature: 0, exclude_input_in_output: true, ...body });
const ask = (images: number[], text: string) => generate('tiny_vlm', { text_input: promptOf(images.length, text), ...(images.length ? { image: images.map(b64) } : {}) });

beforeAll(async () => {
  const folder = join(repo, 'tiny_vlm', '1');
  await writeVlmFolder(folder);
  writeFileSync(join(repo, 'tiny_vlm', 'config.pbtxt'), 'backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n');
  // A text model with the auto-completed inputs (so it has an `image` input, which it refuses).
  cpSync(join(MODELS, 'tiny_gpt', '1'), join(repo, 'plain_gpt', '1'), { recursive: true });
  writeFileSync(join(repo, 'plain_gpt', 'config.pbtxt'), 'backend: "llm"\n');
  tok = Tokenizer.fromJson(readFileSync(join(folder, 'tokenizer.json'), 'utf8'), readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
  env.localModelPath = join(repo, 'tiny_vlm') + '/';
  processor = await AutoProcessor.from_pretrained('1');
  model = await AutoModelForVision2Seq.from_pretrained('1', { dtype: 'fp32', device: 'cpu' });
  server = await startTestServer({ modelRepositories: [repo], grpcPort: 0, grpcAddress: '127.0.0.1' });
  grpc = grpcClient(`127.0.0.1:${server.grpc!.port}`);
}, 120_000);

afterAll(async () => {
  grpc?.close();
  await Promise.all([server?.stop(), model?.dispose()]);
  rmSync(root, { recursive: true, force: true });
});

describe('images through generate and gRPC', () => {
  const ASKS: [number[], string][] = [
    [[0], 'What is in this picture?'], [[], 'Describe it'], [[1], 'What is in this picture?'], [[], 'a fox'],
    [[1], 'Count the stars please'], [[0, 1], 'Compare them'], [[], 'Count the stars please'], [[0], 'Describe it'],
  ];
  let expected: number[][];
  beforeAll(async () => {
    expected = [];
    for (const [images, text] of ASKS) expected.push(await reference(images, text));
  }, 120_000);

  it('gives transformers.js\'s greedy tokens through generate, alone and 8 at once with text-only requests', async () => {
    expect(expected[0]).not.toEqual(expected[2]);
    const one = await ask(...ASKS[0]!);
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.text_output).toBe(tok.decode(expected[0]!));
    const all = await Promise.all(ASKS.map(([images, text]) => ask(images, text)));
    all.forEach((r, i) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect({ i, text: r.body.text_output }).toEqual({ i, text: tok.decode(expected[i]!) });
    });
  }, 120_000);

  it('takes the image as its bytes or a data: URL too, and echoes the prompt as sent', async () => {
    const text = ASKS[2]![1];
    const raw = await generate('tiny_vlm', { text_input: promptOf(1, text), image: [`data:image/png;base64,${b64(1)}`] });
    expect(raw.body.text_output).toBe(tok.decode(expected[2]!));
    const echoed = await generate('tiny_vlm', { text_input: promptOf(1, text), image: [b64(1)], exclude_input_in_output: false });
    expect(echoed.body.text_output).toBe(promptOf(1, text) + tok.decode(expected[2]!));
    // gRPC: ModelStreamInfer with the PNG's bytes as the element (a BYTES element is length-prefixed raw).
    const el = (b: Uint8Array) => Buffer.concat([Buffer.from(Uint32Array.of(b.length).buffer), Buffer.from(b)]);
    const msgs = await streamAll(grpc, [{
      model_name: 'tiny_vlm',
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1] }, { name: 'image', datatype: 'BYTES', shape: [1] }],
      raw_input_contents: [el(Buffer.from(promptOf(1, text))), el(IMAGES[1]!)],
      parameters: { max_tokens: { int64_param: MAX_TOKENS }, temperature: { double_param: 0 }, exclude_input_in_output: { bool_param: true } },
    }]);
    const out = msgs.map((m) => Buffer.from(m.infer_response.raw_output_contents[0]).subarray(4).toString()).join('');
    expect(out).toBe(tok.decode(expected[2]!));
  }, 60_000);

  it('keeps two images with the same text apart in the prefix cache', async () => {
    const text = 'Which colours are there here?';
    const [a, b] = [await reference([2], text), await reference([3], text)];
    expect(a).not.toEqual(b);
    const first = await ask([2], text);
    const other = await ask([3], text);
    const again = await ask([2], text);
    expect([first, other, again].map((r) => r.body.text_output)).toEqual([tok.decode(a), tok.decode(b), tok.decode(a)]);
  });

  it('refuses images to a text model, a broken image, and a prompt whose <image>s do not match', async () => {
    const refused = async (name: string, body: Record<string, unknown>, says: string | RegExp) => {
      const r = await generate(name, body);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatch(says);
    };
    await refused('plain_gpt', { text_input: 'hi <image>', image: [b64(0)] }, "model 'plain_gpt' takes no 'image' input (it is not a vision-language model)");
    await refused('tiny_vlm', { text_input: promptOf(1, 'x'), image: ['bm90IGFuIGltYWdl'] }, /input 'image'\[0\]: the bytes are not an image tsi decodes \(PNG or JPEG\)/);
    await refused('tiny_vlm', { text_input: promptOf(1, 'x'), image: ['%%%'] }, /input 'image'\[0\]: neither PNG or JPEG bytes, their base64, nor a data: URL/);
    await refused('tiny_vlm', { text_input: promptOf(0, 'x'), image: [b64(0)] }, /'text_input' of model 'tiny_vlm' holds 0 '<image>' for the 1 image\(s\) of input 'image'/);
    expect((await ask([0], 'still serving')).status).toBe(200);
  });
});
