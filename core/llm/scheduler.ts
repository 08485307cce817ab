/**
 * The scheduler of an `llm` model version (core's Scheduler contract): it turns each request into a
 * sequence — prompt text from `text_input`, generation parameters (params.ts), tokens, the checks
 * that answer 400 before anything runs (context length, KV room) — queues it, and lets the engines
 * (one per instance, each around its decoder session) take sequences at their step boundaries. It
 * sends each request its responses: one per text piece when the request streams (`stream: true`),
 * else one with the whole text; the last carries `finish_reason`, `num_input_tokens` and
 * `num_output_tokens` as response parameters. It keeps the model's statistics (Triton's and
 * LlmStats) and answers a client that went away with CANCELLED at the next step boundary, freeing its
 * sequence's cache.
 */

import { TsiError, asTsiError } from '../errors.js';
import { requestPrefix, type PendingRequest } from '../request.js';
import { STOPPING_MESSAGE, type Scheduler, type SchedulerContext } from '../scheduling/scheduler.js';
import { decodeString, encodeString } from '../tensor.js';
import type { Parameters, Tensor } from '../types.js';
import { Engine, type EngineLimits, type EngineSequence, type StepStats } from './engine.js';
import { Generation, type Accepted } from './generation.js';
import { readGenerationRequest, withDefaults, type GenerationDefaults } from './params.js';
import type { TokenLogprob } from './sampling.js';
import type { PromptPosition } from './prompt-logprobs.js';
import type { LlmStats } from './stats.js';
import type { Tokenizer } from './tokenizer.js';
import type { DecoderSession, DeviceUse } from './decoder.js';
import { imageElementBytes } from '../vision/image-decode.js';
import type { ImageInput, ImageProcessor } from '../vision/image-input.js';
import { imagePromptIds } from '../vision/vision-kit.js';

export interface LlmSchedulerOptions {
  sessions: DecoderSession[];
  limits: EngineLimits;
  tokenizer: Tokenizer;
  defaults: GenerationDefaults;
  maxContext: number;
  kvBytesPerToken: number;
  llm: LlmStats;
  /** A vision-language model's processor: Triton requests' `image` input goes through it. */
  vision?: ImageProcessor;
}

let nextSeq = 1;

/** The n sequences of one request: the request's last response goes out when the last of them ends. */
interface Group {
  size: number;
  /** Sequences whose last response has not gone out. */
  running: number;
  /** Sequences not yet settled by the scheduler. */
  unsettled: number;
  /** An error (or cancellation) went out: the rest are dropped silently. */
  failed: boolean;
  failure?: 'BACKEND' | 'CANCELED';
}

/** One sequence of a request: its generation, its timings, and how its responses go out. */
class Sequence implements EngineSequence {
  readonly id = nextSeq++;
  admittedNs = 0;
  followers?: Sequence[];
  images?: readonly ImageInput[];
  private lastTokenNs = 0;
  private promptText = '';
  private whole = '';
  private done = false;

  constructor(
    private readonly owner: LlmScheduler, readonly request: PendingRequest, readonly gen: Generation, readonly reserve: number,
    promptText: string, readonly group: Group,
  ) {
    this.promptText = gen.params.excludeInput ? '' : promptText;
  }

  get cancelled(): boolean {
    return this.request.cancelled || this.group.failed;
  }

  /** The response parameters that go with each piece: the choice's index, and logprobs when asked. */
  private pieceParameters(final: boolean): Parameters | undefined {
    const g = this.gen;
    const p: Parameters = {};
    if (this.group.size > 1) p.index = g.index;
    // The prompt's log-probabilities go with a request's first piece (its choices share one prompt).
    if (g.promptPositions && g.index === 0) {
      p.prompt_logprobs = this.owner.promptLogprobsJson(g.prompt, g.promptPositions);
      g.promptPositions = undefined;
    }
    if (g.params.logprobs !== undefined) p.logprobs = JSON.stringify(g.takeLogprobs().map((l) => this.owner.logprobJson(l)));
    if (final) {
      if (g.params.logprobs !== undefined) p.cumulative_logprob = g.cumulativeLogprob;
    }
    return Object.keys(p).length > 0 ? p : undefined;
  }

  accepted(acc: Accepted, first: boolean): void {
    const now = this.owner.ctx.clock.nowNs();
    const llm = this.owner.llm;
    // A request's other choices share the first one's prompt run: its tokens count once.
    if (first) {
      llm.firstToken(now - this.request.receivedNs, this.gen.index === 0 ? this.gen.prompt.length : 0);
      // The KV gauges with this sequence's reservation before its first answer goes out (an ORCA header reads them then).
      this.owner.gauges();
    }
    if (first && this.gen.index === 0 && this.owner.opts.limits.prefixCaching) llm.prefixLookup(this.gen.prompt.length, this.gen.cachedTokens);
    else llm.interTokenGap(now - this.lastTokenNs);
    this.lastTokenNs = now;
    llm.tokens(1);
    const stream = this.gen.params.stream;
    let text = acc.delta;
    if (this.promptText) {
      text = this.promptText + text;
      this.promptText = '';
    }
    if (!stream) {
      this.whole += text;
      if (!acc.finish) return;
      text = this.whole;
    }
    if (!acc.finish && text.length === 0) return;
    if (this.group.failed) return;
    const finish = acc.finish !== undefined;
    const extra = this.pieceParameters(finish);
    const parameters: Parameters | undefined = finish
      ? { finish_reason: acc.finish!, num_input_tokens: this.gen.prompt.length, num_cached_tokens: this.gen.cachedTokens, num_output_tokens: this.gen.tokens.length, ...(this.gen.stopString !== undefined ? { stop_reason: this.gen.stopString } : {}),
        ...(this.gen.thinkEndAt !== undefined ? { think_end_at: this.gen.thinkEndAt } : {}), ...extra }
      : extra;
    const final = finish && --this.group.running === 0;
    this.request.send({ outputs: [textTensor(text)], parameters }, final);
    if (finish) this.owner.finished(this, undefined);
  }

  dropped(err?: TsiError): void {
    if (!this.group.failed) {
      this.group.failed = true;
      this.group.failure = err ? 'BACKEND' : 'CANCELED';
      const e = err ?? new TsiError('CANCELLED', `${requestPrefix(this.request.id)}Request was cancelled`);
      this.request.send(e, true);
    }
    this.owner.finished(this, this.group.failure);
  }

  /** Idempotent: the scheduler settles each sequence once. */
  settle(): boolean {
    if (this.done) return false;
    this.done = true;
    return true;
  }
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** A token's text, or its bytes written \xNN when they are not whole UTF-8 (as OpenAI writes them). */
function tokenText(bytes: Uint8Array): string {
  try {
    return UTF8.decode(bytes);
  } catch {
    return [...bytes].map((b) => `\\x${b.toString(16).padStart(2, '0')}`).join('');
  }
}

function textTensor(text: string): Tensor {
  return { name: 'text_output', datatype: 'BYTES', shape: [1], data: [encodeString(text)] };
}

export class LlmScheduler implements Scheduler {
  readonly engines: Engine[];
  readonly llm: LlmStats;
  private readonly queue: Sequence[] = [];
  private stopping = false;
  /** Triton requests whose `image` input was made ready: the prompt to tokenize and the images. */
  private readonly tritonImages = new WeakMap<PendingRequest, { prompt: string; images: ImageInput[] }>();
  private readonly imagesRead = new WeakSet<PendingRequest>();
  private drained?: () => void;
  private active = 0;

  constructor(readonly ctx: SchedulerContext, readonly opts: LlmSchedulerOptions) {
    this.llm = opts.llm;
    const source = {
      peek: () => this.queue[0],
      shift: () => {
        const s = this.queue.shift();
        if (s) {
          s.admittedNs = this.ctx.clock.nowNs();
          for (const f of s.followers ?? []) f.admittedNs = s.admittedNs;
          this.ctx.stats.pending--;
          this.llm.waiting--;
          this.llm.running += s.group.size;
          this.gauges();
        }
        return s;
      },
    };
    this.engines = opts.sessions.map((session) => new Engine(session, opts.limits, source, (s) => this.stepped(s)));
    this.llm.maxNumSeqs = opts.limits.maxNumSeqs * this.engines.length;
    this.llm.kvTokensMax = opts.limits.kvTokens * this.engines.length;
    this.llm.kvBytesPerToken = opts.kvBytesPerToken;
    this.llm.gauges();
  }

  enqueue(request: PendingRequest, nowNs?: number): void {
    if (this.stopping) {
      request.send(new TsiError('UNAVAILABLE', STOPPING_MESSAGE), true);
      return;
    }
    const image = request.inputs.get('image');
    if (image && !this.tritonImages.has(request) && !this.imagesRead.has(request)) {
      // Decoding and preprocessing are asynchronous: the request joins the queue once they are done.
      this.imagesRead.add(request);
      this.imagesOf(request, image).then(() => this.enqueue(request, nowNs), (err) => this.refuse(request, err));
      return;
    }
    request.enqueuedNs = nowNs ?? this.ctx.clock.nowNs();
    let seq: Sequence;
    try {
      seq = this.sequenceOf(request);
    } catch (err) {
      this.refuse(request, err);
      return;
    }
    this.ctx.stats.pending++;
    this.ctx.stats.inflight++;
    this.active++;
    this.llm.waiting++;
    this.queue.push(seq);
    request.onCancel(() => this.cancelled(seq));
    this.gauges();
    for (const e of this.engines) e.wake();
  }

  /** Refused before it ran: a failure of the request itself, as Triton counts validation errors. */
  private refuse(request: PendingRequest, err: unknown): void {
    const e = asTsiError(err);
    this.ctx.stats.recordFailure(this.ctx.clock.nowNs() - request.receivedNs, 'OTHER', this.ctx.clock.epochMs());
    request.send(new TsiError(e.code, requestPrefix(request.id) + e.message), true);
  }

  /**
   * A Triton request's images (the `image` input of Triton's vLLM backend: one image an element),
   * made ready by the model's processor, and its `text_input` with each `<image>` expanded as the
   * chat route expands the template's.
   */
  private async imagesOf(request: PendingRequest, t: Tensor): Promise<void> {
    const name = this.ctx.modelName;
    const vision = this.opts.vision;
    if (!vision) throw new TsiError('INVALID_ARG', `model '${name}' takes no 'image' input (it is not a vision-language model)`);
    if (t.datatype !== 'BYTES') throw new TsiError('INVALID_ARG', `input 'image' of model '${name}' must be BYTES (an image, its base64 or a data: URL an element), not ${t.datatype}`);
    const text = request.inputs.get('text_input');
    // Without a prompt, sequenceOf says what is missing.
    if (text?.datatype !== 'BYTES' || (text.data as Uint8Array[]).length === 0) return;
    const prompt = decodeString((text.data as Uint8Array[])[0]!);
    const images = [];
    const elements = t.data as Uint8Array[];
    for (let i = 0; i < elements.length; i++) {
      const what = `input 'image'[${i}]`;
      images.push(await vision.prepare(imageElementBytes(elements[i]!, what), what));
    }
    const holds = prompt.split(vision.imageToken).length - 1;
    if (holds !== images.length) {
      throw new TsiError('INVALID_ARG', `'text_input' of model '${name}' holds ${holds} '${vision.imageToken}' for the ${images.length} image(s) of input 'image': write '${vision.imageToken}' where each image goes, as the model's chat template does`);
    }
    this.tritonImages.set(request, { prompt: vision.expandPrompt(prompt, images), images });
  }

  private sequenceOf(request: PendingRequest): Sequence {
    const text = request.inputs.get('text_input');
    if (!text || text.datatype !== 'BYTES' || (text.data as Uint8Array[]).length === 0) {
      throw new TsiError('INVALID_ARG', `model '${this.ctx.modelName}' needs the prompt in 'text_input' (a string)`);
    }
    const prompt = decodeString((text.data as Uint8Array[])[0]!);
    // A Triton request's images: the expanded prompt is what is tokenized, the request's own what is echoed.
    const triton = this.tritonImages.get(request);
    const get = (name: string): unknown => {
      const t = request.inputs.get(name);
      if (t) {
        const v = t.datatype === 'BYTES' ? decodeString((t.data as Uint8Array[])[0]!) : (t.data as ArrayLike<unknown>)[0];
        return t.datatype === 'BOOL' ? Boolean(v) : v;
      }
      return request.parameters[name];
    };
    // Parsed already when a front end read them from its own fields (the OpenAI API); else from the request's parameters.
    const asked = request.generation ?? readGenerationRequest(get);
    const params = withDefaults(asked, this.opts.defaults);
    const encoded = this.opts.tokenizer.encode(triton?.prompt ?? prompt, { addSpecialTokens: asked.addSpecialTokens !== false });
    const images = asked.images ?? triton?.images;
    let ids = images?.length ? imagePromptIds(encoded, images) : encoded;
    // Image positions are features, not tokens of the vocabulary: there is no log-probability to give.
    if (images?.length && params.promptLogprobs !== undefined) throw new TsiError('INVALID_ARG', `parameter 'prompt_logprobs' is not supported with images in the prompt (model '${this.ctx.modelName}')`);
    const ctxLen = this.opts.maxContext;
    const vocab = this.opts.tokenizer.vocabSize;
    const outside = params.logitBias?.find(([t]) => t >= vocab);
    if (outside) throw new TsiError('INVALID_ARG', `parameter 'logit_bias' names token ${outside[0]}, outside the vocabulary of model '${this.ctx.modelName}' (${vocab} tokens)`);
    // vLLM's truncate_prompt_tokens: the prompt's last N tokens (-1: as many as leave room for max_tokens).
    if (params.truncatePromptTokens !== undefined) {
      const keep = params.truncatePromptTokens === -1 ? Math.max(1, ctxLen - (params.maxTokens ?? 1)) : params.truncatePromptTokens;
      if (ids.length > keep) ids = ids.slice(ids.length - keep);
    }
    if (ids.length === 0) throw new TsiError('INVALID_ARG', 'the prompt is empty');
    if (ids.length >= ctxLen) {
      throw new TsiError('INVALID_ARG', `This model's maximum context length is ${ctxLen} tokens. However, the prompt is ${ids.length} tokens long, which leaves no room for the completion. Please shorten the prompt.`);
    }
    if (params.maxTokens !== undefined && ids.length + params.maxTokens > ctxLen) {
      throw new TsiError('INVALID_ARG', `This model's maximum context length is ${ctxLen} tokens. However, you requested ${ids.length + params.maxTokens} tokens (${ids.length} in the prompt, ${params.maxTokens} for the completion). Please reduce the prompt or max_tokens.`);
    }
    const maxTokens = Math.min(params.maxTokens ?? ctxLen - ids.length, ctxLen - ids.length);
    const reserve = ids.length + maxTokens;
    const n = params.n;
    if (n > 1 && !params.stream) {
      throw new TsiError('INVALID_ARG', `parameter 'n' > 1 needs 'stream': true (generate_stream): each choice's responses carry its 'index'`);
    }
    if (!this.engines.some((e) => e.fits(n * reserve))) {
      throw new TsiError('INVALID_ARG', `the request needs ${n * reserve} tokens of KV cache (${n > 1 ? `${n} × ` : ''}${ids.length} in the prompt, ${maxTokens} for the completion), more than an instance of model '${this.ctx.modelName}' holds (${this.opts.limits.kvTokens}; config parameter kv_cache_bytes); lower max_tokens`);
    }
    const group: Group = { size: n, running: n, unsettled: n, failed: false };
    const make = (i: number) => new Sequence(this, request, new Generation(this.opts.tokenizer, ids, params, maxTokens, this.opts.defaults.eosTokenIds, i), reserve, prompt, group);
    const lead = make(0);
    if (images?.length) lead.images = images;
    if (n > 1) lead.followers = Array.from({ length: n - 1 }, (_, i) => make(i + 1));
    return lead;
  }

  /**
   * One chosen token's log-probability as the responses carry it (JSON, per token): its id, text
   * (bytes that are not whole UTF-8 shown as \\xNN), UTF-8 bytes, and the k likeliest tokens likewise.
   */
  logprobJson(l: TokenLogprob): unknown {
    const tok = this.opts.tokenizer;
    const one = (id: number, logprob: number) => {
      const bytes = tok.tokenBytes(id, false);
      return { token_id: id, token: tokenText(bytes), bytes: [...bytes], logprob: Number.isFinite(logprob) ? logprob : -9999 };
    };
    return { ...one(l.token, l.logprob), top_logprobs: l.top.map((t) => one(t.token, t.logprob)) };
  }

  /**
   * The prompt's log-probabilities as vLLM returns them (JSON text): a list with null for the first
   * token, then for each token a map from token id to {logprob, rank, decoded_token} holding the
   * prompt token and the k likeliest (the prompt token once when it is among them). vLLM's Python
   * dict keeps the prompt token first; a JavaScript object orders integer keys, so here the keys come
   * in id order (a JSON object's order carries no meaning).
   */
  promptLogprobsJson(prompt: readonly number[], positions: readonly PromptPosition[]): string {
    const tok = this.opts.tokenizer;
    // vLLM decodes each token alone, as the tokenizer's decode([id]) does, and clamps -inf to -9999.
    const entry = (logprob: number, rank: number, id: number) => ({ logprob: Number.isFinite(logprob) ? logprob : -9999, rank, decoded_token: tok.decode([id], { skipSpecialTokens: false }) });
    const out: (Record<string, unknown> | null)[] = [null];
    positions.forEach((p, j) => {
      const id = prompt[j + 1]!;
      const m: Record<string, unknown> = { [id]: entry(p.logprob, p.rank, id) };
      p.top.forEach(([t, lp], r) => {
        if (t !== id) m[t] = entry(lp, r + 1, t);
      });
      out.push(m);
    });
    return JSON.stringify(out);
  }

  /** The client went away: a queued sequence is answered now; a running one at the next step boundary. */
  private cancelled(seq: Sequence): void {
    const i = this.queue.indexOf(seq);
    if (i < 0) {
      // Running: wake its engine in case it is idle with only this to drop.
      for (const e of this.engines) e.wake();
      return;
    }
    this.queue.splice(i, 1);
    this.ctx.stats.pending--;
    this.llm.waiting--;
    this.llm.running += seq.group.size; // finished() counts them down
    for (const s of [seq, ...(seq.followers ?? [])]) s.dropped();
  }

  /** A sequence's final response went out (or its request failed or was cancelled). */
  finished(seq: Sequence, failure: 'BACKEND' | 'CANCELED' | undefined): void {
    if (!seq.settle()) return;
    this.llm.running--;
    // The request's own statistics once, when its last sequence ends.
    if (--seq.group.unsettled > 0) {
      this.gauges();
      return;
    }
    failure = seq.group.failure ?? failure;
    const { stats, clock } = this.ctx;
    const now = clock.nowNs();
    const total = now - seq.request.receivedNs;
    if (failure) stats.recordFailure(total, failure, clock.epochMs());
    else {
      this.llm.finished(total);
      const queue = (seq.admittedNs || now) - seq.request.enqueuedNs;
      stats.recordSuccess(total, queue, { input: 0, infer: now - (seq.admittedNs || now), output: 0 }, clock.epochMs());
    }
    stats.inflight--;
    this.gauges();
    if (--this.active === 0 && this.stopping) this.drained?.();
  }

  private stepped(s: StepStats): void {
    if (s.rows > 0) {
      this.ctx.stats.recordExecution(s.rows, { input: s.inputNs, infer: s.inferNs, output: s.outputNs });
      this.llm.steps++;
      if (s.kind === 'decode') {
        const d = this.llm.decodeSplit;
        const sampling = s.samplingNs ?? 0;
        d.steps++;
        d.graphNs += Math.round(s.inferNs);
        d.inputNs += Math.round(s.inputNs);
        d.samplingNs += Math.round(sampling);
        d.streamingNs += Math.round(s.outputNs - sampling);
        d.idleNs += Math.round(s.idleNs ?? 0);
      }
    }
    this.llm.joined += s.joined ?? 0;
    this.gauges();
  }

  gauges(): void {
    let reserved = 0;
    let held = 0;
    let prefix = 0;
    let device: DeviceUse | undefined;
    const add = (a: Record<string, number>, b: Record<string, number>) => {
      for (const [k, v] of Object.entries(b)) a[k] = (a[k] ?? 0) + v;
    };
    for (const e of this.engines) {
      reserved += e.reservedTokens;
      held += e.kvBytes;
      prefix += e.prefixBytes;
      if (!e.device) continue;
      device ??= { tensors: 0, toDevice: {}, toHost: {} };
      device.tensors += e.device.tensors;
      add(device.toDevice, e.device.toDevice);
      add(device.toHost, e.device.toHost);
    }
    if (device) this.llm.deviceUse(device);
    this.llm.prefixBytes = prefix;
    this.llm.kvTokensReserved = reserved;
    this.llm.kvBytesHeld = held;
    this.llm.gauges();
  }

  queued(): number {
    return this.queue.length;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.active > 0) await new Promise<void>((r) => (this.drained = r));
    for (const e of this.engines) e.stop();
    await Promise.all(this.engines.map((e) => e.idle()));
  }
}
