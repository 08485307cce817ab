/**
 * The Node-only client entry (`tsi-node/client/node`): everything in `tsi-node/client`, plus what needs
 * Node — the gRPC client (grpc-js) and a node:http-based fetch that makes HttpClient cheaper per call.
 * Browser code imports `tsi-node/client` instead, which never reaches these files.
 */

export * from './index.js';
export { GrpcClient, InferStream, defaultProtoDir, type GrpcClientOptions, type StreamHandlers, type StreamItem } from './grpc.js';
export { nodeHttpFetch, NodeResponse, readPem, type NodeFetchOptions, type PemSource } from './node-fetch.js';
