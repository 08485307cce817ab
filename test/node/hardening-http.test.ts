/**
 * The Node runtime's HTTP/1.1 layer against clients that misbehave: requests it refuses itself (400,
 * 408, 417, 431) answer `{"error": ...}` like the rest of the API; a head or body sent halfway and then
 * abandoned, or dribbled out byte by byte, times out instead of holding the connection forever; a
 * client that pipelines requests and never reads the answers is not read any further, so its answers
 * cannot pile up in memory. The layer is driven directly (runtime-node/http/server.ts `listen`) with a stand-in
 * app and infer endpoint, so the timeouts can be short.
 */

import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, type Listener } from '../../runtime-node/http/server.js';
import { readRequestBody, type HttpReply, type InferHttpRequest } from '../../core/index.js';

const HEADERS_MS = 300;
const REQUEST_MS = 600;
const BIG = 1024 * 1024;

let server: Listener;
let inferCalls = 0;
let bodyFailures: string[] = [];
let release: (() => void) | undefined;

beforeAll(async () => {
  server = await listen(0, '127.0.0.1', {
    headersTimeoutMs: HEADERS_MS,
    requestTimeoutMs: REQUEST_MS,
    fetch: async (req) => {
      await req.arrayBuffer();
      return Response.json({ path: new URL(req.url).pathname });
    },
    infer: async (req: InferHttpRequest): Promise<HttpReply> => {
      inferCalls++;
      // Answers before reading the body, as an unknown model does.
      if (req.model === 'early') return { status: 404, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ error: 'x'.repeat(BIG) }) };
      let body: Uint8Array;
      try {
        body = await readRequestBody(req.header, req.body, 1 << 20);
      } catch (err) {
        bodyFailures.push((err as Error).message);
        return { status: 400, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ error: (err as Error).message }) };
      }
      if (req.model === 'slow') await new Promise<void>((r) => (release = r));
      const size = req.model === 'big' ? BIG : 2;
      return { status: 200, headers: { 'Content-Type': 'application/octet-stream', 'X-Body': String(body.byteLength) }, body: new Uint8Array(size) };
    },
  });
});
afterAll(async () => {
  await server?.close();
});

interface Raw {
  sock: Socket;
  data(): Buffer;
  closed: Promise<void>;
  isClosed(): boolean;
}

async function open(): Promise<Raw> {
  const sock = connect(server.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  const chunks: Buffer[] = [];
  let done = false;
  sock.on('data', (d) => chunks.push(d));
  sock.on('error', () => {});
  const closed = new Promise<void>((r) => sock.once('close', () => {
    done = true;
    r();
  }));
  return { sock, data: () => Buffer.concat(chunks), closed, isClosed: () => done };
}

/** The one response a refused connection gets: status, headers, body. */
function parse(b: Buffer): { status: number; headers: Record<string, string>; body: string } {
  const end = b.indexOf('\r\n\r\n');
  const lines = b.subarray(0, end).toString('latin1').split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
  return { status: Number(lines[0]!.split(' ')[1]), headers, body: b.subarray(end + 4).toString() };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('requests the HTTP/1.1 layer refuses itself', () => {
  const cases: [string, string, number, RegExp][] = [
    ['a malformed request line', 'GARBAGE\r\n\r\n', 400, /^malformed request line/],
    ['a header line without a colon', 'GET /v2 HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n', 400, /^malformed header line 2/],
    ['an HTTP/1.1 request without Host', 'GET /v2 HTTP/1.1\r\n\r\n', 400, /Host header/],
    ['two Content-Lengths', 'POST /v2 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx', 400, /more than one Content-Length/],
    ['a non-numeric Content-Length', 'POST /v2 HTTP/1.1\r\nHost: a\r\nContent-Length: 12abc\r\n\r\n', 400, /invalid Content-Length '12abc'/],
    ['Content-Length with Transfer-Encoding', 'POST /v2 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n', 400, /both Content-Length and Transfer-Encoding/],
    ['a Transfer-Encoding that is not chunked', 'POST /v2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n', 400, /unsupported Transfer-Encoding 'gzip'/],
    ['an invalid chunk size', 'POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n', 400, /invalid chunk size 'zz'/],
    ['an Expect other than 100-continue', 'POST /v2 HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n', 417, /unsupported Expect '200-ok'/],
    ['a header section over 16 KiB', `GET /v2 HTTP/1.1\r\nHost: a\r\nX-Huge: ${'a'.repeat(20_000)}\r\n\r\n`, 431, /larger than 16384 bytes/],
    ['a request line over 16 KiB', `GET /v2?${'q'.repeat(20_000)} HTTP/1.1\r\nHost: a\r\n\r\n`, 431, /larger than 16384 bytes/],
  ];
  for (const [name, bytes, status, message] of cases) {
    it(`answers ${name} with ${status} and a JSON error body, then closes`, async () => {
      const c = await open();
      c.sock.write(bytes);
      await c.closed;
      const r = parse(c.data());
      expect(r.status).toBe(status);
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['content-length']).toBe(String(Buffer.byteLength(r.body)));
      expect(r.headers.connection).toBe('close');
      expect(JSON.parse(r.body).error).toMatch(message);
    });
  }
});

describe('slow and stalled clients', () => {
  it('answers 408 to a head that stops halfway', async () => {
    const c = await open();
    const t0 = Date.now();
    c.sock.write('POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\n');
    await c.closed;
    const r = parse(c.data());
    expect(r.status).toBe(408);
    expect(JSON.parse(r.body).error).toBe(`the request head did not arrive within ${HEADERS_MS} ms`);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(HEADERS_MS - 20);
    expect(Date.now() - t0).toBeLessThan(HEADERS_MS + 1500);
  });

  it('answers 408 to a head dribbled out a byte at a time (the connection never goes quiet)', async () => {
    const c = await open();
    const head = 'GET /v2 HTTP/1.1\r\nHost: a\r\nX-Slow: ' + 'x'.repeat(200);
    for (let i = 0; i < head.length && !c.isClosed(); i++) {
      c.sock.write(head[i]!);
      await sleep(20);
    }
    await c.closed;
    expect(parse(c.data()).status).toBe(408);
  });

  it('answers 408 to a body that stops halfway, and the endpoint reading it is told', async () => {
    bodyFailures = [];
    const c = await open();
    c.sock.write('POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789');
    await c.closed;
    const r = parse(c.data());
    expect(r.status).toBe(408);
    expect(JSON.parse(r.body).error).toBe(`the request body did not arrive within ${REQUEST_MS} ms`);
    expect(bodyFailures).toEqual([`the request body did not arrive within ${REQUEST_MS} ms`]);
  });

  it('answers 408 to a chunked body that stops halfway on an app route', async () => {
    const c = await open();
    c.sock.write('POST /v2/repository/index HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel');
    await c.closed;
    expect(parse(c.data()).status).toBe(408);
  });

  it('does not time out a request waiting for its answer, nor an idle keep-alive connection', async () => {
    const c = await open();
    c.sock.write('POST /v2/models/slow/infer HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi');
    await sleep(REQUEST_MS + 400);
    expect(c.isClosed()).toBe(false);
    release!();
    await sleep(100);
    expect(parse(c.data()).status).toBe(200);
    await sleep(HEADERS_MS + 400);
    expect(c.isClosed()).toBe(false);
    c.sock.destroy();
  });

  for (const model of ['big', 'early']) it(`stops reading pipelined requests while their answers wait for a client that does not read (${model === 'big' ? 'answered after the body' : 'answered before the body'})`, async () => {
    inferCalls = 0;
    const c = await open();
    // Nobody reads: the socket's receive buffer fills, then the server's send buffer.
    c.sock.pause();
    const N = 100;
    const one = `POST /v2/models/${model}/infer HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi`;
    c.sock.write(one.repeat(N));
    await sleep(1000);
    // 100 answers are 100 MiB; the server stopped after the first few filled the socket's buffers.
    expect(inferCalls).toBeLessThan(30);
    let received = 0;
    let buf = Buffer.alloc(0);
    const all = new Promise<void>((resolve) => {
      c.sock.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) break;
          const length = Number(/content-length: (\d+)/i.exec(buf.subarray(0, end).toString('latin1'))![1]);
          if (buf.length < end + 4 + length) break;
          buf = buf.subarray(end + 4 + length);
          if (++received === N) resolve();
        }
      });
    });
    c.sock.resume();
    await all;
    expect(inferCalls).toBe(N);
    c.sock.destroy();
  }, 30_000);

  it('still answers a well-behaved client', async () => {
    const c = await open();
    c.sock.write('GET /v2/health/ready HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
    await c.closed;
    expect(parse(c.data())).toMatchObject({ status: 200, body: '{"path":"/v2/health/ready"}' });
  });
});
