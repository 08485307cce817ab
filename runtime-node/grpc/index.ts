/**
 * The gRPC front door of the Node runtime: server.ts runs every RPC of inference.GRPCInferenceService
 * and grpc.health.v1 on @grpc/grpc-js; codec.ts converts its messages to and from core's requests and
 * responses; wire-reader.ts and wire-writer.ts read and write the hot-path messages' protobuf bytes
 * by hand; direct.ts answers plain unary ModelInfer on node:http2 ahead of grpc-js; js-hooks.ts holds
 * what tsi changes inside grpc-js. Status codes are mapped from core's errors here, at the edge.
 */

export * from './server.js';
