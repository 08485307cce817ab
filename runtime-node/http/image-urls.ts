/**
 * `--allow-image-urls`: how the server fetches a chat `image_url` part's http(s) URL. A URL a client
 * gives makes the server connect where the client says, so the host is resolved first and every
 * address it resolves to is checked: loopback, private (RFC 1918, unique-local), link-local (cloud
 * metadata at 169.254.169.254), carrier-grade NAT, multicast, reserved and unspecified addresses are
 * refused before any connection, and the connection then goes to the checked address (the lookup is
 * pinned, so a second DNS answer cannot swap in another: DNS rebinding). Redirects are not followed
 * (a redirect could lead anywhere); the body is bounded in bytes (the request's own limit) and the
 * whole fetch in time.
 */

import { lookup } from 'node:dns/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { TsiError } from '../../core/index.js';

/** Addresses an image URL may not reach. */
const BLOCKED = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24],
  ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) BLOCKED.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8], ['2001:db8::', 32], ['100::', 64]] as const) BLOCKED.addSubnet(net, bits, 'ipv6');

/** Whether `address` is one an image URL may not reach (IPv4-mapped and NAT64 IPv6 checked as their IPv4). */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family !== 6) return true;
  const lower = address.toLowerCase();
  const v4 = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/.exec(lower)?.[1];
  if (v4) return BLOCKED.check(v4, 'ipv4');
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (hex) {
    const n = (parseInt(hex[1]!, 16) << 16) | parseInt(hex[2]!, 16);
    return BLOCKED.check([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.'), 'ipv4');
  }
  return BLOCKED.check(address, 'ipv6');
}

export interface ImageUrlOptions {
  /** The whole fetch, connection to last byte (default 10 s). */
  timeoutMs?: number;
  /** Tests only: the resolver (default: the system's). */
  resolve?: (host: string) => Promise<{ address: string; family: number }[]>;
  /** Tests only: whether an address is refused (default: isPrivateAddress), so a local listener can stand in for a public host. */
  refuse?: (address: string) => boolean;
}

/** The fetcher for HttpOptions.fetchImage. */
export function imageUrlFetcher(opts: ImageUrlOptions = {}): (url: string, maxBytes: number) => Promise<Uint8Array> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const resolve = opts.resolve ?? ((host: string) => lookup(host, { all: true, verbatim: true }));
  return async (raw, maxBytes) => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new TsiError('INVALID_ARG', `'${raw.slice(0, 100)}' is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TsiError('INVALID_ARG', `only http and https image URLs are fetched, not ${url.protocol}`);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    let addresses: { address: string; family: number }[];
    try {
      addresses = isIP(host) ? [{ address: host, family: isIP(host) }] : await resolve(host);
    } catch (err) {
      throw new TsiError('INVALID_ARG', `the image URL's host '${host}' does not resolve (${(err as Error).message})`);
    }
    const refused = addresses.find((a) => (opts.refuse ?? isPrivateAddress)(a.address));
    if (addresses.length === 0 || refused) {
      throw new TsiError('INVALID_ARG', `the image URL's host '${host}' resolves to ${refused?.address ?? 'nothing'}, a private, loopback or link-local address: refused`);
    }
    const pinned = addresses[0]!;
    // Connect to the address checked above, whatever a later lookup would say.
    const pin: LookupFunction = (_h, o, cb) => {
      if ((o as { all?: boolean }).all) (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [pinned]);
      else cb(null, pinned.address, pinned.family);
    };
    return await new Promise<Uint8Array>((done, fail) => {
      const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { lookup: pin, timeout: timeoutMs, headers: { accept: 'image/png, image/jpeg' } }, (res: IncomingMessage) => {
        if ((res.statusCode ?? 0) >= 300) {
          res.resume();
          fail(new TsiError('INVALID_ARG', `the image URL answered HTTP ${res.statusCode}${res.statusCode! < 400 ? ' (redirects are not followed)' : ''}`));
          return;
        }
        const chunks: Buffer[] = [];
        let n = 0;
        res.on('data', (c: Buffer) => {
          n += c.length;
          if (n > maxBytes) {
            req.destroy();
            fail(new TsiError('INVALID_ARG', `the image at the URL is larger than ${maxBytes} bytes`));
          } else chunks.push(c);
        });
        res.on('end', () => done(new Uint8Array(Buffer.concat(chunks))));
        res.on('error', (err) => fail(new TsiError('INVALID_ARG', `the image URL's answer broke off: ${err.message}`)));
      });
      const timer = setTimeout(() => {
        req.destroy();
        fail(new TsiError('INVALID_ARG', `the image URL did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      req.on('close', () => clearTimeout(timer));
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', (err) => fail(new TsiError('INVALID_ARG', `the image URL could not be fetched: ${err.message}`)));
      req.end();
    });
  };
}
