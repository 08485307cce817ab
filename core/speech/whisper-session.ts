/**
 * Whisper's merged decoder as a decoder session (core/llm/decoder.ts), so that the llm engine's
 * in-flight batching drives it: requests join and leave the running batch at step boundaries, each
 * row carrying its self-attention cache (growing a position a step) and its cross-attention cache.
 *
 * A prefill runs `decoder_model_merged`'s first branch (`use_cache_branch` false) on the rows' forced
 * tokens and their encoder outputs (given beforehand with `attach`): it returns the first logits, the
 * self-attention cache of the forced tokens and the cross-attention cache computed from the encoder
 * output, which is kept and fed back unchanged at every later step (with an empty
 * `encoder_hidden_states`), as transformers.js does.
 *
 * The merged decoder takes no attention mask and numbers positions from the cache's length, so rows
 * whose caches differ in length cannot share a model run (padding would be attended to and shift the
 * positions). Rows are therefore kept in *cohorts* of one length: those prefilled together with
 * forced prefixes of one length, and cohorts that reach the same length merge. A decode step of the
 * engine is one model run per cohort; a step whose rows are all of one cohort is one run. A cohort
 * whose rows left is compacted at its next step (the KvMoves of the llm's caches copy the rows).
 *
 * Concurrency: the engine sends one step at a time, and each of its model runs goes through the
 * decoder's inner instance one after another. The caches live on this thread and cross to the
 * model's thread with each run (the inner onnxruntime instance is stateless).
 */

import { TsiError } from '../errors.js';
import type { DecoderLayout, DecoderSession, StepRequest, StepResult } from '../llm/decoder.js';
import { hostMoves, type KvMoves, type RowCopy } from '../llm/kv-moves.js';
import { lastRows } from '../llm/step-rows.js';
import type { Tensor } from '../types.js';

/** The decoder's shape: layers, attention heads, head size and model width. */
export interface WhisperDims {
  layers: number;
  heads: number;
  headDim: number;
  dModel: number;
}

/** Runs the decoder's inner model on `inputs` for `rows` rows, answering the `outputs` asked for. */
export type DecoderRun = (inputs: Tensor[], outputs: string[], rows: number) => Promise<Map<string, Tensor>>;

/** Rows whose self-attention caches have one length, and their cross-attention caches. */
interface Cohort {
  seqs: number[];
  len: number;
  /** Keys and values of each layer: [rows, heads, len, headDim]. */
  self: Float32Array[];
  /** Keys and values of each layer: [rows, heads, encoderPositions, headDim]. */
  cross: Float32Array[];
  /** Encoder positions (1500 for Whisper's 30 s window). */
  E: number;
}

/** What the decoding did, for the model's statistics (`whisper_stats`). */
export class WhisperStats {
  decodeSteps = 0;
  decodeRows = 0;
  maxRowsInStep = 0;
  prefillSteps = 0;
  /** Sequences prefilled while others were decoding: rows that joined a running batch. */
  joinedSequences = 0;
  /** Model runs of the decoder (a step runs once per cohort). */
  decoderRuns = 0;
  windows = 0;

  toJson(): Record<string, number> {
    return {
      windows: this.windows, prefill_steps: this.prefillSteps, decode_steps: this.decodeSteps, decode_rows: this.decodeRows,
      max_rows_in_step: this.maxRowsInStep, joined_sequences: this.joinedSequences, decoder_runs: this.decoderRuns,
    };
  }
}

const elapsedNs = (t: number) => (performance.now() - t) * 1e6;

export class WhisperSession implements DecoderSession {
  private readonly encoded = new Map<number, { hidden: Float32Array; E: number }>();
  private cohorts: Cohort[] = [];
  private readonly where = new Map<number, Cohort>();
  private readonly moves: KvMoves;

  constructor(readonly device: string, private readonly dims: WhisperDims, private readonly run: DecoderRun, private readonly stats: WhisperStats) {
    // The llm's host moves copy whole rows of [rows, heads, len, headDim] arrays, keys and values per layer.
    const layout: Pick<DecoderLayout, 'kvHeads' | 'headDim' | 'kvType' | 'past'> = {
      kvHeads: dims.heads, headDim: dims.headDim, kvType: 'float32', past: Array.from({ length: dims.layers }, () => ({ key: '', value: '' })),
    };
    this.moves = hostMoves(layout);
  }

  /** Sequence `seq`'s encoder output, [E, dModel]: its prefill computes the cross-attention cache from it. */
  attach(seq: number, hidden: Float32Array, E: number): void {
    this.encoded.set(seq, { hidden, E });
  }

  async step(req: StepRequest): Promise<StepResult> {
    const t0 = performance.now();
    this.free(req.free);
    if (req.kind === 'free') return { vocab: 0, kvBytes: this.bytes(), inferNs: 0, inputNs: elapsedNs(t0) };
    const timed = { inferNs: 0 };
    let out: { logits: Float32Array; vocab: number };
    if (req.kind === 'prefill') out = await this.prefill(req.rows, timed);
    else out = await this.decode(req.rows, timed);
    return { ...out, kvBytes: this.bytes(), inferNs: timed.inferNs, inputNs: Math.max(0, elapsedNs(t0) - timed.inferNs) };
  }

  /** Rows with forced prefixes of one length run together; each such run starts a cohort. */
  private async prefill(rows: { seq: number; tokens: number[] }[], timed: { inferNs: number }): Promise<{ logits: Float32Array; vocab: number }> {
    const { layers: L, heads: H, headDim: hd, dModel } = this.dims;
    const byLength = new Map<number, number[]>();
    rows.forEach((r, k) => byLength.set(r.tokens.length, [...(byLength.get(r.tokens.length) ?? []), k]));
    let logits: Float32Array | undefined;
    let vocab = 0;
    for (const [S, ks] of byLength) {
      const B = ks.length;
      const enc = ks.map((k) => {
        const e = this.encoded.get(rows[k]!.seq);
        if (!e) throw new TsiError('INTERNAL', `whisper decoder: no encoder output for sequence ${rows[k]!.seq}`);
        return e;
      });
      const E = enc[0]!.E;
      const ids = new BigInt64Array(B * S);
      const hidden = new Float32Array(B * E * dModel);
      ks.forEach((k, b) => {
        rows[k]!.tokens.forEach((t, j) => (ids[b * S + j] = BigInt(t)));
        hidden.set(enc[b]!.hidden, b * E * dModel);
      });
      const empty = () => new Float32Array(0);
      const res = await this.timedRun(timed, this.inputs(ids, [B, S], hidden, E, false, B, 0, Array.from({ length: 2 * L }, empty), 0, Array.from({ length: 2 * L }, empty)), true, B);
      const self = this.presents(res, 'decoder', [B, H, S, hd]);
      const cross = this.presents(res, 'encoder', [B, H, E, hd]);
      const cohort: Cohort = { seqs: ks.map((k) => rows[k]!.seq), len: S, self, cross, E };
      this.cohorts.push(cohort);
      for (const s of cohort.seqs) {
        this.where.set(s, cohort);
        this.encoded.delete(s);
      }
      ({ logits, vocab } = this.scatter(res, B, S, ks, rows.length, logits));
    }
    return { logits: logits!, vocab };
  }

  /** One run per cohort (cohorts of one length merged first, rows that left dropped). */
  private async decode(rows: { seq: number; token: number }[], timed: { inferNs: number }): Promise<{ logits: Float32Array; vocab: number }> {
    const { layers: L } = this.dims;
    const byLength = new Map<number, number[]>();
    rows.forEach((r, k) => {
      const c = this.where.get(r.seq);
      if (!c) throw new TsiError('INTERNAL', `whisper decoder holds no cache for sequence ${r.seq}`);
      byLength.set(c.len, [...(byLength.get(c.len) ?? []), k]);
    });
    let logits: Float32Array | undefined;
    let vocab = 0;
    for (const ks of byLength.values()) {
      const c = await this.cohortOf(ks.map((k) => rows[k]!.seq));
      const B = c.seqs.length;
      const order = ks.map((k) => c.seqs.indexOf(rows[k]!.seq));
      const ids = new BigInt64Array(B);
      ks.forEach((k, j) => (ids[order[j]!] = BigInt(rows[k]!.token)));
      // Copies of the cross-attention cache: the runtime may move input buffers to the model's thread.
      const res = await this.timedRun(timed, this.inputs(ids, [B, 1], new Float32Array(0), 0, true, B, c.len, c.self, c.E, c.cross.map((a) => a.slice())), false, B);
      c.len += 1;
      c.self = this.presents(res, 'decoder', [B, this.dims.heads, c.len, this.dims.headDim]);
      ({ logits, vocab } = this.scatter(res, B, 1, ks, rows.length, logits, order));
      if (c.self.length !== 2 * L) throw new TsiError('INTERNAL', 'whisper decoder returned too few present caches');
    }
    return { logits: logits!, vocab };
  }

  /**
   * The cohort of exactly `seqs` (of one length): the one holding them when it holds nothing else,
   * else a new one composed from the cohorts they are in (rows that left are dropped on the way).
   */
  private async cohortOf(seqs: number[]): Promise<Cohort> {
    const from = [...new Set(seqs.map((s) => this.where.get(s)!))];
    if (from.length === 1 && from[0]!.seqs.length === seqs.length) return from[0]!;
    const len = from[0]!.len;
    const E = from[0]!.E;
    const copies = (n: number): RowCopy[] => seqs.map((s, to) => {
      const c = this.where.get(s)!;
      return { src: from.indexOf(c), row: c.seqs.indexOf(s), from: 0, n, to, at: 0 };
    });
    const self = await this.moves.compose(from.map((c) => ({ kv: c.self, rows: c.seqs.length, len })), copies(len), seqs.length, len);
    const cross = await this.moves.compose(from.map((c) => ({ kv: c.cross, rows: c.seqs.length, len: E })), copies(E), seqs.length, E);
    const cohort: Cohort = { seqs: [...seqs], len, self: self as Float32Array[], cross: cross as Float32Array[], E };
    this.cohorts = [...this.cohorts.filter((c) => !from.includes(c)), cohort];
    for (const s of seqs) this.where.set(s, cohort);
    return cohort;
  }

  private inputs(
    ids: BigInt64Array, idShape: number[], hidden: Float32Array, E: number, cached: boolean, B: number,
    past: number, self: Float32Array[], crossLen: number, cross: Float32Array[],
  ): Tensor[] {
    const { layers: L, heads: H, headDim: hd, dModel } = this.dims;
    const t: Tensor[] = [
      { name: 'input_ids', datatype: 'INT64', shape: idShape, data: ids },
      { name: 'encoder_hidden_states', datatype: 'FP32', shape: [B, E, dModel], data: hidden },
      { name: 'use_cache_branch', datatype: 'BOOL', shape: [1], data: Uint8Array.of(cached ? 1 : 0) },
    ];
    for (let l = 0; l < L; l++) {
      t.push({ name: `past_key_values.${l}.decoder.key`, datatype: 'FP32', shape: [B, H, past, hd], data: self[2 * l]! });
      t.push({ name: `past_key_values.${l}.decoder.value`, datatype: 'FP32', shape: [B, H, past, hd], data: self[2 * l + 1]! });
      t.push({ name: `past_key_values.${l}.encoder.key`, datatype: 'FP32', shape: [B, H, crossLen, hd], data: cross[2 * l]! });
      t.push({ name: `past_key_values.${l}.encoder.value`, datatype: 'FP32', shape: [B, H, crossLen, hd], data: cross[2 * l + 1]! });
    }
    return t;
  }

  private async timedRun(timed: { inferNs: number }, inputs: Tensor[], first: boolean, B: number): Promise<Map<string, Tensor>> {
    const outs = ['logits'];
    for (let l = 0; l < this.dims.layers; l++) {
      outs.push(`present.${l}.decoder.key`, `present.${l}.decoder.value`);
      if (first) outs.push(`present.${l}.encoder.key`, `present.${l}.encoder.value`);
    }
    const t = performance.now();
    const res = await this.run(inputs, outs, B);
    timed.inferNs += elapsedNs(t);
    this.stats.decoderRuns++;
    return res;
  }

  /** The present caches of one kind, each checked against `shape`. */
  private presents(res: Map<string, Tensor>, kind: 'decoder' | 'encoder', shape: number[]): Float32Array[] {
    return Array.from({ length: 2 * this.dims.layers }, (_, j) => {
      const t = res.get(`present.${j >> 1}.${kind}.${j & 1 ? 'value' : 'key'}`);
      if (!t || t.shape.join(',') !== shape.join(',')) {
        throw new TsiError('INTERNAL', `whisper decoder returned present.${j >> 1}.${kind} of shape [${t?.shape.join(',') ?? ''}], expected [${shape.join(',')}]`);
      }
      return t.data as Float32Array;
    });
  }

  /** Row b's last-position logits into the step's row ks[j] (b = order[j], or j). */
  private scatter(res: Map<string, Tensor>, B: number, S: number, ks: number[], total: number, into?: Float32Array, order?: number[]): { logits: Float32Array; vocab: number } {
    const t = res.get('logits')!;
    const V = t.shape[2]!;
    const rowsOut = lastRows(t.data as Float32Array, B, S, V, false);
    const logits = into ?? new Float32Array(total * V);
    ks.forEach((k, j) => {
      const b = order ? order[j]! : j;
      logits.set(rowsOut.subarray(b * V, (b + 1) * V), k * V);
    });
    return { logits, vocab: V };
  }

  /** Sequences that left: a cohort that holds none of the others goes; the rest are dropped at its next step. */
  private free(seqs: readonly number[]): void {
    for (const s of seqs) {
      this.where.delete(s);
      this.encoded.delete(s);
    }
    if (seqs.length > 0) this.cohorts = this.cohorts.filter((c) => c.seqs.some((s) => this.where.get(s) === c));
  }

  private bytes(): number {
    return this.cohorts.reduce((n, c) => n + 4 * [...c.self, ...c.cross].reduce((m, a) => m + a.length, 0), 0);
  }

  async close(): Promise<void> {
    this.cohorts = [];
    this.where.clear();
    this.encoded.clear();
  }
}
