/**
 * Where the configuration meets the model file: datatype name mappings (config TYPE_* names, the
 * v2 wire names, ONNX Runtime's names), Triton's ONNX auto-complete (filling inputs, outputs,
 * max_batch_size and dynamic batching from what the model declares), and the check Triton's ONNX
 * Runtime backend runs when the user wrote the inputs and outputs themselves. The texts are the ORT
 * backend's, since users search for them.
 */

import type { ModelIoInfo } from '../execution.js';
import { errorAt, cloneConfig } from './reflect.js';
import { TsiError } from '../errors.js';
import type { ConfigDataType, ModelConfig, ModelInput, ModelOutput } from './model-config.js';
import type { DataType } from '../types.js';

const CONFIG_TO_WIRE: Record<Exclude<ConfigDataType, 'TYPE_INVALID'>, DataType> = {
  TYPE_BOOL: 'BOOL', TYPE_UINT8: 'UINT8', TYPE_UINT16: 'UINT16', TYPE_UINT32: 'UINT32', TYPE_UINT64: 'UINT64',
  TYPE_INT8: 'INT8', TYPE_INT16: 'INT16', TYPE_INT32: 'INT32', TYPE_INT64: 'INT64',
  TYPE_FP16: 'FP16', TYPE_FP32: 'FP32', TYPE_FP64: 'FP64', TYPE_STRING: 'BYTES', TYPE_BF16: 'BF16',
};

/** `TYPE_STRING` -> `BYTES`, `TYPE_FP32` -> `FP32`; TYPE_INVALID has no wire type. */
export function configTypeToDatatype(t: ConfigDataType): DataType {
  const d = t === 'TYPE_INVALID' ? undefined : CONFIG_TO_WIRE[t];
  if (!d) throw new TsiError('INVALID_ARG', `data type ${t} has no inference protocol datatype`);
  return d;
}

/** `BYTES` -> `TYPE_STRING`, `FP32` -> `TYPE_FP32`. */
export function datatypeToConfigType(d: DataType): ConfigDataType {
  return d === 'BYTES' ? 'TYPE_STRING' : (`TYPE_${d}` as ConfigDataType);
}

const ORT_TO_CONFIG: Record<string, ConfigDataType> = {
  bool: 'TYPE_BOOL', uint8: 'TYPE_UINT8', uint16: 'TYPE_UINT16', uint32: 'TYPE_UINT32', uint64: 'TYPE_UINT64',
  int8: 'TYPE_INT8', int16: 'TYPE_INT16', int32: 'TYPE_INT32', int64: 'TYPE_INT64',
  float16: 'TYPE_FP16', float32: 'TYPE_FP32', float: 'TYPE_FP32', float64: 'TYPE_FP64', double: 'TYPE_FP64',
  bfloat16: 'TYPE_BF16', string: 'TYPE_STRING',
};

/** ONNX Runtime element type names (`float32`, `int64`, `string`, ...) -> config types; unknown -> TYPE_INVALID. */
export function ortTypeToConfigType(ort: string): ConfigDataType {
  return ORT_TO_CONFIG[ort.toLowerCase()] ?? 'TYPE_INVALID';
}

/** The shape a request carries for this tensor: `[-1, ...dims]` when the model batches. */
export function fullDims(io: Pick<ModelInput | ModelOutput, 'dims'>, maxBatchSize: number): number[] {
  const dims = io.dims ?? [];
  return maxBatchSize > 0 ? [-1, ...dims] : [...dims];
}

/** Dynamic (symbolic or -1) dims read as -1, as ONNX Runtime reports them to Triton. */
function modelShape(shape: readonly (number | string)[]): number[] {
  return shape.map((d) => (typeof d === 'number' && d >= 0 ? d : -1));
}

const shapeString = (dims: readonly number[]): string => `[${dims.join(',')}]`;

export interface AutoCompleteOptions {
  /** The backend's default-max-batch-size (Triton's default is 4). */
  defaultMaxBatchSize: number;
  modelName: string;
}

/**
 * Triton's ONNX auto-complete. Only when the config lists no inputs or no outputs: detects whether
 * the model can batch, fills max_batch_size (and `dynamic_batching {}` above 1), and fills the
 * missing side from `io`. Returns a new config; `notes` are the messages Triton logs.
 */
export function autoCompleteConfig(
  cfg: ModelConfig,
  io: ModelIoInfo,
  opts: AutoCompleteOptions,
): { config: ModelConfig; notes: string[] } {
  const name = cfg.name || opts.modelName;
  const inputCount = (cfg.input ?? []).length + (cfg.batch_input ?? []).length;
  const outputCount = (cfg.output ?? []).length;
  if (inputCount > 0 && outputCount > 0) {
    return {
      config: cfg,
      notes: [`skipping model configuration auto-complete for '${name}': inputs and outputs already specified`],
    };
  }
  const out = cloneConfig(cfg);
  const notes: string[] = [];
  const batchable = [...io.inputs, ...io.outputs].every((t) => t.shape.length > 0 && modelShape(t.shape)[0] === -1);
  let mbs = out.max_batch_size ?? 0;
  if (batchable) {
    if (mbs === 0) {
      mbs = Math.max(opts.defaultMaxBatchSize, 0);
      out.max_batch_size = mbs;
      notes.push(
        `autofilled max_batch_size to ${mbs} for model '${name}' since batching is supported but no ` +
          'max_batch_size is specified in model configuration. Must specify max_batch_size to utilize ' +
          'autofill with a larger max batch size',
      );
    }
    if (mbs > 1 && !out.dynamic_batching && !out.sequence_batching) out.dynamic_batching = {};
  } else if (mbs !== 0) {
    throw errorAt(cfg, 'max_batch_size',
      `autofill failed for model '${name}': model does not support batching while non-zero max_batch_size is specified`);
  }
  const fill = (tensors: ModelIoInfo['inputs']): (ModelInput & ModelOutput)[] =>
    tensors.map((t) => {
      const dims = modelShape(t.shape).slice(mbs > 0 ? 1 : 0);
      const entry: ModelInput & ModelOutput = { name: t.name, data_type: ortTypeToConfigType(t.datatype), dims };
      if (dims.length === 0) {
        // Scalars: Triton has no rank-0 config dims, so [1] reshaped to [] (only valid when batching).
        entry.dims = [1];
        if (mbs > 0) entry.reshape = { shape: [] };
      }
      return entry;
    });
  if (inputCount === 0) out.input = fill(io.inputs);
  if (outputCount === 0) out.output = fill(io.outputs);
  return { config: out, notes };
}

/**
 * The tensors a config makes the model take as inputs beyond `input`: sequence controls and states,
 * and the batch inputs the server builds (BATCH_ELEMENT_COUNT and the like, fed by target_name).
 */
function controlInputNames(cfg: ModelConfig): string[] {
  const names = new Set<string>();
  for (const ci of cfg.sequence_batching?.control_input ?? []) if (ci.name) names.add(ci.name);
  for (const st of cfg.sequence_batching?.state ?? []) if (st.input_name) names.add(st.input_name);
  for (const bi of cfg.batch_input ?? []) for (const t of bi.target_name ?? []) names.add(t);
  for (const io of cfg.input ?? []) names.delete(io.name ?? '');
  return [...names];
}

/**
 * Checks a hand-written config against what the model declares, as Triton's ONNX Runtime backend
 * does when creating an instance: input count, names, datatypes, and dims (reshape when given).
 * Dynamic model dims match anything for inputs; outputs must agree exactly.
 */
export function checkConfigAgainstModel(cfg: ModelConfig, io: ModelIoInfo, modelName: string): void {
  const name = cfg.name || modelName;
  const mbs = cfg.max_batch_size ?? 0;
  const expected = (cfg.input ?? []).length + controlInputNames(cfg).length;
  if (io.inputs.length !== expected) {
    throw errorAt(cfg, 'input', `unable to load model '${name}', configuration expects ${expected} inputs, model provides ${io.inputs.length}`);
  }
  const scattered = new Set((cfg.batch_output ?? []).flatMap((b) => b.target_name ?? []));
  for (const [key, list, tensors, exact] of [
    ['input', cfg.input ?? [], io.inputs, false],
    ['output', cfg.output ?? [], io.outputs, true],
  ] as const) {
    list.forEach((t, i) => {
      const at = `${key}[${i}]`;
      const m = tensors.find((x) => x.name === t.name);
      if (!m) {
        const allowed = tensors.map((x) => x.name).sort().join(', ');
        throw errorAt(cfg, `${at}.name`, `unexpected inference ${key} '${t.name}', allowed ${key}s are: ${allowed}`);
      }
      const modelType = ortTypeToConfigType(m.datatype);
      if (modelType !== t.data_type) {
        const shown = modelType === 'TYPE_INVALID' ? m.datatype : configTypeToDatatype(modelType);
        // Triton's text, unbalanced quote included.
        throw errorAt(cfg, `${at}.data_type`, `unable to load model '${name}, unexpected datatype ${shown} for ${key} '${t.name}', expecting ${t.data_type ?? 'TYPE_INVALID'}`);
      }
      // A batch output's shape is the backend's to make (scattered by an input's shapes), as Triton's
      // ORT backend skips the comparison for it.
      if (key === 'output' && scattered.has(t.name ?? '')) return;
      const dims = t.reshape ? (t.reshape.shape ?? []) : (t.dims ?? []);
      // A ragged input reaches the model as the batch's elements end to end, whatever its config dims
      // (BATCH_ITEM_SHAPE models declare [-1, -1]): the model must take exactly [-1], as in Triton.
      if (key === 'input' && (t as ModelInput).allow_ragged_batch === true) {
        const shape = modelShape(m.shape);
        if (shape.length !== 1 || shape[0] !== -1) {
          throw errorAt(cfg, `${at}.allow_ragged_batch`, `unable to load model '${name}', configuration expects model ` +
            `provides input with shape [-1] for ragged input '${t.name}', model provides ${shapeString(shape)}`);
        }
        return;
      }
      const problem = compareDims(name, t.name ?? '', modelShape(m.shape), dims, mbs, exact);
      if (problem) throw errorAt(cfg, t.reshape ? `${at}.reshape` : `${at}.dims`, problem);
    });
  }
}

/** Triton backend_common CompareDimsSupported: undefined when the shapes agree, else the message. */
function compareDims(model: string, tensor: string, shape: number[], dims: readonly number[], mbs: number, exact: boolean): string | undefined {
  const head = `model '${model}', tensor '${tensor}': `;
  const agree = (full: readonly number[]): boolean =>
    shape.length === full.length && full.every((d, i) => !(exact || shape[i] !== -1) || shape[i] === d);
  if (mbs > 0) {
    if (shape.length === 0 || shape[0] !== -1) {
      return `${head}for the model to support batching the shape should have at least 1 dimension and the ` +
        `first dimension must be -1; but shape expected by the model is ${shapeString(shape)}`;
    }
    const full = [-1, ...dims];
    if (!agree(full)) {
      return `${head}the model expects ${shape.length} dimensions (shape ${shapeString(shape)}) but the model ` +
        `configuration specifies ${full.length} dimensions (an initial batch dimension because max_batch_size > 0 ` +
        `followed by the explicit tensor shape, making complete shape ${shapeString(full)})`;
    }
    return undefined;
  }
  // A scalar in the model takes config dims of ones (one element), as Triton's ORT backend allows.
  if (shape.length === 0 && dims.length > 0 && dims.every((d) => d === 1)) return undefined;
  if (!agree(dims)) {
    return `${head}the model expects ${shape.length} dimensions (shape ${shapeString(shape)}) but the model ` +
      `configuration specifies ${dims.length} dimensions (shape ${shapeString(dims)})`;
  }
  return undefined;
}
