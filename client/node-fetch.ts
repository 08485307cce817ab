/**
 * A `fetch` for Node built on node:http(s) with keep-alive connections, for HttpClient's `fetch`
 * option. Node's built-in fetch (undici) spends several hundred microseconds of CPU per call in web
 * streams and object creation — about twice what this costs — which matters when the client shares a
 * machine with the server or drives thousands of requests a second (`tsi-node perf` uses it by
 * default). It implements what HttpClient needs, not all of fetch: byte or string bodies, headers,
 * abort signals, and transparent gzip/deflate/br response decoding as fetch does. Node-only, so it is
 * exported from `tsi-node/client/node`, never from the browser-safe entry.
 */

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';

export interface NodeFetchOptions {
  /** Sockets kept per host (default: unlimited, so `n` concurrent calls get `n` connections). */
  maxSockets?: number;
}

/** Statuses whose Response may not have a body (the Response constructor throws otherwise). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

function decode(body: Buffer, encoding: string | undefined): Buffer {
  switch ((encoding ?? '').trim().toLowerCase()) {
    case 'gzip': case 'x-gzip': return gunzipSync(body);
    case 'deflate': return inflateSync(body);
    case 'br': return brotliDecompressSync(body);
    default: return body;
  }
}

function toResponse(res: IncomingMessage, body: Buffer): Response {
  const headers = new Headers();
  for (const [k, v] of Object.entries(res.headers)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) headers.append(k, x);
    else headers.set(k, v);
  }
  const status = res.statusCode ?? 500;
  const data = NULL_BODY.has(status) ? null : decode(body, res.headers['content-encoding']);
  if (data) headers.delete('content-encoding');
  return new Response(data as BodyInit | null, { status, statusText: res.statusMessage, headers });
}

function abortError(reason: unknown): Error {
  if (reason instanceof Error) return reason;
  const e = new Error(reason === undefined ? 'This operation was aborted' : String(reason));
  e.name = 'AbortError';
  return e;
}

/** A fetch-compatible function over node:http(s); one keep-alive agent per call of nodeHttpFetch. */
export function nodeHttpFetch(opts: NodeFetchOptions = {}): typeof fetch {
  const agents = {
    'http:': new HttpAgent({ keepAlive: true, maxSockets: opts.maxSockets ?? Infinity }),
    'https:': new HttpsAgent({ keepAlive: true, maxSockets: opts.maxSockets ?? Infinity }),
  };
  return (input, init = {}) => new Promise<Response>((resolve, reject) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return reject(new TypeError(`unsupported protocol ${url.protocol}`));
    const body = init.body;
    if (body !== undefined && body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
      return reject(new TypeError('nodeHttpFetch sends only string and Uint8Array bodies'));
    }
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    if (body !== undefined && body !== null) headers['content-length'] = String(typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength);
    const signal = init.signal ?? undefined;
    if (signal?.aborted) return reject(abortError(signal.reason));
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send({
      agent: agents[url.protocol], protocol: url.protocol, hostname: url.hostname.replace(/^\[|\]$/g, ''), port: url.port,
      path: url.pathname + url.search, method: init.method ?? 'GET', headers,
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        signal?.removeEventListener('abort', onAbort);
        try {
          resolve(toResponse(res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
        } catch (err) {
          reject(err);
        }
      });
    });
    const onAbort = () => req.destroy(abortError(signal?.reason));
    signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err) => {
      signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    req.end(body ?? undefined);
  });
}
