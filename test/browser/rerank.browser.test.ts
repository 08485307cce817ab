/**
 * The `classifier` backend in the page, in real headless Chromium: tiny_rerank (BERT-style),
 * tiny_rerank_xlmr (XLM-R-style, no token type ids) and tiny_classify read by URL from the Node
 * server's repository, their encoders on onnxruntime-web (wasm), tokenizers and activations core's.
 * `/v1/rerank`, `/v2/rerank`, `/v1/score`, `/v1/classify` and Triton's infer API through the page's
 * handler give the Node server's answers for the same bodies, within 1e-5 (pairs longer than the
 * limit included), and its refusals word for word.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../../core/index.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';
import { nodeJson as nodeAt, pageJson } from './cases.js';

const NODE = inject('nodeUrl');
const log = createLogger(() => {}, 0);
type Obj = Record<string, any>;
const nodeJson = (path: string, body: Obj) => nodeAt(NODE, path, body);

/** Every number of `got` within 1e-5 of `want`'s, everything else equal (ids and timestamps aside). */
function expectSame(got: unknown, want: unknown, path = '$'): void {
  if (typeof want === 'number') {
    expect(typeof got, path).toBe('number');
    expect(Math.abs((got as number) - want), path).toBeLessThan(1e-5);
  } else if (Array.isArray(want)) {
    expect(Array.isArray(got) && got.length, path).toBe(want.length);
    want.forEach((w, i) => expectSame((got as unknown[])[i], w, `${path}[${i}]`));
  } else if (want && typeof want === 'object') {
    const keys = Object.keys(want).filter((k) => k !== 'id' && k !== 'created');
    expect(Object.keys(got as Obj).filter((k) => k !== 'id' && k !== 'created').sort(), path).toEqual(keys.sort());
    for (const k of keys) expectSame((got as Obj)[k], (want as Obj)[k], `${path}.${k}`);
  } else {
    expect(got, path).toEqual(want);
  }
}

const QUERY = 'what did the cat sit on?';
const DOCS = ['The cat sat on the mat.', 'Triton serves models.', `${'the search query embeds the document '.repeat(12)}tail`, 'a', ''];

let page: BrowserServer;

beforeAll(async () => {
  page = await createServer({ repository: `${NODE}/repository/`, models: ['tiny_rerank', 'tiny_rerank_xlmr', 'tiny_classify'], device: 'wasm', log });
});

afterAll(async () => {
  await page?.stop(5000);
});

describe('cross-encoders in the page', () => {
  it('are listed by /v1/models', async () => {
    const r = await page.fetch('/v1/models');
    expect((await r.json()).data.map((m: Obj) => m.id).sort()).toEqual(['tiny_classify', 'tiny_rerank', 'tiny_rerank_xlmr']);
  });

  it('rerank, score and classify as the Node server does', async () => {
    const calls: [string, Obj][] = [
      ['/v1/rerank', { model: 'tiny_rerank', query: QUERY, documents: DOCS }],
      ['/v2/rerank', { model: 'tiny_rerank_xlmr', query: QUERY, documents: DOCS.map((text) => ({ text })), top_n: 3, return_documents: false }],
      ['/v1/score', { model: 'tiny_rerank_xlmr', text_1: QUERY, text_2: DOCS }],
      ['/v1/score', { model: 'tiny_rerank', text_1: ['a cat', 'the dog'], text_2: ['the mat', 'a search query'] }],
      ['/v1/classify', { model: 'tiny_classify', input: ['The cat sat on the mat.', 'slow server', 'fast tensor!'] }],
    ];
    for (const [path, body] of calls) {
      const want = await nodeJson(path, body);
      expect(want.status, path).toBe(200);
      const got = await pageJson(page, path, body);
      expect(got.status, path).toBe(200);
      expectSame(got.body, want.body, `${path} ${body.model}`);
    }
  });

  it('serves Triton\'s infer API: text_input and text_pair [n, 1] → scores, as the Node server does', async () => {
    const req = {
      inputs: [
        { name: 'text_input', datatype: 'BYTES', shape: [2, 1], data: [QUERY, QUERY] },
        { name: 'text_pair', datatype: 'BYTES', shape: [2, 1], data: DOCS.slice(0, 2) },
      ],
    };
    const want = await nodeJson('/v2/models/tiny_rerank/infer', req);
    const got = await pageJson(page, '/v2/models/tiny_rerank/infer', req);
    expect(got.status).toBe(200);
    expectSame(got.body.outputs, want.body.outputs);
  });

  it('refuses what the Node server refuses, with the same error', async () => {
    for (const [path, body] of [
      ['/v1/rerank', { model: 'tiny_classify', query: 'q', documents: ['d'] }],
      ['/v1/rerank', { model: 'tiny_rerank', query: 'word '.repeat(80), documents: ['d'] }],
      ['/v1/score', { model: 'tiny_rerank', text_1: ['a', 'b'], text_2: ['c', 'd', 'e'] }],
    ] as [string, Obj][]) {
      const want = await nodeJson(path, body);
      const got = await pageJson(page, path, body);
      expect(want.status).toBe(400);
      expect({ status: got.status, error: got.body.error }).toEqual({ status: want.status, error: want.body.error });
    }
  });
});
