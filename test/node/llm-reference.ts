/**
 * The reference an `llm` model's answers are checked and benchmarked against: one request decoded
 * alone with raw onnxruntime-node on the main thread, no batching, no padding, no worker — prefill
 * the prompt, then one token at a time with the KV cache fed back, greedy, until end-of-sequence or
 * max_tokens. It shares nothing with the server's engine but the tokenizer.
 */

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { Tokenizer } from '../../core/llm/tokenizer.js';

export interface ReferenceDecoder {
  tokenizer: Tokenizer;
  /**
   * Greedy output tokens of `prompt` (encoded as the server encodes it), at most `maxTokens`;
   * `ignoreEos` goes on past end-of-sequence; `onToken` sees each token as it is chosen.
   */
  greedy(prompt: string, maxTokens: number, opts?: { ignoreEos?: boolean; onToken?: (id: number, logits: Float32Array) => void; addSpecialTokens?: boolean }): Promise<number[]>;
  release(): Promise<void>;
}

export async function referenceDecoder(modelDir: string, threads = 1): Promise<ReferenceDecoder> {
  const dir = join(modelDir, '1');
  const cfgPath = join(dir, 'tokenizer_config.json');
  const tokenizer = Tokenizer.fromJson(readFileSync(join(dir, 'tokenizer.json'), 'utf8'), existsSync(cfgPath) ? readFileSync(cfgPath, 'utf8') : undefined);
  const hf = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, number>;
  // GPT-2's config names, or Llama's (grouped KV heads, head_dim) in an onnx-community folder.
  const flat = join(dir, 'model.onnx');
  const session = await ort.InferenceSession.create(existsSync(flat) ? flat : join(dir, 'onnx', 'model.onnx'), { intraOpNumThreads: threads });
  const layers = hf.n_layer ?? hf.num_hidden_layers!;
  const H = hf.n_head ?? hf.num_key_value_heads!;
  const D = hf.head_dim ?? hf.n_embd! / hf.n_head!;
  const i64 = (v: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), dims);
  const argmaxLast = (logits: ort.Tensor): number => {
    const V = logits.dims[2]!;
    const data = logits.data as Float32Array;
    const o = (logits.dims[1]! - 1) * V;
    let best = 0;
    for (let v = 1; v < V; v++) if (data[o + v]! > data[o + best]!) best = v;
    return best;
  };
  return {
    tokenizer,
    async greedy(prompt, maxTokens, opts = {}) {
      const ids = tokenizer.encode(prompt, { addSpecialTokens: opts.addSpecialTokens });
      const past: Record<string, ort.Tensor> = {};
      for (let l = 0; l < layers; l++) {
        past[`past_key_values.${l}.key`] = new ort.Tensor('float32', new Float32Array(0), [1, H, 0, D]);
        past[`past_key_values.${l}.value`] = new ort.Tensor('float32', new Float32Array(0), [1, H, 0, D]);
      }
      let input = ids;
      let total = 0;
      const out: number[] = [];
      while (out.length < maxTokens) {
        const feeds: Record<string, ort.Tensor> = {
          ...past,
          input_ids: i64(input, [1, input.length]),
          attention_mask: i64(new Array(total + input.length).fill(1), [1, total + input.length]),
          position_ids: i64(input.map((_, k) => total + k), [1, input.length]),
        };
        if (session.inputNames.includes('num_logits_to_keep')) feeds.num_logits_to_keep = i64([1], []);
        const res = await session.run(feeds);
        total += input.length;
        for (let l = 0; l < layers; l++) {
          past[`past_key_values.${l}.key`] = res[`present.${l}.key`]!;
          past[`past_key_values.${l}.value`] = res[`present.${l}.value`]!;
        }
        const next = argmaxLast(res.logits!);
        out.push(next);
        const V = res.logits!.dims[2]!;
        const o = (res.logits!.dims[1]! - 1) * V;
        opts.onToken?.(next, (res.logits!.data as Float32Array).slice(o, o + V));
        if (next === hf.eos_token_id && !opts.ignoreEos) break;
        input = [next];
      }
      return out;
    },
    release: () => session.release(),
  };
}
