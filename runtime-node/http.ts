/**
 * Serves core's v2 HTTP app on a Node socket through @hono/node-server. The only Node-specific work is
 * listening and closing: stop accepting, let keep-alive connections finish their current request,
 * then drop idle ones.
 */

import { createAdaptorServer } from '@hono/node-server';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

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

export async function listen(fetch: (req: Request) => Response | Promise<Response>, port: number, address: string): Promise<Listener> {
  const server = createAdaptorServer({ fetch, port, hostname: address }) as Server;
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
