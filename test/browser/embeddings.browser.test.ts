/**
 * The `embedding` backend in the page, in real headless Chromium: tiny_embed read by URL from the
 * Node server's repository, its encoder on onnxruntime-web (wasm), its tokenizer and pooling core's.
 * `/v1/embeddings` (float and base64) and Triton's infer API through the page's handler give the
 * vectors the Node server gives for the same texts, within 1e-5, alone and batched; a text longer
 * than the model's limit is refused as on Node.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../../core/index.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';
import { nodeJson as nodeAt, pageJson } from './cases.js';

const NODE = inject('nodeUrl');
const log = createLogger(() => {}, 0);
type Obj = Record<string, any>;
const nodeJson = (path: string, body: Obj) => nodeAt(NODE, path, body);

function expectClose(got: number[], want: number[]): void {
  expect(got.length).toBe(want.length);
  const worst = Math.max(...got.map((v, i) => Math.abs(v - want[i]!)));
  expect(worst).toBeLessThan(1e-5);
}

/** OpenAI's base64 encoding: little-endian float32. */
function fromBase64(s: string): number[] {
  const bytes = Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  return [...new Float32Array(bytes.buffer)];
}

const TEXTS = ['hello world', 'the cat sat on the mat', 'a b c', 'embeddings in the page'];

let page: BrowserServer;

beforeAll(async () => {
  page = await createServer({ repository: `${NODE}/repository/`, models: ['tiny_embed'], device: 'wasm', log });
});

afterAll(async () => {
  await page?.stop(5000);
});

describe('tiny_embed in the page', () => {
  it('loads as an embedding model and is listed by /v1/models', async () => {
    expect(page.index()).toMatchObject([{ name: 'tiny_embed', version: '1', state: 'READY' }]);
    const r = await page.fetch('/v1/models');
    expect((await r.json()).data.map((m: Obj) => m.id)).toEqual(['tiny_embed']);
  });

  it('answers /v1/embeddings with the Node server\'s vectors, batched and one text at a time', async () => {
    const want = await nodeJson('/v1/embeddings', { model: 'tiny_embed', input: TEXTS, encoding_format: 'float' });
    expect(want.status).toBe(200);
    const batched = await pageJson(page, '/v1/embeddings', { model: 'tiny_embed', input: TEXTS, encoding_format: 'float' });
    expect(batched.status).toBe(200);
    expect(batched.body.usage).toEqual(want.body.usage);
    expect(batched.body.data.map((d: Obj) => d.index)).toEqual([0, 1, 2, 3]);
    for (let i = 0; i < TEXTS.length; i++) {
      expectClose(batched.body.data[i].embedding, want.body.data[i].embedding);
      const alone = await pageJson(page, '/v1/embeddings', { model: 'tiny_embed', input: TEXTS[i] });
      expectClose(alone.body.data[0].embedding, want.body.data[i].embedding);
    }
    // What the official clients ask for by default.
    const b64 = await pageJson(page, '/v1/embeddings', { model: 'tiny_embed', input: TEXTS, encoding_format: 'base64' });
    for (let i = 0; i < TEXTS.length; i++) expectClose(fromBase64(b64.body.data[i].embedding), want.body.data[i].embedding);
  });

  it('serves Triton\'s infer API: text_input [n, 1] → embedding [n, dim], as the Node server does', async () => {
    const req = { inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [2, 1], data: TEXTS.slice(0, 2) }] };
    const want = await nodeJson('/v2/models/tiny_embed/infer', req);
    const got = await pageJson(page, '/v2/models/tiny_embed/infer', req);
    expect(got.status).toBe(200);
    const out = (b: Obj, name: string) => b.outputs.find((o: Obj) => o.name === name);
    expect(out(got.body, 'embedding').shape).toEqual(out(want.body, 'embedding').shape);
    expectClose(out(got.body, 'embedding').data, out(want.body, 'embedding').data);
    expect(out(got.body, 'num_tokens').data).toEqual(out(want.body, 'num_tokens').data);
  });

  it('refuses a text longer than the model\'s limit as the Node server does', async () => {
    const long = Array.from({ length: 200 }, () => 'word').join(' ');
    const want = await nodeJson('/v1/embeddings', { model: 'tiny_embed', input: long });
    const got = await pageJson(page, '/v1/embeddings', { model: 'tiny_embed', input: long });
    expect(want.status).toBe(400);
    expect({ status: got.status, error: got.body.error }).toEqual({ status: want.status, error: want.body.error });
  });
});
