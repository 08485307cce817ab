/**
 * The engine's side of choosing tokens where the logits are: a step asks its session for argmaxes
 * (`greedy`) only when every row's token is its argmax, and takes the ids a session sends back instead
 * of logits. The session here is a stand-in that answers both ways on purpose (ids that differ from
 * its logits' argmax), so each assertion can only pass through the path it names; the served model's
 * tokens over the real worker are checked in llm-serving.test.ts.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DecoderSession, StepRequest, StepResult } from '../../core/llm/decoder.js';
import { Engine, type EngineSequence } from '../../core/llm/engine.js';
import { Generation, type Accepted } from '../../core/llm/generation.js';
import { generationDefaults, parseGenerationParams } from '../../core/llm/params.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';

const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(import.meta.dirname, '../../models/tiny_gpt/1/tokenizer.json'), 'utf8')));
const V = tokenizer.vocabSize;
// Logits put every row's argmax here; a session answering with ids says this instead.
const LOGITS_TOKEN = 11;
const IDS_TOKEN = 22;

/** Runs one request of `params` through an engine for 3 tokens; returns its tokens and the steps' `greedy` flags. */
async function run(params: Record<string, unknown>): Promise<{ tokens: number[]; greedy: (boolean | undefined)[] }> {
  const greedy: (boolean | undefined)[] = [];
  const session: DecoderSession = {
    device: 'cpu',
    async step(req: StepRequest): Promise<StepResult> {
      if (req.kind === 'free') return { vocab: 0, kvBytes: 0, inferNs: 0, inputNs: 0 };
      greedy.push(req.greedy);
      const rows = req.rows.length;
      if (req.greedy) return { tokens: new Int32Array(rows).fill(IDS_TOKEN), vocab: V, kvBytes: 0, inferNs: 0, inputNs: 0 };
      const logits = new Float32Array(rows * V).fill(-1);
      for (let r = 0; r < rows; r++) logits[r * V + LOGITS_TOKEN] = 50;
      return { logits, vocab: V, kvBytes: 0, inferNs: 0, inputNs: 0 };
    },
    async close() {},
  };
  const p = parseGenerationParams((name) => ({ ignore_eos: true, ...params })[name], generationDefaults(undefined, undefined, undefined));
  const gen = new Generation(tokenizer, tokenizer.encode('once upon a time'), p, 3, []);
  let finished!: () => void;
  const done = new Promise<void>((r) => (finished = r));
  let queued = true;
  const seq: EngineSequence = {
    id: 1, gen, reserve: 8, cancelled: false,
    accepted: (acc: Accepted) => acc.finish && finished(),
    dropped: (err) => {
      throw err ?? new Error('dropped');
    },
  };
  const source = { peek: () => (queued ? seq : undefined), shift: () => (queued ? ((queued = false), seq) : undefined) };
  const engine = new Engine(session, { maxNumSeqs: 4, kvTokens: 64, maxPrefillTokens: 64 }, source, () => {});
  engine.wake();
  await done;
  await engine.idle();
  return { tokens: gen.tokens, greedy };
}

describe('llm engine: tokens chosen by the session', () => {
  it('asks a greedy request\'s steps for argmaxes and takes the ids the session sends', async () => {
    const r = await run({ temperature: 0 });
    expect(r.greedy).toEqual([true, true, true]);
    expect(r.tokens).toEqual([IDS_TOKEN, IDS_TOKEN, IDS_TOKEN]);
  });

  it('wants logits when a penalty, sampling or min_tokens (end tokens masked) changes the choice', async () => {
    for (const params of [{ temperature: 0, repetition_penalty: 1.2 }, { temperature: 0.8, seed: 1 }, { temperature: 0, min_tokens: 2 }]) {
      const r = await run(params);
      if ('min_tokens' in params) {
        // Past min_tokens nothing is masked: the last step is greedy again.
        expect(r.greedy).toEqual([false, false, true]);
        expect(r.tokens).toEqual([LOGITS_TOKEN, LOGITS_TOKEN, IDS_TOKEN]);
      } else {
        expect(r.greedy).toEqual([false, false, false]);
        expect(r.tokens).toEqual([LOGITS_TOKEN, LOGITS_TOKEN, LOGITS_TOKEN]);
      }
    }
  });
});
