import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
env.allowRemoteModels = false;
for (const fam of ['llama', 'qwen2', 'phi3', 'gemma']) {
  env.localModelPath = `/tmp/i34/fam/${fam}/`;
  for (const dtype of ['fp32', 'fp16', 'q4'] as const) {
    try {
      const m = await AutoModelForCausalLM.from_pretrained('1', { dtype, device: 'cpu' });
      const ids = new Tensor('int64', BigInt64Array.from([10n, 20n, 30n, 40n]), [1, 4]);
      const out = await m.generate({ input_ids: ids, attention_mask: new Tensor('int64', BigInt64Array.from([1n,1n,1n,1n]), [1, 4]), max_new_tokens: 8, do_sample: false }) as any;
      console.log(fam, dtype, out.tolist()[0].map(Number));
      await m.dispose();
    } catch (e) { console.log(fam, dtype, 'ERR', (e as Error).message.slice(0, 300)); }
  }
}
