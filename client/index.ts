/**
 * tsi's client library, browser-safe entry (`tsi-node/client`): the HTTP client (fetch-based, so it
 * runs in Node and in browsers), the one error type, and the types shared with the gRPC client, which
 * lives in its own Node-only entry (`tsi-node/client/grpc`) so that grpc-js never reaches a bundle.
 */

export { HttpClient, type HttpClientOptions, type FetchLike, type ResponseLike } from './http.js';
export { InferenceServerError, type ErrorSource } from './errors.js';
export { InferResult } from './tensor.js';
export type * from './types.js';
export type { InferenceClient } from './inference-client.js';
