/**
 * Serves core's v2 HTTP app on a Node socket through @hono/node-server, with one shortcut: POST .../infer
 * goes from Node's request and response objects straight to core's inferEndpoint (the same function
 * the hono route calls), because building a Web Request and Response costs about 35 µs a request, a
 * fifth of what the main thread spends per inference. Also here: stop accepting, let keep-alive
 * connections finish their current request, then drop idle ones.
 */

import { getRequestListener } from '@hono/node-server';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tooLarge, type HttpReply, type InferHttpRequest } from '../core/index.js';

export interface Listener {
  port: number;
  address: string;
  /** Refuses new connections; requests on open connections still get answers. */
  stopAccepting(): void;
  /** Closes every connection (call after draining) and resolves when the socket is closed. */
  close(): Promise<void>;
}

/** Binds a Node server, rejecting with the bind error (port in use, bad address) instead of crashing. */
export function listenOn(server: Server, port: number, address: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** Answers a request itself and returns true, or returns false to leave it to the app. */
export type NodeRoute = (req: IncomingMessage, res: ServerResponse) => boolean;

export async function listen(
  fetch: (req: Request) => Response | Promise<Response>, port: number, address: string, first?: NodeRoute,
): Promise<Listener> {
  const app = getRequestListener(fetch, { hostname: address });
  const server = createServer(first ? (req, res) => { if (!first(req, res)) void app(req, res); } : app);
  server.keepAliveTimeout = 65_000;
  const info = await listenOn(server, port, address);
  let closed: Promise<void> | undefined;
  const stopAccepting = () => {
    closed ??= new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
  };
  return {
    port: info.port,
    address: info.address,
    stopAccepting,
    close: async () => {
      stopAccepting();
      server.closeAllConnections();
      await closed;
    },
  };
}

// Names with %-escapes take the hono route, which decodes them; a trailing slash or another method is
// hono's to refuse.
const INFER_PATH = /^\/v2\/models\/([^/?%]+)(?:\/versions\/([0-9]+))?\/infer(?:\?|$)/;

/**
 * The infer shortcut. With CORS on, requests that carry an Origin go to hono, whose middleware adds
 * the CORS headers; without CORS no response carries them, so both routes answer alike.
 */
export function inferRoute(endpoint: (req: InferHttpRequest) => Promise<HttpReply>, opts: { cors: boolean; onError: (err: Error) => void }): NodeRoute {
  return (req, res) => {
    if (req.method !== 'POST') return false;
    const m = INFER_PATH.exec(req.url!);
    if (!m || (opts.cors && req.headers.origin !== undefined)) return false;
    const headers = req.headers;
    endpoint({
      model: m[1]!,
      version: m[2],
      header: (name) => {
        const v = headers[name.toLowerCase()];
        return Array.isArray(v) ? v.join(', ') : v;
      },
      body: (limit) => readNodeBody(req, limit),
    }).then(
      (reply) => send(res, reply),
      (err: Error) => {
        opts.onError(err);
        send(res, { status: 500, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ error: err.message }) });
      },
    );
    return true;
  };
}

function send(res: ServerResponse, reply: HttpReply): void {
  if (res.headersSent || res.destroyed) return;
  const body = typeof reply.body === 'string' ? Buffer.from(reply.body) : reply.body;
  res.writeHead(reply.status, { ...reply.headers, 'Content-Length': String(body.byteLength) });
  res.end(body);
}

/** The whole body; past `limit` bytes it stops keeping chunks and fails once the body has ended. */
function readNodeBody(req: IncomingMessage, limit: number): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    req.on('data', (chunk: Buffer) => {
      total += chunk.byteLength;
      if (total <= limit) chunks.push(chunk);
      else chunks.length = 0;
    });
    req.once('end', () => {
      if (total > limit) reject(tooLarge(total, limit));
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total));
    });
    req.once('error', reject);
    req.once('close', () => {
      if (!req.complete) reject(new Error('the client closed the connection before sending the whole body'));
    });
  });
}
