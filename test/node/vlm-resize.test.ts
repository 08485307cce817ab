/**
 * `do_resize` as transformers.js does it in Node: real SmolVLM folders set `do_resize: true` with
 * `resample: 1`, which transformers.js runs through sharp's lanczos3 resize. tsi computes that resize
 * itself (core/vision/vips-resize.ts); here against sharp and transformers.js on real-sized images
 * (640×480, made here): the 8-bit pixels of sharp's resize exactly (shrinking by under and over 4×,
 * enlarging, one axis each way), the processor's pixel values (PNG exactly, JPEG within its decoders'
 * difference, splitting on), and greedy tokens through the server on a tiny SmolVLM folder with
 * `do_resize: true`, alone and 4 at once with text-only requests.
 */

import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForVision2Seq, AutoProcessor, RawImage, env } from '@huggingface/transformers';
import jpeg from 'jpeg-js';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { Idefics3Processor, resizeLanczos3 } from '../../core/vision/index.js';
import { writeVlmFolder } from '../../scripts/vlm-model.js';
import { encodePng } from '../helpers/png.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceTokens } from '../helpers/vlm-reference.js';

env.allowRemoteModels = false;

const root = join(tmpdir(), `tsi-vlm-resize-${process.pid}`);
const folder = join(root, 'repo', 'tiny_vlm', '1');
const MAX_TOKENS = 10;

/** A photo-like 640×480 RGB image: smooth waves per channel with a little texture. */
function photo(w: number, h: number, seed: number): Uint8Array {
  const d = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      for (let c = 0; c < 3; c++) {
        const v = 128 + 100 * Math.sin(x * (c + 1) * 0.07 + y * 0.05 * seed) * Math.cos(y * 0.03 + c) + ((x * 7919 + y * 104729 + c * seed) % 23) - 11;
        d[(y * w + x) * 3 + c] = Math.max(0, Math.min(255, Math.round(v)));
      }
    }
  }
  return d;
}
const RGB = [photo(640, 480, 3), photo(640, 480, 7)];
const PNGS = RGB.map((d) => encodePng(640, 480, 3, d));
const JPEG = (() => {
  const rgba = new Uint8Array(640 * 480 * 4);
  for (let i = 0; i < 640 * 480; i++) rgba.set([RGB[1]![i * 3]!, RGB[1]![i * 3 + 1]!, RGB[1]![i * 3 + 2]!, 255], i * 4);
  return new Uint8Array(jpeg.encode({ data: rgba, width: 640, height: 480 }, 90).data);
})();
const blob = (b: Uint8Array) => new Blob([b as Uint8Array<ArrayBuffer>]);

let tok: Tokenizer;
const cfg = (dir: string, f: string) => JSON.parse(readFileSync(join(dir, f), 'utf8'));

/** The folder's preprocessor with `do_resize` and the given size / splitting, written beside it as `name`. */
async function variant(name: string, pre: Record<string, unknown>): Promise<{ theirs: any; ours: Idefics3Processor }> {
  const dir = join(root, name);
  cpSync(folder, dir, { recursive: true });
  const merged = { ...cfg(folder, 'preprocessor_config.json'), do_resize: true, resample: 1, ...pre };
  writeFileSync(join(dir, 'preprocessor_config.json'), JSON.stringify(merged));
  env.localModelPath = root + '/';
  const theirs = await AutoProcessor.from_pretrained(name);
  return { theirs, ours: new Idefics3Processor(merged, cfg(dir, 'processor_config.json'), cfg(dir, 'config.json'), name) };
}

async function worstPixel(v: { theirs: any; ours: Idefics3Processor }, image: Uint8Array): Promise<{ worst: number; dims: number[] }> {
  const theirs = await v.theirs('<image>x', [await RawImage.fromBlob(blob(image))]);
  const img = await v.ours.prepare(image, 'image');
  expect(img.dims).toEqual(theirs.pixel_values.dims);
  expect(tok.encode(v.ours.expandPrompt('<image>x', [img]), { addSpecialTokens: false })).toEqual((theirs.input_ids.tolist()[0] as bigint[]).map(Number));
  const want = theirs.pixel_values.data as Float32Array;
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(want[i]! - img.pixels[i]!));
  return { worst, dims: img.dims };
}

beforeAll(async () => {
  await writeVlmFolder(folder);
  tok = Tokenizer.fromJson(readFileSync(join(folder, 'tokenizer.json'), 'utf8'), readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
}, 120_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('the Lanczos resize', () => {
  it('gives sharp\'s lanczos3 pixels, shrinking, enlarging and both', async () => {
    const sizes: [number, number][] = [[256, 192], [100, 75], [97, 73], [2048, 1536], [700, 300], [640, 240]];
    for (const [w, h] of sizes) {
      const theirs = await sharp(Buffer.from(RGB[0]!), { raw: { width: 640, height: 480, channels: 3 } }).resize({ width: w, height: h, fit: 'fill', kernel: 'lanczos3' }).raw().toBuffer();
      const ours = resizeLanczos3({ data: RGB[0]!, width: 640, height: 480, channels: 3 }, w, h);
      let differing = 0;
      for (let i = 0; i < theirs.length; i++) if (ours.data[i] !== theirs[i]) differing++;
      expect({ size: `${w}×${h}`, length: ours.data.length, differing }).toEqual({ size: `${w}×${h}`, length: theirs.length, differing: 0 });
    }
  }, 60_000);

  it('gives transformers.js\'s pixel values on a 640×480 PNG (exactly) and JPEG, splitting on and off', async () => {
    const small = await variant('resize48', { size: { longest_edge: 48 } });
    expect(await worstPixel(small, PNGS[0]!)).toEqual({ worst: 0, dims: [1, 1, 3, 32, 32] });
    // jpeg-js and libjpeg-turbo differ by a few levels (vlm-chat.test.ts); the resize carries that through.
    expect((await worstPixel(small, JPEG)).worst).toBeLessThanOrEqual((2 * 4) / 255 + 1e-6);
    const split = await variant('resize200', { size: { longest_edge: 200 }, do_image_splitting: true });
    const r = await worstPixel(split, PNGS[1]!);
    expect(r.dims).toEqual([1, 7 * 6 + 1, 3, 32, 32]);
    expect(r.worst).toBeLessThan(1e-6);
    // Enlarging: the image brought up to 1280 on its long side, then down to the frame.
    const up = await variant('resize1280', { size: { longest_edge: 1280 } });
    expect((await worstPixel(up, PNGS[0]!)).worst).toBeLessThan(1e-6);
  }, 60_000);
});

describe('a folder with do_resize: true', () => {
  let server: TestServer;
  let model: any;
  let processor: any;

  beforeAll(async () => {
    const pre = { ...cfg(folder, 'preprocessor_config.json'), do_resize: true, resample: 1, size: { longest_edge: 48 } };
    writeFileSync(join(folder, 'preprocessor_config.json'), JSON.stringify(pre));
    writeFileSync(join(root, 'repo', 'tiny_vlm', 'config.pbtxt'), 'backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n');
    env.localModelPath = join(root, 'repo', 'tiny_vlm') + '/';
    processor = await AutoProcessor.from_pretrained('1');
    model = await AutoModelForVision2Seq.from_pretrained('1', { dtype: 'fp32', device: 'cpu' });
    server = await startTestServer({ modelRepositories: [join(root, 'repo')] });
  }, 120_000);

  afterAll(async () => {
    await Promise.all([server?.stop(), model?.dispose()]);
  });

  const content = (image: Uint8Array | undefined, text: string, url: boolean) => [
    ...(image ? [url ? { type: 'image_url', image_url: { url: `data:image/${image[0] === 0xff ? 'jpeg' : 'png'};base64,${Buffer.from(image).toString('base64')}` } } : { type: 'image' }] : []),
    { type: 'text', text },
  ];

  async function reference(image: Uint8Array | undefined, text: string): Promise<number[]> {
    return referenceTokens({ processor, model, tok, maxTokens: MAX_TOKENS }, content(image, text, false), image ? [image] : []);
  }

  it('gives transformers.js\'s greedy tokens for 640×480 images, alone and 4 at once with text-only requests', async () => {
    const asks: [Uint8Array | undefined, string][] = [[PNGS[0], 'What is this?'], [undefined, 'hello there'], [PNGS[1], 'What is this?'], [JPEG, 'Describe']];
    const expected: number[][] = [];
    for (const [image, text] of asks) expected.push(await reference(image, text));
    expect(expected[0]).not.toEqual(expected[2]);
    const ask = (image: Uint8Array | undefined, text: string) => postJson(`${server.url}/v1/chat/completions`, {
      model: 'tiny_vlm', max_tokens: MAX_TOKENS, temperature: 0, messages: [{ role: 'user', content: content(image, text, true) }],
    });
    const one = await ask(...asks[0]!);
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.choices[0].message.content).toBe(tok.decode(expected[0]!));
    const all = await Promise.all(asks.map(([image, text]) => ask(image, text)));
    // The JPEG's pixels differ a little from sharp's decode, so its tokens are only checked to be served.
    all.forEach((r, i) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      if (asks[i]![0] !== JPEG) expect({ i, text: r.body.choices[0].message.content }).toEqual({ i, text: tok.decode(expected[i]!) });
    });
  }, 120_000);
});
