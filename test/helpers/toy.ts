/**
 * Core-level pipeline fixtures: an in-memory repository source and a "toy" backend whose models do
 * small FP32 arithmetic chosen by a config parameter (`op`), record when each execution starts and
 * ends and which tensors it got, and can be slowed (`delay_ms`) or made decoupled (`op: "stream"`).
 * With them the ensemble scheduler is tested through core's HTTP handler without threads or sockets.
 */

import {
  BackendRegistry, InferenceServer, createHttpApp, type Backend, type BackendRequest, type ModelFiles, type RepositorySource,
  type Tensor,
} from '../../core/index.js';

export interface ToyEvent {
  model: string;
  what: 'start' | 'end';
  batch: number;
  at: number;
}

export class ToyLab {
  readonly events: ToyEvent[] = [];
  /** Every request each model executed, in order. */
  readonly seen = new Map<string, BackendRequest[]>();
  /** Output tensors each model produced (to check they are passed on by reference). */
  readonly produced = new Map<string, Tensor[]>();
  private running = new Map<string, number>();
  readonly maxRunning = new Map<string, number>();

  backend(): Backend {
    return {
      name: 'toy',
      loadModel: async (ctx) => {
        const p = (k: string) => ctx.config.parameters?.[k]?.string_value;
        const op = p('op') ?? 'copy';
        const delay = Number(p('delay_ms') ?? 0);
        if (op === 'broken') throw new Error('toy model refuses to load');
        const name = ctx.config.name!;
        const outputs = (ctx.config.output ?? []).map((o) => o.name!);
        return {
          createInstance: async (spec) => ({
            spec,
            device: 'cpu',
            unload: async () => {},
            execute: async (requests) => {
              this.events.push({ model: name, what: 'start', batch: requests.length, at: performance.now() });
              this.running.set(name, (this.running.get(name) ?? 0) + 1);
              this.maxRunning.set(name, Math.max(this.maxRunning.get(name) ?? 0, this.running.get(name)!));
              let seen = this.seen.get(name);
              if (!seen) this.seen.set(name, (seen = []));
              seen.push(...requests);
              if (delay > 0) await new Promise((r) => setTimeout(r, delay));
              this.running.set(name, this.running.get(name)! - 1);
              this.events.push({ model: name, what: 'end', batch: requests.length, at: performance.now() });
              if (op === 'fail') throw new Error(`toy model '${name}' failed on purpose`);
              for (const r of requests) this.answer(name, op, outputs, r);
            },
          }),
          unload: async () => {},
        };
      },
    };
  }

  private answer(name: string, op: string, outputs: string[], r: BackendRequest): void {
    const ins = [...r.inputs.values()];
    const f32 = (t: Tensor) => t.data as Float32Array;
    const out = (i: number, data: Float32Array, shape = ins[0]!.shape): Tensor => ({ name: outputs[i]!, datatype: 'FP32', shape, data });
    const keep = (ts: Tensor[]) => {
      let list = this.produced.get(name);
      if (!list) this.produced.set(name, (list = []));
      list.push(...ts);
      return ts;
    };
    if (op === 'stream') {
      const n = Number(r.parameters.count ?? 3);
      for (let k = 0; k < n; k++) r.send({ outputs: keep([out(0, f32(ins[0]!).map((v) => v + k))]) }, false);
      r.send({ outputs: [] }, true);
      return;
    }
    let result: Tensor[];
    if (op === 'add') result = [out(0, f32(ins[0]!).map((v, i) => v + f32(ins[1]!)[i]!))];
    else if (op === 'double') result = outputs.map((_, i) => out(i, f32(ins[0]!).map((v) => 2 * v)));
    else result = outputs.map((_, i) => ({ ...ins[Math.min(i, ins.length - 1)]!, name: outputs[i]! }));
    r.send({ outputs: keep(result) }, true);
  }
}

type Dims = number[];
export type Io = [name: string, type: string, dims: Dims];

/** A toy model config (JSON form). */
export function toy(name: string, op: string, inputs: Io[], outputs: Io[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  const io = ([n, t, d]: Io) => ({ name: n, data_type: t, dims: d });
  const { parameters, ...rest } = extra as { parameters?: Record<string, string> };
  const params: Record<string, { string_value: string }> = { op: { string_value: op } };
  for (const [k, v] of Object.entries(parameters ?? {})) params[k] = { string_value: v };
  return { name, backend: 'toy', max_batch_size: 0, input: inputs.map(io), output: outputs.map(io), parameters: params, ...rest };
}

export interface Step {
  model: string;
  version?: number;
  inputs: Record<string, string>;
  outputs: Record<string, string>;
}

/** An ensemble config (JSON form); `extra.max_inflight` sets ensemble_scheduling.max_inflight_requests. */
export function ensemble(name: string, inputs: Io[], outputs: Io[], steps: Step[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  const io = ([n, t, d]: Io) => ({ name: n, data_type: t, dims: d });
  const { max_inflight, ...rest } = extra as { max_inflight?: number };
  return {
    name, platform: 'ensemble', max_batch_size: 0, input: inputs.map(io), output: outputs.map(io),
    ensemble_scheduling: {
      step: steps.map((s) => ({ model_name: s.model, model_version: s.version ?? -1, input_map: s.inputs, output_map: s.outputs })),
      ...(max_inflight ? { max_inflight_requests: max_inflight } : {}),
    },
    ...rest,
  };
}

/** A repository held in memory: model name → config (JSON), each with a version folder `1`. */
export function memorySource(configs: Record<string, Record<string, unknown>>, versions: Record<string, number[]> = {}): RepositorySource {
  const files = (model: string): ModelFiles => {
    const text = new TextEncoder().encode(JSON.stringify(configs[model]));
    const vs = versions[model] ?? [1];
    return {
      read: async (p) => {
        if (p === 'config.json') return text;
        throw new Error(`no file ${model}/${p}`);
      },
      exists: async (p) => p === 'config.json' || vs.some((v) => p === String(v)),
      list: async (d) => (d === '' ? [{ name: 'config.json', isDir: false }, ...vs.map((v) => ({ name: String(v), isDir: true }))] : []),
    };
  };
  return { location: 'memory', listModels: async () => Object.keys(configs), files };
}

export async function toyServer(configs: Record<string, Record<string, unknown>>, opts: { explicit?: string[]; versions?: Record<string, number[]> } = {}) {
  const lab = new ToyLab();
  const backends = new BackendRegistry();
  backends.register('toy', () => lab.backend());
  const server = new InferenceServer({
    sources: [memorySource(configs, opts.versions)], backends,
    modelControlMode: opts.explicit ? 'explicit' : 'none', startupModels: opts.explicit,
  });
  await server.start();
  const app = createHttpApp(server);
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await app.fetch(new Request(`http://tsi${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body) }));
    const text = await r.text();
    let json: any;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = text;
    }
    return { status: r.status, body: json, text };
  };
  const index = async () => (await call('POST', '/v2/repository/index')).body as { name: string; version?: string; state?: string; reason?: string }[];
  const reason = async (model: string) => (await index()).find((e) => e.name === model)?.reason ?? '';
  const infer = (model: string, inputs: Record<string, number[]>, extra: Record<string, unknown> = {}) => call('POST', `/v2/models/${model}/infer`, {
    inputs: Object.entries(inputs).map(([name, data]) => ({ name, datatype: 'FP32', shape: [data.length], data })), ...extra,
  });
  return { lab, server, app, call, index, reason, infer };
}
