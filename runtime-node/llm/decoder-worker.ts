/**
 * One `llm` model instance's decoder, in a worker thread: onnxruntime-node's `session.run()` blocks
 * its thread for the whole step, so steps run here and the server's event loop keeps streaming tokens
 * and accepting requests meanwhile. The worker owns the KV caches (core's KvBatch): they never cross
 * the thread boundary; a step message carries token ids in and one row of logits per sequence out
 * (transferred, not copied), or, when every row is greedy, only each row's argmax (so sampling is
 * off the server's thread). When no running sequence needs a grammar mask or log-probabilities the
 * engine asks for an *auto* decode (core/llm/auto-decode.ts): steps run back to back here, sampled
 * rows drawn here too (their PRNG states posted back with the tokens), each step's tokens posted as it
 * ends (`tokens` messages), while the engine steers the loop with `steer` messages read between
 * steps (rows to drop, stop so new rows can join): no round trip to the server's thread per step.
 * The exception is a prefill worker (an instance whose prefills run apart
 * from its decoding): it hands the caches its prefill made back with the result (`handOff`),
 * and the decoding worker takes them over with its next step (`adopt`), transferred both ways. A
 * prefill run in parts (prompts of unlike lengths) answers part by part (`part` messages, each with
 * its caches), so a short prompt's first token does not wait for the long ones.
 *
 * A KIND_GPU instance's session tries the GPU providers the onnxruntime backend would (WebGPU with the
 * bundled binary), then the CPU; on WebGPU every run holds the process-wide lock (gpu/lock.ts), since
 * all WebGPU sessions of the process share onnxruntime's one device. There the decoding worker keeps
 * the caches on the device (`deviceCaches`, device-kv.ts): presents stay as device tensors fed back as
 * the next past, batch changes run on the device, and only ids (or a sampled step's last-position
 * logits) come back. A prefill worker (its caches handed to another thread) and an instance with
 * `kv_cache_location: host` keep them in this thread's memory, and each step moves them across; the
 * bytes that cross are counted either way (`device` in each result).
 */

import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import type * as Ort from 'onnxruntime-node';
// Direct module imports, not core/index.js: the worker needs only these.
import type { DecoderLayout, DeviceUse, StepRequest, StepResult } from '../../core/llm/decoder.js';
import { KvBatch, type KvGroup, type TensorKit } from '../../core/llm/kv-batch.js';
import { isHostKv, type KvArray } from '../../core/llm/kv-moves.js';
import { argmaxRows, autoDecode } from '../../core/llm/auto-decode.js';
import type { ProviderChoice } from '../gpu/providers.js';
import { gpuLocked } from '../gpu/lock.js';
import { loadOrt } from '../gpu/ort.js';
import { openSession } from '../onnx/session-options.js';
import { movable } from '../worker-instance.js';
import { DeviceKv, countBytes, type BusBytes } from './device-kv.js';
import { ImageBank, visionKit, type Floats, type VisionRunner, type VisionTypes } from '../../core/vision/vision-kit.js';

/** onnxruntime-node: the dependency, or the CUDA-matched core serve chose (gpu/ort.ts). */
const ort = loadOrt();

export interface DecoderInit {
  modelPath?: string;
  modelBytes?: Uint8Array;
  sessionOptions: Ort.InferenceSession.SessionOptions;
  /** Execution providers to try, best first (the last is the CPU). */
  providers: ProviderChoice[];
  /** The process's WebGPU lock (gpu/lock.ts). */
  gpuLock: SharedArrayBuffer;
  layout: DecoderLayout;
  /** Added to this thread's nice value (and its ORT threads', made after it) before the session. */
  nice?: number;
  /** On WebGPU, keep the KV caches (and logits) on the device (device-kv.ts). */
  deviceCaches?: boolean;
  /** A vision-language decoder: its embed-tokens and vision-encoder graphs (file paths or bytes), run on the CPU. */
  vision?: { embed: string | Uint8Array; encoder: string | Uint8Array; imageTokenId: number; inputsEmbeds: string; types: VisionTypes };
}

/** `parts`: a prefill run in parts answers part by part (only with `handOff`: each part's caches go with it). */
export type DecoderWorkerRequest = { id: number; req: StepRequest; adopt?: KvGroup[]; handOff?: boolean; parts?: boolean };
/** To the auto decode `id` while it runs (messages for one that ended are ignored). */
export type DecoderWorkerSteer = { kind: 'steer'; id: number; free?: number[]; stop?: boolean };

export type DecoderWorkerReply =
  | { kind: 'ready'; provider: string; failures: string[] }
  | { kind: 'init-error'; message: string }
  | { kind: 'result'; id: number; result: StepResult; groups?: KvGroup[] }
  | { kind: 'part'; id: number; rows: readonly number[]; result: StepResult; groups: KvGroup[] }
  | { kind: 'tokens'; id: number; seqs: number[]; tokens: Int32Array; inferNs: number; inputNs: number; kvBytes: number; random?: Uint32Array; device?: DeviceUse }
  | { kind: 'error'; id: number; message: string };

const port = parentPort!;
const init = (workerData as { data: DecoderInit }).data;
let session: Ort.InferenceSession | undefined;
/** Set once the session runs on WebGPU. */
let gpuLock: Int32Array | undefined;
let batch = new KvBatch(init.layout);
const kvType = init.layout.kvType;
/** The caches on the device (WebGPU with `deviceCaches`). */
let device: DeviceKv | undefined;
/** Bytes across the bus, counted while the session runs on a GPU provider. */
let bus: BusBytes | undefined;

const kit: TensorKit<Ort.Tensor> = {
  int64: (data, dims) => input(new ort.Tensor('int64', data, dims)),
  bool: (data, dims) => input(new ort.Tensor('bool', data, dims)),
  kv: (data, dims) => {
    if (device) return device.feed(data, dims);
    if (bus) countBytes(bus.toDevice, 'kv', (data as KvArray).byteLength);
    return new ort.Tensor(kvType, data as KvArray, dims);
  },
  data: (t) => {
    if (bus) countBytes(bus.toHost, 'logits', (t.data as KvArray).byteLength);
    return t.data as Float32Array | Uint16Array;
  },
  keep: (t) => {
    if (device) return device.keep(t);
    if (bus) countBytes(bus.toHost, 'kv', (t.data as KvArray).byteLength);
    return t.data as KvArray;
  },
  dims: (t) => t.dims,
  run: (feeds, fetches) => gpuLocked(gpuLock, () => session!.run(feeds, fetches) as Promise<Record<string, Ort.Tensor>>),
};

/** A vision-language decoder's graphs beside it (CPU sessions; the encoder opened when an image first comes). */
const images = new ImageBank();
let embedSession: Ort.InferenceSession | undefined;
let encoderSession: Promise<Ort.InferenceSession> | undefined;
const visionOpts = { intraOpNumThreads: init.sessionOptions.intraOpNumThreads, executionProviders: ['cpu'] };
const runner: VisionRunner<Ort.Tensor> = {
  async embed(ids, dims) {
    const out = await embedSession!.run({ [embedSession!.inputNames[0]!]: new ort.Tensor('int64', ids, dims) });
    return out[embedSession!.outputNames[0]!]!.data as Floats;
  },
  async encode(pixels, dims) {
    const v = init.vision!;
    encoderSession ??= ort.InferenceSession.create(v.encoder as string, visionOpts);
    const s = await encoderSession;
    const [, frames, , h, w] = dims as [number, number, number, number, number];
    const feeds: Record<string, Ort.Tensor> = { pixel_values: floatTensor(pixels, dims) };
    if (s.inputNames.includes('pixel_attention_mask')) feeds.pixel_attention_mask = new ort.Tensor('bool', new Uint8Array(frames * h * w).fill(1), [1, frames, h, w]);
    const out = await s.run(feeds);
    return (out.image_features ?? out[s.outputNames[0]!]!).data as Floats;
  },
  floats: (data, dims) => input(floatTensor(data, dims)),
  ids: (t) => t.data as BigInt64Array,
};

/** float32 data as float32, half bits (a Uint16Array) as float16. */
const floatTensor = (data: Floats, dims: readonly number[]): Ort.Tensor => (data instanceof Uint16Array ? new ort.Tensor('float16', data, dims) : new ort.Tensor('float32', data, dims));

function input(t: Ort.Tensor): Ort.Tensor {
  if (bus) countBytes(bus.toDevice, 'inputs', (t.data as ArrayBufferView).byteLength);
  return t;
}

/** The kit steps run with: `kit`, or for a vision-language decoder the vision kit around it. */
let stepKit: TensorKit<Ort.Tensor> = kit;

/** What the session holds on the device and has moved so far (undefined on the CPU). */
const deviceUse = (): DeviceUse | undefined => bus && { tensors: device?.live.size ?? 0, toDevice: { ...bus.toDevice }, toHost: { ...bus.toHost } };

async function start(): Promise<void> {
  if (init.nice) {
    // On Linux a thread's priority is its own: pid 0 is this thread, not the process.
    try {
      setPriority(0, Math.min(19, getPriority(0) + init.nice));
    } catch {
      // Not allowed here (some sandboxes): the steps just run at the server's priority.
    }
  }
  // Presents and logits stay where the model ran: the host reads only what device-kv.ts brings back.
  const L = init.layout;
  const onDevice = init.deviceCaches
    ? { preferredOutputLocation: Object.fromEntries([L.logits, ...L.present.flatMap((p) => [p.key, p.value])].map((n) => [n, 'gpu-buffer' as const])) }
    : {};
  const opened = await openSession(ort, init.modelPath ?? init.modelBytes!, init.sessionOptions, init.providers, init.gpuLock, onDevice);
  if (!opened.session) {
    port.postMessage({ kind: 'init-error', message: opened.failures.join('; ') } satisfies DecoderWorkerReply);
    return;
  }
  session = opened.session;
  gpuLock = opened.lock;
  if (opened.provider !== 'cpu') bus = { toDevice: {}, toHost: {} };
  if (opened.provider === 'webgpu' && init.deviceCaches) {
    device = new DeviceKv(ort, init.layout, gpuLock, bus!);
    batch = new KvBatch(init.layout, device);
    kit.readLogits = (t, greedy, all) => device!.readLogits(t, greedy, all);
  }
  // After readLogits is set: the vision kit copies the kit's members.
  if (init.vision) {
    embedSession = await ort.InferenceSession.create(init.vision.embed as string, visionOpts);
    stepKit = visionKit(kit, runner, images, { inputIds: L.inputIds, inputsEmbeds: init.vision.inputsEmbeds, imageTokenId: init.vision.imageTokenId, types: init.vision.types });
  }
  port.postMessage({ kind: 'ready', provider: opened.provider, failures: opened.failures } satisfies DecoderWorkerReply);
}

// The engine never sends a step before the previous one is answered; the chain only keeps a close
// behind a running step.
let chain: Promise<void> = Promise.resolve();

/** The auto decode running, and what the engine said to it since its last step. */
let steering: { id: number; free: number[]; stop: boolean } | undefined;

port.on('message', (msg: DecoderWorkerRequest | DecoderWorkerSteer | 'close') => {
  if (typeof msg === 'object' && 'kind' in msg) {
    // Not chained: it is for the decode running now, read between its steps.
    if (steering?.id === msg.id) {
      if (msg.free) steering.free.push(...msg.free);
      if (msg.stop) steering.stop = true;
    }
    return;
  }
  chain = chain.then(() => handle(msg));
});

async function handle(msg: DecoderWorkerRequest | 'close'): Promise<void> {
  if (msg === 'close') {
    batch.dispose();
    await device?.close();
    await gpuLocked(gpuLock, async () => session?.release());
    await embedSession?.release();
    await (await encoderSession)?.release();
    port.close();
    return;
  }
  const { id, req } = msg;
  /** Greedy rows' tokens chosen here; the buffers to transfer; the caches made, when they are handed over. */
  const reply = (result: StepResult) => {
    if (req.kind !== 'free' && req.greedy && result.logits) {
      // Every row wants its argmax: choose it here, and send the ids instead of rows × vocab floats.
      result.tokens = argmaxRows(result.logits, result.vocab);
      result.logits = undefined;
    }
    result.device = deviceUse();
    const transfer = new Set<ArrayBuffer>();
    // The logits may be onnxruntime's output itself (kv-batch copies them only when it must).
    if (result.logits) result.logits = movable(result.logits, transfer, true) as Float32Array;
    const groups = msg.handOff ? movableGroups(batch.takeAll(), transfer) : undefined;
    return { result, groups, transfer: [...transfer] };
  };
  try {
    if (msg.adopt) batch.adopt(msg.adopt);
    if (req.kind === 'prefill') for (const r of req.rows) images.offer(r.images);
    const onPart = msg.handOff && msg.parts
      ? (rows: readonly number[], r: StepResult) => {
        const { result, groups, transfer } = reply(r);
        port.postMessage({ kind: 'part', id, rows, result, groups: groups! } satisfies DecoderWorkerReply, transfer);
      }
      : undefined;
    const stepped = req.kind === 'decode' && req.auto ? await runAuto(id, req) : await batch.step(req, stepKit, onPart).finally(() => images.stepDone());
    const { result, groups, transfer } = reply(stepped);
    port.postMessage({ kind: 'result', id, result, groups } satisfies DecoderWorkerReply, transfer);
  } catch (err) {
    // A prefill that failed part-way hands nothing over: the sequences it had done fail with it.
    if (msg.handOff) batch.takeAll();
    port.postMessage({ kind: 'error', id: msg.id, message: (err as Error).message } satisfies DecoderWorkerReply);
  }
}

/** The auto decode `id`: steps back to back here, each step's tokens posted as it ends. */
async function runAuto(id: number, req: Extract<StepRequest, { kind: 'decode' }>): Promise<StepResult> {
  const steer = { id, free: [] as number[], stop: false };
  steering = steer;
  try {
    return await autoDecode(batch, stepKit, req, steer, (seqs, tokens, r, random) => {
      port.postMessage({ kind: 'tokens', id, seqs, tokens, inferNs: r.inferNs, inputNs: r.inputNs, kvBytes: r.kvBytes, random, device: deviceUse() } satisfies DecoderWorkerReply);
    }, () => new Promise((resolve) => setImmediate(resolve)));
  } finally {
    steering = undefined;
  }
}

/** Cache groups ready to post: their arrays transferred (copied first only when a view shares its buffer). */
function movableGroups(groups: KvGroup[], transfer: Set<ArrayBuffer>): KvGroup[] {
  return groups.map((g) => ({ ...g, kv: g.kv.map((a) => (isHostKv(a) ? movable(a, transfer, true) as KvArray : a)) }));
}

void start();
