/**
 * The browser build as a site would use it, driven in headless Chromium by playwright-core from Node:
 * the bundle holds no Node-only code and keeps ORT in a chunk of its own; a plain static page imports
 * `tsi.js` with `<script type="module">` and finds ORT's wasm by itself (one thread, no isolation);
 * a cross-origin-isolated page gets wasm threads without hanging; a Service Worker answers v2 requests
 * (JSON and binary, fetch-shaped as curl would send them) for a site that has no server; and the demo
 * served by `tsi-node serve --browser-demo` shows the page and the server agreeing.
 */

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../core/index.js';
import { startServer, type RunningServer } from '../../runtime-node/index.js';
import { referenceMlpBatch } from '../../scripts/gen-models.js';
import { MODELS, binaryBody } from '../helpers/server.js';
import { describeWith } from '../helpers/capability.js';
import { DIST, chromiumMissing, launchChromium, startStaticSite, within, type StaticSite } from './static-server.js';

const withChromium = describeWith(!!process.env.CI, 'Chromium', chromiumMissing());

/** A page that imports the bundle the way the docs say, and exposes the server to the test. */
const page = (dir = 'tsi', models?: string[]) => `<!doctype html><meta charset="utf-8"><title>tsi</title>
<script type="module">
  import { createServer } from './${dir}/tsi.js';
  window.server = await createServer({ repository: './models/'${models ? `, models: ${JSON.stringify(models)}` : ''} });
</script>`;

// Past the first page, pages load only the models they use (an explicit list instead of the index).
const SW_MODELS = ['simple', 'image_preprocess'];
const SW_SHIM = `import { serveInServiceWorker } from '/tsi/tsi-sw.js';
serveInServiceWorker({ repository: '/models/', models: ${JSON.stringify(SW_MODELS)} });`;

const SW_PAGE = (register: string) => `<!doctype html><meta charset="utf-8"><title>sw</title>
<script type="module">
  const reg = await navigator.serviceWorker.register(${register});
  await navigator.serviceWorker.ready;
  if (!navigator.serviceWorker.controller) await new Promise((r) => navigator.serviceWorker.addEventListener('controllerchange', r, { once: true }));
  window.controlled = true;
</script>`;

const ints = (n: number, k: number) => Array.from({ length: n }, (_, i) => ((i * 7 + k) % 23) - 11);

withChromium('the browser build in a static site', () => {
  let site: StaticSite;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    site = await startStaticSite({
      '/plain.html': { body: page() },
      '/isolated.html': { body: page('tsi', ['mlp_batch']), isolated: true },
      '/isolated-bare.html': { body: page('tsi-bare', ['add_sub']), isolated: true },
      '/sw.js': { body: SW_SHIM, type: 'text/javascript' },
      '/sw-shim.html': { body: SW_PAGE(`'/sw.js', { type: 'module' }`) },
      '/sw-direct.html': { body: SW_PAGE(`'/tsi/tsi-sw.js?repository=/models/&models=${SW_MODELS.join(',')}', { type: 'module', scope: '/' }`) },
    });
    browser = await launchChromium();
  });
  afterAll(async () => {
    for (const c of contexts) await c.close().catch(() => {});
    await browser?.close();
    await site?.close();
  });

  async function open(path: string): Promise<{ p: Page; requests: string[]; errors: string[] }> {
    const ctx = await browser.newContext();
    contexts.push(ctx);
    const p = await ctx.newPage();
    const requests: string[] = [];
    const errors: string[] = [];
    p.on('request', (r) => requests.push(r.url()));
    p.on('pageerror', (e) => errors.push(e.message));
    await p.goto(`${site.url}${path}`);
    return { p, requests, errors };
  }

  const ready = (p: Page, what: string) => within(60_000, p.waitForFunction(() => (window as any).server, null, { timeout: 60_000 }), what);

  it('holds no Node-only code, and keeps onnxruntime-web in a chunk of its own', () => {
    const js: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(d, e.name));
        else if (e.name.endsWith('.js')) js.push(join(d, e.name));
      }
    };
    walk(DIST);
    expect(js.length).toBeGreaterThan(3);
    for (const f of js) {
      const src = readFileSync(f, 'utf8');
      expect(/\bfrom\s*["'`]node:|import\(\s*["'`]node:|require\(\s*["'`]node:/.test(src), f).toBe(false);
      // ORT's own bundle names node:os in a branch only Node takes; nothing of tsi's may name a node:
      // module at all (as a string: an object key spelled `node:` in minified code is not one).
      if (!/ort\.bundle/.test(f)) expect(src.match(/["'`]node:[a-z_/]*/)?.[0], f).toBeUndefined();
    }
    // The pthread-worker hang: ORT must not sit in, or be statically imported by, the page's entry graph.
    const entry = readFileSync(join(DIST, 'tsi.js'), 'utf8');
    const runtime = js.filter((f) => /runtime-browser/.test(f)).map((f) => readFileSync(f, 'utf8')).join('\n');
    expect(`${entry}\n${runtime}`).not.toMatch(/import\s*\{[^}]*\}\s*from\s*["'`][^"'`]*ort\.bundle/);
    expect(runtime).toMatch(/import\(\s*["'`]\.\/ort\.bundle[^"'`]*["'`]\s*\)/);
    expect(readdirSync(join(DIST, 'assets')).filter((f) => f.endsWith('.wasm'))).toHaveLength(1);
  });

  it('loads from a plain static page: wasm found beside the bundle, one thread without isolation', async () => {
    const { p, requests, errors } = await open('/plain.html');
    await ready(p, 'createServer on the plain page');
    const r = await within(30_000, p.evaluate(async (x) => {
      const s = (window as any).server;
      const out = await s.infer({ model: 'simple', inputs: { INPUT0: Int32Array.from(x.a), INPUT1: Int32Array.from(x.b) } });
      return { isolated: crossOriginIsolated, threads: s.environment.numThreads, sum: Array.from(out.OUTPUT0), ready: s.ready(), devices: s.instances('simple') };
    }, { a: ints(16, 1), b: ints(16, 2) }), 'infer on the plain page');
    expect(r).toMatchObject({ isolated: false, threads: 1, ready: true, devices: [{ device: 'wasm' }] });
    expect(r.sum).toEqual(ints(16, 1).map((v, i) => v + ints(16, 2)[i]!));
    expect(requests.some((u) => /\/tsi\/assets\/ort-wasm-simd-threaded[^/]*\.wasm$/.test(u)), requests.join('\n')).toBe(true);
    expect(errors).toEqual([]);
  });

  it('uses wasm threads on a cross-origin-isolated page, without hanging', async () => {
    const { p, errors } = await open('/isolated.html');
    await ready(p, 'createServer on the isolated page');
    const input = Array.from({ length: 4 * 1024 }, (_, i) => Math.fround(Math.sin(i) * 0.5));
    const r = await within(60_000, p.evaluate(async (x) => {
      const s = (window as any).server;
      const out = await s.infer({ model: 'mlp_batch', inputs: { INPUT: Float32Array.from(x) } });
      return { isolated: crossOriginIsolated, threads: s.environment.numThreads, cores: navigator.hardwareConcurrency, y: Array.from(out.OUTPUT as Float32Array) };
    }, input), 'infer on the isolated page');
    expect(r.isolated).toBe(true);
    expect(r.threads).toBe(Math.max(1, Math.min(4, r.cores)));
    const ref = referenceMlpBatch(Float32Array.from(input), 4);
    let maxDiff = 0;
    r.y.forEach((v, i) => (maxDiff = Math.max(maxDiff, Math.abs(v - ref[i]!))));
    expect(maxDiff).toBeLessThan(1e-3);
    expect(errors).toEqual([]);
  });

  it('stays on one thread, instead of hanging, when an isolated page\'s scripts lack COEP', async () => {
    const { p } = await open('/isolated-bare.html');
    const warnings: string[] = [];
    p.on('console', (m) => m.type() === 'warning' && warnings.push(m.text()));
    await ready(p, 'createServer on the isolated page with bare scripts');
    const r = await within(30_000, p.evaluate(async () => {
      const s = (window as any).server;
      const out = await s.infer({ model: 'add_sub', inputs: { INPUT0: new Float32Array(16).fill(1), INPUT1: new Float32Array(16).fill(2) } });
      return { isolated: crossOriginIsolated, threads: s.environment.numThreads, blocked: s.environment.threadsBlocked, sum: Array.from(out.OUTPUT0) };
    }), 'infer with bare scripts');
    expect(r).toMatchObject({ isolated: true, threads: 1, blocked: expect.stringMatching(/served without Cross-Origin-Embedder-Policy/) });
    expect(r.sum).toEqual(new Array(16).fill(3));
  });

  for (const [how, path] of [['a root sw.js that imports tsi-sw.js', '/sw-shim.html'], ['tsi-sw.js registered directly with ?repository=', '/sw-direct.html']] as const) {
    it(`answers v2 requests from a Service Worker (${how})`, async () => {
      const { p } = await open(path);
      await within(60_000, p.waitForFunction(() => (window as any).controlled, null, { timeout: 60_000 }), 'service worker control');
      const a = ints(16, 3);
      const b = ints(16, 4);
      const header = {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
        outputs: [{ name: 'OUTPUT1', parameters: { binary_data: true } }],
      };
      const bin = binaryBody(header, [new Uint8Array(Int32Array.from(a).buffer), new Uint8Array(Int32Array.from(b).buffer)]);
      const r = await within(60_000, p.evaluate(async (x) => {
        const ready = await fetch('/v2/models/simple/ready');
        const serverReady = await fetch('/v2/health/ready');
        const index = await (await fetch('/v2/repository/index', { method: 'POST' })).json();
        const meta = await (await fetch('/v2')).json();
        const json = await (await fetch('/v2/models/simple/infer', {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: x.a },
            { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: x.b },
          ] }),
        })).json();
        const res = await fetch('/v2/models/simple/infer', {
          method: 'POST', body: new Uint8Array(x.body), headers: { 'Inference-Header-Content-Length': String(x.headerLength), 'Content-Type': 'application/octet-stream' },
        });
        const buf = new Uint8Array(await res.arrayBuffer());
        const hl = Number(res.headers.get('Inference-Header-Content-Length'));
        const diff = Array.from(new Int32Array(buf.slice(hl).buffer));
        const missing = await fetch('/v2/models/nope');
        const elsewhere = await fetch('/not-v2');
        return { ready: ready.status, serverReady: serverReady.status, index, name: meta.name, json, diff, missing: [missing.status, await missing.json()], elsewhere: elsewhere.status };
      }, { a, b, body: Array.from(bin.body), headerLength: bin.headerLength }), 'v2 requests through the service worker');
      expect(r.ready).toBe(200);
      // import() is not allowed in a Service Worker, so JavaScript models (and what uses them) stay
      // UNAVAILABLE there, with that reason, and strict readiness says so; ONNX models serve.
      const js = r.index.filter((e: any) => e.state !== 'READY');
      expect(js).toEqual([{ name: 'image_preprocess', version: '1', state: 'UNAVAILABLE', reason: expect.stringMatching(/cannot load in a Service Worker/) }]);
      expect(r.serverReady).toBe(400);
      expect(r.name).toBe('triton');
      expect(r.json.outputs.find((o: any) => o.name === 'OUTPUT0').data).toEqual(a.map((v, i) => v + b[i]!));
      expect(r.diff).toEqual(a.map((v, i) => v - b[i]!));
      expect(r.missing).toEqual([404, { error: "Request for unknown model: 'nope' is not found" }]);
      expect(r.elsewhere).toBe(404); // not ours: passed through to the static server
    });
  }
});

withChromium('the demo page served by tsi-node serve --browser-demo', () => {
  let running: RunningServer;
  let browser: Browser;
  beforeAll(async () => {
    running = await startServer({
      modelRepositories: [MODELS], httpPort: 0, httpAddress: '127.0.0.1', browserDemo: true, log: createLogger(() => {}),
    });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await running?.stop(5000);
  });

  it('runs a model in the page and on the server and shows the same answers', async () => {
    const p = await browser.newPage();
    const res = await p.goto(`http://127.0.0.1:${running.http!.port}/demo`);
    expect(res?.headers()['cross-origin-embedder-policy']).toBe('require-corp');
    await within(60_000, p.waitForSelector('#run:not([disabled])', { timeout: 60_000 }), 'demo start');
    expect(await p.$eval('#env', (e) => e.textContent)).toMatch(/crossOriginIsolated: true/);
    await p.selectOption('#model', 'image_classifier');
    await p.fill('#runs', '3');
    await p.fill('#batch', '2');
    await p.click('#run');
    await within(60_000, p.waitForSelector('#verdict[data-same]', { timeout: 60_000 }), 'demo run');
    expect(await p.$eval('#verdict', (e) => [e.getAttribute('data-same'), e.textContent])).toEqual(['true', expect.stringMatching(/^Same answers/)]);
    expect(await p.$$eval('#results tbody tr', (rows) => rows.map((r) => r.children[0]!.textContent))).toEqual(['this page', 'tsi-node']);
  });
});
