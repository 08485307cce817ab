/**
 * The KServe v2 HTTP protocol, written once as a Web-standard `(Request) => Promise<Response>` (hono),
 * so the Node server, the browser's in-page `fetch` and a Service Worker all answer the same routes
 * with the same bytes. Routes, status codes, empty health bodies and `{"error": ...}` bodies follow
 * Triton's http_server.cc; request and response compression (gzip/deflate) and CORS are handled here.
 * The management extensions (repository control, shared memory, logging, trace, restricted APIs) are
 * mounted from http-admin.ts; inference reads and writes shared-memory regions and feeds tracing here.
 */

import { Hono, type Context } from 'hono';
import { cors } from 'hono/cors';
import { TsiError, invalidArg } from '../errors.js';
import { ServerExtensions, type Restrictions } from '../extensions.js';
import { mountExtensionRoutes, restrictedApiMiddleware, restrictedMessage } from './http-admin.js';
import { errorReply, errorResponse, json, toResponse, type HttpReply } from './http-common.js';
import { generate } from './generate.js';
import { completions, getModel, listModels } from '../llm/index.js';
import { embeddings } from './openai-embeddings.js';
import { audioRoute } from './openai-audio.js';
import { classify, rerank, score } from './openai-scoring.js';
import { createResponse, deleteResponse, getResponse } from './openai-responses.js';
import { countTokens, messages } from './anthropic-messages.js';
import { detokenize, tokenize } from './tokenize.js';
import type { InferenceServer } from '../server.js';
import { attachTrace, traceContextOf } from '../trace.js';
import type { InferResponse } from '../types.js';
import { readRequestBody, readWebBody, type BodySource } from './http-body.js';
import { forwardHeaders } from './request-params.js';
import type { ImageFetcher } from './openai-images.js';
import { HEADER_LENGTH, bodyBytes, decodeInferRequest, encodeInferResponse, errorBody } from './v2-codec.js';

export { errorReply, errorResponse, json, type HttpReply } from './http-common.js';

export interface HttpOptions {
  /** Largest accepted request body, before and after decompression (--http-max-input-size). */
  maxInputSize?: number;
  /** Access-Control-Allow-Origin values; unset means no CORS headers (Triton's behaviour). */
  corsOrigin?: string | string[];
  /** Extra routes a runtime mounts on the same app. */
  extend?: (app: Hono, server: InferenceServer) => void;
  /**
   * Shared-memory regions, trace/log settings and model control, shared with the other transports.
   * Default: a private set with client shared memory disabled and in-memory load overrides.
   */
  extensions?: ServerExtensions;
  /** --http-restricted-api: categories that need a header (403 without it). */
  restrictedApi?: Restrictions;
  /** --http-header-forward-pattern: headers whose names match reach the model as request parameters. */
  headerForwardPattern?: RegExp;
  /** Which infer responses are compressed for clients that accept it (see `compressionPolicy`). */
  compression?: CompressionPolicy;
  /** --allow-image-urls: fetches a chat image_url part's http(s) URL (the runtime's checks); unset: such URLs are refused. */
  fetchImage?: ImageFetcher;
  /** A faster compressor than CompressionStream where the runtime has one (Node: zlib at level 1). */
  compress?: (data: Uint8Array, format: 'gzip' | 'deflate') => Promise<Uint8Array>;
}

/**
 * When to compress an infer response for a client whose Accept-Encoding allows it. Browsers and
 * fetch always send `gzip, deflate`, and on loopback or a LAN compression only costs: CompressionStream
 * takes ~1 ms for a 400-byte answer (that doubled `simple`'s latency for fetch clients), and zlib's
 * fastest level encodes JSON at ~80 MB/s for 47 % of the bytes, slower than a 1 Gb/s link sends them.
 * `auto` (the default) compresses only JSON of at least `minBytes` (big JSON over slow links is where
 * it pays) and never binary tensor data (random floats shrink by ~10 %); `always` is Triton's way
 * (whatever the client accepts); `off` never.
 */
export interface CompressionPolicy {
  mode: 'auto' | 'always' | 'off';
  minBytes: number;
}

export const DEFAULT_COMPRESSION: CompressionPolicy = { mode: 'auto', minBytes: 64 * 1024 };

export const DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024;

type Handler = (c: Context) => Promise<Response> | Response;

const MODEL = '/v2/models/:model{[^/]+}';
const VERSIONED = `${MODEL}/versions/:version{[0-9]+}`;

const empty = (status: number) => new Response(null, { status });

/** Builds the v2 app. `app.fetch` is the `(Request) => Promise<Response>` every runtime uses. */
export function createHttpApp(server: InferenceServer, options: HttpOptions = {}): Hono {
  const app = new Hono();
  const maxInput = options.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE;
  if (options.corsOrigin !== undefined) {
    app.use('*', cors({
      origin: options.corsOrigin,
      allowMethods: ['GET', 'POST', 'DELETE', 'OPTIONS'],
      allowHeaders: ['Content-Type', 'Content-Encoding', 'Accept-Encoding', HEADER_LENGTH],
      exposeHeaders: [HEADER_LENGTH, 'Content-Encoding'],
    }));
  }
  if (options.restrictedApi && options.restrictedApi.size > 0) app.use('*', restrictedApiMiddleware(options.restrictedApi));
  const ext = options.extensions ?? new ServerExtensions(server);
  const inferHttp = inferEndpoint(server, { ...options, extensions: ext });

  /** One path, several methods; any other method is Triton's 405. */
  const route = (path: string, methods: Partial<Record<'GET' | 'POST' | 'DELETE', Handler>>) => {
    app.all(path, async (c) => {
      // HEAD is GET without the body (hono drops it).
      const h = methods[(c.req.method === 'HEAD' ? 'GET' : c.req.method) as 'GET' | 'POST' | 'DELETE'];
      if (!h) {
        if (c.req.method === 'OPTIONS') return empty(204);
        return json({ error: 'Method Not Allowed' }, 405);
      }
      try {
        return await h(c);
      } catch (err) {
        return errorResponse(err);
      }
    });
  };
  const version = (c: Context) => c.req.param('version');

  route('/v2/health/live', { GET: () => empty(server.isLive() ? 200 : 400) });
  route('/v2/health/ready', { GET: () => empty(server.isReady() ? 200 : 400) });
  route('/v2', { GET: () => json(server.metadata()) });
  route('/v2/models/stats', { GET: () => json(server.statistics()) });

  for (const base of [MODEL, VERSIONED]) {
    route(base, { GET: (c) => json(server.modelMetadata(c.req.param('model')!, version(c))) });
    route(`${base}/ready`, {
      GET: async (c) => {
        const ready = await server.modelReady(c.req.param('model')!, version(c));
        return ready ? empty(200) : json({ error: 'Model version not ready' }, 400);
      },
    });
    route(`${base}/config`, {
      GET: (c) => new Response(server.modelConfigText(c.req.param('model')!, version(c)), { headers: { 'Content-Type': 'application/json' } }),
    });
    route(`${base}/stats`, { GET: (c) => json(server.statistics(c.req.param('model')!, version(c))) });
    route(`${base}/infer`, {
      POST: async (c) => toResponse(await inferHttp({
        model: c.req.param('model')!, version: version(c), header: (n) => c.req.header(n),
        headers: () => c.req.raw.headers.entries(),
        body: c.req.raw.body,
        onCancel: (cancel) => c.req.raw.signal.addEventListener('abort', cancel, { once: true }),
      })),
    });
    route(`${base}/generate`, { POST: (c) => generate(server, c.req.raw, c.req.param('model')!, version(c), false, maxInput, ext.traces) });
    route(`${base}/generate_stream`, { POST: (c) => generate(server, c.req.raw, c.req.param('model')!, version(c), true, maxInput, ext.traces) });
  }

  route('/v2/repository/index', {
    POST: async (c) => {
      const body = await readJsonBody(c, maxInput);
      let ready = false;
      if (body !== undefined && body.ready !== undefined) {
        if (typeof body.ready !== 'boolean') throw invalidArg(`Invalid value for 'ready': expected a boolean`);
        ready = body.ready;
      }
      // Triton's index reads the repositories each time, so models added since start-up are listed.
      await server.repository.scan();
      return json(server.repositoryIndex(ready));
    },
  });
  route('/v2/repository/:repo{[^/]+}/index', { POST: () => repoNameUnsupported() });
  // The OpenAI-compatible API of `llm`, `embedding` and `classifier` models (core/protocol/openai.ts, openai-embeddings.ts, openai-scoring.ts).
  route('/v1/models', { GET: () => listModels(server) });
  route('/v1/models/:model{.+}', { GET: (c) => getModel(server, c.req.param('model')!) });
  route('/v1/completions', { POST: (c) => completions(server, c.req.raw, false, maxInput, ext.traces) });
  route('/v1/chat/completions', { POST: (c) => completions(server, c.req.raw, true, maxInput, ext.traces, options.fetchImage) });
  // OpenAI's Responses API, Anthropic's Messages API and vLLM's tokenizer routes over the same models.
  route('/v1/responses', { POST: (c) => createResponse(server, c.req.raw, maxInput) });
  route('/v1/responses/:id{[^/]+}', { GET: (c) => getResponse(server, c.req.param('id')!), DELETE: (c) => deleteResponse(server, c.req.param('id')!) });
  route('/v1/messages', { POST: (c) => messages(server, c.req.raw, maxInput) });
  route('/v1/messages/count_tokens', { POST: (c) => countTokens(server, c.req.raw, maxInput) });
  route('/tokenize', { POST: (c) => tokenize(server, c.req.raw, maxInput) });
  route('/detokenize', { POST: (c) => detokenize(server, c.req.raw, maxInput) });
  route('/v1/embeddings', { POST: (c) => embeddings(server, c.req.raw, maxInput) });
  route('/v1/audio/transcriptions', { POST: (c) => audioRoute(server, c.req.raw, false, maxInput) });
  route('/v1/audio/translations', { POST: (c) => audioRoute(server, c.req.raw, true, maxInput) });
  route('/v1/rerank', { POST: (c) => rerank(server, c.req.raw, maxInput) });
  route('/v2/rerank', { POST: (c) => rerank(server, c.req.raw, maxInput) });
  route('/v1/score', { POST: (c) => score(server, c.req.raw, maxInput) });
  route('/v1/classify', { POST: (c) => classify(server, c.req.raw, maxInput) });
  mountExtensionRoutes(app, server, ext, (c) => readBody(c, maxInput));

  options.extend?.(app, server);

  app.notFound(() => json({ error: 'Not Found' }, 404));
  app.onError((err) => errorResponse(err));
  return app;
}

function repoNameUnsupported(): Response {
  return errorResponse(new TsiError('UNSUPPORTED', `'repository_name' specification is not supported`));
}

/** Reads a route's body (core/protocol/http-body.ts: bounded, decoded). */
export function readBody(c: Context, maxInput: number): Promise<Uint8Array> {
  return readWebBody(c.req.raw, maxInput);
}

async function readJsonBody(c: Context, maxInput: number): Promise<Record<string, unknown> | undefined> {
  const body = await readBody(c, maxInput);
  if (body.byteLength === 0) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(body));
  } catch (err) {
    throw invalidArg(`failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidArg('the request body must be a JSON object');
  return v as Record<string, unknown>;
}

/** Picks gzip/deflate/identity from Accept-Encoding with q-values, as Triton does for infer responses. */
export function chooseEncoding(accept: string | undefined): 'gzip' | 'deflate' | undefined {
  if (!accept) return undefined;
  let best: 'gzip' | 'deflate' | undefined;
  let bestQ = 0;
  for (const part of accept.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    let q = 1;
    for (const p of params) {
      const m = /^\s*q=([0-9.]+)\s*$/.exec(p);
      if (m) q = Number(m[1]);
    }
    if ((name === 'gzip' || name === 'deflate') && q > bestQ) {
      best = name;
      bestQ = q;
    } else if (name === 'identity' && q > bestQ) {
      best = undefined;
      bestQ = q;
    }
  }
  return best;
}

async function compress(data: Uint8Array, format: 'gzip' | 'deflate'): Promise<Uint8Array> {
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new CompressionStream(format));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** The parts of an infer request the protocol reads: from hono's Context, or straight off a Node socket. */
export interface InferHttpRequest {
  model: string;
  version: string | undefined;
  header(name: string): string | undefined;
  /** Every header as sent (name, value), for --http-header-forward-pattern. */
  headers(): Iterable<readonly [string, string]>;
  /** The body as sent (still compressed if it was): see BodySource. */
  body: BodySource;
  /** Registers what to call when the client goes away before its answer (its connection closed). */
  onCancel?: (cancel: () => void) => void;
}

/**
 * POST /v2/models/{model}[/versions/{v}]/infer as a function from request to reply, the
 * --http-restricted-api check included. createHttpApp routes to it; the Node server also calls it from
 * its socket handler, which spares the hottest route the Web Request/Response round trip.
 */
export function inferEndpoint(
  server: InferenceServer, options: HttpOptions & { extensions: ServerExtensions },
): (req: InferHttpRequest) => Promise<HttpReply> {
  const maxInput = options.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE;
  const ext = options.extensions;
  const restricted = options.restrictedApi?.get('inference');
  const out: OutputCompression = { policy: options.compression ?? DEFAULT_COMPRESSION, compress: options.compress ?? compress };
  return async (req) => {
    if (restricted && req.header(restricted.key) !== restricted.value) {
      return { status: 403, headers: { 'Content-Type': 'application/json' }, body: errorBody(restrictedMessage(restricted.key)) };
    }
    try {
      return await infer(server, req, maxInput, ext, out, options.headerForwardPattern);
    } catch (err) {
      return errorReply(err);
    }
  };
}

interface OutputCompression {
  policy: CompressionPolicy;
  compress: (data: Uint8Array, format: 'gzip' | 'deflate') => Promise<Uint8Array>;
}

/**
 * The encoding to send an encoded response in, by the policy and what the client accepts. Under
 * `auto` the answer's kind and size are checked before Accept-Encoding is parsed: most answers are
 * binary or small, and fetch clients send that header with every request.
 */
function responseEncoding(c: OutputCompression, accept: string | undefined, enc: { parts: readonly (string | Uint8Array)[]; headerLength?: number }): 'gzip' | 'deflate' | undefined {
  if (c.policy.mode === 'off' || !accept) return undefined;
  if (c.policy.mode === 'always') return chooseEncoding(accept);
  if (enc.headerLength !== undefined) return undefined;
  let size = 0;
  for (const p of enc.parts) size += typeof p === 'string' ? p.length : p.byteLength;
  return size >= c.policy.minBytes ? chooseEncoding(accept) : undefined;
}

async function infer(
  server: InferenceServer, req: InferHttpRequest, maxInput: number, ext: ServerExtensions, c: OutputCompression, forward: RegExp | undefined,
): Promise<HttpReply> {
  const modelName = req.model;
  const ver = req.version;
  const trace = ext.traces.sample(modelName, { name: 'HTTP_RECV_START', ns: server.clock.nowNs() }, traceContextOf(req.header));
  try {
    const body = await readRequestBody(req.header, req.body, maxInput);
    trace?.mark('HTTP_RECV_END');
    // The model first, as Triton creates the inference request before it parses the body: an unknown
    // model is a 404 whatever the body holds.
    // A model registered for on-demand loading loads here, and the request waits for it.
    const config = (await server.resident(modelName, ver)).config;
    const decoded = decodeInferRequest(body, req.header(HEADER_LENGTH), modelName, ver, () => config);
    if (forward) forwardHeaders(forward, req.headers(), decoded.request);
    const shm = ext.sharedMemory;
    const release = shm.hold(decoded.shmInputs, decoded.shmOutputs);
    let resp: InferResponse;
    let inShm: Set<string> | undefined;
    try {
      if (decoded.shmInputs.length > 0) await shm.readInputs(decoded.request, decoded.shmInputs);
      if (decoded.shmOutputs.size > 0) shm.checkOutputs(decoded.shmOutputs);
      if (trace) {
        attachTrace(decoded.request, trace);
        trace.requestId = decoded.request.id ?? '';
      }
      resp = await server.infer(decoded.request, {
        decoupledMessage: `HTTP end point doesn't support models with decoupled transaction policy`,
        onCancel: req.onCancel,
      });
      if (trace) {
        trace.mark('INFER_RESPONSE_COMPLETE');
        trace.version = Number(resp.model_version);
      }
      inShm = decoded.shmOutputs.size > 0 ? await shm.writeOutputs(resp, decoded.shmOutputs) : undefined;
    } finally {
      if (release) await release();
    }
    trace?.mark('HTTP_SEND_START');
    const enc = encodeInferResponse(resp, decoded.encoding, inShm);
    const headers: Record<string, string> = { 'Content-Type': enc.contentType };
    if (enc.headerLength !== undefined) headers[HEADER_LENGTH] = String(enc.headerLength);
    let out: HttpReply['body'] = enc.parts.length === 1 ? enc.parts[0]! : enc.parts;
    const ce = responseEncoding(c, req.header('Accept-Encoding'), enc);
    if (ce) {
      trace?.mark('HTTP_COMPRESS_START');
      out = await c.compress(bodyBytes(enc.parts), ce);
      trace?.mark('HTTP_COMPRESS_END');
      headers['Content-Encoding'] = ce;
    }
    trace?.mark('HTTP_SEND_END');
    return { status: 200, headers, body: out };
  } catch (err) {
    if (trace) trace.error ??= err instanceof Error ? err.message : String(err);
    throw err;
  } finally {
    trace?.finish();
  }
}
