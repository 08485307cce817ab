/**
 * vLLM's `prompt_logprobs`: for each prompt token after the first, its log-probability under the
 * model given the tokens before it, its rank in the vocabulary, and the k likeliest tokens at that
 * position. They are read where the prefill's logits are (every position of the rows that ask, not
 * only the last), so only numbers per position cross to the engine, never positions × vocabulary
 * floats. The log-probabilities are the model's own (log-softmax of the raw logits: no temperature,
 * penalties or bias), as vLLM returns them.
 */

import { halfToFloat } from './step-rows.js';
import { topIndices } from './sampling.js';

/** One prompt position: the prompt token's log-probability and rank (1: the likeliest), and the top k. */
export interface PromptPosition {
  logprob: number;
  rank: number;
  /** The k likeliest tokens, likeliest first (ties: lower id first), with their log-probabilities. */
  top: [number, number][];
}

/**
 * A row's prompt positions from a run's logits ([rows, positions, vocab], float32 or float16 bits):
 * `tokens[j]` (j ≥ 1) is predicted at position `at + j - 1` of row `row`; position j - 1 of the
 * result is token j's. `k`: how many of the likeliest to add (0: the prompt token only).
 */
export function promptPositions(
  data: Float32Array | Uint16Array, half: boolean, row: number, positions: number, vocab: number,
  tokens: readonly number[], at: number, k: number,
): PromptPosition[] {
  const out: PromptPosition[] = [];
  const x = new Float32Array(vocab);
  for (let j = 1; j < tokens.length; j++) {
    const o = (row * positions + at + j - 1) * vocab;
    if (half) for (let v = 0; v < vocab; v++) x[v] = halfToFloat((data as Uint16Array)[o + v]!);
    else x.set((data as Float32Array).subarray(o, o + vocab));
    let max = -Infinity;
    for (let v = 0; v < vocab; v++) if (x[v]! > max) max = x[v]!;
    let sum = 0;
    for (let v = 0; v < vocab; v++) sum += Math.exp(x[v]! - max);
    const logZ = max + Math.log(sum);
    const t = tokens[j]!;
    const own = x[t]!;
    let above = 0;
    for (let v = 0; v < vocab; v++) if (x[v]! > own) above++;
    const top: [number, number][] = k > 0 ? topIndices(x, Math.min(k, vocab)).map((id) => [id, x[id]! - logZ]) : [];
    out.push({ logprob: own - logZ, rank: above + 1, top });
  }
  return out;
}
