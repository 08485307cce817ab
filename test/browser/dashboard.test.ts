/**
 * The live dashboard (`--allow-dashboard`) in headless Chromium against the real Node server: the totals
 * on the page equal the statistics API after N requests, the charts really draw (pixels of the series'
 * colour on the canvases), the load/unload buttons drive explicit model control, and the "try it" form
 * builds a request from the model's metadata. Without a browser: off by default, and covered by
 * --http-restricted-api's statistics category. TSI_DASHBOARD_SCREENSHOT=<png> saves a screenshot (the
 * one in docs/ comes from there).
 */

import { existsSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { describeWith } from '../helpers/capability.js';
import { CHROMIUM, CHROMIUM_ARGS } from './chromium.js';

const withChromium = describeWith(!!process.env.CI, 'Chromium', existsSync(CHROMIUM) ? undefined : `no Chromium at ${CHROMIUM}`);

const simpleInputs = (k: number) => [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => k) },
];
const infer = (s: TestServer, model: string, k: number) => postJson(`${s.url}/v2/models/${model}/infer`, { inputs: simpleInputs(k) });

withChromium('dashboard in Chromium', () => {
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  const N = 13;

  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple', 'add_sub'], allowDashboard: true });
    for (let k = 0; k < N; k++) expect((await infer(s, 'simple', k)).status).toBe(200);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const res = await page.goto(`${s.url}/dashboard?interval=200`);
    expect(res!.status()).toBe(200);
    expect(res!.headers()['content-security-policy']).toMatch(/default-src 'self'/);
    await page.waitForSelector('body[data-polls]');
    // The redirect from /dashboard kept the query.
    expect(await page.textContent('#interval')).toMatch(/every 200 ms/);
    expect(errors).toEqual([]);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const cell = (model: string, name: string) => page.textContent(`#totals tr[data-model="${model}"] td.${name}`);

  it('shows the statistics API\'s totals after N requests', async () => {
    await expect.poll(() => cell('simple', 'requests'), { timeout: 10_000 }).toBe(String(N));
    const st = (await getJson(`${s.url}/v2/models/simple/stats`)).body.model_stats[0];
    const is = st.inference_stats;
    expect(await cell('simple', 'failures')).toBe(String(is.fail.count));
    expect(await cell('simple', 'inferences')).toBe(String(st.inference_count));
    expect(await cell('simple', 'executions')).toBe(String(st.execution_count));
    expect(Number(await cell('simple', 'avg-batch'))).toBeCloseTo(st.inference_count / st.execution_count, 2);
    expect(Number(await cell('simple', 'avg-queue-us'))).toBeCloseTo(is.queue.ns / is.queue.count / 1e3, 0);
    const compute = is.compute_input.ns + is.compute_infer.ns + is.compute_output.ns;
    expect(Number(await cell('simple', 'avg-compute-us'))).toBeCloseTo(compute / is.compute_infer.count / 1e3, 0);
    expect(await cell('add_sub', 'requests')).toBe('0');
    // Models and their states, from the repository index.
    expect(await page.textContent('#models tr[data-model="simple"] td:nth-child(3)')).toBe('READY');
  });

  it('draws the live charts in each series\' colour', async () => {
    // Requests spread over several polls give the requests/s line more than one point.
    for (let i = 0; i < 6; i++) {
      await Promise.all(Array.from({ length: 5 }, (_, k) => infer(s, 'simple', k)));
      await new Promise((r) => setTimeout(r, 120));
    }
    const polls = Number(await page.getAttribute('body', 'data-polls'));
    await page.waitForFunction((n) => Number(document.body.dataset.polls) >= n + 2, polls);
    const counts = await page.evaluate(() => {
      const swatch = document.querySelector<HTMLElement>('#totals tr[data-model="simple"] i.swatch')!;
      const [r, g, b] = getComputedStyle(swatch).backgroundColor.match(/\d+/g)!.map(Number);
      const out: Record<string, number> = {};
      for (const id of ['chart-rps', 'chart-queue', 'chart-compute', 'chart-batch']) {
        const c = document.getElementById(id) as HTMLCanvasElement;
        const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i]! - r!) < 8 && Math.abs(d[i + 1]! - g!) < 8 && Math.abs(d[i + 2]! - b!) < 8 && d[i + 3]! > 200) n++;
        out[id] = n;
      }
      return out;
    });
    for (const [id, n] of Object.entries(counts)) expect(n, id).toBeGreaterThan(20);
    const shot = process.env.TSI_DASHBOARD_SCREENSHOT;
    if (shot) await page.screenshot({ path: shot, fullPage: true });
  });

  it('unloads and loads a model with its buttons', async () => {
    await page.click('#models tr[data-model="add_sub"] button[data-action="unload"]');
    await expect.poll(async () => (await postJson(`${s.url}/v2/repository/index`, {})).body.find((m: { name: string }) => m.name === 'add_sub')?.state, { timeout: 15_000 }).toBe('UNAVAILABLE');
    await page.waitForSelector('#models tr[data-model="add_sub"] button[data-action="load"]');
    await page.click('#models tr[data-model="add_sub"] button[data-action="load"]');
    await expect.poll(async () => (await getJson(`${s.url}/v2/models/add_sub/ready`)).status, { timeout: 15_000 }).toBe(200);
    await page.waitForSelector('#models tr[data-model="add_sub"] button[data-action="unload"]');
  });

  it('builds a request from the model\'s metadata in the try-it form', async () => {
    await page.selectOption('#try-model', 'simple');
    await page.waitForSelector('#try-inputs label[data-input="INPUT1"]');
    expect(await page.inputValue('#try-inputs label[data-input="INPUT0"] .shape')).toBe('[1,16]');
    await page.fill('#try-inputs label[data-input="INPUT0"] .data', JSON.stringify(Array.from({ length: 16 }, (_, i) => i)));
    await page.fill('#try-inputs label[data-input="INPUT1"] .data', JSON.stringify(Array.from({ length: 16 }, () => 100)));
    await page.click('#try button[type="submit"]');
    await page.waitForFunction(() => document.getElementById('try-result')!.textContent!.length > 0);
    const result = JSON.parse((await page.textContent('#try-result'))!);
    expect(result.outputs.find((o: { name: string }) => o.name === 'OUTPUT0').data).toEqual(Array.from({ length: 16 }, (_, i) => i + 100));
  });
});

describe('dashboard access', () => {
  it('is off by default and follows --http-restricted-api\'s statistics category', async () => {
    const plain = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit' });
    const restricted = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', allowDashboard: true, httpRestrictedApi: ['statistics:admin-key=s3cret'],
    });
    try {
      expect((await fetch(`${plain.url}/dashboard/`)).status).toBe(404);
      const refused = await getJson(`${restricted.url}/dashboard/`);
      expect(refused.status).toBe(403);
      expect(refused.body.error).toBe("This API is restricted, expecting header 'admin-key'");
      const ok = await fetch(`${restricted.url}/dashboard/app.js`, { headers: { 'admin-key': 's3cret' } });
      expect(ok.status).toBe(200);
      expect(ok.headers.get('content-type')).toMatch(/^text\/javascript/);
      expect((await fetch(`${restricted.url}/dashboard/../package.json`, { headers: { 'admin-key': 's3cret' } })).status).toBe(404);
      const cfg = await fetch(`${restricted.url}/dashboard/config.json`, { headers: { 'admin-key': 's3cret' } });
      expect(await cfg.json()).toEqual({ model_control_mode: 'explicit', tune_reports: [] });
    } finally {
      await plain.stop();
      await restricted.stop();
    }
  });

  it('lists and serves tune reports, scripts off', async () => {
    const reports = tempRepo({ 'mlp_batch-tune.html': '<!doctype html><title>r</title><svg></svg>', 'notes.txt': 'x' });
    const s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', allowDashboard: true, dashboardTuneReports: reports.path });
    try {
      expect((await getJson(`${s.url}/dashboard/config.json`)).body.tune_reports).toEqual(['mlp_batch-tune.html']);
      const r = await fetch(`${s.url}/dashboard/tune/mlp_batch-tune.html`);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
      expect(await r.text()).toMatch(/<svg>/);
      expect((await fetch(`${s.url}/dashboard/tune/notes.txt`)).status).toBe(404);
    } finally {
      await s.stop();
      reports.cleanup();
    }
  });
});
