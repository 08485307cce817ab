/**
 * Triton's SageMaker and Vertex AI endpoints (`--allow-sagemaker`, `--allow-vertex-ai`): thin route
 * sets over the v2 protocol, each served on a port of its own, that rename what the clouds' hosting
 * agents send into the v2 requests core already answers.
 *
 * SageMaker: `GET /ping` (readiness), `POST /invocations` (infer, generate or generate_stream on the one
 * model the container serves, by SAGEMAKER_TRITON_INFERENCE_TYPE), and the multi-model contract: `POST
 * /models` registers the repository at a load's `url` and loads it under the given name, `GET /models`
 * and `GET /models/{name}` list what is loaded, `POST /models/{name}/invoke` infers and `DELETE
 * /models/{name}` unloads. Vertex AI: the health and predict routes its agent names (AIP_HEALTH_ROUTE,
 * AIP_PREDICT_ROUTE); a predict carrying `X-Vertex-Ai-Triton-Redirect: <v2 path>` reaches that v2 route
 * instead (read-only ones, inference and the repository index; anything that changes state is 403).
 *
 * Both take binary tensor bodies with the JSON header's size in the Content-Type
 * (`application/vnd.{sagemaker,vertex-ai}-triton.binary+json;json-header-size=N`) rather than in
 * Inference-Header-Content-Length, and neither decompresses requests nor compresses responses, as in
 * Triton. SageMaker answers binary responses with that Content-Type too; Vertex AI with the v2 header.
 * What is on disk (where a load's url may point, which folder of it is the model) is the runtime's:
 * it hands in a SagemakerModelStore.
 */

import { Hono, type Context } from 'hono';
import { TsiError, asTsiError, invalidArg } from '../errors.js';
import type { Restrictions, ServerExtensions } from '../extensions.js';
import type { InferenceServer } from '../server.js';
import type { RepositorySource } from '../repository/repository.js';
import type { Logger } from '../types.js';
import { errorResponse, json, toResponse, type HttpReply } from './http-common.js';
import { restrictedMessage } from './http-admin.js';
import { generate } from './generate.js';
import type { InferHttpRequest } from './http.js';
import { HEADER_LENGTH } from './v2-codec.js';

type InferFn = (req: InferHttpRequest) => Promise<HttpReply>;

export const SAGEMAKER_BINARY = 'application/vnd.sagemaker-triton.binary+json;json-header-size=';
export const VERTEX_AI_BINARY = 'application/vnd.vertex-ai-triton.binary+json;json-header-size=';
export const VERTEX_AI_REDIRECT = 'X-Vertex-Ai-Triton-Redirect';
const INT32_MAX = 2 ** 31 - 1;

const empty = (status: number) => new Response(null, { status });

/** C's stoi on a string: leading spaces, a sign, digits; `undefined` when no digit leads, `NaN` past int32. */
function stoi(s: string): number | undefined {
  const m = /^\s*([+-]?\d+)/.exec(s);
  if (!m) return undefined;
  const n = Number(m[1]);
  return n > INT32_MAX || n < -INT32_MAX - 1 ? Number.NaN : n;
}

/**
 * The JSON header's size from a cloud binary Content-Type (Triton's texts for a bad one), or undefined
 * for a JSON body; checked against Content-Length where the request has one.
 */
export function cloudHeaderLength(contentType: string | undefined, contentLength: string | undefined, mime: string): number | undefined {
  if (contentType === undefined) return undefined;
  const at = contentType.indexOf(mime);
  if (at < 0) return undefined;
  if (at !== 0) throw invalidArg(`expect MIME type for binary data starts with '${mime}', got: ${contentType}`);
  const text = contentType.slice(mime.length);
  const n = stoi(text);
  if (n === undefined) throw invalidArg(`Unable to parse inference header size, got: ${text}`);
  if (Number.isNaN(n)) throw invalidArg(`Unable to parse inference header size, value is out of range, got: ${text}`);
  const length = contentLength !== undefined ? stoi(contentLength) : undefined;
  if (n < 0 || (length !== undefined && !Number.isNaN(length) && n > length)) {
    throw invalidArg(`inference header size should be in range (0, ${length ?? '?'}), got: ${text}`);
  }
  return n;
}

/** An infer request as the v2 endpoint reads it, from a cloud route's request. */
function cloudInferRequest(c: Context, model: string, version: string | undefined, mime: string): InferHttpRequest {
  const length = cloudHeaderLength(c.req.header('content-type'), c.req.header('content-length'), mime);
  return {
    model, version,
    header: (name) => {
      switch (name.toLowerCase()) {
        case HEADER_LENGTH.toLowerCase(): return length === undefined ? undefined : String(length);
        // Identity both ways, as Triton's cloud endpoints.
        case 'content-encoding': case 'accept-encoding': return undefined;
        default: return c.req.header(name);
      }
    },
    headers: () => c.req.raw.headers.entries(),
    body: c.req.raw.body,
    onCancel: (cancel) => c.req.raw.signal.addEventListener('abort', cancel, { once: true }),
  };
}

async function cloudInfer(infer: InferFn, c: Context, model: string, version: string | undefined, mime: string): Promise<HttpReply> {
  let req: InferHttpRequest;
  try {
    req = cloudInferRequest(c, model, version, mime);
  } catch (err) {
    return { status: 400, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ error: asTsiError(err).message }) };
  }
  return infer(req);
}

/** A route that answers any error as `{"error"}` with its status. */
const guarded = (h: (c: Context) => Promise<Response> | Response) => async (c: Context) => {
  try {
    return await h(c);
  } catch (err) {
    return errorResponse(err);
  }
};

/** 403 with Triton's text when `category` is restricted and the request lacks its header. */
function refused(restrictions: Restrictions | undefined, category: 'inference' | 'model-repository', c: Context): Response | undefined {
  const r = restrictions?.get(category);
  return r && c.req.header(r.key) !== r.value ? json({ error: restrictedMessage(r.key) }, 403) : undefined;
}

// ---------------------------------------------------------------------------------------------- SageMaker

/** Where SageMaker's multi-model loads find their models: the runtime's file system rules. */
export interface SagemakerModelStore {
  /**
   * The repository a load's `url` stands for, with the folder that holds the model named `model` in it
   * (Triton's layout: `<root>/<hash>/model` is the model, or holds it, or holds an ensemble and its
   * steps). Throws what is wrong with the url.
   */
  open(url: string, model: string): Promise<{ repository: string; source: RepositorySource }>;
}

export type SagemakerInferenceType = 'infer' | 'generate' | 'generate_stream';

export interface SagemakerOptions {
  server: InferenceServer;
  extensions: ServerExtensions;
  /** core's v2 infer endpoint (with --http-restricted-api's inference check), shared with the HTTP port. */
  infer: InferFn;
  maxInputSize: number;
  restrictions?: Restrictions;
  /** SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: the model `/invocations` reaches. */
  defaultModel?: string;
  /** SAGEMAKER_TRITON_INFERENCE_TYPE (default infer). */
  inferenceType?: SagemakerInferenceType;
  /** SAGEMAKER_TRITON_PING_MODE: `/ping` answers readiness (default) or liveness. */
  pingMode?: 'ready' | 'live';
  store?: SagemakerModelStore;
  log: Logger;
}

/** Error texts that mean the machine ran out of memory: a multi-model load or invoke answers 507 for them. */
const OUT_OF_MEMORY = [
  'CUDA out of memory', 'CUDA_OUT_OF_MEMORY', 'Out of memory', 'Out Of Memory', 'out of memory', 'MemoryError', 'OutOfMemory', 'OOM',
  'Dst tensor is not initialized', 'Src tensor is not initialized', 'CNMEM_STATUS_OUT_OF_MEMORY', 'CUDNN_STATUS_NOT_INITIALIZED',
  'CUBLAS_STATUS_ALLOC_FAILED', 'CUBLAS_STATUS_NOT_INITIALIZED', 'Failed to allocate memory', 'failed to allocate memory',
  'No space left on device',
];
const mmeError = (err: unknown) => {
  const message = asTsiError(err).message;
  return json({ error: message }, OUT_OF_MEMORY.some((s) => message.includes(s)) ? 507 : 400);
};

/** The first character of any JSON value. */
const VALUE_START = /[{["\-0-9tfn]/;

/**
 * A load's body as Triton's parser reads it: an empty one holds no settings; text that starts no JSON
 * value at all gets rapidjson's words ("Invalid value." and where), which Triton's tests look for.
 */
function parseLoadBody(text: string): Record<string, unknown> {
  const start = text.search(/\S/);
  if (start < 0) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    const why = VALUE_START.test(text[start]!) ? (err as Error).message : `Invalid value. at ${start}`;
    throw invalidArg(`failed to parse the request JSON buffer: ${why}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidArg('failed to parse the request JSON buffer: the request must be a JSON object');
  return v as Record<string, unknown>;
}

interface Registered {
  /** The repository folder registered for it (what `modelUrl` reports). */
  repository: string;
  source: RepositorySource;
  /** The name it serves under (X-Amzn-SageMaker-Target-Model at load, else its `model_name`). */
  target: string;
}

/** SageMaker's routes: mount with `app.fetch` on `--sagemaker-port`. */
export function createSagemakerApp(o: SagemakerOptions): Hono {
  const app = new Hono();
  const { server, log } = o;
  const type = o.inferenceType ?? 'infer';
  const defaultModel = o.defaultModel ?? 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME';
  const models = new Map<string, Registered>();
  const sagemakerReply = (r: HttpReply): Response => {
    const n = r.headers[HEADER_LENGTH];
    if (n !== undefined) {
      const { [HEADER_LENGTH]: _, ...rest } = r.headers;
      return toResponse({ ...r, headers: { ...rest, 'Content-Type': SAGEMAKER_BINARY + n } });
    }
    return toResponse(r);
  };

  app.get('/ping', () => empty((o.pingMode === 'live' ? server.isLive() : server.isReady()) ? 200 : 400));
  app.post('/invocations', guarded(async (c) => {
    if (type === 'infer') return sagemakerReply(await cloudInfer(o.infer, c, defaultModel, undefined, SAGEMAKER_BINARY));
    const no = refused(o.restrictions, 'inference', c);
    if (no) return no;
    return generate(server, c.req.raw, defaultModel, undefined, type === 'generate_stream', o.maxInputSize, o.extensions.traces);
  }));

  app.get('/models', guarded((c) => refused(o.restrictions, 'model-repository', c) ?? json({
    // A model that is not ready is an empty entry, as Triton lists it.
    models: [...models].map(([hash, m]) => (server.isModelReady(m.target) ? { modelName: hash, modelUrl: m.repository } : {})),
  })));
  app.get('/models/:hash{[^/]+}', guarded((c) => {
    const no = refused(o.restrictions, 'model-repository', c);
    if (no) return no;
    const m = models.get(c.req.param('hash')!);
    return m ? json({ modelName: c.req.param('hash'), modelUrl: m.repository }) : empty(404);
  }));

  app.post('/models', guarded(async (c) => {
    const no = refused(o.restrictions, 'model-repository', c);
    if (no) return no;
    const body = parseLoadBody(new TextDecoder().decode(await c.req.arrayBuffer()));
    const hash = typeof body.model_name === 'string' ? body.model_name : '';
    const url = typeof body.url === 'string' ? body.url : '';
    if (body.model_name !== undefined && typeof body.model_name !== 'string') throw invalidArg(`'model_name' must be a string`);
    if (body.url !== undefined && typeof body.url !== 'string') throw invalidArg(`'url' must be a string`);
    const target = c.req.header('X-Amzn-SageMaker-Target-Model') ?? hash;
    log.info(`Loading SageMaker TargetModel: ${target}`);
    if (!o.store) throw new TsiError('UNSUPPORTED', 'SageMaker multi-model loads are not available on this runtime');
    let opened: { repository: string; source: RepositorySource };
    try {
      opened = await o.store.open(url, target);
    } catch (err) {
      return json({ error: asTsiError(err).message }, 400);
    }
    for (const [h, m] of models) {
      if (h === hash || m.repository === opened.repository || m.target === target) {
        return json({ error: `model repository '${opened.repository}' (model '${target}') has already been registered` }, 409);
      }
    }
    server.repository.addSource(opened.source);
    try {
      await o.extensions.modelControl.load(target, new Map());
    } catch (err) {
      server.repository.removeSource(opened.source);
      log.verbose(1, `Unregistered model repository due to load failure for model: ${target}`);
      return mmeError(err);
    }
    models.set(hash, { repository: opened.repository, source: opened.source, target });
    return empty(200);
  }));

  app.post('/models/:hash{[^/]+}/invoke', guarded(async (c) => {
    const m = models.get(c.req.param('hash')!);
    if (!m) return empty(404);
    const target = c.req.header('X-Amzn-SageMaker-Target-Model') ?? c.req.param('hash')!;
    log.info(`Invoking SageMaker TargetModel: ${target}`);
    const r = await cloudInfer(o.infer, c, target, undefined, SAGEMAKER_BINARY);
    // Errors of a multi-model invoke are 400, or 507 when memory ran out (Triton's SLA with SageMaker).
    if (r.status !== 200 && r.status !== 403) {
      const text = typeof r.body === 'string' ? r.body : '';
      return sagemakerReply({ ...r, status: OUT_OF_MEMORY.some((s) => text.includes(s)) ? 507 : 400 });
    }
    return sagemakerReply(r);
  }));

  app.delete('/models/:hash{[^/]+}', guarded(async (c) => {
    const no = refused(o.restrictions, 'model-repository', c);
    if (no) return no;
    const hash = c.req.param('hash')!;
    const m = models.get(hash);
    if (!m) {
      log.verbose(1, `Model ${c.req.header('X-Amzn-SageMaker-Target-Model') ?? hash} with model hash ${hash} is not loaded.`);
      return empty(404);
    }
    log.info(`Unloading SageMaker TargetModel: ${m.target}`);
    try {
      await o.extensions.modelControl.unload(m.target, true);
    } catch (err) {
      log.error(`Error when unloading SageMaker Model with dependents for model: ${m.target}`);
      return json({ error: asTsiError(err).message }, 400);
    }
    server.repository.removeSource(m.source);
    models.delete(hash);
    return empty(200);
  }));

  app.all('*', (c) => {
    log.verbose(1, `SageMaker error: ${c.req.method} ${c.req.path} - 400`);
    return empty(400);
  });
  return app;
}

// ---------------------------------------------------------------------------------------------- Vertex AI

export interface VertexAiOptions {
  server: InferenceServer;
  /** core's v2 app, which redirected requests reach (its --http-restricted-api checks included). */
  v2: { fetch: (req: Request) => Response | Promise<Response> };
  infer: InferFn;
  /** AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE: paths matched whole. */
  predictRoute: string;
  healthRoute: string;
  defaultModel: string;
  log: Logger;
}

/**
 * `--vertex-ai-default-model`, or the only ready model: Triton's start-up rule and texts (an error
 * here stops the server from starting).
 */
export function vertexAiDefaultModel(server: InferenceServer, wanted: string | undefined): string {
  const ready = server.repositoryIndex(true).map((e) => e.name);
  if (wanted === undefined || wanted === '') {
    const names = [...new Set(ready)];
    if (names.length !== 1) throw invalidArg('Expect the model repository contains only a single model if default model is not specified');
    return names[0]!;
  }
  if (!ready.includes(wanted)) throw invalidArg(`Expect the default model '${wanted}' is loaded`);
  return wanted;
}

/** What a redirect may reach, and as which method: reads, inference and the index. */
function redirectMethod(path: string): 'GET' | 'POST' | 'infer' | 'forbidden' | undefined {
  if (path === '/v2' || path === '/v2/models/stats' || /^\/v2\/health\/(live|ready)$/.test(path)) return 'GET';
  const model = /^\/v2\/models\/[^/]+(?:\/versions\/[0-9]+)?(?:\/(ready|infer|config|stats))?$/.exec(path);
  if (model) return model[1] === 'infer' ? 'infer' : 'GET';
  const shm = /^\/v2\/(?:system|cuda)sharedmemory(?:\/region\/[^/]+)?\/([^/]+)$/.exec(path);
  if (shm) return shm[1] === 'status' ? 'GET' : 'forbidden';
  const repo = /^\/v2\/repository(?:\/[^/]+)?\/(index|models\/[^/]+\/[^/]+)$/.exec(path);
  if (repo) return repo[1] === 'index' ? 'POST' : 'forbidden';
  return undefined;
}

/** Vertex AI's routes: mount with `app.fetch` on `--vertex-ai-port`. */
export function createVertexAiApp(o: VertexAiOptions): Hono {
  const app = new Hono();
  const { server, log } = o;
  const bad = (c: Context) => {
    log.verbose(1, `Vertex AI error: ${c.req.method} ${c.req.path} - 400`);
    return empty(400);
  };
  app.all('*', guarded(async (c) => {
    const path = c.req.path;
    if (path === o.healthRoute) {
      if (c.req.method !== 'GET') return json({ error: 'Method Not Allowed' }, 405);
      return empty(server.isReady() ? 200 : 400);
    }
    if (path !== o.predictRoute) return bad(c);
    if (c.req.method !== 'POST') return json({ error: 'Method Not Allowed' }, 405);
    const redirect = c.req.header(VERTEX_AI_REDIRECT);
    if (redirect === undefined) return toResponse(await cloudInfer(o.infer, c, o.defaultModel, undefined, VERTEX_AI_BINARY));
    const target = '/' + redirect;
    log.verbose(1, `Redirecting Vertex AI request: ${target}`);
    if (target === '/metrics') {
      return new Response(await server.metrics.scrape(), { status: 200, headers: { 'Content-Type': server.metrics.contentType } });
    }
    const how = redirectMethod(target);
    if (how === undefined) return bad(c);
    if (how === 'forbidden') {
      log.verbose(1, `Vertex AI redirect blocked: ${target}`);
      return empty(403);
    }
    if (how === 'infer') {
      const m = /^\/v2\/models\/([^/]+)(?:\/versions\/([0-9]+))?\/infer$/.exec(target)!;
      return toResponse(await cloudInfer(o.infer, c, decodeURIComponent(m[1]!), m[2], VERTEX_AI_BINARY));
    }
    const headers = new Headers(c.req.raw.headers);
    headers.delete(VERTEX_AI_REDIRECT);
    headers.delete('content-length');
    return o.v2.fetch(new Request(new URL(target, c.req.url), {
      method: how, headers, body: how === 'POST' ? await c.req.arrayBuffer() : undefined,
    }));
  }));
  return app;
}
