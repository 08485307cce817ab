/**
 * The v2 HTTP routes of Triton's management extensions, mounted on core's app by `createHttpApp`:
 * repository load/unload, system and CUDA shared memory, logging and trace settings, and the
 * restricted-API check (`--http-restricted-api`) that runs before every route. Bodies, status codes and
 * error texts follow Triton's http_server.cc; the state behind them is the ServerExtensions object the
 * gRPC server shares.
 */

import type { Context, Hono } from 'hono';
import { TsiError, invalidArg } from '../errors.js';
import { httpCategory, type Restrictions, type ServerExtensions } from '../extensions.js';
import { errorResponse, isObj, json } from './http-common.js';
import { decodeBase64, type LoadParamValue } from '../repository/model-control.js';
import type { InferenceServer } from '../server.js';
import { parseTraceUpdate, traceSettingsJson } from '../settings.js';

type Handler = (c: Context) => Promise<Response> | Response;
/** http.ts's body reader (size limit, decompression), handed in so this file does not import http.ts. */
type BodyReader = (c: Context) => Promise<Uint8Array>;

const ok = () => new Response(null, { status: 200 });

/** Same contract as http.ts's routes: other methods get Triton's 405, errors the `{"error"}` body. */
function route(app: Hono, path: string, methods: Partial<Record<'GET' | 'POST', Handler>>): void {
  app.all(path, async (c) => {
    const h = methods[c.req.method as 'GET' | 'POST'];
    if (!h) {
      if (c.req.method === 'OPTIONS') return new Response(null, { status: 204 });
      return json({ error: 'Method Not Allowed' }, 405);
    }
    try {
      return await h(c);
    } catch (err) {
      return errorResponse(err);
    }
  });
}

async function bodyObject(c: Context, read: BodyReader, required: boolean): Promise<Record<string, unknown>> {
  const body = await read(c);
  if (body.byteLength === 0) {
    if (required) throw invalidArg('the request body must be a JSON object');
    return {};
  }
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(body));
  } catch (err) {
    throw invalidArg(`failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  if (!isObj(v)) throw invalidArg('the request body must be a JSON object');
  return v;
}

export const restrictedMessage = (key: string) => `This API is restricted, expecting header '${key}'`;

/** Rejects requests to a restricted category that lack the configured header (403, Triton's text). */
export function restrictedApiMiddleware(restrictions: Restrictions) {
  return async (c: Context, next: () => Promise<void>): Promise<Response | void> => {
    // Preflights cannot carry custom headers; the real request that follows is checked.
    if (c.req.method === 'OPTIONS') return next();
    const cat = httpCategory(c.req.path);
    const r = cat ? restrictions.get(cat) : undefined;
    if (r && c.req.header(r.key) !== r.value) {
      return json({ error: restrictedMessage(r.key) }, 403);
    }
    await next();
  };
}

export function mountExtensionRoutes(app: Hono, server: InferenceServer, ext: ServerExtensions, read: BodyReader): void {
  const repoNameUnsupported = () => {
    throw new TsiError('UNSUPPORTED', `'repository_name' specification is not supported`);
  };

  // ---- model repository: load / unload
  route(app, '/v2/repository/models/:model{[^/]+}/load', {
    POST: async (c) => {
      const body = await bodyObject(c, read, false);
      const params = new Map<string, LoadParamValue>();
      if (body.parameters !== undefined) {
        if (!isObj(body.parameters)) throw invalidArg(`'parameters' must be a JSON object`);
        for (const [k, v] of Object.entries(body.parameters)) {
          if (k.startsWith('file:')) {
            if (typeof v !== 'string') throw invalidArg(`File parameter '${k}' must be a base64-encoded string`);
            params.set(k, decodeBase64(v, k));
          } else if (typeof v === 'string' || typeof v === 'boolean' || typeof v === 'number') params.set(k, v);
          else throw invalidArg(`parameter '${k}' must be a string, number or boolean`);
        }
      }
      await ext.modelControl.load(c.req.param('model')!, params);
      return ok();
    },
  });
  route(app, '/v2/repository/models/:model{[^/]+}/unload', {
    POST: async (c) => {
      const body = await bodyObject(c, read, false);
      let dependents = false;
      if (body.parameters !== undefined) {
        if (!isObj(body.parameters)) throw invalidArg(`'parameters' must be a JSON object`);
        const v = body.parameters.unload_dependents;
        if (v !== undefined) {
          if (typeof v !== 'boolean') throw invalidArg(`Expect boolean value for parameter 'unload_dependents'`);
          dependents = v;
        }
      }
      await ext.modelControl.unload(c.req.param('model')!, dependents);
      return ok();
    },
  });
  route(app, '/v2/repository/:repo{[^/]+}/models/:model{[^/]+}/load', { POST: repoNameUnsupported });
  route(app, '/v2/repository/:repo{[^/]+}/models/:model{[^/]+}/unload', { POST: repoNameUnsupported });

  // ---- system shared memory
  const shm = ext.sharedMemory;
  route(app, '/v2/systemsharedmemory/status', { GET: () => json(shm.systemStatus()) });
  route(app, '/v2/systemsharedmemory/region/:region{[^/]+}/status', { GET: (c) => json(shm.systemStatus(c.req.param('region'))) });
  route(app, '/v2/systemsharedmemory/region/:region{[^/]+}/register', {
    POST: async (c) => {
      const body = await bodyObject(c, read, true);
      const name = c.req.param('region')!;
      if (typeof body.key !== 'string') throw invalidArg(`Unable to find 'key' (a string) in the register request for region '${name}'`);
      const offset = body.offset ?? 0;
      const size = body.byte_size;
      if (typeof offset !== 'number') throw invalidArg(`'offset' must be a non-negative integer for region '${name}'`);
      if (typeof size !== 'number') throw invalidArg(`Unable to find 'byte_size' (an integer) in the register request for region '${name}'`);
      await shm.registerSystem(name, body.key, offset, size);
      return ok();
    },
  });
  route(app, '/v2/systemsharedmemory/unregister', { POST: async () => (await shm.unregisterSystem(), ok()) });
  route(app, '/v2/systemsharedmemory/region/:region{[^/]+}/unregister', {
    POST: async (c) => (await shm.unregisterSystem(c.req.param('region')), ok()),
  });

  // ---- CUDA shared memory: this server has no CUDA regions
  route(app, '/v2/cudasharedmemory/status', { GET: () => json(shm.cudaStatus()) });
  route(app, '/v2/cudasharedmemory/region/:region{[^/]+}/status', { GET: (c) => json(shm.cudaStatus(c.req.param('region'))) });
  route(app, '/v2/cudasharedmemory/region/:region{[^/]+}/register', { POST: (c) => shm.registerCuda(c.req.param('region')!) });
  route(app, '/v2/cudasharedmemory/unregister', { POST: () => (shm.unregisterCuda(), ok()) });
  route(app, '/v2/cudasharedmemory/region/:region{[^/]+}/unregister', { POST: () => (shm.unregisterCuda(), ok()) });

  // ---- logging
  route(app, '/v2/logging', {
    GET: () => json(ext.logging.json()),
    POST: async (c) => json(ext.logging.update(await bodyObject(c, read, true))),
  });

  // ---- trace settings, global and per model (a version in the path is Triton's 404)
  const trace = (modelOf: (c: Context) => string | undefined): Partial<Record<'GET' | 'POST', Handler>> => ({
    GET: (c) => {
      const m = modelOf(c);
      if (m) checkTraceModel(server, m);
      return json(traceSettingsJson(ext.traces, m));
    },
    POST: async (c) => {
      const m = modelOf(c);
      if (m) checkTraceModel(server, m);
      const body = await bodyObject(c, read, false);
      for (const [k, v] of Object.entries(body)) {
        if (v !== null && typeof v !== 'string' && !(Array.isArray(v) && v.every((x) => typeof x === 'string'))) {
          throw invalidArg(`trace setting '${k}' must be a string (or, for 'trace_level', an array of strings)`);
        }
      }
      ext.traces.update(m, parseTraceUpdate(body as Record<string, string | string[] | null>));
      return json(traceSettingsJson(ext.traces, m));
    },
  });
  route(app, '/v2/trace/setting', trace(() => undefined));
  route(app, '/v2/models/:model{[^/]+}/trace/setting', trace((c) => c.req.param('model')));
}

/** Trace settings for a model require it to be ready (Triton's text, with its odd spacing). */
export function checkTraceModel(server: InferenceServer, model: string): void {
  if (!server.isModelReady(model)) throw new TsiError('INVALID_ARG', `Request for unknown model : ${model}`);
}
