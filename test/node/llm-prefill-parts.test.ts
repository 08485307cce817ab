/**
 * A prefill run in parts (prompts of unlike lengths) reported part by part: the rows of a part that
 * is done stream their first token and join the decode steps while the rest of the prefill still
 * runs, and a prefill that fails after some parts fails only the rows not yet reported. The session
 * is a stand-in that holds the prefill open on purpose; the real worker's parts are served in
 * llm-serving.test.ts (16 concurrent prompts of different lengths, tokens equal to decoding alone).
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import type { DecoderSession, PrefillPart, StepRequest, StepResult } from '../../core/llm/decoder.js';
import { Engine, type EngineSequence } from '../../core/llm/engine.js';
import { Generation } from '../../core/llm/generation.js';
import { generationDefaults, parseGenerationParams } from '../../core/llm/params.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';

const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(import.meta.dirname, '../../models/tiny_gpt/1/tokenizer.json'), 'utf8')));
const V = tokenizer.vocabSize;
const ids = (rows: number) => ({ tokens: new Int32Array(rows).fill(7), vocab: V, kvBytes: 0, inferNs: 0, inputNs: 0 });

/**
 * Three requests prefilled together by a session that reports row 1 at once and the others when
 * `release` is called (or fails them then, with `fail`).
 */
function setup(fail: boolean) {
  const log: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const session: DecoderSession = {
    device: 'cpu',
    concurrentPrefill: true,
    async step(req: StepRequest, onPart?: PrefillPart): Promise<StepResult> {
      if (req.kind === 'free') return { vocab: 0, kvBytes: 0, inferNs: 0, inputNs: 0 };
      if (req.kind === 'decode') {
        log.push(`decode ${req.rows.map((r) => r.seq).join(',')}`);
        return ids(req.rows.length);
      }
      onPart!([1], ids(1));
      await gate;
      if (fail) throw new Error('the model broke');
      onPart!([0, 2], ids(2));
      return { vocab: V, kvBytes: 0, inferNs: 0, inputNs: 0 };
    },
    async close() {},
  };
  const p = parseGenerationParams((name) => ({ ignore_eos: true, temperature: 0 })[name], generationDefaults(undefined, undefined, undefined));
  const finished: Promise<string>[] = [];
  const seqs: EngineSequence[] = [0, 1, 2].map((i) => {
    let done!: (outcome: string) => void;
    finished.push(new Promise((r) => (done = r)));
    const gen = new Generation(tokenizer, tokenizer.encode('x'.repeat(1 + 10 * i)), p, 3, []);
    return {
      id: 10 + i, gen, reserve: 8, cancelled: false,
      accepted: (acc, first) => {
        if (first) log.push(`first ${10 + i}`);
        if (acc.finish) done('finished');
      },
      dropped: (err) => done(`dropped: ${err?.message}`),
    };
  });
  const queue = [...seqs];
  const engine = new Engine(session, { maxNumSeqs: 4, kvTokens: 64, maxPrefillTokens: 512 }, { peek: () => queue[0], shift: () => queue.shift() }, () => {});
  engine.wake();
  return { log, release, finished, engine };
}

it('streams the rows of a finished part and decodes them while the rest of the prefill runs', async () => {
  const { log, release, finished, engine } = setup(false);
  // Row 1 runs to its end (3 tokens: the prefill's and two decode steps') with the prefill still open.
  expect(await finished[1]).toBe('finished');
  // (A step's tokens go to their clients once the next step is on its way.)
  expect([...log].sort()).toEqual(['decode 11', 'decode 11', 'first 11']);
  release();
  expect(await Promise.all(finished)).toEqual(['finished', 'finished', 'finished']);
  await engine.idle();
  expect(log.slice(3).sort()).toEqual(['decode 10,12', 'decode 10,12', 'first 10', 'first 12']);
});

it('fails only the rows not yet reported when a prefill fails after a part', async () => {
  const { release, finished, engine } = setup(true);
  expect(await finished[1]).toBe('finished');
  release();
  const outcomes = await Promise.all(finished);
  expect(outcomes[1]).toBe('finished');
  for (const i of [0, 2]) expect(outcomes[i]).toMatch(/^dropped: the decoder failed: the model broke/);
  await engine.idle();
  expect(engine.reservedTokens).toBe(0);
});
