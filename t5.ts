import { readFileSync } from 'node:fs';
import * as ort from 'onnxruntime-node';
import { tinySpec, writeFamilyFolder, type Family } from './scripts/llm-families.js';
const tok = { json: readFileSync('models/tiny_gpt/1/tokenizer.json', 'utf8'), config: readFileSync('models/tiny_gpt/1/tokenizer_config.json', 'utf8') };
for (const fam of ['llama', 'qwen2', 'phi3', 'gemma'] as Family[]) {
  const spec = tinySpec(fam, 2048, 2047, 2047);
  const dir = `/tmp/i34/fam/${fam}/1`;
  await writeFamilyFolder(dir, spec, tok);
  for (const v of ['model', 'model_fp16', 'model_q4']) {
    const s = await ort.InferenceSession.create(`${dir}/onnx/${v}.onnx`);
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from([1n, 2n, 3n]), [1, 3]),
      attention_mask: new ort.Tensor('int64', BigInt64Array.from([1n, 1n, 1n]), [1, 3]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from([0n, 1n, 2n]), [1, 3]),
    };
    const half = v === 'model_fp16';
    for (let l = 0; l < 2; l++) for (const kv of ['key', 'value']) feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor(half ? 'float16' : 'float32', half ? new Uint16Array(0) : new Float32Array(0), [1, 2, 0, spec.headDim]);
    const out = await s.run(feeds);
    const lg = out.logits!;
    console.log(fam, v, lg.dims, lg.type, out['present.0.key']!.dims, Array.from((lg.data as any).slice(0, 3)));
  }
}
