/**
 * The two export layouts tsi's builder writes (scripts/llm-families.ts `layout`): Optimum's plain graph
 * and onnxruntime-genai's fused one (GroupQueryAttention reading each row's length from the mask,
 * SimplifiedLayerNormalization, one MatMulNBits for q/k/v and one for gate/up). The same weights in
 * both layouts, served by the real Node server over HTTP at 1 and 16 concurrent requests (prompts of
 * unlike lengths, so rows are padded, join and leave): the fused layout, whose rows the engine keeps
 * right-padded, gives the plain layout's greedy tokens in fp32, on cached prefixes too, though it
 * computes logits at each row's last `num_logits_to_keep` tokens only.
 */

import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { layoutOf } from '../../core/llm/decoder.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { readOnnxIo } from '../../runtime-node/onnx/info.js';
import { familyConfig, tinySpec, writeFamilyFolder, type Family, type Layout } from '../../scripts/llm-families.js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const FAMILIES: Family[] = ['llama', 'qwen2'];
const LAYOUTS: Layout[] = ['plain', 'gqa'];
const root = join(tmpdir(), `tsi-llm-layouts-${process.pid}`);
let server: TestServer;

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const PROMPTS = Array.from({ length: 16 }, (_, i) => Array.from({ length: 1 + ((i * 5) % 13) }, (_, j) => WORDS[(j * 7 + i * 3) % WORDS.length]).join(' '));
const MAX_TOKENS = 12;
const SMALL = 'parameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n';

beforeAll(async () => {
  const tokDir = join(MODELS, 'tiny_gpt', '1');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  const tokenizer = Tokenizer.fromJson(tok.json, tok.config);
  for (const family of FAMILIES) {
    for (const layout of LAYOUTS) {
      const spec = { ...tinySpec(family, tokenizer.vocabSize, tokenizer.bosId ?? tokenizer.eosId!, tokenizer.eosId!), layout };
      const dir = join(root, `${family}_${layout}`);
      await writeFamilyFolder(join(dir, '1'), spec, tok, ['model', 'model_q4']);
      writeFileSync(join(dir, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "model" } }\n${SMALL}`);
    }
  }
  mkdirSync(join(root, 'llama_gqa_q4'), { recursive: true });
  writeFileSync(join(root, 'llama_gqa_q4', 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "model_q4" } }\n${SMALL}`);
  await writeFamilyFolder(join(root, 'llama_gqa_q4', '1'), { ...tinySpec('llama', tokenizer.vocabSize, tokenizer.bosId ?? tokenizer.eosId!, tokenizer.eosId!), layout: 'gqa' }, tok, ['model_q4']);
  server = await startTestServer({ modelRepositories: [root] });
}, 300_000);

afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const generate = (model: string, prompt: string) =>
  postJson(`${server.url}/v2/models/${model}/generate`, { text_input: prompt, max_tokens: MAX_TOKENS, exclude_input_in_output: true, ignore_eos: true });

describe('the fused (GroupQueryAttention) layout', () => {
  it('is read as right-padded from its graph, the plain one as left-padded', () => {
    const io = (name: string) => readOnnxIo(readFileSync(join(root, name, '1', 'onnx', 'model.onnx')));
    const gqa = io('llama_gqa');
    expect(gqa.ops).toContain('com.microsoft:GroupQueryAttention');
    expect(gqa.ops).toContain('com.microsoft:SkipSimplifiedLayerNormalization');
    // The cache is no longer concatenated by the graph, nor are its rows attended through a mask.
    expect(gqa.ops).not.toContain('Concat');
    expect(gqa.ops).not.toContain('Softmax');
    const spec = familyConfig(tinySpec('llama', 2048, 1, 2));
    expect(layoutOf(gqa, spec).padding).toBe('right');
    expect(layoutOf(gqa, spec).positionIds).toBeUndefined();
    expect(layoutOf(io('llama_plain'), spec).padding).toBe('left');
    expect(readOnnxIo(readFileSync(join(root, 'llama_gqa_q4', '1', 'onnx', 'model_q4.onnx'))).ops).toContain('com.microsoft:MatMulNBits');
  });

  it.each(FAMILIES)('%s fp32 gives the plain layout\'s greedy tokens over HTTP at 1 and 16 concurrent requests', async (family) => {
    for (const concurrency of [1, 16]) {
      const prompts = PROMPTS.slice(0, concurrency);
      const [plain, gqa] = await Promise.all(LAYOUTS.map((l) => Promise.all(prompts.map((p) => generate(`${family}_${l}`, p)))));
      prompts.forEach((_, i) => {
        expect({ status: gqa[i]!.status, error: gqa[i]!.body.error }).toEqual({ status: 200, error: undefined });
        expect(gqa[i]!.body.num_output_tokens).toBe(MAX_TOKENS);
        expect({ concurrency, i, text: gqa[i]!.body.text_output }).toEqual({ concurrency, i, text: plain[i]!.body.text_output });
      });
    }
  }, 120_000);

  it('computes logits at each row\'s last token only, and a prompt on a cached prefix still gets the plain layout\'s tokens', async () => {
    // The lm_head runs on `num_logits_to_keep` positions a row: with 1, each row's last real token
    // (right padding: its length − 1 − the past); with 0, every position. Two rows of unlike lengths
    // run both ways: the kept logits must be the full run's at each row's own last token.
    const io = readOnnxIo(readFileSync(join(root, 'llama_gqa', '1', 'onnx', 'model.onnx')));
    expect(io.inputs.map((i) => i.name)).toContain('num_logits_to_keep');
    const session = await ort.InferenceSession.create(join(root, 'llama_gqa', '1', 'onnx', 'model.onnx'), { intraOpNumThreads: 1 });
    const lengths = [5, 3];
    const S = 5;
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from({ length: 2 * S }, (_, k) => BigInt(3 + ((k * 7) % 50))), [2, S]),
      attention_mask: new ort.Tensor('int64', BigInt64Array.from({ length: 2 * S }, (_, k) => (k % S < lengths[Math.floor(k / S)]! ? 1n : 0n)), [2, S]),
    };
    for (const input of io.inputs.filter((i) => i.name.startsWith('past_key_values.'))) {
      const [, heads, , hd] = input.shape as [unknown, number, unknown, number];
      feeds[input.name] = new ort.Tensor('float32', new Float32Array(0), [2, heads, 0, hd]);
    }
    const run = async (keep: bigint) => (await session.run({ ...feeds, num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(keep), []) }, ['logits'])).logits!;
    const [one, all] = [await run(1n), await run(0n)];
    const V = one.dims[2]!;
    expect([one.dims, all.dims]).toEqual([[2, 1, V], [2, S, V]]);
    for (let b = 0; b < 2; b++) {
      const kept = (one.data as Float32Array).subarray(b * V, (b + 1) * V);
      const full = (all.data as Float32Array).subarray((b * S + lengths[b]! - 1) * V, (b * S + lengths[b]!) * V);
      expect(Math.max(...kept.map((x, v) => Math.abs(x - full[v]!)))).toBeLessThan(1e-4);
    }
    await session.release();
    // Asked twice, a long prompt's second prefill runs on its cached blocks (past > 0, several new tokens).
    const long = Array.from({ length: 40 }, (_, j) => WORDS[(j * 5) % WORDS.length]).join(' ');
    for (let k = 0; k < 2; k++) {
      const [plain, gqa] = await Promise.all(LAYOUTS.map((l) => generate(`llama_${l}`, long)));
      expect(gqa.body.text_output).toBe(plain.body.text_output);
      if (k === 1) expect(gqa.body.num_cached_tokens).toBeGreaterThan(0);
    }
  }, 120_000);

  it('int4 with int8 activations serves every request to its length, its decode steps split in llm_stats', async () => {
    const answers = await Promise.all(PROMPTS.slice(0, 8).map((p) => generate('llama_gqa_q4', p)));
    for (const a of answers) expect({ status: a.status, tokens: a.body.num_output_tokens }).toEqual({ status: 200, tokens: MAX_TOKENS });
    // Where the decode steps' time went: the model's run, the inputs, sampling, streaming, the gaps.
    const split = (await getJson(`${server.url}/v2/models/llama_gqa_q4/stats`)).body.model_stats[0].llm_stats.decode_step_split;
    expect(split.steps).toBeGreaterThanOrEqual(MAX_TOKENS - 1);
    expect(split.graph_ns).toBeGreaterThan(0);
    expect(split.inputs_ns).toBeGreaterThan(0);
    expect(split.streaming_ns).toBeGreaterThan(0);
    expect(split.idle_ns).toBeGreaterThanOrEqual(0);
    expect(split.sampling_ns).toBeGreaterThanOrEqual(0);
  }, 120_000);
});
