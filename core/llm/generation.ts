/**
 * One request's output as it grows, token by token: its tokens, its text (decoded incrementally, so a
 * UTF-8 character split over several tokens comes out whole), the stop conditions (stop strings,
 * stop token ids and end-of-sequence, max_tokens, the context) and what may be sent so far. Text that
 * could still turn out to be the start of a stop string is held back until it cannot, so a client
 * never sees part of a stop string.
 */

import { GrammarMatcher } from './grammar.js';
import type { GenerationParams } from './params.js';
import type { PromptPosition } from './prompt-logprobs.js';
import { isGreedy, maskIds, recordToken, sampleToken, sampleWithLogprob, seededRandom, type SeededRandom, type TokenHistory, type TokenLogprob } from './sampling.js';
import { TextStream, type Tokenizer } from './tokenizer.js';

export type FinishReason = 'stop' | 'length';

export interface Accepted {
  /** Text that may be sent now ('' when nothing is complete yet). */
  delta: string;
  finish?: FinishReason;
}

export class Generation {
  readonly tokens: number[] = [];
  readonly history: TokenHistory;
  readonly random: SeededRandom;
  /** Token ids that end the sequence (EOS unless ignore_eos, and stop_token_ids). */
  readonly endIds: Set<number>;
  private readonly stream: TextStream;
  private text = '';
  private sent = 0;
  private readonly longestStop: number;
  /** Structured output: where the answer is in its grammar. */
  readonly grammar?: GrammarMatcher;
  /** Sum of the chosen tokens' log-probabilities (kept when logprobs are asked for). */
  cumulativeLogprob = 0;
  /** Chosen tokens' log-probabilities not yet sent. */
  private logprobs: TokenLogprob[] = [];

  /**
   * A reasoning model still thinking (params.thinkOpen) while a grammar waits: the thinking is free, and
   * the grammar masks and reads tokens only after the end-of-thinking token, as vLLM applies structured
   * output after the reasoning.
   */
  private thinking: boolean;
  /** Tokens up to and including the first end-of-thinking token (params.thinkEndId), once it came. */
  thinkEndAt?: number;
  /** The stop string that ended the sequence, when one did (vLLM's `stop_reason`). */
  stopString?: string;
  /** Prompt tokens whose caches came from the prefix cache (set when the prompt was prefilled). */
  cachedTokens = 0;
  /** The prompt's log-probabilities (params.promptLogprobs), set when the prompt was prefilled. */
  promptPositions?: PromptPosition[];
  get promptLogprobs(): number | undefined {
    return this.params.promptLogprobs;
  }

  constructor(
    tokenizer: Tokenizer, readonly prompt: readonly number[], readonly params: GenerationParams,
    /** Tokens this sequence may generate: max_tokens, or what the context leaves. */
    readonly maxTokens: number, eosIds: readonly number[],
    /** Which of a request's n choices this is (its seed is the request's plus the index). */
    readonly index = 0,
  ) {
    this.history = { seen: new Set(prompt), counts: new Map() };
    this.random = seededRandom(params.seed !== undefined ? params.seed + index : Math.floor(Math.random() * 2 ** 32));
    this.endIds = new Set([...params.stopTokenIds, ...(params.ignoreEos ? [] : eosIds)]);
    this.stream = new TextStream(tokenizer, params.skipSpecialTokens);
    this.longestStop = Math.max(0, ...params.stop.map((s) => s.length));
    if (params.grammar) this.grammar = new GrammarMatcher(params.grammar.root, tokenizer, params.grammar.prefix, params.grammar.suffix);
    this.thinking = !!this.grammar && params.thinkOpen === true && params.thinkEndId !== undefined;
  }

  /** Whether end tokens must not be chosen yet (min_tokens). */
  get suppressEnd(): boolean {
    return this.tokens.length < this.params.minTokens;
  }

  /**
   * Whether a decode loop where the model is may choose its tokens (sampling and min_tokens travel
   * with it, auto-decode.ts); grammar masks and log-probabilities stay on this thread.
   */
  get autoOk(): boolean {
    return !this.grammar && this.params.logprobs === undefined;
  }

  /** This generation where a decode loop may choose its tokens (autoOk), as the engine asks it. */
  get autoDecoding(): Generation | undefined {
    return this.autoOk ? this : undefined;
  }

  /** Whether the next token is the row's argmax, so a session may choose it where the logits are. */
  get argmaxOnly(): boolean {
    return isGreedy(this.params) && !this.suppressEnd && !this.grammar && this.params.logprobs === undefined;
  }

  /** Chooses the next token from this sequence's row of logits (modified). */
  choose(row: Float32Array): number {
    // While the model thinks (after `<think>`), no grammar applies: it constrains the answer only.
    const grammar = this.thinking ? undefined : this.grammar;
    if (grammar) {
      // A grammar's answer may end by an end token only where the text is a whole answer (a regex's
      // `[0-9]+` after a digit); it ends by itself when nothing more can be written.
      const ends = !this.suppressEnd && grammar.complete ? [...this.endIds].filter((t) => t < row.length).map((t) => [t, row[t]!] as const) : [];
      grammar.mask(row, this.maxTokens - this.tokens.length - 1);
      for (const [t, v] of ends) row[t] = v;
    } else if (this.suppressEnd) maskIds(row, this.endIds);
    if (this.params.logprobs === undefined) return sampleToken(row, this.params, this.history, this.random);
    const lp = sampleWithLogprob(row, this.params, this.history, this.random, this.params.logprobs);
    this.cumulativeLogprob += lp.logprob;
    this.logprobs.push(lp);
    return lp.token;
  }

  /** The log-probabilities of tokens chosen since the last call. */
  takeLogprobs(): TokenLogprob[] {
    const out = this.logprobs;
    this.logprobs = [];
    return out;
  }

  accept(token: number): Accepted {
    this.tokens.push(token);
    if (token === this.params.thinkEndId && this.thinkEndAt === undefined) this.thinkEndAt = this.tokens.length;
    recordToken(this.history, token);
    if (this.thinking) {
      if (token === this.params.thinkEndId) this.thinking = false;
      else if (this.endIds.has(token)) return this.finish('stop');
    } else if (this.grammar) {
      // An end token is no text of the grammar's: the mask let it through where the answer was whole.
      if (!this.grammar.accept(token) && this.endIds.has(token)) return this.finish('stop');
      if (this.grammar.done) {
        this.text += this.stream.push(token);
        return this.finish('stop');
      }
    } else if (this.endIds.has(token)) return this.finish('stop');
    this.text += this.stream.push(token);
    if (this.params.stop.length > 0) {
      // A stop string can only end in the new text, so the search starts just before it.
      const from = Math.max(0, this.sent - this.longestStop + 1);
      let at = -1;
      for (const s of this.params.stop) {
        const i = this.text.indexOf(s, from);
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          this.stopString = s;
        }
      }
      if (at >= 0) {
        this.text = this.text.slice(0, at);
        const delta = this.text.slice(this.sent);
        this.sent = this.text.length;
        return { delta, finish: 'stop' };
      }
    }
    if (this.tokens.length >= this.maxTokens) return this.finish('length');
    const end = this.text.length - this.heldBack();
    if (end <= this.sent) return { delta: '' };
    const delta = this.text.slice(this.sent, end);
    this.sent = end;
    return { delta };
  }

  /** The whole output text so far (what has been sent, and what is held back). */
  get output(): string {
    return this.text;
  }

  private finish(reason: FinishReason): Accepted {
    this.text += this.stream.flush();
    const delta = this.text.slice(this.sent);
    this.sent = this.text.length;
    return { delta, finish: reason };
  }

  /** Length of the longest end of the text that begins some stop string. */
  private heldBack(): number {
    let best = 0;
    for (const s of this.params.stop) {
      for (let k = Math.min(s.length - 1, this.text.length); k > best; k--) {
        if (this.text.endsWith(s.slice(0, k))) {
          best = k;
          break;
        }
      }
    }
    return best;
  }
}
