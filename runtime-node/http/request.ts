/**
 * The request side of HTTP/1.1 as runtime-node/http/connection.ts reads it: the head's request line
 * and header fields (RFC 9112 §3, §5), the refusals this layer answers itself, and the body of one
 * request as it arrives, collected whole for core's infer reader or streamed to the app with flow
 * control, so a slow reader holds a bounded amount of it here.
 */

import { concatBytes, tooLarge, type BodyKind } from '../../core/index.js';

/** node:http's cap on the request line and header section. */
export const MAX_HEAD = 16 * 1024;
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP\/1\.([01])$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** How much of a streamed body waits here for its reader before the socket is paused. */
const STREAM_HIGH_WATER = 1 << 20;

export interface Head {
  method: string;
  target: string;
  minor: number;
  /** Lower-cased names; repeated headers joined with ", " as node:http does. */
  headers: Map<string, string>;
  /** In arrival order, for the app's Request. */
  raw: [string, string][];
}

export type RefusalStatus = 400 | 408 | 417 | 431;

/** A request this layer refuses itself; the message becomes the `{"error": ...}` body. */
export class BadRequest extends Error {
  constructor(readonly status: RefusalStatus, message: string) {
    super(message);
  }
}

export function parseHead(text: string): Head {
  const lines = text.split('\r\n');
  const m = REQUEST_LINE.exec(lines[0]!);
  if (!m) throw new BadRequest(400, `malformed request line: expected '<method> <target> HTTP/1.1' (or HTTP/1.0)`);
  const headers = new Map<string, string>();
  const raw: [string, string][] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon) : '';
    // No obsolete line folding, no space before the colon (RFC 9112 §5.1–5.2).
    if (!TOKEN.test(name)) throw new BadRequest(400, `malformed header line ${i}: expected '<name>: <value>' with a token for a name and no space before the colon`);
    const value = line.slice(colon + 1).trim();
    const key = name.toLowerCase();
    const prev = headers.get(key);
    if (prev !== undefined && key === 'content-length') throw new BadRequest(400, 'more than one Content-Length header');
    headers.set(key, prev === undefined ? value : `${prev}, ${value}`);
    raw.push([name, value]);
  }
  return { method: m[1]!, target: m[2]!, minor: Number(m[3]), headers, raw };
}

/** Pieces below this size, once a body has many, are copied into shared blocks of BLOCK bytes. */
const SMALL = 4096;
const BLOCK = 64 * 1024;
const FEW = 8;
/** A declared body at least this long is read into one buffer of its size, not joined at the end. */
const PREALLOCATE = 1 << 20;

/** The body of one request, as it arrives: collected for a reader, or streamed to the app. */
export class Body {
  private chunks: Uint8Array[] = [];
  /**
   * Where small pieces are copied once the body has FEW of them (a streamed body's from the first, handed
   * on when the block fills): a body sent as tens of thousands of
   * tiny chunks would otherwise hold one view object each, long enough for the garbage collector to
   * promote them all to the old generation (Triton's many-chunks test saw the heap, and RSS, grow
   * by ~50 MiB over 100 such requests).
   */
  private block?: Uint8Array;
  private blockUsed = 0;
  private total = 0;
  private limit = Infinity;
  private alignAt?: number;
  /** Which of Triton's texts a refusal gets (core's tooLarge). */
  private kind: BodyKind = false;
  /** The Content-Length, when the body has one. */
  private declared?: number;
  /**
   * A large declared body's one buffer, filled as the bytes arrive: joining pieces at the end would
   * hold the body twice, and a gigabyte tensor would cost its size again before it reached a model.
   */
  private whole?: Uint8Array;
  private ended = false;
  private failure?: Error;
  private waiter?: { resolve: (b: Uint8Array) => void; reject: (e: Error) => void };
  private stream?: ReadableStreamDefaultController<Uint8Array>;
  /** Set once nobody will read the rest (the response went out first): bytes are dropped. */
  discard = false;

  /**
   * `pause`/`resume`: flow control for a streamed body, so a reader slower than the client (or one that
   * has not started) holds at most STREAM_HIGH_WATER bytes here rather than the whole body.
   */
  constructor(private readonly pause: () => void, private readonly resume: () => void) {}

  /** The body's Content-Length (called before its bytes arrive). */
  sized(length: number): void {
    this.declared = length;
  }

  /** `buf[start, end)`: copied straight into the block when it is small and kept, with no view made. */
  pushRange(buf: Buffer, start: number, end: number): void {
    const n = end - start;
    // A streamed body gets its small pieces gathered too, handed on when a block is full, before a
    // larger piece and at the end: one view object per one-byte chunk queued in the stream (or a block
    // handed on per socket read, when a client writes 6 bytes at a time) is what the collector would
    // otherwise promote (L0_sagemaker's many-chunks test reads its /models body as a stream). The
    // app reads request bodies whole, so holding up to one block back delays nothing it waits for.
    if (this.stream && !this.discard && n < SMALL) {
      buf.copy(this.room(n), this.blockUsed, start, end);
      this.blockUsed += n;
      return;
    }
    if (this.stream) this.flush();
    if (this.discard || this.stream || this.whole || n >= SMALL || this.chunks.length < FEW || this.total + n > this.limit) {
      this.push(buf.subarray(start, end));
      return;
    }
    this.total += n;
    buf.copy(this.room(n), this.blockUsed, start, end);
    this.blockUsed += n;
  }

  push(b: Uint8Array): void {
    if (this.discard) return;
    if (this.stream) {
      this.toStream((c) => {
        c.enqueue(b);
        if ((c.desiredSize ?? 1) <= 0) this.pause();
      });
      return;
    }
    this.total += b.byteLength;
    if (this.total <= this.limit) this.keep(b);
    else {
      // Refused as soon as the limit is crossed, not when the client has finished sending.
      this.drop();
      this.settle();
    }
  }

  private keep(b: Uint8Array): void {
    if (this.whole) {
      this.whole.set(b, this.total - b.byteLength);
      return;
    }
    if (b.byteLength >= SMALL || this.chunks.length < FEW) {
      this.flush();
      this.chunks.push(b);
      return;
    }
    this.room(b.byteLength).set(b, this.blockUsed);
    this.blockUsed += b.byteLength;
  }

  /** The block with room for `n` more bytes at `blockUsed` (a new one when the current is full). */
  private room(n: number): Uint8Array {
    if (!this.block || this.blockUsed + n > BLOCK) {
      this.flush();
      this.block = new Uint8Array(BLOCK);
    }
    return this.block;
  }

  /** The block being filled joins the chunks, or goes to the reader of a streamed body (in order, before whatever comes next). */
  private flush(): void {
    const b = this.block && this.blockUsed > 0 ? this.block.subarray(0, this.blockUsed) : undefined;
    this.block = undefined;
    this.blockUsed = 0;
    if (b && this.stream) this.push(b);
    else if (b) this.chunks.push(b);
  }

  private drop(): void {
    this.whole = undefined;
    this.chunks.length = 0;
    this.block = undefined;
    this.blockUsed = 0;
  }

  end(): void {
    if (this.stream) this.flush();
    this.ended = true;
    this.toStream((c) => c.close());
    this.settle();
  }

  fail(err: Error): void {
    if (this.ended) return;
    this.failure = err;
    this.toStream((c) => c.error(err));
    this.settle();
  }

  /** The app may have cancelled the stream (it stopped reading): then the bytes have nowhere to go. */
  private toStream(f: (c: ReadableStreamDefaultController<Uint8Array>) => void): void {
    if (!this.stream) return;
    try {
      f(this.stream);
    } catch {
      this.discard = true;
    }
  }

  /**
   * The whole body; past `limit` bytes it stops keeping chunks and fails once the body has ended.
   * `alignAt`: the offset where binary tensor data starts, placed on an 8-byte boundary when the
   * chunks are joined (concatBytes).
   */
  read(limit: number, alignAt: number | undefined, kind: BodyKind): Promise<Uint8Array> {
    this.limit = limit;
    this.alignAt = alignAt;
    this.kind = kind;
    if (this.total > limit) this.drop();
    else if (this.declared !== undefined && this.declared >= PREALLOCATE && this.declared <= limit && !this.whole) {
      this.flush();
      const pad = alignAt === undefined ? 0 : (8 - (alignAt % 8)) % 8;
      this.whole = new Uint8Array(pad + this.declared).subarray(pad);
      let off = 0;
      for (const c of this.chunks) {
        this.whole.set(c, off);
        off += c.byteLength;
      }
      this.chunks = [];
    }
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.settle();
    });
  }

  asStream(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.stream = controller;
        this.flush();
        for (const c of this.chunks) controller.enqueue(c);
        this.chunks = [];
        if (this.failure) controller.error(this.failure);
        else if (this.ended) controller.close();
      },
      pull: () => this.resume(),
      cancel: () => {
        this.discard = true;
        this.resume();
      },
    }, new ByteLengthQueuingStrategy({ highWaterMark: STREAM_HIGH_WATER }));
  }

  private settle(): void {
    const w = this.waiter;
    if (!w) return;
    if (this.failure) w.reject(this.failure);
    else if (this.total > this.limit) w.reject(tooLarge(this.total, this.limit, this.kind));
    else if (!this.ended) return;
    else if (this.whole) {
      // Shorter than declared only if the client hung up, which fails the body instead.
      w.resolve(this.whole.subarray(0, this.total));
    } else {
      this.flush();
      w.resolve(concatBytes(this.chunks, this.alignAt));
    }
    this.waiter = undefined;
  }
}

/** Where a binary request's tensor data starts: after its JSON header (Inference-Header-Content-Length). */
export function binaryStart(headerLength: string | undefined): number | undefined {
  const n = headerLength === undefined ? NaN : Number(headerLength);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}
