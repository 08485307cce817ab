/**
 * Embeddings in the browser build as a site uses them, in headless Chromium driven by playwright-core:
 * the Service Worker (`tsi-sw.js`) serves tiny_embed from a static site with no server behind it and
 * answers an OpenAI client's `POST /v1/embeddings` (the official clients' default base64 and float)
 * with the Node server's vectors, within 1e-5.
 */

import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeWith } from '../helpers/capability.js';
import { chromiumMissing, serviceWorkerPage, startRig, within, type Rig } from './static-server.js';

const withChromium = describeWith(!!process.env.CI, 'Chromium', chromiumMissing());

const TEXTS = ['hello world', 'the cat sat on the mat', 'a service worker embeds'];

withChromium('tiny_embed through the Service Worker', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig(['tiny_embed'], { '/sw.html': serviceWorkerPage('tiny_embed') });
  });
  afterAll(async () => {
    await rig?.close();
  });

  it('answers /v1/embeddings for a site with no server, as the Node server does', async () => {
    const p = await rig.browser.newPage();
    await p.goto(`${rig.site.url}/sw.html`);
    await within(60_000, p.waitForFunction(() => (window as any).controlled, null, { timeout: 60_000 }), 'service worker control');
    const got = await within(60_000, p.evaluate(async (input) => {
      const ask = async (encoding_format: string) => {
        const r = await fetch('/v1/embeddings', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'tiny_embed', input, encoding_format }) });
        return { status: r.status, body: await r.json() };
      };
      const models = await (await fetch('/v1/models')).json();
      return { models: models.data.map((m: any) => m.id), float: await ask('float'), base64: await ask('base64') };
    }, TEXTS), 'embeddings through the service worker');
    const want = await (await fetch(`${rig.node}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ model: 'tiny_embed', input: TEXTS }) })).json();
    expect(got.models).toEqual(['tiny_embed']);
    expect(got.float.status).toBe(200);
    expect(got.float.body.usage).toEqual(want.usage);
    const fromBase64 = (s: string) => [...new Float32Array(Uint8Array.from(Buffer.from(s, 'base64')).buffer)];
    for (let i = 0; i < TEXTS.length; i++) {
      const ref: number[] = want.data[i].embedding;
      for (const v of [got.float.body.data[i].embedding as number[], fromBase64(got.base64.body.data[i].embedding)]) {
        expect(v.length).toBe(ref.length);
        expect(Math.max(...v.map((x, j) => Math.abs(x - ref[j]!)))).toBeLessThan(1e-5);
      }
    }
    await p.close();
  });
});
