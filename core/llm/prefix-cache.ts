/**
 * Automatic prefix caching: the KV rows of prompts kept after their requests end, so a later prompt
 * that starts the same way (a system prompt, a chat history) prefills only its suffix. It lives in the
 * KvBatch that runs prefills (in Node the prefill worker), since that is where a hit saves work.
 *
 * As vLLM does, a prompt is cut into blocks of BLOCK tokens and a block is known by its tokens and
 * the block before it, so a block matches only where the whole prefix up to it matches. The key here
 * is exact (the parent's serial number and the token ids), not a digest, so two prefixes never share
 * a block by a hash collision. Only whole blocks are kept, and a hit leaves at least one prompt token
 * to compute (its logits give the first token).
 *
 * Eviction is least recently used, block by block: a chain is touched tail first, so a prefix's later
 * blocks always go before its earlier ones and what stays is always reachable. The cache never holds
 * more than the room the engine gives it with each prefill: the instance's KV budget less what its
 * running sequences reserve, so cache and sequences together stay inside `kv_cache_bytes`.
 */

import type { DecoderLayout } from './decoder.js';

/** A KV array as onnxruntime hands it back: float32, or float16 as its bits. */
export type KvArray = Float32Array | Uint16Array;

/** Rows of caches laid out together (kv-batch.ts's KvGroup): `len` positions, each row's real tokens right-aligned. */
interface Rows {
  len: number;
  real: number[];
  kv: KvArray[];
}

export const BLOCK = 16;

interface Block {
  serial: number;
  /** 2 × layers arrays, each [heads, BLOCK, headDim]. */
  kv: KvArray[];
}

/** A hit: the prefix's length in tokens and its caches as 2 × layers arrays of [1, heads, n, headDim]. */
export interface PrefixHit {
  tokens: number;
  kv: KvArray[];
}

export class PrefixCache {
  /** In least-recently-used order (a touched block is moved to the end). */
  private readonly blocks = new Map<string, Block>();
  private serial = 1;
  private readonly blockBytes: number;

  constructor(private readonly layout: DecoderLayout) {
    this.blockBytes = BLOCK * 2 * layout.past.length * layout.kvHeads * layout.headDim * (layout.kvType === 'float16' ? 2 : 4);
  }

  get bytes(): number {
    return this.blocks.size * this.blockBytes;
  }

  private alloc(n: number): KvArray {
    return this.layout.kvType === 'float16' ? new Uint16Array(n) : new Float32Array(n);
  }

  /** The cached blocks that start `tokens`, at most `max` tokens' worth, head first. */
  private chain(tokens: readonly number[], max: number): { keys: string[]; blocks: Block[] } {
    const keys: string[] = [];
    const blocks: Block[] = [];
    let parent = 0;
    for (let i = 0; (i + 1) * BLOCK <= max; i++) {
      const key = `${parent}:${tokens.slice(i * BLOCK, (i + 1) * BLOCK).join(',')}`;
      const b = this.blocks.get(key);
      if (!b) break;
      keys.push(key);
      blocks.push(b);
      parent = b.serial;
    }
    return { keys, blocks };
  }

  /** Marks a chain used: tail first, so its head is the most recently used. */
  private touch(keys: readonly string[]): void {
    for (let i = keys.length - 1; i >= 0; i--) {
      const b = this.blocks.get(keys[i]!)!;
      this.blocks.delete(keys[i]!);
      this.blocks.set(keys[i]!, b);
    }
  }

  /** The longest cached prefix of a prompt, leaving its last token to compute; undefined when none. */
  lookup(tokens: readonly number[]): PrefixHit | undefined {
    const { keys, blocks } = this.chain(tokens, tokens.length - 1);
    if (blocks.length === 0) return undefined;
    this.touch(keys);
    const { kvHeads: H, headDim: D } = this.layout;
    const n = blocks.length * BLOCK;
    const kv: KvArray[] = [];
    for (let a = 0; a < 2 * this.layout.past.length; a++) {
      const dst = this.alloc(H * n * D);
      blocks.forEach((b, j) => {
        for (let h = 0; h < H; h++) dst.set(b.kv[a]!.subarray(h * BLOCK * D, (h + 1) * BLOCK * D), (h * n + j * BLOCK) * D);
      });
      kv.push(dst);
    }
    return { tokens: n, kv };
  }

  /** Drops least recently used blocks until the cache takes at most `room` bytes. */
  evictTo(room: number, keep?: ReadonlySet<string>): boolean {
    while (this.bytes > Math.max(0, room)) {
      const oldest = this.blocks.keys().next().value as string;
      if (keep?.has(oldest)) return false;
      this.blocks.delete(oldest);
    }
    return true;
  }

  /**
   * Keeps the whole blocks of a prompt just prefilled (row `row` of `g`, its tokens `tokens`), as far as
   * `room` bytes allow, older blocks evicted first; blocks already held are only touched.
   */
  store(tokens: readonly number[], g: Rows, row: number, room: number): void {
    const whole = Math.floor(tokens.length / BLOCK) * BLOCK;
    const { keys, blocks } = this.chain(tokens, whole);
    this.touch(keys);
    const mine = new Set(keys);
    let parent = blocks.length > 0 ? blocks[blocks.length - 1]!.serial : 0;
    const { kvHeads: H, headDim: D } = this.layout;
    // Row `row` holds its tokens right-aligned: prompt position p is at g.len - real + p.
    const start = g.len - g.real[row]!;
    for (let i = blocks.length; (i + 1) * BLOCK <= whole; i++) {
      if (!this.evictTo(room - this.blockBytes, mine)) return;
      const key = `${parent}:${tokens.slice(i * BLOCK, (i + 1) * BLOCK).join(',')}`;
      const kv = g.kv.map((src) => {
        const dst = this.alloc(H * BLOCK * D);
        for (let h = 0; h < H; h++) {
          const s0 = ((row * H + h) * g.len + start + i * BLOCK) * D;
          dst.set(src.subarray(s0, s0 + BLOCK * D), h * BLOCK * D);
        }
        return dst;
      });
      const b = { serial: this.serial++, kv };
      // Newest last, but a chain's head must stay newer than its tail: move the head behind it again.
      this.blocks.set(key, b);
      this.touch(keys);
      keys.push(key);
      mine.add(key);
      parent = b.serial;
    }
  }
}
