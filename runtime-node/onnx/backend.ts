/**
 * The `onnxruntime` backend for Node. Each model instance is an onnxruntime-node session hosted by a
 * thread of the backend's worker pool (pool.ts, worker.ts), so inference never blocks the
 * server's event loop, `instance_group.count` instances of a model really run in parallel, and a
 * hundred models do not cost a hundred threads. On the main thread an instance gathers its
 * batch (one tensor per input, concatenated along the batch dimension), hands it to its worker through
 * shared memory (channel.ts; postMessage with transferred buffers for what does not fit, and
 * with only the address of an input that is a view of a mapped system shared-memory region), and
 * splits the outputs back so each request gets exactly its rows. Config parameters map to
 * ORT session options as Triton's onnxruntime_backend maps them.
 */

import { availableParallelism } from 'node:os';
import {
  TsiError, batchInputTensors, canTransfer, canTransferWhole, concatBatch, configTypeToDatatype, decodeString, encodeString, mapVariableDims, scatterByShapes, splitBatch,
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type DataType, type ExecutionTimes,
  type InstancePlacement, type InstanceSpec, type Logger, type ModelConfig, type ModelInput, type ModelOutput, type ModelFiles, type ModelIoInfo, type ModelLoadContext, type Tensor,
} from '../../core/index.js';
import { adapterLabel, candidateProviders, probeWebGpu, queryNvidiaGpus, vulkanHint } from '../gpu/index.js';
import { WEBGPU_LOCK } from '../gpu/lock.js';
import { readOnnxIo } from './info.js';
import { intraOpThreads, NO_SPINNING, sessionOptions, WIDEN_MS } from './session-options.js';
import { OrtPool, type PooledSession } from './pool.js';
import type { InitMessage, MappedWireTensor, SessionReply as WorkerReply, SessionRequest as WorkerRequest, WireTensor } from './worker.js';
import { mappedAddress } from '../shm-map.js';
import { ChannelMain, channelBuffer, type ChannelOutput, type ChannelTensor, type ChannelTimes } from './channel.js';

const ORT_TYPE: Partial<Record<DataType, string>> = {
  BOOL: 'bool', UINT8: 'uint8', UINT16: 'uint16', UINT32: 'uint32', UINT64: 'uint64', INT8: 'int8', INT16: 'int16',
  INT32: 'int32', INT64: 'int64', FP16: 'float16', FP32: 'float32', FP64: 'float64', BYTES: 'string',
};
const FROM_ORT: Record<string, DataType> = Object.fromEntries(Object.entries(ORT_TYPE).map(([k, v]) => [v, k as DataType]));

export interface OnnxBackendOptions {
  log: Logger;
  /** Total CPU cores to share among instances when a config sets no intra_op_thread_count. */
  cores?: number;
  /**
   * Pool threads started before instances share one (`--backend-config=onnxruntime,worker-count=N`);
   * default: the cores.
   */
  workers?: number;
}

/**
 * The cap on intra-op threads widened sessions hold beyond their calling threads, per core: 16 a
 * core lets 18 models on 16 cores (13 extra threads each) and 32 on 2 cores (1 each) have a
 * pool at once, while the process's threads stay bounded by the cores, not by the models.
 */
export const EXTRA_THREADS_PER_CORE = 16;

function modelFilename(config: ModelConfig): string {
  return config.default_model_filename || 'model.onnx';
}

export function createOnnxBackend(opts: OnnxBackendOptions): Backend {
  const cores = opts.cores ?? availableParallelism();
  const pool = new OrtPool({ size: Math.max(1, opts.workers ?? cores), extraThreads: EXTRA_THREADS_PER_CORE * cores });
  return {
    name: 'onnxruntime',
    async describeModel(config: ModelConfig, version: number, files: ModelFiles): Promise<ModelIoInfo> {
      const rel = `${version}/${modelFilename(config)}`;
      const path = (await isDir(files, rel)) ? `${rel}/model.onnx` : rel;
      if (!(await files.exists(path))) {
        throw new TsiError('INVALID_ARG', `unable to find '${path}' for model '${config.name}'`);
      }
      return readOnnxIo(await files.read(path));
    },
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      return new OnnxModel(ctx, cores, pool);
    },
  };
}

async function isDir(files: ModelFiles, rel: string): Promise<boolean> {
  const slash = rel.lastIndexOf('/');
  const entries = await files.list(rel.slice(0, slash)).catch(() => []);
  return entries.some((e) => e.name === rel.slice(slash + 1) && e.isDir);
}

class OnnxModel implements BackendModel {
  private readonly instanceCount: number;
  constructor(private readonly ctx: ModelLoadContext, private readonly cores: number, private readonly pool: OrtPool) {
    this.instanceCount = (ctx.config.instance_group ?? []).reduce((n, g) => n + (g.count ?? 1) * Math.max(1, g.gpus?.length ?? 1), 0);
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    const { config, files, version, log } = this.ctx;
    const rel = `${version}/${modelFilename(config)}`;
    const path = (await isDir(files, rel)) ? `${rel}/model.onnx` : rel;
    const local = files.localPath?.(path);
    const { providers, notes } = candidateProviders(config, spec);
    const modelBytes = local ? undefined : await files.read(path);
    const options = { ...sessionOptions(config, this.instanceCount, this.cores), extra: NO_SPINNING };
    // Unless the config names a count, a session starts on its calling thread and widens to its
    // share of the cores once its runs prove heavy (worker.ts): tiny models cost no threads.
    const { threads: wide, pinned } = intraOpThreads(config, this.instanceCount, this.cores);
    if (!pinned) options.intraOpNumThreads = 1;
    const init: InitMessage = {
      modelPath: local,
      modelBytes,
      providers,
      sessionOptions: options,
      gpuLock: WEBGPU_LOCK,
      channel: channelBuffer(),
      widenTo: pinned ? undefined : wide,
      threadBudget: this.pool.threadBudget,
    };
    const { session, ready } = await this.pool.open(`${config.name}:${version}`, init, options.intraOpNumThreads!).catch((err: Error) => {
      throw new TsiError('INTERNAL', `failed to create an onnxruntime session for '${config.name}': ${err.message}`);
    });
    const placement = await placementOf(spec, ready.provider, [...notes, ...ready.failures.map(failureNote)]);
    const device = placement.provider === 'cpu' ? 'cpu' : `${placement.provider}${placement.provider === 'webgpu' ? '' : `:${Math.max(0, spec.deviceId)}`}${placement.adapter ? ` (${placement.adapter})` : ''}`;
    const where = `${config.name} (${spec.name})`;
    const skipped = placement.notes!.length > 0 ? `; ${placement.notes!.join('; ')}` : '';
    if (spec.kind === 'KIND_GPU' && placement.kind !== 'KIND_GPU') {
      // Unlike Triton, a KIND_GPU model still loads without a GPU, so one repository serves anywhere.
      log.warn(`${where}: KIND_GPU instance runs on the CPU: no GPU execution provider could be used${skipped}`);
    } else if (spec.kind === 'KIND_GPU') {
      log.info(`${where}: runs on execution provider '${placement.provider}'${placement.adapter ? ` on ${placement.adapter}` : ''}${skipped}`);
    } else {
      if (notes.length > 0) log.warn(`${where}: ${notes.join('; ')}`);
      log.verbose(1, `${where} runs on execution provider '${placement.provider}'`);
    }
    const threads = pinned ? `${wide} intra-op thread(s), as its intra_op_thread_count says`
      : ready.provider !== 'cpu' ? '1 intra-op thread (it computes on the GPU)'
        : wide > 1 ? `1 intra-op thread until its runs take ${WIDEN_MS} ms or more, then ${wide}` : '1 intra-op thread (its share of the cores)';
    log.verbose(1, `${where}: session ${session.sid} on onnxruntime pool thread ${session.threadIndex}, ${threads}`);
    return new OnnxInstance(spec, device, placement, session, init.channel, ready, config, log);
  }

  async unload(): Promise<void> {}
}

function ortType(t: Tensor): string {
  const type = ORT_TYPE[t.datatype];
  if (!type) throw new TsiError('UNSUPPORTED', `datatype ${t.datatype} of input '${t.name}' is not supported by onnxruntime-node`);
  return type;
}

/** How many of a batch's tensors view each buffer (a request body's binary inputs share one). */
function viewsPerBuffer(batch: readonly { t: Tensor }[]): Map<ArrayBufferLike, number> {
  const views = new Map<ArrayBufferLike, number>();
  for (const { t } of batch) {
    if (Array.isArray(t.data)) continue;
    const b = (t.data as ArrayBufferView).buffer;
    views.set(b, (views.get(b) ?? 0) + 1);
  }
  return views;
}

function toWire(t: Tensor, dims: number[], map: boolean, views: Map<ArrayBufferLike, number>): WireTensor | MappedWireTensor {
  const type = ortType(t);
  if (t.datatype === 'BYTES') {
    return { type: 'string', dims, data: (t.data as Uint8Array[]).map(decodeString) };
  }
  const d = t.data as Uint8Array;
  // A view of a mapped shared-memory region: the worker views the same pages at their address, no
  // copy (the pending request holds this view until the reply, so the pages stay mapped).
  const address = map && d.byteLength > 0 ? mappedAddress(d.buffer) : undefined;
  if (address !== undefined) {
    return { type: type as WireTensor['type'], dims, datatype: t.datatype, address: address + BigInt(d.byteOffset), byteLength: d.byteLength };
  }
  // Transfer needs a buffer of our own: copy views into shared buffers (HTTP bodies, one-request batches).
  // Buffers others still read (an ensemble tensor with several consumers, a cached response) are copied.
  // A request body's buffer whose every tensor view is in this batch moves whole, views and all.
  const own = d.buffer instanceof ArrayBuffer && (d.byteOffset === 0 && d.byteLength === d.buffer.byteLength
    ? canTransfer(d.buffer)
    : canTransferWhole(d.buffer, views.get(d.buffer) ?? 0));
  const data = own ? d : (d.slice() as typeof d);
  return { type: type as WireTensor['type'], dims, data: data as unknown as WireTensor['data'] };
}

/** A reply read from a channel slot, in the shape of a posted one. */
function channelResult(id: number, times: ChannelTimes, outs: ChannelOutput[], names: readonly string[]): WorkerReply {
  const outputs: Record<string, WireTensor> = {};
  for (const o of outs) outputs[names[o.index]!] = { type: o.type as WireTensor['type'], dims: o.dims, data: o.data as WireTensor['data'] };
  return { kind: 'result', id, outputs, ...times };
}

/** A provider's failure to create the session, with what to do about it where we know. */
function failureNote(f: string): string {
  // ORT's texts lead with a source location and the failed check; the sentence after it is the news.
  const m = /^(\w+): .*? was false\. (.*)$/s.exec(f);
  const text = m ? `${m[1]}: ${m[2]}` : f;
  if (text.startsWith('webgpu:') && /adapter/i.test(text)) return `${text} (${vulkanHint()})`;
  return text;
}

/** Where an instance ended up: its provider, and the GPU or adapter behind it in words. */
export async function placementOf(spec: InstanceSpec, provider: string, notes: string[]): Promise<InstancePlacement> {
  if (provider === 'cpu') return { kind: spec.kind === 'KIND_MODEL' ? 'KIND_MODEL' : 'KIND_CPU', provider, notes };
  let adapter: string | undefined;
  if (provider === 'webgpu') {
    const probe = await probeWebGpu();
    const a = probe.adapters[0];
    // Dawn names an NVIDIA adapter by its driver version only; nvidia-smi knows the GPU's name.
    const nvidia = a?.vendor === 'nvidia' ? (await queryNvidiaGpus()).gpus[0] : undefined;
    adapter = a ? (nvidia ? `${nvidia.name}, ${adapterLabel(a)}` : adapterLabel(a)) : undefined;
    if (!adapter && probe.reason) notes.push(`adapter not named: ${probe.reason}`);
  } else {
    const gpu = (await queryNvidiaGpus()).gpus.find((g) => g.index === Math.max(0, spec.deviceId));
    adapter = gpu ? `${gpu.name} (${gpu.uuid})` : undefined;
  }
  return { kind: 'KIND_GPU', provider, adapter, notes };
}

class OnnxInstance implements BackendInstance {
  /** The worker runs batches one at a time in arrival order, so the next may be queued early. */
  readonly pipelined = true;
  private nextId = 1;
  /** Order of everything sent to the worker, by channel or postMessage: the worker runs them by it. */
  private nextSeq = 1;
  /** Each batch sent and not yet answered; its tensors stay reachable here, the worker may be viewing their pages. */
  private pending = new Map<number, { resolve: (r: WorkerReply) => void; reject: (e: Error) => void; batch: unknown }>();
  /** Whether mapped shared-memory inputs cross by address; off for good once the worker cannot view them. */
  private mapInputs = true;
  private mappedSent = false;
  private readonly channel: ChannelMain;
  /** The session's input and output names by index, as the channel names them. */
  private readonly inputIndex: Map<string, number>;
  private readonly outputNames: readonly string[];
  private dead?: Error;
  /** Config tensors by name, looked up on every batch. */
  private readonly inputs: Map<string, ModelInput>;
  private readonly outputs: Map<string, ModelOutput>;
  /** Batch outputs scattered by an input's shapes (BATCH_SCATTER_WITH_INPUT_SHAPE): target → source input. */
  private readonly scatter = new Map<string, string>();
  /** The process's resident growth while the session was created (other loads at that moment blur it). */
  readonly memoryBytes: number;

  constructor(
    readonly spec: InstanceSpec, readonly device: string, readonly placement: InstancePlacement, private readonly session: PooledSession,
    channel: SharedArrayBuffer, ready: { inputNames: readonly string[]; outputNames: readonly string[]; rss: [number, number] },
    private readonly config: ModelConfig, private readonly log: Logger,
  ) {
    this.inputs = new Map((config.input ?? []).map((i) => [i.name!, i]));
    this.outputs = new Map((config.output ?? []).map((o) => [o.name!, o]));
    for (const bo of config.batch_output ?? []) {
      if ((bo.kind ?? 'BATCH_SCATTER_WITH_INPUT_SHAPE') === 'BATCH_SCATTER_WITH_INPUT_SHAPE' && bo.source_input?.[0]) {
        for (const target of bo.target_name ?? []) this.scatter.set(target, bo.source_input[0]);
      }
    }
    this.inputIndex = new Map(ready.inputNames.map((n, i) => [n, i]));
    this.memoryBytes = Math.max(0, ready.rss[1] - ready.rss[0]);
    this.outputNames = ready.outputNames;
    this.channel = new ChannelMain(channel, (id, times, outs) => this.settle(id, channelResult(id, times, outs, this.outputNames)));
    session.onReply = (m) => {
      if (m.kind === 'widened') return this.widened(m);
      if (m.kind !== 'result' && m.kind !== 'error') return;
      if (m.slot !== undefined) this.channel.release(m.slot);
      this.settle(m.id, m);
    };
    session.onFail = (e) => this.fail(e);
  }

  private widened(m: Extract<WorkerReply, { kind: 'widened' }>): void {
    const where = `${this.config.name} (${this.spec.name})`;
    if (m.refused) this.log.warn(`${where}: runs take ${m.runMs.toFixed(1)} ms on one thread but it keeps that one: ${m.refused}`);
    else this.log.info(`${where}: runs took ${m.runMs.toFixed(1)} ms on one thread: now ${m.threads} intra-op threads (reopened in ${m.openMs.toFixed(0)} ms)`);
  }

  private settle(id: number, reply: WorkerReply): void {
    const p = this.pending.get(id);
    this.pending.delete(id);
    p?.resolve(reply);
  }

  private fail(e: Error): void {
    this.dead ??= e;
    this.channel.close();
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes> {
    const t0 = performance.now();
    const batching = (this.config.max_batch_size ?? 0) > 0;
    const rows = requests.map((r) => r.batchSize);
    const batch: { t: Tensor; dims: number[] }[] = [];
    const first = requests[0]!;
    for (const [name] of first.inputs) {
      const parts = requests.map((r) => r.inputs.get(name)!);
      const t = concatBatch(parts);
      ortType(t);
      const cfg = this.inputs.get(name);
      let dims = t.shape;
      if (cfg?.reshape) {
        const item = mapVariableDims(batching ? t.shape.slice(1) : t.shape, cfg.dims ?? [], cfg.reshape.shape ?? []);
        dims = batching ? [t.shape[0]!, ...item] : item;
      }
      // A ragged input reaches the model as its requests' elements end to end, as Triton's ORT backend gives it.
      if (cfg?.allow_ragged_batch && batching) dims = [(t.data as ArrayLike<unknown>).length];
      batch.push({ t, dims });
    }
    // Batch inputs (BATCH_ELEMENT_COUNT and the like) are built from the gathered requests' shapes.
    if (this.config.batch_input?.length) {
      for (const t of batchInputTensors(this.config.batch_input, requests.map((r) => r.inputs))) batch.push({ t, dims: t.shape });
    }
    const fetches = new Set<string>();
    for (const r of requests) {
      for (const o of r.requestedOutputs) fetches.add(o);
      for (const o of r.stateOutputs ?? []) fetches.add(o);
    }
    const t1 = performance.now();
    if (this.dead) throw new TsiError('INTERNAL', `instance ${this.spec.name} of model '${this.config.name}' is gone: ${this.dead.message}`);
    const id = this.nextId++;
    // Queued behind a running batch (this instance's, or another session's on a shared thread): the
    // worker, blocked in that run, cannot see when this one arrived.
    const postedAt = this.pending.size > 0 || this.session.shared ? performance.timeOrigin + performance.now() : 0;
    const run = () => new Promise<WorkerReply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, batch });
      this.send(id, postedAt, batch, [...fetches]);
    });
    let reply = await run();
    if (reply.kind === 'error' && reply.unmapped) {
      this.log.warn(`instance ${this.spec.name} of '${this.config.name}': shared-memory inputs are copied to its worker: ${reply.message}`);
      this.mapInputs = false;
      reply = await run();
    }
    const t2 = performance.now();
    if (reply.kind === 'error') {
      throw new TsiError('INTERNAL', `onnxruntime failed to run model '${this.config.name}': ${reply.message}`);
    }
    if (reply.kind !== 'result') throw new TsiError('INTERNAL', 'unexpected reply from the onnxruntime worker');
    const outputs = new Map<string, Tensor[]>();
    for (const [name, w] of Object.entries(reply.outputs)) {
      const cfg = this.outputs.get(name);
      const datatype = FROM_ORT[w.type] ?? (cfg?.data_type ? configTypeToDatatype(cfg.data_type) : undefined);
      if (!datatype) throw new TsiError('INTERNAL', `model '${this.config.name}' output '${name}' has unsupported type '${w.type}'`);
      let shape = w.dims;
      if (cfg?.reshape) {
        const item = mapVariableDims(batching ? w.dims.slice(1) : w.dims, cfg.reshape.shape ?? [], cfg.dims ?? []);
        shape = batching ? [w.dims[0]!, ...item] : item;
      }
      const data = datatype === 'BYTES' ? (w.data as string[]).map(encodeString) : (w.data as Tensor['data']);
      const t: Tensor = { name, datatype, shape, data };
      const source = batching ? this.scatter.get(name) : undefined;
      if (source !== undefined) {
        outputs.set(name, scatterByShapes(t, requests.map((r) => r.inputs.get(source)!.shape)));
      } else if (batching && requests.length > 1) {
        if (shape[0] !== rows.reduce((a, b) => a + b, 0)) {
          throw new TsiError('INTERNAL', `model '${this.config.name}' output '${name}' has ${shape[0]} rows for a batch of ${rows.reduce((a, b) => a + b, 0)}`);
        }
        outputs.set(name, splitBatch(t, rows));
      } else outputs.set(name, requests.map(() => t));
    }
    requests.forEach((r, i) => {
      const outs: Tensor[] = [];
      for (const [, parts] of outputs) outs.push(parts[i]!);
      r.send({ outputs: outs }, true);
    });
    const t3 = performance.now();
    const transit = Math.max(0, (t2 - t1) * 1e6 - reply.waitNs - reply.inputNs - reply.inferNs - reply.outputNs);
    return {
      waitNs: reply.waitNs,
      computeInputNs: (t1 - t0) * 1e6 + reply.inputNs + transit / 2,
      computeInferNs: reply.inferNs,
      computeOutputNs: reply.outputNs + transit / 2 + (t3 - t2) * 1e6,
    };
  }

  /** Hands one batch to the worker: through a channel slot where it fits, else by postMessage. */
  private send(id: number, postedAt: number, batch: { t: Tensor; dims: number[] }[], fetches: string[]): void {
    const seq = this.nextSeq++;
    const feeds: [number, ChannelTensor][] = [];
    const fetchIndex: number[] = [];
    for (const { t, dims } of batch) {
      const index = this.inputIndex.get(t.name);
      if (index === undefined || t.datatype === 'BYTES') break;
      feeds.push([index, { type: ORT_TYPE[t.datatype]!, dims, data: t.data as ArrayBufferView }]);
    }
    for (const f of fetches) {
      const index = this.outputNames.indexOf(f);
      if (index >= 0) fetchIndex.push(index);
    }
    // Names the session does not have go by postMessage, so onnxruntime reports them as before.
    if (feeds.length === batch.length && fetchIndex.length === fetches.length && this.channel.submit(seq, id, postedAt, feeds, fetchIndex)) return;
    const wire: Record<string, WireTensor | MappedWireTensor> = {};
    const transfer = new Set<ArrayBuffer>();
    const views = viewsPerBuffer(batch);
    for (const { t, dims } of batch) {
      const w = toWire(t, dims, this.mapInputs, views);
      wire[t.name] = w;
      if ('address' in w && !this.mappedSent) {
        this.mappedSent = true;
        this.log.verbose(1, `instance ${this.spec.name} of '${this.config.name}': shared-memory inputs cross to its worker by address, not copied`);
      }
      // Two inputs may be views of one buffer; a transfer list names each buffer once.
      if ('data' in w && !Array.isArray(w.data)) transfer.add((w.data as Uint8Array).buffer as ArrayBuffer);
    }
    try {
      this.session.post({ kind: 'run', seq, id, feeds: wire, fetches, postedAt } satisfies WorkerRequest, [...transfer]);
    } catch (err) {
      // The worker runs requests strictly by sequence number: a number never sent would stall it.
      this.session.post({ kind: 'skip', seq } satisfies WorkerRequest);
      this.pending.delete(id);
      throw err;
    }
  }

  async unload(): Promise<void> {
    await this.session.close(this.nextSeq++);
    this.channel.close();
    this.log.verbose(2, `instance ${this.spec.name} of '${this.config.name}' released`);
  }
}
