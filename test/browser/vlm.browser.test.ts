/**
 * Images into chat in the page (runtime-browser/llm-backend.ts with core/vision/), in real headless
 * Chromium on wasm: the tiny SmolVLM / Idefics3 folder served by vlm-setup.ts's Node server loads in
 * the page (three graphs: vision encoder and embed tokens beside the decoder), and its
 * /v1/chat/completions answers to image + text prompts, alone and mixed with text-only ones, are the
 * Node server's token for token (which test/node/vlm-chat.test.ts holds to transformers.js's); a
 * broken image is a 400 naming the part, in the page as in Node. The fp16 files and Triton's generate
 * with an `image` input answer as the Node server does too.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../../core/index.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';

const NODE = inject('vlmUrl');
const IMAGES = inject('vlmImages');
type Obj = Record<string, any>;

const post = (body: Obj): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
const ask = (text: string, image?: string) => ({
  model: 'tiny_vlm', max_tokens: 10, temperature: 0,
  messages: [{ role: 'user', content: [...(image ? [{ type: 'image_url', image_url: { url: image } }] : []), { type: 'text', text }] }],
});

let page: BrowserServer;

beforeAll(async () => {
  page = await createServer({ repository: `${NODE}/repository/`, device: 'wasm', log: createLogger(() => {}) });
});

afterAll(async () => {
  await page?.stop(5000);
});

describe('vision chat in the page', () => {
  it('answers image + text prompts as the Node server does, alone and mixed with text-only ones', async () => {
    expect(page.index().map((m) => [m.name, m.state])).toEqual([['tiny_vlm', 'READY'], ['tiny_vlm_fp16', 'READY']]);
    const asks = [ask('What is this?', IMAGES[0]), ask('Describe it', IMAGES[1]), ask('hello there'), ask('What is this?', IMAGES[1])];
    const node = await Promise.all(asks.map(async (a) => (await fetch(`${NODE}/v1/chat/completions`, post(a))).json()));
    const alone = await (await page.fetch('/v1/chat/completions', post(asks[0]!))).json();
    expect(alone.choices[0].message.content).toBe(node[0].choices[0].message.content);
    const mixed = await Promise.all(asks.map(async (a) => (await page.fetch('/v1/chat/completions', post(a))).json()));
    expect(mixed.map((m) => m.choices[0].message.content)).toEqual(node.map((m) => m.choices[0].message.content));
    // Two images, the same text: different answers.
    expect(node[0].choices[0].message.content).not.toBe(node[3].choices[0].message.content);
    expect(mixed.map((m) => m.usage.completion_tokens)).toEqual(node.map((m) => m.usage.completion_tokens));
  });

  it('serves the fp16 files and Triton\'s generate with an image input as the Node server does', async () => {
    const fp16 = { ...ask('What is this?', IMAGES[1]), model: 'tiny_vlm_fp16' };
    const [node, mine] = await Promise.all([(await fetch(`${NODE}/v1/chat/completions`, post(fp16))).json(), (await page.fetch('/v1/chat/completions', post(fp16))).json()]);
    expect(mine.choices[0].message.content).toBe(node.choices[0].message.content);
    const gen = { text_input: '<|im_start|>User:<image>What is this?<end_of_utterance>\nAssistant:', image: [IMAGES[0]!.slice(IMAGES[0]!.indexOf(',') + 1)], max_tokens: 10, temperature: 0, exclude_input_in_output: true };
    const nodeGen = await (await fetch(`${NODE}/v2/models/tiny_vlm/generate`, post(gen))).json();
    const pageGen = await (await page.fetch('/v2/models/tiny_vlm/generate', post(gen))).json();
    expect(nodeGen.text_output?.length).toBeGreaterThan(0);
    expect(pageGen.text_output).toBe(nodeGen.text_output);
  });

  it('refuses a broken image naming the part', async () => {
    const r = await page.fetch('/v1/chat/completions', post(ask('look', 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==')));
    expect(r.status).toBe(400);
    expect((await r.json()).error.message).toMatch(/messages\[0\]\.content\[0\].*not a valid PNG/);
  });
});
