/**
 * The client's one error type. Whatever goes wrong — a 4xx/5xx from an HTTP server, a non-OK gRPC
 * status, a refused connection, an input the client cannot encode — surfaces as an
 * InferenceServerError carrying the transport's own status (HTTP status number or gRPC status code)
 * and the server's message verbatim, so callers can match on the texts Triton clients already match on.
 */

export type ErrorSource = 'http' | 'grpc' | 'client';

/** gRPC status codes by number, so `codeName` is readable without importing grpc-js in browsers. */
const GRPC_CODE_NAMES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS',
  'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE',
  'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
] as const;

export interface InferenceServerErrorInit {
  source: ErrorSource;
  /** HTTP status, gRPC status code, or 0 when no server answered (connection failure, bad input). */
  status: number;
  message: string;
  cause?: unknown;
}

export class InferenceServerError extends Error {
  /** Which layer produced the error: an HTTP answer, a gRPC status, or the client itself. */
  readonly source: ErrorSource;
  /** HTTP status (e.g. 400, 404, 503) or gRPC code (e.g. 3, 5, 14); 0 when no server answered. */
  readonly status: number;

  constructor(init: InferenceServerErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'InferenceServerError';
    this.source = init.source;
    this.status = init.status;
  }

  /** gRPC code name ('NOT_FOUND', ...) for gRPC errors; the HTTP status as text otherwise. */
  get codeName(): string {
    if (this.source === 'grpc') return GRPC_CODE_NAMES[this.status] ?? String(this.status);
    return String(this.status);
  }
}

/** A client-side failure (bad input, undecodable response) in the one error type. */
export function clientError(message: string, cause?: unknown): InferenceServerError {
  return new InferenceServerError({ source: 'client', status: 0, message, cause });
}

/** Wraps anything thrown inside the client; InferenceServerErrors pass through unchanged. */
export function asClientError(err: unknown, source: ErrorSource = 'client'): InferenceServerError {
  if (err instanceof InferenceServerError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new InferenceServerError({ source, status: 0, message, cause: err });
}
