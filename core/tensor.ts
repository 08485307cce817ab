/**
 * Tensor helpers shared by every transport and backend: element sizes, typed-array construction from
 * raw little-endian bytes and from JSON values, BYTES length-prefix framing, and the batch gather /
 * split that lets core hand backends one tensor per input and give each client back exactly its rows.
 */

import { invalidArg } from './errors.js';
import { JSON_DEPTH_MESSAGE, MAX_JSON_DEPTH, describeValue } from './protocol/request-params.js';
import type { DataType, NumericArray, Tensor, TensorData } from './types.js';

const ELEMENT_SIZE: Record<DataType, number> = {
  BOOL: 1, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, FP16: 2, BF16: 2,
  UINT32: 4, INT32: 4, FP32: 4, UINT64: 8, INT64: 8, FP64: 8, BYTES: 0,
};

/** Bytes per element; 0 for BYTES (variable length). */
export function elementSize(dt: DataType): number {
  return ELEMENT_SIZE[dt];
}

export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

type ArrayCtor = { new (buf: ArrayBufferLike, off: number, len: number): NumericArray; new (len: number): NumericArray };

const CTOR: Record<Exclude<DataType, 'BYTES'>, ArrayCtor> = {
  BOOL: Uint8Array, UINT8: Uint8Array, INT8: Int8Array, UINT16: Uint16Array, INT16: Int16Array,
  FP16: Uint16Array, BF16: Uint16Array, UINT32: Uint32Array, INT32: Int32Array, FP32: Float32Array,
  UINT64: BigUint64Array, INT64: BigInt64Array, FP64: Float64Array,
};

export function allocate(dt: DataType, count: number): TensorData {
  if (dt === 'BYTES') return new Array<Uint8Array>(count).fill(new Uint8Array(0));
  return new CTOR[dt](count);
}

/**
 * Views little-endian bytes as a typed array of `dt`. Copies only when the bytes are not aligned for
 * the element size (a view into an HTTP body often is not).
 */
export function fromBytes(dt: DataType, bytes: Uint8Array, count?: number): TensorData {
  if (dt === 'BYTES') return decodeBytesElements(bytes, count);
  const size = ELEMENT_SIZE[dt];
  if (bytes.byteLength % size !== 0) {
    throw invalidArg(`byte size ${bytes.byteLength} is not a multiple of the ${dt} element size ${size}`);
  }
  const n = bytes.byteLength / size;
  if (bytes.byteOffset % size === 0) return new CTOR[dt](bytes.buffer, bytes.byteOffset, n);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new CTOR[dt](copy.buffer, 0, n);
}

/** The little-endian bytes of a tensor (BYTES as 4-byte length-prefixed elements). */
export function toBytes(data: TensorData): Uint8Array {
  if (Array.isArray(data)) return encodeBytesElements(data);
  const d = data as NumericArray;
  return new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
}

export function byteSize(data: TensorData): number {
  if (Array.isArray(data)) {
    let n = 0;
    for (const e of data) n += 4 + e.byteLength;
    return n;
  }
  return (data as NumericArray).byteLength;
}

export function encodeBytesElements(elements: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const e of elements) total += 4 + e.byteLength;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const e of elements) {
    view.setUint32(off, e.byteLength, true);
    out.set(e, off + 4);
    off += 4 + e.byteLength;
  }
  return out;
}

/**
 * One buffer holding `parts` back to back: a JSON header followed by binary tensor data. With
 * `alignAt`, byte `alignAt` of the result lies on an 8-byte boundary of its buffer, so the tensor
 * whose bytes start there is viewed by fromBytes, not copied again (a received request's parts are
 * joined anyway; where its first tensor falls is an accident of the header's length).
 */
export function concatBytes(parts: readonly Uint8Array[], alignAt?: number): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let total = 0;
  for (const p of parts) total += p.byteLength;
  const pad = alignAt === undefined ? 0 : (8 - (alignAt % 8)) % 8;
  const out = new Uint8Array(pad + total);
  let off = pad;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return pad === 0 ? out : out.subarray(pad);
}

/** Splits 4-byte length-prefixed BYTES elements (callers name the tensor in their messages). */
export function decodeBytesElements(bytes: Uint8Array, expected?: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let off = 0;
  while (off < bytes.byteLength) {
    if (off + 4 > bytes.byteLength) {
      throw invalidArg(`truncated BYTES element ${out.length}: its 4-byte length prefix has only ${bytes.byteLength - off} byte(s)`);
    }
    const len = view.getUint32(off, true);
    off += 4;
    if (off + len > bytes.byteLength) {
      throw invalidArg(`BYTES element ${out.length} claims ${len} bytes but only ${bytes.byteLength - off} remain`);
    }
    out.push(bytes.subarray(off, off + len));
    off += len;
  }
  if (expected !== undefined && out.length !== expected) {
    throw invalidArg(`expected ${expected} BYTES elements, got ${out.length}`);
  }
  return out;
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder();

export const encodeString = (s: string): Uint8Array => utf8.encode(s);
export const decodeString = (b: Uint8Array): string => utf8d.decode(b);

/** Nested arrays flattened in row-major order, at most MAX_JSON_DEPTH deep (Triton's bound and text). */
function flatten(v: unknown, out: unknown[], depth: number, what: string): void {
  if (depth >= MAX_JSON_DEPTH) throw invalidArg(`${what}: ${JSON_DEPTH_MESSAGE}`);
  if (Array.isArray(v)) for (const x of v) flatten(x, out, depth + 1, what);
  else out.push(v);
}

/**
 * Builds tensor data from a (possibly nested) JSON array, checking every element's type. `what` names
 * the tensor for messages.
 */
export function fromJsonValues(dt: DataType, json: unknown, what: string): TensorData {
  // The usual `data` is one flat array of numbers: read straight into the typed array, with no
  // flattened copy (that copy and a per-element closure cost half as much again as JSON.parse).
  if (Array.isArray(json) && dt !== 'BYTES' && dt !== 'BOOL' && dt !== 'FP16' && dt !== 'BF16' && dt !== 'INT64' && dt !== 'UINT64') {
    const out = numbersFromJson(dt, json, what);
    if (out) return out;
  }
  const flat: unknown[] = [];
  flatten(json, flat, 0, what);
  const bad = (i: number, expected: string) =>
    invalidArg(`${what}: element ${i} is ${describeValue(flat[i])}, expected ${expected} for datatype ${dt}`);
  switch (dt) {
    case 'BYTES':
      return flat.map((v, i) => {
        if (typeof v !== 'string') throw bad(i, 'a string');
        return encodeString(v);
      });
    case 'BOOL': {
      const out = new Uint8Array(flat.length);
      flat.forEach((v, i) => {
        if (typeof v !== 'boolean') throw bad(i, 'true or false');
        out[i] = v ? 1 : 0;
      });
      return out;
    }
    case 'FP16':
    case 'BF16':
      throw invalidArg(
        `${what}: receiving ${dt} data via JSON is not supported. Please use the binary data format for input tensors`,
      );
    case 'INT64':
    case 'UINT64': {
      const out = dt === 'INT64' ? new BigInt64Array(flat.length) : new BigUint64Array(flat.length);
      const [lo, hi] = dt === 'INT64' ? [-(1n << 63n), (1n << 63n) - 1n] : [0n, (1n << 64n) - 1n];
      flat.forEach((v, i) => {
        let b: bigint;
        if (typeof v === 'number' && Number.isInteger(v)) b = BigInt(v);
        else if (typeof v === 'bigint') b = v;
        else if (typeof v === 'string' && /^-?\d{1,20}$/.test(v)) b = BigInt(v);
        else throw bad(i, 'an integer');
        // A typed array would wrap an out-of-range value silently.
        if (b < lo || b > hi) throw bad(i, `a value in [${lo}, ${hi}]`);
        out[i] = b;
      });
      return out;
    }
    default:
      // Flattened, no element is an array any more, so this always answers.
      return numbersFromJson(dt, flat, what)!;
  }
}

/**
 * Numeric elements checked and stored in one loop; undefined when an element is an array (nested
 * `data`: the caller flattens it first). Messages name the element's row-major index.
 */
function numbersFromJson(dt: Exclude<DataType, 'BYTES' | 'BOOL' | 'FP16' | 'BF16' | 'INT64' | 'UINT64'>, values: readonly unknown[], what: string): NumericArray | undefined {
  const n = values.length;
  const out = new CTOR[dt](n) as Exclude<NumericArray, BigInt64Array | BigUint64Array>;
  const isInt = dt !== 'FP32' && dt !== 'FP64';
  const range = INT_RANGE[dt];
  const lo = range ? range[0] : -Infinity;
  const hi = range ? range[1] : Infinity;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (typeof v !== 'number' || (isInt && !Number.isInteger(v))) {
      if (Array.isArray(v)) return undefined;
      // An integer literal past 2^53 read exactly (json-exact.ts): a number to a float tensor.
      if (typeof v === 'bigint' && !isInt) {
        out[i] = Number(v);
        continue;
      }
      throw invalidArg(`${what}: element ${i} is ${describeValue(v)}, expected ${isInt ? 'an integer' : 'a number'} for datatype ${dt}`);
    }
    if (v < lo || v > hi) throw invalidArg(`${what}: element ${i} is ${describeValue(v)}, expected a value in [${lo}, ${hi}] for datatype ${dt}`);
    out[i] = v;
  }
  return out;
}

const INT_RANGE: Partial<Record<DataType, [number, number]>> = {
  UINT8: [0, 255], INT8: [-128, 127], UINT16: [0, 65535], INT16: [-32768, 32767],
  UINT32: [0, 4294967295], INT32: [-2147483648, 2147483647],
};

/**
 * JSON-ready flat values: numbers, booleans, strings; a 64-bit integer past 2^53 stays a bigint, which
 * stringifyJson (json-exact.ts) writes as the exact integer Triton prints.
 */
export function toJsonValues(dt: DataType, data: TensorData, output?: string): unknown[] {
  if (dt === 'BYTES') return output === undefined ? (data as Uint8Array[]).map(decodeString) : exactStrings(data as Uint8Array[], output);
  if (dt === 'BOOL') return Array.from(data as Uint8Array, (v) => v !== 0);
  if (dt === 'INT64' || dt === 'UINT64') return Array.from(data as BigInt64Array, (v) => (v >= -MAX_SAFE && v <= MAX_SAFE ? Number(v) : v));
  if (dt === 'FP16' || dt === 'BF16') {
    throw invalidArg(`sending ${dt} data via JSON is not supported. Please use the binary data format for output tensors`);
  }
  return Array.from(data as Float32Array);
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * BYTES elements as JSON strings, refusing bytes that are not UTF-8: a JSON string cannot hold them, and
 * replacing them with U+FFFD would change the data without a word. (Triton copies the raw bytes into its
 * JSON, which then fails in the client's parser; the binary data extension carries any bytes.)
 */
function exactStrings(data: readonly Uint8Array[], output: string): string[] {
  const out = new Array<string>(data.length);
  for (let i = 0; i < data.length; i++) {
    try {
      out[i] = strictUtf8.decode(data[i]);
    } catch {
      throw invalidArg(
        `sending BYTES data that is not valid UTF-8 via JSON is not supported (element ${i} of output '${output}'). Please use the binary data format for output tensors`);
    }
  }
  return out;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** Elements a numeric `data` array is written in at a time (32 KiB of doubles: young-generation sized). */
export const JSON_CHUNK = 4096;
/** Reused for every chunk (32 KiB kept); JSON.stringify never calls back into this module, so it is never shared. */
const scratch: number[] = [];

/**
 * `stringifyJson(toJsonValues(dt, data))`, byte for byte, as pieces to send back to back (one piece up
 * to JSON_CHUNK elements). A numeric tensor is never copied whole into a JS array: JSON.stringify,
 * whose number formatting is the cost that remains, sees one small reused array at a time, and
 * the pieces need not be joined into one string before they are written.
 */
/** A number as Triton's JSON writes it: finite ones as JSON does, the others as NaN, Infinity, -Infinity. */
const nonFiniteJson = (v: number): string => (Number.isFinite(v) ? String(v) : Number.isNaN(v) ? 'NaN' : v > 0 ? 'Infinity' : '-Infinity');

export function jsonDataText(dt: DataType, data: TensorData, output?: string): string[] {
  if (dt === 'BYTES' || dt === 'BOOL' || dt === 'FP16' || dt === 'BF16') return [JSON.stringify(toJsonValues(dt, data, output))];
  const values = data as NumericArray;
  const n = values.length;
  const big = dt === 'INT64' || dt === 'UINT64';
  const out: string[] = [];
  for (let start = 0; start < n || start === 0; start += JSON_CHUNK) {
    const end = Math.min(n, start + JSON_CHUNK);
    let text: string;
    if (big) {
      // A bigint array's join writes every value exactly, as decimal integers: the JSON form.
      text = `[${(values as BigInt64Array).subarray(start, end).join(',')}]`;
    } else {
      // Shrunk, never grown by `length` (that would make it holey, which JSON.stringify walks slowly).
      if (scratch.length > end - start) scratch.length = end - start;
      for (let i = start; i < end; i++) scratch[i - start] = (values as Float32Array)[i]!;
      text = JSON.stringify(scratch);
      // JSON.stringify writes NaN and ±Infinity as null; Triton's writer (rapidjson with
      // kWriteNanAndInfFlag) writes NaN, Infinity and -Infinity, which its clients read back.
      if (text.includes('null')) text = `[${scratch.map(nonFiniteJson).join(',')}]`;
    }
    // "[a,b]" "[c,d]" → "[a,b" ",c,d]"
    if (start === 0) out.push(end === n ? text : text.slice(0, -1));
    else out.push(`,${end === n ? text.slice(1) : text.slice(1, -1)}`);
  }
  return out;
}

/**
 * Concatenates the same input of several requests along the batch dimension. With one request the
 * data is returned as is (no copy).
 */
export function concatBatch(parts: readonly Tensor[]): Tensor {
  const first = parts[0]!;
  if (parts.length === 1) return first;
  let rows = 0;
  for (const p of parts) rows += p.shape[0] ?? 1;
  const shape = [rows, ...first.shape.slice(1)];
  if (first.datatype === 'BYTES') {
    const data: Uint8Array[] = [];
    for (const p of parts) for (const e of p.data as Uint8Array[]) data.push(e);
    return { name: first.name, datatype: first.datatype, shape, data };
  }
  let total = 0;
  for (const p of parts) total += (p.data as NumericArray).length;
  const out = allocate(first.datatype, total) as NumericArray;
  let off = 0;
  for (const p of parts) {
    const d = p.data as NumericArray;
    (out as Float32Array).set(d as Float32Array, off);
    off += d.length;
  }
  return { name: first.name, datatype: first.datatype, shape, data: out };
}

/** Splits a batched tensor into consecutive row groups; views, not copies. */
export function splitBatch(t: Tensor, rows: readonly number[]): Tensor[] {
  if (rows.length === 1) return [t];
  const dims = t.shape;
  let perRow = 1;
  for (let d = 1; d < dims.length; d++) perRow *= dims[d]!;
  const bytes = Array.isArray(t.data);
  const out = new Array<Tensor>(rows.length);
  let start = 0;
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    const end = start + r * perRow;
    const data = bytes ? (t.data as Uint8Array[]).slice(start, end) : (t.data as NumericArray).subarray(start, end);
    // Each part gets its own shape array (callers may keep or change it).
    const shape = new Array<number>(dims.length);
    shape[0] = r;
    for (let d = 1; d < dims.length; d++) shape[d] = dims[d]!;
    out[i] = { name: t.name, datatype: t.datatype, shape, data };
    start = end;
  }
  return out;
}

/**
 * Splits a flat output among requests by the shapes of their `source` inputs (Triton's batch output
 * BATCH_SCATTER_WITH_INPUT_SHAPE): each part takes as many elements as its input has, and its shape.
 */
export function scatterByShapes(t: Tensor, shapes: readonly (readonly number[])[]): Tensor[] {
  const bytes = Array.isArray(t.data);
  let start = 0;
  return shapes.map((shape) => {
    const end = start + elementCount(shape);
    const data = bytes ? (t.data as Uint8Array[]).slice(start, end) : (t.data as NumericArray).subarray(start, end);
    start = end;
    return { name: t.name, datatype: t.datatype, shape: [...shape], data };
  });
}

/** A config's `batch_input` entry, as far as building its tensor needs (model_config.proto's BatchInput). */
export interface BatchInputSpec { kind?: string; target_name?: string[]; data_type?: string; source_input?: string[] }

/**
 * The tensors a config's `batch_input` entries make for one gathered batch, one per target name, from
 * the shapes of each request's source input (Triton's backend input collector; kind defaults to
 * BATCH_ELEMENT_COUNT, the proto's zero): the element count of each request, those counts accumulated
 * (with a leading zero for _WITH_ZERO), a shape [largest count] whose contents the model must not read
 * (BATCH_MAX_ELEMENT_COUNT_AS_SHAPE, zeros here), or each batch row's shape without its batch
 * dimension, as [rows, rank - 1] (BATCH_ITEM_SHAPE) or flat (BATCH_ITEM_SHAPE_FLATTEN).
 * Values are FP32 or INT32 as `data_type` says; config validation allows no other.
 */
export function batchInputTensors(specs: readonly BatchInputSpec[], requests: readonly ReadonlyMap<string, Tensor>[]): Tensor[] {
  const out: Tensor[] = [];
  for (const spec of specs) {
    const source = spec.source_input?.[0] ?? '';
    const shapes = requests.map((r) => r.get(source)?.shape ?? []);
    const counts = shapes.map((s) => elementCount(s));
    let values: number[];
    let shape: number[];
    switch (spec.kind ?? 'BATCH_ELEMENT_COUNT') {
      case 'BATCH_ELEMENT_COUNT':
        values = counts;
        shape = [counts.length];
        break;
      case 'BATCH_ACCUMULATED_ELEMENT_COUNT':
      case 'BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO': {
        let sum = 0;
        values = counts.map((c) => (sum += c));
        if (spec.kind === 'BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO') values.unshift(0);
        shape = [values.length];
        break;
      }
      case 'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE':
        shape = [Math.max(0, ...counts)];
        values = new Array<number>(shape[0]!).fill(0);
        break;
      case 'BATCH_ITEM_SHAPE':
      case 'BATCH_ITEM_SHAPE_FLATTEN': {
        // The first dimension of the source is the request's batch rows; each row repeats the rest.
        values = shapes.flatMap((s) => Array.from({ length: s[0] ?? 0 }, () => s.slice(1)).flat());
        const rank = Math.max(0, (shapes[0]?.length ?? 1) - 1);
        shape = spec.kind === 'BATCH_ITEM_SHAPE' ? [rank > 0 ? values.length / rank : 0, rank] : [values.length];
        break;
      }
      default:
        throw invalidArg(`unsupported batch input kind '${spec.kind}'`);
    }
    const datatype = spec.data_type === 'TYPE_INT32' ? 'INT32' : 'FP32';
    for (const name of spec.target_name ?? []) {
      out.push({ name, datatype, shape: [...shape], data: datatype === 'INT32' ? Int32Array.from(values) : Float32Array.from(values) });
    }
  }
  return out;
}

/**
 * A shape carried across a config's `reshape`, as Triton's core maps it: each -1 of `to` takes, in
 * order, the value `shape` has where `from` has -1 (a request's dims → the model's reshape on the way
 * in; the model's reshape → the config's dims on the way out).
 */
export function mapVariableDims(shape: readonly number[], from: readonly number[], to: readonly number[]): number[] {
  const values = shape.filter((_, i) => from[i] === -1);
  let k = 0;
  return to.map((d) => (d === -1 ? values[k++] ?? -1 : d));
}


export function shapeToString(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

export function dataLength(data: TensorData): number {
  return (data as { length: number }).length;
}

// Buffers that something still reads after handing a tensor on: an ensemble tensor with several
// consumers, a cached response. Worker-based backends move (transfer) input buffers they own to
// avoid a copy, which empties them on this side, so they must copy these instead.
const retained = new WeakSet<object>();

/** Marks a tensor's buffer as shared: backends must not transfer (detach) it. */
export function retainBuffer(data: TensorData): void {
  if (!Array.isArray(data)) retained.add((data as NumericArray).buffer);
}

/** Whether a backend may transfer this buffer to another thread instead of copying it. */
export function canTransfer(buffer: ArrayBufferLike): boolean {
  return !retained.has(buffer);
}

// Buffers that hold the data of several tensors of one request, and nothing any other request reads:
// an HTTP body with binary tensor data, each input a view of it. Copying a view out of it to transfer
// it would hold a large tensor twice; moving the whole buffer is safe when every view of it goes along.
const requestBuffers = new WeakMap<object, number>();

/** Marks a request body's buffer, of which `views` of the request's input tensors are views. */
export function markRequestBuffer(buffer: ArrayBufferLike, views: number): void {
  if (views > 0) requestBuffers.set(buffer, views);
}

/** Whether a backend may move this buffer whole, `views` of its tensors' data being views of it. */
export function canTransferWhole(buffer: ArrayBufferLike, views: number): boolean {
  return requestBuffers.get(buffer) === views && canTransfer(buffer);
}
