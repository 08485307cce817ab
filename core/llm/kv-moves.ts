/**
 * How KV-cache rows move between arrays: the one operation a KvBatch and its prefix cache need to
 * re-lay a batch out, fill its holes, fork a prompt's cache for n choices, and keep or reassemble a
 * prompt's prefix blocks. Each of those is a list of row copies (`RowCopy`: a run of one row's
 * positions into a row of a new array) composed into new arrays (`KvMoves.compose`).
 *
 * Two implementations: the host's, here (typed arrays, copied with `set`; the fill of holes done in
 * place), and a runtime's for caches that live where the model runs (a device tensor is an opaque
 * `KvHandle` to core: it is handed back to the runtime and never read here). The runtime's copies are
 * the same list turned into a gather over the arrays' vectors, run on the device (Node:
 * runtime-node/llm/device-kv.ts), so a batch change never brings a cache to the host.
 *
 * Ownership: arrays a compose returns belong to the caller, who gives them back with `release` when
 * no group, block or hit refers to them any more (a no-op on the host, where the garbage collector
 * frees them; a device tensor's memory is freed there and then).
 */

import type { DecoderLayout } from './decoder.js';

/** A KV array as onnxruntime hands it back: float32, or float16 as its bits. */
export type KvArray = Float32Array | Uint16Array;

/** A cache array kept where the model runs (a device tensor): core only passes it back to the runtime. */
export interface KvHandle {
  readonly dims: readonly number[];
}

/** One cache array, on the host or where the model runs. */
export type KvData = KvArray | KvHandle;

/** Rows × positions of 2 × layers cache arrays (key and value of each layer), each [rows, heads, len, headDim]. */
export interface KvRows {
  kv: KvData[];
  rows: number;
  len: number;
}

/** Positions [from, from + n) of row `row` of source `src` → positions [at, at + n) of row `to`. */
export interface RowCopy {
  src: number;
  row: number;
  from: number;
  n: number;
  to: number;
  at: number;
}

export interface KvMoves {
  /**
   * New arrays of `rows` × `len` made of `copies` from `sources`; positions no copy writes are zeros.
   * With `base`, sources[0] (of `len` positions, at most `rows` rows) is the starting point: its rows
   * stay where no copy lands (the host writes into its arrays when the row count stays).
   */
  compose(sources: readonly KvRows[], copies: readonly RowCopy[], rows: number, len: number, base?: boolean): KvData[] | Promise<KvData[]>;
  /** Arrays nobody refers to any more. */
  release(kv: readonly KvData[]): void;
}

export const isHostKv = (a: KvData): a is KvArray => ArrayBuffer.isView(a);

/** The host's moves: typed arrays, copied head by head. */
export function hostMoves(layout: Pick<DecoderLayout, 'kvHeads' | 'headDim' | 'kvType' | 'past'>): KvMoves {
  const H = layout.kvHeads;
  const D = layout.headDim;
  const alloc = (n: number): KvArray => (layout.kvType === 'float16' ? new Uint16Array(n) : new Float32Array(n));
  return {
    compose(sources, copies, rows, len, base) {
      const arrays = 2 * layout.past.length;
      const out: KvArray[] = [];
      for (let a = 0; a < arrays; a++) {
        const b = base ? (sources[0]!.kv[a] as KvArray) : undefined;
        let dst: KvArray;
        if (b && sources[0]!.rows === rows) dst = b;
        else {
          dst = alloc(rows * H * len * D);
          // Rows are contiguous: appended rows leave the base's where they were.
          if (b) dst.set(b);
        }
        for (const c of copies) {
          const s = sources[c.src]!;
          const from = s.kv[a] as KvArray;
          for (let h = 0; h < H; h++) {
            const s0 = ((c.row * H + h) * s.len + c.from) * D;
            dst.set(from.subarray(s0, s0 + c.n * D), ((c.to * H + h) * len + c.at) * D);
          }
        }
        out.push(dst);
      }
      return out;
    },
    release() {},
  };
}
