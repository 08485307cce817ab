/**
 * Property tests of the Node runtime's HTTP/1.1 parser (runtime-node/http/server.ts) over real sockets
 * (fast-check): request heads assembled from well- and ill-formed parts always get a parseable answer —
 * a success, or an error with a `{"error": ...}` body and a closed connection — never a 5xx, a hang on
 * a complete request, or garbage; and pipelined requests (Content-Length, chunked with extensions and
 * trailers, 100-continue), cut into pieces at arbitrary byte boundaries, are answered exactly as when
 * sent in one write, in order.
 */

import fc from 'fast-check';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRequestBody, type HttpReply, type InferHttpRequest } from '../../core/index.js';
import { listen, type Listener } from '../../runtime-node/http/server.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 60);
let server: Listener;

beforeAll(async () => {
  server = await listen(0, '127.0.0.1', {
    headersTimeoutMs: 2000,
    fetch: async (req) => {
      const body = new Uint8Array(await req.arrayBuffer());
      return Response.json({ route: 'app', method: req.method, path: new URL(req.url).pathname, length: body.byteLength, sum: sum(body) });
    },
    infer: async (req: InferHttpRequest): Promise<HttpReply> => {
      const body = await readRequestBody(req.header, req.body, 1 << 20);
      return { status: 200, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ route: 'infer', model: req.model, length: body.byteLength, sum: sum(body) }) };
    },
  });
});
afterAll(async () => server?.close());

const sum = (b: Uint8Array) => b.reduce((a, x) => (a + x) % 65521, 0);

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Parses every complete response in `buf` (1xx interim answers skipped). */
function answers(buf: Buffer): Answer[] {
  const out: Answer[] = [];
  let p = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', p);
    if (end < 0) return out;
    const lines = buf.subarray(p, end).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.1 (\d{3}) /.exec(lines[0]!);
    if (!m) throw new Error(`not a status line: ${JSON.stringify(lines[0])}`);
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const status = Number(m[1]);
    if (status < 200) {
      p = end + 4;
      continue;
    }
    const n = Number(headers['content-length'] ?? NaN);
    if (!Number.isInteger(n)) throw new Error(`an answer without Content-Length: ${lines.join(' | ')}`);
    if (buf.length < end + 4 + n) return out;
    out.push({ status, headers, body: buf.subarray(end + 4, end + 4 + n).toString() });
    p = end + 4 + n;
  }
}

/** Writes `pieces` one after another (a pause between), reads until `want` answers or the server closes. */
function exchange(pieces: Buffer[], want: number, ms = 3000): Promise<{ answers: Answer[]; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const sock = connect(server.port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let closed = false;
    const timer = setTimeout(() => done(), ms);
    const done = () => {
      clearTimeout(timer);
      sock.destroy();
      try {
        resolve({ answers: answers(buf), closed });
      } catch (err) {
        reject(err);
      }
    };
    sock.on('error', () => {});
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      try {
        const got = answers(buf);
        // An answer that says the connection closes is followed by the close itself (or the timer).
        if (got.length >= want && got[got.length - 1]!.headers.connection !== 'close') done();
      } catch (err) {
        clearTimeout(timer);
        sock.destroy();
        reject(err);
      }
    });
    sock.on('close', () => {
      closed = true;
      done();
    });
    sock.on('connect', async () => {
      for (const p of pieces) {
        if (sock.destroyed) return;
        sock.write(p);
        await new Promise((r) => setImmediate(r));
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------------

const body = fc.uint8Array({ maxLength: 200 });
/** One well-formed request, and what its answer must say. */
const request = fc.record({
  kind: fc.constantFrom('infer-cl', 'infer-chunked', 'app-get', 'app-post-cl', 'app-post-chunked', 'infer-continue'),
  model: fc.stringMatching(/^[a-z_][a-z0-9_]{0,8}$/),
  body,
  chunks: fc.array(fc.nat(200), { maxLength: 4 }),
});

function bytesOf(r: { kind: string; model: string; body: Uint8Array; chunks: number[] }): { bytes: Buffer; expect: Record<string, unknown> } {
  const b = Buffer.from(r.body);
  const chunked = () => {
    const parts: Buffer[] = [];
    let off = 0;
    for (const c of [...r.chunks, b.length]) {
      const n = Math.min(c, b.length - off);
      if (n <= 0) continue;
      parts.push(Buffer.from(`${n.toString(16)}${off === 0 ? ';ext=1' : ''}\r\n`), b.subarray(off, off + n), Buffer.from('\r\n'));
      off += n;
    }
    parts.push(Buffer.from('0\r\nX-Trailer: t\r\n\r\n'));
    return Buffer.concat(parts);
  };
  const head = (line: string, headers: string[]) => Buffer.from(`${line}\r\nHost: h\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n`, 'latin1');
  const infer = `/v2/models/${r.model}/infer`;
  switch (r.kind) {
    case 'infer-cl': return { bytes: Buffer.concat([head(`POST ${infer} HTTP/1.1`, [`Content-Length: ${b.length}`]), b]), expect: { route: 'infer', model: r.model, length: b.length, sum: sum(b) } };
    case 'infer-continue': return { bytes: Buffer.concat([head(`POST ${infer} HTTP/1.1`, [`Content-Length: ${b.length}`, 'Expect: 100-continue']), b]), expect: { route: 'infer', model: r.model, length: b.length, sum: sum(b) } };
    case 'infer-chunked': return { bytes: Buffer.concat([head(`POST ${infer} HTTP/1.1`, ['Transfer-Encoding: chunked']), chunked()]), expect: { route: 'infer', model: r.model, length: b.length, sum: sum(b) } };
    case 'app-get': return { bytes: head(`GET /v2/models/${r.model} HTTP/1.1`, []), expect: { route: 'app', method: 'GET', path: `/v2/models/${r.model}`, length: 0 } };
    case 'app-post-cl': return { bytes: Buffer.concat([head(`POST /v2/${r.model} HTTP/1.1`, [`Content-Length: ${b.length}`]), b]), expect: { route: 'app', method: 'POST', path: `/v2/${r.model}`, length: b.length, sum: sum(b) } };
    default: return { bytes: Buffer.concat([head(`POST /v2/${r.model} HTTP/1.1`, ['Transfer-Encoding: chunked']), chunked()]), expect: { route: 'app', method: 'POST', path: `/v2/${r.model}`, length: b.length, sum: sum(b) } };
  }
}

/** Cuts `b` at the given offsets. */
function cut(b: Buffer, at: number[]): Buffer[] {
  const points = [...new Set(at.map((x) => x % (b.length + 1)))].sort((x, y) => x - y);
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of [...points, b.length]) {
    if (p > prev) out.push(b.subarray(prev, p));
    prev = p;
  }
  return out;
}

describe('pipelined requests cut anywhere', () => {
  it('are answered in order, each as if sent whole', async () => {
    await fc.assert(fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 5 }), fc.array(fc.nat(5000), { maxLength: 12 }), async (reqs, at) => {
      const built = reqs.map(bytesOf);
      const all = Buffer.concat(built.map((x) => x.bytes));
      const { answers: got } = await exchange(cut(all, at), built.length);
      expect(got.map((a) => a.status)).toEqual(built.map(() => 200));
      expect(got.map((a) => JSON.parse(a.body))).toEqual(built.map((x) => expect.objectContaining(x.expect)));
    }), { numRuns: NUM_RUNS });
  });
});

// ---------------------------------------------------------------------------------------------------

const token = fc.stringMatching(/^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,8}$/);
const junk = fc.string({ maxLength: 12, unit: 'binary-ascii' });
const headerLine = fc.oneof(
  fc.tuple(token, fc.string({ maxLength: 12, unit: 'binary-ascii' })).map(([k, v]) => `${k}: ${v.replace(/[\r\n]/g, '')}`),
  fc.constantFrom('Content-Length: 5', 'Content-Length: -1', 'Content-Length: 99999999999999999999', 'Content-Length: 1, 2', 'Transfer-Encoding: chunked',
    'Transfer-Encoding: gzip', 'Expect: 100-continue', 'Expect: nope', 'Connection: close', 'Host: a', ' folded', 'No-Colon', 'Bad Name: x', ': empty',
    'Content-Length: 0', `X-Big: ${'x'.repeat(17_000)}`),
  junk.map((j) => j.replace(/\r\n/g, '')),
);
const head = fc.record({
  method: fc.oneof(fc.constantFrom('GET', 'POST', 'HEAD', 'PUT', 'OPTIONS'), token, junk),
  target: fc.oneof(fc.constantFrom('/v2', '/v2/models/m/infer', '/v2/health/ready', '*', 'http://h/v2', '/v2/models/%ZZ/infer', ''), junk),
  version: fc.constantFrom('HTTP/1.1', 'HTTP/1.0', 'HTTP/1.9', 'HTTP/2.0', 'http/1.1', ''),
  headers: fc.array(headerLine, { maxLength: 5 }),
  body: fc.string({ maxLength: 30, unit: 'binary-ascii' }),
});

describe('any request head', () => {
  it('gets a parseable answer — success, or a JSON error and a closed connection — and the server goes on', async () => {
    await fc.assert(fc.asyncProperty(head, async (h) => {
      const bytes = Buffer.from(`${h.method} ${h.target} ${h.version}\r\n${h.headers.map((l) => `${l}\r\n`).join('')}\r\n${h.body}`, 'latin1');
      const { answers: got, closed } = await exchange([bytes], 1, 800);
      for (const a of got) {
        expect(a.status, a.body).toBeLessThan(500);
        if (a.status >= 400 && h.method !== 'HEAD') {
          expect(a.headers['content-type']).toBe('application/json');
          expect(JSON.parse(a.body).error).toMatch(/\S/);
        }
      }
      // An answer that closes the connection closes it, once the request (head and body) is all in.
      const framed = h.headers.some((l) => /^(content-length|transfer-encoding)\s*:/i.test(l));
      if (got.length > 0 && got[0]!.headers.connection === 'close' && !framed) expect(closed).toBe(true);
    }), { numRuns: NUM_RUNS * 2 });
    const ok = await exchange([Buffer.from('GET /v2 HTTP/1.1\r\nHost: h\r\n\r\n')], 1);
    expect(ok.answers[0]?.status).toBe(200);
  }, 120_000);
});
