/**
 * How a step's rows are grouped and read back, apart from where their caches live: which prompts share
 * a prefill run (`prefillParts`: little left padding), and each row's last-position logits out of an
 * output that may hold every position, in float16, or in another row order than the request's.
 */

/** A prefill run may spend at most this share more positions than its prompts have (left padding). */
const PAD_SLACK = 1.25;

/**
 * Prompts (by length) grouped into prefill runs, longest first, so that no run pads much: a prompt
 * is only computed alongside others of about its length. Padding is compute thrown away, and the
 * prefill of a prompt or two already keeps a CPU busy (tiny_gpt, 5- to 40-word prompts: 6–7 in one
 * padded run took 5–14 ms, ~0.8 ms each in runs of similar lengths).
 */
export function prefillParts(lengths: readonly number[]): number[][] {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[b]! - lengths[a]! || a - b);
  const parts: number[][] = [];
  let part: number[] = [];
  let longest = 0;
  let real = 0;
  for (const i of order) {
    const n = lengths[i]!;
    if (part.length > 0 && (part.length + 1) * longest > PAD_SLACK * (real + n)) {
      parts.push(part);
      part = [];
    }
    if (part.length === 0) {
      longest = n;
      real = 0;
    }
    part.push(i);
    real += n;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

/** The rows `slots` of [*, vocab] logits, in that order. */
export function pickRows(logits: Float32Array, slots: readonly number[], vocab: number): Float32Array {
  const out = new Float32Array(slots.length * vocab);
  slots.forEach((b, k) => out.set(logits.subarray(b * vocab, (b + 1) * vocab), k * vocab));
  return out;
}

/**
 * Row b's last-position logits, as float32: [rows, vocab]; `ends[b]`: row b's last position when it
 * is not the run's last (right padding). With one position per row (the model keeps only the last
 * one's logits, or a decode step) that is the output itself, not a copy: it is this step's, and the
 * caller may change it.
 */
export function lastRows(data: Float32Array | Uint16Array, rows: number, positions: number, vocab: number, half: boolean, ends?: readonly number[]): Float32Array {
  if (positions === 1 && !half && data.length === rows * vocab) return data as Float32Array;
  const out = new Float32Array(rows * vocab);
  for (let b = 0; b < rows; b++) {
    const o = (b * positions + (ends?.[b] ?? positions - 1)) * vocab;
    if (!half) out.set((data as Float32Array).subarray(o, o + vocab), b * vocab);
    else for (let v = 0; v < vocab; v++) out[b * vocab + v] = halfToFloat((data as Uint16Array)[o + v]!);
  }
  return out;
}

/** IEEE 754 half (as its 16 bits) to a number. */
export function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}
