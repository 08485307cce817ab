/**
 * The model folder a user downloads, served as it is. A version folder may hold the export flat
 * (`model.onnx` beside the tokenizer, tsi's own models) or in the layout Optimum and the
 * onnx-community publish: `config.json`, the tokenizer files and `onnx/<variant>.onnx`, where the
 * variant is the weights' precision (`model` fp32, `model_fp16`, `model_q4` int4 MatMulNBits,
 * `model_quantized` int8, `model_q4f16`...), each with its external data (`<variant>.onnx_data`)
 * beside it. The config parameter `variant` picks one; without it the best one present for the
 * runtime's device is taken (the runtime's order) and the choice is logged.
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

export interface ModelFile {
  /** Relative to the model folder, e.g. `1/onnx/model_q4.onnx`. */
  path: string;
  /** The variant served, or undefined for a flat folder's or default_model_filename's file. */
  variant?: string;
  /** The variants the folder holds. */
  present: string[];
}

/** The decoder file to serve from version folder `dir`, by `default_model_filename`, `variant`, or the best present. */
export async function modelFile(files: ModelFiles, dir: string, config: ModelConfig, order: readonly string[] = VARIANTS): Promise<ModelFile> {
  const name = config.name ?? '';
  const present: string[] = [];
  if (await files.exists(`${dir}/onnx`)) {
    for (const e of await files.list(`${dir}/onnx`)) {
      const m = /^(.+)\.onnx$/.exec(e.name);
      if (!e.isDir && m) present.push(m[1]!);
    }
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
    return { path: `${dir}/onnx/${v}.onnx`, variant: v, present };
  }
  if (await files.exists(`${dir}/model.onnx`)) return { path: `${dir}/model.onnx`, present };
  const best = order.find((v) => present.includes(v)) ?? present.sort()[0];
  if (!best) throw new TsiError('INVALID_ARG', `unable to find '${dir}/model.onnx' or '${dir}/onnx/*.onnx' for model '${name}'`);
  return { path: `${dir}/onnx/${best}.onnx`, variant: best, present };
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
