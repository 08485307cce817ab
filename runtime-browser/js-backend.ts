/**
 * The `javascript` backend for the browser: the same `model.js` files the Node server runs (a class
 * with `initialize`, `execute`, `finalize`; core/js-model.ts), loaded with `import()` and run in the
 * page through core's JsModelHost. A model read by URL is imported from that URL, so its own relative
 * imports work; one held in memory is imported from a Blob URL (relative imports then cannot resolve).
 * Instances run on the page's thread, one batch at a time each, as core's schedulers hand them out;
 * BLS calls go straight into the in-page server.
 *
 * A Service Worker cannot `import()`, so there JavaScript models fail to load with that reason while
 * everything else serves (`isServiceWorker` below).
 */

import {
  JsModelHost, TsiError, findModelFile, asTsiError,
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type ExecutionTimes, type InstanceSpec,
  type Logger, type ModelLoadContext, type ResponsePayload, type WireRequest,
} from '../core/index.js';

/** ModelFiles of a URL repository also tell where a file lives (fetch-source.ts). */
type UrlFiles = { url?(relPath: string): string };

function inServiceWorker(): boolean {
  const g = globalThis as { ServiceWorkerGlobalScope?: new () => unknown };
  return typeof g.ServiceWorkerGlobalScope === 'function' && globalThis instanceof g.ServiceWorkerGlobalScope;
}

export function createJsBackend(opts: { log: Logger }): Backend {
  return {
    name: 'javascript',
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      if (inServiceWorker()) {
        throw new TsiError('UNSUPPORTED', `JavaScript model '${ctx.config.name}' cannot load in a Service Worker (import() is not allowed there); serve it from a page`);
      }
      const file = await findModelFile(ctx);
      const direct = (ctx.files as UrlFiles).url?.(file);
      let blobUrl: string | undefined;
      const url = direct ?? (blobUrl = URL.createObjectURL(new Blob([await ctx.files.read(file) as BlobPart], { type: 'text/javascript' })));
      let ns: Record<string, unknown>;
      try {
        ns = (await import(/* @vite-ignore */ url)) as Record<string, unknown>;
      } catch (err) {
        throw new TsiError('INVALID_ARG', `failed to import ${file} of model '${ctx.config.name}': ${(err as Error).message}`);
      } finally {
        if (blobUrl) URL.revokeObjectURL(blobUrl);
      }
      return {
        createInstance: (spec) => JsInstance.start(ctx, spec, ns, file, opts.log),
        unload: async () => {},
      };
    },
  };
}


class JsInstance implements BackendInstance {
  readonly device = 'js';

  private constructor(readonly spec: InstanceSpec, private readonly host: JsModelHost) {}

  static async start(ctx: ModelLoadContext, spec: InstanceSpec, ns: Record<string, unknown>, file: string, log: Logger): Promise<JsInstance> {
    const name = ctx.config.name ?? '';
    const host = new JsModelHost(
      { name, version: ctx.version, instanceName: spec.name, instanceKind: spec.kind.replace('KIND_', ''), deviceId: spec.deviceId, config: ctx.config },
      {
        infer: (request) => ctx.server.infer(request, {
          decoupledMessage: `model '${request.model_name}' uses the decoupled transaction policy: call server.inferStream() for it`,
        }),
        inferStream: (request, on) => ctx.server.inferStream(request, on),
        readFile: (path) => ctx.files.read(path),
        log: (level, msg) => {
          const text = `${name} (${spec.name}): ${msg}`;
          if (level === 'error') log.error(text);
          else if (level === 'warn') log.warn(text);
          else log.info(text);
        },
      },
    );
    try {
      await host.initialize(ns, file);
    } catch (err) {
      throw new TsiError('INVALID_ARG', `failed to initialize ${file} of model '${name}': ${asTsiError(err).message}`);
    }
    return new JsInstance(spec, host);
  }

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes> {
    const t0 = performance.now();
    const wire: WireRequest[] = requests.map((r) => {
      const w: WireRequest = {
        id: r.id, inputs: [...r.inputs.values()], requestedOutputs: [...r.requestedOutputs], parameters: r.parameters, batchSize: r.batchSize,
      };
      const seq = (r as { sequence?: WireRequest['sequence'] }).sequence;
      if (seq) w.sequence = { id: seq.id, start: seq.start, end: seq.end };
      return w;
    });
    const t1 = performance.now();
    const ns = await this.host.execute(wire, (index, r, final) => {
      const payload: ResponsePayload | TsiError = 'error' in r ? new TsiError(r.error.code, r.error.message) : r;
      requests[index]?.send(payload, final);
    });
    const t2 = performance.now();
    return { computeInputNs: (t1 - t0) * 1e6, computeInferNs: ns, computeOutputNs: Math.max(0, (t2 - t1) * 1e6 - ns) };
  }

  async unload(): Promise<void> {
    await this.host.finalize();
  }
}
