/**
 * Normalisers from wire answers to the client's types. HTTP gives JSON numbers and omits empty parts;
 * gRPC (proto-loader with `longs: String, defaults: true`) gives 64-bit integers as decimal strings and
 * unset messages as null. Both pass through here, so a caller — or perf computing statistics deltas —
 * sees the same numbers whichever transport fetched them.
 */

import type {
  InferBatchStatistics, InferResponseStatistics, InferStatistics, MemoryUsage, ModelMetadata, ModelStatistics,
  RepositoryIndexEntry, StatisticDuration, SystemSharedMemoryRegion, TensorMetadata,
} from './types.js';

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (typeof v === 'object' && v !== null ? (v as Obj) : {});

/** A number from a JSON number, a decimal string (gRPC int64) or nothing (0). */
export function num(v: unknown): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && v !== '') return Number(v);
  if (typeof v === 'bigint') return Number(v);
  return 0;
}

const str = (v: unknown): string => (v === undefined || v === null ? '' : String(v));

function duration(v: unknown): StatisticDuration {
  const o = obj(v);
  return { count: num(o.count), ns: num(o.ns) };
}

const INFER_KEYS = ['success', 'fail', 'queue', 'compute_input', 'compute_infer', 'compute_output', 'cache_hit', 'cache_miss'] as const;
const RESPONSE_KEYS = ['compute_infer', 'compute_output', 'success', 'fail', 'empty_response', 'cancel'] as const;

export function modelStatistics(v: unknown): ModelStatistics {
  const o = obj(v);
  const is = obj(o.inference_stats);
  const inference_stats = Object.fromEntries(INFER_KEYS.map((k) => [k, duration(is[k])])) as unknown as InferStatistics;
  const batch_stats: InferBatchStatistics[] = (Array.isArray(o.batch_stats) ? o.batch_stats : []).map((b) => {
    const x = obj(b);
    return {
      batch_size: num(x.batch_size), compute_input: duration(x.compute_input),
      compute_infer: duration(x.compute_infer), compute_output: duration(x.compute_output),
    };
  });
  const memory_usage: MemoryUsage[] = (Array.isArray(o.memory_usage) ? o.memory_usage : []).map((m) => {
    const x = obj(m);
    return { type: str(x.type), id: num(x.id), byte_size: num(x.byte_size) };
  });
  const response_stats: Record<string, InferResponseStatistics> = {};
  for (const [k, r] of Object.entries(obj(o.response_stats))) {
    const x = obj(r);
    response_stats[k] = Object.fromEntries(RESPONSE_KEYS.map((f) => [f, duration(x[f])])) as unknown as InferResponseStatistics;
  }
  return {
    name: str(o.name), version: str(o.version), last_inference: num(o.last_inference),
    inference_count: num(o.inference_count), execution_count: num(o.execution_count),
    inference_stats, batch_stats, memory_usage, response_stats,
  };
}

function tensorMeta(v: unknown): TensorMetadata {
  const o = obj(v);
  return { name: str(o.name), datatype: str(o.datatype), shape: (Array.isArray(o.shape) ? o.shape : []).map(num) };
}

export function modelMetadata(v: unknown): ModelMetadata {
  const o = obj(v);
  return {
    name: str(o.name),
    versions: (Array.isArray(o.versions) ? o.versions : []).map(str),
    platform: str(o.platform),
    inputs: (Array.isArray(o.inputs) ? o.inputs : []).map(tensorMeta),
    outputs: (Array.isArray(o.outputs) ? o.outputs : []).map(tensorMeta),
  };
}

export function indexEntry(v: unknown): RepositoryIndexEntry {
  const o = obj(v);
  const e: RepositoryIndexEntry = { name: str(o.name) };
  if (o.version !== undefined && o.version !== '') e.version = str(o.version);
  if (o.state !== undefined && o.state !== '') e.state = str(o.state);
  if (o.reason !== undefined) e.reason = str(o.reason);
  return e;
}

export function shmRegion(v: unknown, name?: string): SystemSharedMemoryRegion {
  const o = obj(v);
  return { name: str(o.name ?? name), key: str(o.key), offset: num(o.offset), byte_size: num(o.byte_size) };
}

/** Drops null members recursively (gRPC's unset messages) so configs read like their JSON form. */
export function dropNulls<T>(v: T): T {
  if (Array.isArray(v)) return v.map(dropNulls) as T;
  if (typeof v === 'object' && v !== null && !(v instanceof Uint8Array)) {
    const out: Obj = {};
    for (const [k, x] of Object.entries(v as Obj)) if (x !== null && x !== undefined) out[k] = dropNulls(x);
    return out as T;
  }
  return v;
}

/** Standard base64 of bytes, without `Buffer` (browsers have only btoa, which takes a binary string). */
export function base64(bytes: Uint8Array): string {
  let s = '';
  const CHUNK = 0x8000;
  for (let i = 0; i < bytes.length; i += CHUNK) s += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  return btoa(s);
}
