/**
 * Unary ModelInfer answered on node:http2 itself, ahead of grpc-js, for the calls that need nothing
 * grpc-js adds: identity-encoded requests whose answers are not to be gzipped. grpc-js builds, per
 * call, an interceptor chain, a Metadata object from the headers, a call object with its own event
 * emitters and a stream decoder, and counts channelz statistics; on `simple` at 8 in flight that was
 * ~11 % of the main thread's time, and gRPC cost the server ~10 % more CPU a request than HTTP
 * (bench:protocols' CPU rows). Here a call is its headers, its DATA chunks and one answer frame.
 *
 * What a client sees is what grpc-js gives it: the same response headers and trailers, a trailers-only
 * response for a failure before the answer, `grpc-timeout` deadlines (DEADLINE_EXCEEDED, "Deadline
 * exceeded"; the request is cancelled), the receive-size limit, and grpc-js's texts for a unary call
 * with no message or with two. A client that goes away cancels its request. Everything else —
 * compressed requests, gzip answers, every other method and ModelStreamInfer — stays with grpc-js.
 */

import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { concatBytes } from '../../core/index.js';
import { firstRawContentsAt } from './wire-reader.js';

export const MODEL_INFER_PATH = '/inference.GRPCInferenceService/ModelInfer';

/** gRPC status codes this file answers with itself. */
const OK = 0;
const INTERNAL = 13;
const UNIMPLEMENTED = 12;
const DEADLINE_EXCEEDED = 4;
const RESOURCE_EXHAUSTED = 8;

export interface GrpcStatus {
  code: number;
  details: string;
}

export interface DirectModelInfer {
  /** A status to answer at once (API key refused, protocol restricted), or undefined to go on. */
  admit(headers: IncomingHttpHeaders): GrpcStatus | undefined;
  /**
   * Runs one ModelInfer message; resolves to the answer's whole gRPC frame, in pieces to write back
   * to back. `headers`: the call's metadata (a client's `traceparent`, headers to forward). `own`: the
   * whole frame, when its buffer was made for this call (its chunks joined here), so a backend may
   * move it to its worker with the inputs that view it instead of copying them.
   */
  infer(message: Buffer, onCancel: (cancel: () => void) => void, headers: IncomingHttpHeaders, own?: Uint8Array): Promise<Uint8Array[]>;
  /** The status of a failure `infer` threw. */
  status(err: unknown): GrpcStatus;
  /** Largest message accepted (grpc-js's grpc.max_receive_message_length). */
  maxMessageBytes: number;
  /** Calls this path took, whatever their outcome: which path served a call is otherwise invisible to a client. */
  calls: number;
}

/** Whether a ModelInfer call can be answered here rather than by grpc-js. */
export function directEligible(headers: IncomingHttpHeaders, gzipAnswers: boolean): boolean {
  if (headers[':path'] !== MODEL_INFER_PATH || headers[':method'] !== 'POST') return false;
  if (!String(headers['content-type'] ?? '').startsWith('application/grpc')) return false;
  const encoding = headers['grpc-encoding'];
  return (encoding === undefined || encoding === 'identity') && !gzipAnswers;
}

const RESPONSE_HEADERS = {
  ':status': 200,
  'content-type': 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
};
const OK_TRAILERS = { 'grpc-status': String(OK), 'grpc-message': 'OK' };
const DEADLINE = /(\d{1,8})\s*([HMSmun])/;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

/** Serves one ModelInfer call on `stream`. */
export function serveModelInfer(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, d: DirectModelInfer): void {
  d.calls++;
  // An 'error' event comes with a 'close', which is what cancels; without a listener it would throw.
  stream.once('error', () => {});
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  let cancels: (() => void)[] | undefined;
  const cancelAll = () => {
    for (const c of cancels ?? []) c();
    cancels = undefined;
  };
  const end = (status: GrpcStatus, answer?: Uint8Array[]): void => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    if (stream.destroyed || stream.closed) return;
    if (status.code === OK && answer) {
      stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers(OK_TRAILERS));
      if (answer.length === 1) {
        stream.end(answer[0]);
      } else {
        // One writev: the frame's small pieces and the output tensors' own bytes.
        stream.cork();
        for (const piece of answer) stream.write(piece);
        stream.uncork();
        stream.end();
      }
    } else {
      stream.respond({
        ':status': 200, 'content-type': 'application/grpc+proto', 'grpc-status': String(status.code), 'grpc-message': encodeURI(status.details),
      }, { endStream: true });
    }
  };
  stream.once('close', () => {
    ended = true;
    clearTimeout(timer);
    cancelAll();
  });

  const refused = d.admit(headers);
  if (refused) return end(refused);
  const timeout = headers['grpc-timeout'];
  if (timeout !== undefined) {
    const m = DEADLINE.exec(String(timeout));
    if (!m) return end({ code: INTERNAL, details: `Invalid grpc-timeout value "${timeout}"` });
    timer = setTimeout(() => {
      end({ code: DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      cancelAll();
    }, (Number(m[1]) * UNIT_MS[m[2]!]!) | 0);
  }

  const message = new MessageBuffer();
  stream.on('data', (chunk: Buffer) => {
    if (ended) return;
    message.push(chunk);
    if (message.expected < 0 && message.length >= 5) {
      message.sized();
      if (message.expected > d.maxMessageBytes) {
        end({ code: RESOURCE_EXHAUSTED, details: `Received message larger than max (${message.expected} vs. ${d.maxMessageBytes})` });
      }
    }
  });
  stream.once('end', () => {
    if (ended) return;
    const { length, expected } = message;
    if (length < 5 || length < 5 + expected) {
      return end({ code: UNIMPLEMENTED, details: `Received no request message for server streaming method ${MODEL_INFER_PATH}` });
    }
    if (length > 5 + expected) {
      return end({ code: UNIMPLEMENTED, details: `Received a second request message for server streaming method ${MODEL_INFER_PATH}` });
    }
    const { body, own } = message.take();
    if (body[0] !== 0) return end({ code: INTERNAL, details: 'Compressed message received on a call without grpc-encoding' });
    const onCancel = (cancel: () => void) => {
      if (ended) cancel();
      else (cancels ??= []).push(cancel);
    };
    d.infer(body.subarray(5), onCancel, headers, own ? body : undefined).then(
      (answer) => end({ code: OK, details: 'OK' }, answer),
      (err) => end(d.status(err)),
    );
  });
}

/** A message at least this long is gathered into one buffer of its length as it arrives. */
const PREALLOCATE = 1 << 20;
/** How much of a large message is held as pieces while looking for where its first raw input starts. */
const HEAD_SCAN = 64 * 1024;

/**
 * One call's DATA chunks, as one buffer with its first raw input 8-byte aligned (so the input is
 * viewed, not copied). A large message goes into a buffer of its declared length as its chunks come:
 * holding them and joining them at the end held a gigabyte tensor twice.
 */
class MessageBuffer {
  private chunks: Buffer[] = [];
  length = 0;
  /** The message length its 5-byte prefix declares, -1 before it has come. */
  expected = -1;
  private whole?: Uint8Array;

  push(chunk: Buffer): void {
    const at = this.length;
    this.length += chunk.byteLength;
    const w = this.whole;
    if (w) {
      // Bytes past the declared message (a second one) are counted, not kept: the call is refused.
      // Pages not yet written are not resident: a client that declares more than it sends costs what it sent.
      if (this.length <= w.byteLength) w.set(chunk, at);
      return;
    }
    this.chunks.push(chunk);
    if (this.expected >= PREALLOCATE && (this.length >= HEAD_SCAN || this.length >= 5 + this.expected)) this.gather();
  }

  /** Reads the declared length (once 5 bytes have come). */
  sized(): void {
    const head = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.length);
    this.expected = head.readUInt32BE(1);
  }

  /** Moves what came so far into a buffer of the whole message's length, aligned as joined() aligns. */
  private gather(): void {
    const head = Buffer.concat(this.chunks, this.length);
    const raw = firstRawContentsAt(head.subarray(5));
    const pad = raw === undefined ? 0 : (8 - ((5 + raw) % 8)) % 8;
    const w = new Uint8Array(pad + 5 + this.expected).subarray(pad);
    w.set(head.subarray(0, Math.min(head.byteLength, w.byteLength)));
    this.whole = w;
    this.chunks = [];
  }

  /** The message (once its length is checked) and whether its buffer is this call's own (joined here), which a backend may move whole. */
  take(): { body: Buffer; own: boolean } {
    const w = this.whole;
    if (w) {
      this.whole = undefined;
      return { body: Buffer.from(w.buffer, w.byteOffset, w.byteLength), own: true };
    }
    const chunks = this.chunks;
    this.chunks = [];
    if (chunks.length <= 1) return { body: chunks[0] ?? Buffer.alloc(0), own: false };
    return { body: joined(chunks), own: true };
  }
}

/** A request's DATA chunks as one buffer, its first raw input 8-byte aligned when it starts in the first chunk. */
function joined(chunks: Buffer[]): Buffer {
  const first = chunks[0]!;
  const at = first.byteLength > 5 ? firstRawContentsAt(first.subarray(5)) : undefined;
  const u8 = concatBytes(chunks, at === undefined ? undefined : 5 + at);
  return Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);
}
