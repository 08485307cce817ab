/**
 * The response cache (`response_cache { enable: true }` on a model, `--cache-config local,size=N` on
 * the server): Triton's "local" cache, an LRU bounded in bytes shared by every model that enables it.
 * The key is a 64-bit hash of what determines a response: model name and version, every input's name,
 * datatype, shape and bytes, the requested outputs and the custom parameters (a backend may read them).
 * Entries hold copies of the output tensors, so a cached response never pins a whole batch's buffer
 * and nothing a client or a later step does can change it.
 *
 * Statistics follow Triton: a hit is a success with its own `cache_hit` duration (the lookup) and no
 * inference or execution; a miss adds `cache_miss` (lookup plus insertion) and then runs as usual.
 */

import type { ResponsePayload } from './backend.js';
import { TsiError } from './errors.js';
import type { PendingRequest } from './request.js';
import type { ModelStats } from './stats.js';
import { byteSize, retainBuffer } from './tensor.js';
import type { Clock, NumericArray, Parameters, Tensor, TensorData } from './types.js';

export interface CacheStats {
  entries: number;
  bytes: number;
  capacity: number;
  hits: number;
  misses: number;
  evictions: number;
}

interface Entry {
  payload: ResponsePayload;
  bytes: number;
}

/** Bytes an entry is charged beyond its tensor data (key, tensor headers, map slot). */
const ENTRY_OVERHEAD = 128;
const TENSOR_OVERHEAD = 64;

export class ResponseCache {
  private readonly entries = new Map<string, Entry>();
  private used = 0;
  private hits = 0;
  private misses = 0;
  private evictions = 0;

  constructor(readonly capacityBytes: number) {
    if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0) {
      throw new TsiError('INVALID_ARG', `cache size must be a non-negative integer number of bytes, got ${capacityBytes}`);
    }
  }

  /** The cached payload for `key`, made most recently used; undefined on a miss. */
  get(key: string): ResponsePayload | undefined {
    const e = this.entries.get(key);
    if (!e) {
      this.misses++;
      return undefined;
    }
    this.entries.delete(key);
    this.entries.set(key, e);
    this.hits++;
    return e.payload;
  }

  /** Stores a copy of `payload`, evicting least recently used entries; too big for the cache ⇒ skipped. */
  set(key: string, payload: ResponsePayload): void {
    let bytes = ENTRY_OVERHEAD + key.length;
    for (const t of payload.outputs) bytes += TENSOR_OVERHEAD + t.name.length + byteSize(t.data);
    if (bytes > this.capacityBytes) return;
    const old = this.entries.get(key);
    if (old) {
      this.entries.delete(key);
      this.used -= old.bytes;
    }
    while (this.used + bytes > this.capacityBytes) {
      const [k, e] = this.entries.entries().next().value as [string, Entry];
      this.entries.delete(k);
      this.used -= e.bytes;
      this.evictions++;
    }
    const outputs = payload.outputs.map((t): Tensor => {
      const data = copyData(t.data);
      retainBuffer(data);
      return { name: t.name, datatype: t.datatype, shape: [...t.shape], data };
    });
    const copy: ResponsePayload = { outputs };
    if (payload.parameters) copy.parameters = { ...payload.parameters };
    this.entries.set(key, { payload: copy, bytes });
    this.used += bytes;
  }

  stats(): CacheStats {
    return {
      entries: this.entries.size, bytes: this.used, capacity: this.capacityBytes,
      hits: this.hits, misses: this.misses, evictions: this.evictions,
    };
  }

  clear(): void {
    this.entries.clear();
    this.used = 0;
  }

  /**
   * Answers `request` from the cache if it can (returns true), else arranges for its successful final
   * response to be stored. Called by a model version after validation, before scheduling.
   */
  serve(model: string, version: number, request: PendingRequest, stats: ModelStats, clock: Clock): boolean {
    const t0 = clock.nowNs();
    const key = requestKey(model, version, request);
    const hit = this.get(key);
    const lookupNs = clock.nowNs() - t0;
    if (hit) {
      request.send(hit, true);
      stats.recordCacheHit(clock.nowNs() - request.receivedNs, lookupNs, clock.epochMs());
      return true;
    }
    request.wrapSink((inner) => (resp, final) => {
      if (final) {
        const t1 = clock.nowNs();
        if (!(resp instanceof TsiError)) this.set(key, resp);
        stats.recordCacheMiss(lookupNs + clock.nowNs() - t1);
      }
      inner(resp, final);
    });
    return false;
  }
}

function copyData(d: TensorData): TensorData {
  if (Array.isArray(d)) return (d as Uint8Array[]).map((e) => e.slice());
  return (d as NumericArray).slice();
}

/**
 * A 64-bit hash (two independent 32-bit lanes, murmur3-style mixing) of everything that determines a
 * response. Hashing reads tensor bytes four at a time where they are aligned.
 */
export function requestKey(model: string, version: number, request: PendingRequest): string {
  const h = new Hasher();
  h.str(model);
  h.num(version);
  const names = [...request.inputs.keys()].sort();
  for (const n of names) {
    const t = request.inputs.get(n)!;
    h.str(n);
    h.str(t.datatype);
    h.num(t.shape.length);
    for (const d of t.shape) h.num(d);
    if (Array.isArray(t.data)) {
      for (const e of t.data as Uint8Array[]) {
        h.num(e.byteLength);
        h.bytes(e);
      }
    } else {
      const d = t.data as NumericArray;
      h.bytes(new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
    }
  }
  for (const o of [...request.requestedOutputs].sort()) h.str(o);
  h.params(request.parameters);
  return h.digest();
}

const enc = new TextEncoder();

class Hasher {
  private a = 0x9747b28c;
  private b = 0x1b873593;

  private word(w: number): void {
    let k = Math.imul(w, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, 0x1b873593);
    this.a ^= k;
    this.a = (this.a << 13) | (this.a >>> 19);
    this.a = (Math.imul(this.a, 5) + 0xe6546b64) | 0;
    let j = Math.imul(w ^ 0x5bd1e995, 0x85ebca6b);
    j = (j << 13) | (j >>> 19);
    this.b = (Math.imul(this.b ^ j, 0xc2b2ae35) + 0x27d4eb2f) | 0;
  }

  num(n: number): void {
    this.word(n | 0);
    this.word(Math.floor(n / 4294967296) | 0);
  }

  str(s: string): void {
    this.bytes(enc.encode(s));
    this.word(0xff);
  }

  bytes(u: Uint8Array): void {
    this.num(u.byteLength);
    const n4 = u.byteLength >>> 2;
    if (u.byteOffset % 4 === 0) {
      const w = new Int32Array(u.buffer, u.byteOffset, n4);
      for (let i = 0; i < n4; i++) this.word(w[i]!);
    } else {
      const v = new DataView(u.buffer, u.byteOffset, u.byteLength);
      for (let i = 0; i < n4; i++) this.word(v.getInt32(i * 4, true));
    }
    for (let i = n4 * 4; i < u.byteLength; i++) this.word(u[i]! | 0x100);
  }

  params(p: Parameters): void {
    for (const k of Object.keys(p).sort()) {
      this.str(k);
      const v = p[k]!;
      this.str(`${typeof v}:${String(v)}`);
    }
  }

  digest(): string {
    const fin = (x: number) => {
      x ^= x >>> 16;
      x = Math.imul(x, 0x85ebca6b);
      x ^= x >>> 13;
      x = Math.imul(x, 0xc2b2ae35);
      return (x ^ (x >>> 16)) >>> 0;
    };
    return fin(this.a).toString(16).padStart(8, '0') + fin(this.b ^ this.a).toString(16).padStart(8, '0');
  }
}

/**
 * Parses tritonserver's `--cache-config` values (`local,size=1048576`, repeatable) into a cache size.
 * Settings of two caches are refused with tritonserver's text, before either is looked at.
 */
export function parseCacheConfig(values: readonly string[]): { size: number } | undefined {
  let size: number | undefined;
  const settings = values.map((v) => {
    const m = /^([^,]+),([^=]+)=(.*)$/.exec(v.trim());
    if (!m) throw new TsiError('INVALID_ARG', `--cache-config expects <cache>,<key>=<value>, got '${v}'`);
    return m.slice(1) as [string, string, string];
  });
  if (new Set(settings.map(([cache]) => cache)).size > 1) {
    throw new TsiError('INVALID_ARG', 'found multiple cache configurations, but only a single cache is currently supported');
  }
  for (const [cache, key, value] of settings) {
    if (cache !== 'local') throw new TsiError('UNSUPPORTED', `unsupported cache '${cache}': only the 'local' cache is available`);
    if (key !== 'size') throw new TsiError('INVALID_ARG', `unknown setting '${key}' for the local cache (expected 'size')`);
    if (!/^\d+$/.test(value!)) throw new TsiError('INVALID_ARG', `local cache size must be a number of bytes, got '${value}'`);
    size = Number(value);
  }
  return size === undefined ? undefined : { size };
}

/**
 * The response cache tritonserver's flags ask for: `--cache-config` values, or the deprecated
 * `--response-cache-byte-size` (the local cache of that size); both at once are refused as by
 * tritonserver.
 */
export function parseCacheFlags(cacheConfig: readonly string[], responseCacheByteSize?: number): { size: number } | undefined {
  if (responseCacheByteSize === undefined) return parseCacheConfig(cacheConfig);
  if (cacheConfig.length > 0) {
    throw new TsiError('INVALID_ARG', 'Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other.');
  }
  return { size: responseCacheByteSize };
}
