/**
 * What tsi changes inside grpc-js, which keeps the pieces private: the HTTP/2 servers it creates
 * (flow-control windows, response compression per stream) and how a call frames its answers (no
 * second copy; gzip). Each hook checks that the private method is there; if a grpc-js upgrade renames
 * one, the server still works as plain grpc-js does and test/node/grpc-large-messages.test.ts or
 * grpc-compression.test.ts fails.
 */

import type { Http2SecureServer, Http2Server, IncomingHttpHeaders, ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { BaseServerInterceptingCall } from '@grpc/grpc-js/build/src/server-interceptors.js';
import { directEligible, serveModelInfer, type DirectModelInfer } from './direct.js';
import { grpcFrameOf } from './wire-writer.js';

/**
 * The HTTP/2 receive windows and frame size the server advertises. Node's defaults (64 KiB windows,
 * 16 KiB frames; grpc-js 1.14 passes no window option to its server) make a client stop every 64 KiB
 * of a request until the server's event loop has read it and sent WINDOW_UPDATE: a 4 MB ModelInfer
 * took ~64 such round trips and gRPC ran at 0.3 of HTTP's req/s. 8 MiB lets a 4 MB request arrive
 * without one; the connection's window holds four of them in flight. A stream whose reader pauses
 * (ModelStreamInfer past its high-water mark) can leave at most its window unread in the server.
 */
export const GRPC_SERVER_HTTP2 = { streamWindow: 8 * 2 ** 20, connectionWindow: 32 * 2 ** 20, maxFrameSize: 2 ** 20 } as const;

const GZIP_LEVEL_OF = Symbol('tsi gzip level');
const INFER_PATHS = new Set(['/inference.GRPCInferenceService/ModelInfer', '/inference.GRPCInferenceService/ModelStreamInfer']);
interface TaggedStream { [GZIP_LEVEL_OF]?: number }
interface InterceptingCall {
  stream?: TaggedStream;
  handler?: { path?: string };
  metadataSent?: boolean;
  tsiGzip?: number;
}

/**
 * Every HTTP/2 server grpc-js creates for `g` (plaintext and TLS, at bind) advertises
 * GRPC_SERVER_HTTP2, through node:http2's own updateSettings and setLocalWindowSize. With a gzip
 * level (`--grpc-infer-response-compression-level`), each stream whose client lists gzip in
 * `grpc-accept-encoding` is tagged with it, for hookGrpcJsCalls's calls to compress their answers.
 * With `direct`, a ModelInfer call that direct.ts can answer never reaches grpc-js's 'stream'
 * listener: the server's emit hands it to serveModelInfer instead. With `handshakeMs`, a connection
 * that has not sent the HTTP/2 preface and its SETTINGS that long after it opened (after its TLS
 * handshake, over TLS) is closed: grpc-js keeps a connection that never speaks open for good, so a
 * crowd of them would hold the server's sockets (gRPC's C++ core, Triton's, closes them at 120 s).
 */
export function hookHttp2Servers(
  g: grpc.Server, opts: { gzipLevel?: number; direct?: DirectModelInfer; handshakeMs?: number },
): void {
  const { gzipLevel, direct, handshakeMs } = opts;
  const inner = g as unknown as { createHttp2Server?: (credentials: grpc.ServerCredentials) => Http2Server | Http2SecureServer };
  const create = inner.createHttp2Server;
  if (typeof create !== 'function') return;
  const gzipFor = (headers: IncomingHttpHeaders) => gzipLevel !== undefined
    && String(headers['grpc-accept-encoding'] ?? '').split(',').some((e) => e.trim() === 'gzip');
  inner.createHttp2Server = (credentials) => {
    const h2 = create.call(g, credentials);
    h2.updateSettings({ initialWindowSize: GRPC_SERVER_HTTP2.streamWindow, maxFrameSize: GRPC_SERVER_HTTP2.maxFrameSize });
    h2.on('session', (session: ServerHttp2Session) => {
      session.setLocalWindowSize(GRPC_SERVER_HTTP2.connectionWindow);
      if (handshakeMs) closeUnlessSettingsWithin(session, handshakeMs);
    });
    const emit = h2.emit;
    h2.emit = function (this: typeof h2, event: string | symbol, ...args: unknown[]): boolean {
      if (event === 'stream') {
        const [stream, headers] = args as [ServerHttp2Stream & TaggedStream, IncomingHttpHeaders];
        const gzip = gzipFor(headers);
        if (direct && directEligible(headers, gzip)) {
          serveModelInfer(stream, headers, direct);
          return true;
        }
        if (gzip) stream[GZIP_LEVEL_OF] = gzipLevel;
      }
      return emit.call(this, event, ...args);
    } as typeof h2.emit;
    return h2;
  };
}

function closeUnlessSettingsWithin(session: ServerHttp2Session, ms: number): void {
  const timer = setTimeout(() => session.destroy(), ms);
  timer.unref();
  const done = () => clearTimeout(timer);
  session.once('remoteSettings', done);
  session.once('close', done);
}

/**
 * Installed once for the process, on grpc-js's server call:
 * - Framing. grpc-js frames every answer by copying the serialized message into a fresh buffer 5
 *   bytes longer; for a 4 MB tensor that is a second 4 MB allocation and copy per answer (HTTP writes
 *   the tensor as it is). Answers written by wire-writer.ts already carry their frame prefix, so they
 *   go out as that frame; anything else is framed by grpc-js.
 * - Compression, which grpc-js's server does not do (it always answers `grpc-encoding: identity` with
 *   the compressed flag 0, whatever its options say). An inference call on a stream tagged by
 *   hookHttp2Servers sends `grpc-encoding: gzip` with its headers, and each answer wire-writer.ts wrote
 *   goes out gzipped with the flag set (other messages keep the flag 0, which gRPC allows on a gzip
 *   stream). gzip runs on the main thread: an opt-in that costs what it saves on the network.
 */
export function hookGrpcJsCalls(): void {
  const proto = BaseServerInterceptingCall.prototype as unknown as {
    serializeMessage?: (this: InterceptingCall, value: unknown) => Buffer;
    sendMetadata?: (this: InterceptingCall, metadata: grpc.Metadata | null) => void;
    tsiHooked?: true;
  };
  if (proto.tsiHooked) return;
  proto.tsiHooked = true;
  const copying = proto.serializeMessage;
  if (typeof copying === 'function') {
    proto.serializeMessage = function (value) {
      const frame = value instanceof Uint8Array ? grpcFrameOf(value) : undefined;
      if (!frame) return copying.call(this, value);
      const level = gzipLevel(this);
      return level === undefined ? frame : gzipFrame(frame.subarray(5), level);
    };
  }
  const send = proto.sendMetadata;
  if (typeof send === 'function') {
    proto.sendMetadata = function (metadata) {
      if (gzipLevel(this) !== undefined) {
        metadata = metadata ? metadata.clone() : new grpc.Metadata();
        metadata.set('grpc-encoding', 'gzip');
      }
      send.call(this, metadata);
    };
  }
}

/**
 * The gzip level of an inference call's answers, decided once, before its headers go: grpc-js frames
 * a call's first message before it sends the headers when no interceptor sent them first, and after
 * when one did, so whichever of the two comes first decides.
 */
function gzipLevel(call: InterceptingCall): number | undefined {
  if (call.tsiGzip === undefined && !call.metadataSent && INFER_PATHS.has(call.handler?.path ?? '')) {
    call.tsiGzip = call.stream?.[GZIP_LEVEL_OF];
  }
  return call.tsiGzip;
}

/** A gRPC frame of `message` gzipped at `level`, compressed flag set. */
function gzipFrame(message: Uint8Array, level: number): Buffer {
  const z = gzipSync(message, { level });
  const frame = Buffer.allocUnsafe(5 + z.byteLength);
  frame[0] = 1;
  frame.writeUInt32BE(z.byteLength, 1);
  z.copy(frame, 5);
  return frame;
}
