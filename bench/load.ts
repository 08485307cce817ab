/**
 * A lean closed-loop HTTP/1.1 load generator for the benchmarks, in the spirit of wrk: N keep-alive
 * connections, each with one request in flight, sending a pre-built request the moment the previous
 * response is complete. It writes raw bytes on `net` sockets and parses only the status line and the
 * body framing, so the client costs a few microseconds per request: on a 2-core machine shared with
 * the server, a heavier client (undici, autocannon) would measure itself. Latencies are taken with
 * performance.now(), so sub-millisecond numbers are real.
 */

import { spawn, spawnSync } from 'node:child_process';
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
  const requests = rounds.reduce((k, r) => k + r.requests, 0);
  const seconds = rounds.reduce((k, r) => k + r.seconds, 0);
  const errors = rounds.reduce((k, r) => k + r.errors, 0);
  const meanMs = rounds.reduce((k, r) => k + r.meanMs * r.requests, 0) / Math.max(1, requests);
  if (rounds.some((r) => r.latencies.length === 0)) {
    // wrk reports percentiles, not latencies: the median round's.
    const mid = (f: (r: LoadResult) => number) => rounds.map(f).sort((x, y) => x - y)[Math.floor(rounds.length / 2)]!;
    return { requests, errors, seconds, rps: requests / seconds, p50Ms: mid((r) => r.p50Ms), p99Ms: mid((r) => r.p99Ms), meanMs, latencies: new Float64Array(0) };
  }
  const n = rounds.reduce((k, r) => k + r.latencies.length, 0);
  const all = new Float64Array(n);
  let off = 0;
  for (const r of rounds) {
    all.set(r.latencies, off);
    off += r.latencies.length;
  }
  all.sort();
  return { requests, errors, seconds, rps: requests / seconds, p50Ms: percentile(all, 50), p99Ms: percentile(all, 99), meanMs, latencies: all };
}

/** wrk's latency cells ("635.00us", "2.13ms", "1.01s") in milliseconds. */
export function wrkMs(cell: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(cell.trim());
  if (!m) throw new Error(`wrk: cannot read latency '${cell}'`);
  return Number(m[1]) * (m[2] === 'us' ? 1e-3 : m[2] === 'ms' ? 1 : 1e3);
}

/** A wrk script that POSTs the bytes in `bodyFile` with `headers`. */
export function wrkScript(bodyFile: string, headers: Record<string, string>): string {
  return [
    'wrk.method = "POST"',
    `local f = io.open(${JSON.stringify(bodyFile)}, "rb"); wrk.body = f:read("*all"); f:close()`,
    ...Object.entries(headers).map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`),
  ].join('\n');
}

/** Whether Debian's `wrk` is installed (`apt-get install wrk`). */
export function hasWrk(): boolean {
  return spawnSync('wrk', ['--version']).error === undefined;
}

/**
 * The same closed loop as runLoad, driven by wrk (C, one thread): it costs the machine about half the
 * CPU per request of any Node client (~21 vs ~44 µs here), CPU the server would otherwise lose to it
 * on a small shared machine. `script` is a file written from wrkScript. Latency percentiles come from
 * wrk's --latency table, so `latencies` is empty.
 */
export async function runWrk(opts: {
  url: string; script: string; connections: number; durationMs: number; warmupMs?: number;
}): Promise<LoadResult> {
  const wrk = (ms: number) => new Promise<string>((resolve, reject) => {
    const args = ['-t', '1', '-c', String(opts.connections), '-d', `${Math.max(1, Math.round(ms / 1000))}s`, '--latency', '-s', opts.script, opts.url];
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`wrk exited with ${code}: ${out}`))));
  });
  if ((opts.warmupMs ?? 500) > 0) await wrk(opts.warmupMs ?? 500);
  const out = await wrk(opts.durationMs);
  const total = /(\d+) requests in ([\d.]+)(us|ms|s)/.exec(out);
  const avg = /Latency\s+(\S+)/.exec(out);
  if (!total || !avg) throw new Error(`wrk: cannot read its report: ${out}`);
  const pct = (p: number) => wrkMs(new RegExp(`\\s${p}%\\s+(\\S+)`).exec(out)![1]!);
  const errors = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0) + Number(/Socket errors:.*?timeout (\d+)/.exec(out)?.[1] ?? 0);
  const seconds = wrkMs(`${total[2]}${total[3]}`) / 1000;
  const requests = Number(total[1]) - errors;
  return {
    requests, errors, seconds, rps: requests / seconds, p50Ms: pct(50), p99Ms: pct(99), meanMs: wrkMs(avg[1]!),
    latencies: new Float64Array(0),
  };
}

/** What every client sends `mlp_batch` in the benchmarks: one 1024-float row, binary in and out. */
export function mlpRowRequest(): { row: Float32Array; body: Uint8Array; headers: Record<string, string> } {
  const row = Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i) * 0.5);
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1024], parameters: { binary_data_size: 4096 } }],
    outputs: [{ name: 'OUTPUT', parameters: { binary_data: true } }],
  }));
  const body = new Uint8Array(header.byteLength + 4096);
  body.set(header);
  body.set(new Uint8Array(row.buffer), header.byteLength);
  return { row, body, headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.byteLength) } };
}
