/**
 * The `javascript` backend for Node: a model is `<version>/model.js` (or `model.mjs`, or the config's
 * `default_model_filename`) exporting a class with `initialize(args)`, `execute(requests)` and
 * `finalize()` (core/js-model.ts has the API). Each instance is a worker thread (js-worker.ts), so
 * instances, dynamic batching and sequence batching work exactly as for ONNX models: the scheduler
 * hands an instance a batch, the instance posts it to its worker, and the answers come back as
 * messages. The worker's BLS calls and file reads are served here, by the InferenceServer and the
 * model's files.
 */

import type { Worker } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';
import {
  TsiError, asTsiError, findModelFile, type Backend, type BackendInstance, type BackendModel, type BackendRequest, type ExecutionTimes,
  type InferRequest, type InferResponse, type InstanceSpec, type Logger, type ModelLoadContext,
  type ResponsePayload, type WireRequest, type WireResponse,
} from '../core/index.js';
import type { JsFromWorker, JsToWorker, JsWorkerInit } from './js-worker.js';
import { movableTensor, startWorkerInstance, stopWorker } from './worker-instance.js';

export function createJsBackend(opts: { log: Logger }): Backend {
  return {
    name: 'javascript',
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      const file = await findModelFile(ctx);
      const local = ctx.files.localPath?.(file);
      // Files without a place on disk (explicit-load overrides held in memory) load as a data: URL.
      const url = local
        ? pathToFileURL(local).href
        : `data:text/javascript;base64,${Buffer.from(await ctx.files.read(file)).toString('base64')}`;
      return {
        createInstance: (spec) => JsInstance.start(ctx, spec, url, file, opts.log),
        // Each instance is a worker thread of its own: a slow initialize() need not wait for another's.
        parallelInstances: true,
        unload: async () => {},
      };
    },
  };
}


interface Execution {
  requests: BackendRequest[];
  open: number;
  resolve?: (ns: number) => void;
  reject?: (e: Error) => void;
}

class JsInstance implements BackendInstance {
  readonly device = 'cpu';
  private nextId = 1;
  private readonly executions = new Map<number, Execution>();
  private dead?: Error;

  private constructor(
    readonly spec: InstanceSpec, private readonly worker: Worker, private readonly ctx: ModelLoadContext,
    private readonly log: Logger,
  ) {
    worker.on('message', (m: JsFromWorker) => this.onMessage(m));
    worker.on('error', (e) => this.fail(e));
    worker.on('exit', (code) => this.fail(new Error(`worker exited with code ${code}`)));
  }

  static async start(ctx: ModelLoadContext, spec: InstanceSpec, url: string, file: string, log: Logger): Promise<JsInstance> {
    let instance: JsInstance | undefined;
    const init: JsWorkerInit = {
      url,
      info: {
        name: ctx.config.name ?? '', version: ctx.version, instanceName: spec.name, config: ctx.config,
        instanceKind: spec.kind.replace('KIND_', ''), deviceId: spec.deviceId,
      },
    };
    // The instance exists before the worker is ready: initialize() may read files or log.
    await startWorkerInstance('js-worker', init, `failed to initialize ${file} of model '${ctx.config.name}'`, (w) => {
      instance = new JsInstance(spec, w, ctx, log);
    });
    return instance!;
  }

  private post(m: JsToWorker, transfer?: Set<ArrayBuffer>): void {
    this.worker.postMessage(m, transfer ? [...transfer] : undefined);
  }

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes> {
    if (this.dead) throw new TsiError('INTERNAL', `instance ${this.spec.name} of model '${this.ctx.config.name}' is gone: ${this.dead.message}`);
    const t0 = performance.now();
    const id = this.nextId++;
    const transfer = new Set<ArrayBuffer>();
    const wire: WireRequest[] = requests.map((r, i) => {
      const w: WireRequest = {
        id: r.id, inputs: [...r.inputs.values()].map((t) => movableTensor(t, transfer, true)),
        requestedOutputs: [...r.requestedOutputs], parameters: r.parameters, batchSize: r.batchSize,
      };
      const seq = (r as { sequence?: WireRequest['sequence'] }).sequence;
      if (seq) w.sequence = { id: seq.id, start: seq.start, end: seq.end };
      if (r.trace) w.trace = [id, i];
      return w;
    });
    const exec: Execution = { requests, open: requests.length };
    const t1 = performance.now();
    const ns = await new Promise<number>((resolve, reject) => {
      exec.resolve = resolve;
      exec.reject = reject;
      this.executions.set(id, exec);
      this.post({ kind: 'execute', id, requests: wire }, transfer);
    });
    const t2 = performance.now();
    const transit = Math.max(0, (t2 - t1) * 1e6 - ns);
    return { computeInputNs: (t1 - t0) * 1e6 + transit / 2, computeInferNs: ns, computeOutputNs: transit / 2 };
  }

  private deliver(exec: Execution, id: number, index: number, r: WireResponse, final: boolean): void {
    const req = exec.requests[index];
    if (!req) return;
    const payload: ResponsePayload | TsiError = 'error' in r ? new TsiError(r.error.code, r.error.message) : r;
    req.send(payload, final);
    if (final && --exec.open === 0 && !exec.resolve) this.executions.delete(id);
  }

  private onMessage(m: JsFromWorker): void {
    switch (m.kind) {
      case 'send': {
        const exec = this.executions.get(m.exec);
        if (exec) this.deliver(exec, m.exec, m.index, m.response, m.final);
        return;
      }
      case 'done': {
        const exec = this.executions.get(m.id);
        if (!exec) return;
        for (const [i, r] of m.responses ?? []) this.deliver(exec, m.id, i, r, true);
        const resolve = exec.resolve!;
        exec.resolve = undefined;
        exec.reject = undefined;
        // A decoupled model may still be sending; keep routing its responses until every request closed.
        if (exec.open === 0) this.executions.delete(m.id);
        resolve(m.ns);
        return;
      }
      case 'bls':
        if (m.parent) {
          // The model passed `request.trace()`: the call is traced as that request's child (Triton's BLS).
          const parent = this.executions.get(m.parent[0])?.requests[m.parent[1]]?.trace;
          if (parent) m.request.trace = parent.spawn(m.request.model_name);
        }
        void this.bls(m.id, m.request, m.stream);
        return;
      case 'read':
        this.ctx.files.read(m.path).then(
          (data) => this.post({ kind: 'file-reply', id: m.id, data }, new Set([data.buffer as ArrayBuffer])),
          (err) => this.post({ kind: 'file-reply', id: m.id, error: asTsiError(err).message }),
        );
        return;
      case 'log': {
        const text = `${this.ctx.config.name} (${this.spec.name}): ${m.msg}`;
        if (m.level === 'error') this.log.error(text);
        else if (m.level === 'warn') this.log.warn(text);
        else this.log.info(text);
        return;
      }
      default:
    }
  }

  /** A BLS call from the model: runs through the server, replies with every response. */
  private async bls(id: number, request: InferRequest, stream: boolean): Promise<void> {
    const reply = (r: InferResponse | TsiError, final: boolean) => {
      if (r instanceof TsiError) {
        this.post({ kind: 'bls-reply', id, error: { code: r.code, message: r.message }, final });
        return;
      }
      const transfer = new Set<ArrayBuffer>();
      const response = { ...r, outputs: r.outputs.map((t) => movableTensor(t, transfer, true)) };
      this.post({ kind: 'bls-reply', id, response, final }, transfer);
    };
    try {
      if (stream) await this.ctx.server.inferStream(request, reply);
      else {
        const r = await this.ctx.server.infer(request, {
          decoupledMessage: `model '${request.model_name}' uses the decoupled transaction policy: call server.inferStream() for it`,
        });
        reply(r, true);
      }
    } catch (err) {
      reply(asTsiError(err), true);
    }
  }

  private fail(e: Error): void {
    if (this.dead) return;
    this.dead = e;
    for (const [id, exec] of this.executions) {
      const err = new TsiError('INTERNAL', `instance ${this.spec.name} of model '${this.ctx.config.name}' failed: ${e.message}`);
      for (const r of exec.requests) if (!(r as { completed?: boolean }).completed) r.send(err, true);
      exec.reject?.(err);
      this.executions.delete(id);
    }
  }

  async unload(): Promise<void> {
    if (this.dead) return;
    await stopWorker(this.worker);
    this.log.verbose(2, `instance ${this.spec.name} of '${this.ctx.config.name}' released`);
  }
}
