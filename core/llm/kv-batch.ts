/**
 * The KV caches of one decoder session, batched, and the step that feeds them: the part of a decoder
 * session that is the same on every runtime (the Node worker and the page both run `runStep` around
 * their own onnxruntime). Caches are kept as the typed arrays onnxruntime handed back as `present.*`
 * outputs, and handed straight back as the next step's `past_key_values.*`: while the batch's members
 * stay the same, a decode step copies nothing.
 *
 * Layout: a group of sequences shares one [batch, heads, L, head_dim] array per layer key and value;
 * each row holds its real tokens right-aligned, with masked padding before them (left padding, as
 * Hugging Face batch generation does), and `attention_mask` / `position_ids` say which positions are
 * real. A prefill makes a group of its own; before the next decode, the live group and new groups are
 * laid out again as one (rows copied right-aligned into the shortest L that holds the longest row, so
 * padding left by sequences that ended is dropped). Freed sequences leave at that re-layout; a group
 * whose every row is freed is dropped at once. A prefill of prompts of unlike lengths runs as several
 * runs (`prefillParts`), each a group. Groups can move between batches of the same layout (`takeAll`,
 * `adopt`): the Node runtime prefills in one worker and decodes in another.
 *
 * Every copy of cache rows goes through `KvMoves` (kv-moves.ts): typed arrays on the host, or, for a
 * runtime that keeps the caches on its device, opaque handles moved there; each array no group,
 * block or hit refers to any more is released.
 */

import { TsiError } from '../errors.js';
import { kvBytesPerToken, type DecoderLayout, type PrefillPart, type StepRequest, type StepResult } from './decoder.js';
import { hostMoves, type KvArray, type KvData, type KvMoves, type KvRows, type RowCopy } from './kv-moves.js';
import { PrefixCache, type PrefixHit } from './prefix-cache.js';
import { promptPositions, type PromptPosition } from './prompt-logprobs.js';
import { lastRows, pickRows, prefillParts } from './step-rows.js';

export { halfToFloat, prefillParts } from './step-rows.js';

export type { KvArray, KvData };

/** A decode batch's slot whose sequence left (its row is computed and thrown away until one joins there). */
const HOLE = Number.MIN_SAFE_INTEGER;

/**
 * The caches of a group of sequences laid out together. A prefill-only session hands its groups to
 * the session that decodes them (`takeAll` → `adopt`): plain typed arrays, so they can cross a thread
 * boundary as transferred buffers.
 */
export interface KvGroup {
  seqs: number[];
  /** Positions per row (padding included). */
  len: number;
  /** Real tokens per row (right-aligned). */
  real: number[];
  /** 2 × layers arrays (key, value per layer), each [rows, heads, len, headDim]. */
  kv: KvData[];
}

/** What a runtime does with onnxruntime: make tensors, run, read outputs back. */
export interface TensorKit<T> {
  int64(data: BigInt64Array, dims: number[]): T;
  bool(data: Uint8Array, dims: number[]): T;
  kv(data: KvData, dims: number[]): T;
  /** An output's data: float32 logits, or the KV array type (float16 as Uint16Array bits). */
  data(t: T): Float32Array | Uint16Array;
  /** A `present` output kept as a cache array: its data (the default), or the tensor itself where it stays on the device. */
  keep?(t: T): KvData;
  /**
   * Logits that stay on the device: each row's last-position argmax (`greedy`) or last-position
   * logits brought to the host, or with `all` every position's (a prefill whose rows want their
   * prompt's log-probabilities). The kit disposes the device tensor.
   */
  readLogits?(t: T, greedy: boolean, all?: boolean): Promise<{ tokens: Int32Array } | { logits: T }>;
  dims(t: T): readonly number[];
  run(feeds: Record<string, T>, fetches: string[]): Promise<Record<string, T>>;
}

export class KvBatch {
  private live?: KvGroup;
  private staged: KvGroup[] = [];
  private readonly dead = new Set<number>();
  private readonly rowBytes: number;
  private readonly tokenBytes: number;
  /** Prompts' caches kept for later prompts that start the same way (while requests ask for it). */
  private prefix?: PrefixCache;
  /** Decode batches laid out anew (every row copied), and member changes done by copying only the joining rows. */
  relayouts = 0;
  holeFills = 0;
  /** The slots of the last hole fill's request, for the steps after it (see gather). */
  private holeOrder?: { layout: readonly number[]; seqs: readonly number[]; order: number[] };

  constructor(private readonly layout: DecoderLayout, private readonly moves: KvMoves = hostMoves(layout)) {
    this.rowBytes = layout.kvHeads * layout.headDim * (layout.kvType === 'float16' ? 2 : 4);
    this.tokenBytes = kvBytesPerToken(layout);
  }

  /** A group as a compose source. */
  private static rows(g: KvGroup): KvRows {
    return { kv: g.kv, rows: g.seqs.length, len: g.len };
  }

  /** Releases every array of `gone` that `kept` does not hold. */
  private drop(gone: readonly KvGroup[], kept: readonly KvData[] = []): void {
    const keep = new Set(kept);
    for (const g of gone) this.moves.release(g.kv.filter((a) => !keep.has(a)));
  }

  /** Gives back every cache held, the prefix cache's too (the session is closing). */
  dispose(): void {
    this.drop(this.live ? [this.live, ...this.staged] : this.staged);
    this.live = undefined;
    this.staged = [];
    this.dead.clear();
    this.prefix?.evictTo(0);
  }

  private alloc(n: number): KvArray {
    return this.layout.kvType === 'float16' ? new Uint16Array(n) : new Float32Array(n);
  }

  /** Bytes held in caches (padding included). */
  bytes(): number {
    let n = 0;
    for (const g of this.live ? [this.live, ...this.staged] : this.staged) n += g.seqs.length * g.len * this.rowBytes * this.layout.past.length * 2;
    return n;
  }

  /** Sequences held (freed ones excluded). */
  held(): number {
    let n = 0;
    for (const g of this.live ? [this.live, ...this.staged] : this.staged) for (const s of g.seqs) if (s !== HOLE && !this.dead.has(s)) n++;
    return n;
  }

  /** Hands every cache held over (the batch is left empty). */
  takeAll(): KvGroup[] {
    const out = this.live ? [this.live, ...this.staged] : this.staged;
    this.live = undefined;
    this.staged = [];
    // Rows freed here are not live anywhere; the next re-layout over there drops them.
    this.dead.clear();
    return out;
  }

  /** Takes over caches another batch of the same layout made; they join the batch at the next decode. */
  adopt(groups: readonly KvGroup[]): void {
    this.staged.push(...groups);
  }

  free(seqs: readonly number[]): void {
    for (const s of seqs) this.dead.add(s);
    const alive = (g: KvGroup) => g.seqs.some((s) => s !== HOLE && !this.dead.has(s));
    if (this.live && !alive(this.live)) {
      for (const s of this.live.seqs) this.dead.delete(s);
      this.drop([this.live]);
      this.live = undefined;
    }
    this.staged = this.staged.filter((g) => {
      if (alive(g)) return true;
      for (const s of g.seqs) this.dead.delete(s);
      this.drop([g]);
      return false;
    });
  }

  /**
   * One step: lays out inputs, runs the model through `kit`, keeps the caches, returns last-position
   * logits. A prefill run in parts reports each part through `onPart` when given (see DecoderSession).
   */
  async step<T>(req: StepRequest, kit: TensorKit<T>, onPart?: PrefillPart): Promise<StepResult> {
    if (req.kind !== 'prefill') return this.run(req, kit);
    if (req.prefixRoom === undefined) {
      this.prefix?.evictTo(0);
      this.prefix = undefined;
    } else this.prefix ??= new PrefixCache(this.layout, this.moves);
    const cache = this.prefix;
    const hits: (PrefixHit | undefined)[] = [];
    // A row that wants its prompt's log-probabilities is computed whole: a hit would skip positions.
    for (const r of cache ? req.rows : []) hits.push(r.promptLogprobs === undefined ? await cache!.lookup(r.tokens) : undefined);
    // Sequences admitted with this prefill reserved their room: the cache gives it up first.
    cache?.evictTo(req.prefixRoom! * this.tokenBytes);
    let parts: number[][];
    if (hits.some((h) => h)) {
      // A row with a hit runs alone, on its cached prefix; prefillInParts runs the last parts first.
      const miss = req.rows.map((_, i) => i).filter((i) => !hits[i]);
      parts = [...prefillParts(miss.map((i) => req.rows[i]!.tokens.length)).map((p) => p.map((k) => miss[k]!)), ...hits.flatMap((h, i) => (h ? [[i]] : []))];
    } else parts = req.rows.length > 1 ? prefillParts(req.rows.map((r) => r.tokens.length)) : [[0]];
    if (parts.length > 1) return this.prefillInParts(req, parts, hits, kit, onPart);
    try {
      return await this.run(req, kit, hits[0]);
    } finally {
      if (hits[0]) this.moves.release(hits[0].kv);
    }
  }

  /** One model run: a prefill (on a cached prefix when `hit` is given: one row then), decode or free. */
  private async run<T>(req: StepRequest, kit: TensorKit<T>, hit?: PrefixHit): Promise<StepResult> {
    const t0 = performance.now();
    this.free(req.free);
    if (req.kind === 'free') return { vocab: 0, kvBytes: this.bytes(), inferNs: 0, inputNs: (performance.now() - t0) * 1e6 };
    const L = this.layout;
    const layers = L.past.length;
    const H = L.kvHeads;
    const D = L.headDim;
    const right = L.padding === 'right';
    const feeds: Record<string, T> = {};
    let group: KvGroup;
    let B: number;
    let S: number;
    let past: number;
    /** A decode's slot of each request row, when the batch has holes or another order. */
    let slots: number[] | undefined;
    /** A decode's past, which this step's present replaces. */
    let replaced: KvGroup | undefined;
    if (req.kind === 'prefill' && hit) {
      const tokens = req.rows[0]!.tokens;
      B = 1;
      past = hit.tokens;
      S = tokens.length - past;
      const ids = new BigInt64Array(S);
      const pos = new BigInt64Array(S);
      for (let k = 0; k < S; k++) {
        ids[k] = BigInt(tokens[past + k]!);
        pos[k] = BigInt(past + k);
      }
      feeds[L.inputIds] = kit.int64(ids, [1, S]);
      if (L.attentionMask) feeds[L.attentionMask] = kit.int64(new BigInt64Array(past + S).fill(1n), [1, past + S]);
      if (L.positionIds) feeds[L.positionIds] = kit.int64(pos, [1, S]);
      for (let l = 0; l < layers; l++) {
        feeds[L.past[l]!.key] = kit.kv(hit.kv[2 * l]!, [1, H, past, D]);
        feeds[L.past[l]!.value] = kit.kv(hit.kv[2 * l + 1]!, [1, H, past, D]);
      }
      group = { seqs: [req.rows[0]!.seq], len: past + S, real: [past + S], kv: [] };
    } else if (req.kind === 'prefill') {
      B = req.rows.length;
      S = Math.max(...req.rows.map((r) => r.tokens.length));
      past = 0;
      const ids = new BigInt64Array(B * S);
      const mask = new BigInt64Array(B * S);
      const pos = new BigInt64Array(B * S).fill(1n);
      req.rows.forEach((r, b) => {
        const pad = right ? 0 : S - r.tokens.length;
        for (let k = 0; k < r.tokens.length; k++) {
          ids[b * S + pad + k] = BigInt(r.tokens[k]!);
          mask[b * S + pad + k] = 1n;
          pos[b * S + pad + k] = BigInt(k);
        }
      });
      feeds[L.inputIds] = kit.int64(ids, [B, S]);
      if (L.attentionMask) feeds[L.attentionMask] = kit.int64(mask, [B, S]);
      if (L.positionIds) feeds[L.positionIds] = kit.int64(pos, [B, S]);
      const empty = this.alloc(0);
      for (let l = 0; l < layers; l++) {
        feeds[L.past[l]!.key] = kit.kv(empty, [B, H, 0, D]);
        feeds[L.past[l]!.value] = kit.kv(empty, [B, H, 0, D]);
      }
      group = { seqs: req.rows.map((r) => r.seq), len: S, real: req.rows.map((r) => r.tokens.length), kv: [] };
    } else {
      const { group: cur, order } = await this.gather(req.rows.map((r) => r.seq));
      replaced = cur;
      slots = order;
      B = cur.seqs.length;
      S = 1;
      past = cur.len;
      const T = past + 1;
      const ids = new BigInt64Array(B);
      const mask = new BigInt64Array(B * T);
      const pos = new BigInt64Array(B);
      req.rows.forEach((r, k) => (ids[order[k]!] = BigInt(r.token)));
      for (let b = 0; b < B; b++) {
        // A hole attends to its own position only: its output is thrown away, and no row is all masked.
        const real = cur.seqs[b] === HOLE ? 0 : cur.real[b]!;
        // Right padding: the new token goes right after the row's own (GroupQueryAttention writes it there).
        if (right) mask.fill(1n, b * T, b * T + real + 1);
        else mask.fill(1n, b * T + (past - real), (b + 1) * T);
        pos[b] = BigInt(real);
      }
      feeds[L.inputIds] = kit.int64(ids, [B, 1]);
      if (L.attentionMask) feeds[L.attentionMask] = kit.int64(mask, [B, T]);
      if (L.positionIds) feeds[L.positionIds] = kit.int64(pos, [B, 1]);
      for (let l = 0; l < layers; l++) {
        feeds[L.past[l]!.key] = kit.kv(cur.kv[2 * l]!, [B, H, past, D]);
        feeds[L.past[l]!.value] = kit.kv(cur.kv[2 * l + 1]!, [B, H, past, D]);
      }
      group = { seqs: cur.seqs, len: T, real: cur.real.map((r, b) => (cur.seqs[b] === HOLE ? 0 : r + 1)), kv: [] };
    }
    if (L.useCacheBranch) feeds[L.useCacheBranch] = kit.bool(Uint8Array.of(past > 0 ? 1 : 0), [1]);
    // Every position's logits only for a prefill with rows that want their prompt's log-probabilities.
    const all = req.kind === 'prefill' && req.rows.some((r) => r.promptLogprobs !== undefined);
    if (L.logitsToKeep) feeds[L.logitsToKeep] = kit.int64(BigInt64Array.of(all ? BigInt(S) : 1n), []);
    const fetches = [L.logits];
    for (const p of L.present) fetches.push(p.key, p.value);
    const t1 = performance.now();
    const out = await kit.run(feeds, fetches);
    let t2 = performance.now();
    const keep = (t: T) => (kit.keep ? kit.keep(t) : (kit.data(t) as KvArray));
    for (let l = 0; l < layers; l++) group.kv.push(keep(out[L.present[l]!.key]!), keep(out[L.present[l]!.value]!));
    const kd = kit.dims(out[L.present[0]!.key]!);
    if (kd[0] !== B || kd[2] !== group.len) {
      throw new TsiError('INTERNAL', `decoder returned present KV of shape [${kd.join(',')}], expected [${B},${H},${group.len},${D}]`);
    }
    let prefix: Pick<StepResult, 'cached' | 'prefixBytes'> = {};
    if (req.kind === 'prefill') {
      this.staged.push(group);
      for (let b = 0; b < req.rows.length; b++) {
        const r = req.rows[b]!;
        if (r.forks?.length) this.staged.push(await this.fork(group, b, r.forks));
        await this.prefix?.store(r.tokens, KvBatch.rows(group), group.real[b]!, b, req.prefixRoom! * this.tokenBytes);
      }
      if (this.prefix) prefix = { cached: req.rows.map(() => past), prefixBytes: this.prefix.bytes };
    } else {
      this.live = group;
      this.drop([replaced!]);
    }
    let logitsT: T = out[L.logits]!;
    const vocab = kit.dims(logitsT).at(-1)!;
    const reorder = slots && (slots.length !== B || slots.some((b, k) => b !== k)) ? slots : undefined;
    const times = () => ({ inferNs: (t2 - t1) * 1e6, inputNs: (t1 - t0 + performance.now() - t2) * 1e6 });
    if (kit.readLogits) {
      const read = await kit.readLogits(logitsT, req.greedy === true && !all, all);
      // A device's run returns once its work is queued: the run ends when its result is here.
      t2 = performance.now();
      if ('tokens' in read) {
        const tokens = reorder ? Int32Array.from(reorder, (b) => read.tokens[b]!) : read.tokens;
        return { tokens, vocab, kvBytes: this.bytes(), ...prefix, ...times() };
      }
      logitsT = read.logits;
    }
    const ld = kit.dims(logitsT);
    const positions = ld.length === 3 ? ld[1]! : 1;
    const half = L.logitsType === 'float16';
    const data = kit.data(logitsT);
    let prompt: (PromptPosition[] | undefined)[] | undefined;
    if (all && req.kind === 'prefill') {
      if (positions !== S) throw new TsiError('UNSUPPORTED', `the decoder returned logits for ${positions} of the prefill's ${S} positions: prompt_logprobs needs every position's (this graph keeps only the last)`);
      // Row b's token j is at position j (right padding) or after the row's left padding; position p predicts token p + 1.
      prompt = req.rows.map((r, b) => (r.promptLogprobs === undefined ? undefined : promptPositions(data, half, b, S, vocab, r.tokens, right ? 0 : S - r.tokens.length, r.promptLogprobs)));
    }
    // Right padding puts a prefill row's last token at its own length, not at the run's end.
    const ends = right && req.kind === 'prefill' && positions > 1 ? group.real.map((n) => n - 1 - past) : undefined;
    let logits = lastRows(data, B, positions, vocab, half, ends);
    if (reorder) logits = pickRows(logits, reorder, vocab);
    return { logits, vocab, kvBytes: this.bytes(), ...prefix, ...(prompt ? { prompt } : {}), ...times() };
  }

  /** A group of `seqs` whose caches are copies of row `row` of `g` (the prompt computed once for n choices). */
  private async fork(g: KvGroup, row: number, seqs: number[]): Promise<KvGroup> {
    const copies = seqs.map((_, k): RowCopy => ({ src: 0, row, from: 0, n: g.len, to: k, at: 0 }));
    const kv = await this.moves.compose([KvBatch.rows(g)], copies, seqs.length, g.len);
    return { seqs, len: g.len, real: seqs.map(() => g.real[row]!), kv };
  }

  /**
   * A prefill run as several (each its own group), shortest prompts first: reported part by part
   * through `onPart`, else its rows' logits put back in the request's order.
   */
  private async prefillInParts<T>(
    req: Extract<StepRequest, { kind: 'prefill' }>, parts: number[][], hits: (PrefixHit | undefined)[], kit: TensorKit<T>, onPart?: PrefillPart,
  ): Promise<StepResult> {
    const t0 = performance.now();
    this.free(req.free);
    let logits: Float32Array | undefined;
    let tokens: Int32Array | undefined;
    let prompt: (PromptPosition[] | undefined)[] | undefined;
    let vocab = 0;
    let inferNs = 0;
    const cached = req.rows.map(() => 0);
    // Shortest first: while prompts wait for each other, the quick ones' first tokens go out first.
    for (const part of [...parts].reverse()) {
      const rows = part.map((i) => req.rows[i]!);
      const hit = part.length === 1 ? hits[part[0]!] : undefined;
      let r: StepResult;
      try {
        r = await this.run({ kind: 'prefill', free: [], rows, greedy: req.greedy, prefixRoom: req.prefixRoom }, kit, hit);
      } finally {
        if (hit) this.moves.release(hit.kv);
      }
      vocab = r.vocab;
      inferNs += r.inferNs;
      part.forEach((i, k) => (cached[i] = r.cached?.[k] ?? 0));
      if (r.prompt) {
        prompt ??= req.rows.map(() => undefined);
        part.forEach((i, k) => (prompt![i] = r.prompt![k]));
      }
      if (onPart) {
        onPart(part, r);
        continue;
      }
      if (r.tokens) {
        tokens ??= new Int32Array(req.rows.length);
        part.forEach((i, k) => (tokens![i] = r.tokens![k]!));
        continue;
      }
      logits ??= new Float32Array(req.rows.length * vocab);
      part.forEach((i, k) => logits!.set(r.logits!.subarray(k * vocab, (k + 1) * vocab), i * vocab));
    }
    const prefix = this.prefix ? { cached, prefixBytes: this.prefix.bytes } : {};
    return { logits, tokens, vocab, kvBytes: this.bytes(), ...prefix, ...(prompt ? { prompt } : {}), inferNs, inputNs: (performance.now() - t0) * 1e6 - inferNs };
  }

  /**
   * The decode batch for `seqs` and each one's slot in it. While the members stay the same that is the
   * live group as it is. When they change, rows that left become holes and new rows are copied into
   * holes (or appended), so a change copies only the rows that join; a full re-layout (every row
   * copied right-aligned into the shortest common length, no holes) happens only when new rows do not
   * fit the live length, or holes or padding would waste too much of a step.
   */
  private async gather(seqs: number[]): Promise<{ group: KvGroup; order: number[] }> {
    const live = this.live;
    if (live && this.staged.length === 0 && live.seqs.length === seqs.length && live.seqs.every((s, i) => s === seqs[i])) return { group: live, order: seqs.map((_, i) => i) };
    // Holes left the live rows out of the request's order: while nobody joins or leaves, the slots
    // found when they were made still hold (a step keeps its group's `seqs` array).
    const last = this.holeOrder;
    if (live && this.staged.length === 0 && last?.layout === live.seqs && last.seqs.length === seqs.length && last.seqs.every((s, i) => s === seqs[i])) return { group: live, order: last.order };
    const where = new Map<number, { g: KvGroup; row: number; src: number }>();
    const groups = live ? [live, ...this.staged] : this.staged;
    groups.forEach((g, src) => g.seqs.forEach((s, row) => s !== HOLE && where.set(s, { g, row, src })));
    const src = seqs.map((s) => {
      const w = where.get(s);
      if (!w || this.dead.has(s)) throw new TsiError('INTERNAL', `decoder session holds no cache for sequence ${s}`);
      return w;
    });
    const grown = live && (await this.fillHoles(live, groups, seqs, src));
    if (grown) return grown;
    const real = src.map(({ g, row }) => g.real[row]!);
    const len = Math.max(...real);
    const kv = await this.moves.compose(groups.map(KvBatch.rows), src.map((w, r) => rowCopy(w, r, len, this.layout.padding)), seqs.length, len);
    // Everything now lives in the new group: the old ones (and their freed rows) go.
    this.drop(groups);
    this.relayouts++;
    this.live = undefined;
    this.staged = [];
    this.dead.clear();
    return { group: { seqs, len, real, kv }, order: seqs.map((_, i) => i) };
  }

  /**
   * The live group with its left rows made holes and the new rows in holes or appended, or undefined
   * when a full re-layout is better: a new row longer than the live length, more than a quarter of
   * the slots left as holes, or positions padded past half again the longest row.
   */
  private async fillHoles(
    live: KvGroup, groups: KvGroup[], seqs: number[], src: { g: KvGroup; row: number; src: number }[],
  ): Promise<{ group: KvGroup; order: number[] } | undefined> {
    const joining = src.filter(({ g }) => g !== live);
    if (joining.some(({ g, row }) => g.real[row]! > live.len)) return undefined;
    const kept = new Set(seqs);
    const holes: number[] = [];
    live.seqs.forEach((s, b) => (s !== HOLE && kept.has(s)) || holes.push(b));
    const slots = Math.max(live.seqs.length, seqs.length);
    const longest = Math.max(...src.map(({ g, row }) => g.real[row]!));
    if (slots - seqs.length > Math.max(1, slots >> 2) || live.len > 1.5 * longest + 16) return undefined;
    const group: KvGroup = { seqs: [...live.seqs], len: live.len, real: [...live.real], kv: [] };
    for (let b = live.seqs.length; b < slots; b++) {
      group.seqs.push(HOLE);
      group.real.push(0);
      holes.push(b);
    }
    for (const b of holes) group.seqs[b] = HOLE;
    let h = 0;
    const copies: RowCopy[] = [];
    const order = src.map((w, k) => {
      if (w.g === live) return w.row;
      const b = holes[h++]!;
      copies.push(rowCopy(w, b, live.len, this.layout.padding));
      group.seqs[b] = seqs[k]!;
      group.real[b] = w.g.real[w.row]!;
      return b;
    });
    // The live rows stay where they are (the host writes the joining rows into its arrays).
    group.kv = await this.moves.compose(groups.map(KvBatch.rows), copies, slots, live.len, true);
    this.drop(groups, group.kv);
    this.live = group;
    this.staged = [];
    this.dead.clear();
    this.holeFills++;
    this.holeOrder = { layout: group.seqs, seqs: [...seqs], order };
    return { group, order };
  }
}

/**
 * Row `w.row` of source `w.src`, its real tokens into row `to` of an array of `len` positions:
 * right-aligned (left padding) or from position 0 (right padding).
 */
function rowCopy(w: { g: KvGroup; row: number; src: number }, to: number, len: number, padding: DecoderLayout['padding']): RowCopy {
  const n = w.g.real[w.row]!;
  return padding === 'right' ? { src: w.src, row: w.row, from: 0, n, to, at: 0 } : { src: w.src, row: w.row, from: w.g.len - n, n, to, at: len - n };
}
