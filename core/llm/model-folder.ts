/**
 * The model folder a user downloads, served as it is. A version folder may hold the export flat
 * (`model.onnx` beside the tokenizer, tsi's own models) or in the layout Optimum and the
 * onnx-community publish: `config.json`, the tokenizer files and `onnx/<variant>.onnx`, where the
 * variant is the weights' precision (`model` fp32, `model_fp16`, `model_q4` int4 MatMulNBits,
 * `model_quantized` int8, `model_q4f16`...), each with its external data (`<variant>.onnx_data`)
 * beside it. The config parameter `variant` picks one; without it the best one present for the
 * device the instances run on is taken (a VariantRule: an order of preference, and why, in words)
 * and the choice is logged with that reason.
 *
 * Before any instance starts, the memory it will take (the weights once per session the runtime
 * opens, and its KV cache budget) is checked against what the machine has, so a model too big for
 * it is refused at load with the numbers instead of failing later.
 */

import type { ModelFiles, ModelLoadContext } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';

/** The variants exporters write, most precise first (a CPU's order of preference). */
export const VARIANTS = ['model', 'model_q4', 'model_quantized', 'model_int8', 'model_uint8', 'model_fp16', 'model_q4f16', 'model_bnb4'];

/** Which variant a device prefers, and why, in words for the log. */
export interface VariantRule {
  /** Where the instances run, e.g. `KIND_GPU (a GPU provider)`. */
  device: string;
  order: readonly string[];
  /** The order, in words. */
  why: string;
}

const INT8 = ['model_quantized', 'model_int8', 'model_uint8'];

/**
 * The orders of preference per device. The reasons, measured or documented:
 * - cpu: fp32 is exact and, for the model sizes a CPU serves, as fast per token as int4; int4
 *   (MatMulNBits) and int8 have CPU kernels; fp16 has none (onnxruntime casts around every op).
 * - gpu (onnxruntime-node's WebGPU, CUDA): fp16 weights with an fp16 KV cache halve the bytes a step
 *   reads and moves; fp32 next; then int4 — MatMulNBits (float and fp16 scales) has WebGPU and CUDA
 *   kernels, checked on lavapipe: every MatMulNBits node of a model_q4 placed on WebGpuExecutionProvider;
 *   int8 (DynamicQuantizeLinear, MatMulInteger) last: the WebGPU provider has no kernels for it, so
 *   those nodes run on the CPU with copies each way.
 * - page-webgpu: a page downloads its weights on every visitor's machine and lives within a tab's
 *   memory, so the smallest files that keep the work on the GPU come first: q4f16 and fp16 need the
 *   adapter's `shader-f16`; without it int4 with float scales, then fp32.
 * - page-wasm: wasm has a 4 GiB heap and no fp16 arithmetic; int4 and int8 (both with wasm kernels)
 *   before fp32, fp16 last.
 */
export const VARIANT_RULES = {
  cpu: { device: 'the CPU', order: VARIANTS, why: 'fp32 first, then int4, int8, fp16 (no fp16 kernels on a CPU)' },
  gpu: {
    device: 'KIND_GPU (a GPU provider)',
    order: ['model_fp16', 'model', 'model_q4f16', 'model_q4', ...INT8, 'model_bnb4'],
    why: 'fp16 first (with its fp16 KV cache), then fp32, then int4 (MatMulNBits runs on the GPU), int8 last (its ops run on the CPU)',
  },
  'page-webgpu': {
    device: 'WebGPU in the page (shader-f16)',
    order: ['model_q4f16', 'model_fp16', 'model_q4', 'model', ...INT8, 'model_bnb4'],
    why: 'the smallest download that runs on the GPU first: int4 with fp16, fp16, int4, fp32, int8',
  },
  'page-webgpu-no-f16': {
    device: 'WebGPU in the page (no shader-f16)',
    order: ['model_q4', 'model', ...INT8, 'model_q4f16', 'model_fp16', 'model_bnb4'],
    why: 'int4 first, then fp32, int8; fp16 last (this adapter has no shader-f16)',
  },
  'page-wasm': {
    device: 'wasm in the page',
    order: ['model_q4', ...INT8, 'model', 'model_fp16', 'model_q4f16', 'model_bnb4'],
    why: 'the smallest download first (a 4 GiB heap): int4, int8, then fp32, fp16 last (no fp16 arithmetic)',
  },
} satisfies Record<string, VariantRule>;

/** Whether every instance group of `config` asks for a GPU (a model's file is one for all its instances). */
export function allGpu(config: ModelConfig): boolean {
  const groups = config.instance_group ?? [];
  return groups.length > 0 && groups.every((g) => g.kind === 'KIND_GPU');
}

export interface ModelFile {
  /** Relative to the model folder, e.g. `1/onnx/model_q4.onnx`. */
  path: string;
  /** The variant served, or undefined for a flat folder's or default_model_filename's file. */
  variant?: string;
  /** The variants the folder holds. */
  present: string[];
  /** Why this file: the config's `variant`, or the device's rule. */
  reason?: string;
}

/** The decoder file to serve from version folder `dir`, by `default_model_filename`, `variant`, or the best present for `rule`'s device. */
export async function modelFile(files: ModelFiles, dir: string, config: ModelConfig, rule: VariantRule = VARIANT_RULES.cpu): Promise<ModelFile> {
  const name = config.name ?? '';
  const present: string[] = [];
  // Listed, not exists(): sources that know only files (the page's UrlSource, MemorySource) answer
  // exists() for files alone.
  if ((await files.list(dir)).some((e) => e.isDir && e.name === 'onnx')) {
    for (const e of await files.list(`${dir}/onnx`)) {
      const m = /^(.+)\.onnx$/.exec(e.name);
      if (!e.isDir && m) present.push(m[1]!);
    }
    present.sort();
  }
  if (config.default_model_filename) {
    const path = `${dir}/${config.default_model_filename}`;
    if (!(await files.exists(path))) throw new TsiError('INVALID_ARG', `unable to find '${path}' for model '${name}'`);
    return { path, present };
  }
  const asked = config.parameters?.variant?.string_value?.trim();
  if (asked) {
    const v = asked.startsWith('model') ? asked : `model_${asked}`;
    if (!present.includes(v)) {
      throw new TsiError('INVALID_ARG', `model '${name}': variant '${asked}' is not in '${dir}/onnx' (present: ${present.length > 0 ? present.join(', ') : 'none'})`);
    }
    return { path: `${dir}/onnx/${v}.onnx`, variant: v, present, reason: 'the config\'s variant' };
  }
  if (await files.exists(`${dir}/model.onnx`)) return { path: `${dir}/model.onnx`, present };
  const best = rule.order.find((v) => present.includes(v)) ?? present[0];
  if (!best) throw new TsiError('INVALID_ARG', `unable to find '${dir}/model.onnx' or '${dir}/onnx/*.onnx' for model '${name}'`);
  return { path: `${dir}/onnx/${best}.onnx`, variant: best, present, reason: `the best present for ${rule.device}: ${rule.why}` };
}

/** What the runtime knows of the machine, for the memory check. */
export interface MemoryFacts {
  /** Bytes of the model file and its external data. */
  weightBytes: number;
  /** Sessions (weight copies) one instance opens. */
  sessionsPerInstance: number;
  /** Memory the machine has. */
  machineBytes: number;
}

const GiB = 1024 ** 3;
const gib = (n: number) => `${(n / GiB).toFixed(2)} GiB`;

/** Refuses a model whose instances would need more memory than the machine has, saying how much. */
export function checkMemory(ctx: ModelLoadContext, facts: MemoryFacts, instances: number, kvBytes: number, file: ModelFile): void {
  const perInstance = facts.weightBytes * facts.sessionsPerInstance + kvBytes;
  const need = perInstance * instances;
  if (need <= facts.machineBytes) return;
  const smaller = file.present.filter((v) => v !== file.variant);
  throw new TsiError('INVALID_ARG',
    `model '${ctx.config.name ?? ''}' needs about ${gib(need)} of memory but the machine has ${gib(facts.machineBytes)}: ` +
    `${instances} instance(s) × (${gib(facts.weightBytes)} of weights × ${facts.sessionsPerInstance} session(s) + ${gib(kvBytes)} KV cache budget); ` +
    `lower instance_group count or kv_cache_bytes, set separate_prefill: false${smaller.length > 0 ? `, or serve a smaller variant (present: ${smaller.join(', ')})` : ''}`);
}
