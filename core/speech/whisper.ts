/**
 * The `whisper` backend (`backend: "whisper"` in config.pbtxt): speech recognition and translation
 * with a Whisper folder as the onnx-community publishes it (what transformers.js runs):
 *
 *   <model>/1/onnx/encoder_model.onnx            input_features → last_hidden_state
 *   <model>/1/onnx/decoder_model_merged.onnx     input_ids, encoder_hidden_states, past_key_values.{i}.decoder/encoder.key/value,
 *                                                use_cache_branch → logits, present.{i}.decoder/encoder.key/value
 *   <model>/1/config.json  generation_config.json  preprocessor_config.json  tokenizer.json  tokenizer_config.json
 *
 * A request is one recording (`audio`: the file's bytes, WAV; or `audio_pcm`: 16 kHz mono FP32
 * samples) with request parameters `language` (an ISO code such as `en`, a `<|en|>` token, or a
 * language name), `task` (`transcribe` or `translate`), `timestamps` (bool), `prompt` (text the
 * decoder sees as previous context, after `<|startofprev|>`) and `temperature` (0: greedy). It
 * answers `text`, `tokens` (the decoded ids after the forced ones, as transformers.js's generate
 * returns them) and `segments` (JSON: start, end, text, tokens of each timestamped segment).
 *
 * Decoding follows transformers.js's `WhisperForConditionalGeneration.generate`, the oracle the tests
 * compare against (the per-step rules are decoding.ts's): forced tokens `<|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]` from
 * generation_config.json; `suppress_tokens` always and `begin_suppress_tokens` at the first step;
 * with timestamps, Whisper's timestamp rules (pairs, monotonic, a timestamp when their total
 * probability beats every text token) and the seek loop (a window ending in a complete segment
 * resumes at its last timestamp; otherwise the next window starts after this one); stop at
 * `<|endoftext|>` or generation_config's `max_length`. Audio up to 30 s is one zero-padded window
 * (the pipeline's features); longer audio is one spectrogram of the whole recording, decoded window
 * after window.
 *
 * Batching: the dynamic batcher hands an instance several requests, whose first windows go through
 * the encoder as one batch; the windows then decode on the llm engine's in-flight batching
 * (core/llm/engine.ts, over the decoder session of whisper-session.ts): a window joins the running
 * decode batch at the engine's next step boundary and leaves it when it ends, and a recording's next
 * window is encoded then and joins likewise, so a short request never waits for a long one. Each
 * row's self-attention cache grows step by step; its cross-attention cache is computed at its first
 * step from its encoder output and fed back unchanged. `execute` resolves once its windows are
 * queued for the engine, which answers each request when its last window ends. The model runs on
 * the runtime's onnxruntime backend (two inner models, as encoders/ does), so Node and the page
 * share this file.
 */

import type { Backend, BackendInstance, BackendModel, InstanceSpec, ModelLoadContext } from '../backend.js';
import type { BackendRequest, ExecutionTimes, ModelIoInfo } from '../execution.js';
import type { ModelConfig, ModelInput, ModelOutput } from '../config/model-config.js';
import { TsiError, asTsiError } from '../errors.js';
import { generationOf, initTokens, pick, processLogits, type WhisperGeneration } from './decoding.js';
import { readJson } from '../encoders/encoder.js';
import { intParam } from '../llm/backend.js';
import { Engine, type EngineLimits, type EngineSequence, type StepGeneration, type StepStats } from '../llm/engine.js';
import type { Accepted } from '../llm/generation.js';
import { seededRandom } from '../llm/sampling.js';
import { Tokenizer } from '../llm/tokenizer.js';
import { requestPrefix } from '../request.js';
import { createScheduler } from '../scheduling/schedulers.js';
import type { SchedulerContext } from '../scheduling/scheduler.js';
import { encodeString } from '../tensor.js';
import type { Tensor } from '../types.js';
import { WhisperSession, WhisperStats } from './whisper-session.js';
import { audioSamples, logMel, logMelWhole, SAMPLE_RATE, WINDOW_FRAMES } from './audio.js';

export const WHISPER_INPUTS: ModelInput[] = [
  { name: 'audio', data_type: 'TYPE_STRING', dims: [1], optional: true },
  { name: 'audio_pcm', data_type: 'TYPE_FP32', dims: [-1], optional: true },
];
export const WHISPER_OUTPUTS: ModelOutput[] = [
  { name: 'text', data_type: 'TYPE_STRING', dims: [1] },
  { name: 'tokens', data_type: 'TYPE_INT32', dims: [-1] },
  { name: 'segments', data_type: 'TYPE_STRING', dims: [1] },
];

/**
 * The cache a Whisper instance may hold: each window reserves max_length + 1500 positions (its
 * cross-attention cache is whole from the start), so 2 GiB holds 89 whisper-tiny windows (max_num_seqs
 * stops at 64), 14 whisper-small ones.
 */
const DEFAULT_KV_BYTES = 2 * 1024 * 1024 * 1024;

/** Seconds one timestamp token step stands for, and encoder frames per mel frame. */
const TIME_PRECISION = 0.02;
const INPUT_STRIDE = 2;

/** A decoding request as the backend reads it from a request's inputs and parameters. */
export interface WhisperJob {
  samples: Float32Array;
  language?: string;
  task: 'transcribe' | 'translate';
  timestamps: boolean;
  prompt?: string;
  temperature: number;
}

/** One timestamped segment of a transcription. */
export interface Segment {
  id: number;
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
}

/** What a loaded Whisper model holds. */
interface Loaded {
  tokenizer: Tokenizer;
  gen: WhisperGeneration;
  mels: number;
  filters?: Float64Array[];
  layers: number;
  heads: number;
  headDim: number;
  dModel: number;
  encoder: BackendModel;
  decoder: BackendModel;
  /** Encoder positions of a window (config.json's max_source_positions). */
  encoderPositions: number;
  /** Cache positions a window reserves in the engine: max_length self-attention + the encoder positions. */
  reserve: number;
  stats: WhisperStats;
}

/** One recording being decoded: its features, where the seek is, and what it has produced. */
class Row {
  readonly init: number[];
  readonly prefix: number[];
  seek = 0;
  readonly tokens: number[] = [];
  readonly segments: Segment[] = [];
  windowTokens: number[] = [];
  done = false;
  /** Its response (or error) went out. */
  answered = false;
  readonly random: () => number;

  constructor(readonly req: BackendRequest, readonly job: WhisperJob, readonly features: Float32Array, readonly frames: number, m: Loaded, model: string) {
    this.init = initTokens(m.gen, job, model);
    const prompt = job.prompt ? m.tokenizer.encode(` ${job.prompt.trim()}`, { addSpecialTokens: false }) : [];
    if (prompt.length > 0 && m.gen.startOfPrev === undefined) throw new TsiError('INVALID_ARG', `model '${model}' has no <|startofprev|> token: 'prompt' cannot be given`);
    // Whisper keeps the prompt to half the context.
    const room = Math.floor(m.gen.maxLength / 2) - 1;
    this.prefix = prompt.length > 0 ? [m.gen.startOfPrev!, ...prompt.slice(-room), ...this.init] : this.init;
    this.random = seededRandom(0x5eed);
  }

  /** This window's features, `[mels][3000]`, zero-padded past the recording's end (as transformers.js pads them). */
  window(mels: number): Float32Array {
    if (this.frames === WINDOW_FRAMES && this.seek === 0) return this.features;
    const out = new Float32Array(mels * WINDOW_FRAMES);
    const n = Math.min(WINDOW_FRAMES, this.frames - this.seek);
    for (let m = 0; m < mels; m++) out.set(this.features.subarray(m * this.frames + this.seek, m * this.frames + this.seek + n), m * WINDOW_FRAMES);
    return out;
  }
}

/** Reads one request's recording and parameters (a throw refuses that request alone). */
export function jobOf(req: BackendRequest, model: string): WhisperJob {
  const p = req.parameters as Record<string, unknown>;
  let samples: Float32Array;
  const file = req.inputs.get('audio');
  const pcm = req.inputs.get('audio_pcm');
  if (file) {
    const data = file.data as Uint8Array[];
    if (data.length !== 1) throw new TsiError('INVALID_ARG', `model '${model}': input 'audio' must hold one audio file, got ${data.length}`);
    samples = audioSamples(data[0]!, `model '${model}': input 'audio'`).samples;
  } else if (pcm) {
    samples = pcm.data instanceof Float32Array ? pcm.data : Float32Array.from(pcm.data as ArrayLike<number>);
  } else {
    throw new TsiError('INVALID_ARG', `model '${model}': give input 'audio' (the file's bytes, BYTES) or 'audio_pcm' (${SAMPLE_RATE} Hz mono samples, FP32)`);
  }
  if (samples.length === 0) throw new TsiError('INVALID_ARG', `model '${model}': the audio holds no samples`);
  const str = (k: string) => (p[k] === undefined || p[k] === '' ? undefined : String(p[k]));
  const task = str('task') ?? 'transcribe';
  if (task !== 'transcribe' && task !== 'translate') throw new TsiError('INVALID_ARG', `model '${model}': parameter 'task' must be 'transcribe' or 'translate', got '${task}'`);
  const ts = p.timestamps;
  const temperature = p.temperature === undefined ? 0 : Number(p.temperature);
  if (!(temperature >= 0 && temperature <= 2)) throw new TsiError('INVALID_ARG', `model '${model}': parameter 'temperature' must be between 0 and 2, got '${String(p.temperature)}'`);
  return {
    samples, task, language: str('language'), prompt: str('prompt'), temperature,
    timestamps: ts === true || ts === 'true' || ts === 1,
  };
}

/** An instance: the encoder's and the decoder's inner instances, and the decoding of a gathered batch. */
/**
 * One window of one recording as the engine runs it: the forced tokens are its prompt, and each step's
 * token is chosen by Whisper's rules (suppressed tokens, the timestamp rules; greedy or sampled). It
 * ends at `<|endoftext|>` or generation_config's `max_length`.
 */
class WindowGeneration implements StepGeneration {
  readonly tokens: number[] = [];
  readonly argmaxOnly = false;
  cachedTokens = 0;
  constructor(private readonly row: Row, private readonly gen: WhisperGeneration) {}

  get prompt(): readonly number[] {
    return this.row.prefix;
  }

  choose(logits: Float32Array): number {
    processLogits(logits, this.tokens, this.gen, this.row.job.timestamps);
    return pick(logits, this.row.job.temperature, this.row.random);
  }

  accept(token: number): Accepted {
    this.tokens.push(token);
    if (token === this.gen.eot) return { delta: '', finish: 'stop' };
    if (this.row.prefix.length + this.tokens.length >= this.gen.maxLength) return { delta: '', finish: 'length' };
    return { delta: '' };
  }
}

let nextSeq = 1;

/** A window in the engine: when it ends, the instance moves its recording's seek on. */
class WindowSequence implements EngineSequence {
  readonly id = nextSeq++;
  readonly gen: WindowGeneration;
  constructor(readonly row: Row, gen: WhisperGeneration, readonly reserve: number, private readonly owner: WhisperInstance) {
    this.gen = new WindowGeneration(row, gen);
  }

  get cancelled(): boolean {
    return this.row.req.cancelled === true;
  }

  accepted(acc: Accepted): void {
    if (acc.finish) this.owner.windowDone(this.row, this.gen.tokens);
  }

  dropped(err?: TsiError): void {
    this.owner.fail(this.row, err ?? new TsiError('CANCELLED', `${requestPrefix(this.row.req.id)}Request was cancelled`));
  }
}

/**
 * An instance: the encoder's and the decoder's inner instances, and the llm engine over the decoder.
 * `execute` gets a batch from the dynamic batcher, runs its recordings' first windows through the
 * encoder as one batch and hands them to the engine, which admits them into the running decode batch
 * at its next step; `execute` then resolves (the model's batcher runs as for a decoupled model: the
 * engine answers each request when its last window ends). A recording's next window is encoded when
 * its previous one ends (windows ending at the same step together) and joins the batch likewise.
 */
class WhisperInstance implements BackendInstance {
  readonly device: string;
  private readonly queue: WindowSequence[] = [];
  private readonly session: WhisperSession;
  private readonly engine: Engine;
  /** The encoder runs one batch at a time (execute and next windows share it). */
  private encoderFree: Promise<void> = Promise.resolve();
  /** Rows whose next window waits to be encoded (gathered over one step's endings). */
  private nextWindows: Row[] = [];

  constructor(private readonly name: string, private readonly m: Loaded, private readonly enc: BackendInstance, private readonly dec: BackendInstance, limits: EngineLimits) {
    this.device = enc.device;
    const { layers, heads, headDim, dModel } = m;
    this.session = new WhisperSession(dec.device, { layers, heads, headDim, dModel }, (inputs, outputs, rows) => this.run(this.dec, `${name}-decoder`, inputs, outputs, rows), m.stats);
    const source = { peek: () => this.queue[0], shift: () => this.queue.shift() };
    this.engine = new Engine(this.session, limits, source, (s) => this.stepped(s));
  }

  get spec(): InstanceSpec {
    return this.enc.spec;
  }

  get placement() {
    return this.enc.placement;
  }

  private async run(inner: BackendInstance, id: string, inputs: Tensor[], outputs: string[], rows: number): Promise<Map<string, Tensor>> {
    let result: Map<string, Tensor> | TsiError = new TsiError('INTERNAL', `model '${this.name}': the inner model sent no response`);
    await inner.execute([{
      id, inputs: new Map(inputs.map((t) => [t.name, t])), requestedOutputs: outputs, parameters: {}, batchSize: rows,
      send: (r) => { result = r instanceof TsiError ? r : new Map(r.outputs.map((t) => [t.name, t])); },
    }]);
    if (result instanceof TsiError) throw result;
    return result;
  }

  private stepped(s: StepStats): void {
    const st = this.m.stats;
    if (s.kind === 'prefill') {
      st.prefillSteps++;
      st.joinedSequences += s.joined ?? 0;
    } else if (s.kind === 'decode') {
      st.decodeSteps++;
      st.decodeRows += s.rows;
      st.maxRowsInStep = Math.max(st.maxRowsInStep, s.rows);
    }
  }

  async execute(requests: BackendRequest[]): Promise<ExecutionTimes | void> {
    const { m, name } = this;
    const rows: Row[] = [];
    for (const req of requests) {
      try {
        const job = jobOf(req, name);
        const long = job.samples.length > WINDOW_FRAMES * 160;
        const { features, frames } = long ? logMelWhole(job.samples, m.mels, m.filters) : { features: logMel(job.samples, m.mels, m.filters), frames: WINDOW_FRAMES };
        rows.push(new Row(req, job, features, frames, m, name));
      } catch (err) {
        req.send(asTsiError(err), true);
      }
    }
    if (rows.length > 0) await this.encode(rows);
  }

  /**
   * Encodes every row's current window as one batch and queues the windows for the engine. Never
   * rejects: a failure is each row's error response.
   */
  private encode(rows: Row[]): Promise<void> {
    const turn = this.encoderFree.then(async () => {
      const { m } = this;
      try {
        const R = rows.length;
        const per = m.mels * WINDOW_FRAMES;
        const feats = new Float32Array(R * per);
        rows.forEach((r, i) => feats.set(r.window(m.mels), i * per));
        const encoded = await this.run(this.enc, rows[0]!.req.id, [{ name: 'input_features', datatype: 'FP32', shape: [R, m.mels, WINDOW_FRAMES], data: feats }], ['last_hidden_state'], R);
        const hidden = encoded.get('last_hidden_state')!;
        const E = hidden.shape[1]!;
        const D = hidden.shape[2]!;
        rows.forEach((r, i) => {
          const seq = new WindowSequence(r, m.gen, m.reserve, this);
          this.session.attach(seq.id, (hidden.data as Float32Array).slice(i * E * D, (i + 1) * E * D), E);
          this.queue.push(seq);
          m.stats.windows++;
        });
      } catch (err) {
        for (const r of rows) this.fail(r, asTsiError(err));
        return;
      }
      this.engine.wake();
    });
    this.encoderFree = turn;
    return turn;
  }

  /** A window ended: the row's seek moves on; the request is answered, or its next window encoded. */
  windowDone(r: Row, tokens: readonly number[]): void {
    r.windowTokens = [...tokens];
    try {
      this.advance(r);
    } catch (err) {
      this.fail(r, asTsiError(err));
      return;
    }
    if (r.done) {
      this.answer(r);
      return;
    }
    // Rows whose windows end at one step are handed out together: their next windows share an encoder batch.
    if (this.nextWindows.push(r) === 1) {
      queueMicrotask(() => {
        const rows = this.nextWindows;
        this.nextWindows = [];
        void this.encode(rows);
      });
    }
  }

  fail(r: Row, err: TsiError): void {
    if (r.answered) return;
    r.answered = true;
    r.req.send(err, true);
  }


  /** After a window: the row's tokens and segments, and where its next window starts (transformers.js's seek rules). */
  private advance(r: Row): void {
    const { gen, tokenizer } = this.m;
    const tb = gen.timestampBegin;
    const toks = r.windowTokens.slice();
    if (toks.length > 0 && toks[toks.length - 1] === gen.eot) toks.pop();
    const segmentFrames = Math.min(WINDOW_FRAMES, r.frames - r.seek);
    if (!r.job.timestamps) {
      r.tokens.push(...toks);
      r.seek += WINDOW_FRAMES;
      if (r.seek >= r.frames) r.done = true;
      return;
    }
    if (toks.length === 0) { r.done = true; return; }
    const isTs = toks.map((t) => t >= tb);
    const singleEnding = toks.length >= 2 && isTs[toks.length - 1]! && !isTs[toks.length - 2]!;
    const boundaries: number[] = [];
    for (let i = 0; i < toks.length - 1; i++) if (isTs[i] && isTs[i + 1]) boundaries.push(i + 1);
    let offset = segmentFrames;
    let keep = toks.length;
    if (boundaries.length > 0 && !singleEnding) {
      const last = boundaries[boundaries.length - 1]!;
      offset = (toks[last - 1]! - tb) * INPUT_STRIDE;
      keep = last;
    }
    // Segments: text between a start and an end timestamp, in seconds from the recording's start.
    const base = (r.seek * 160) / SAMPLE_RATE;
    let start: number | undefined;
    let text: number[] = [];
    for (let i = 0; i < keep; i++) {
      const t = toks[i]!;
      if (t >= tb) {
        const time = base + (t - tb) * TIME_PRECISION;
        if (start === undefined) start = time;
        else {
          if (text.length > 0) r.segments.push({ id: r.segments.length, seek: r.seek, start, end: time, text: tokenizer.decode(text, { skipSpecialTokens: true }), tokens: text });
          start = isTs[i + 1] ? undefined : time;
          text = [];
        }
      } else if (t < gen.eot) text.push(t);
    }
    if (text.length > 0 && start !== undefined) {
      r.segments.push({ id: r.segments.length, seek: r.seek, start, end: Math.max(start, base + segmentFrames / 100), text: tokenizer.decode(text, { skipSpecialTokens: true }), tokens: text });
    }
    const tsOffset = Math.floor(r.seek / INPUT_STRIDE);
    for (let i = 0; i < keep; i++) r.tokens.push(toks[i]! >= tb ? Math.min(toks[i]! + tsOffset, tb + 1500) : toks[i]!);
    r.seek += offset;
    if (r.seek >= r.frames || offset <= 0) r.done = true;
  }

  private answer(r: Row): void {
    r.answered = true;
    const { gen, tokenizer } = this.m;
    const text = tokenizer.decode(r.tokens.filter((t) => t < gen.eot), { skipSpecialTokens: true });
    const tokens = Int32Array.from(r.tokens);
    r.req.send({
      outputs: [
        { name: 'text', datatype: 'BYTES', shape: [1], data: [encodeString(text)] },
        { name: 'tokens', datatype: 'INT32', shape: [tokens.length], data: tokens },
        { name: 'segments', datatype: 'BYTES', shape: [1], data: [encodeString(JSON.stringify({ duration: r.job.samples.length / SAMPLE_RATE, language: r.job.language ?? 'en', segments: r.segments }))] },
      ],
    }, true);
  }

  async unload(): Promise<void> {
    this.engine.stop();
    await this.engine.idle();
    await this.session.close();
    await Promise.all([this.enc.unload(), this.dec.unload()]);
  }
}

/** The ONNX file of `part` (`encoder_model`, `decoder_model_merged`) with the config's `variant` suffix. */
async function partFile(ctx: ModelLoadContext, part: string): Promise<string> {
  const dir = String(ctx.version);
  const variant = ctx.config.parameters?.variant?.string_value?.trim();
  const suffix = !variant || variant === 'fp32' || variant === 'model' ? '' : `_${variant.replace(/^model_/, '')}`;
  const path = `${dir}/onnx/${part}${suffix}.onnx`;
  if (!(await ctx.files.exists(path))) {
    const present = (await ctx.files.list(`${dir}/onnx`).catch(() => [])).map((e) => e.name).filter((n) => n.endsWith('.onnx'));
    throw new TsiError('INVALID_ARG', `model '${ctx.config.name}': unable to find '${path}' (a Whisper folder holds onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx; present: ${present.join(', ') || 'none'})`);
  }
  return path.slice(dir.length + 1);
}

function checkIo(io: ModelIoInfo | undefined, need: string[], file: string, model: string): void {
  if (!io) return;
  const names = new Set(io.inputs.map((i) => i.name));
  for (const n of need) {
    if (!names.has(n)) throw new TsiError('INVALID_ARG', `model '${model}': '${file}' has no input '${n}' (inputs: ${[...names].join(', ')}); expected the onnx-community Whisper export`);
  }
}

/** The `whisper` backend over the runtime's onnxruntime backend (`innerBackend`). */
export function createWhisperBackend(innerBackend: () => Promise<Backend>): Backend {
  return {
    name: 'whisper',
    async autoCompleteConfig(config: ModelConfig): Promise<ModelConfig> {
      return {
        ...config,
        input: config.input && config.input.length > 0 ? config.input : WHISPER_INPUTS,
        output: config.output && config.output.length > 0 ? config.output : WHISPER_OUTPUTS,
      };
    },
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      const onnx = await innerBackend();
      const { config, version } = ctx;
      const name = config.name ?? '';
      const dir = String(version);
      const tokJson = await readJson(ctx, `${dir}/tokenizer.json`);
      if (!tokJson) throw new TsiError('INVALID_ARG', `unable to find '${dir}/tokenizer.json' for model '${name}'`);
      const tokenizer = new Tokenizer(tokJson, (await readJson(ctx, `${dir}/tokenizer_config.json`)) ?? {});
      const hf = (await readJson(ctx, `${dir}/config.json`)) ?? {};
      if (hf.model_type !== undefined && hf.model_type !== 'whisper') {
        throw new TsiError('INVALID_ARG', `model '${name}': config.json's model_type is '${hf.model_type}', not 'whisper'`);
      }
      const gen = generationOf((await readJson(ctx, `${dir}/generation_config.json`)) ?? {}, hf, tokenizer, name);
      const pre = (await readJson(ctx, `${dir}/preprocessor_config.json`)) ?? {};
      const mels = pre.feature_size ?? hf.num_mel_bins ?? 80;
      let filters: Float64Array[] | undefined;
      if (Array.isArray(pre.mel_filters)) {
        const f = pre.mel_filters as number[][];
        // transformers writes [bins][mels]; the bank here is [mels][bins].
        filters = f.length === mels ? f.map((r) => Float64Array.from(r)) : Array.from({ length: mels }, (_, m) => Float64Array.from(f.map((r) => r[m]!)));
      }
      const heads = hf.decoder_attention_heads ?? 6;
      const dModel = hf.d_model ?? 384;
      const layers = hf.decoder_layers ?? 4;
      const encFile = await partFile(ctx, 'encoder_model');
      const decFile = await partFile(ctx, 'decoder_model_merged');
      const inner = (file: string, inputs: ModelInput[], outputs: ModelOutput[]): ModelConfig => ({
        ...config, backend: 'onnxruntime', max_batch_size: 0, default_model_filename: file, input: inputs, output: outputs, dynamic_batching: undefined,
      });
      const encConfig = inner(encFile, [{ name: 'input_features', data_type: 'TYPE_FP32', dims: [-1, mels, WINDOW_FRAMES] }], [{ name: 'last_hidden_state', data_type: 'TYPE_FP32', dims: [-1, -1, dModel] }]);
      const kv = (kind: string) => Array.from({ length: layers }, (_, l) => ['key', 'value'].map((x) => `${kind}.${l}.%.${x}`)).flat();
      const past = [...kv('past_key_values').map((n) => n.replace('%', 'decoder')), ...kv('past_key_values').map((n) => n.replace('%', 'encoder'))];
      const present = [...kv('present').map((n) => n.replace('%', 'decoder')), ...kv('present').map((n) => n.replace('%', 'encoder'))];
      const decConfig = inner(decFile, [
        { name: 'input_ids', data_type: 'TYPE_INT64', dims: [-1, -1] },
        { name: 'encoder_hidden_states', data_type: 'TYPE_FP32', dims: [-1, -1, dModel] },
        { name: 'use_cache_branch', data_type: 'TYPE_BOOL', dims: [1] },
        ...past.map((n) => ({ name: n, data_type: 'TYPE_FP32' as const, dims: [-1, -1, -1, -1] })),
      ], [
        { name: 'logits', data_type: 'TYPE_FP32', dims: [-1, -1, -1] },
        ...present.map((n) => ({ name: n, data_type: 'TYPE_FP32' as const, dims: [-1, -1, -1, -1] })),
      ]);
      checkIo(await onnx.describeModel?.(encConfig, version, ctx.files), ['input_features'], encFile, name);
      const decIo = await onnx.describeModel?.(decConfig, version, ctx.files);
      checkIo(decIo, ['input_ids', 'encoder_hidden_states', 'use_cache_branch', ...past], decFile, name);
      const headDim = dModel / heads;
      const encoderPositions = hf.max_source_positions ?? WINDOW_FRAMES / INPUT_STRIDE;
      const reserve = gen.maxLength + encoderPositions;
      // The engine's limits: rows decoding at once, and cache positions (self- and cross-attention) within kv_cache_bytes.
      const perPosition = 2 * layers * heads * headDim * 4;
      const limits: EngineLimits = {
        maxNumSeqs: intParam(config, 'max_num_seqs', 64),
        kvTokens: Math.floor(intParam(config, 'kv_cache_bytes', DEFAULT_KV_BYTES) / perPosition),
        maxPrefillTokens: intParam(config, 'max_prefill_tokens', 4096),
      };
      if (limits.kvTokens < reserve) {
        throw new TsiError('INVALID_ARG', `model '${name}': config parameter 'kv_cache_bytes' holds ${limits.kvTokens} cache positions; a window needs ${reserve} (max_length ${gen.maxLength} + ${encoderPositions} encoder positions, ${perPosition} bytes each)`);
      }
      const encoder = await onnx.loadModel({ ...ctx, config: encConfig });
      const decoder = await onnx.loadModel({ ...ctx, config: decConfig });
      const m: Loaded = { tokenizer, gen, mels, filters, layers, heads, headDim, dModel, encoder, decoder, encoderPositions, reserve, stats: new WhisperStats() };
      ctx.log.info(`model '${name}': Whisper, ${mels} mels, ${layers} decoder layers × ${heads} heads, ${gen.multilingual ? `${Object.keys(gen.langToId).length} languages` : 'English-only'}; ${encFile} + ${decFile}; in-flight decoding of up to ${limits.maxNumSeqs} windows, ${Math.floor(limits.kvTokens / reserve)} within kv_cache_bytes`);
      return {
        createInstance: async (spec: InstanceSpec) => new WhisperInstance(name, m, await encoder.createInstance(spec), await decoder.createInstance(spec), limits),
        // The config's scheduler (the dynamic batcher) hands batches to the encoder; the engine answers
        // each request later, when its last window ends, as a decoupled model's backend may.
        createScheduler: (sctx: SchedulerContext) => {
          sctx.stats.sections.set('whisper_stats', () => m.stats.toJson());
          return createScheduler({ ...sctx, decoupled: true });
        },
        unload: async () => { await Promise.all([encoder.unload(), decoder.unload()]); },
      };
    },
  };
}

/** Whether a loaded model is served by the whisper backend. */
export function isWhisperConfig(config: ModelConfig): boolean {
  return config.backend === 'whisper';
}

