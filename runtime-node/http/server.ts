/**
 * The Node runtime's HTTP/1.1 server, on `node:net`. POST `/v2/models/{m}[/versions/{v}]/infer` goes
 * straight to core's inferEndpoint; every other request becomes a Web `Request` for core's hono app,
 * whose `Response` is written back.
 *
 * Why not `node:http`: it builds an IncomingMessage and a ServerResponse (two streams and their
 * events) per request, ~40 µs of main-thread CPU per inference on the 2-core bench machine, more than
 * all of core's own work. The main thread feeds the model instances, so that time set the served
 * throughput (bench:batching, 64 clients: +18–28 % with this server). This file is the listener: it
 * binds, accepts, checks every connection's deadlines with one timer, and stops in phases.
 * connection.ts reads each connection's requests (request.ts parses heads and frames bodies,
 * response.ts writes answers and event streams); malformed requests get node:http's answers (400, 431,
 * 417) and a closed connection, with a `{"error": ...}` body saying what was wrong, like every other
 * error of the API.
 *
 * Slow and stalled clients cost a connection, never unbounded memory or a request held forever: a
 * request head must be complete within `headersTimeoutMs` of its first byte, and the whole request
 * within `requestTimeoutMs` (node:http's defaults, 60 s and 300 s; 408 and the connection closed).
 *
 * HTTPS is the same connection handler on `tls.createServer` (a TLSSocket is a Socket), so plain TCP
 * keeps its path untouched; its certificate follows the ReloadableTls it is given (runtime-node/http/tls.ts),
 * and a TLS handshake must finish within `headersTimeoutMs` too. With `authorize` (API keys), each
 * request is judged on its head before it reaches the app or the infer shortcut; a refused one is
 * answered at once and the connection closed without reading its body.
 */

import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { Connection, type ConnectionOptions, type ConnectionTiming, type RequestHandlers } from './connection.js';
import type { ReloadableTls } from './tls.js';

export interface Listener {
  port: number;
  address: string;
  /**
   * Refuses new connections and closes idle ones; a connection with a request under way answers it
   * with `Connection: close` and then closes (a shutdown's phase b).
   */
  stopAccepting(): void;
  /** Connections open now. */
  openConnections(): number;
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

export interface HttpServerOptions extends RequestHandlers, Partial<ConnectionTiming> {
  /** Serve HTTPS with these credentials (reloaded when they change); unset: plain HTTP. */
  tls?: ReloadableTls;
  /** TLS handshakes that failed (wrong CA, no client certificate, plain HTTP on the HTTPS port). */
  onTlsError?: (err: Error, remoteAddress: string | undefined) => void;
}

/** node:http's defaults. */
const HEADERS_TIMEOUT_MS = 60_000;
const REQUEST_TIMEOUT_MS = 300_000;

export async function listen(port: number, address: string, opts: HttpServerOptions): Promise<Listener> {
  const connections = new Set<Connection>();
  let stopping = false;
  const copts: ConnectionOptions = {
    onError: () => {}, ...opts,
    headersTimeoutMs: opts.headersTimeoutMs ?? HEADERS_TIMEOUT_MS, requestTimeoutMs: opts.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
  };
  const onSocket = (socket: Socket) => {
    if (stopping) {
      socket.destroy();
      return;
    }
    const c = new Connection(socket, copts, address, () => stopping);
    connections.add(c);
    socket.once('close', () => connections.delete(c));
  };
  const tls = opts.tls;
  let server: Server;
  let untls: (() => void) | undefined;
  if (tls) {
    const secure = createTlsServer({
      ...tls.context, requestCert: tls.mutual, rejectUnauthorized: tls.mutual, ALPNProtocols: ['http/1.1'], noDelay: true,
      // A client that connects and never finishes the handshake is a slow client too.
      handshakeTimeout: Math.min(120_000, copts.headersTimeoutMs),
    }, onSocket);
    secure.on('tlsClientError', (err, socket) => {
      // A failed handshake destroys its socket, a timed-out one does not (node leaves that to this listener).
      socket.destroy();
      opts.onTlsError?.(err, socket.remoteAddress);
    });
    untls = tls.onChange((ctx) => secure.setSecureContext(ctx));
    server = secure;
  } else {
    server = createServer({ noDelay: true }, onSocket);
  }
  let info: AddressInfo;
  try {
    info = await listenOn(server, port, address);
  } catch (err) {
    untls?.();
    throw err;
  }
  server.on('error', (err) => opts.onError?.(err));
  // One timer for every connection's deadlines (as node:http's connectionsCheckingInterval), so a
  // request costs a timestamp rather than a timer of its own.
  const checkEvery = Math.max(10, Math.min(1000, Math.min(copts.headersTimeoutMs, copts.requestTimeoutMs) / 4));
  const checker = setInterval(() => {
    const now = Date.now();
    for (const c of connections) c.checkDeadlines(now);
  }, checkEvery);
  checker.unref();
  let closed: Promise<void> | undefined;
  const stopAccepting = () => {
    stopping = true;
    closed ??= new Promise<void>((resolve) => server.close(() => resolve()));
    for (const c of connections) c.closeIfIdle();
  };
  return {
    port: info.port,
    address: info.address,
    stopAccepting,
    openConnections: () => {
      let n = 0;
      for (const c of connections) if (!c.socket.destroyed) n++;
      return n;
    },
    close: async () => {
      stopAccepting();
      untls?.();
      clearInterval(checker);
      for (const c of connections) c.socket.destroy();
      await closed;
    },
  };
}
