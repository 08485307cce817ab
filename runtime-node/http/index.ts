/**
 * The Node runtime's listeners below the protocol: server.ts is the HTTP/1.1 server on node:net (the
 * infer fast path and the bridge to core's Web-standard app), tls.ts loads and checks the certificate
 * files of the HTTP and gRPC listeners, api-keys.ts matches presented keys to API categories.
 */

export * from './server.js';
export * from './tls.js';
