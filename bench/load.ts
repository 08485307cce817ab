/**
 * A lean closed-loop HTTP/1.1 load generator for the benchmarks, in the spirit of wrk: N keep-alive
 * connections, each with one request in flight, sending a pre-built request the moment the previous
 * response is complete. It writes raw bytes on `net` sockets and parses only the status line and the
 * body framing, so the client costs a few microseconds per request: on a 2-core machine shared with
 * the server, a heavier client (undici, autocannon) would measure itself. Latencies are taken with
 * performance.now(), so sub-millisecond numbers are real.
 */

import { connect, type Socket } from 'node:net';

export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  /** Requests per second with a 2xx answer. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  /** Every measured 2xx latency in ms, sorted (to merge rounds). */
  latencies: Float64Array;
}

/** The bytes of one POST with the given headers and body. */
export function buildRequest(path: string, headers: Record<string, string>, body: Uint8Array): Buffer {
  const head = [`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1', `Content-Length: ${body.byteLength}`]
    .concat(Object.entries(headers).map(([k, v]) => `${k}: ${v}`))
    .join('\r\n');
  return Buffer.concat([Buffer.from(`${head}\r\n\r\n`), body]);
}

const CRLF2 = Buffer.from('\r\n\r\n');

/**
 * Incremental response framing: returns the status of a complete response at the front of `buf` and
 * its total length, or undefined when more bytes are needed.
 */
function frame(buf: Buffer): { status: number; length: number } | undefined {
  const end = buf.indexOf(CRLF2);
  if (end < 0) return undefined;
  const head = buf.subarray(0, end).toString('latin1');
  const status = Number(head.slice(9, 12));
  const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (cl) {
    const length = end + 4 + Number(cl[1]);
    return buf.length >= length ? { status, length } : undefined;
  }
  if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
    let off = end + 4;
    for (;;) {
      const eol = buf.indexOf('\r\n', off);
      if (eol < 0) return undefined;
      const size = parseInt(buf.subarray(off, eol).toString('latin1'), 16);
      off = eol + 2 + size + 2;
      if (off > buf.length) return undefined;
      if (size === 0) return { status, length: off };
    }
  }
  return { status, length: end + 4 };
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * Runs `connections` closed loops against host:port for `warmupMs` (discarded) plus `durationMs`
 * (measured). Every connection sends `request` again and again.
 */
export async function runLoad(opts: {
  port: number; request: Buffer; connections: number; durationMs: number; warmupMs?: number;
}): Promise<LoadResult> {
  const latencies: number[] = [];
  let errors = 0;
  let measuring = false;
  let stopping = false;
  const sockets: Socket[] = [];
  let measureStart = 0;
  let measureEnd = 0;

  const loops = Array.from({ length: opts.connections }, () => new Promise<void>((resolve, reject) => {
    const sock = connect({ port: opts.port, host: '127.0.0.1', noDelay: true });
    sockets.push(sock);
    let buf: Buffer = Buffer.alloc(0);
    let sentAt = 0;
    const send = () => {
      if (stopping) {
        sock.end();
        resolve();
        return;
      }
      sentAt = performance.now();
      sock.write(opts.request);
    };
    sock.on('connect', send);
    sock.on('data', (chunk: Buffer) => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      const f = frame(buf);
      if (!f) return;
      buf = buf.subarray(f.length);
      const now = performance.now();
      if (measuring && now <= measureEnd) {
        if (f.status >= 200 && f.status < 300) latencies.push(now - sentAt);
        else errors++;
      }
      send();
    });
    sock.on('error', (e) => (stopping ? resolve() : reject(e)));
    sock.on('close', () => resolve());
  }));

  await new Promise((r) => setTimeout(r, opts.warmupMs ?? 500));
  measuring = true;
  measureStart = performance.now();
  measureEnd = measureStart + opts.durationMs;
  await new Promise((r) => setTimeout(r, opts.durationMs));
  stopping = true;
  const hung = setTimeout(() => sockets.forEach((s) => s.destroy()), 10_000);
  await Promise.all(loops);
  clearTimeout(hung);
  const seconds = opts.durationMs / 1000;
  const sorted = Float64Array.from(latencies).sort();
  return {
    requests: latencies.length,
    errors,
    seconds,
    rps: latencies.length / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    meanMs: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
    latencies: sorted,
  };
}

/** Several rounds of the same load as one result: requests and time add up, latencies merge. */
export function mergeLoads(rounds: readonly LoadResult[]): LoadResult {
  const n = rounds.reduce((k, r) => k + r.latencies.length, 0);
  const all = new Float64Array(n);
  let off = 0;
  for (const r of rounds) {
    all.set(r.latencies, off);
    off += r.latencies.length;
  }
  all.sort();
  const requests = rounds.reduce((k, r) => k + r.requests, 0);
  const seconds = rounds.reduce((k, r) => k + r.seconds, 0);
  return {
    requests,
    errors: rounds.reduce((k, r) => k + r.errors, 0),
    seconds,
    rps: requests / seconds,
    p50Ms: percentile(all, 50),
    p99Ms: percentile(all, 99),
    meanMs: rounds.reduce((k, r) => k + r.meanMs * r.requests, 0) / Math.max(1, requests),
    latencies: all,
  };
}
