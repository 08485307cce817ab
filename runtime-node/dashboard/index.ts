/**
 * The live dashboard (`tsi-node serve --allow-dashboard`): a static page at /dashboard/ on the HTTP
 * port that reads the server's own APIs (repository index, statistics, metadata, load/unload, infer)
 * from the browser, so it shows exactly what those APIs say and needs no state on the server. This
 * module only serves the assets (assets/: plain ESM, no build step) and a small config.json (the model
 * control mode, for the load/unload buttons, and the tune reports found in `tuneReports`).
 *
 * Access: /dashboard is in the `statistics` category (core/extensions.ts httpCategory), so
 * --http-restricted-api and --api-key cover it like the statistics API; each API call the page makes is
 * checked by its own category too. The page is sent with a strict CSP (scripts and styles from itself
 * only, API calls to its own origin).
 */

import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';
import type { InferenceServer } from '../../core/index.js';
import { staticFile } from '../browser-assets.js';

export interface DashboardOptions {
  /** A folder of `tsi-node tune` HTML reports to list and serve under /dashboard/tune/. */
  tuneReports?: string;
}

const PAGE_HEADERS = {
  'Content-Security-Policy': "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
};

/** Tune reports are self-contained: inline styles and SVG, no scripts at all. */
const REPORT_HEADERS = {
  'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
};

/**
 * The assets folder, beside this file in the source tree; from dist/runtime-node/dashboard/ it is the
 * package's runtime-node/dashboard/assets (tsc does not copy non-TS files).
 */
export function dashboardAssets(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'assets');
  if (existsSync(beside)) return beside;
  return join(here, '..', '..', '..', 'runtime-node', 'dashboard', 'assets');
}

/** The dashboard routes, for createHttpApp's `extend`. */
export function dashboardRoutes(server: InferenceServer, opts: DashboardOptions = {}): (app: Hono) => void {
  const assets = dashboardAssets();
  return (app) => {
    app.get('/dashboard', (c) => c.redirect(`/dashboard/${new URL(c.req.url).search}`));
    app.get('/dashboard/config.json', async (c) => c.json({
      model_control_mode: server.options.modelControlMode,
      tune_reports: await tuneReports(opts.tuneReports),
    }, 200, PAGE_HEADERS));
    app.get('/dashboard/tune/:file{[^/]+\\.html}', async (c) => {
      const r = opts.tuneReports ? await staticFile(opts.tuneReports, c.req.param('file')!, REPORT_HEADERS) : undefined;
      return r ?? c.json({ error: 'Not Found' }, 404);
    });
    app.get('/dashboard/*', async (c) => {
      const rel = c.req.path.slice('/dashboard/'.length) || 'index.html';
      return (await staticFile(assets, rel, PAGE_HEADERS)) ?? c.json({ error: 'Not Found' }, 404);
    });
  };
}

async function tuneReports(dir: string | undefined): Promise<string[]> {
  if (!dir) return [];
  try {
    return (await readdir(dir)).filter((f) => f.endsWith('.html')).sort();
  } catch {
    return [];
  }
}
