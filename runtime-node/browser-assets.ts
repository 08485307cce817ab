/**
 * What the Node server does for the browser runtime: writes a repository's `tsi-index.json` (HTTP
 * cannot list folders, so a browser reading a repository by URL needs the list of models and files),
 * and, for `tsi-node serve --browser-demo`, mounts extra routes on the v2 app:
 *   /demo                 → the demo page (dist/browser/demo.html)
 *   /browser/*            → the browser build (tsi.js, tsi-sw.js, chunks, ORT wasm)
 *   /repository/*         → the served model repositories' files, and their index generated on the fly
 * Pages under /browser are sent with COOP/COEP so they are cross-origin isolated (wasm threads).
 */

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir, stat, writeFile } from 'node:fs/promises';
import { dirname, extname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';

export const INDEX_FILE = 'tsi-index.json';

export interface RepositoryIndexFile {
  tsi_repository_index: 1;
  models: Record<string, { files: string[]; fingerprint: string }>;
}

async function walk(dir: string, base: string, out: { rel: string; size: number; mtimeMs: number }[]): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.')) continue;
    const p = join(dir, e.name);
    const s = await stat(p);
    if (s.isDirectory()) await walk(p, base, out);
    else if (s.isFile()) out.push({ rel: relative(base, p).split('\\').join('/'), size: s.size, mtimeMs: s.mtimeMs });
  }
}

/** The index of one or more repository folders (a model found twice is listed from the first). */
export async function repositoryIndex(repos: string[]): Promise<RepositoryIndexFile> {
  const models: RepositoryIndexFile['models'] = {};
  for (const repo of repos) {
    for (const e of (await readdir(repo, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      if (e.name.startsWith('.') || models[e.name]) continue;
      const dir = join(repo, e.name);
      if (!(await stat(dir)).isDirectory()) continue;
      const files: { rel: string; size: number; mtimeMs: number }[] = [];
      await walk(dir, dir, files);
      files.sort((a, b) => a.rel.localeCompare(b.rel));
      const fingerprint = createHash('sha1').update(files.map((f) => `${f.rel}:${f.size}:${f.mtimeMs}`).join('\n')).digest('hex');
      models[e.name] = { files: files.map((f) => f.rel), fingerprint };
    }
  }
  return { tsi_repository_index: 1, models };
}

/** Writes `<repo>/tsi-index.json`; returns its path and the number of models. */
export async function writeRepositoryIndex(repo: string): Promise<{ path: string; models: number }> {
  const idx = await repositoryIndex([repo]);
  const path = join(repo, INDEX_FILE);
  await writeFile(path, JSON.stringify(idx, null, 2) + '\n');
  return { path, models: Object.keys(idx.models).length };
}

const MIME: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json', '.wasm': 'application/wasm', '.css': 'text/css; charset=utf-8', '.txt': 'text/plain; charset=utf-8',
  '.pbtxt': 'text/plain; charset=utf-8', '.map': 'application/json',
};

export const ISOLATION_HEADERS = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };

/** A file under `root`, never outside it; undefined when absent. */
export async function staticFile(root: string, rel: string, headers: Record<string, string> = {}): Promise<Response | undefined> {
  let decoded: string;
  try {
    decoded = decodeURIComponent(rel);
  } catch {
    return undefined;
  }
  const p = resolve(root, decoded);
  const r = relative(root, p);
  if (r.startsWith('..') || isAbsolute(r)) return undefined;
  try {
    if (!(await stat(p)).isFile()) return undefined;
  } catch {
    return undefined;
  }
  const body = await readFile(p);
  return new Response(body as unknown as BodyInit, {
    headers: { 'Content-Type': MIME[extname(p)] ?? 'application/octet-stream', 'Cache-Control': 'no-cache', ...headers },
  });
}

/** dist/browser of this package, found from this file in both `runtime-node/` and `dist/runtime-node/`. */
export function browserDist(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, 'dist', 'browser');
    dir = dirname(dir);
  }
  return resolve('dist', 'browser');
}

/** The demo routes, for createHttpApp's `extend`. */
export function browserRoutes(repos: string[], dist = browserDist()): (app: Hono) => void {
  const roots = repos.map((r) => resolve(r));
  return (app) => {
    app.get('/demo', (c) => c.redirect('/browser/demo.html'));
    app.get('/browser/*', async (c) => {
      const rel = c.req.path.slice('/browser/'.length) || 'demo.html';
      const r = await staticFile(dist, rel, ISOLATION_HEADERS);
      if (r) return r;
      const hint = existsSync(dist) ? '' : ' (the browser build is missing: run `npm run build:browser`)';
      return c.json({ error: `Not Found${hint}` }, 404);
    });
    app.get(`/repository/${INDEX_FILE}`, async (c) => c.json(await repositoryIndex(roots)));
    app.get('/repository/*', async (c) => {
      const rel = c.req.path.slice('/repository/'.length);
      for (const root of roots) {
        const r = await staticFile(root, rel);
        if (r) return r;
      }
      return c.json({ error: 'Not Found' }, 404);
    });
  };
}
