/**
 * The control channel between tsi and one Python stub process: the child's fd 3, a UNIX socket pair
 * Node creates for a `'pipe'` stdio entry. Each frame is a 4-byte little-endian length followed by a
 * UTF-8 JSON object with a short kind in `k` (the message kinds are listed in instance.ts, where
 * they are handled). Tensors never travel here: messages only name their places in shared memory
 * (shm.ts), so a frame is a few hundred bytes and costs microseconds on either side.
 *
 * Ownership: the channel owns the socket. Writes go out in call order; a write after the socket
 * closed is dropped (the process is gone and its exit handler answers whatever waited on it).
 */

import type { Duplex } from 'node:stream';

export type StubMessage = { k: string } & Record<string, unknown>;

export class Channel {
  private pending: Buffer | undefined;
  private closed = false;

  /**
   * `onFault` hears of a frame that is not JSON or a handler that threw: the process on the other
   * end can no longer be trusted, but the server must not go down with it.
   */
  constructor(
    private readonly socket: Duplex, onMessage: (m: StubMessage) => void, onBatchEnd: () => void, onFault: (err: Error) => void,
  ) {
    socket.on('data', (chunk: Buffer) => {
      let buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
      let pos = 0;
      try {
        while (buf.length - pos >= 4) {
          const n = buf.readUInt32LE(pos);
          if (buf.length - pos - 4 < n) break;
          const text = buf.toString('utf8', pos + 4, pos + 4 + n);
          pos += 4 + n;
          onMessage(JSON.parse(text) as StubMessage);
        }
        buf = buf.subarray(pos);
        this.pending = buf.length > 0 ? Buffer.from(buf) : undefined;
        onBatchEnd();
      } catch (err) {
        this.close();
        onFault(err as Error);
      }
    });
    socket.on('close', () => {
      this.closed = true;
    });
    // Errors (EPIPE when the child died) surface as the child's exit; nothing to add here.
    socket.on('error', () => {
      this.closed = true;
    });
  }

  send(m: StubMessage): void {
    if (this.closed) return;
    const json = JSON.stringify(m);
    const len = Buffer.byteLength(json);
    const frame = Buffer.allocUnsafe(4 + len);
    frame.writeUInt32LE(len, 0);
    frame.write(json, 4, 'utf8');
    this.socket.write(frame);
  }

  /** Closes our end: the stub sees EOF and exits at once. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
  }
}
