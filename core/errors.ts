/**
 * The one error type of tsi. Codes are Triton's (TRITONSERVER_Error_Code); each transport maps them to
 * its own status at the edge (HTTP in http.ts, gRPC in runtime-node/grpc/server.ts), so core never speaks in
 * status numbers. Messages are de-facto API: Triton clients and tests match on them, so the texts that
 * mirror Triton's are kept word for word.
 */

export type ErrorCode =
  | 'UNKNOWN'
  | 'INTERNAL'
  | 'NOT_FOUND'
  | 'INVALID_ARG'
  | 'UNAVAILABLE'
  | 'UNSUPPORTED'
  | 'ALREADY_EXISTS'
  | 'CANCELLED'
  | 'PERMISSION_DENIED';

export class TsiError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'TsiError';
  }
}

export const invalidArg = (message: string) => new TsiError('INVALID_ARG', message);
export const notFound = (message: string) => new TsiError('NOT_FOUND', message);
export const unavailable = (message: string) => new TsiError('UNAVAILABLE', message);
export const unsupported = (message: string) => new TsiError('UNSUPPORTED', message);
export const internal = (message: string) => new TsiError('INTERNAL', message);

/** Wraps anything thrown into a TsiError, keeping a TsiError as it is. */
export function asTsiError(err: unknown, code: ErrorCode = 'INTERNAL'): TsiError {
  if (err instanceof TsiError) return err;
  if (err instanceof Error) return new TsiError(code, err.message, { cause: err });
  return new TsiError(code, String(err));
}

/** Triton's HTTP mapping (http_server.cc HttpCodeFromError): everything unlisted is 400. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  UNKNOWN: 400,
  INTERNAL: 500,
  NOT_FOUND: 404,
  INVALID_ARG: 400,
  UNAVAILABLE: 503,
  UNSUPPORTED: 501,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
  PERMISSION_DENIED: 403,
};
