/**
 * The `llm` backend in the page: core's LLM serving (core/llm: scheduler, in-flight batching,
 * sampling, tokenizer, the OpenAI API) over decoder sessions on onnxruntime-web. Only the session
 * lives here: one ORT session per model instance, with the instance's KV caches (core's KvBatch) kept
 * as plain typed arrays beside it, so a step sends token ids in and gets one row of logits per
 * sequence back, exactly as the Node worker does (runtime-node/llm/).
 *
 * The execution provider follows the `onnxruntime` backend's rule (`device: 'webgpu'`, or a KIND_GPU
 * instance under `auto`, tries WebGPU; otherwise wasm), and a WebGPU session must pass one real
 * prefill and decode step before it is used; when WebGPU is absent or fails, the instance runs on
 * wasm and says why (`instances()[i].fallbackReason`). Unlike that backend, 64-bit inputs do not rule
 * WebGPU out: a decoder's int64 token ids and positions go in from the CPU, and ORT keeps the ops that
 * need them there. Caches round-trip through the CPU each step (KvBatch re-lays them out when the
 * batch changes), which costs little next to the step for the small models a page runs.
 *
 * A downloaded onnx-community folder serves as it is: without a `variant` parameter the file is the
 * best present for where the instances will run (core's VARIANT_RULES: WebGPU with or without
 * shader-f16, or wasm), and weights kept as external data (`model.onnx_data`, named inside the
 * model) are read from the same source and handed to onnxruntime-web as `externalData`.
 */

import type * as Ort from 'onnxruntime-web';
import {
  KvBatch, TsiError, VARIANT_RULES, allGpu, createLlmBackend,
  type Backend, type DecoderLayout, type DecoderRuntime, type DecoderSession, type InstancePlacement,
  type KvArray, type ModelFiles, type ModelIoInfo, type StepRequest, type StepResult, type TensorKit,
} from '../core/index.js';
import { ImageBank, visionKit, type Floats, type VisionRunner, type VisionTypes } from '../core/vision/index.js';
import { externalDataFiles, readOnnxIo } from './onnx-io.js';
import { createSession, loadOrt, probeEnvironment, runLock, type OnnxWebOptions, type OrtModule } from './onnx-web-backend.js';

export function createWebLlmBackend(opts: OnnxWebOptions): Backend {
  const runtime: DecoderRuntime = {
    async describe(files: ModelFiles, path: string): Promise<ModelIoInfo> {
      return readOnnxIo(await files.read(path));
    },
    // The instances' device as open() will pick it; a WebGPU decoder that then fails its self-test
    // runs this file on wasm.
    async variantRule(config) {
      const pref = opts.device ?? 'auto';
      const webgpu = (await probeEnvironment()).webgpu;
      if (!webgpu.available || pref === 'wasm' || (pref === 'auto' && !allGpu(config))) return VARIANT_RULES['page-wasm'];
      return webgpu.shaderF16 ? VARIANT_RULES['page-webgpu'] : VARIANT_RULES['page-webgpu-no-f16'];
    },
    async open({ ctx, spec, path, layout, vision }) {
      const ort = await loadOrt(opts);
      const name = ctx.config.name ?? 'llm';
      const read = async (p: string) => {
        try {
          return await ctx.files.read(p);
        } catch (err) {
          throw new TsiError('INVALID_ARG', `unable to read '${p}' for model '${name}': ${(err as Error).message}`);
        }
      };
      const bytes = await read(path);
      const dir = path.slice(0, path.lastIndexOf('/') + 1);
      const externalData: { path: string; data: Uint8Array }[] = [];
      for (const file of externalDataFiles(bytes)) externalData.push({ path: file, data: await read(dir + file) });
      // ORT may keep the buffers it is given; each session gets its own copies.
      const create = (ep: 'webgpu' | 'wasm') => createSession(ort, bytes.slice(), {
        logSeverityLevel: 3, executionProviders: [ep],
        ...(externalData.length > 0 ? { externalData: externalData.map((e) => ({ path: e.path, data: e.data.slice() })) } : {}),
      });
      // A vision-language folder's embed-tokens and vision-encoder graphs run on wasm beside the decoder.
      const visionOf = async (): Promise<VisionSessions | undefined> => vision && {
        embed: await createSession(ort, await read(vision.embed), { logSeverityLevel: 3, executionProviders: ['wasm'] }),
        encoder: await createSession(ort, await read(vision.encoder), { logSeverityLevel: 3, executionProviders: ['wasm'] }),
        imageTokenId: vision.imageTokenId,
        types: vision.types,
      };
      const env = await probeEnvironment();
      const pref = opts.device ?? 'auto';
      let fallback: string | undefined;
      if (pref === 'webgpu' || (pref === 'auto' && spec.kind === 'KIND_GPU')) {
        if (!env.webgpu.available) fallback = env.webgpu.reason;
        else {
          let session: Ort.InferenceSession | undefined;
          try {
            session = await create('webgpu');
            const s = new WebDecoderSession(ort, session, layout, webgpuPlacement(env.webgpu), await visionOf());
            await s.selfTest();
            opts.log.verbose(1, `${name} (${spec.name}) runs on webgpu`);
            return s;
          } catch (err) {
            await session?.release().catch(() => {});
            fallback = `webgpu decoder failed: ${(err as Error).message.split('\n')[0]}`;
          }
        }
        opts.log.warn(`${name} (${spec.name}): ${fallback}; running on wasm`);
      }
      const session = await create('wasm').catch((err: Error) => {
        throw new TsiError('INTERNAL', `failed to create an onnxruntime-web session for '${name}': ${err.message.split('\n')[0]}`);
      });
      opts.log.verbose(1, `${name} (${spec.name}) runs on wasm (${ort.env.wasm.numThreads ?? 1} thread(s))`);
      return new WebDecoderSession(ort, session, layout, { kind: 'KIND_CPU', provider: 'wasm', ...(fallback ? { notes: [fallback] } : {}) }, await visionOf());
    },
  };
  return createLlmBackend(runtime);
}

function webgpuPlacement(gpu: { vendor: string; architecture: string; fallback: boolean }): InstancePlacement {
  const adapter = [gpu.vendor, gpu.architecture].filter(Boolean).join(' ') + (gpu.fallback ? ' (software fallback adapter)' : '');
  return { kind: 'KIND_GPU', provider: 'webgpu', ...(adapter ? { adapter } : {}) };
}

/** A vision-language decoder's other two graphs (core/vision/vision-kit.ts feeds the decoder through them). */
interface VisionSessions {
  embed: Ort.InferenceSession;
  encoder: Ort.InferenceSession;
  imageTokenId: number;
  types: VisionTypes;
}

class WebDecoderSession implements DecoderSession {
  readonly device: string;
  private batch: KvBatch;
  private readonly kit: TensorKit<Ort.Tensor>;
  private readonly images = new ImageBank();

  constructor(
    ort: OrtModule, private readonly session: Ort.InferenceSession, private readonly layout: DecoderLayout,
    readonly placement: InstancePlacement, private readonly vision?: VisionSessions,
  ) {
    this.device = placement.provider;
    this.batch = new KvBatch(layout);
    const lock = runLock(ort);
    // Runs of one ORT module never overlap (its wasm heap and WebGPU device are shared by all sessions).
    const locked = async <R>(run: () => Promise<R>): Promise<R> => {
      lock.busy++;
      try {
        const running = lock.busy === 1 ? run() : lock.tail.then(run, run);
        lock.tail = running;
        return await running;
      } finally {
        lock.busy--;
      }
    };
    const kvType = layout.kvType;
    this.kit = {
      int64: (data, dims) => new ort.Tensor('int64', data, dims),
      bool: (data, dims) => new ort.Tensor('bool', data, dims),
      kv: (data: KvArray, dims) => new ort.Tensor(kvType, data as never, dims),
      data: (t) => asKvOrFloat(t.data),
      dims: (t) => t.dims,
      run: (feeds, fetches) => locked(() => session.run(feeds, fetches) as Promise<Record<string, Ort.Tensor>>),
    };
    if (vision) this.kit = visionKit(this.kit, visionRunner(ort, vision, locked), this.images, { inputIds: layout.inputIds, inputsEmbeds: layout.inputsEmbeds!, imageTokenId: vision.imageTokenId, types: vision.types });
  }

  /**
   * One prefill of two rows of different lengths and one decode step, then the caches dropped: a
   * provider that cannot run the decoder (an op it lacks, zero-length past tensors) fails here, at
   * load, rather than on a user's first request.
   */
  async selfTest(): Promise<void> {
    await this.batch.step({ kind: 'prefill', free: [], rows: [{ seq: -1, tokens: [0, 1, 2] }, { seq: -2, tokens: [3] }] }, this.kit);
    const r = await this.batch.step({ kind: 'decode', free: [], rows: [{ seq: -1, token: 4 }, { seq: -2, token: 5 }] }, this.kit);
    if (!r.logits || r.logits.length !== 2 * r.vocab || !r.logits.every(Number.isFinite)) {
      throw new Error('the decode step returned non-finite logits');
    }
    this.batch = new KvBatch(this.layout);
  }

  async step(req: StepRequest): Promise<StepResult> {
    if (req.kind === 'prefill') for (const row of req.rows) this.images.offer(row.images);
    const r = await this.batch.step(req, this.kit).finally(() => this.images.stepDone());
    // A wasm run settles in microtasks only, so back-to-back steps would hold the page's task queue
    // until every sequence finished: no request bodies read (new requests could not join the
    // batch), no paint of streamed tokens, no input. One task boundary per step lets them in.
    await nextTask();
    return r;
  }

  async close(): Promise<void> {
    await this.session.release();
    await this.vision?.embed.release();
    await this.vision?.encoder.release();
  }
}

/** The vision kit's runner over the page's two extra sessions. */
function visionRunner(ort: OrtModule, v: VisionSessions, locked: <R>(run: () => Promise<R>) => Promise<R>): VisionRunner<Ort.Tensor> {
  // float32 data as float32, half bits as float16.
  const floatTensor = (data: Floats, dims: readonly number[]): Ort.Tensor => (data instanceof Uint16Array ? new ort.Tensor('float16', data, dims) : new ort.Tensor('float32', data, dims));
  return {
    async embed(ids, dims) {
      const out = await locked(() => v.embed.run({ [v.embed.inputNames[0]!]: new ort.Tensor('int64', ids, dims) }));
      return asKvOrFloat(out[v.embed.outputNames[0]!]!.data);
    },
    async encode(pixels, dims) {
      const [, frames, , h, w] = dims as [number, number, number, number, number];
      const feeds: Record<string, Ort.Tensor> = { pixel_values: floatTensor(pixels, dims) };
      if (v.encoder.inputNames.includes('pixel_attention_mask')) feeds.pixel_attention_mask = new ort.Tensor('bool', new Uint8Array(frames * h * w).fill(1), [1, frames, h, w]);
      const out = await locked(() => v.encoder.run(feeds));
      return asKvOrFloat((out.image_features ?? out[v.encoder.outputNames[0]!]!).data);
    },
    floats: (data, dims) => floatTensor(data, dims),
    ids: (t) => t.data as BigInt64Array,
  };
}

/** Resolves in a new task (not a microtask), without setTimeout's 4 ms clamp on nested timers. */
let taskChannel: MessageChannel | undefined;
const taskWaiters: (() => void)[] = [];
function nextTask(): Promise<void> {
  if (!taskChannel) {
    taskChannel = new MessageChannel();
    taskChannel.port1.onmessage = () => taskWaiters.shift()?.();
  }
  return new Promise((resolve) => {
    taskWaiters.push(resolve);
    taskChannel!.port2.postMessage(0);
  });
}

/** ORT's output data as KvBatch reads it: float32 as is, float16 as its raw bits (ORT may hand a Float16Array). */
function asKvOrFloat(data: Ort.Tensor.DataType): Float32Array | Uint16Array {
  if (data instanceof Float32Array || data instanceof Uint16Array) return data;
  const d = data as unknown as ArrayBufferView & { length: number };
  return new Uint16Array(d.buffer, d.byteOffset, d.length);
}
