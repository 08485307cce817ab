/**
 * KV caches that stay on the GPU, for a KIND_GPU decoder on onnxruntime-node's WebGPU provider. The
 * decoder session leaves its `present.*` outputs (and its logits) on the device ('gpu-buffer'), the
 * worker keeps those tensors as the batch's cache arrays (opaque `KvHandle`s to core's KvBatch) and
 * feeds them back as the next step's `past_key_values.*`; nothing here ever reads one (`getData()` on a
 * gpu-buffer tensor aborts the process), and each is disposed as soon as no group, prefix block or
 * hit refers to it (`release`).
 *
 * The batch changes core asks for (re-layout, holes filled, n > 1 forks, prefix blocks kept and
 * joined: `KvMoves.compose`, a list of row copies) run on the same device as one small generated
 * graph per number of source groups: every cache array of every source flattened to [vectors,
 * headDim] and concatenated with a zero vector, one Gather by an int32 index (built here from the
 * copies: one int per head and position, 1/headDim of the cache's size), reshaped to [rows, heads,
 * len, headDim]. All 2 × layers arrays move in one run. Only that index, the step's token ids, mask
 * and positions go up; only each row's argmax (a greedy step: a second tiny graph, ArgMax of the
 * last position) or its last-position logits (a step with sampled rows) come down.
 *
 * `bus` counts the bytes that cross, by what they are, for the metric and the bench; `live` is the
 * device tensors held (a test checks that a server left idle holds none).
 */

import type * as Ort from 'onnxruntime-node';
import type { DecoderLayout } from '../../core/llm/decoder.js';
import { isHostKv, type KvData, type KvMoves, type KvRows, type RowCopy } from '../../core/llm/kv-moves.js';
import { GraphBuilder } from '../../graph/onnx-builder.js';
import { gpuLocked } from '../gpu/lock.js';

/** Bytes moved host → device and device → host, by what they were (`kv`, `inputs`, `logits`, `ids`). */
export interface BusBytes {
  toDevice: Record<string, number>;
  toHost: Record<string, number>;
}

export const countBytes = (side: Record<string, number>, what: string, n: number): void => {
  if (n > 0) side[what] = (side[what] ?? 0) + n;
};

/** Sources one compose graph takes (fewer are padded with empty arrays; more are joined in rounds). */
const MAX_SOURCES = 16;

export class DeviceKv implements KvMoves {
  readonly live = new Set<Ort.Tensor>();
  private readonly graphs = new Map<string, Promise<Ort.InferenceSession>>();
  private readonly arrays: number;
  private readonly type: 'float32' | 'float16';

  constructor(
    private readonly ort: typeof Ort, private readonly layout: DecoderLayout, private readonly lock: Int32Array | undefined,
    readonly bus: BusBytes,
  ) {
    this.arrays = 2 * layout.past.length;
    this.type = layout.kvType;
  }

  /** A decoder output kept as a cache array. */
  keep(t: Ort.Tensor): KvData {
    this.live.add(t);
    return t;
  }

  release(kv: readonly KvData[]): void {
    for (const a of kv) {
      if (isHostKv(a)) continue;
      const t = a as Ort.Tensor;
      if (this.live.delete(t)) t.dispose();
    }
  }

  /** A cache array as a feed: a device tensor as it is, a host array uploaded (counted). */
  feed(a: KvData, dims: number[]): Ort.Tensor {
    if (!isHostKv(a)) return a as Ort.Tensor;
    countBytes(this.bus.toDevice, 'kv', a.byteLength);
    return new this.ort.Tensor(this.type, a, dims);
  }

  async compose(sources: readonly KvRows[], copies: readonly RowCopy[], rows: number, len: number, base?: boolean): Promise<KvData[]> {
    const { kvHeads: H } = this.layout;
    // Each source's first vector in the concatenation of all of them; the zero vector comes last.
    const starts: number[] = [];
    let total = 0;
    for (const s of sources) {
      starts.push(total);
      total += s.rows * H * s.len;
    }
    const idx = new Int32Array(rows * H * len).fill(total);
    if (base) for (let i = 0; i < sources[0]!.rows * H * len; i++) idx[i] = i;
    for (const c of copies) {
      const s = sources[c.src]!;
      for (let h = 0; h < H; h++) {
        const from = starts[c.src]! + (c.row * H + h) * s.len + c.from;
        const to = (c.to * H + h) * len + c.at;
        for (let j = 0; j < c.n; j++) idx[to + j] = from + j;
      }
    }
    // More sources than a graph takes: each run of them flattened into one array first, in order, so
    // the index into their concatenation stays the same.
    let inputs = sources.map((s) => s.kv.map((a) => this.feed(a, [s.rows, H, s.len, this.layout.headDim])));
    const joined: Ort.Tensor[][] = [];
    while (inputs.length > MAX_SOURCES) {
      const next: Ort.Tensor[][] = [];
      for (let i = 0; i < inputs.length; i += MAX_SOURCES) {
        const run = inputs.slice(i, i + MAX_SOURCES);
        const n = run.reduce((m, kv) => m + kv[0]!.size / this.layout.headDim, 0);
        const flat = await this.gather(run, Int32Array.from({ length: n }, (_, k) => k), [1, 1, n, this.layout.headDim]);
        next.push(flat);
        joined.push(flat);
      }
      inputs = next;
    }
    const out = await this.gather(inputs, idx, [rows, H, len, this.layout.headDim]);
    for (const kv of joined) this.release(kv);
    return out;
  }

  /** One run of the compose graph for `inputs.length` sources (all arrays at once). */
  private async gather(inputs: Ort.Tensor[][], idx: Int32Array, shape: number[]): Promise<Ort.Tensor[]> {
    const k = 2 ** Math.ceil(Math.log2(Math.max(1, inputs.length)));
    const session = await this.graph(`compose${k}`, () => this.composeGraph(k));
    const empty = new this.ort.Tensor(this.type, this.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [0, 1, 0, this.layout.headDim]);
    const feeds: Record<string, Ort.Tensor> = {
      idx: new this.ort.Tensor('int32', idx, [idx.length]),
      shape: new this.ort.Tensor('int64', BigInt64Array.from(shape, BigInt), [4]),
    };
    countBytes(this.bus.toDevice, 'inputs', idx.byteLength + 32);
    for (let a = 0; a < this.arrays; a++) for (let s = 0; s < k; s++) feeds[`x${a}_${s}`] = inputs[s]?.[a] ?? empty;
    const out = await gpuLocked(this.lock, () => session.run(feeds));
    return Array.from({ length: this.arrays }, (_, a) => {
      const t = out[`y${a}`]!;
      this.live.add(t);
      return t;
    });
  }

  /**
   * Each row's last-position argmax (greedy) or last-position logits on the host, or (`all`: a prefill
   * whose rows want their prompt's log-probabilities) every position's; `t` (the decoder's logits, on
   * the device) is disposed here.
   */
  async readLogits(t: Ort.Tensor, greedy: boolean, all = false): Promise<{ tokens: Int32Array } | { logits: Ort.Tensor }> {
    try {
      const name = all ? 'all' : greedy ? 'argmax' : 'last';
      const session = await this.graph(name, () => this.logitsGraph(name));
      const out = (await gpuLocked(this.lock, () => session.run({ logits: t })))[name]!;
      countBytes(this.bus.toHost, name === 'argmax' ? 'ids' : 'logits', (out.data as ArrayBufferView).byteLength);
      if (name !== 'argmax') return { logits: out };
      return { tokens: Int32Array.from(out.data as BigInt64Array, Number) };
    } finally {
      t.dispose();
    }
  }

  /** Device tensors held, and every graph session closed (the decoder is closing). */
  async close(): Promise<void> {
    for (const t of this.live) t.dispose();
    this.live.clear();
    for (const s of this.graphs.values()) await gpuLocked(this.lock, async () => (await s).release());
    this.graphs.clear();
  }

  private graph(key: string, make: () => Uint8Array): Promise<Ort.InferenceSession> {
    let s = this.graphs.get(key);
    if (!s) {
      const bytes = make();
      // Every output stays on the device except what the host must read (the logits graphs').
      const where = key.startsWith('compose') ? 'gpu-buffer' : 'cpu';
      s = gpuLocked(this.lock, () => this.ort.InferenceSession.create(bytes, { executionProviders: ['webgpu'], preferredOutputLocation: where }));
      this.graphs.set(key, s);
    }
    return s;
  }

  private composeGraph(k: number): Uint8Array {
    const D = this.layout.headDim;
    const elem = this.type === 'float16' ? 'FLOAT16' : 'FLOAT';
    const g = new GraphBuilder(`kv_compose_${k}`, { opset: 17 });
    const idx = g.input('idx', 'INT32', ['m']);
    const shape = g.input('shape', 'INT64', [4]);
    const flat = g.initializer('flat', 'INT64', [2], BigInt64Array.of(-1n, BigInt(D)));
    const zero = g.initializer('zero', elem, [1, D], this.type === 'float16' ? new Uint16Array(D) : new Float32Array(D));
    for (let a = 0; a < this.arrays; a++) {
      const parts = Array.from({ length: k }, (_, s) => g.op('Reshape', [g.input(`x${a}_${s}`, elem, [`b${s}`, `h${s}`, `l${s}`, D]), flat]));
      const all = g.op('Concat', [...parts, zero], { axis: 0 });
      g.op('Reshape', [g.op('Gather', [all, idx], { axis: 0 }), shape], {}, `y${a}`);
      g.output(`y${a}`, elem, ['rows', 'heads', 'len', D]);
    }
    return g.encode();
  }

  /**
   * logits [B, S, V] (or [B, V]) → `argmax` [B] int64, `last` [B, 1, V]: the last position's, or `all`:
   * every position's (the graph's output is where the host reads it).
   */
  private logitsGraph(name: 'argmax' | 'last' | 'all'): Uint8Array {
    const elem = this.layout.logitsType === 'float16' ? 'FLOAT16' : 'FLOAT';
    const greedy = name === 'argmax';
    const g = new GraphBuilder(name, { opset: 17 });
    const logits = g.input('logits', elem, ['batch', 'positions', 'vocab']);
    if (name === 'all') {
      g.op('Identity', [logits], {}, 'all');
      g.output('all', elem, ['batch', 'positions', 'vocab']);
      return g.encode();
    }
    const i64 = (name: string, v: bigint) => g.initializer(name, 'INT64', [1], BigInt64Array.of(v));
    const last = g.op('Slice', [logits, i64('start', -1n), i64('end', 2n ** 62n), i64('axis', 1n)], {}, greedy ? undefined : 'last');
    if (greedy) {
      g.op('ArgMax', [last], { axis: 2, keepdims: 0 }, 'argmax');
      g.output('argmax', 'INT64', ['batch', 1]);
    } else g.output('last', elem, ['batch', 1, 'vocab']);
    return g.encode();
  }
}
