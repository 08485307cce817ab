/**
 * A plain static web server and a headless Chromium, for tests and benchmarks that must see the
 * browser build the way a site would serve it — no Vite, no tsi server: `/tsi/` is dist/browser,
 * (`/tsi-bare/` too, without COEP on the scripts),
 * `/models/` the default repository (its `tsi-index.json` generated on the fly), plus the pages a test
 * hands in. `/v2/...` is deliberately 404 here, so any v2 answer a page gets came from a Service Worker.
 */

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Hono } from 'hono';
import { chromium, type Browser } from 'playwright-core';
import { ISOLATION_HEADERS, INDEX_FILE, repositoryIndex, staticFile } from '../../runtime-node/browser-assets.js';
import { listen, type Listener } from '../../runtime-node/http/server.js';
import { createLogger } from '../../core/index.js';
import { startServer } from '../../runtime-node/index.js';
import { MODELS, ROOT } from '../helpers/server.js';
import { CHROMIUM, CHROMIUM_ARGS } from './chromium.js';

export const DIST = join(ROOT, 'dist', 'browser');

export interface Page {
  body: string | Uint8Array;
  /** Serve it cross-origin isolated (COOP/COEP), so the page may use wasm threads. */
  isolated?: boolean;
  type?: string;
}

export interface StaticSite {
  url: string;
  close(): Promise<void>;
}

export async function startStaticSite(pages: Record<string, Page>, repo = MODELS): Promise<StaticSite> {
  const app = new Hono();
  const index = JSON.stringify(await repositoryIndex([repo]));
  for (const [path, p] of Object.entries(pages)) {
    app.get(path, () => new Response(p.body as BodyInit, {
      headers: { 'Content-Type': p.type ?? 'text/html; charset=utf-8', ...(p.isolated ? ISOLATION_HEADERS : {}) },
    }));
  }
  // `/tsi/` is served as docs/browser.md says (COEP on the scripts too, so isolated pages get threads);
  // `/tsi-bare/` without it, as a careless host would.
  for (const [prefix, headers] of [['/tsi/', ISOLATION_HEADERS], ['/tsi-bare/', {}]] as const) {
    app.get(`${prefix}*`, async (c) => {
      const rel = c.req.path.slice(prefix.length);
      // Lets `tsi-sw.js` be registered with scope `/` although it lives under /tsi/.
      const extra: Record<string, string> = rel === 'tsi-sw.js' ? { 'Service-Worker-Allowed': '/' } : {};
      return (await staticFile(DIST, rel, { ...headers, ...extra })) ?? c.text('not found', 404);
    });
  }
  app.get(`/models/${INDEX_FILE}`, () => new Response(index, { headers: { 'Content-Type': 'application/json' } }));
  app.get('/models/*', async (c) => (await staticFile(repo, c.req.path.slice('/models/'.length))) ?? c.text('not found', 404));
  app.all('*', (c) => c.text('not found', 404));
  const l: Listener = await listen(0, '127.0.0.1', { fetch: app.fetch });
  return { url: `http://127.0.0.1:${l.port}`, close: () => l.close() };
}

/**
 * A page that registers the built Service Worker (`tsi-sw.js`, scope `/`) serving `models` from the
 * site's `/models/`, and sets `window.controlled` once the worker controls it.
 */
export function serviceWorkerPage(models: string): Page {
  return {
    body: `<!doctype html><meta charset="utf-8"><title>sw</title><script type="module">
      await navigator.serviceWorker.register('/tsi/tsi-sw.js?repository=/models/&models=${models}', { type: 'module', scope: '/' });
      await navigator.serviceWorker.ready;
      if (!navigator.serviceWorker.controller) await new Promise((r) => navigator.serviceWorker.addEventListener('controllerchange', r, { once: true }));
      window.controlled = true;
    </script>`,
  };
}

/** A test's rig: the Node server (its answers are what the page's must equal), a static site, Chromium. */
export interface Rig {
  node: string;
  site: StaticSite;
  browser: Browser;
  close(): Promise<void>;
}

/** Starts a Rig: the Node server with `models` of the default repository loaded, the site with `pages`. */
export async function startRig(models: string[], pages: Record<string, Page>, browserDemo = false): Promise<Rig> {
  const running = await startServer({
    modelRepositories: [MODELS], httpPort: 0, httpAddress: '127.0.0.1', browserDemo, log: createLogger(() => {}),
    modelControlMode: 'explicit', loadModels: models,
  });
  const site = await startStaticSite(pages);
  const browser = await launchChromium();
  return {
    node: `http://127.0.0.1:${running.http!.port}`, site, browser,
    close: async () => {
      await browser.close();
      await site.close();
      await running.stop(5000);
    },
  };
}

/** Why Chromium-driven tests cannot run here, or undefined when they can. */
export function chromiumMissing(): string | undefined {
  if (!existsSync(CHROMIUM)) return `no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set TSI_CHROMIUM)`;
  if (!existsSync(join(DIST, 'tsi.js'))) return `no browser build at ${DIST} (npm run build:browser)`;
  return undefined;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/** Rejects when `p` takes longer than `ms`: every in-page evaluate gets one, since ORT can hang. */
export function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms))),
  ]);
}
