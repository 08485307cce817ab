/**
 * Reranking in the browser build as a site uses it, in headless Chromium driven by playwright-core:
 * the Service Worker (`tsi-sw.js`) serves tiny_rerank from a static site with no server behind it and
 * answers `POST /v1/rerank`, `/v2/rerank` and `/v1/score` with the Node server's scores, within 1e-5.
 */

import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeWith } from '../helpers/capability.js';
import { chromiumMissing, serviceWorkerPage, startRig, within, type Rig } from './static-server.js';

const withChromium = describeWith(!!process.env.CI, 'Chromium', chromiumMissing());

const QUERY = 'where did the cat sit?';
const DOCS = ['the cat sat on the mat', 'a service worker reranks', 'triton server'];

withChromium('tiny_rerank through the Service Worker', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig(['tiny_rerank'], { '/sw.html': serviceWorkerPage('tiny_rerank') });
  });
  afterAll(async () => {
    await rig?.close();
  });

  it('answers /v1/rerank, /v2/rerank and /v1/score for a site with no server, as the Node server does', async () => {
    const p = await rig.browser.newPage();
    await p.goto(`${rig.site.url}/sw.html`);
    await within(60_000, p.waitForFunction(() => (window as any).controlled, null, { timeout: 60_000 }), 'service worker control');
    const bodies: [string, unknown][] = [
      ['/v1/rerank', { model: 'tiny_rerank', query: QUERY, documents: DOCS }],
      ['/v2/rerank', { model: 'tiny_rerank', query: QUERY, documents: DOCS, top_n: 2 }],
      ['/v1/score', { model: 'tiny_rerank', text_1: QUERY, text_2: DOCS }],
    ];
    const got = await within(60_000, p.evaluate(async (calls) => Promise.all(calls.map(async ([path, body]) => {
      const r = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    })), bodies), 'rerank through the service worker');
    for (const [i, [path, body]] of bodies.entries()) {
      const want = await (await fetch(`${rig.node}${path}`, { method: 'POST', body: JSON.stringify(body) })).json();
      expect(got[i]!.status, path).toBe(200);
      if (path === '/v1/score') {
        expect(got[i]!.body.data.map((d: any) => d.index)).toEqual(want.data.map((d: any) => d.index));
        got[i]!.body.data.forEach((d: any, j: number) => expect(Math.abs(d.score - want.data[j].score)).toBeLessThan(1e-5));
      } else {
        expect(got[i]!.body.results.map((r: any) => [r.index, r.document.text])).toEqual(want.results.map((r: any) => [r.index, r.document.text]));
        got[i]!.body.results.forEach((r: any, j: number) => expect(Math.abs(r.relevance_score - want.results[j].relevance_score)).toBeLessThan(1e-5));
        expect(got[i]!.body.usage).toEqual(want.usage);
      }
    }
    await p.close();
  });
});
