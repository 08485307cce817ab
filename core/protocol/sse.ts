/**
 * A Server-Sent Events answer fed by a streaming inference: what Triton's generate_stream and the
 * OpenAI-compatible routes share. The body is a ReadableStream the transport reads; a client that
 * goes away cancels the request (so a model, or an LLM's sequence, can stop early), and one that
 * stops reading while the model keeps sending is given up on past a bound, rather than holding the
 * model's output in memory without end.
 *
 * What is sent within one event-loop turn goes out as one chunk at its end (one socket write): under
 * load the tokens of several steps, or a prefill's and a decode step's, wait together for the main
 * thread, and each chunk costs the same whatever its length (an encode, a stream read, a write call).
 */

import type { InferOptions } from '../backend.js';

export const SSE_HEADERS = { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache' };

/** Events a client may leave unread before its request is cancelled. */
const MAX_UNSENT_BYTES = 256 * 1024 * 1024;

/**
 * Runs `fn` once this turn's I/O callbacks have run: Node's setImmediate (its check phase, after every
 * message and socket event the poll phase held), elsewhere a 0 ms timer.
 */
const afterTurn: (fn: () => void) => void = (globalThis as { setImmediate?: (fn: () => void) => void }).setImmediate ?? ((fn) => void setTimeout(fn, 0));

export class SseStream {
  readonly body: ReadableStream<Uint8Array>;
  /** The client went away, or was given up on: nothing more is sent. */
  gone = false;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private cancelRequest?: () => void;
  private readonly encoder = new TextEncoder();
  /** Events sent this turn, not yet in the body. */
  private pending = '';
  private closing = false;

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

  /** Sends `text` (whole events, `data: ...\n\n`) at the end of this turn, unless the client is gone. */
  send(text: string): void {
    if (this.gone || text.length === 0 || this.closing) return;
    if (this.pending.length === 0) afterTurn(this.flush);
    this.pending += text;
  }

  /** Ends the body once what was sent has gone into it. */
  close(): void {
    if (this.gone || this.closing) return;
    this.closing = true;
    if (this.pending.length === 0) this.controller.close();
  }

  private readonly flush = (): void => {
    const text = this.pending;
    this.pending = '';
    if (this.gone) return;
    this.controller.enqueue(this.encoder.encode(text));
    if ((this.controller.desiredSize ?? 0) < -MAX_UNSENT_BYTES) {
      this.gone = true;
      this.cancelRequest?.();
      this.controller.error(new Error(`${this.what}: the client read nothing while ${MAX_UNSENT_BYTES} bytes of responses waited`));
      return;
    }
    if (this.closing) this.controller.close();
  };
}
