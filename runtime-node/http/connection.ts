/**
 * One client connection of runtime-node/http/server.ts: reads requests one at a time (heads and bodies
 * framed by Content-Length or chunked, `Expect: 100-continue`, keep-alive and `Connection: close`,
 * HTTP/1.0, pipelined requests), hands each to core's inferEndpoint or to the app, and writes the
 * answers back in order. Malformed requests get node:http's answers (400, 431, 417) and a closed
 * connection; a head or body that takes too long gets 408 (checked by the listener's one timer);
 * pipelined requests are not read while the answers before them wait for a client that does not read
 * them (the socket is paused until it drains).
 */

import type { Socket } from 'node:net';
import type { HttpReply, InferHttpRequest } from '../../core/index.js';
import { httpDate, socketGone, statusLine, writeEvents } from './response.js';
import { BadRequest, Body, binaryStart, MAX_HEAD, parseHead, type Head, type RefusalStatus } from './request.js';

/** What a connection hands its requests to. */
export interface RequestHandlers {
  /** The app every request goes to unless the infer shortcut takes it. */
  fetch: (req: Request) => Response | Promise<Response>;
  /** Core's inferEndpoint, for POST .../infer; without it every request goes to the app. */
  infer?: (req: InferHttpRequest) => Promise<HttpReply>;
  /**
   * With CORS on, infer requests that carry an Origin go to the app, whose middleware adds the CORS
   * headers; without CORS no response carries them, so both routes answer alike.
   */
  cors?: boolean;
  /**
   * Judges a request by its method, target and headers (names lower-case) before anything else: a
   * reply refuses it (API keys). Called for every request, so it must be cheap.
   */
  authorize?: (method: string, target: string, header: (name: string) => string | undefined) => HttpReply | undefined;
}

/** What a connection is told besides the handlers; the listener's options hold the same, optional. */
export interface ConnectionTiming {
  /** Errors no response can carry (a failing handler, a broken write). */
  onError: (err: Error) => void;
  /** How long a request's head may take to arrive from its first byte (node:http's headersTimeout). */
  headersTimeoutMs: number;
  /** How long a whole request (head and body) may take to arrive (node:http's requestTimeout). */
  requestTimeoutMs: number;
}

export type ConnectionOptions = RequestHandlers & ConnectionTiming;

/** node:http's default for how long an idle keep-alive connection stays open. */
const KEEP_ALIVE_MS = 65_000;
// Names with %-escapes take the app's route, which decodes them; a trailing slash or another method is
// the app's to refuse.
const INFER_PATH = /^\/v2\/models\/([^/?%]+)(?:\/versions\/([0-9]+))?\/infer(?:\?|$)/;
const HOST = /^[\w.\-]+(?::\d+)?$|^\[[\da-fA-F:.]+\](?::\d+)?$/;
const CRLF2 = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');
const HEAD_TOO_LARGE = `the request line and headers are larger than ${MAX_HEAD} bytes`;
/** Triton's cap on a chunked body's non-empty chunks (http_server.cc kMaxChunkedChunks), and its text. */
const MAX_CHUNKS = 1 << 16;
const TOO_MANY_CHUNKS = `Chunked request body exceeds maximum of ${MAX_CHUNKS} non-empty chunks. Send fewer or larger HTTP chunks.`;
/** The most of an unread body still dropped to keep its connection alive after an early error. */
const DISCARD_KEEP_ALIVE = 1 << 20;
/** How long the rest of a refused body is read and dropped before the connection is cut. */
const LINGER_MS = 5000;
/** How long a connection refused by `refuse` (no more reading) stays open after its answer. */
const REFUSE_LINGER_MS = 200;

/**
 * A chunk-size line's hex size (extensions after `;` ignored, whitespace around it allowed), read from
 * its bytes `[from, end)`; at most 12 digits, so the size stays an exact number.
 */
function chunkSize(buf: Buffer, from: number, end: number): number {
  let i = from;
  while (i < end && (buf[i] === 32 || buf[i] === 9)) i++;
  const first = i;
  let size = 0;
  for (; i < end; i++) {
    const c = buf[i]!;
    const d = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (d < 0) break;
    size = size * 16 + d;
  }
  const digits = i - first;
  while (i < end && (buf[i] === 32 || buf[i] === 9)) i++;
  if (digits === 0 || digits > 12 || (i < end && buf[i] !== 59)) {
    const text = buf.toString('latin1', from, end).split(';', 1)[0]!.trim();
    throw new BadRequest(400, `malformed chunked body: invalid chunk size '${text.slice(0, 32)}'`);
  }
  return size;
}

/** One client connection: parses requests one at a time and writes their responses in order. */
export class Connection {
  private buf?: Buffer;
  /** Where to resume the search for the end of the header section. */
  private scanned = 0;
  private phase: 'head' | 'body' | 'wait' = 'head';
  /** Body bytes still expected (Content-Length), or -1 for chunked. */
  private remaining = 0;
  private chunk: 'size' | 'data' | 'data-end' | 'trailer' = 'size';
  private chunkLeft = 0;
  private chunkCount = 0;
  /** The socket is paused because a streamed body's reader is behind (Body's flow control). */
  private bodyPaused = false;
  /** This request's answer went out before its body, which is too long to read through: close after. */
  private refusedEarly = false;
  private body?: Body;
  private responded = false;
  private keepAlive = true;
  private aborted?: AbortController;
  /** Cancels the infer request being answered on this connection, if its client hangs up first. */
  private cancelInfer?: () => void;
  /** Answered by `refuse`: nothing more is read. */
  private refused = false;
  /** When the request now arriving sent its first byte (Date.now()), 0 when none is arriving. */
  private since = 0;
  /** The answers written so far wait for the client to read them: the next request waits too. */
  private draining = false;

  constructor(
    readonly socket: Socket, private readonly opts: ConnectionOptions, private readonly address: string,
    private readonly stopping: () => boolean,
  ) {
    // A connection silent for this long between requests, or in the middle of sending one, is dropped;
    // one waiting for its answer (a long inference) is not.
    socket.setTimeout(KEEP_ALIVE_MS, () => {
      if (this.phase !== 'wait') socket.destroy();
    });
    socket.on('data', (d: Buffer) => {
      if (this.refused) return;
      if (this.since === 0 && this.phase === 'head') this.since = Date.now();
      this.buf = this.buf ? Buffer.concat([this.buf, d]) : d;
      this.advance();
      // Pipelined requests wait their turn in the buffer; a client that keeps sending is paused.
      if ((this.phase === 'wait' || this.draining) && this.buf && this.buf.length > MAX_HEAD) socket.pause();
    });
    socket.on('error', () => {});
    socket.once('close', () => {
      this.body?.fail(new Error('the client closed the connection before sending the whole body'));
      this.aborted?.abort();
      this.cancelInfer?.();
    });
  }

  /**
   * For a stopping server: drops the connection if nothing is under way on it. One whose next request
   * has begun to arrive (or waits in the buffer) gets its answer, with `Connection: close`.
   */
  closeIfIdle(): void {
    if (this.phase === 'head' && this.since === 0 && !this.buf && !this.draining) this.socket.destroy();
  }

  /** Called by the listener's timer: refuses a request whose head or body is taking too long to arrive. */
  checkDeadlines(now: number): void {
    // While the client does not read its answers, its next request is not being read either: not its delay.
    if (this.since === 0 || this.draining || this.gone()) return;
    const elapsed = now - this.since;
    if (this.phase === 'head' && elapsed > this.opts.headersTimeoutMs) {
      this.refuse(408, `the request head did not arrive within ${this.opts.headersTimeoutMs} ms`);
    } else if (this.phase === 'body' && elapsed > this.opts.requestTimeoutMs) {
      // An answer already sent (an early error) leaves nothing to say: the connection just goes.
      if (this.responded) this.socket.destroy();
      else this.refuse(408, `the request body did not arrive within ${this.opts.requestTimeoutMs} ms`);
    }
  }

  private advance(): void {
    try {
      for (;;) {
        if (this.draining) return;
        if (this.phase === 'head') {
          if (this.buf && this.since === 0) this.since = Date.now();
          // An empty line before a request line is ignored (RFC 9112 §2.2): some clients send one after a body.
          while (this.buf && this.buf.length >= 2 && this.buf[0] === 13 && this.buf[1] === 10) this.take(2);
          if (!this.buf) return;
          const end = this.buf.indexOf(CRLF2, Math.max(0, this.scanned - 3));
          if (end < 0) {
            this.scanned = this.buf.length;
            if (this.buf.length > MAX_HEAD) throw new BadRequest(431, HEAD_TOO_LARGE);
            return;
          }
          if (end > MAX_HEAD) throw new BadRequest(431, HEAD_TOO_LARGE);
          const head = parseHead(this.buf.toString('latin1', 0, end));
          this.take(end + 4);
          this.scanned = 0;
          this.start(head);
        } else if (this.phase === 'body') {
          if (!this.buf || !this.readBody()) return;
        } else {
          return;
        }
      }
    } catch (err) {
      if (!(err instanceof BadRequest)) this.opts.onError(err as Error);
      this.refuse(err instanceof BadRequest ? err.status : 400, (err as Error).message);
    }
  }

  /** The connection can take no more bytes: hung up, refused, or ending after `Connection: close`. */
  private gone(): boolean {
    return socketGone(this.socket);
  }

  private take(n: number): Buffer {
    const b = this.buf!;
    const out = b.subarray(0, n);
    this.buf = n < b.length ? b.subarray(n) : undefined;
    return out;
  }

  /** Frames the body and hands the request on. */
  private start(head: Head): void {
    const h = head.headers;
    if (head.minor === 1 && !h.has('host')) throw new BadRequest(400, 'an HTTP/1.1 request must have a Host header');
    const te = h.get('transfer-encoding');
    const cl = h.get('content-length');
    if (te !== undefined) {
      if (cl !== undefined) throw new BadRequest(400, 'a request must not have both Content-Length and Transfer-Encoding');
      if (!/(?:^|,)\s*chunked\s*$/i.test(te)) throw new BadRequest(400, `unsupported Transfer-Encoding '${te.slice(0, 64)}': its last coding must be chunked`);
      this.remaining = -1;
      this.chunk = 'size';
      this.chunkCount = 0;
    } else if (cl !== undefined) {
      if (!/^\d+$/.test(cl)) throw new BadRequest(400, `invalid Content-Length '${cl.slice(0, 64)}': expected a decimal number of bytes`);
      this.remaining = Number(cl);
    } else {
      this.remaining = 0;
    }
    const conn = h.get('connection')?.toLowerCase();
    this.keepAlive = head.minor === 1 ? !conn?.includes('close') : !!conn?.includes('keep-alive');
    // Before a 100 Continue, so a client that may not send its body is not asked for it.
    const refused = this.opts.authorize?.(head.method, head.target, (name) => h.get(name.toLowerCase()));
    if (refused) {
      this.deny(refused);
      return;
    }
    const expect = h.get('expect');
    if (expect !== undefined) {
      if (expect.toLowerCase() !== '100-continue') throw new BadRequest(417, `unsupported Expect '${expect.slice(0, 64)}': only 100-continue is`);
      if (head.minor === 1) this.socket.write('HTTP/1.1 100 Continue\r\n\r\n');
    }
    this.refusedEarly = false;
    this.body = new Body(() => {
      this.bodyPaused = true;
      this.socket.pause();
    }, () => this.resumeBody());
    if (this.remaining > 0) this.body.sized(this.remaining);
    this.responded = false;
    this.phase = 'body';
    const m = head.method === 'POST' && this.opts.infer ? INFER_PATH.exec(head.target) : null;
    if (m && !(this.opts.cors && h.has('origin'))) this.infer(this.opts.infer!, m, head);
    else void this.toApp(head);
    if (this.remaining === 0) this.bodyDone();
  }

  /** Moves body bytes from the buffer to the request; true once the body is complete. */
  private readBody(): boolean {
    const body = this.body!;
    if (this.remaining > 0) {
      const n = Math.min(this.remaining, this.buf!.length);
      body.push(this.take(n));
      this.remaining -= n;
      if (this.remaining > 0) return false;
      return this.bodyDone();
    }
    if (this.remaining === 0) return this.bodyDone();
    return this.readChunked(body);
  }

  /**
   * Chunked (RFC 9112 §7.1): size line (extensions ignored), data, CRLF; then trailers, ignored. Read in
   * place by position, the buffer re-sliced once per call: a body of tens of thousands of one-byte
   * chunks makes no object per line or per chunk, so the garbage collector has little to do and what
   * the body holds dies young instead of being promoted (Triton's many-chunks test measures RSS).
   */
  private readChunked(body: Body): boolean {
    const buf = this.buf;
    if (!buf) return false;
    let pos = 0;
    const leave = (done: boolean): boolean => {
      this.buf = pos < buf.length ? buf.subarray(pos) : undefined;
      if (!done) return false;
      this.remaining = 0;
      return this.bodyDone();
    };
    for (;;) {
      if (pos >= buf.length) return leave(false);
      if (this.chunk === 'data') {
        const n = Math.min(this.chunkLeft, buf.length - pos);
        body.pushRange(buf, pos, pos + n);
        pos += n;
        this.chunkLeft -= n;
        if (this.chunkLeft > 0) return leave(false);
        this.chunk = 'data-end';
        continue;
      }
      const eol = buf.indexOf(CRLF, pos);
      if (eol < 0) {
        if (buf.length - pos > MAX_HEAD) throw new BadRequest(400, `a chunk-size line of the chunked body is longer than ${MAX_HEAD} bytes`);
        return leave(false);
      }
      const from = pos;
      pos = eol + 2;
      if (this.chunk === 'data-end') {
        if (eol !== from) throw new BadRequest(400, 'malformed chunked body: a chunk is not followed by CRLF');
        this.chunk = 'size';
      } else if (this.chunk === 'size') {
        this.chunkLeft = chunkSize(buf, from, eol);
        if (this.chunkLeft > 0 && ++this.chunkCount > MAX_CHUNKS) throw new BadRequest(400, TOO_MANY_CHUNKS);
        this.chunk = this.chunkLeft === 0 ? 'trailer' : 'data';
      } else if (eol === from) {
        return leave(true);
      }
    }
  }

  private bodyDone(): boolean {
    this.body!.end();
    this.since = 0;
    this.phase = 'wait';
    this.maybeNext();
    return (this.phase as string) === 'head';
  }

  /** After the response and the whole body: close, or go on with the next request. */
  private maybeNext(): void {
    if (this.phase !== 'wait' || !this.responded) return;
    this.body = undefined;
    if (!this.keepAlive || this.stopping()) {
      this.socket.destroySoon();
      this.phase = 'wait';
      this.buf = undefined;
      return;
    }
    this.phase = 'head';
    if (this.socket.writableNeedDrain) {
      // The client is not reading its answers: its next request is read once it has.
      this.draining = true;
      this.socket.pause();
      const go = () => {
        this.socket.off('drain', go);
        this.draining = false;
        this.since = 0;
        this.nextRequest();
      };
      this.socket.on('drain', go);
    }
  }

  /**
   * An error answered before its body has arrived: the rest is read and dropped either way, never
   * parsed as a next request. A short rest keeps the connection; a long one (a body over the limit,
   * most often) or one of unknown length (chunked) ends it after the answer, so a client still sending
   * a gigabyte is told to stop rather than kept streaming it into a keep-alive.
   */
  private endsEarly(status: number): void {
    if (this.phase === 'body' && status >= 400 && (this.remaining < 0 || this.remaining > DISCARD_KEEP_ALIVE)) {
      this.keepAlive = false;
      this.refusedEarly = true;
    }
  }

  private resumeBody(): void {
    if (!this.bodyPaused) return;
    this.bodyPaused = false;
    this.socket.resume();
  }

  private responseDone(): void {
    this.responded = true;
    this.aborted = undefined;
    if (this.phase === 'body') {
      this.body!.discard = true;
      // Nobody reads the rest now: a socket paused for the body's reader reads (and drops) again.
      if (this.bodyPaused) this.resumeBody();
      if (this.refusedEarly) {
        this.socket.end();
        // A client still sending after its answer and our FIN has had time to read them.
        setTimeout(() => this.socket.destroy(), LINGER_MS).unref();
      }
    }
    this.maybeNext();
    if (this.phase === 'head' && !this.draining) this.nextRequest();
  }

  private nextRequest(): void {
    if (this.socket.isPaused()) this.socket.resume();
    if (this.buf) this.advance();
  }

  /** Date, and whether the connection stays open after this response. */
  private connectionHeaders(): string {
    const close = !this.keepAlive || this.stopping();
    return `Date: ${httpDate()}\r\n${close ? 'Connection: close\r\n' : `Connection: keep-alive\r\nKeep-Alive: timeout=${KEEP_ALIVE_MS / 1000}\r\n`}`;
  }

  private infer(endpoint: NonNullable<RequestHandlers['infer']>, m: RegExpExecArray, head: Head): void {
    const headers = head.headers;
    const body = this.body!;
    endpoint({
      model: m[1]!,
      version: m[2],
      header: (name) => headers.get(name.toLowerCase()),
      headers: () => head.raw,
      body: (limit, kind) => body.read(limit, kind === 'decompressed' ? undefined : binaryStart(headers.get('inference-header-content-length')), kind),
      onCancel: (cancel) => {
        this.cancelInfer = cancel;
      },
    }).then(
      (reply) => {
        this.cancelInfer = undefined;
        this.send(reply);
      },
      (err: Error) => {
        this.cancelInfer = undefined;
        this.opts.onError(err);
        this.send({ status: 500, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ error: err.message }) });
      },
    );
  }

  private send(reply: HttpReply): void {
    if (this.gone()) return;
    const parts = Array.isArray(reply.body) ? reply.body : [reply.body];
    let length = 0;
    for (const p of parts) length += typeof p === 'string' ? Buffer.byteLength(p) : p.byteLength;
    this.endsEarly(reply.status);
    let head = statusLine(reply.status);
    for (const k in reply.headers) head += `${k}: ${reply.headers[k]}\r\n`;
    head += `${this.connectionHeaders()}Content-Length: ${length}\r\n\r\n`;
    // Corked, the head and the parts leave in one writev.
    this.socket.cork();
    this.socket.write(head, 'latin1');
    for (const p of parts) if (p.length > 0) this.socket.write(p);
    this.socket.uncork();
    this.responseDone();
  }

  /** Any other request: a Web Request to the app, its Response back on the socket. */
  private async toApp(head: Head): Promise<void> {
    const method = head.method;
    let response: Response;
    try {
      const headers = new Headers();
      for (const [k, v] of head.raw) headers.append(k, v);
      const host = head.headers.get('host');
      const url = /^https?:\/\//i.test(head.target) ? head.target : `http://${host && HOST.test(host) ? host : this.address}${head.target}`;
      this.aborted = new AbortController();
      const hasBody = method !== 'GET' && method !== 'HEAD';
      if (!hasBody) this.body!.discard = true;
      const request = new Request(url, {
        method, headers, signal: this.aborted.signal,
        ...(hasBody ? { body: this.body!.asStream(), duplex: 'half' } : {}),
      } as RequestInit);
      response = await this.opts.fetch(request);
    } catch (err) {
      if (this.gone()) return;
      const e = err as Error;
      if (!(e instanceof TypeError)) this.opts.onError(e);
      // The Request constructor refuses what no client should send (a bad URL or header value).
      response = Response.json({ error: e instanceof TypeError ? `invalid request: ${e.message}` : e.message }, { status: e instanceof TypeError ? 400 : 500 });
    }
    try {
      await this.writeResponse(head, response);
    } catch (err) {
      this.opts.onError(err as Error);
      this.socket.destroy();
      return;
    }
    this.responseDone();
  }

  private async writeResponse({ method, minor }: Head, res: Response): Promise<void> {
    if (this.gone()) {
      await res.body?.cancel();
      return;
    }
    const noBody = method === 'HEAD' || res.status === 204 || res.status === 304;
    // Server-sent events go out as they come (chunked, or to an HTTP/1.0 client raw until the
    // connection closes); anything else is short and goes out with its length.
    const stream = !!res.body && !noBody && !!res.headers.get('content-type')?.startsWith('text/event-stream');
    const chunked = stream && minor === 1;
    if (stream && !chunked) this.keepAlive = false;
    this.endsEarly(res.status);
    let head = statusLine(res.status);
    res.headers.forEach((v, k) => {
      if (k !== 'content-length' && k !== 'transfer-encoding' && k !== 'connection' && k !== 'keep-alive') head += `${k}: ${v}\r\n`;
    });
    head += this.connectionHeaders();
    if (stream) {
      this.socket.write(`${head}${chunked ? 'Transfer-Encoding: chunked\r\n' : ''}\r\n`, 'latin1');
      // A socket that died (a reset) before its 'close' event would find this request already answered:
      // the request is cancelled here, so the model stops generating.
      if (!(await writeEvents(this.socket, res.body, chunked))) this.aborted?.abort();
      return;
    }
    const body = res.body ? new Uint8Array(await res.arrayBuffer()) : new Uint8Array(0);
    const length = method === 'HEAD' ? res.headers.get('content-length') ?? String(body.byteLength) : String(body.byteLength);
    head += res.status === 204 || res.status === 304 ? '\r\n' : `Content-Length: ${length}\r\n\r\n`;
    if (this.gone()) return;
    this.socket.cork();
    this.socket.write(head, 'latin1');
    if (!noBody && body.byteLength > 0) this.socket.write(body);
    this.socket.uncork();
  }

  /**
   * A request refused before it reached the app (no API key): its answer, then the end of the
   * connection, so the body of a client that may not send one is never read.
   */
  private deny(reply: HttpReply): void {
    this.keepAlive = false;
    this.buf = undefined;
    this.since = 0;
    // 'wait' with the answer sent: maybeNext ends the connection, and bytes still arriving are not parsed.
    this.phase = 'wait';
    this.send(reply);
  }

  /** node:http's status for a request it cannot take, a `{"error": ...}` body, and the end of the connection. */
  private refuse(status: RefusalStatus, message: string): void {
    this.buf = undefined;
    this.phase = 'wait';
    this.since = 0;
    this.body?.fail(new Error(message));
    if (this.gone()) return;
    const body = JSON.stringify({ error: message });
    this.socket.end(
      `${statusLine(status)}Content-Type: application/json\r\nDate: ${httpDate()}\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    // As Triton does, nothing more is read (reading and dropping a client's megabytes costs the heap
    // buffers it never needed). The connection goes a moment after the answer, not at once: closing
    // on unread bytes sends a reset, and one that overtakes the answer leaves the client with nothing.
    this.refused = true;
    this.socket.pause();
    setTimeout(() => this.socket.destroy(), REFUSE_LINGER_MS).unref();
  }
}
