/**
 * Sampling (core/llm/sampling.ts) against probabilities this file computes itself, in float64, from
 * the definitions: Hugging Face's repetition penalty (a seen token's positive logit divided by it, a
 * negative one multiplied), OpenAI's presence and frequency penalties (subtracted per output token),
 * OpenAI's logit bias (added to the raw logits first), softmax at the temperature, vLLM's min_p (tokens
 * below min_p times the likeliest one's probability dropped), top-k, then top-p on what top-k kept
 * (the smallest set of likeliest tokens whose renormalised mass reaches top_p). For each setting, 20 000 draws from fixed logits
 * with a seeded PRNG: a token the reference filters out never comes, and the counts of the others
 * pass a chi-square test at a false-failure rate of 1e-7 per setting (the draws are seeded, so a run
 * is repeatable; a wrong filter or penalty moves several percent of the mass and fails by far).
 */

import { describe, expect, it } from 'vitest';
import { sampleToken, sampleWithLogprob, type SamplingParams, type TokenHistory } from '../../core/llm/sampling.js';

const LOGITS = [2.1, 1.7, 1.3, 0.9, 0.6, 0.2, -0.4, -0.9, -1.6, -2.4];
const DRAWS = 20_000;
const OFF: SamplingParams = { temperature: 1, topK: 0, topP: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 };

/** The prompt and output so far: tokens 0 (positive logit), 3, and 8 (negative logit); 2 came out three times. */
const history = (): TokenHistory => ({ seen: new Set([0, 2, 3, 8]), counts: new Map([[0, 1], [2, 3], [8, 2]]) });
const NO_HISTORY = (): TokenHistory => ({ seen: new Set(), counts: new Map() });

/** The distribution a token is drawn from, by the definitions, in float64. */
function reference(p: SamplingParams, h: TokenHistory): number[] {
  const bias = new Map(p.logitBias ?? []);
  const z = LOGITS.map((l, t) => {
    let v = l + (bias.get(t) ?? 0);
    if (h.seen.has(t)) v = v > 0 ? v / p.repetitionPenalty : v * p.repetitionPenalty;
    const n = h.counts.get(t) ?? 0;
    if (n > 0) v -= p.presencePenalty + p.frequencyPenalty * n;
    return v / p.temperature;
  });
  const max = Math.max(...z);
  let probs = z.map((v) => Math.exp(v - max));
  // min_p against the likeliest token's probability (1 here, before normalising).
  if (p.minP) probs = probs.map((q) => (q < p.minP! ? 0 : q));
  const order = probs.map((_, t) => t).sort((a, b) => probs[b]! - probs[a]!);
  if (p.topK > 0) {
    const kept = new Set(order.slice(0, p.topK));
    probs = probs.map((q, t) => (kept.has(t) ? q : 0));
  }
  let total = probs.reduce((a, b) => a + b, 0);
  probs = probs.map((q) => q / total);
  if (p.topP < 1) {
    const kept = new Set<number>();
    let mass = 0;
    for (const t of order) {
      if (mass >= p.topP) break;
      kept.add(t);
      mass += probs[t]!;
    }
    probs = probs.map((q, t) => (kept.has(t) ? q : 0));
    total = probs.reduce((a, b) => a + b, 0);
    probs = probs.map((q) => q / total);
  }
  return probs;
}

/** xorshift32 in [0, 1): the draws' randomness comes from here, not from the module's own PRNG. */
function xorshift(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

/**
 * The chi-square value past which a fit this good happens with probability 1e-7 (Wilson-Hilferty's
 * approximation of the quantile, within a few percent at these degrees of freedom).
 */
function chiSquareLimit(df: number): number {
  const z = 5.2; // the standard normal's one-sided 1e-7 quantile
  const a = 2 / (9 * df);
  return df * (1 - a + z * Math.sqrt(a)) ** 3;
}

/** Draws DRAWS tokens with `draw` and checks them against `probs`. */
function expectDistribution(label: string, probs: number[], draw: (row: Float32Array, random: () => number) => number): void {
  const random = xorshift(0x5eed + label.length * 7919);
  const counts = new Array<number>(LOGITS.length).fill(0);
  for (let i = 0; i < DRAWS; i++) counts[draw(Float32Array.from(LOGITS), random)]!++;
  const filtered = probs.flatMap((q, t) => (q === 0 ? [t] : []));
  expect(filtered.filter((t) => counts[t]! > 0), `${label}: tokens the reference filters out were drawn (counts ${counts})`).toEqual([]);
  // Bins expected fewer than 5 times are pooled, as a chi-square test needs.
  const bins: { expected: number; seen: number }[] = [];
  const rest = { expected: 0, seen: 0 };
  probs.forEach((q, t) => {
    if (q === 0) return;
    const b = q * DRAWS >= 5 ? { expected: 0, seen: 0 } : rest;
    b.expected += q * DRAWS;
    b.seen += counts[t]!;
    if (b !== rest) bins.push(b);
  });
  if (rest.expected > 0) bins.push(rest);
  if (bins.length < 2) {
    expect(counts.reduce((a, b) => a + b, 0)).toBe(DRAWS);
    return;
  }
  const chi2 = bins.reduce((s, b) => s + (b.seen - b.expected) ** 2 / b.expected, 0);
  const limit = chiSquareLimit(bins.length - 1);
  expect(chi2, `${label}: chi-square ${chi2.toFixed(1)} over ${bins.length - 1} df (limit ${limit.toFixed(1)}); counts ${counts}, expected ${probs.map((q) => (q * DRAWS).toFixed(0))}`)
    .toBeLessThan(limit);
}

const CASES: [string, Partial<SamplingParams>, () => TokenHistory][] = [
  ['temperature 1', {}, NO_HISTORY],
  ['temperature 0.5', { temperature: 0.5 }, NO_HISTORY],
  ['temperature 1.8', { temperature: 1.8 }, NO_HISTORY],
  ['top_k 3', { topK: 3 }, NO_HISTORY],
  ['top_k 6, temperature 0.7', { topK: 6, temperature: 0.7 }, NO_HISTORY],
  ['top_p 0.75', { topP: 0.75 }, NO_HISTORY],
  ['top_p 0.9, temperature 1.4', { topP: 0.9, temperature: 1.4 }, NO_HISTORY],
  ['top_k 5 then top_p 0.6', { topK: 5, topP: 0.6 }, NO_HISTORY],
  ['repetition_penalty 1.6', { repetitionPenalty: 1.6 }, history],
  ['repetition_penalty 0.7 (a reward)', { repetitionPenalty: 0.7 }, history],
  ['presence_penalty 0.9', { presencePenalty: 0.9 }, history],
  ['presence_penalty -0.5', { presencePenalty: -0.5 }, history],
  ['frequency_penalty 0.4', { frequencyPenalty: 0.4 }, history],
  ['min_p 0.3', { minP: 0.3 }, NO_HISTORY],
  ['min_p 0.1, temperature 1.5', { minP: 0.1, temperature: 1.5 }, NO_HISTORY],
  ['min_p 0.2 then top_k 3', { minP: 0.2, topK: 3 }, NO_HISTORY],
  ['logit_bias +3 on token 6, -100 on token 0', { logitBias: [[6, 3], [0, -100]] }, NO_HISTORY],
  ['logit_bias with repetition_penalty 1.5', { logitBias: [[8, 4], [2, -1.5]], repetitionPenalty: 1.5 }, history],
  ['all of them', { temperature: 0.8, topK: 7, topP: 0.85, repetitionPenalty: 1.3, presencePenalty: 0.3, frequencyPenalty: 0.2 }, history],
];

describe('sampling against an independent reference', () => {
  for (const [label, over, h] of CASES) {
    it(`draws by the reference distribution: ${label}`, () => {
      const p = { ...OFF, ...over };
      const probs = reference(p, h());
      // Each case filters or moves mass: the reference differs from plain softmax by well over the test's resolution.
      if (label !== 'temperature 1') {
        const plain = reference(OFF, NO_HISTORY());
        expect(probs.reduce((s, q, t) => s + Math.abs(q - plain[t]!), 0) / 2, `${label} is a case that changes the distribution`).toBeGreaterThan(0.05);
      }
      expectDistribution(label, probs, (row, random) => sampleToken(row, p, h(), random));
      expectDistribution(`${label} (with log-probabilities)`, probs, (row, random) => sampleWithLogprob(row, p, h(), random, 0).token);
    });
  }

  it('reports the log-probability of the drawn token under the penalised, tempered softmax before truncation', () => {
    const p = { ...OFF, temperature: 0.8, topK: 4, repetitionPenalty: 1.3, frequencyPenalty: 0.2 };
    const untruncated = reference({ ...p, topK: 0 }, history());
    const random = xorshift(99);
    for (let i = 0; i < 200; i++) {
      const r = sampleWithLogprob(Float32Array.from(LOGITS), p, history(), random, 3);
      expect(r.logprob).toBeCloseTo(Math.log(untruncated[r.token]!), 5);
      const top = untruncated.map((q, t) => ({ t, q })).sort((a, b) => b.q - a.q).slice(0, 3);
      expect(r.top.map((x) => x.token)).toEqual(top.map((x) => x.t));
      for (const [k, x] of r.top.entries()) expect(x.logprob).toBeCloseTo(Math.log(top[k]!.q), 5);
    }
  });

  it('is greedy after the logit bias: +100 makes a token the only choice, -100 never chosen', () => {
    const random = xorshift(11);
    for (let i = 0; i < 200; i++) {
      expect(sampleToken(Float32Array.from(LOGITS), { ...OFF, temperature: 0, logitBias: [[9, 100]] }, NO_HISTORY(), random)).toBe(9);
      expect(sampleToken(Float32Array.from(LOGITS), { ...OFF, temperature: 0, logitBias: [[0, -100]] }, NO_HISTORY(), random)).toBe(1);
      expect(sampleToken(Float32Array.from(LOGITS), { ...OFF, temperature: 1.5, logitBias: [[4, 100]] }, NO_HISTORY(), random)).toBe(4);
    }
  });

  it('is greedy at temperature 0 and top_k 1, penalties applied', () => {
    for (const over of [{ temperature: 0 }, { topK: 1 }]) {
      const p = { ...OFF, ...over, repetitionPenalty: 3 };
      const probs = reference({ ...p, temperature: 1 }, history());
      const best = probs.indexOf(Math.max(...probs));
      expect(best).not.toBe(0); // the penalty moved the argmax off token 0
      const random = xorshift(5);
      for (let i = 0; i < 50; i++) expect(sampleToken(Float32Array.from(LOGITS), p, history(), random)).toBe(best);
    }
  });
});
