/**
 * The decode loop where the model is (core/llm/auto-decode.ts): decode steps run back to back beside
 * the KV batch, the engine accepting each step's tokens as they come and steering the loop (rows
 * dropped at a stop string or cancellation, a stop when new rows join). Driven here in-process with
 * the real onnxruntime-node session of tiny_gpt, the same engine run twice — once with the session
 * stepping by itself, once step by step as before — with requests arriving while others run: every
 * request's tokens must be equal both ways and equal to the reference decoder's alone; a stop string
 * or a cancellation must end its stream with no token after it and the loop must stop computing it
 * within a step or two. Seeded sampled requests (temperature, top-k, top-p, the penalties,
 * min_tokens) drawn in the loop must give the step-by-step loop's tokens exactly: the loop carries
 * each row's PRNG state and penalties' history on from the engine's and hands the state back, so
 * a state reset or not taken back, a history or penalty left out, or min_tokens ignored there fails. (Served over the worker and HTTP: llm-serving.test.ts.)
 *
 * Beneath it, the decode batch's member changes (core/llm/kv-batch.ts): a sequence that leaves
 * becomes a hole, a new one is copied into a hole or appended, and the batch is laid out anew only
 * when that would waste too much; driven through KvBatch with sequences joining and leaving at
 * different steps, each one's greedy tokens must equal the reference's alone, so a row read from the
 * wrong slot, a hole that leaks into a row, or logits handed back in the wrong order fail it.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { autoDecode, type Steering } from '../../core/llm/auto-decode.js';
import { layoutOf, type AutoTokens, type DecoderLayout, type DecoderSession, type PrefillPart, type StepRequest, type StepResult } from '../../core/llm/decoder.js';
import { Engine, type EngineSequence } from '../../core/llm/engine.js';
import { Generation, type Accepted } from '../../core/llm/generation.js';
import { KvBatch, type KvArray, type TensorKit } from '../../core/llm/kv-batch.js';
import { generationDefaults, parseGenerationParams } from '../../core/llm/params.js';
import { argmax } from '../../core/llm/sampling.js';
import { readOnnxIo } from '../../runtime-node/onnx/info.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

const DIR = join(import.meta.dirname, '../../models/tiny_gpt');
let session: ort.InferenceSession;
let layout: DecoderLayout;
let ref: ReferenceDecoder;
let kit: TensorKit<ort.Tensor>;

beforeAll(async () => {
  const bytes = readFileSync(join(DIR, '1', 'model.onnx'));
  layout = layoutOf(readOnnxIo(bytes), JSON.parse(readFileSync(join(DIR, '1', 'config.json'), 'utf8')));
  session = await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1 });
  ref = await referenceDecoder(DIR, 1);
  kit = {
    int64: (d, dims) => new ort.Tensor('int64', d, dims),
    bool: (d, dims) => new ort.Tensor('bool', d, dims),
    kv: (d: KvArray, dims) => new ort.Tensor(layout.kvType, d, dims),
    data: (t) => t.data as Float32Array,
    dims: (t) => t.dims,
    run: (f, fe) => session.run(f, fe) as Promise<Record<string, ort.Tensor>>,
  };
});
afterAll(async () => {
  await session?.release();
  await ref?.release();
});

/** A decoder session in this thread over one KvBatch; with `auto`, greedy decodes run as autoDecode. */
class InProcessSession implements DecoderSession {
  readonly device = 'cpu';
  private readonly batch = new KvBatch(layout);
  private steering?: Steering;
  /** Steps run by the loop, and how many tokens it computed per sequence. */
  autoSteps = 0;
  /** Decode steps the engine asked for one at a time. */
  steppedWith = 0;
  readonly computed = new Map<number, number>();

  constructor(readonly autoDecode: boolean) {}

  async step(req: StepRequest, _onPart?: PrefillPart, onTokens?: AutoTokens): Promise<StepResult> {
    if (req.kind === 'decode' && req.auto) {
      const steer: Steering = { free: [], stop: false };
      this.steering = steer;
      try {
        return await autoDecode(this.batch, kit, req, steer, (seqs, tokens, r, random) => {
          this.autoSteps++;
          for (const s of seqs) this.computed.set(s, (this.computed.get(s) ?? 0) + 1);
          onTokens!(seqs, tokens, { inferNs: r.inferNs, inputNs: r.inputNs, kvBytes: r.kvBytes, random });
        }, () => new Promise((resolve) => setImmediate(resolve)));
      } finally {
        this.steering = undefined;
      }
    }
    if (req.kind === 'decode') {
      this.steppedWith++;
      for (const r of req.rows) this.computed.set(r.seq, (this.computed.get(r.seq) ?? 0) + 1);
    }
    return this.batch.step(req, kit);
  }

  steer(msg: { free?: number[]; stop?: boolean }): void {
    if (!this.steering) return;
    if (msg.free) this.steering.free.push(...msg.free);
    if (msg.stop) this.steering.stop = true;
  }

  async close(): Promise<void> {}
}

let nextId = 1;
interface Req {
  prompt: string;
  maxTokens: number;
  params?: Record<string, unknown>;
  /** Cancelled once it has this many tokens. */
  cancelAt?: number;
}
interface Outcome {
  id: number;
  tokens: number[];
  text: string;
  finish?: string;
  dropped: boolean;
  /** accepted/dropped calls after the one that ended it. */
  after: number;
}

/**
 * Runs `reqs` through an engine over `s`; the first half is queued at once, the rest once the
 * first request has 3 tokens (so they join running batches).
 */
async function serve(s: InProcessSession, reqs: Req[]): Promise<Outcome[]> {
  const queue: EngineSequence[] = [];
  const outcomes: Outcome[] = [];
  let left = reqs.length;
  let done!: () => void;
  const all = new Promise<void>((r) => (done = r));
  const end = (o: Outcome) => {
    if (o.finish || o.dropped) o.after++;
  };
  const seqs = reqs.map((r) => {
    const p = parseGenerationParams((name) => ({ temperature: 0, ...r.params } as Record<string, unknown>)[name], generationDefaults(undefined, undefined, ref.tokenizer.eosId));
    const gen = new Generation(ref.tokenizer, ref.tokenizer.encode(r.prompt), p, r.maxTokens, ref.tokenizer.eosId !== undefined ? [ref.tokenizer.eosId] : []);
    const o: Outcome = { id: nextId++, tokens: gen.tokens, text: '', dropped: false, after: 0 };
    outcomes.push(o);
    const seq: EngineSequence = {
      id: o.id, gen, reserve: gen.prompt.length + r.maxTokens,
      get cancelled() {
        return r.cancelAt !== undefined && gen.tokens.length >= r.cancelAt;
      },
      accepted: (acc: Accepted) => {
        end(o);
        o.text += acc.delta;
        if (acc.finish) {
          o.finish = acc.finish;
          if (--left === 0) done();
        }
        if (o === outcomes[0] && gen.tokens.length === 3) {
          queue.push(...late);
          engine.wake();
        }
      },
      dropped: (err) => {
        if (err) throw err;
        end(o);
        o.dropped = true;
        if (--left === 0) done();
      },
    };
    return seq;
  });
  const half = Math.ceil(seqs.length / 2);
  const late = seqs.slice(half);
  queue.push(...seqs.slice(0, half));
  const engine: Engine = new Engine(s, { maxNumSeqs: 32, kvTokens: 1 << 16, maxPrefillTokens: 4096 }, { peek: () => queue[0], shift: () => queue.shift() }, () => {});
  engine.wake();
  await all;
  await engine.idle();
  return outcomes;
}

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx of black quartz'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed * 3) % WORDS.length]).join(' ');

describe('llm decode loop where the model is', () => {
  for (const n of [1, 4, 16]) {
    it(`gives each of ${n} concurrent greedy requests the tokens of the step-by-step loop and of the reference`, async () => {
      const reqs = Array.from({ length: n }, (_, i) => ({ prompt: promptOf(1 + ((i * 5) % 23), i + n), maxTokens: 4 + ((i * 11) % 29) }));
      const auto = new InProcessSession(true);
      const got = await serve(auto, reqs);
      const old = await serve(new InProcessSession(false), reqs);
      expect(auto.autoSteps).toBeGreaterThan(0);
      for (const [i, r] of reqs.entries()) {
        const expected = await ref.greedy(r.prompt, r.maxTokens);
        expect({ i, tokens: got[i]!.tokens }).toEqual({ i, tokens: old[i]!.tokens });
        expect({ i, tokens: got[i]!.tokens }).toEqual({ i, tokens: expected });
        expect(got[i]!.after).toBe(0);
      }
    }, 60_000);
  }

  // Sampling of every kind, each request its own seed; min_tokens where the model tends to end early.
  const SAMPLED = [
    { temperature: 0.9 }, { temperature: 1.2, top_k: 8 }, { temperature: 0.8, top_p: 0.85 },
    { temperature: 1, repetition_penalty: 1.6 }, { temperature: 0.7, presence_penalty: 1.5, frequency_penalty: 0.8 },
    { temperature: 1.1, top_k: 20, top_p: 0.9, repetition_penalty: 1.3, min_tokens: 12 }, { temperature: 0, repetition_penalty: 1.8, min_tokens: 6 },
    { temperature: 1.3, min_tokens: 20, frequency_penalty: 1.2 },
  ];
  const sampledReqs = (n: number, extra: (i: number) => Record<string, unknown> = () => ({})): Req[] => Array.from({ length: n }, (_, i) => ({
    prompt: promptOf(1 + ((i * 5) % 23), i + n), maxTokens: 6 + ((i * 11) % 29), params: { ...SAMPLED[i % SAMPLED.length], seed: 1000 + i * 17, ...extra(i) },
  }));

  for (const n of [1, 4, 16]) {
    it(`gives each of ${n} concurrent seeded sampled requests the tokens of the step-by-step loop`, async () => {
      const reqs = sampledReqs(n);
      const auto = new InProcessSession(true);
      const got = await serve(auto, reqs);
      const old = await serve(new InProcessSession(false), reqs);
      // Every step ran in the loop, the prefills' first tokens aside.
      expect(auto.autoSteps).toBeGreaterThan(0);
      for (const [i] of reqs.entries()) {
        expect({ i, tokens: got[i]!.tokens }).toEqual({ i, tokens: old[i]!.tokens });
        expect(got[i]!.after).toBe(0);
      }
      // The requests really are sampled: another seed gives other tokens.
      const reseeded = await serve(new InProcessSession(true), sampledReqs(n, (i) => ({ seed: 5 + i })));
      expect(reseeded.map((o) => o.tokens)).not.toEqual(got.map((o) => o.tokens));
    }, 120_000);
  }

  it('applies min_tokens in the loop: prompts the model soon ends go on past their end token, as step by step', async () => {
    // Prompts whose greedy answer ends with EOS within 3-8 tokens.
    const early = [[14, 16], [16, 18], [6, 19], [15, 8], [19, 8]] as const;
    const reqs: Req[] = early.map(([n, seed], i) => ({ prompt: promptOf(n, seed), maxTokens: 30, params: { min_tokens: 20, ...(i % 2 ? { temperature: 0.3, seed: 7 + i } : {}) } }));
    const auto = new InProcessSession(true);
    const got = await serve(auto, reqs);
    const old = await serve(new InProcessSession(false), reqs);
    expect(auto.autoSteps).toBeGreaterThan(0);
    for (const [i, r] of reqs.entries()) {
      expect({ i, tokens: got[i]!.tokens }).toEqual({ i, tokens: old[i]!.tokens });
      expect(got[i]!.tokens.length).toBeGreaterThanOrEqual(20);
      if (i % 2 === 0) expect((await ref.greedy(r.prompt, 30)).length).toBeLessThan(10);
    }
  }, 120_000);

  it('keeps a batch with a log-probabilities row on the per-step path, and sampled rows consistent as the paths alternate', async () => {
    // The logprobs request is short: the batch changes path when it ends, and again as rows join.
    const reqs = sampledReqs(8, (i) => (i === 1 ? { logprobs: 2 } : {}));
    reqs[1]!.maxTokens = 5;
    const auto = new InProcessSession(true);
    const got = await serve(auto, reqs);
    const old = await serve(new InProcessSession(false), reqs);
    expect(auto.autoSteps).toBeGreaterThan(0);
    expect(auto.steppedWith).toBeGreaterThan(0);
    for (const [i] of reqs.entries()) expect({ i, tokens: got[i]!.tokens }).toEqual({ i, tokens: old[i]!.tokens });
  }, 120_000);

  it('ends a stream at a stop string or a cancellation with nothing after it, and stops computing it', async () => {
    const prompt = 'a lazy dog';
    const full = ref.tokenizer.decode(await ref.greedy(prompt, 40, { ignoreEos: true }));
    const stop = full.slice(12, 16);
    const reqs: Req[] = [
      { prompt, maxTokens: 40, params: { ignore_eos: true, stop: [stop] } },
      { prompt: 'the quick brown fox', maxTokens: 40, params: { ignore_eos: true }, cancelAt: 5 },
      { prompt: 'seven wizards', maxTokens: 30, params: { ignore_eos: true } },
    ];
    const auto = new InProcessSession(true);
    const [stopped, cancelled, other] = await serve(auto, reqs);
    expect(auto.autoSteps).toBeGreaterThan(0);
    expect(stopped).toMatchObject({ text: full.slice(0, full.indexOf(stop)), finish: 'stop', after: 0 });
    expect(stopped!.tokens.length).toBeLessThan(40);
    // The loop computed at most the step in flight beyond the stop (and the prefill made the first).
    expect(auto.computed.get(stopped!.id)! + 1).toBeLessThanOrEqual(stopped!.tokens.length + 2);
    expect(cancelled).toMatchObject({ dropped: true, after: 0 });
    expect(cancelled!.tokens.length).toBe(5);
    expect(auto.computed.get(cancelled!.id)! + 1).toBeLessThanOrEqual(5 + 2);
    expect(other).toMatchObject({ finish: 'length' });
    expect(other!.tokens.length).toBe(30);
  }, 60_000);
});

const PROMPTS = ['once upon a time', 'the quick brown fox jumps over the lazy dog and', 'hello', 'a b c d e f', 'in the beginning there was', 'why', 'seven wizards quietly hex', 'jovial sphinx of black quartz judge my vow'];

/**
 * Sequences (prompt index, the step it joins at, tokens it makes) decoded in one KvBatch: each joins
 * with a prefill of its own and leaves when it has its tokens; returns each one's tokens.
 */
async function churn(plan: { p: number; at: number; n: number }[], batch = new KvBatch(layout)): Promise<number[][]> {
  const out = plan.map(() => [] as number[]);
  const live: number[] = [];
  let free: number[] = [];
  for (let step = 0; out.some((o, i) => o.length < plan[i]!.n); step++) {
    const joining = plan.map((x, i) => ({ ...x, i })).filter((x) => x.at === step);
    for (const j of joining) {
      const r = await batch.step({ kind: 'prefill', free: [], rows: [{ seq: j.i, tokens: ref.tokenizer.encode(PROMPTS[j.p]!) }] }, kit);
      out[j.i]!.push(argmax(r.logits!.subarray(0, r.vocab)));
      live.push(j.i);
    }
    for (let k = live.length - 1; k >= 0; k--) {
      const i = live[k]!;
      if (out[i]!.length >= plan[i]!.n) {
        live.splice(k, 1);
        free.push(i);
      }
    }
    if (live.length === 0) continue;
    const r = await batch.step({ kind: 'decode', free, rows: live.map((i) => ({ seq: i, token: out[i]!.at(-1)! })) }, kit);
    free = [];
    live.forEach((i, k) => out[i]!.push(argmax(r.logits!.subarray(k * r.vocab, (k + 1) * r.vocab))));
  }
  return out;
}

describe('llm KV batch: holes and in-place joins', () => {
  it('gives every sequence its reference tokens while others join and leave at different steps', async () => {
    const plan = [
      { p: 0, at: 0, n: 12 }, { p: 1, at: 0, n: 5 }, { p: 2, at: 0, n: 9 }, { p: 3, at: 0, n: 14 },
      // These join where earlier ones left (holes), one beside a hole left empty, one appended.
      { p: 4, at: 6, n: 6 }, { p: 5, at: 9, n: 7 }, { p: 6, at: 10, n: 4 }, { p: 7, at: 11, n: 8 },
      // A long prompt joins late: longer than the live length, so the batch is laid out anew.
      { p: 1, at: 13, n: 3 },
    ];
    const batch = new KvBatch(layout);
    const got = await churn(plan, batch);
    for (const [i, x] of plan.entries()) {
      expect(got[i], `sequence ${i} (prompt ${x.p}, joins at step ${x.at})`).toEqual(await ref.greedy(PROMPTS[x.p]!, x.n, { ignoreEos: true }));
    }
    // Both ways of changing members were taken.
    expect(batch.holeFills).toBeGreaterThan(0);
    expect(batch.relayouts).toBeGreaterThan(0);
  });
});
