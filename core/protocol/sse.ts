/**
 * A Server-Sent Events answer fed by a streaming inference: what Triton's generate_stream and the
 * OpenAI-compatible routes share. The body is a ReadableStream the transport reads; a client that
 * goes away cancels the request (so a model, or an LLM's sequence, can stop early), and one that
 * stops reading while the model keeps sending is given up on past a bound, rather than holding the
 * model's output in memory without end.
 */

import type { InferOptions } from '../backend.js';

/** inferStream's options for an answer sent whole: the request is cancelled when `signal` aborts (the client left). */
export const cancelOn = (signal: AbortSignal): InferOptions => ({
  onCancel: (cancel) => signal.addEventListener('abort', cancel, { once: true }),
});

export const SSE_HEADERS = { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache' };

/** Events a client may leave unread before its request is cancelled. */
const MAX_UNSENT_BYTES = 256 * 1024 * 1024;

export class SseStream {
  readonly body: ReadableStream<Uint8Array>;
  /** The client went away, or was given up on: nothing more is sent. */
  gone = false;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private cancelRequest?: () => void;
  private readonly encoder = new TextEncoder();

  /** `what` names the route in the error a client that reads nothing gets. */
  constructor(private readonly what: string) {
    this.body = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.controller = c;
      },
      cancel: () => {
        this.gone = true;
        this.cancelRequest?.();
      },
    }, new ByteLengthQueuingStrategy({ highWaterMark: 1 << 20 }));
  }

  /** inferStream's options: the request is cancelled when the client leaves or `signal` aborts. */
  inferOptions(signal: AbortSignal): InferOptions {
    return {
      onCancel: (cancel) => {
        this.cancelRequest = cancel;
        signal.addEventListener('abort', cancel, { once: true });
      },
    };
  }

  /** Sends `text` (whole events, `data: ...\n\n`) unless the client is gone. */
  send(text: string): void {
    if (this.gone || text.length === 0) return;
    this.controller.enqueue(this.encoder.encode(text));
    if ((this.controller.desiredSize ?? 0) < -MAX_UNSENT_BYTES) {
      this.gone = true;
      this.cancelRequest?.();
      this.controller.error(new Error(`${this.what}: the client read nothing while ${MAX_UNSENT_BYTES} bytes of responses waited`));
    }
  }

  close(): void {
    if (!this.gone) this.controller.close();
  }
}
