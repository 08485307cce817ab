/**
 * The peer bench/llm.ts measures tsi against: transformers.js (@huggingface/transformers) on the same
 * model folder, in the same process as the naive loop, two ways —
 *   sequential — one `generate` per request, requests waiting their turn in arrival order: what a
 *                Node server wrapping transformers.js does;
 *   batched    — its own `generate` over a batch of prompts at once (left-padded, greedy): the best
 *                it can do, given every prompt up front, which a server taking requests as they come
 *                never is; each round of the streams' requests is one batch.
 * Prompts are encoded by tsi's tokenizer, so all sides decode the same ids; every request generates
 * exactly `tokens` tokens (min_new_tokens = max_new_tokens stands for tsi's ignore_eos). transformers.js
 * wants the onnx-community layout (onnx/model.onnx beside config.json): a GPT folder with a flat
 * 1/model.onnx is linked into it.
 */

import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { AutoModelForCausalLM, BaseStreamer, env, Tensor } from '@huggingface/transformers';
import type { Tokenizer } from '../core/llm/tokenizer.js';
import { promptOf, type Result } from './llm-common.js';

/** `one`, its calls run one after another in call order (a server with no batching). */
export function oneAtATime<A extends unknown[], T>(one: (...a: A) => Promise<T>): (...a: A) => Promise<T> {
  let turn: Promise<unknown> = Promise.resolve();
  return (...a) => {
    const mine = turn.then(() => one(...a));
    turn = mine.catch(() => undefined);
    return mine;
  };
}

export interface TransformersPeer {
  /** One request (one at a time): the tokens it generated; `firstToken` when its first is chosen. */
  sequential(prompt: string, firstToken: () => void): Promise<number>;
  /** `rounds` batches of `streams` prompts, the prompts drive() sends at that many streams. */
  batched(streams: number, rounds: number): Promise<Result>;
  release(): Promise<void>;
}

/** The model folder as transformers.js reads it: `<model>/1` itself, or links beside it in `work`. */
function hfFolder(modelDir: string, work: string): string {
  const version = join(modelDir, '1');
  if (existsSync(join(version, 'onnx', 'model.onnx'))) return version;
  const dir = join(work, 'transformers.js', basename(modelDir));
  mkdirSync(join(dir, 'onnx'), { recursive: true });
  for (const f of ['config.json', 'generation_config.json']) symlinkSync(join(version, f), join(dir, f));
  symlinkSync(join(version, 'model.onnx'), join(dir, 'onnx', 'model.onnx'));
  return dir;
}

/** Calls `first` when generate() hands over its first chosen tokens (its first put is the prompt). */
class FirstToken extends BaseStreamer {
  private puts = 0;
  constructor(private readonly first: () => void) {
    super();
  }
  override put(): void {
    if (++this.puts === 2) this.first();
  }
  override end(): void {}
}

export async function transformersPeer(modelDir: string, work: string, tokenizer: Tokenizer, tokens: number, threads: number): Promise<TransformersPeer> {
  const folder = hfFolder(modelDir, work);
  env.allowRemoteModels = false;
  env.localModelPath = dirname(folder) + '/';
  const model = await AutoModelForCausalLM.from_pretrained(basename(folder), { dtype: 'fp32', device: 'cpu', session_options: { intraOpNumThreads: threads } });
  const pad = BigInt(tokenizer.eosId ?? 0);
  /** Greedy, `tokens` new tokens for each prompt in one generate(); the count generated. */
  const generate = async (prompts: string[], firstToken: () => void): Promise<number> => {
    const ids = prompts.map((p) => tokenizer.encode(p));
    const len = Math.max(...ids.map((x) => x.length));
    const input = new BigInt64Array(prompts.length * len).fill(pad);
    const mask = new BigInt64Array(prompts.length * len);
    ids.forEach((x, b) => x.forEach((id, k) => {
      input[b * len + len - x.length + k] = BigInt(id);
      mask[b * len + len - x.length + k] = 1n;
    }));
    const out = (await model.generate({
      input_ids: new Tensor('int64', input, [prompts.length, len]), attention_mask: new Tensor('int64', mask, [prompts.length, len]),
      max_new_tokens: tokens, min_new_tokens: tokens, do_sample: false, // Typed as a TextStreamer; generate() calls only put() and end().
      streamer: new FirstToken(firstToken) as never,
    })) as Tensor;
    const made = out.dims[1]! - len;
    if (made !== tokens) throw new Error(`transformers.js generated ${made} tokens, not ${tokens}`);
    return made * prompts.length;
  };
  return {
    sequential: oneAtATime((prompt: string, firstToken: () => void) => generate([prompt], firstToken)),
    async batched(streams, rounds) {
      const ttftMs: number[] = [];
      let made = 0;
      const t0 = performance.now();
      for (let r = 0; r < rounds; r++) {
        const start = performance.now();
        // Every request of the batch gets its first token at the same step.
        made += await generate(Array.from({ length: streams }, (_, s) => promptOf(s * rounds + r)), () => {
          for (let s = 0; s < streams; s++) ttftMs.push(performance.now() - start);
        });
      }
      return { tokens: made, tokensPerS: made / ((performance.now() - t0) / 1000), ttftMs };
    },
    release: async () => {
      await model.dispose();
    },
  };
}
