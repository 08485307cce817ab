/**
 * In-flight (continuous) batching over one decoder session: the token loop of one model instance.
 * Each iteration is one model step at a step boundary:
 * 1. sequences whose client went away are dropped (their caches are freed with the next step);
 * 2. waiting requests are admitted, oldest first, while the instance has a sequence slot
 *    (`max_num_seqs`) and KV-cache room for the request's whole reservation (prompt + max_tokens),
 *    and are *prefilled* together in one step, which gives each its first token;
 * 3. otherwise every running sequence advances by one token in one *decode* step.
 * A sequence that finishes (stop, length) leaves at once: its reservation is released for the queue
 * and its cache goes with the next step. The reservation makes admission exact: an admitted sequence
 * always has the room to finish, so nothing is ever evicted or recomputed.
 *
 * Two things keep the model busy and first tokens quick. A step's tokens are chosen (sampling, stop
 * checks: what the next step needs) before the next step is sent, but handed to their clients
 * (detokenized text, one response each) only after it was sent, so that work overlaps the model's.
 * And when the session runs prefills apart from decoding (`concurrentPrefill`), admission and
 * prefill run in a loop of their own: a new request is prefilled at once, not after the decode step
 * in flight, and joins the running batch at the next decode step.
 *
 * When no running sequence needs a grammar mask or log-probabilities and the session can
 * (`autoDecode`), the decode steps run back to back where the model is (sampled rows drawn there
 * from their own copies of the PRNG and the penalties' history, the PRNG's state coming back with
 * each step's tokens) and the engine only accepts and hands out each step's tokens as
 * they come, steering that loop: a sequence ended here (stop string) or cancelled is dropped from it,
 * and sequences that want to join stop it after its current step (autoRun).
 *
 * The engine is platform-neutral; the session behind it runs the model wherever the runtime put it.
 */

import type { ImageInput } from '../vision/image-input.js';
import { TsiError, asTsiError } from '../errors.js';
import type { AutoSample, AutoTokens, DecoderSession, DeviceUse, PrefillPart, StepRequest, StepResult } from './decoder.js';
import type { Accepted, Generation } from './generation.js';
import type { PromptPosition } from './prompt-logprobs.js';

/**
 * Whether every row's token is its argmax, so the session may choose them where the logits are (a
 * worker thread: the logits then never cross to this one).
 */
const allGreedy = (seqs: readonly EngineSequence[]) => seqs.every((s) => s.gen.argmaxOnly);

/** A sequence's generation in an auto decode (the engine starts one only when every row has it). */
const autoGen = (s: EngineSequence): Generation => s.gen.autoDecoding!;

/** A sampled sequence's state as an auto decode takes it (copies: the loop updates its own). */
const autoSample = (s: EngineSequence): AutoSample | null => {
  const g = autoGen(s);
  if (g.argmaxOnly) return null;
  const p = g.params;
  return {
    params: { temperature: p.temperature, topK: p.topK, topP: p.topP, repetitionPenalty: p.repetitionPenalty, presencePenalty: p.presencePenalty, frequencyPenalty: p.frequencyPenalty, minP: p.minP, logitBias: p.logitBias },
    random: g.random.state, seen: [...g.history.seen], counts: [...g.history.counts], suppressEnd: Math.max(0, p.minTokens - g.tokens.length),
  };
};

/** A prefill row: the prompt, once for a request's n sequences (its cache copied to the followers'). */
const prefillRow = (s: EngineSequence) => ({
  seq: s.id, tokens: [...s.gen.prompt], ...(s.followers?.length ? { forks: s.followers.map((f) => f.id) } : {}), ...(s.images ? { images: s.images } : {}),
  ...(s.gen.promptLogprobs !== undefined ? { promptLogprobs: s.gen.promptLogprobs } : {}),
});

/** The KV tokens a request's sequences reserve together. */
const reserveOf = (group: readonly EngineSequence[]) => group.reduce((n, x) => n + x.reserve, 0);

/** The sequences a prefill row's logits serve: the one admitted and its followers. */
const withFollowers = (s: EngineSequence) => (s.followers?.length ? [s, ...s.followers] : [s]);

/**
 * What the engine needs of a sequence's output: the tokens it starts from (its prompt, or a Whisper
 * window's forced tokens) and those it chose, the choice of a token from a row of logits and its
 * acceptance (text and whether it ends). `argmaxOnly`: the choice is the row's argmax, so a session
 * may make it where the logits are. `autoDecoding`: the generation, when a session's own decode
 * loop may choose its tokens (auto-decode.ts); an LLM's Generation is one.
 */
export interface StepGeneration {
  readonly prompt: readonly number[];
  readonly tokens: readonly number[];
  readonly argmaxOnly: boolean;
  /** Prompt tokens whose caches came from the prefix cache (set at prefill). */
  cachedTokens: number;
  choose(row: Float32Array): number;
  accept(token: number): Accepted;
  readonly autoDecoding?: Generation;
  /** vLLM's prompt_logprobs: how many alternatives each prompt position reports (llm generations only). */
  readonly promptLogprobs?: number;
  /** Those positions' log-probabilities, set at prefill. */
  promptPositions?: PromptPosition[];
}

/** A sequence as the engine sees it; the scheduler owns the request behind it. */
export interface EngineSequence {
  readonly id: number;
  readonly gen: StepGeneration;
  /** KV tokens reserved while it runs: prompt + the tokens it may generate. */
  readonly reserve: number;
  readonly cancelled: boolean;
  /**
   * The other sequences of a request with n > 1 (on the first only): admitted with it, prefilled with
   * it (one prompt run, its cache copied), each then running on its own.
   */
  readonly followers?: readonly EngineSequence[];
  /** A vision-language prompt's images (its image tokens are their key ids). */
  readonly images?: readonly ImageInput[];
  /** A token was chosen: the text it completes and whether the sequence is done. */
  accepted(acc: Accepted, first: boolean): void;
  /** It left without finishing: cancelled (err undefined) or failed. */
  dropped(err?: TsiError): void;
}

/** Where waiting requests come from (the scheduler's queue, shared by the model's instances). */
export interface SequenceSource {
  peek(): EngineSequence | undefined;
  shift(): EngineSequence | undefined;
}

export interface EngineLimits {
  /** Sequences running at once. */
  maxNumSeqs: number;
  /** KV-cache tokens (all running sequences' reservations) this instance may hold. */
  kvTokens: number;
  /** Prompt tokens (rows × longest prompt, padding counted) one prefill step may take. */
  maxPrefillTokens: number;
  /** Prompts' caches kept for later prompts that share their prefix, in the room reservations leave. */
  prefixCaching?: boolean;
}

export interface StepStats {
  kind: 'prefill' | 'decode' | 'free';
  rows: number;
  inputNs: number;
  inferNs: number;
  /** Sampling and text handling after the run. */
  outputNs: number;
  /** Of `outputNs`, the tokens chosen on this thread (sampling); the rest is streaming (text, sending). */
  samplingNs?: number;
  /**
   * A decode step that followed another: the wall time between their reports not spent in this
   * step's inputs, run and output (waiting for the thread, messages, the worker's own sampling).
   */
  idleNs?: number;
  kvBytes: number;
  /** Prefilled sequences that joined sequences already decoding (what in-flight batching is). */
  joined?: number;
}

/** Sequences admitted, followers counted. */
const seqCount = (seqs: readonly EngineSequence[]) => seqs.reduce((n, s) => n + 1 + (s.followers?.length ?? 0), 0);

export class Engine {
  private readonly running: EngineSequence[] = [];
  private pendingFree: number[] = [];
  private reserved = 0;
  /** The step loop runs (decode, free, and prefill unless the session prefills apart). */
  private looping = false;
  /** The prefill loop of a `concurrentPrefill` session runs. */
  private prefilling = false;
  private stopped = false;
  /** An auto decode (the session steps by itself) is in flight. */
  private auto = false;
  private idleWaiters: (() => void)[] = [];
  kvBytes = 0;
  /** What the session holds on its device and has moved across the bus (a session on a GPU). */
  device?: DeviceUse;
  /** Bytes the session's prefix cache holds (as its last prefill said). */
  prefixBytes = 0;

  /** When the last decode step was reported (ms), while decode steps follow each other. */
  private lastDecodeMs?: number;
  private readonly onStep: (s: StepStats) => void;

  constructor(
    readonly session: DecoderSession, readonly limits: EngineLimits, private readonly source: SequenceSource,
    onStep: (s: StepStats) => void,
  ) {
    this.onStep = (s) => {
      const now = performance.now();
      if (s.kind === 'decode' && this.lastDecodeMs !== undefined) s.idleNs = Math.max(0, (now - this.lastDecodeMs) * 1e6 - s.inputNs - s.inferNs - s.outputNs);
      // A prefill (or free) between decode steps starts a new chain: its time is not the decoder's idling.
      this.lastDecodeMs = s.kind === 'decode' && this.running.length > 0 ? now : undefined;
      onStep(s);
    };
  }

  get runningCount(): number {
    return this.running.length;
  }

  get reservedTokens(): number {
    return this.reserved;
  }

  /** Whether a request reserving `tokens` could ever run here. */
  fits(tokens: number): boolean {
    return tokens <= this.limits.kvTokens;
  }

  /** New work may be waiting: run the loops that are not running. */
  wake(): void {
    if (this.stopped) return;
    this.wakePrefill();
    this.yieldToAdmission();
    if (this.looping) return;
    this.looping = true;
    void this.loop();
  }

  /**
   * A session that prefills in the step loop admits only between its steps: an auto decode in flight
   * ends after its current step when the oldest waiting request could be admitted.
   */
  private yieldToAdmission(): void {
    if (!this.auto || this.session.concurrentPrefill) return;
    const s = this.source.peek();
    if (!s) return;
    if (s.cancelled || this.joins(withFollowers(s), 0)) this.session.steer?.({ stop: true });
  }

  private wakePrefill(): void {
    if (!this.session.concurrentPrefill || this.prefilling || this.stopped || !this.source.peek()) return;
    this.prefilling = true;
    void this.prefillLoop();
  }

  /** Resolves when the loops have nothing left to do. */
  idle(): Promise<void> {
    if (!this.looping && !this.prefilling) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  /** No more steps after the current ones. */
  stop(): void {
    this.stopped = true;
    if (this.auto) this.session.steer?.({ stop: true });
  }

  private settled(): void {
    if (this.looping || this.prefilling) return;
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const f of w) f();
  }

  private release(s: EngineSequence): void {
    this.reserved -= s.reserve;
    this.pendingFree.push(s.id);
  }

  private async loop(): Promise<void> {
    // The previous step's tokens, handed out once the next step is on its way.
    let deliver: (() => void) | undefined;
    try {
      while (!this.stopped) {
        for (let i = this.running.length - 1; i >= 0; i--) {
          const s = this.running[i]!;
          if (!s.cancelled) continue;
          this.running.splice(i, 1);
          this.release(s);
          s.dropped();
        }
        const admit = this.session.concurrentPrefill ? [] : this.admit();
        let req: StepRequest;
        let seqs: EngineSequence[] = [];
        if (admit.length > 0) {
          req = { kind: 'prefill', free: this.takeFree(), rows: admit.map(prefillRow), greedy: allGreedy(admit.flatMap(withFollowers)), ...this.prefixRoom() };
          seqs = admit;
        } else if (this.running.length > 0 && this.session.autoDecode && this.running.every((s) => s.gen.autoDecoding)) {
          deliver?.();
          deliver = undefined;
          await this.autoRun();
          this.wakePrefill();
          continue;
        } else if (this.running.length > 0) {
          req = { kind: 'decode', free: this.takeFree(), rows: this.running.map((s) => ({ seq: s.id, token: s.gen.tokens[s.gen.tokens.length - 1]! })), greedy: allGreedy(this.running) };
          seqs = [...this.running];
        } else if (this.pendingFree.length > 0) req = { kind: 'free', free: this.takeFree() };
        else if (deliver) {
          // Nothing to run until these tokens are out (their clients may be waiting to send more).
          deliver();
          deliver = undefined;
          continue;
        } else break;
        const result = this.run(req);
        deliver?.();
        deliver = this.settle(req, seqs, await result);
        // Finished sequences may have made room for waiting ones.
        this.wakePrefill();
      }
    } finally {
      deliver?.();
      this.looping = false;
      this.settled();
    }
  }

  /** Admission and prefill of a `concurrentPrefill` session, beside the step loop. */
  private async prefillLoop(): Promise<void> {
    try {
      while (!this.stopped) {
        const admit = this.admit();
        if (admit.length === 0) break;
        const req: StepRequest = { kind: 'prefill', free: [], rows: admit.map(prefillRow), greedy: allGreedy(admit.flatMap(withFollowers)), ...this.prefixRoom() };
        // Rows the session reported early (a prefill run in parts) start streaming at once.
        const reported = new Set<number>();
        const part = (rows: readonly number[], result: StepResult) => {
          for (const i of rows) reported.add(i);
          const deliver = this.settle(req, rows.map((i) => admit[i]!), result);
          this.wake();
          deliver();
        };
        const outcome = await this.run(req, part);
        if (reported.size > 0 && !('error' in outcome)) {
          this.kvBytes = outcome.kvBytes;
          this.device = outcome.device ?? this.device;
          if (outcome.prefixBytes !== undefined) this.prefixBytes = outcome.prefixBytes;
          continue;
        }
        // A failure after some parts fails only the rows not yet reported.
        const deliver = this.settle(req, admit.filter((_, i) => !reported.has(i)), outcome);
        // The new sequences (or the caches of those that already finished) go with the next step.
        this.wake();
        deliver();
      }
    } finally {
      this.prefilling = false;
      this.settled();
    }
  }

  /**
   * No running sequence needs a grammar mask or log-probabilities: the session decodes them step after
   * step by itself and reports each step's tokens, which are accepted and handed out as they come.
   * A sequence that ends here (a stop string) or was cancelled is dropped from the session's loop;
   * sequences that want to join (prefilled meanwhile, or waiting for admission) stop it after the
   * step in flight, and the next iteration of the step loop takes them in.
   */
  private async autoRun(): Promise<void> {
    const seqs = [...this.running];
    const by = new Map(seqs.map((s) => [s.id, s]));
    const sample = allGreedy(seqs) ? undefined : seqs.map(autoSample);
    const req: StepRequest = {
      kind: 'decode', free: this.takeFree(), rows: seqs.map((s) => ({ seq: s.id, token: s.gen.tokens[s.gen.tokens.length - 1]! })), greedy: true,
      auto: {
        remaining: seqs.map((s) => autoGen(s).maxTokens - s.gen.tokens.length), endIds: seqs.map((s) => [...autoGen(s).endIds]),
        ...(sample ? { sample } : {}),
      },
    };
    const sampled = new Set(seqs.filter((_, k) => sample?.[k]).map((s) => s.id));
    const leave = (s: EngineSequence) => {
      by.delete(s.id);
      this.running.splice(this.running.indexOf(s), 1);
      this.release(s);
    };
    const onTokens: AutoTokens = (ids, tokens, step) => {
      const t0 = performance.now();
      const drop: number[] = [];
      ids.forEach((id, k) => {
        const s = by.get(id);
        if (!s) return;
        if (s.cancelled) {
          leave(s);
          drop.push(id);
          s.dropped();
          return;
        }
        // The loop drew from its copy of the PRNG: this one goes on from where that one is.
        if (step.random && sampled.has(id)) autoGen(s).random.state = step.random[k]!;
        const acc = s.gen.accept(tokens[k]!);
        if (acc.finish) {
          leave(s);
          drop.push(id);
        }
        s.accepted(acc, false);
      });
      if (drop.length > 0) {
        this.session.steer?.({ free: drop });
        // Their reservations are free: waiting requests may fit now.
        this.wakePrefill();
        this.yieldToAdmission();
      }
      this.kvBytes = step.kvBytes;
      this.device = step.device ?? this.device;
      this.onStep({ kind: 'decode', rows: ids.length, inputNs: step.inputNs, inferNs: step.inferNs, outputNs: (performance.now() - t0) * 1e6, kvBytes: step.kvBytes });
    };
    this.auto = true;
    let outcome: StepResult | { error: unknown };
    try {
      const running = this.run(req, undefined, onTokens);
      this.yieldToAdmission();
      outcome = await running;
    } finally {
      this.auto = false;
    }
    if ('error' in outcome) {
      const message = `the decoder failed: ${asTsiError(outcome.error).message}`;
      for (const s of [...by.values()]) {
        leave(s);
        s.dropped(new TsiError('INTERNAL', message));
      }
      return;
    }
    this.kvBytes = outcome.kvBytes;
    this.device = outcome.device ?? this.device;
  }

  /**
   * Whether a request's sequences (`group`) may join the running ones and `admitted` more: within
   * max_num_seqs (a group larger than that still runs, alone) and the KV budget for its reservation.
   */
  private joins(group: readonly EngineSequence[], admitted: number): boolean {
    const seqs = this.running.length + admitted;
    return (seqs + group.length <= this.limits.maxNumSeqs || seqs === 0) && this.reserved + reserveOf(group) <= this.limits.kvTokens;
  }

  private admit(): EngineSequence[] {
    const out: EngineSequence[] = [];
    let longest = 0;
    for (;;) {
      const s = this.source.peek();
      if (!s || this.running.length + seqCount(out) >= this.limits.maxNumSeqs) break;
      if (s.cancelled) {
        this.source.shift();
        s.dropped();
        continue;
      }
      const group = withFollowers(s);
      if (!this.joins(group, seqCount(out))) break;
      const reserve = reserveOf(group);
      const len = Math.max(longest, s.gen.prompt.length);
      if (out.length > 0 && (out.length + 1) * len > this.limits.maxPrefillTokens) break;
      this.source.shift();
      longest = len;
      this.reserved += reserve;
      out.push(s);
    }
    return out;
  }

  /**
   * The prefix cache's room, sent with each prefill: the KV budget less what running sequences reserve
   * (those just admitted included). Reservations grow only by admission, which comes with a prefill,
   * so cache and reservations together never pass the budget.
   */
  private prefixRoom(): { prefixRoom?: number } {
    return this.limits.prefixCaching ? { prefixRoom: Math.max(0, this.limits.kvTokens - this.reserved) } : {};
  }

  private takeFree(): number[] {
    const f = this.pendingFree;
    this.pendingFree = [];
    return f;
  }

  private run(req: StepRequest, onPart?: PrefillPart, onTokens?: AutoTokens): Promise<StepResult | { error: unknown }> {
    return this.session.step(req, onPart, onTokens).catch((error: unknown) => ({ error }));
  }

  /**
   * Chooses each row's token and settles who runs on (what the next step needs), and returns the
   * rest: handing the tokens (or the failure) to their sequences.
   */
  private settle(req: StepRequest, seqs: EngineSequence[], outcome: StepResult | { error: unknown }): () => void {
    const first = req.kind === 'prefill';
    if ('error' in outcome) {
      // The session failed: its sequences cannot go on (their caches are in doubt), others never ran.
      const message = `the decoder failed: ${asTsiError(outcome.error).message}`;
      if (first) seqs = seqs.flatMap(withFollowers);
      for (const s of seqs) {
        const i = this.running.indexOf(s);
        if (i >= 0) this.running.splice(i, 1);
        this.release(s);
      }
      return () => {
        for (const s of seqs) s.dropped(new TsiError('INTERNAL', message));
      };
    }
    const result = outcome;
    this.kvBytes = result.kvBytes;
    this.device = result.device ?? this.device;
    if (result.prefixBytes !== undefined) this.prefixBytes = result.prefixBytes;
    if (req.kind === 'free') {
      this.onStep({ kind: 'free', rows: 0, inputNs: result.inputNs, inferNs: 0, outputNs: 0, kvBytes: result.kvBytes });
      return () => {};
    }
    const t0 = performance.now();
    const V = result.vocab;
    const { logits, tokens } = result;
    // (sequence, its row) pairs: a prefill row also serves its followers, each drawing its own token.
    const pairs: [EngineSequence, number][] = [];
    seqs.forEach((s, r) => {
      for (const x of first ? withFollowers(s) : [s]) pairs.push([x, r]);
    });
    const out: (Accepted | undefined)[] = [];
    const decoding = first ? this.running.length : 0;
    let joined = 0;
    for (let k = 0; k < pairs.length; k++) {
      const [s, r] = pairs[k]!;
      if (s.cancelled) {
        if (!first) this.running.splice(this.running.indexOf(s), 1);
        this.release(s);
        out.push(undefined);
        continue;
      }
      const g = s.gen;
      if (first && result.cached) g.cachedTokens = result.cached[r] ?? 0;
      if (first && result.prompt?.[r]) g.promptPositions = result.prompt[r];
      let token: number;
      if (tokens) token = tokens[r]!;
      else {
        const shared = pairs[k + 1]?.[1] === r;
        const row = logits!.subarray(r * V, (r + 1) * V);
        // Choosing changes the row: a row still wanted by a follower is chosen from on a copy.
        token = g.choose(shared ? row.slice() : row);
      }
      const acc = g.accept(token);
      if (first && !acc.finish) {
        if (decoding > 0) joined++;
        this.running.push(s);
        // It joins at the next decode step: an auto decode in flight ends after its current step.
        if (this.auto) this.session.steer?.({ stop: true });
      }
      else if (!first && acc.finish) this.running.splice(this.running.indexOf(s), 1);
      if (acc.finish) this.release(s);
      out.push(acc);
    }
    const chosenNs = (performance.now() - t0) * 1e6;
    return () => {
      const t1 = performance.now();
      pairs.forEach(([s], k) => {
        const acc = out[k];
        if (acc) s.accepted(acc, first);
        else s.dropped();
      });
      this.onStep({ kind: req.kind, rows: seqs.length, inputNs: result.inputNs, inferNs: result.inferNs, outputNs: chosenNs + (performance.now() - t1) * 1e6, samplingNs: chosenNs, kvBytes: result.kvBytes, joined });
    };
  }
}
