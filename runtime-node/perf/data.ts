/**
 * What `tsi-node perf` sends: the model's inputs as the server describes them (metadata, plus the
 * config's max_batch_size and sequence_batching when the server offers /config), completed with the
 * user's `--shape` and `-b`, and filled from `--input-data zero|random|file.json` (perf_analyzer's JSON
 * layout). Everything is built before measuring, so the load loop only picks prepared inputs.
 */

import { readFileSync } from 'node:fs';
import type { DataType } from '../../core/types.js';
import type { InferenceClient } from '../../client/inference-client.js';
import type { InferInputSpec } from '../../client/types.js';
import { InferenceServerError } from '../../client/errors.js';

export interface PerfInput {
  name: string;
  datatype: DataType;
  /** Dimensions of one sample (no batch dimension), every -1 resolved. */
  dims: number[];
}

export interface ModelInfo {
  name: string;
  version?: string;
  maxBatchSize: number;
  /** True when the model takes a leading batch dimension. */
  batching: boolean;
  sequence: boolean;
  decoupled: boolean;
  inputs: PerfInput[];
  /** False when the server had no /config (a plain KServe v2 server): batching was inferred from metadata. */
  fromConfig: boolean;
}

export interface DataOptions {
  batchSize: number;
  source: string;
  stringLength: number;
  stringData?: string;
}

const fail = (message: string) => new InferenceServerError({ source: 'client', status: 0, message });

/** Reads the model's interface from the server and resolves variable dimensions with `--shape`. */
export async function describeModel(
  client: InferenceClient, model: string, version: string | undefined, shapes: Record<string, number[]>,
): Promise<ModelInfo> {
  const meta = await client.getModelMetadata(model, version);
  let config: Record<string, any> | undefined;
  try {
    config = (await client.getModelConfig(model, version)) as Record<string, any>;
  } catch {
    config = undefined;
  }
  const fromConfig = config !== undefined;
  let maxBatchSize = Number(config?.max_batch_size ?? 0);
  // Without a config, a leading -1 on every input of rank >= 2 is read as the batch dimension.
  if (!fromConfig && meta.inputs.length > 0 && meta.inputs.every((i) => i.shape.length >= 2 && i.shape[0] === -1)) maxBatchSize = Number.MAX_SAFE_INTEGER;
  const batching = maxBatchSize > 0;
  const inputs = meta.inputs.map((i) => {
    let dims = batching ? i.shape.slice(1) : [...i.shape];
    const given = shapes[i.name];
    if (given) {
      if (given.length !== dims.length) {
        throw fail(`--shape ${i.name}: the model's input has ${dims.length} dimension(s) [${dims.join(',')}] (batch dimension excluded), got [${given.join(',')}]`);
      }
      dims = dims.map((d, k) => (d === -1 ? given[k]! : d));
    }
    if (dims.some((d) => d < 0)) {
      throw fail(`input '${i.name}' has variable dimensions [${dims.join(',')}]: give them with --shape ${i.name}:${dims.map((d) => (d < 0 ? 'N' : d)).join(',')}`);
    }
    return { name: i.name, datatype: i.datatype as DataType, dims };
  });
  for (const name of Object.keys(shapes)) {
    if (!inputs.some((i) => i.name === name)) throw fail(`--shape names '${name}', which is not an input of '${model}' (inputs: ${inputs.map((i) => i.name).join(', ')})`);
  }
  return {
    name: model, version, maxBatchSize, batching, inputs, fromConfig,
    sequence: config?.sequence_batching !== undefined && config.sequence_batching !== null,
    decoupled: config?.model_transaction_policy?.decoupled === true,
  };
}

const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

function fill(dt: DataType, n: number, random: boolean, strings: () => string): InferInputSpec['data'] {
  const r = (max: number) => Math.floor(Math.random() * max);
  switch (dt) {
    case 'BYTES': return Array.from({ length: n }, strings);
    case 'BOOL': return Uint8Array.from({ length: n }, () => (random ? r(2) : 0));
    case 'FP32': return Float32Array.from({ length: n }, () => (random ? Math.random() : 0));
    case 'FP64': return Float64Array.from({ length: n }, () => (random ? Math.random() : 0));
    // Raw half-float bits of values in [0, 1): exponent below 15, any mantissa (FP16); BF16 likewise.
    case 'FP16': return Uint16Array.from({ length: n }, () => (random ? (r(15) << 10) | r(1024) : 0));
    case 'BF16': return Uint16Array.from({ length: n }, () => (random ? (r(127) << 7) | r(128) : 0));
    case 'INT64': return BigInt64Array.from({ length: n }, () => BigInt(random ? r(128) : 0));
    case 'UINT64': return BigUint64Array.from({ length: n }, () => BigInt(random ? r(128) : 0));
    default: {
      const ctor = { INT8: Int8Array, INT16: Int16Array, INT32: Int32Array, UINT8: Uint8Array, UINT16: Uint16Array, UINT32: Uint32Array }[dt];
      // Small values: wide random integers overflow index-like inputs and saturate arithmetic models.
      const out = new ctor(n);
      if (random) for (let i = 0; i < n; i++) out[i] = r(128);
      return out;
    }
  }
}

/**
 * Input sets to cycle through, one per request. zero/random give one set (perf_analyzer reuses its
 * buffer too); a JSON file gives one set per `-b` consecutive entries of its `data` list.
 */
export function buildInputSets(info: ModelInfo, o: DataOptions): InferInputSpec[][] {
  if (!info.batching && o.batchSize > 1) throw fail(`model '${info.name}' does not support batching (max_batch_size 0); -b must be 1`);
  if (info.batching && info.fromConfig && o.batchSize > info.maxBatchSize) {
    throw fail(`-b ${o.batchSize} exceeds the max_batch_size ${info.maxBatchSize} of model '${info.name}'`);
  }
  const shape = (dims: number[]) => (info.batching ? [o.batchSize, ...dims] : dims);
  if (o.source === 'zero' || o.source === 'random') {
    const random = o.source === 'random';
    const strings = () => o.stringData ?? (random ? Array.from({ length: o.stringLength }, () => ALNUM[Math.floor(Math.random() * ALNUM.length)]).join('') : '0');
    return [info.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: shape(i.dims), data: fill(i.datatype, count(shape(i.dims)), random, strings) }))];
  }
  return fromJsonFile(info, o);
}

type Sample = Map<string, { values: unknown[]; dims?: number[] }>;

function decodeB64(s: string): number[] {
  return Array.from(Buffer.from(s, 'base64'));
}

function flatten(v: unknown, out: unknown[] = []): unknown[] {
  if (Array.isArray(v)) for (const x of v) flatten(x, out);
  else out.push(v);
  return out;
}

/** perf_analyzer's input JSON: `{"data": [{"INPUT0": [..] | {"content": [..], "shape": [..]} | {"b64": ".."}}, ...]}`. */
function fromJsonFile(info: ModelInfo, o: DataOptions): InferInputSpec[][] {
  let doc: any;
  try {
    doc = JSON.parse(readFileSync(o.source, 'utf8'));
  } catch (err) {
    throw fail(`--input-data ${o.source}: ${(err as Error).message} (expected zero, random or a JSON file)`);
  }
  const entries: unknown[] = Array.isArray(doc?.data) ? doc.data : [];
  if (entries.length === 0) throw fail(`--input-data ${o.source}: expected {"data": [ {<input>: values, ...}, ... ]} with at least one entry`);
  const samples: Sample[] = entries.map((e, k) => {
    const m: Sample = new Map();
    for (const i of info.inputs) {
      const v = (e as Record<string, any>)?.[i.name];
      if (v === undefined) throw fail(`--input-data ${o.source}: entry ${k} has no '${i.name}'`);
      if (Array.isArray(v)) m.set(i.name, { values: flatten(v) });
      else if (typeof v?.b64 === 'string') m.set(i.name, { values: decodeB64(v.b64) });
      else if (v && 'content' in v) m.set(i.name, { values: flatten(v.content), dims: Array.isArray(v.shape) ? v.shape : undefined });
      else throw fail(`--input-data ${o.source}: entry ${k}, '${i.name}' must be an array, {"content": [...]} or {"b64": "..."}`);
    }
    return m;
  });
  const sets: InferInputSpec[][] = [];
  const per = info.batching ? o.batchSize : 1;
  for (let start = 0; start < samples.length; start += per) {
    sets.push(info.inputs.map((i) => {
      const values: unknown[] = [];
      let dims = i.dims;
      for (let b = 0; b < per; b++) {
        const s = samples[(start + b) % samples.length]!.get(i.name)!;
        if (s.dims) dims = s.dims;
        for (const v of s.values) values.push(v);
      }
      const data = i.datatype === 'BYTES' ? values.map(String)
        : i.datatype === 'BOOL' ? values.map((v) => (v ? 1 : 0))
        : i.datatype === 'INT64' || i.datatype === 'UINT64' ? values.map((v) => BigInt(v as number))
        : (values as number[]);
      return { name: i.name, datatype: i.datatype, shape: info.batching ? [per, ...dims] : dims, data: data as InferInputSpec['data'] };
    }));
  }
  return sets;
}
