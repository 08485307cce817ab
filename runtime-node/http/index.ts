/**
 * The Node runtime's listeners below the protocol: server.ts is the HTTP/1.1 server on node:net (the
 * infer fast path and the bridge to core's Web-standard app), with connection.ts reading each
 * connection's requests through request.ts (heads, bodies) and answering through response.ts; tls.ts loads and checks the certificate
 * files of the HTTP and gRPC listeners, api-keys.ts matches presented keys to API categories.
 */

export * from './server.js';
export * from './tls.js';
