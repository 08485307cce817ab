/**
 * What the HTTP route files share (http.ts for inference and health, http-admin.ts for the
 * management extensions, generate.ts): JSON answers, the `{"error": ...}` answer with the status
 * Triton gives the error's code, and the object check JSON bodies go through. A leaf module, so the
 * route files import it and never each other's helpers.
 */

import { HTTP_STATUS, asTsiError } from '../errors.js';
import { bodyBytes, errorBody } from './v2-codec.js';

/** The JSON object check, v2-codec.ts's, for the route files' bodies. */
export { isObj } from './v2-codec.js';

export function json(body: unknown, status = 200, headers?: Record<string, string>): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json', ...headers } });
}

/** A response as plain data, for transports that write it themselves (the Node server's infer path). */
export interface HttpReply {
  status: number;
  headers: Record<string, string>;
  /** Bytes, text, or pieces of either sent back to back (an encoded response's header and tensors). */
  body: Uint8Array | string | (string | Uint8Array)[];
}

/**
 * `{"error": ...}` with the status Triton gives the error's code, or `status` where a route answers
 * otherwise (generate's errors found before inference are 400 whatever their code).
 */
export function errorReply(err: unknown, status?: number): HttpReply {
  const e = asTsiError(err);
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (e.message === 'Unsupported compression type') headers['Accept-Encoding'] = 'gzip, deflate';
  return { status: status ?? HTTP_STATUS[e.code] ?? 400, headers, body: errorBody(e) };
}

export function errorResponse(err: unknown, status?: number): Response {
  return toResponse(errorReply(err, status));
}

export const toResponse = (r: HttpReply) =>
  new Response((Array.isArray(r.body) ? bodyBytes(r.body) : r.body) as BodyInit, { status: r.status, headers: r.headers });
