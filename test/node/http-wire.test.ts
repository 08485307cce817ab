/**
 * The Node server's HTTP/1.1 on the wire: raw bytes over node:net sockets, checked the way a client
 * library or a proxy sees them — keep-alive, pipelining, chunked request bodies with extensions and
 * trailers, `Expect: 100-continue`, `Connection: close` and HTTP/1.0, HEAD, malformed and oversized
 * requests, bodies in dribbles, clients that hang up mid-body, binary inference, 404/405, server-sent
 * events, and a graceful stop with an idle keep-alive socket open.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type Socket } from 'node:net';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

// ---------------------------------------------------------------------------------------------------
// A raw HTTP/1.1 client: one socket, bytes in, responses parsed off the stream.
// ---------------------------------------------------------------------------------------------------

interface RawResponse {
  version: string;
  status: number;
  reason: string;
  /** Lower-cased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** Every header line as sent, in order (names lower-cased). */
  headerList: [string, string][];
  body: Buffer;
  /** Chunked responses: how many data chunks the body came in, and the trailers. */
  chunks: number;
  trailers: Record<string, string>;
  text(): string;
  json(): any;
}

const show = (b: Buffer, max = 600) => JSON.stringify(b.subarray(0, max).toString('latin1')) + (b.length > max ? `…(+${b.length - max} bytes)` : '');

class Incomplete extends Error {}

function parseHeaderLines(lines: string[], into: Record<string, string>, list: [string, string][]) {
  for (const line of lines) {
    const i = line.indexOf(':');
    if (i <= 0) throw new Error(`malformed header line ${JSON.stringify(line)}`);
    const name = line.slice(0, i).toLowerCase();
    if (name !== name.trim()) throw new Error(`whitespace in header name ${JSON.stringify(line)}`);
    const value = line.slice(i + 1).trim();
    list.push([name, value]);
    into[name] = into[name] === undefined ? value : `${into[name]}, ${value}`;
  }
}

/** Parses one response at the start of `buf`; throws Incomplete when more bytes are needed. */
function parseResponse(buf: Buffer, head: boolean, eof: boolean): { res: RawResponse; used: number } {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) throw new Incomplete();
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/(\d\.\d) (\d{3})(?: (.*))?$/.exec(lines[0]!);
  if (!m) throw new Error(`bad status line ${JSON.stringify(lines[0])}`);
  const headers: Record<string, string> = {};
  const headerList: [string, string][] = [];
  parseHeaderLines(lines.slice(1), headers, headerList);
  const status = Number(m[2]);
  let p = end + 4;
  let body = Buffer.alloc(0);
  let chunks = 0;
  const trailers: Record<string, string> = {};
  const noBody = head || (status >= 100 && status < 200) || status === 204 || status === 304;
  if (noBody) {
    /* headers only */
  } else if (/(^|,)\s*chunked\s*$/i.test(headers['transfer-encoding'] ?? '')) {
    const parts: Buffer[] = [];
    for (;;) {
      const le = buf.indexOf('\r\n', p);
      if (le < 0) throw new Incomplete();
      const sizeField = buf.subarray(p, le).toString('latin1').split(';')[0]!.trim();
      if (!/^[0-9a-fA-F]+$/.test(sizeField)) throw new Error(`bad chunk size line ${show(buf.subarray(p, le + 2))}`);
      const size = parseInt(sizeField, 16);
      p = le + 2;
      if (size === 0) {
        const tl: string[] = [];
        for (;;) {
          const te = buf.indexOf('\r\n', p);
          if (te < 0) throw new Incomplete();
          if (te === p) {
            p += 2;
            break;
          }
          tl.push(buf.subarray(p, te).toString('latin1'));
          p = te + 2;
        }
        parseHeaderLines(tl, trailers, []);
        break;
      }
      if (buf.length < p + size + 2) throw new Incomplete();
      parts.push(buf.subarray(p, p + size));
      chunks++;
      if (buf[p + size] !== 13 || buf[p + size + 1] !== 10) throw new Error(`chunk data not followed by CRLF: ${show(buf.subarray(p + size, p + size + 20))}`);
      p += size + 2;
    }
    body = Buffer.concat(parts);
  } else if (headers['content-length'] !== undefined) {
    if (!/^\d+$/.test(headers['content-length'])) throw new Error(`bad Content-Length ${JSON.stringify(headers['content-length'])}`);
    const n = Number(headers['content-length']);
    if (buf.length < p + n) throw new Incomplete();
    body = Buffer.from(buf.subarray(p, p + n));
    p += n;
  } else {
    // Delimited by the connection closing.
    if (!eof) throw new Incomplete();
    body = Buffer.from(buf.subarray(p));
    p = buf.length;
  }
  const res: RawResponse = {
    version: m[1]!, status, reason: m[3] ?? '', headers, headerList, body, chunks, trailers,
    text: () => body.toString('utf8'),
    json: () => JSON.parse(body.toString('utf8')),
  };
  return { res, used: p };
}

class Conn {
  buf = Buffer.alloc(0);
  /** The server closed its side (FIN or RST). */
  ended = false;
  error: Error | undefined;
  private waiters = new Set<() => void>();

  private constructor(readonly sock: Socket) {
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.notify();
    });
    const closed = () => {
      this.ended = true;
      this.notify();
    };
    sock.on('end', closed);
    sock.on('close', closed);
    sock.on('error', (err) => {
      this.error = err;
      closed();
    });
  }

  static open(port: number): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const sock = connect({ port, host: '127.0.0.1' });
      sock.once('error', reject);
      sock.once('connect', () => {
        sock.off('error', reject);
        resolve(new Conn(sock));
      });
    });
  }

  private notify() {
    for (const w of [...this.waiters]) w();
  }

  /** Writes and waits until the bytes are handed to the kernel (errors are ignored: see `error`). */
  write(data: string | Uint8Array): Promise<void> {
    return new Promise((resolve) => {
      if (this.sock.destroyed) return resolve();
      this.sock.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data, () => resolve());
    });
  }

  /** Resolves once `pred()` holds; rejects after `ms` or if the connection ends first. */
  waitFor(pred: () => boolean, what: string, ms = 3000): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (err) reject(err);
        else resolve();
      };
      const check = () => {
        if (pred()) done();
        else if (this.ended) done(new Error(`connection closed while waiting for ${what}; received ${show(this.buf)}`));
      };
      const timer = setTimeout(() => done(new Error(`timed out after ${ms} ms waiting for ${what}; received ${show(this.buf)}`)), ms);
      this.waiters.add(check);
      check();
    });
  }

  /** Reads the next response off the stream (`head`: it answers a HEAD, so it has no body). */
  read(opts: { head?: boolean; ms?: number } = {}): Promise<RawResponse> {
    let out: { res: RawResponse; used: number } | undefined;
    const attempt = () => {
      if (out) return true;
      try {
        out = parseResponse(this.buf, opts.head ?? false, this.ended);
        return true;
      } catch (err) {
        if (err instanceof Incomplete) return false;
        throw err;
      }
    };
    return new Promise<RawResponse>((resolve, reject) => {
      let parseError: unknown;
      const pred = () => {
        try {
          return attempt();
        } catch (err) {
          parseError = err;
          return true;
        }
      };
      this.waitFor(pred, 'a complete response', opts.ms ?? 3000).then(() => {
        if (parseError) return reject(new Error(`${(parseError as Error).message}; received ${show(this.buf)}`));
        this.buf = this.buf.subarray(out!.used);
        resolve(out!.res);
      }, reject);
    });
  }

  /** Resolves when the server has closed the connection; rejects after `ms`. */
  waitClosed(ms = 2000): Promise<void> {
    return this.waitFor(() => this.ended, 'the server to close the connection', ms);
  }

  /** Whether the connection is still open after `ms` quiet milliseconds. */
  async stillOpen(ms = 150): Promise<boolean> {
    await sleep(ms);
    return !this.ended && !this.sock.destroyed;
  }

  destroy() {
    this.sock.destroy();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type HeaderList = Record<string, string> | [string, string][];

/** Builds request bytes; adds Host, and Content-Length for a body unless the headers frame it. */
function request(method: string, path: string, opts: { headers?: HeaderList; body?: string | Uint8Array; version?: string; host?: boolean } = {}): Buffer {
  const list: [string, string][] = Array.isArray(opts.headers) ? [...opts.headers] : Object.entries(opts.headers ?? {});
  const has = (n: string) => list.some(([k]) => k.toLowerCase() === n);
  if (opts.host !== false && !has('host')) list.unshift(['Host', `127.0.0.1:${port()}`]);
  const body = opts.body === undefined ? Buffer.alloc(0) : Buffer.from(opts.body as any);
  if (opts.body !== undefined && !has('content-length') && !has('transfer-encoding')) list.push(['Content-Length', String(body.length)]);
  const head = `${method} ${path} HTTP/${opts.version ?? '1.1'}\r\n${list.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
}

/** A chunked body: each piece as one chunk (the first with an extension), then a trailer. */
function chunked(pieces: (string | Uint8Array)[], trailer = 'X-Trailer: yes\r\n'): Buffer {
  const parts: Buffer[] = [];
  pieces.forEach((piece, i) => {
    const b = Buffer.from(piece as any);
    parts.push(Buffer.from(`${b.length.toString(16)}${i === 0 ? ';foo=bar' : ''}\r\n`), b, Buffer.from('\r\n'));
  });
  parts.push(Buffer.from(`0\r\n${trailer}\r\n`));
  return Buffer.concat(parts);
}

function splitInto(s: string, n: number): string[] {
  const size = Math.ceil(s.length / n);
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The `simple` model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, INT32 [1,16].
// ---------------------------------------------------------------------------------------------------

const seq = (f: (i: number) => number) => Array.from({ length: 16 }, (_, i) => f(i) | 0);

function inferBody(a: number[], b: number[]): string {
  return JSON.stringify({
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
    ],
  });
}

function expectSimple(res: RawResponse, a: number[], b: number[]) {
  expect(res.status, res.text()).toBe(200);
  expect(res.headers['content-type']).toBe('application/json');
  const j = res.json();
  expect(j.model_name).toBe('simple');
  expect(j.model_version).toBe('1');
  const outs = Object.fromEntries(j.outputs.map((o: any) => [o.name, o]));
  expect(outs.OUTPUT0).toEqual({ name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: a.map((x, i) => (x + b[i]!) | 0) });
  expect(outs.OUTPUT1).toEqual({ name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: a.map((x, i) => (x - b[i]!) | 0) });
}

/** Content-Length present, sent once, and equal to the body's length; not chunked. */
function expectContentLength(res: RawResponse) {
  expect(res.headerList.filter(([k]) => k === 'content-length'), JSON.stringify(res.headerList)).toHaveLength(1);
  expect(res.headers['content-length']).toBe(String(res.body.length));
  expect(res.headers['transfer-encoding']).toBeUndefined();
}

/** The `data:` events of a server-sent event body, parsed; the body must be nothing but events. */
function sseEvents(text: string): any[] {
  expect(text.endsWith('\n\n'), JSON.stringify(text)).toBe(true);
  return text.slice(0, -2).split('\n\n').map((e) => {
    expect(e.startsWith('data: '), JSON.stringify(e)).toBe(true);
    return JSON.parse(e.slice(6));
  });
}

const token = (t: string) => ({ text_output: t, model_name: 'token_streamer', model_version: '1' });

const IMF_DATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;

function expectDate(res: RawResponse) {
  const d = res.headers.date;
  expect(d, JSON.stringify(res.headerList)).toMatch(IMF_DATE);
  expect(Math.abs(Date.parse(d!) - Date.now())).toBeLessThan(10_000);
}

// ---------------------------------------------------------------------------------------------------

let s: TestServer;
const port = () => s.http!.port;
const open = () => Conn.open(port());
const conns: Conn[] = [];
async function conn(): Promise<Conn> {
  const c = await open();
  conns.push(c);
  return c;
}

beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], httpCompression: { mode: 'always', minBytes: 0 } });
});
afterAll(async () => {
  for (const c of conns) c.destroy();
  await s?.stop();
});

/** A fresh connection still gets a correct inference answer. */
async function expectServerHealthy() {
  const c = await conn();
  const a = seq((i) => i * 3);
  const b = seq(() => 7);
  await c.write(request('POST', '/v2/models/simple/infer', { headers: { 'Content-Type': 'application/json' }, body: inferBody(a, b) }));
  expectSimple(await c.read(), a, b);
  c.destroy();
}

describe('HTTP/1.1 on the wire', () => {
  it('keeps one connection alive across different requests, with Date and Content-Length', async () => {
    const c = await conn();
    await c.write(request('GET', '/v2/health/ready'));
    const ready = await c.read();
    expect(ready.status).toBe(200);
    expect(ready.body.length).toBe(0);

    const a = seq((i) => i);
    const b = seq(() => 1);
    await c.write(request('POST', '/v2/models/simple/infer', { headers: { 'Content-Type': 'application/json' }, body: inferBody(a, b) }));
    const inferred = await c.read();
    expectSimple(inferred, a, b);

    await c.write(request('GET', '/v2/models/simple'));
    const meta = await c.read();
    expect(meta.status).toBe(200);
    expect(meta.headers['content-type']).toBe('application/json');
    expect(meta.json()).toMatchObject({ name: 'simple', versions: ['1'], platform: 'onnxruntime_onnx' });

    for (const r of [ready, inferred, meta]) {
      expect(r.version).toBe('1.1');
      expect(r.headers.connection?.toLowerCase()).toBe('keep-alive');
      expectDate(r);
      expectContentLength(r);
    }
    expect(c.buf.length, `unexpected extra bytes ${show(c.buf)}`).toBe(0);
    expect(await c.stillOpen()).toBe(true);
  });

  it('answers two pipelined infer requests in order', async () => {
    const c = await conn();
    const a1 = seq((i) => i);
    const b1 = seq(() => 2);
    const a2 = seq((i) => 1000 * i);
    const b2 = seq((i) => -i);
    await c.write(Buffer.concat([
      request('POST', '/v2/models/simple/infer', { headers: { 'Content-Type': 'application/json' }, body: inferBody(a1, b1) }),
      // Header names in odd case: they are case-insensitive.
      request('POST', '/v2/models/simple/versions/1/infer', { headers: [['content-TYPE', 'application/json'], ['CONTENT-LENGTH', String(inferBody(a2, b2).length)]], body: inferBody(a2, b2) }),
    ]));
    const r1 = await c.read();
    const r2 = await c.read();
    expectSimple(r1, a1, b1);
    expectSimple(r2, a2, b2);
    expect(await c.stillOpen()).toBe(true);
  });

  it('answers pipelined requests that mix the infer route and app routes in order', async () => {
    const c = await conn();
    const a1 = seq((i) => i + 5);
    const b1 = seq(() => 5);
    const a2 = seq((i) => -i);
    const b2 = seq((i) => i * i);
    await c.write(Buffer.concat([
      request('POST', '/v2/models/simple/infer', { body: inferBody(a1, b1) }),
      request('GET', '/v2/models/simple/config'),
      request('GET', '/v2/health/live'),
      request('POST', '/v2/models/simple/infer', { body: inferBody(a2, b2) }),
      request('GET', '/v2/nope'),
    ]));
    expectSimple(await c.read(), a1, b1);
    const cfg = await c.read();
    expect(cfg.status).toBe(200);
    expect(cfg.json()).toMatchObject({ name: 'simple', max_batch_size: 8 });
    const live = await c.read();
    expect(live.status).toBe(200);
    expect(live.body.length).toBe(0);
    expectSimple(await c.read(), a2, b2);
    const nf = await c.read();
    expect(nf.status).toBe(404);
    expect(nf.text()).toBe('{"error":"Not Found"}');
  });

  it('reads chunked request bodies, with extensions and trailers, on the infer and app routes', async () => {
    const c = await conn();
    const a = seq((i) => 2 * i);
    const b = seq((i) => i);
    await c.write(request('POST', '/v2/models/simple/infer', {
      headers: { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', Trailer: 'X-Trailer' },
      body: chunked(splitInto(inferBody(a, b), 5)),
    }));
    const r = await c.read();
    expectSimple(r, a, b);

    await c.write(request('POST', '/v2/repository/index', {
      headers: { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', Trailer: 'X-Trailer' },
      body: chunked(['{"rea', 'dy":', 'true}']),
    }));
    const idx = await c.read();
    expect(idx.status, idx.text()).toBe(200);
    const entries = idx.json();
    expect(entries).toContainEqual({ name: 'simple', version: '1', state: 'READY', reason: '' });
    expect(entries.every((e: any) => e.state === 'READY')).toBe(true);

    await c.write(request('POST', '/v2/repository/index', {
      headers: { 'Transfer-Encoding': 'chunked' },
      body: chunked(['{', '}'], ''),
    }));
    const all = await c.read();
    expect(all.status, all.text()).toBe(200);
    expect(all.json()).toContainEqual({ name: 'simple', version: '1', state: 'READY', reason: '' });

    // The framing ended where it should: the connection still carries a plain request.
    await c.write(request('GET', '/v2/health/ready'));
    expect((await c.read()).status).toBe(200);
    expect(await c.stillOpen()).toBe(true);
  });

  it('sends 100 Continue before the body when asked, then the answer', async () => {
    const c = await conn();
    const a = seq((i) => i * 11);
    const b = seq((i) => 100 - i);
    const body = inferBody(a, b);
    await c.write(request('POST', '/v2/models/simple/infer', {
      headers: { 'Content-Type': 'application/json', 'Content-Length': String(body.length), Expect: '100-continue' },
    }));
    const cont = await c.read({ ms: 2000 });
    expect(cont.status).toBe(100);
    expect(cont.reason).toBe('Continue');
    expect(cont.body.length).toBe(0);
    await c.write(body);
    expectSimple(await c.read(), a, b);

    // And on an app route.
    const idxBody = '{"ready":true}';
    await c.write(request('POST', '/v2/repository/index', {
      headers: { 'Content-Type': 'application/json', 'Content-Length': String(idxBody.length), Expect: '100-continue' },
    }));
    expect((await c.read({ ms: 2000 })).status).toBe(100);
    await c.write(idxBody);
    const idx = await c.read();
    expect(idx.status, idx.text()).toBe(200);
    expect(idx.json()).toContainEqual({ name: 'simple', version: '1', state: 'READY', reason: '' });
  });

  it('closes after a response to Connection: close', async () => {
    const c = await conn();
    const a = seq((i) => i);
    const b = seq((i) => i);
    await c.write(request('POST', '/v2/models/simple/infer', { headers: { Connection: 'close' }, body: inferBody(a, b) }));
    const r = await c.read();
    expectSimple(r, a, b);
    expect(r.headers.connection?.toLowerCase()).toBe('close');
    await c.waitClosed();
    expect(c.buf.length).toBe(0);

    const c2 = await conn();
    await c2.write(request('GET', '/v2/models/simple', { headers: { Connection: 'close' } }));
    const meta = await c2.read();
    expect(meta.status).toBe(200);
    expect(meta.json().name).toBe('simple');
    expect(meta.headers.connection?.toLowerCase()).toBe('close');
    await c2.waitClosed();
  });

  it('answers an HTTP/1.0 request without keep-alive, then closes', async () => {
    const c = await conn();
    await c.write(request('GET', '/v2/health/ready', { version: '1.0', host: false }));
    const r = await c.read();
    expect(r.status).toBe(200);
    expect(r.body.length).toBe(0);
    expect(r.headers.connection?.toLowerCase() ?? 'close').toBe('close');
    await c.waitClosed();

    // An HTTP/1.0 client cannot read chunked: the answer is framed by Content-Length (or the close).
    const c2 = await conn();
    const a = seq((i) => i + 1);
    const b = seq(() => 3);
    await c2.write(request('POST', '/v2/models/simple/infer', { version: '1.0', host: false, body: inferBody(a, b) }));
    const r2 = await c2.read();
    expect(r2.headers['transfer-encoding']).toBeUndefined();
    expectSimple(r2, a, b);
    await c2.waitClosed();

    const c3 = await conn();
    await c3.write(request('GET', '/v2/models/simple', { version: '1.0', host: false }));
    const r3 = await c3.read();
    expect(r3.headers['transfer-encoding']).toBeUndefined();
    expect(r3.status).toBe(200);
    expect(r3.json().name).toBe('simple');
    await c3.waitClosed();
  });

  it('sends no body bytes after a HEAD response', async () => {
    const c = await conn();
    await c.write(request('HEAD', '/v2/health/live'));
    const live = await c.read({ head: true });
    // A route whose GET has a body: HEAD gets its headers but none of its bytes.
    await c.write(request('HEAD', '/v2/models/simple'));
    const meta = await c.read({ head: true });
    await c.write(request('GET', '/v2/health/ready'));
    // If a HEAD response had carried body bytes, they would be parsed here as the next status line.
    const next = await c.read();
    expect(next.status).toBe(200);
    expect(next.body.length).toBe(0);
    expect(c.buf.length, `unexpected extra bytes ${show(c.buf)}`).toBe(0);
    expect([live.status, meta.status]).toEqual([200, 200]);
    expect(await c.stillOpen()).toBe(true);
  });

  it('answers HEAD /v2/health/live and HEAD /v2/models/simple with 200', async () => {
    const c = await conn();
    await c.write(request('HEAD', '/v2/health/live'));
    const live = await c.read({ head: true });
    await c.write(request('HEAD', '/v2/models/simple'));
    const meta = await c.read({ head: true });
    expect(live.status).toBe(200);
    expect(meta.status).toBe(200);
    expect(meta.headers['content-type']).toBe('application/json');
  });

  it('reads a body that arrives in many small writes', async () => {
    const c = await conn();
    const a = seq((i) => i * 7 - 50);
    const b = seq((i) => 3 * i);
    const bytes = request('POST', '/v2/models/simple/infer', { headers: { 'Content-Type': 'application/json' }, body: inferBody(a, b) });
    const bodyAt = bytes.indexOf('\r\n\r\n') + 4;
    // The head in a few pieces, then the body's first 200 bytes one at a time, then the rest.
    for (const piece of [bytes.subarray(0, 10), bytes.subarray(10, 40), bytes.subarray(40, bodyAt)]) {
      await c.write(piece);
      await sleep(5);
    }
    for (let i = bodyAt; i < bodyAt + 200; i++) {
      await c.write(bytes.subarray(i, i + 1));
      if (i % 10 === 0) await sleep(2);
    }
    await c.write(bytes.subarray(bodyAt + 200));
    expectSimple(await c.read(), a, b);
  });

  it('survives clients that hang up halfway through a body', async () => {
    const body = inferBody(seq((i) => i), seq((i) => i));
    for (let i = 0; i < 20; i++) {
      const c = await open();
      const bytes = request('POST', i % 2 ? '/v2/models/simple/infer' : '/v2/repository/index', { body: i % 2 ? body : '{"ready": true,                                  }' });
      await c.write(bytes.subarray(0, bytes.length - 30));
      if (i % 4 < 2) c.sock.end();
      else c.destroy();
    }
    await sleep(50);
    await expectServerHealthy();
  });

  it('serves binary inference (Inference-Header-Content-Length)', async () => {
    const c = await conn();
    const a = seq((i) => i * 1_000_003);
    const b = seq((i) => -7 * i);
    const header = JSON.stringify({
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1', parameters: { binary_data: true } }],
    });
    const body = Buffer.concat([Buffer.from(header), Buffer.from(Int32Array.from(a).buffer), Buffer.from(Int32Array.from(b).buffer)]);
    await c.write(request('POST', '/v2/models/simple/infer', {
      headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.length) }, body,
    }));
    const r = await c.read();
    expect(r.status, r.text()).toBe(200);
    expect(r.headers['content-type']).toBe('application/octet-stream');
    const hl = Number(r.headers['inference-header-content-length']);
    expect(hl).toBeGreaterThan(0);
    expectContentLength(r);
    const json = JSON.parse(r.body.subarray(0, hl).toString('utf8'));
    expect(json.outputs.map((o: any) => [o.name, o.datatype, o.shape, o.parameters])).toEqual([
      ['OUTPUT0', 'INT32', [1, 16], { binary_data_size: 64 }],
      ['OUTPUT1', 'INT32', [1, 16], { binary_data_size: 64 }],
    ]);
    expect(r.body.length).toBe(hl + 128);
    const bin = r.body.subarray(hl);
    const ints = (off: number) => Array.from({ length: 16 }, (_, i) => bin.readInt32LE(off + 4 * i));
    expect(ints(0)).toEqual(a.map((x, i) => (x + b[i]!) | 0));
    expect(ints(64)).toEqual(a.map((x, i) => (x - b[i]!) | 0));
  });

  it('answers an unknown route with 404 and the wrong method with 405', async () => {
    const c = await conn();
    await c.write(request('GET', '/v2/nope/nothing'));
    const nf = await c.read();
    expect(nf.status).toBe(404);
    expect(nf.headers['content-type']).toBe('application/json');
    expect(nf.text()).toBe('{"error":"Not Found"}');
    expectContentLength(nf);

    await c.write(request('GET', '/v2/models/simple/infer'));
    const na = await c.read();
    expect(na.status).toBe(405);
    expect(na.headers['content-type']).toBe('application/json');
    expect(na.text()).toBe('{"error":"Method Not Allowed"}');

    await c.write(request('PUT', '/v2/models/simple/versions/1/infer', { body: '{}' }));
    const put = await c.read();
    expect(put.status).toBe(405);
    expect(put.text()).toBe('{"error":"Method Not Allowed"}');
    expect(await c.stillOpen()).toBe(true);
  });

  it('streams generate_stream as chunked server-sent events, as they are produced', async () => {
    const c = await conn();
    await c.write(request('POST', '/v2/models/token_streamer/generate_stream', {
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text_input: 'one two three', delay_ms: 400 }),
    }));
    // The first event is on the wire before the last token is produced, 800 ms after it (the model
    // pauses 400 ms before each token): held back to the end, they would come together.
    await c.waitFor(() => c.buf.includes('data: '), 'the first event');
    expect(c.buf.toString().split('data: ')).toHaveLength(2);
    expect(c.buf.includes('three')).toBe(false);
    const r = await c.read({ ms: 10_000 });
    expect(r.status, r.text()).toBe(200);
    expect(r.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(r.headers['transfer-encoding']).toBe('chunked');
    expect(r.headers['content-length']).toBeUndefined();
    expect(r.chunks).toBeGreaterThanOrEqual(3);
    expect(sseEvents(r.text())).toEqual([token('one'), token('two'), token('three')]);
    // The zero-length chunk ended the stream; the connection carries the next request.
    await c.write(request('GET', '/v2/health/live'));
    expect((await c.read()).status).toBe(200);
  });
});

describe('HTTP/1.1 on the wire: more of what clients and proxies do', () => {
  it('ignores an empty line before a request line (RFC 9112 §2.2)', async () => {
    const c = await conn();
    const a = seq((i) => i);
    const b = seq(() => 4);
    // Some clients send a stray CRLF after a POST body.
    await c.write(Buffer.concat([
      request('POST', '/v2/models/simple/infer', { body: inferBody(a, b) }), Buffer.from('\r\n'), request('GET', '/v2/health/ready'),
    ]));
    expectSimple(await c.read(), a, b);
    const r = await c.read();
    expect(r.status).toBe(200);
    expect(r.body.length).toBe(0);
  });

  it('keeps an HTTP/1.0 connection with Connection: keep-alive open', async () => {
    const c = await conn();
    const a = seq((i) => 2 * i);
    const b = seq(() => -1);
    await c.write(request('POST', '/v2/models/simple/infer', { version: '1.0', host: false, headers: { Connection: 'keep-alive' }, body: inferBody(a, b) }));
    const r = await c.read();
    expectSimple(r, a, b);
    expect(r.headers.connection?.toLowerCase()).toBe('keep-alive');
    expectContentLength(r);
    await c.write(request('GET', '/v2/models/simple', { version: '1.0', host: false, headers: { Connection: 'keep-alive' } }));
    const meta = await c.read();
    expect(meta.status).toBe(200);
    expect(meta.headers.connection?.toLowerCase()).toBe('keep-alive');
    expectContentLength(meta);
    expect(await c.stillOpen()).toBe(true);
  });

  it('streams generate_stream to an HTTP/1.0 client without chunked framing', async () => {
    const c = await conn();
    await c.write(request('POST', '/v2/models/token_streamer/generate_stream', {
      version: '1.0', host: false, body: JSON.stringify({ text_input: 'old client' }),
    }));
    const r = await c.read();
    expect(r.status).toBe(200);
    expect(r.headers['transfer-encoding'], 'an HTTP/1.0 client cannot decode chunked').toBeUndefined();
    expect(sseEvents(r.text())).toEqual([token('old'), token('client')]);
    await c.waitClosed();
  });

  it('answers pipelined requests in order behind a slow event stream', async () => {
    const c = await conn();
    const a = seq((i) => 3 * i);
    const b = seq(() => 3);
    await c.write(Buffer.concat([
      request('POST', '/v2/models/token_streamer/generate_stream', { body: JSON.stringify({ text_input: 'x y', delay_ms: 80 }) }),
      request('GET', '/v2/health/ready'),
      request('POST', '/v2/models/simple/infer', { body: inferBody(a, b) }),
    ]));
    const sse = await c.read();
    expect(sse.status).toBe(200);
    expect(sse.headers['transfer-encoding']).toBe('chunked');
    expect(sseEvents(sse.text())).toEqual([token('x'), token('y')]);
    const ready = await c.read();
    expect(ready.status).toBe(200);
    expect(ready.body.length).toBe(0);
    expectSimple(await c.read(), a, b);
  });

  it('answers 30 pipelined infer requests in order', async () => {
    const c = await conn();
    const inputs = Array.from({ length: 30 }, (_, k) => [seq((i) => k * 100 + i), seq(() => k)] as const);
    await c.write(Buffer.concat(inputs.map(([a, b]) => request('POST', '/v2/models/simple/infer', { body: inferBody([...a], [...b]) }))));
    for (const [a, b] of inputs) expectSimple(await c.read(), [...a], [...b]);
    expect(await c.stillOpen()).toBe(true);
  });

  it('accepts an absolute-form request target (RFC 9112 §3.2.2)', async () => {
    const c = await conn();
    const a = seq((i) => i);
    const b = seq(() => 8);
    await c.write(request('POST', `http://127.0.0.1:${port()}/v2/models/simple/infer`, { body: inferBody(a, b) }));
    expectSimple(await c.read(), a, b);
    await c.write(request('GET', `http://127.0.0.1:${port()}/v2/models/simple`));
    const meta = await c.read();
    expect(meta.status).toBe(200);
    expect(meta.json().name).toBe('simple');
  });

  it('keeps the framing when the app answers before the body has arrived', async () => {
    const c = await conn();
    const body = JSON.stringify({ filler: 'z'.repeat(2000) });
    const bytes = request('POST', '/v2/no/such/route', { body });
    const cut = bytes.indexOf('\r\n\r\n') + 4 + 100;
    await c.write(bytes.subarray(0, cut));
    const nf = await c.read();
    expect(nf.status).toBe(404);
    expect(nf.text()).toBe('{"error":"Not Found"}');
    // The rest of that body must be skipped, not read as the next request.
    await c.write(Buffer.concat([bytes.subarray(cut), request('GET', '/v2/health/ready')]));
    const next = await c.read();
    expect(next.status).toBe(200);
    expect(next.body.length).toBe(0);
  });

  it('reads a chunked body that arrives one byte at a time', async () => {
    const c = await conn();
    const a = seq((i) => 5 * i);
    const b = seq((i) => i % 3);
    const bytes = request('POST', '/v2/models/simple/infer', {
      headers: { 'Transfer-Encoding': 'chunked' }, body: chunked(splitInto(inferBody(a, b), 4)),
    });
    const bodyAt = bytes.indexOf('\r\n\r\n') + 4;
    await c.write(bytes.subarray(0, bodyAt));
    for (let i = bodyAt; i < bytes.length; i++) {
      await c.write(bytes.subarray(i, i + 1));
      if (i % 25 === 0) await sleep(1);
    }
    expectSimple(await c.read(), a, b);
    await c.write(request('GET', '/v2/health/live'));
    expect((await c.read()).status).toBe(200);
  });

  it('gzips an infer response when asked, with the compressed length', async () => {
    const { gunzipSync } = await import('node:zlib');
    const c = await conn();
    const a = seq((i) => i);
    const b = seq(() => 6);
    await c.write(request('POST', '/v2/models/simple/infer', { headers: { 'Accept-Encoding': 'gzip' }, body: inferBody(a, b) }));
    const r = await c.read();
    expect(r.status).toBe(200);
    expect(r.headers['content-encoding']).toBe('gzip');
    expectContentLength(r);
    const plain = gunzipSync(r.body);
    expectSimple({ ...r, body: plain, text: () => plain.toString(), json: () => JSON.parse(plain.toString()) }, a, b);
  });

  const simpleBody = () => inferBody(seq(() => 1), seq(() => 1));
  for (const [name, bytes, statuses] of [
    ['a malformed request line', () => 'GARBAGE\r\n\r\n', [400]],
    ['a header section over 16 KiB', () => request('GET', '/v2/health/ready', { headers: { 'X-Huge': 'a'.repeat(20 * 1024) } }), [431]],
    ['two different Content-Lengths', () => request('POST', '/v2/models/simple/infer', {
      headers: [['Content-Length', String(simpleBody().length)], ['Content-Length', String(simpleBody().length + 1)]], body: simpleBody(),
    }), [400]],
    ['Content-Length together with Transfer-Encoding: chunked', () => request('POST', '/v2/models/simple/infer', {
      headers: { 'Content-Length': String(simpleBody().length), 'Transfer-Encoding': 'chunked' }, body: chunked([simpleBody()]),
    }), [400]],
    ['an HTTP/1.1 request without Host (RFC 9112 §3.2)', () => request('GET', '/v2/health/ready', { host: false }), [400]],
    ['an invalid chunk size', () => request('POST', '/v2/models/simple/infer', { headers: { 'Transfer-Encoding': 'chunked' }, body: 'zz\r\nhello\r\n0\r\n\r\n' }), [400]],
    ['whitespace between a header name and the colon', () => request('POST', '/v2/models/simple/infer', { headers: [['Content-Length ', '2']], body: '{}' }), [400]],
    ['a Transfer-Encoding that does not end in chunked', () => request('POST', '/v2/models/simple/infer', { headers: { 'Transfer-Encoding': 'gzip' }, body: '{}' }), [400, 501]],
    ['a non-numeric Content-Length', () => request('POST', '/v2/models/simple/infer', { headers: { 'Content-Length': '12abc' }, body: '{}' }), [400]],
    ['a request line over 16 KiB', () => request('GET', `/v2/health/ready?${'q'.repeat(20 * 1024)}`), [400, 414, 431]],
  ] as const) {
    it(`refuses ${name} and closes`, async () => {
      const c = await conn();
      await c.write(bytes());
      const r = await c.read();
      expect(statuses).toContain(r.status);
      await c.waitClosed();
      await expectServerHealthy();
    });
  }
});

describe('HTTP/1.1 on the wire: bodies over --http-max-input-size', () => {
  let small: TestServer;
  beforeAll(async () => {
    small = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], maxInputSize: 1024 });
  });
  afterAll(async () => small?.stop(2000));
  const tooBig = (n: number) => `request JSON size of ${n} bytes exceeds the maximum allowed input size of 1024 bytes. Use --http-max-input-size to increase the limit.`;

  it('refuses an oversized body with Triton\'s 400, and the connection goes on (or closes) cleanly', async () => {
    for (const te of [false, true]) {
      const c = await Conn.open(small.http!.port);
      conns.push(c);
      const big = JSON.stringify({ inputs: [], pad: 'p'.repeat(5000) });
      await c.write(request('POST', '/v2/models/simple/infer', te ? { headers: { 'Transfer-Encoding': 'chunked' }, body: chunked(splitInto(big, 3), '') } : { body: big }));
      const r = await c.read();
      expect(r.status, r.text()).toBe(400);
      // A chunked body is refused at the chunk that crosses the limit, its first here.
      expect(r.json().error).toBe(tooBig(te ? Math.ceil(big.length / 3) : big.length));
      const a = seq((i) => i);
      const b = seq(() => 1);
      await c.write(request('POST', '/v2/models/simple/infer', { body: inferBody(a, b) }));
      if (r.headers.connection?.toLowerCase() === 'close') await c.waitClosed();
      else expectSimple(await c.read(), a, b);
    }
  });
});

describe('graceful stop', () => {
  it('stops promptly and closes an idle keep-alive connection', async () => {
    const own = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'] });
    let stopped = false;
    try {
      const c = await Conn.open(own.http!.port);
      conns.push(c);
      await c.write(Buffer.from(`GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1:${own.http!.port}\r\n\r\n`));
      const r = await c.read();
      expect(r.status).toBe(200);
      expect(r.headers.connection?.toLowerCase()).toBe('keep-alive');
      expect(await c.stillOpen(50)).toBe(true);
      const t0 = performance.now();
      await own.stop(5000);
      stopped = true;
      expect(performance.now() - t0).toBeLessThan(2000);
      await c.waitClosed(1000);
      expect(c.buf.length, `unexpected bytes ${show(c.buf)}`).toBe(0);
      // Nothing listens any more.
      await expect(Conn.open(own.http!.port)).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      if (!stopped) await own.stop(1000);
    }
  });

  it('lets a request in flight finish, then closes its connection', async () => {
    const own = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple', 'token_streamer'] });
    let stopped = false;
    try {
      const c = await Conn.open(own.http!.port);
      conns.push(c);
      await c.write(Buffer.from(`POST /v2/models/token_streamer/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n${JSON.stringify({ text_input: 'slow', delay_ms: 300 }).padEnd(40)}`));
      await sleep(50);
      const stopping = own.stop(5000).then(() => (stopped = true));
      const r = await c.read({ ms: 3000 });
      expect(r.status, r.text()).toBe(200);
      expect(r.json()).toEqual({ text_output: 'slow', model_name: 'token_streamer', model_version: '1' });
      await c.waitClosed(2000);
      await stopping;
    } finally {
      if (!stopped) await own.stop(1000);
    }
  });
});
