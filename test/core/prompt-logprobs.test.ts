/**
 * prompt_logprobs where the logits are (core/llm/prompt-logprobs.ts, kv-batch.ts), with a recording
 * tensor kit in place of onnxruntime (the real graphs are test/node/llm-prompt-logprobs.test.ts's):
 * each position's log-probability, rank and top k against a log-softmax written here, float16 logits
 * read alike, and a prefill asks the graph for every position's logits (num_logits_to_keep) only when
 * a row in it wants them — the other prefills and decode steps keep asking for the last one.
 */

import { describe, expect, it } from 'vitest';
import type { DecoderLayout } from '../../core/llm/decoder.js';
import { KvBatch, type TensorKit } from '../../core/llm/kv-batch.js';
import { promptPositions } from '../../core/llm/prompt-logprobs.js';

const V = 7;

/** Deterministic logits of (row, position), with a tie between tokens 2 and 5 at every position. */
const logit = (b: number, p: number, v: number): number => (v === 5 ? logit(b, p, 2) : Math.sin(1 + b * 3.1 + p * 1.7 + v * 0.9) * 3);

function logSoftmax(row: number[]): number[] {
  const m = Math.max(...row);
  const z = m + Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
  return row.map((x) => x - z);
}

/** IEEE half bits of a number (round to nearest), for the float16 case. */
function toHalf(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0]!;
  const sign = (u >>> 16) & 0x8000;
  const e = ((u >>> 23) & 0xff) - 127 + 15;
  const m = u & 0x7fffff;
  if (e <= 0) return sign;
  return sign | (e << 10) | Math.round(m / 8192);
}

describe('promptPositions', () => {
  const rows = 2;
  const S = 5;
  const data = new Float32Array(rows * S * V);
  for (let b = 0; b < rows; b++) for (let p = 0; p < S; p++) for (let v = 0; v < V; v++) data[(b * S + p) * V + v] = logit(b, p, v);

  it('gives each token after the first its log-probability, rank and the k likeliest, from its row and offset', () => {
    // Row 1's prompt of 3 tokens sits after 2 positions of left padding.
    const tokens = [4, 2, 0];
    const got = promptPositions(data, false, 1, S, V, tokens, 2, 3);
    expect(got).toHaveLength(2);
    got.forEach((g, j) => {
      const row = Array.from({ length: V }, (_, v) => logit(1, 2 + j, v));
      const lp = logSoftmax(row);
      const t = tokens[j + 1]!;
      expect(g.logprob).toBeCloseTo(lp[t]!, 5);
      expect(g.rank).toBe(1 + row.filter((x) => x > row[t]!).length);
      const order = lp.map((x, v) => [v, x] as const).sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 3);
      expect(g.top.map(([v]) => v)).toEqual(order.map(([v]) => v));
      g.top.forEach(([, x], i) => expect(x).toBeCloseTo(order[i]![1], 5));
    });
    // Tied tokens share a rank (vLLM counts the strictly likelier ones).
    const tie = promptPositions(data, false, 0, S, V, [0, 2, 5], 0, 0);
    const row = Array.from({ length: V }, (_, v) => logit(0, 1, v));
    expect(tie[1]!.rank).toBe(1 + row.filter((x) => x > row[5]!).length);
    expect(tie[1]!.top).toEqual([]);
  });

  it('reads float16 logits as float32 ones', () => {
    const half = Uint16Array.from(data, toHalf);
    const a = promptPositions(data, false, 0, S, V, [1, 2, 3, 4, 5], 0, 2);
    const b = promptPositions(half, true, 0, S, V, [1, 2, 3, 4, 5], 0, 2);
    b.forEach((x, j) => {
      expect(x.logprob).toBeCloseTo(a[j]!.logprob, 2);
      expect(x.top.map(([v]) => v)).toEqual(a[j]!.top.map(([v]) => v));
    });
  });
});

describe('a prefill keeps every position\'s logits only for rows that ask', () => {
  type T = { data: Float32Array | BigInt64Array | Uint8Array; dims: number[] };
  const layout: DecoderLayout = {
    inputIds: 'input_ids', attentionMask: 'attention_mask', positionIds: 'position_ids', logitsToKeep: 'num_logits_to_keep',
    past: [{ key: 'past.0.key', value: 'past.0.value' }], present: [{ key: 'present.0.key', value: 'present.0.value' }],
    logits: 'logits', kvHeads: 1, headDim: 1, kvType: 'float32', logitsType: 'float32', maxContext: 64, padding: 'left',
  };
  /** Steps' num_logits_to_keep, and a graph that honours it. */
  const kept: number[] = [];
  const kit: TensorKit<T> = {
    int64: (data, dims) => ({ data, dims }),
    bool: (data, dims) => ({ data, dims }),
    kv: (data, dims) => ({ data: data as Float32Array, dims }),
    data: (t) => t.data as Float32Array,
    dims: (t) => t.dims,
    async run(feeds) {
      const [B, S] = feeds.input_ids!.dims as [number, number];
      const past = feeds['past.0.key']!.dims[2]!;
      const keep = Number((feeds.num_logits_to_keep!.data as BigInt64Array)[0]);
      kept.push(keep);
      const logits = new Float32Array(B * keep * V);
      for (let b = 0; b < B; b++) for (let p = 0; p < keep; p++) for (let v = 0; v < V; v++) logits[(b * keep + p) * V + v] = logit(b, S - keep + p, v);
      const present = { data: new Float32Array(B * (past + S)), dims: [B, 1, past + S, 1] };
      return { logits: { data: logits, dims: [B, keep, V] }, 'present.0.key': present, 'present.0.value': present };
    },
  };

  it('asks for the last position, or for all of them when a row wants its prompt\'s log-probabilities', async () => {
    const batch = new KvBatch(layout);
    await batch.step({ kind: 'prefill', free: [], rows: [{ seq: 1, tokens: [1, 2, 3] }, { seq: 2, tokens: [4, 5, 6] }] }, kit);
    const r = await batch.step({ kind: 'prefill', free: [], rows: [{ seq: 3, tokens: [1, 2, 3, 4] }, { seq: 4, tokens: [3, 4, 5, 6], promptLogprobs: 1 }] }, kit);
    await batch.step({ kind: 'decode', free: [], rows: [1, 2, 3, 4].map((seq) => ({ seq, token: 0 })) }, kit);
    expect(kept).toEqual([1, 4, 1]);
    expect(r.prompt?.[0]).toBeUndefined();
    expect(r.prompt?.[1]).toHaveLength(3);
    // The last-position logits every row samples from are still each row's last position's.
    expect(Array.from(r.logits!.subarray(V, 2 * V))).toEqual(Array.from({ length: V }, (_, v) => Math.fround(logit(1, 3, v))));
  });
});
