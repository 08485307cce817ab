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
import { grpcFrameOf } from './grpc-wire.js';

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
  /** Runs one ModelInfer message; resolves to the answer's bytes (grpc-wire.ts writes them framed). */
  infer(message: Buffer, onCancel: (cancel: () => void) => void): Promise<Buffer>;
  /** The status of a failure `infer` threw. */
  status(err: unknown): GrpcStatus;
  /** Largest message accepted (grpc-js's grpc.max_receive_message_length). */
  maxMessageBytes: number;
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
  // An 'error' event comes with a 'close', which is what cancels; without a listener it would throw.
  stream.once('error', () => {});
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  let cancels: (() => void)[] | undefined;
  const cancelAll = () => {
    for (const c of cancels ?? []) c();
    cancels = undefined;
  };
  const end = (status: GrpcStatus, answer?: Buffer): void => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    if (stream.destroyed || stream.closed) return;
    if (status.code === OK && answer) {
      stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers(OK_TRAILERS));
      stream.end(frameOf(answer));
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

  const chunks: Buffer[] = [];
  let length = 0;
  let expected = -1;
  stream.on('data', (chunk: Buffer) => {
    if (ended) return;
    chunks.push(chunk);
    length += chunk.byteLength;
    if (expected < 0 && length >= 5) {
      const head = chunks.length === 1 ? chunk : Buffer.concat(chunks, length);
      expected = head.readUInt32BE(1);
      if (expected > d.maxMessageBytes) {
        end({ code: RESOURCE_EXHAUSTED, details: `Received message larger than max (${expected} vs. ${d.maxMessageBytes})` });
      }
    }
  });
  stream.once('end', () => {
    if (ended) return;
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
    if (body.byteLength < 5 || body.byteLength < 5 + expected) {
      return end({ code: UNIMPLEMENTED, details: `Received no request message for server streaming method ${MODEL_INFER_PATH}` });
    }
    if (body.byteLength > 5 + expected) {
      return end({ code: UNIMPLEMENTED, details: `Received a second request message for server streaming method ${MODEL_INFER_PATH}` });
    }
    if (body[0] !== 0) return end({ code: INTERNAL, details: 'Compressed message received on a call without grpc-encoding' });
    const onCancel = (cancel: () => void) => {
      if (ended) cancel();
      else (cancels ??= []).push(cancel);
    };
    d.infer(body.subarray(5), onCancel).then(
      (answer) => end({ code: OK, details: 'OK' }, answer),
      (err) => end(d.status(err)),
    );
  });
}

/** The gRPC frame of an answer: the one grpc-wire.ts wrote it in, else a copy with its prefix. */
function frameOf(message: Buffer): Buffer {
  const framed = grpcFrameOf(message);
  if (framed) return framed;
  const frame = Buffer.allocUnsafe(5 + message.byteLength);
  frame[0] = 0;
  frame.writeUInt32BE(message.byteLength, 1);
  message.copy(frame, 5);
  return frame;
}
