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
import type { KvData, KvMoves, KvRows } from './kv-moves.js';

export const BLOCK = 16;

interface Block {
  serial: number;
  /** 2 × layers arrays, each [1, heads, BLOCK, headDim]. */
  kv: KvData[];
}

/** Blocks one compose puts together at most (a device gathers from this many arrays at once). */
const JOIN = 16;

/** A hit: the prefix's length in tokens and its caches as 2 × layers arrays of [1, heads, n, headDim] (the caller releases them). */
export interface PrefixHit {
  tokens: number;
  kv: KvData[];
}

export class PrefixCache {
  /** In least-recently-used order (a touched block is moved to the end). */
  private readonly blocks = new Map<string, Block>();
  private serial = 1;
  private readonly blockBytes: number;

  constructor(private readonly layout: DecoderLayout, private readonly moves: KvMoves) {
    this.blockBytes = BLOCK * 2 * layout.past.length * layout.kvHeads * layout.headDim * (layout.kvType === 'float16' ? 2 : 4);
  }

  get bytes(): number {
    return this.blocks.size * this.blockBytes;
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
  async lookup(tokens: readonly number[]): Promise<PrefixHit | undefined> {
    const { keys, blocks } = this.chain(tokens, tokens.length - 1);
    if (blocks.length === 0) return undefined;
    this.touch(keys);
    // Runs of at most JOIN blocks joined first, then the runs (each a compose over few arrays).
    let parts: KvRows[] = blocks.map((b) => ({ kv: b.kv, rows: 1, len: BLOCK }));
    let joinedBefore = false;
    while (true) {
      const joined: KvRows[] = [];
      for (let i = 0; i < parts.length; i += JOIN) {
        const run = parts.slice(i, i + JOIN);
        let at = 0;
        const copies = run.map((p, src) => ({ src, row: 0, from: 0, n: p.len, to: 0, at: (at += p.len) - p.len }));
        joined.push({ kv: await this.moves.compose(run, copies, 1, at), rows: 1, len: at });
      }
      // The blocks stay cached; runs joined in an earlier round were only steps on the way.
      if (joinedBefore) for (const p of parts) this.moves.release(p.kv);
      joinedBefore = true;
      parts = joined;
      if (parts.length === 1) return { tokens: parts[0]!.len, kv: parts[0]!.kv };
    }
  }

  /** Drops least recently used blocks until the cache takes at most `room` bytes. */
  evictTo(room: number, keep?: ReadonlySet<string>): boolean {
    while (this.bytes > Math.max(0, room)) {
      const oldest = this.blocks.keys().next().value as string;
      if (keep?.has(oldest)) return false;
      this.moves.release(this.blocks.get(oldest)!.kv);
      this.blocks.delete(oldest);
    }
    return true;
  }

  /**
   * Keeps the whole blocks of a prompt just prefilled (row `row` of `g`, its `real` tokens `tokens`,
   * right-aligned), as far as `room` bytes allow, older blocks evicted first; blocks already held are only touched.
   */
  async store(tokens: readonly number[], g: KvRows, real: number, row: number, room: number): Promise<void> {
    const whole = Math.floor(tokens.length / BLOCK) * BLOCK;
    const { keys, blocks } = this.chain(tokens, whole);
    this.touch(keys);
    const mine = new Set(keys);
    let parent = blocks.length > 0 ? blocks[blocks.length - 1]!.serial : 0;
    // Row `row` holds its tokens right-aligned (prompt position p at g.len - real + p), or from 0 with right padding.
    const start = this.layout.padding === 'right' ? 0 : g.len - real;
    for (let i = blocks.length; (i + 1) * BLOCK <= whole; i++) {
      if (!this.evictTo(room - this.blockBytes, mine)) return;
      const key = `${parent}:${tokens.slice(i * BLOCK, (i + 1) * BLOCK).join(',')}`;
      const kv = await this.moves.compose([g], [{ src: 0, row, from: start + i * BLOCK, n: BLOCK, to: 0, at: 0 }], 1, BLOCK);
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
