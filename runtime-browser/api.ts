/**
 * The in-page call shape and its translation to and from core's v2-shaped InferRequest/InferResponse:
 * inputs given as typed arrays, string arrays, plain number/boolean arrays or `{data, shape}`;
 * outputs handed back as typed arrays (BYTES as strings) by name. Datatypes and missing shapes come
 * from the model's config, so the common call is just `{ model, inputs: { x: Float32Array } }`.
 * Nothing is validated here beyond what the translation needs: the request then goes through core's
 * validation, so a bad call gets exactly the error text the Node server gives over HTTP.
 */

import {
  TsiError, configTypeToDatatype, decodeString, encodeString, fromJsonValues, invalidArg,
  type DataType, type InferInput, type InferRequest, type InferResponse, type ModelConfig, type ModelInput, type NumericArray,
  type Parameters, type TensorData,
} from '../core/index.js';

export type InputData = NumericArray | string[] | Uint8Array[] | number[] | boolean[] | bigint[];
export type InputValue = InputData | { data: InputData; shape?: number[]; datatype?: DataType };
export type OutputData = NumericArray | string[];

export interface InferCall {
  model: string;
  /** A version number; absent = the highest ready version. */
  version?: string | number;
  inputs: Record<string, InputValue>;
  /** Output names (or with Triton's classification extension); absent = all outputs. */
  outputs?: (string | { name: string; classification?: number })[];
  id?: string;
  /** Request parameters (reserved ones: priority, timeout, sequence_*), as on the v2 protocol. */
  parameters?: Parameters;
  /** Sugar for the sequence_id / sequence_start / sequence_end parameters. */
  sequence?: { id: number | bigint | string; start?: boolean; end?: boolean };
}

export interface OutputTensor {
  datatype: DataType;
  shape: number[];
  data: OutputData;
}

type Ctor = new (...args: never[]) => unknown;
const TYPED: [Ctor, DataType][] = [
  [Float32Array, 'FP32'], [Float64Array, 'FP64'], [Int32Array, 'INT32'], [Uint32Array, 'UINT32'],
  [Int16Array, 'INT16'], [Uint16Array, 'UINT16'], [Int8Array, 'INT8'], [Uint8Array, 'UINT8'],
  [BigInt64Array, 'INT64'], [BigUint64Array, 'UINT64'],
];
/** Typed arrays that also carry these config datatypes (raw bits / 0-1 bytes). */
const ALIASES: Partial<Record<DataType, DataType[]>> = { UINT8: ['BOOL'], UINT16: ['FP16', 'BF16'] };

function typedDatatype(data: unknown): DataType | undefined {
  if (data instanceof Uint8ClampedArray) return 'UINT8';
  for (const [c, dt] of TYPED) if (data instanceof c) return dt;
  const f16 = (globalThis as { Float16Array?: Ctor }).Float16Array;
  if (f16 && data instanceof f16) return 'FP16';
  return undefined;
}

/** The tensor data and datatype for one input, choosing the config's datatype where it is ambiguous. */
function toTensorData(value: InputData, expected: DataType, what: string, declared?: DataType): { datatype: DataType; data: TensorData } {
  const typed = typedDatatype(value);
  if (typed) {
    let datatype = declared ?? typed;
    if (!declared && ALIASES[typed]?.includes(expected)) datatype = expected;
    let data = value as NumericArray;
    if (typed === 'FP16' && !(value instanceof Uint16Array)) {
      const v = value as unknown as ArrayBufferView & { length: number };
      data = new Uint16Array(v.buffer, v.byteOffset, v.length);
    } else if (value instanceof Uint8ClampedArray) data = new Uint8Array(value.buffer, value.byteOffset, value.length);
    return { datatype, data };
  }
  if (!Array.isArray(value)) throw invalidArg(`${what}: expected a typed array, an array or {data, shape}`);
  const datatype = declared ?? expected;
  if (datatype === 'BYTES' && value.every((v) => v instanceof Uint8Array)) return { datatype, data: value as Uint8Array[] };
  return { datatype, data: fromJsonValues(datatype, value, what) };
}

/** Fills in a shape from the config: the one unknown dimension (batch first) is solved for. */
function inferShape(count: number, dims: readonly number[], batching: boolean, what: string): number[] {
  const full = batching ? [-1, ...dims] : [...dims];
  const unknown = full.map((d, i) => (d < 0 ? i : -1)).filter((i) => i >= 0);
  // With several unknowns a batching model gets batch 1 and the rest is solved as usual.
  if (unknown.length > 1 && batching) full[0] = 1;
  const open = full.filter((d) => d < 0).length;
  if (open > 1) throw invalidArg(`${what}: its shape cannot be inferred from config dims [${dims.join(',')}]; pass {data, shape}`);
  const known = full.reduce((n, d) => (d < 0 ? n : n * d), 1);
  if (open === 0) return full;
  if (known === 0 || count % known !== 0) {
    throw invalidArg(`${what}: ${count} elements do not fill a whole number of [${full.map((d) => (d < 0 ? '?' : d)).join(',')}] tensors; pass {data, shape}`);
  }
  return full.map((d) => (d < 0 ? count / known : d));
}

/** What an input's config fixes for every call: its datatype and shape template, worked out once. */
interface InputPlan {
  cfg: ModelInput;
  /** Undefined when the config's type has no protocol datatype (the general path reports it). */
  expected: DataType | undefined;
  /** The full shape with -1 for unknown dimensions (batch first on a batching model). */
  full: readonly number[];
  /** Index of the one unknown dimension, -1 when none; undefined when several (the general path decides). */
  open: number | undefined;
  /** Product of the known dimensions. */
  known: number;
}

const PLANS = new WeakMap<ModelConfig, Map<string, InputPlan>>();
function inputPlans(config: ModelConfig): Map<string, InputPlan> {
  let plans = PLANS.get(config);
  if (plans) return plans;
  plans = new Map();
  const batching = (config.max_batch_size ?? 0) > 0;
  for (const cfg of config.input ?? []) {
    // The first input of a name wins, as config.input.find() would pick it.
    if (cfg.name === undefined || plans.has(cfg.name)) continue;
    const dims = cfg.dims ?? [];
    const full = batching ? [-1, ...dims] : [...dims];
    const unknown = full.flatMap((d, i) => (d < 0 ? [i] : []));
    const known = full.reduce((n, d) => (d < 0 ? n : n * d), 1);
    let expected: DataType | undefined;
    try {
      expected = configTypeToDatatype(cfg.data_type!);
    } catch {
      expected = undefined;
    }
    plans.set(cfg.name, { cfg, expected, full, open: unknown.length === 0 ? -1 : unknown.length === 1 ? unknown[0] : undefined, known });
  }
  PLANS.set(config, plans);
  return plans;
}

/** Typed arrays taken as they are when they match the config's datatype (exact classes only). */
const EXACT = new Map<unknown, DataType>(TYPED);

/** The common call's input: a typed array of the config's own datatype and a shape solvable at once. */
function fastInput(name: string, value: unknown, plan: InputPlan | undefined): InferInput | undefined {
  if (!plan?.expected || plan.open === undefined || typeof value !== 'object' || value === null) return undefined;
  if (EXACT.get(value.constructor) !== plan.expected) return undefined;
  const data = value as NumericArray;
  const shape = plan.full.slice();
  if (plan.open >= 0) {
    const count = data.length;
    if (plan.known === 0 || count % plan.known !== 0) return undefined;
    shape[plan.open] = count / plan.known;
  }
  return { name, datatype: plan.expected, shape, data };
}

/** Builds core's request from an in-page call, against the addressed version's config. */
export function toInferRequest(call: InferCall, config: ModelConfig): InferRequest {
  const batching = (config.max_batch_size ?? 0) > 0;
  const plans = inputPlans(config);
  const inputs: InferInput[] = [];
  const given = call.inputs ?? {};
  for (const name in given) {
    if (!Object.hasOwn(given, name)) continue;
    const value = given[name]!;
    const plan = plans.get(name);
    const fast = fastInput(name, value, plan);
    if (fast) {
      inputs.push(fast);
      continue;
    }
    const what = `input '${name}'`;
    const cfg = plan?.cfg;
    const wrapped = !Array.isArray(value) && !ArrayBuffer.isView(value) && typeof value === 'object' && value !== null && 'data' in value;
    const raw = wrapped ? (value as { data: InputData }).data : (value as InputData);
    const declared = wrapped ? (value as { datatype?: DataType }).datatype : undefined;
    // An input the model does not have still goes through, so core reports it in its own words.
    const expected = cfg ? configTypeToDatatype(cfg.data_type!) : (declared ?? typedDatatype(raw) ?? 'BYTES');
    const { datatype, data } = toTensorData(raw, expected, what, declared);
    const count = (data as { length: number }).length;
    const shape = wrapped && (value as { shape?: number[] }).shape
      ? [...(value as { shape: number[] }).shape]
      : cfg ? inferShape(count, cfg.dims ?? [], batching, what) : [count];
    inputs.push({ name, datatype, shape, data });
  }
  const req: InferRequest = {
    model_name: call.model,
    inputs,
    outputs: call.outputs?.map((o) => (typeof o === 'string' ? { name: o } : {
      name: o.name, parameters: o.classification !== undefined ? { classification: o.classification } : undefined,
    })),
  };
  if (call.version !== undefined) req.model_version = String(call.version);
  if (call.id !== undefined) req.id = call.id;
  if (call.parameters || call.sequence) {
    const parameters: Parameters = { ...(call.parameters ?? {}) };
    if (call.sequence) {
      parameters.sequence_id = call.sequence.id;
      if (call.sequence.start !== undefined) parameters.sequence_start = call.sequence.start;
      if (call.sequence.end !== undefined) parameters.sequence_end = call.sequence.end;
    }
    if (Object.keys(parameters).length > 0) req.parameters = parameters;
  }
  return req;
}

/** Output tensors by name, BYTES decoded to strings. */
export function fromInferResponse(resp: InferResponse): Record<string, OutputTensor> {
  const out: Record<string, OutputTensor> = {};
  for (const t of resp.outputs) {
    const data = t.datatype === 'BYTES' ? (t.data as Uint8Array[]).map(decodeString) : (t.data as NumericArray);
    out[t.name] = { datatype: t.datatype, shape: t.shape, data };
  }
  return out;
}

/** Output data alone by name, BYTES decoded to strings (`infer`'s answer, without per-output wrappers). */
export function outputData(resp: InferResponse): Record<string, OutputData> {
  const out: Record<string, OutputData> = {};
  for (const t of resp.outputs) out[t.name] = t.datatype === 'BYTES' ? (t.data as Uint8Array[]).map(decodeString) : (t.data as NumericArray);
  return out;
}

/** Strings as BYTES elements, for callers building core tensors themselves. */
export const bytesElements = (strings: readonly string[]): Uint8Array[] => strings.map(encodeString);

export { TsiError };
