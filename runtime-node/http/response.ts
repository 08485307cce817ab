/**
 * The response side of runtime-node/http/connection.ts: the status line, the Date header (rebuilt once
 * a second rather than per response), and a server-sent event stream written as its events come, with
 * the socket's back-pressure respected and the stream cancelled when the client goes away.
 */

import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';

let dateSecond = -1;
let dateText = '';
/** The Date header, rebuilt once a second. */
export function httpDate(): string {
  const now = Date.now();
  const s = Math.floor(now / 1000);
  if (s !== dateSecond) {
    dateSecond = s;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

export const statusLine = (status: number) => `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n`;

/** The socket can take no more bytes: hung up, refused, or ending after `Connection: close`. */
export const socketGone = (socket: Socket): boolean => socket.destroyed || socket.writableEnded;

/** Resolves once the socket can take more, or is gone. */
function drained(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

/**
 * Writes an event stream's bytes after its head: as HTTP/1.1 chunks, or raw (to an HTTP/1.0 client,
 * until the connection closes). False when the socket died before the end; the stream is cancelled then.
 */
export async function writeEvents(socket: Socket, body: ReadableStream<Uint8Array>, chunked: boolean): Promise<boolean> {
  const reader = body.getReader();
  const stop = () => void reader.cancel().catch(() => {});
  socket.once('close', stop);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || socketGone(socket)) break;
      if (value.byteLength === 0) continue;
      let ok: boolean;
      if (chunked) {
        // One buffer, one write: an event is often one token, and a corked writev of three parts
        // costs more per event than copying it.
        const size = value.byteLength.toString(16);
        const chunk = Buffer.allocUnsafe(size.length + value.byteLength + 4);
        chunk.write(size, 0, 'latin1');
        chunk.writeUInt16BE(0x0d0a, size.length);
        chunk.set(value, size.length + 2);
        chunk.writeUInt16BE(0x0d0a, size.length + 2 + value.byteLength);
        ok = socket.write(chunk);
      } else {
        ok = socket.write(value);
      }
      if (!ok) await drained(socket);
    }
  } finally {
    socket.off('close', stop);
  }
  if (socketGone(socket)) {
    stop();
    return false;
  }
  if (chunked) socket.write('0\r\n\r\n', 'latin1');
  return true;
}
