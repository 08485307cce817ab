/**
 * core's protocol front-ends, each written once as `(Request) => Promise<Response>` or as plain
 * conversions: http.ts (the KServe v2 routes) with http-admin.ts (the management extensions) and
 * http-common.ts (what route files share), v2-codec.ts (JSON and binary tensor bodies), generate.ts
 * (Triton's generate extension), cloud-endpoints.ts (SageMaker's and Vertex AI's routes over v2),
 * openai.ts (the OpenAI-compatible routes), sse.ts (server-sent events) and request-params.ts (the
 * request parameters every wire shares).
 */

export * from './http.js';
