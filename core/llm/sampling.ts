/**
 * Choosing the next token from a row of logits: greedy (temperature 0), or sampling with temperature,
 * min-p, top-k and top-p, after OpenAI's logit bias (added to the raw logits) and the repetition penalty (Hugging Face's: positive logits of tokens already in
 * the prompt or output divided by it, negative ones multiplied) and OpenAI's presence and frequency
 * penalties (on output tokens). Randomness comes from a per-request seeded PRNG, so a seeded request
 * draws the same numbers whatever else is batched with it.
 */

export interface SamplingParams {
  temperature: number;
  /** 0: off. */
  topK: number;
  /** 1: off. */
  topP: number;
  /** 1: off. */
  repetitionPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /**
   * vLLM's min_p: after the temperature, tokens less likely than min_p times the likeliest are
   * dropped (before top-k and top-p). 0 or absent: off.
   */
  minP?: number;
  /** OpenAI's logit_bias: [token id, bias] pairs added to the logits before the penalties. */
  logitBias?: [number, number][];
}

/** What a sequence has seen: prompt ∪ output (repetition penalty) and output counts (the others). */
export interface TokenHistory {
  seen: Set<number>;
  counts: Map<number, number>;
}

/** A chosen token into the history the penalties read (the engine and the worker's loop both keep one). */
export function recordToken(history: TokenHistory, token: number): void {
  history.seen.add(token);
  history.counts.set(token, (history.counts.get(token) ?? 0) + 1);
}

/** Makes `ids` (end tokens, while min_tokens or a grammar forbids them) impossible to draw from `row`. */
export function maskIds(row: Float32Array, ids: Iterable<number>): void {
  for (const id of ids) if (id < row.length) row[id] = -Infinity;
}

/** A seeded PRNG whose state can be read and set (so a decode loop elsewhere can carry it on and hand it back). */
export interface SeededRandom {
  (): number;
  state: number;
}

/** mulberry32: small, fast, seeded; floats in [0, 1). */
export function seededRandom(seed: number): SeededRandom {
  const next = (() => {
    const a = (next.state = (next.state + 0x6d2b79f5) >>> 0);
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }) as SeededRandom;
  next.state = seed >>> 0;
  return next;
}

export function argmax(logits: Float32Array): number {
  let best = 0;
  let bv = logits[0]!;
  for (let i = 1; i < logits.length; i++) {
    const v = logits[i]!;
    if (v > bv) {
      bv = v;
      best = i;
    }
  }
  return best;
}

/** Applies the logit bias and the penalties in place. */
export function applyPenalties(logits: Float32Array, p: SamplingParams, h: TokenHistory): void {
  if (p.logitBias) for (const [t, b] of p.logitBias) if (t < logits.length) logits[t]! += b;
  if (p.repetitionPenalty !== 1) {
    for (const t of h.seen) {
      const v = logits[t];
      if (v !== undefined) logits[t] = v > 0 ? v / p.repetitionPenalty : v * p.repetitionPenalty;
    }
  }
  if (p.presencePenalty !== 0 || p.frequencyPenalty !== 0) {
    for (const [t, n] of h.counts) {
      if (logits[t] !== undefined) logits[t]! -= p.presencePenalty + p.frequencyPenalty * n;
    }
  }
}

/** Whether the token is always the row's argmax (so a session may choose it where the logits are). */
export function isGreedy(p: SamplingParams): boolean {
  return (p.temperature === 0 || p.topK === 1) && p.repetitionPenalty === 1 && p.presencePenalty === 0 && p.frequencyPenalty === 0 && !p.logitBias?.length;
}

/** The next token. `logits` is one row and is modified. */
export function sampleToken(logits: Float32Array, p: SamplingParams, h: TokenHistory, random: () => number): number {
  applyPenalties(logits, p, h);
  return chooseToken(logits, p, random);
}

/** One token's log-probability and, when asked, the k likeliest tokens' (the token itself may be among them). */
export interface TokenLogprob {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

/**
 * The next token and its log-probability under the distribution it was drawn from: the logits after
 * the penalties, divided by the temperature (greedy: 1), before top-k / top-p truncation (vLLM's
 * `processed_logprobs` with truncation left out, so a top-k token outside top-p still reads as likely
 * as the model made it). `logits` is one row and is modified.
 */
export function sampleWithLogprob(logits: Float32Array, p: SamplingParams, h: TokenHistory, random: () => number, topK: number): TokenLogprob {
  applyPenalties(logits, p, h);
  const invT = p.temperature > 0 ? 1 / p.temperature : 1;
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp((logits[i]! - max) * invT);
  const logZ = max * invT + Math.log(sum);
  const lp = (i: number) => logits[i]! * invT - logZ;
  const top = topK > 0 ? topIndices(logits, Math.min(topK, logits.length)).map((t) => ({ token: t, logprob: lp(t) })) : [];
  const kept = Float32Array.from(logits);
  const token = chooseToken(logits, p, random);
  return { token, logprob: kept[token]! * invT - logZ, top };
}

/** The next token from penalised logits (modified). */
function chooseToken(logits: Float32Array, p: SamplingParams, random: () => number): number {
  if (p.temperature === 0 || p.topK === 1) return argmax(logits);
  const V = logits.length;
  const invT = 1 / p.temperature;
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (logits[i]! > max) max = logits[i]!;
  // Probabilities (unnormalised) in place.
  let sum = 0;
  for (let i = 0; i < V; i++) {
    const e = Math.exp((logits[i]! - max) * invT);
    logits[i] = e;
    sum += e;
  }
  // min_p: the likeliest token's unnormalised probability is exp(0) = 1, so the cut is min_p itself.
  const minP = p.minP ?? 0;
  if (minP > 0) {
    // Summed again rather than less the dropped: a rounding surplus must not let pick() fall to the end.
    sum = 0;
    for (let i = 0; i < V; i++) {
      if (logits[i]! < minP) logits[i] = 0;
      sum += logits[i]!;
    }
  }
  let cand: number[];
  if (p.topK > 0 && p.topK < V) cand = topIndices(logits, p.topK);
  else if (p.topP < 1) {
    // Only tokens above a tiny share can make the nucleus unless those together fall short of top_p;
    // that keeps the sort short on 100k-token vocabularies and the result exact.
    const cut = sum * 1e-6;
    cand = [];
    let mass = 0;
    for (let i = 0; i < V; i++) if (logits[i]! >= cut) {
      cand.push(i);
      mass += logits[i]!;
    }
    if (mass < p.topP * sum) cand = Array.from({ length: V }, (_, i) => i);
    cand.sort((a, b) => logits[b]! - logits[a]! || a - b);
  } else cand = [];
  if (cand.length === 0) return pick(logits, sum, random());
  let total = 0;
  for (const i of cand) total += logits[i]!;
  if (p.topP < 1) {
    // The smallest prefix (by probability) whose mass reaches top_p.
    const target = p.topP * total;
    let acc = 0;
    let n = 0;
    while (n < cand.length) {
      acc += logits[cand[n]!]!;
      n++;
      if (acc >= target) break;
    }
    cand = cand.slice(0, n);
    total = acc;
  }
  let r = random() * total;
  for (const i of cand) {
    r -= logits[i]!;
    if (r < 0) return i;
  }
  return cand[cand.length - 1]!;
}

function pick(probs: Float32Array, sum: number, u: number): number {
  let r = u * sum;
  for (let i = 0; i < probs.length; i++) {
    r -= probs[i]!;
    if (r < 0) return i;
  }
  return probs.length - 1;
}

/** Indices of the k largest values, largest first (ties: lower index first). */
export function topIndices(v: Float32Array, k: number): number[] {
  // A min-heap of the best k so far: O(V log k).
  const heap: number[] = [];
  const less = (a: number, b: number) => v[a]! < v[b]! || (v[a] === v[b] && a > b);
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && less(heap[l]!, heap[m]!)) m = l;
      if (r < heap.length && less(heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m]!, heap[i]!];
      i = m;
    }
  };
  for (let i = 0; i < v.length; i++) {
    if (heap.length < k) {
      heap.push(i);
      for (let j = heap.length - 1; j > 0;) {
        const parent = (j - 1) >> 1;
        if (!less(heap[j]!, heap[parent]!)) break;
        [heap[j], heap[parent]] = [heap[parent]!, heap[j]!];
        j = parent;
      }
    } else if (less(heap[0]!, i)) {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((a, b) => v[b]! - v[a]! || a - b);
}
