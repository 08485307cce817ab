/**
 * Which file of an onnx-community folder the `llm` backend serves (core/llm/model-folder.ts): the
 * config's `variant`, else the best present for the device the instances run on — a CPU, a GPU
 * provider in Node, WebGPU in the page with and without shader-f16, wasm in the page — with the
 * reason in words (`tsi-node pull` follows the same rules: test/node/pull.test.ts).
 */

import { describe, expect, it } from 'vitest';
import { TsiError, type ModelConfig, type ModelFiles } from '../../core/index.js';
import { VARIANT_RULES, allGpu, modelFile, type VariantRule } from '../../core/llm/model-folder.js';

/** A version folder `1/` holding `names` (paths relative to the model folder). */
function folder(names: string[]): ModelFiles {
  const paths = new Set(names);
  const dirs = new Set(names.flatMap((p) => p.split('/').slice(0, -1).map((_, i, a) => a.slice(0, i + 1).join('/'))));
  return {
    read: async (p) => { throw new Error(`not read here: ${p}`); },
    exists: async (p) => paths.has(p) || dirs.has(p),
    list: async (d) => {
      const out = new Map<string, boolean>();
      for (const p of [...paths, ...dirs]) {
        if (!p.startsWith(`${d}/`)) continue;
        const rest = p.slice(d.length + 1);
        if (!rest.includes('/')) out.set(rest, dirs.has(p));
      }
      return [...out].map(([name, isDir]) => ({ name, isDir }));
    },
  };
}

const ALL = ['model', 'model_fp16', 'model_q4', 'model_q4f16', 'model_quantized', 'model_bnb4'];
const community = (variants: string[]) => folder(['1/config.json', '1/tokenizer.json', ...variants.flatMap((v) => [`1/onnx/${v}.onnx`, `1/onnx/${v}.onnx_data`])]);
const config = (extra: Partial<ModelConfig> = {}): ModelConfig => ({ name: 'm', backend: 'llm', ...extra });

const best = async (variants: string[], rule: VariantRule) => (await modelFile(community(variants), '1', config(), rule)).variant;

describe('the variant served without a `variant` parameter', () => {
  it('on a CPU: fp32, then int4, int8, fp16', async () => {
    expect(await best(ALL, VARIANT_RULES.cpu)).toBe('model');
    expect(await best(['model_fp16', 'model_q4', 'model_quantized'], VARIANT_RULES.cpu)).toBe('model_q4');
    expect(await best(['model_fp16', 'model_quantized'], VARIANT_RULES.cpu)).toBe('model_quantized');
    expect(await best(['model_fp16', 'model_q4f16'], VARIANT_RULES.cpu)).toBe('model_fp16');
    // The default rule is the CPU's (the embedding backend and runtimes that say nothing).
    expect((await modelFile(community(ALL), '1', config())).variant).toBe('model');
  });

  it('on a GPU provider in Node: fp16, then fp32, then int4 (fp16 scales first), int8 last', async () => {
    expect(await best(ALL, VARIANT_RULES.gpu)).toBe('model_fp16');
    expect(await best(['model', 'model_q4', 'model_q4f16'], VARIANT_RULES.gpu)).toBe('model');
    expect(await best(['model_q4', 'model_q4f16', 'model_quantized'], VARIANT_RULES.gpu)).toBe('model_q4f16');
    expect(await best(['model_q4', 'model_quantized'], VARIANT_RULES.gpu)).toBe('model_q4');
    expect(await best(['model_quantized', 'model_bnb4'], VARIANT_RULES.gpu)).toBe('model_quantized');
  });

  it('in the page: WebGPU takes the smallest file the adapter computes in, wasm int4 then int8, fp16 last', async () => {
    expect(await best(ALL, VARIANT_RULES['page-webgpu'])).toBe('model_q4f16');
    expect(await best(['model', 'model_fp16', 'model_q4'], VARIANT_RULES['page-webgpu'])).toBe('model_fp16');
    expect(await best(ALL, VARIANT_RULES['page-webgpu-no-f16'])).toBe('model_q4');
    expect(await best(['model', 'model_fp16', 'model_q4f16'], VARIANT_RULES['page-webgpu-no-f16'])).toBe('model');
    expect(await best(ALL, VARIANT_RULES['page-wasm'])).toBe('model_q4');
    expect(await best(['model', 'model_fp16', 'model_quantized'], VARIANT_RULES['page-wasm'])).toBe('model_quantized');
    expect(await best(['model', 'model_fp16'], VARIANT_RULES['page-wasm'])).toBe('model');
  });

  it('says why, naming the device and the order', async () => {
    const f = await modelFile(community(['model', 'model_fp16']), '1', config(), VARIANT_RULES.gpu);
    expect(f).toEqual({
      path: '1/onnx/model_fp16.onnx', variant: 'model_fp16', present: ['model', 'model_fp16'],
      reason: `the best present for KIND_GPU (a GPU provider): ${VARIANT_RULES.gpu.why}`,
    });
    expect(f.reason).toContain('fp16 first (with its fp16 KV cache), then fp32');
  });

  it('every order lists every variant once, so each device serves any folder', () => {
    for (const [name, rule] of Object.entries(VARIANT_RULES)) {
      expect([...rule.order].sort(), name).toEqual([...VARIANT_RULES.cpu.order].sort());
    }
  });

  it('takes the GPU order only when every instance group is KIND_GPU', () => {
    expect(allGpu(config({ instance_group: [{ kind: 'KIND_GPU', count: 2 }] }))).toBe(true);
    expect(allGpu(config({ instance_group: [{ kind: 'KIND_GPU' }, { kind: 'KIND_CPU' }] }))).toBe(false);
    expect(allGpu(config({ instance_group: [{ kind: 'KIND_CPU' }] }))).toBe(false);
    expect(allGpu(config())).toBe(false);
  });
});

describe('what outranks the device rule', () => {
  it('the config\'s variant, by short or full name; a missing one is refused naming those present', async () => {
    const asked = (v: string) => modelFile(community(ALL), '1', config({ parameters: { variant: { string_value: v } } }), VARIANT_RULES.gpu);
    expect(await asked('q4')).toMatchObject({ path: '1/onnx/model_q4.onnx', variant: 'model_q4', reason: "the config's variant" });
    expect((await asked('model_quantized')).variant).toBe('model_quantized');
    await expect(asked('int8')).rejects.toThrow(new TsiError('INVALID_ARG', `model 'm': variant 'int8' is not in '1/onnx' (present: ${[...ALL].sort().join(', ')})`));
  });

  it('a flat model.onnx, and default_model_filename', async () => {
    const files = folder(['1/model.onnx', '1/onnx/model_fp16.onnx', '1/other.onnx']);
    expect(await modelFile(files, '1', config(), VARIANT_RULES.gpu)).toEqual({ path: '1/model.onnx', present: ['model_fp16'] });
    expect((await modelFile(files, '1', config({ default_model_filename: 'other.onnx' }), VARIANT_RULES.gpu)).path).toBe('1/other.onnx');
  });
});
