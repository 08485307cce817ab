/**
 * transformers.js as the reference for the vision-language tests: its greedy tokens for one user
 * message (the processor's chat template and images, then `generate`), ending before EOS.
 */

import { RawImage, Tensor } from '@huggingface/transformers';
import type { Tokenizer } from '../../core/llm/tokenizer.js';

/** `content` in transformers.js's form (`{type: 'image'}` parts), `images` the bytes of its image parts in order. */
export async function referenceTokens(r: { processor: any; model: any; tok: Tokenizer; maxTokens: number }, content: unknown[], images: Uint8Array[]): Promise<number[]> {
  const prompt = r.processor.apply_chat_template([{ role: 'user', content }], { add_generation_prompt: true });
  let inputs: any;
  if (images.length > 0) inputs = await r.processor(prompt, await Promise.all(images.map((b) => RawImage.fromBlob(new Blob([b as Uint8Array<ArrayBuffer>])))));
  else {
    const ids = r.tok.encode(prompt, { addSpecialTokens: false });
    inputs = { input_ids: new Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]), attention_mask: new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]) };
  }
  const seq = ((await r.model.generate({ ...inputs, max_new_tokens: r.maxTokens, do_sample: false })) as Tensor).tolist()[0] as bigint[];
  const gen = seq.slice(inputs.input_ids.dims[1]).map(Number);
  const eos = gen.indexOf(r.tok.eosId!);
  return eos >= 0 ? gen.slice(0, eos) : gen;
}
