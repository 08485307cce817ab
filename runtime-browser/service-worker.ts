/**
 * Service Worker mode: a module Service Worker that answers `/v2/...` requests in the page's origin
 * with core's v2 HTTP handler, so unmodified v2 clients (fetch-, curl- or tritonclient-shaped) work
 * against a page with no server behind it, and the OpenAI routes of `llm`, `embedding` and `classifier`
 * models (`/v1/models`, `/v1/completions`, `/v1/chat/completions`, streamed, `/v1/responses`,
 * `/v1/messages`, `/tokenize`, `/detokenize`, `/v1/embeddings`, and
 * `/v1/rerank`, `/v2/rerank`, `/v1/score`, `/v1/classify`) for OpenAI, Cohere or Jina clients given
 * the site as their base URL. Everything else passes through untouched.
 *
 * Two ways to use it:
 * - register the built `tsi-sw.js` directly, configured by its query string:
 *   `navigator.serviceWorker.register('/tsi-sw.js?repository=/models/', { type: 'module' })`
 *   (its scope must cover `/v2/`: serve it from the site root, or send `Service-Worker-Allowed: /`);
 * - or a two-line root `sw.js` that imports it and calls `serveInServiceWorker({ repository })`.
 *
 * ORT is imported statically here because `import()` is not allowed in a Service Worker; there is no
 * `Worker` either, so wasm runs on one thread (probeEnvironment sees that). The server starts when the
 * worker activates and again whenever the browser restarts an idle worker, at its first request.
 */

import * as ort from 'onnxruntime-web';
import { TsiError, errorResponse } from '../core/index.js';
import { createServer, type BrowserServer, type BrowserServerOptions } from './index.js';

interface ExtendableEvent extends Event {
  waitUntil(p: Promise<unknown>): void;
}
interface FetchEvent extends ExtendableEvent {
  readonly request: Request;
  respondWith(r: Response | Promise<Response>): void;
}
interface SwGlobal {
  location: Location;
  registration?: { scope: string };
  skipWaiting(): Promise<void>;
  clients: { claim(): Promise<void> };
  addEventListener(type: 'install' | 'activate', fn: (e: ExtendableEvent) => void): void;
  addEventListener(type: 'fetch', fn: (e: FetchEvent) => void): void;
}

export interface ServiceWorkerOptions extends BrowserServerOptions {
  /** Path prefix answered by the server (default `/v2`). */
  prefix?: string;
  /** Answer the OpenAI-compatible routes under `/v1` too (default true). */
  openai?: boolean;
}

/**
 * The OpenAI-compatible paths core's handler answers (core/protocol/openai*.ts), Anthropic's Messages
 * (anthropic-messages.ts) and vLLM's tokenizer routes (tokenize.ts); nothing else under /v1.
 */
const OPENAI_PATH = /^\/v1\/(?:models(?:\/.+)?|completions|chat\/completions|responses(?:\/[^/]+)?|messages(?:\/count_tokens)?|embeddings|rerank|score|classify)$|^\/v2\/rerank$|^\/(?:tokenize|detokenize)$/;

export function isServiceWorker(): boolean {
  const g = globalThis as { ServiceWorkerGlobalScope?: new () => unknown };
  return typeof g.ServiceWorkerGlobalScope === 'function' && globalThis instanceof g.ServiceWorkerGlobalScope;
}

/**
 * Installs the worker's event handlers; call it at the top level of the worker script (handlers
 * added later are ignored by the browser). Returns a getter for the (lazily started) server.
 */
export function serveInServiceWorker(options: ServiceWorkerOptions): () => Promise<BrowserServer> {
  const sw = globalThis as unknown as SwGlobal;
  const prefix = (options.prefix ?? '/v2').replace(/\/$/, '');
  let server: Promise<BrowserServer> | undefined;
  const get = () => {
    server ??= createServer({ ort, ...options });
    server.catch(() => (server = undefined));
    return server;
  };
  sw.addEventListener('install', (e) => e.waitUntil(sw.skipWaiting()));
  sw.addEventListener('activate', (e) => {
    e.waitUntil(sw.clients.claim());
    void get().catch(() => undefined);
  });
  sw.addEventListener('fetch', (e) => {
    const url = new URL(e.request.url);
    if (url.origin !== sw.location.origin) return;
    const ours = url.pathname === prefix || url.pathname.startsWith(`${prefix}/`) || (options.openai !== false && OPENAI_PATH.test(url.pathname));
    if (!ours) return;
    e.respondWith(get().then(
      (s) => s.fetch(e.request),
      (err) => errorResponse(new TsiError('UNAVAILABLE', `the in-browser server failed to start: ${(err as Error).message}`)),
    ));
  });
  return get;
}

/** Options from the worker script's own query string: `repository`, `models` (comma list), `device`, `prefix`, `openai` (`0`: off), `log_verbose`. */
export function optionsFromUrl(url: string): ServiceWorkerOptions | undefined {
  const q = new URL(url).searchParams;
  const repository = q.get('repository');
  if (!repository) return undefined;
  const device = q.get('device');
  return {
    repository: new URL(repository, url).href,
    models: q.get('models')?.split(',').filter(Boolean),
    device: device === 'webgpu' || device === 'wasm' ? device : undefined,
    prefix: q.get('prefix') ?? undefined,
    openai: q.get('openai') !== '0',
    logVerbose: Number(q.get('log_verbose') ?? 0),
  };
}

// Registered directly with `?repository=...`: configure from the query string and start serving.
if (isServiceWorker()) {
  const fromQuery = optionsFromUrl(import.meta.url);
  if (fromQuery) serveInServiceWorker(fromQuery);
}

export { ort };
