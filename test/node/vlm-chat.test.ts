/**
 * Images into chat: the tiny Idefics3 / SmolVLM folder (scripts/vlm-model.ts, the onnx-community
 * layout) served by the real Node server, against transformers.js (the independent reference) on the
 * same files: the processor's pixel values and prompt ids; greedy tokens through /v1/chat/completions
 * for image + text prompts at 1 and at 8 concurrent requests mixed with text-only ones (and once with
 * the official `openai` client); the refusals (a broken image, a data URL that is not an image, an
 * http URL when URLs are off, a private address when they are on, with a listener that must see no
 * connection); an image over the pixel bound refused before it is decoded; two images with the
 * same text giving different tokens and no shared prefix cache; and a 4032×3024 photo prepared off
 * the server's thread (image-pool.ts): health and a text-only chat answered while it is, and the
 * server's event loop delay a fraction of what the pixel step blocks a thread for.
 */

import { once } from 'node:events';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForVision2Seq, AutoProcessor, RawImage, Tensor, env } from '@huggingface/transformers';
import jpeg from 'jpeg-js';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { Idefics3Processor, decodeImage, decodePng, idefics3Pixels } from '../../core/vision/index.js';
import { imageUrlFetcher, isPrivateAddress } from '../../runtime-node/http/image-urls.js';
import { pullModel } from '../../runtime-node/llm/pull.js';
import { startFakeHub } from '../helpers/fake-hub.js';
import { writeVlmFolder } from '../../scripts/vlm-model.js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { encodePng } from '../helpers/png.js';

env.allowRemoteModels = false;

const root = join(tmpdir(), `tsi-vlm-${process.pid}`);
const folder = join(root, 'repo', 'tiny_vlm', '1');
const MAX_TOKENS = 12;
let server: TestServer;
let urlServer: TestServer;
let tok: Tokenizer;

/** Two images of unlike sizes and channels (RGB 20×13, RGBA 41×29): both resized to the 32×32 frame. */
function pattern(width: number, height: number, channels: number, seed: number): Uint8Array {
  const data = new Uint8Array(width * height * channels);
  for (let i = 0; i < data.length; i++) data[i] = (i * seed + ((i * i) >> 3)) % 256;
  return encodePng(width, height, channels, data);
}
const IMAGES = [pattern(20, 13, 3, 37), pattern(41, 29, 4, 91), pattern(32, 32, 3, 53), pattern(17, 40, 3, 71)];
const dataUrl = (png: Uint8Array) => `data:image/png;base64,${Buffer.from(png).toString('base64')}`;
const TEXTS = ['What is in this picture?', 'Describe it', 'a fox', 'Count the stars please'];

type Ask = { image?: number; text: string };
const messagesOf = (a: Ask, url = true) => [{
  role: 'user',
  content: [...(a.image !== undefined ? [url ? { type: 'image_url', image_url: { url: dataUrl(IMAGES[a.image]!) } } : { type: 'image' }] : []), { type: 'text', text: a.text }],
}];

let processor: any;
let model: any;

/** transformers.js's greedy tokens for one request (processor, then generate), ending before EOS. */
async function reference(a: Ask): Promise<number[]> {
  const text = processor.apply_chat_template(messagesOf(a, false), { add_generation_prompt: true });
  let inputs: any;
  if (a.image !== undefined) {
    const image = await RawImage.fromBlob(new Blob([IMAGES[a.image]! as Uint8Array<ArrayBuffer>]));
    inputs = await processor(text, [image]);
  } else {
    const ids = tok.encode(text, { addSpecialTokens: false });
    inputs = { input_ids: new Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]), attention_mask: new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]) };
  }
  const seq = ((await model.generate({ ...inputs, max_new_tokens: MAX_TOKENS, do_sample: false })) as Tensor).tolist()[0] as bigint[];
  const gen = seq.slice(inputs.input_ids.dims[1]).map(Number);
  const eos = gen.indexOf(tok.eosId!);
  return eos >= 0 ? gen.slice(0, eos) : gen;
}

const chat = (url: string, a: Ask | { messages: unknown[] }, extra: Record<string, unknown> = {}) =>
  postJson(`${url}/v1/chat/completions`, { model: 'tiny_vlm', max_tokens: MAX_TOKENS, temperature: 0, messages: 'messages' in a ? a.messages : messagesOf(a), ...extra });

beforeAll(async () => {
  await writeVlmFolder(folder);
  // A text-only model beside it: image parts to it are refused by name.
  cpSync(join(MODELS, 'tiny_gpt'), join(root, 'repo', 'tiny_gpt'), { recursive: true });
  writeFileSync(join(root, 'repo', 'tiny_vlm', 'config.pbtxt'), 'backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n');
  tok = Tokenizer.fromJson(readFileSync(join(folder, 'tokenizer.json'), 'utf8'), readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
  env.localModelPath = join(root, 'repo', 'tiny_vlm') + '/';
  processor = await AutoProcessor.from_pretrained('1');
  model = await AutoModelForVision2Seq.from_pretrained('1', { dtype: 'fp32', device: 'cpu' });
  [server, urlServer] = await Promise.all([
    startTestServer({ modelRepositories: [join(root, 'repo')] }),
    startTestServer({ modelRepositories: [join(root, 'repo')], allowImageUrls: true }),
  ]);
}, 300_000);

afterAll(async () => {
  await Promise.all([server?.stop(), urlServer?.stop(), model?.dispose()]);
  rmSync(root, { recursive: true, force: true });
});

describe('the processor', () => {
  it('gives transformers.js\'s pixel values and prompt ids', async () => {
    const cfg = (f: string) => JSON.parse(readFileSync(join(folder, f), 'utf8'));
    const ours = new Idefics3Processor(cfg('preprocessor_config.json'), cfg('processor_config.json'), cfg('config.json'), 'tiny_vlm');
    for (const png of IMAGES) {
      const theirs = await processor('<image>x', [await RawImage.fromBlob(new Blob([png as Uint8Array<ArrayBuffer>]))]);
      const img = await ours.prepare(png, 'image');
      expect(img.dims).toEqual(theirs.pixel_values.dims);
      const want = theirs.pixel_values.data as Float32Array;
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(want[i]! - img.pixels[i]!));
      expect(worst).toBeLessThan(1e-6);
      const ids = tok.encode(ours.expandPrompt('<image>x', [img]), { addSpecialTokens: false });
      expect(ids).toEqual((theirs.input_ids.tolist()[0] as bigint[]).map(Number));
    }
    // Our PNG decoder gives sharp's pixels (RGBA kept as 4 channels).
    const dec = await decodePng(IMAGES[1]!);
    const raw = await RawImage.fromBlob(new Blob([IMAGES[1]! as Uint8Array<ArrayBuffer>]));
    expect([dec.width, dec.height, dec.channels]).toEqual([raw.width, raw.height, raw.channels]);
    expect(Buffer.from(dec.data).equals(Buffer.from(raw.data))).toBe(true);
  });

  it('decodes the PNG kinds sharp writes (interlaced, palette, grey, 16-bit) to sharp\'s pixels', async () => {
    // sharp is transformers.js's decoder in Node (a dependency of the devDependency).
    const sharp = (await import('sharp')).default;
    const w = 23, h = 17;
    const rgb = Buffer.from(new Uint8Array(w * h * 3).map((_, i) => (i * 29 + (i >> 4)) % 256));
    const raw = sharp(rgb, { raw: { width: w, height: h, channels: 3 } });
    const kinds: [string, Buffer][] = [
      ['interlaced', await raw.clone().png({ progressive: true }).toBuffer()],
      ['palette', await raw.clone().png({ palette: true, colours: 16 }).toBuffer()],
      ['grey', await raw.clone().greyscale().png().toBuffer()],
      ['16-bit', await raw.clone().toColourspace('rgb16').png().toBuffer()],
    ];
    for (const [kind, png] of kinds) {
      const ours = await decodePng(new Uint8Array(png));
      const theirs = await sharp(png).raw().toBuffer({ resolveWithObject: true });
      expect([kind, ours.width, ours.height, ours.channels]).toEqual([kind, theirs.info.width, theirs.info.height, theirs.info.channels]);
      let worst = 0;
      for (let i = 0; i < ours.data.length; i++) worst = Math.max(worst, Math.abs(ours.data[i]! - theirs.data[i]!));
      expect([kind, worst]).toEqual([kind, 0]);
    }
  });

  it('splits images into frames as transformers.js does (do_image_splitting)', async () => {
    // The same folder's processor with splitting on: a 41×29 image becomes a 2 × 2 grid and the whole image.
    const split = join(root, 'split');
    mkdirSync(split, { recursive: true });
    for (const f of ['processor_config.json', 'config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(folder, f), join(split, f));
    const pre = { ...JSON.parse(readFileSync(join(folder, 'preprocessor_config.json'), 'utf8')), do_image_splitting: true };
    writeFileSync(join(split, 'preprocessor_config.json'), JSON.stringify(pre));
    env.localModelPath = root + '/';
    const theirsProc = await AutoProcessor.from_pretrained('split');
    env.localModelPath = join(root, 'repo', 'tiny_vlm') + '/';
    const ours = new Idefics3Processor(pre, JSON.parse(readFileSync(join(folder, 'processor_config.json'), 'utf8')), JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')), 'split');
    for (const png of [IMAGES[1]!, IMAGES[3]!]) {
      const theirs = await theirsProc('<image>x', [await RawImage.fromBlob(new Blob([png as Uint8Array<ArrayBuffer>]))]);
      const img = await ours.prepare(png, 'image');
      expect(img.dims).toEqual(theirs.pixel_values.dims);
      expect(img.dims[1]).toBeGreaterThan(1);
      const want = theirs.pixel_values.data as Float32Array;
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(want[i]! - img.pixels[i]!));
      expect(worst).toBeLessThan(1e-6);
      expect(tok.encode(ours.expandPrompt('<image>x', [img]), { addSpecialTokens: false })).toEqual((theirs.input_ids.tolist()[0] as bigint[]).map(Number));
    }
  });

  it('decodes JPEG close to sharp (jpeg-js), and serves it', async () => {
    const w = 24, h = 18;
    const rgba = new Uint8Array(w * h * 4);
    for (let i = 0; i < w * h; i++) rgba.set([(i * 7) % 256, (i * 3) % 256, 255 - ((i * 5) % 256), 255], i * 4);
    const jpg = new Uint8Array(jpeg.encode({ data: rgba, width: w, height: h }, 90).data);
    const ours = await decodeImage(jpg, 'image');
    const raw = await RawImage.fromBlob(new Blob([jpg as Uint8Array<ArrayBuffer>]));
    expect([ours.width, ours.height, ours.channels]).toEqual([raw.width, raw.height, raw.channels]);
    let worst = 0;
    for (let i = 0; i < ours.data.length; i++) worst = Math.max(worst, Math.abs(ours.data[i]! - raw.data[i]!));
    // IDCT rounding differs between jpeg-js and libjpeg-turbo by a step or two.
    expect(worst).toBeLessThanOrEqual(4);
    const r = await chat(server.url, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/jpeg;base64,${Buffer.from(jpg).toString('base64')}` } }, { type: 'text', text: 'hi' }] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.usage.prompt_tokens).toBeGreaterThan(16);
  });
});

describe('vision chat', () => {
  const ASKS: Ask[] = [
    { image: 0, text: TEXTS[0]! }, { text: TEXTS[1]! }, { image: 1, text: TEXTS[0]! }, { text: TEXTS[2]! },
    { image: 1, text: TEXTS[3]! }, { image: 0, text: TEXTS[2]! }, { text: TEXTS[3]! }, { image: 0, text: TEXTS[1]! },
  ];
  let expected: number[][];
  beforeAll(async () => {
    expected = [];
    for (const a of ASKS) expected.push(await reference(a));
  }, 120_000);

  it('gives transformers.js\'s greedy tokens at 1 and at 8 concurrent requests, images and text mixed', async () => {
    expect(expected.flat().length).toBeGreaterThan(ASKS.length * 3);
    // The two images give different answers to the same text (else the test could not tell them apart).
    expect(expected[0]).not.toEqual(expected[2]);
    const one = await chat(server.url, ASKS[0]!);
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.choices[0].message.content).toBe(tok.decode(expected[0]!));
    const answers = await Promise.all(ASKS.map((a) => chat(server.url, a)));
    answers.forEach((r, i) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect({ i, text: r.body.choices[0].message.content, n: r.body.usage.completion_tokens }).toEqual({ i, text: tok.decode(expected[i]!), n: expected[i]!.length });
    });
  }, 120_000);

  it('answers the official openai client', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
    const r = await client.chat.completions.create({
      model: 'tiny_vlm', max_tokens: MAX_TOKENS, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(IMAGES[1]!) } }, { type: 'text', text: TEXTS[3]! }] }],
    });
    expect(r.choices[0]!.message.content).toBe(tok.decode(expected[4]!));
  });

  it('keeps two images with the same text apart in the prefix cache', async () => {
    const text = 'Which colours are there here?';
    // Images no earlier request sent (the cache keeps whole blocks of earlier prompts).
    const [a, b] = [await reference({ image: 2, text }), await reference({ image: 3, text })];
    expect(a).not.toEqual(b);
    const first = await chat(server.url, { image: 2, text });
    const other = await chat(server.url, { image: 3, text });
    const again = await chat(server.url, { image: 2, text });
    expect(first.body.choices[0].message.content).toBe(tok.decode(a));
    expect(other.body.choices[0].message.content).toBe(tok.decode(b));
    expect(again.body.choices[0].message.content).toBe(tok.decode(a));
    const prompt = first.body.usage.prompt_tokens;
    const cached = (r: typeof first) => r.body.usage.prompt_tokens_details?.cached_tokens ?? 0;
    // The other image shares only the text before the image ("<|im_start|>User:<fake…><global-img>"); the same image hits.
    expect(cached(other)).toBeLessThan(8);
    expect(cached(again)).toBeGreaterThan(8);
    expect(cached(again)).toBeLessThan(prompt);
  });
});

describe('tsi-node pull', () => {
  it('pulls a SmolVLM-layout repo with one variant\'s three graphs, and it serves images', async () => {
    // The repo as the Hub would hold it: a second precision (copies named _q4) and a model card stay there.
    const hubDir = join(root, 'hub', 'vlm');
    cpSync(folder, hubDir, { recursive: true });
    for (const g of ['vision_encoder', 'embed_tokens', 'decoder_model_merged']) copyFileSync(join(hubDir, 'onnx', `${g}.onnx`), join(hubDir, 'onnx', `${g}_q4.onnx`));
    writeFileSync(join(hubDir, 'README.md'), '# card\n');
    const hub = await startFakeHub();
    hub.add('onnx-community/Tiny-SmolVLM', hubDir);
    const repository = join(root, 'pulled');
    try {
      const r = await pullModel({ repo: 'onnx-community/Tiny-SmolVLM', repository, hubUrl: hub.url, name: 'tiny_vlm' });
      expect(r).toMatchObject({ kind: 'llm', variant: 'model' });
      expect(readdirSync(join(repository, 'tiny_vlm', '1', 'onnx')).sort()).toEqual(['decoder_model_merged.onnx', 'embed_tokens.onnx', 'vision_encoder.onnx']);
      for (const f of ['preprocessor_config.json', 'processor_config.json', 'config.json', 'tokenizer.json']) expect(existsSync(join(repository, 'tiny_vlm', '1', f)), f).toBe(true);
      expect(existsSync(join(repository, 'tiny_vlm', '1', 'README.md'))).toBe(false);
      const q4 = await pullModel({ repo: 'onnx-community/Tiny-SmolVLM', repository: join(root, 'pulled_q4'), hubUrl: hub.url, variant: 'q4' });
      expect(q4.files.map((f) => f.path).filter((p) => p.startsWith('onnx/')).sort()).toEqual(['onnx/decoder_model_merged_q4.onnx', 'onnx/embed_tokens_q4.onnx', 'onnx/vision_encoder_q4.onnx']);
      const pulled = await startTestServer({ modelRepositories: [repository] });
      try {
        const a = await chat(pulled.url, { image: 1, text: TEXTS[3]! });
        expect(a.status, JSON.stringify(a.body)).toBe(200);
        expect(a.body.choices[0].message.content).toBe(tok.decode(await reference({ image: 1, text: TEXTS[3]! })));
      } finally {
        await pulled.stop();
      }
    } finally {
      await hub.close();
    }
  }, 120_000);
});

describe('a photo off the server\'s thread', () => {
  it('keeps answering health and a text-only chat while a 4032×3024 photo is prepared', async () => {
    // A photo-sized PNG that compresses well (the request stays small; decoding it is 12 megapixels' work).
    const [W, H] = [4032, 3024];
    const rgb = new Uint8Array(W * H * 3);
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) rgb.set([x & 255, y & 255, ((x + y) >> 5) & 255], (y * W + x) * 3);
    }
    const png = encodePng(W, H, 3, rgb);
    const url = dataUrl(png);
    // How long the pixel step blocks a thread that runs it: here, in this process (the server's).
    const cfg = (f: string) => JSON.parse(readFileSync(join(folder, f), 'utf8'));
    const pre = cfg('preprocessor_config.json');
    const blocked = async (run: () => Promise<unknown>) => {
      const lag = monitorEventLoopDelay({ resolution: 10 });
      lag.enable();
      await run();
      // The delay is recorded when the timer next fires.
      await new Promise((r) => setTimeout(r, 40));
      lag.disable();
      return lag.max / 1e6;
    };
    const inThread = await blocked(() => idefics3Pixels({ pre, side: pre.max_image_size.longest_edge, bytes: png, what: 'image' }));
    const order: string[] = [];
    let healthy = 0;
    const served = await blocked(async () => {
      const image = chat(server.url, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What is it?' }] }] })
        .then((r) => (order.push('image'), r));
      const text = chat(server.url, { text: 'hello' }).then((r) => (order.push('text'), r));
      let done = false;
      void image.finally(() => (done = true));
      while (!done) {
        const h = await getJson(`${server.url}/v2/health/ready`);
        if (h.status === 200 && !done) healthy++;
      }
      expect((await image).status).toBe(200);
      expect((await text).status).toBe(200);
    });
    // Health answered while the photo was in flight, the text-only chat before it; the server's thread
    // was never held for long (a fraction of what the pixel step holds a thread for).
    expect(healthy).toBeGreaterThan(0);
    expect(order).toEqual(['text', 'image']);
    expect(inThread).toBeGreaterThan(100);
    expect(served, `server's event loop delay ${served.toFixed(0)} ms with a pool; in-thread pixel step ${inThread.toFixed(0)} ms`).toBeLessThan(inThread / 2);
  }, 60_000);
});

describe('refusals', () => {
  const part = (url: string) => ({ messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url } }] }] });
  const refused = async (srv: TestServer, url: string, says: RegExp) => {
    const r = await chat(srv.url, part(url));
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.message).toMatch(/messages\[0\]\.content\[1\]/);
    expect(r.body.error.message).toMatch(says);
  };

  it('refuses an image over the pixel bound (PNG and JPEG) before decoding it, naming the part and the limit', async () => {
    // A PNG whose header claims 8000×6000: its pixels would be 144 MB as RGB; the file is tiny.
    const png = encodePng(8, 6, 3, new Uint8Array(8 * 6 * 3));
    new DataView(png.buffer, png.byteOffset).setUint32(16, 8000);
    new DataView(png.buffer, png.byteOffset).setUint32(20, 6000);
    const limit = /the image is 8000×6000 \(48000000 pixels\), more than the 40000000 pixels tsi decodes/;
    await refused(server, dataUrl(png), limit);
    // A JPEG whose frame header (SOF0) says the same.
    const jpg = new Uint8Array(jpeg.encode({ data: new Uint8Array(8 * 6 * 4), width: 8, height: 6 }, 90).data);
    const sof = jpg.findIndex((b, i) => b === 0xff && jpg[i + 1] === 0xc0);
    jpg.set([6000 >> 8, 6000 & 255, 8000 >> 8, 8000 & 255], sof + 5);
    await refused(server, `data:image/jpeg;base64,${Buffer.from(jpg).toString('base64')}`, limit);
    expect((await chat(server.url, { text: 'hello' })).status).toBe(200);
  });

  it('refuses a broken image, a data URL that is no image, and an http URL when URLs are off', async () => {
    const broken = new Uint8Array(IMAGES[0]!.slice(0, 60));
    await refused(server, dataUrl(broken), /not a valid PNG/);
    await refused(server, `data:image/png;base64,${Buffer.from('hello, not an image').toString('base64')}`, /PNG or JPEG/);
    await refused(server, `data:text/plain;base64,${Buffer.from('hello').toString('base64')}`, /'text\/plain', not an image/);
    await refused(server, 'http://example.com/cat.png', /--allow-image-urls/);
    // A text-only model takes no image parts.
    const gpt = await postJson(`${server.url}/v1/chat/completions`, { model: 'tiny_gpt', max_tokens: 2, ...part(dataUrl(IMAGES[0]!)) });
    expect(gpt.status).toBe(400);
    expect(gpt.body.error.message).toBe("messages[0].content[1]: model 'tiny_gpt' takes no images (it is not a vision-language model)");
    // The server still serves.
    expect((await chat(server.url, { text: 'hello' })).status).toBe(200);
  });

  it('fetches an allowed URL within its size and time bounds, and follows no redirect', async () => {
    // A local listener stands in for a public host: the test lets its address through.
    const { createServer: createHttp } = await import('node:http');
    const site = createHttp((req, res) => {
      if (req.url === '/cat.png') res.end(Buffer.from(IMAGES[0]!));
      else if (req.url === '/moved') res.writeHead(302, { location: '/cat.png' }).end();
      else if (req.url === '/slow') setTimeout(() => res.end('late'), 2000);
      else res.writeHead(404).end();
    });
    site.listen(0, '127.0.0.1');
    await once(site, 'listening');
    const base = `http://images.test:${(site.address() as { port: number }).port}`;
    const fetchImage = imageUrlFetcher({ timeoutMs: 300, resolve: async () => [{ address: '127.0.0.1', family: 4 }], refuse: () => false });
    try {
      expect(Buffer.from(await fetchImage(`${base}/cat.png`, 1 << 20)).equals(Buffer.from(IMAGES[0]!))).toBe(true);
      await expect(fetchImage(`${base}/cat.png`, 100)).rejects.toThrow('the image at the URL is larger than 100 bytes');
      await expect(fetchImage(`${base}/moved`, 1 << 20)).rejects.toThrow('the image URL answered HTTP 302 (redirects are not followed)');
      await expect(fetchImage(`${base}/gone`, 1 << 20)).rejects.toThrow('the image URL answered HTTP 404');
      await expect(fetchImage(`${base}/slow`, 1 << 20)).rejects.toThrow('did not answer within 300 ms');
      await expect(fetchImage('ftp://images.test/cat.png', 1 << 20)).rejects.toThrow('only http and https');
    } finally {
      site.closeAllConnections();
      site.close();
    }
  });

  it('refuses private addresses with URLs on, before connecting', async () => {
    let connections = 0;
    const listener: Server = createServer((s) => {
      connections++;
      s.destroy();
    });
    listener.listen(0, '127.0.0.1');
    await once(listener, 'listening');
    const port = (listener.address() as { port: number }).port;
    try {
      await refused(urlServer, `http://127.0.0.1:${port}/cat.png`, /127\.0\.0\.1, a private, loopback or link-local address/);
      await refused(urlServer, `http://localhost:${port}/cat.png`, /private, loopback or link-local/);
      await refused(urlServer, `http://[::ffff:127.0.0.1]:${port}/cat.png`, /private, loopback or link-local/);
      expect(connections).toBe(0);
    } finally {
      listener.close();
    }
    for (const a of ['10.1.2.3', '172.20.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', 'fd00::1', 'fe80::1', '::ffff:10.0.0.1', '64:ff9b::7f00:1']) expect([a, isPrivateAddress(a)]).toEqual([a, true]);
    for (const a of ['93.184.216.34', '8.8.8.8', '2606:4700::1111']) expect([a, isPrivateAddress(a)]).toEqual([a, false]);
  });

});
