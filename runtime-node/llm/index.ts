/**
 * The `llm` backend in Node: core's LLM serving (core/llm: scheduler, in-flight batching, sampling,
 * tokenizer) over decoder sessions that run onnxruntime-node in a worker thread per model instance
 * (decoder-worker.ts). Only the session lives here; see core/llm/backend.ts for the model folder
 * layout and config parameters, and docs/llm.md for serving an exported model.
 *
 * An instance prefills in a worker of its own (config parameter `separate_prefill`, on by default),
 * beside the worker that decodes: a new request's prompt runs at once instead of after the decode
 * step in flight, so time to first token stays near its one-stream value under load, and long
 * prompts never stall the running streams. The price is the model's weights loaded twice; with
 * `separate_prefill: false` one worker does both.
 *
 * A KIND_GPU instance runs its decoder on the GPU providers the onnxruntime backend would try
 * (candidateProviders: WebGPU with the bundled binary, CUDA where installed), else on the CPU with a
 * warning, as a KIND_GPU onnxruntime model does; the placement is logged and reported the same way.
 * There it keeps its KV caches on the device (`kv_cache_location`, default `device`; device-kv.ts)
 * and prefills in the decoding worker unless `separate_prefill` says otherwise: a prefill worker's
 * caches would have to cross to the host and back to change threads, and both sessions share one
 * device (and its lock) anyway.
 */

import { readdirSync, statSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { basename, dirname, join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import {
  TsiError, VARIANT_RULES, allGpu, createLlmBackend,
  type Backend, type InstancePlacement, type KvArray, type MemoryFacts, type DecoderRuntime, type DecoderSession, type KvGroup, type ModelConfig, type ModelFiles, type ModelIoInfo, type StepRequest, type StepResult,
} from '../../core/index.js';
import { candidateProviders, vulkanHint } from '../gpu/index.js';
import { WEBGPU_LOCK } from '../gpu/lock.js';
import { placementOf } from '../onnx/backend.js';
import { NO_SPINNING, sessionOptions } from '../onnx/session-options.js';
import { readOnnxIo } from '../onnx/info.js';
import { startWorkerInstance, stopWorker } from '../worker-instance.js';
import { imagePool, imageWorkers } from './image-pool.js';
import { rewritePlainDecoder } from './plain-rewrite.js';
import type { AutoTokens, DeviceUse, PrefillPart } from '../../core/llm/decoder.js';
import type { DecoderInit, DecoderWorkerReply, DecoderWorkerRequest, DecoderWorkerSteer } from './decoder-worker.js';

export function createNodeLlmBackend(opts: { cores?: number } = {}): Backend {
  const runtime: DecoderRuntime = {
    async describe(files: ModelFiles, path: string): Promise<ModelIoInfo> {
      return readOnnxIo(await files.read(path));
    },
    // A plain (Optimum-shaped) decoder is served rewritten into the fused layout where recognised (plain-rewrite.ts).
    rewrite: rewritePlainDecoder,
    // A photo's decode and resize take seconds: in threads of their own (image-pool.ts).
    imagePixels: (ctx) => imagePool(ctx.config.name ?? 'llm', imageWorkers(ctx.config, opts.cores ?? availableParallelism())),
    // A model's file serves all its instances: the GPU's order only when every group is KIND_GPU.
    variantRule: (config) => (allGpu(config) ? VARIANT_RULES.gpu : VARIANT_RULES.cpu),
    async memory(ctx, path): Promise<MemoryFacts | undefined> {
      const local = ctx.files.localPath?.(path);
      if (!local) return undefined;
      // The model file and its external data chunks (model.onnx_data, model.onnx_data_1...).
      let weightBytes = 0;
      const dir = dirname(local);
      for (const name of readdirSync(dir)) {
        if (name === basename(local) || name.startsWith(`${basename(local)}_data`)) weightBytes += statSync(join(dir, name)).size;
      }
      return { weightBytes, sessionsPerInstance: separatePrefill(ctx.config, allGpu(ctx.config)) ? 2 : 1, machineBytes: machineBytes() };
    },
    async open({ ctx, spec, path, layout, instanceCount, vision }) {
      const local = ctx.files.localPath?.(path);
      const cores = opts.cores ?? availableParallelism();
      const gpu = spec.kind === 'KIND_GPU';
      const separate = separatePrefill(ctx.config, gpu);
      const { providers, notes } = candidateProviders(ctx.config, spec, 'llm');
      const init: DecoderInit = {
        modelPath: local,
        modelBytes: local ? undefined : await ctx.files.read(path),
        // Every inference core for the decoders when the config sets no thread count (split among the
        // model's instances; docs/many-models.md): a greedy or plainly sampled decode runs back to back in
        // the worker, its tokens chosen there (auto-decode.ts), so the server's thread only detokenizes
        // and streams, beside the next step rather than before it, and the decoding worker runs niced
        // (DECODE_NICE), so what the server's thread does need it gets first. Before the worker chose
        // the tokens, one core was kept back for the server's sampling; see decoderThreads.
        sessionOptions: sessionOptions(ctx.config, instanceCount, cores, 0),
        providers,
        gpuLock: WEBGPU_LOCK,
        layout,
        deviceCaches: gpu && kvCacheLocation(ctx.config) === 'device',
      };
      if (vision) {
        const file = async (p: string) => ctx.files.localPath?.(p) ?? await ctx.files.read(p);
        init.vision = { embed: await file(vision.embed), encoder: await file(vision.encoder), imageTokenId: vision.imageTokenId, inputsEmbeds: layout.inputsEmbeds!, types: vision.types };
      }
      const name = ctx.config.name ?? 'llm';
      const decodeThreads = threadCount(ctx.config, 'decode_thread_count');
      if (decodeThreads) init.sessionOptions = { ...init.sessionOptions, intraOpNumThreads: decodeThreads };
      if (!decodeSpinning(ctx.config, init.sessionOptions.intraOpNumThreads! * instanceCount, cores)) init.sessionOptions = { ...init.sessionOptions, extra: NO_SPINNING };
      const prefillThreads = threadCount(ctx.config, 'prefill_thread_count') ?? init.sessionOptions.intraOpNumThreads;
      const start = (i: DecoderInit) => startWorkerInstance<DecoderWorkerReply>('llm/decoder-worker', i, `failed to create the decoder session of '${name}'`);
      // The prefill session takes the decoder's threads too (a prompt is the most parallel work
      // there is), but they sleep between prompts instead of spinning against the decoding ones.
      const prefillInit: DecoderInit = { ...init, deviceCaches: false, sessionOptions: { ...init.sessionOptions, intraOpNumThreads: prefillThreads, extra: { session: { intra_op: { allow_spinning: '0' } } } } };
      const [decode, prefill] = await Promise.allSettled(separate ? [start({ ...init, nice: DECODE_NICE }), start(prefillInit)] : [start(init)]);
      if (decode.status === 'rejected' || prefill?.status === 'rejected') {
        for (const r of [decode, prefill]) if (r?.status === 'fulfilled') await stopWorker(r.value.worker);
        throw decode.status === 'rejected' ? decode.reason : (prefill as PromiseRejectedResult).reason;
      }
      const ready = decode.value.ready as Extract<DecoderWorkerReply, { kind: 'ready' }>;
      // The prefill worker tried the same providers in the same order; it may have ended up elsewhere
      // only if the device refused a second session, which the log then says.
      const prefillReady = prefill?.status === 'fulfilled' ? prefill.value.ready as Extract<DecoderWorkerReply, { kind: 'ready' }> : undefined;
      const failures = ready.failures.map((f) => (f.startsWith('webgpu:') && /adapter/i.test(f) ? `${f} (${vulkanHint()})` : f));
      const placement = await placementOf(spec, ready.provider, [...notes, ...failures]);
      const where = `${name} (${spec.name})`;
      const sleeps = init.sessionOptions.extra === NO_SPINNING ? ' (sleeping when idle, not spinning)' : '';
      ctx.log.verbose(1, `${where}: decoder session ${init.sessionOptions.intraOpNumThreads} intra-op thread(s)${sleeps}${separate ? `, prefill session ${prefillThreads}` : ''}`);
      const skipped = placement.notes!.length > 0 ? `; ${placement.notes!.join('; ')}` : '';
      if (spec.kind === 'KIND_GPU' && placement.kind !== 'KIND_GPU') {
        ctx.log.warn(`${where}: KIND_GPU instance runs on the CPU: no GPU execution provider could be used${skipped}`);
      } else if (spec.kind === 'KIND_GPU') {
        ctx.log.info(`${where}: decoder runs on execution provider '${placement.provider}'${placement.adapter ? ` on ${placement.adapter}` : ''}${skipped}`);
      }
      if (prefillReady && prefillReady.provider !== ready.provider) {
        ctx.log.warn(`${where}: the prefill session runs on '${prefillReady.provider}', the decoder on '${ready.provider}'`);
      }
      return new WorkerDecoderSession(name, placement, decode.value.worker, prefill?.status === 'fulfilled' ? prefill.value.worker : undefined);
    },
  };
  return createLlmBackend(runtime);
}

/** The machine's memory; TSI_MACHINE_MEMORY_BYTES stands in for it (tests of the refusal, containers). */
function machineBytes(): number {
  const v = Number(process.env.TSI_MACHINE_MEMORY_BYTES);
  return Number.isFinite(v) && v > 0 ? v : totalmem();
}

/**
 * How much lower than the server's the decoding thread runs beside a prefill worker: decode steps
 * come back to back and would keep the cores busy; new requests (the server's thread taking them,
 * the prefill worker) go first, so their first token does not wait behind running streams. Idle
 * cores still go to decoding whatever its priority.
 */
const DECODE_NICE = 10;

/** A config parameter giving one session's intra-op threads (over intra_op_thread_count), if set. */
function threadCount(config: ModelConfig, key: string): number | undefined {
  const v = config.parameters?.[key]?.string_value?.trim();
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter ${key} must be a whole number of threads >= 1, not '${v}'`);
  return n;
}

/**
 * Whether a decoding session's idle intra-op threads spin (`decode_spinning`, else the rule): only
 * while the model's decoders leave a core free. onnxruntime's pool threads spin between parallel loops
 * and after a run; on cores the decoders take whole, a spinning thread holds the core the server's
 * thread (detokenizing, streaming), the prefill worker or a neighbour wants next, and the loop it
 * waits in stalls for a thread that the scheduler put aside (on 2 shared cores: 2 spinning threads
 * made 0.6× the tokens/s of 1 thread, 2 sleeping ones 1.1×; docs/performance.md, bench:llm-threads).
 */
export function decodeSpinning(config: ModelConfig, decoderThreads: number, cores: number): boolean {
  return flag(config, 'decode_spinning', decoderThreads < cores);
}

/** A true/false config parameter, `dflt` when unset. */
function flag(config: ModelConfig, key: string, dflt: boolean): boolean {
  const v = config.parameters?.[key]?.string_value?.trim().toLowerCase();
  if (v === undefined || v === '') return dflt;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter ${key} must be true or false, not '${v}'`);
}

/** Whether prefills run in a worker of their own: by default on the CPU, not on a GPU (see the file's head). */
function separatePrefill(config: ModelConfig, gpu: boolean): boolean {
  const v = config.parameters?.separate_prefill?.string_value?.trim().toLowerCase();
  if (v === undefined || v === '') return !gpu;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter separate_prefill must be true or false, not '${v}'`);
}

/** Where a KIND_GPU instance keeps its KV caches: `device` (the default) or `host` (each step moves them). */
function kvCacheLocation(config: ModelConfig): 'device' | 'host' {
  const v = config.parameters?.kv_cache_location?.string_value?.trim().toLowerCase();
  if (v === undefined || v === '' || v === 'device') return 'device';
  if (v === 'host') return 'host';
  throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter kv_cache_location must be device or host, not '${v}'`);
}

/** One worker's step calls, answered by id; a dead worker fails what is pending and what comes. */
class WorkerSteps {
  private nextId = 1;
  private readonly pending = new Map<number, {
    resolve: (r: Extract<DecoderWorkerReply, { kind: 'result' }>) => void;
    reject: (e: Error) => void;
    part?: (p: Extract<DecoderWorkerReply, { kind: 'part' }>) => void;
    tokens?: (t: Extract<DecoderWorkerReply, { kind: 'tokens' }>) => void;
  }>();
  /** The id of the last call made. */
  lastId = 0;
  private dead?: Error;

  constructor(readonly worker: Worker, model: string) {
    worker.on('message', (m: DecoderWorkerReply) => {
      if (m.kind !== 'result' && m.kind !== 'error' && m.kind !== 'part' && m.kind !== 'tokens') return;
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.kind === 'part') return p.part?.(m);
      if (m.kind === 'tokens') return p.tokens?.(m);
      this.pending.delete(m.id);
      if (m.kind === 'result') p.resolve(m);
      else p.reject(new TsiError('INTERNAL', m.message));
    });
    const fail = (e: Error) => {
      this.dead ??= e;
      for (const p of this.pending.values()) p.reject(e);
      this.pending.clear();
    };
    worker.on('error', (e) => fail(new TsiError('INTERNAL', `the decoder worker of '${model}' failed: ${e.message}`)));
    worker.on('exit', (code) => fail(new TsiError('INTERNAL', `the decoder worker of '${model}' exited (code ${code})`)));
  }

  call(
    msg: Omit<DecoderWorkerRequest, 'id'>, transfer: ArrayBuffer[] = [], part?: (p: Extract<DecoderWorkerReply, { kind: 'part' }>) => void,
    tokens?: (t: Extract<DecoderWorkerReply, { kind: 'tokens' }>) => void,
  ): Promise<Extract<DecoderWorkerReply, { kind: 'result' }>> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    this.lastId = id;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, part, tokens });
      this.worker.postMessage({ id, ...msg } satisfies DecoderWorkerRequest, transfer);
    });
  }

  /** To the call `id` while it runs. */
  steer(msg: DecoderWorkerSteer): void {
    if (!this.dead && this.pending.has(msg.id)) this.worker.postMessage(msg);
  }

  async close(): Promise<void> {
    if (!this.dead) await stopWorker(this.worker);
  }
}

/**
 * The instance's decoder: steps go to the decoding worker; with a prefill worker, prefills go there,
 * and the caches they made wait here until the next decode or free step carries them over (the
 * engine puts a sequence in a decode only after its prefill resolved, so they are always here by then).
 */
class WorkerDecoderSession implements DecoderSession {
  readonly device: string;
  readonly concurrentPrefill: boolean;
  // Greedy decode steps run back to back in the decoding worker (see core/llm/decoder.ts).
  readonly autoDecode = true;
  private readonly decoder: WorkerSteps;
  /** The call id of the auto decode in flight. */
  private auto?: number;
  private readonly prefiller?: WorkerSteps;
  private handed: KvGroup[] = [];
  private handedBytes = 0;
  private heldBytes = 0;
  /** Each worker's device use as it last said (a prefill worker's bytes count too). */
  private readonly used: { decode?: DeviceUse; prefill?: DeviceUse } = {};

  constructor(model: string, readonly placement: InstancePlacement, decode: Worker, prefill?: Worker) {
    this.device = placement.provider === 'cpu' ? 'cpu' : `${placement.provider}${placement.adapter ? ` (${placement.adapter})` : ''}`;
    this.decoder = new WorkerSteps(decode, model);
    this.prefiller = prefill && new WorkerSteps(prefill, model);
    this.concurrentPrefill = prefill !== undefined;
  }

  async step(req: StepRequest, onPart?: PrefillPart, onTokens?: AutoTokens): Promise<StepResult> {
    if (req.kind === 'prefill' && this.prefiller) {
      if (req.free.length > 0) throw new TsiError('INTERNAL', 'a prefill beside decoding carries no frees');
      const hand = (groups: KvGroup[]) => {
        for (const g of groups) {
          this.handed.push(g);
          // A prefill worker hands over host arrays only (decoder-worker.ts).
          for (const a of g.kv) this.handedBytes += (a as KvArray).byteLength;
        }
      };
      // A part's caches are here before its rows are reported: they may join the next decode step.
      const part = (p: Extract<DecoderWorkerReply, { kind: 'part' }>) => {
        hand(p.groups);
        this.used.prefill = p.result.device ?? this.used.prefill;
        onPart?.(p.rows, { ...p.result, kvBytes: this.heldBytes + this.handedBytes, device: this.deviceUse() });
      };
      const { result, groups = [] } = await this.prefiller.call({ req, handOff: true, parts: onPart !== undefined }, [], part);
      hand(groups);
      this.used.prefill = result.device ?? this.used.prefill;
      return { ...result, kvBytes: this.heldBytes + this.handedBytes, device: this.deviceUse() };
    }
    const adopt = this.handed;
    this.handed = [];
    this.handedBytes = 0;
    const transfer = adopt.flatMap((g) => g.kv.map((a) => (a as KvArray).buffer as ArrayBuffer));
    const tokens = onTokens && ((t: Extract<DecoderWorkerReply, { kind: 'tokens' }>) => {
      this.heldBytes = t.kvBytes;
      this.used.decode = t.device ?? this.used.decode;
      onTokens(t.seqs, t.tokens, { inferNs: t.inferNs, inputNs: t.inputNs, kvBytes: this.heldBytes + this.handedBytes, random: t.random, device: this.deviceUse() });
    });
    const call = this.decoder.call(adopt.length > 0 ? { req, adopt } : { req }, transfer, undefined, tokens);
    if (req.kind === 'decode' && req.auto) this.auto = this.decoder.lastId;
    try {
      const { result } = await call;
      this.heldBytes = result.kvBytes;
      this.used.decode = result.device ?? this.used.decode;
      return { ...result, kvBytes: this.heldBytes + this.handedBytes, device: this.deviceUse() };
    } finally {
      this.auto = undefined;
    }
  }

  /** Both workers' device use together (undefined on the CPU). */
  private deviceUse(): DeviceUse | undefined {
    const { decode, prefill } = this.used;
    if (!decode || !prefill) return decode ?? prefill;
    const add = (a: Record<string, number>, b: Record<string, number>) => {
      const out = { ...a };
      for (const [k, v] of Object.entries(b)) out[k] = (out[k] ?? 0) + v;
      return out;
    };
    return { tensors: decode.tensors + prefill.tensors, toDevice: add(decode.toDevice, prefill.toDevice), toHost: add(decode.toHost, prefill.toHost) };
  }

  steer(msg: { free?: number[]; stop?: boolean }): void {
    if (this.auto !== undefined) this.decoder.steer({ kind: 'steer', id: this.auto, ...msg });
  }

  async close(): Promise<void> {
    await Promise.all([this.decoder.close(), this.prefiller?.close()]);
  }
}
