/**
 * The protobuf wire format of the messages on gRPC's hot path, by hand, reading side: ModelInferRequest
 * read from the bytes grpc-js hands over (wire-writer.ts writes the responses). protobufjs (through
 * proto-loader) builds a message object and then a plain copy of it with every int64 as a decimal
 * string and every list as a JS array. Here a request becomes, in one pass, the plain shape codec.ts
 * reads (the proto's field names, `parameter_choice` on each parameter, `contents` null when absent)
 * with `raw_input_contents` and `bytes_contents` as views of the received bytes and packed typed
 * contents as typed arrays (views when aligned). Every other message keeps proto-loader's codec: they
 * are rare and small.
 *
 * The reader accepts what protobuf parsers must: fields in any order, repeated scalars packed or not,
 * unknown fields skipped, the last value of a singular field winning. Malformed bytes throw an Error
 * naming the flaw, which the handlers answer with INVALID_ARG.
 */

import { putEntry } from '../../core/index.js';

type Obj = Record<string, any>;

const TWO_32 = 4294967296;

/** A cursor over one received message; nested messages are read up to an `end` their caller passes. */
class Reader {
  pos = 0;
  /** The two 32-bit halves of the last varint read. */
  lo = 0;
  hi = 0;
  constructor(readonly buf: Buffer) {}

  /** Reads a varint into lo/hi. */
  private raw(end: number): void {
    const b = this.buf;
    let lo = 0;
    let c = 0;
    for (let i = 0; i < 28; i += 7) {
      if (this.pos >= end) throw new Error('truncated varint');
      c = b[this.pos++]!;
      lo |= (c & 0x7f) << i;
      if (c < 0x80) {
        this.lo = lo >>> 0;
        this.hi = 0;
        return;
      }
    }
    if (this.pos >= end) throw new Error('truncated varint');
    c = b[this.pos++]!;
    lo |= (c & 0x7f) << 28;
    let hi = (c & 0x7f) >> 4;
    for (let i = 3; c >= 0x80; i += 7) {
      if (i > 31) throw new Error('varint longer than 10 bytes');
      if (this.pos >= end) throw new Error('truncated varint');
      c = b[this.pos++]!;
      hi |= (c & 0x7f) << i;
    }
    this.lo = lo >>> 0;
    this.hi = hi >>> 0;
  }

  /** An unsigned varint that must fit in 32 bits (tags, lengths, uint32s). */
  uint32(end: number): number {
    const b = this.buf;
    if (this.pos < end && b[this.pos]! < 0x80) return b[this.pos++]!;
    this.raw(end);
    if (this.hi !== 0) throw new Error('a tag or length past 32 bits');
    return this.lo;
  }

  /** int32 is sign-extended to 10 bytes on the wire; its low half is the value. */
  int32(end: number): number {
    this.raw(end);
    return this.lo | 0;
  }

  /** An int64 as a number, exact below 2^53 (shapes: out-of-range ones are refused later anyway). */
  int64Number(end: number): number {
    this.raw(end);
    return this.hi >= 0x80000000 ? (this.hi - TWO_32) * TWO_32 + this.lo : this.hi * TWO_32 + this.lo;
  }

  /** An int64/uint64, exactly: a number when safe, else a bigint. */
  int64Exact(end: number, unsigned: boolean): number | bigint {
    this.raw(end);
    const u = this.hi * TWO_32 + this.lo;
    if (this.hi < 0x200000) return u;
    const big = (BigInt(this.hi) << 32n) | BigInt(this.lo);
    if (unsigned) return big;
    const signed = BigInt.asIntN(64, big);
    return signed >= -(2n ** 53n) + 1n && signed < 0n ? Number(signed) : signed;
  }

  /** The end of a length-delimited field whose content starts at `pos`. */
  delimited(end: number): number {
    const n = this.uint32(end);
    const stop = this.pos + n;
    if (stop > end) throw new Error(`a field of ${n} bytes runs past the end of its message`);
    return stop;
  }

  string(end: number): string {
    const stop = this.delimited(end);
    const s = this.buf.toString('utf8', this.pos, stop);
    this.pos = stop;
    return s;
  }

  bytes(end: number): Buffer {
    const stop = this.delimited(end);
    const b = this.buf.subarray(this.pos, stop);
    this.pos = stop;
    return b;
  }

  skip(wire: number, end: number): void {
    switch (wire) {
      case 0: this.raw(end); return;
      case 1: this.pos += 8; break;
      case 2: this.pos = this.delimited(end); return;
      case 5: this.pos += 4; break;
      default: throw new Error(`unsupported wire type ${wire}`);
    }
    if (this.pos > end) throw new Error('truncated fixed-width field');
  }
}

function wireOf(field: string, wire: number, want: number): void {
  if (wire !== want) throw new Error(`field '${field}' has wire type ${wire}, expected ${want}`);
}

/** InferParameter as proto-loader's `oneofs` option gives it: `{ parameter_choice, <choice>: value }`. */
function readParam(r: Reader, end: number): Obj {
  const out: Obj = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    const wire = tag & 7;
    switch (tag >>> 3) {
      case 1: wireOf('bool_param', wire, 0); out.parameter_choice = 'bool_param'; out.bool_param = r.int64Number(end) !== 0; break;
      case 2: wireOf('int64_param', wire, 0); out.parameter_choice = 'int64_param'; out.int64_param = r.int64Exact(end, false); break;
      case 3: wireOf('string_param', wire, 2); out.parameter_choice = 'string_param'; out.string_param = r.string(end); break;
      case 4:
        wireOf('double_param', wire, 1);
        if (r.pos + 8 > end) throw new Error('truncated double');
        out.parameter_choice = 'double_param';
        out.double_param = r.buf.readDoubleLE(r.pos);
        r.pos += 8;
        break;
      case 5: wireOf('uint64_param', wire, 0); out.parameter_choice = 'uint64_param'; out.uint64_param = r.int64Exact(end, true); break;
      default: r.skip(wire, end);
    }
  }
  return out;
}

/** One `map<string, InferParameter>` entry, added to `into`. */
function readParamEntry(r: Reader, end: number, into: Obj): void {
  const stop = r.delimited(end);
  let key = '';
  let value: Obj = {};
  while (r.pos < stop) {
    const tag = r.uint32(stop);
    const wire = tag & 7;
    if (tag >>> 3 === 1) {
      wireOf('key', wire, 2);
      key = r.string(stop);
    } else if (tag >>> 3 === 2) {
      wireOf('value', wire, 2);
      const vEnd = r.delimited(stop);
      value = readParam(r, vEnd);
    } else r.skip(wire, stop);
  }
  putEntry(into, key, value);
}

/** How each repeated scalar of InferTensorContents is held once read. */
type ListKind = 'bool' | 'int32' | 'int64' | 'uint32' | 'uint64' | 'fp32' | 'fp64';
const LISTS: readonly (readonly [string, ListKind])[] = [
  ['', 'bool'], ['bool_contents', 'bool'], ['int_contents', 'int32'], ['int64_contents', 'int64'], ['uint_contents', 'uint32'],
  ['uint64_contents', 'uint64'], ['fp32_contents', 'fp32'], ['fp64_contents', 'fp64'],
];

function readScalar(r: Reader, kind: ListKind, end: number): number | bigint {
  switch (kind) {
    case 'bool': return r.int64Number(end) !== 0 ? 1 : 0;
    case 'int32': return r.int32(end);
    case 'uint32': r.int64Number(end); return r.lo;
    case 'int64': return BigInt(r.int64Exact(end, false));
    case 'uint64': return BigInt(r.int64Exact(end, true));
    case 'fp32': {
      if (r.pos + 4 > end) throw new Error('truncated float');
      const v = r.buf.readFloatLE(r.pos);
      r.pos += 4;
      return v;
    }
    default: {
      if (r.pos + 8 > end) throw new Error('truncated double');
      const v = r.buf.readDoubleLE(r.pos);
      r.pos += 8;
      return v;
    }
  }
}

type Typed = Uint8Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | Float32Array | Float64Array;
const TYPED: Record<ListKind, { new (n: number): Typed; from(a: ArrayLike<any>): Typed; BYTES_PER_ELEMENT: number }> = {
  bool: Uint8Array, int32: Int32Array, int64: BigInt64Array, uint32: Uint32Array, uint64: BigUint64Array, fp32: Float32Array, fp64: Float64Array,
};

/** A packed run of `kind` between pos and `end`, as a typed array (a view of the bytes where it can be). */
function readPacked(r: Reader, kind: ListKind, end: number): Typed {
  const b = r.buf;
  if (kind === 'fp32' || kind === 'fp64') {
    const size = kind === 'fp32' ? 4 : 8;
    const len = end - r.pos;
    if (len % size !== 0) throw new Error(`packed ${kind} contents of ${len} bytes are not whole elements`);
    const Ctor = kind === 'fp32' ? Float32Array : Float64Array;
    const at = b.byteOffset + r.pos;
    let out: Float32Array | Float64Array;
    if (at % size === 0) out = new Ctor(b.buffer as ArrayBuffer, at, len / size);
    else {
      out = new Ctor(len / size);
      new Uint8Array(out.buffer).set(b.subarray(r.pos, end));
    }
    r.pos = end;
    return out;
  }
  // Every varint ends with one byte below 0x80: counting them sizes the array before decoding.
  let n = 0;
  for (let p = r.pos; p < end; p++) if (b[p]! < 0x80) n++;
  const out = new TYPED[kind](n);
  for (let i = 0; i < n; i++) (out as any)[i] = readScalar(r, kind, end);
  if (r.pos !== end) throw new Error('truncated packed contents');
  return out;
}

/** InferTensorContents: each list a typed array (BOOL as 0/1 bytes), `bytes_contents` views. */
function readContents(r: Reader, end: number): Obj {
  const out: Obj = {};
  const bytes: Buffer[] = [];
  while (r.pos < end) {
    const tag = r.uint32(end);
    const field = tag >>> 3;
    const wire = tag & 7;
    if (field === 8) {
      wireOf('bytes_contents', wire, 2);
      bytes.push(r.bytes(end));
      continue;
    }
    const list = LISTS[field];
    if (!list || field === 0) {
      r.skip(wire, end);
      continue;
    }
    const [name, kind] = list;
    let part: Typed | (number | bigint)[];
    if (wire === 2) {
      const stop = r.delimited(end);
      part = readPacked(r, kind, stop);
    } else {
      const want = kind === 'fp32' ? 5 : kind === 'fp64' ? 1 : 0;
      wireOf(name, wire, want);
      part = [readScalar(r, kind, end)];
    }
    const prev = out[name];
    // One packed run (the usual case) stays as read; several runs or loose elements are joined.
    out[name] = prev === undefined ? part : [...prev, ...part];
  }
  for (const [name, kind] of LISTS) if (Array.isArray(out[name])) out[name] = TYPED[kind].from(out[name]);
  if (bytes.length > 0) out.bytes_contents = bytes;
  return out;
}

/** repeated int64 shape, packed or not, as numbers. */
function readShape(r: Reader, wire: number, end: number, shape: number[]): void {
  if (wire === 0) {
    shape.push(r.int64Number(end));
    return;
  }
  wireOf('shape', wire, 2);
  const stop = r.delimited(end);
  while (r.pos < stop) shape.push(r.int64Number(stop));
}

function readInput(r: Reader, end: number): Obj {
  const io: Obj = { name: '', datatype: '', shape: [], parameters: {}, contents: null };
  while (r.pos < end) {
    const tag = r.uint32(end);
    const wire = tag & 7;
    switch (tag >>> 3) {
      case 1: wireOf('name', wire, 2); io.name = r.string(end); break;
      case 2: wireOf('datatype', wire, 2); io.datatype = r.string(end); break;
      case 3: readShape(r, wire, end, io.shape); break;
      case 4: wireOf('parameters', wire, 2); readParamEntry(r, end, io.parameters); break;
      case 5: wireOf('contents', wire, 2); io.contents = readContents(r, r.delimited(end)); break;
      default: r.skip(wire, end);
    }
  }
  return io;
}

function readOutput(r: Reader, end: number): Obj {
  const o: Obj = { name: '', parameters: {} };
  while (r.pos < end) {
    const tag = r.uint32(end);
    const wire = tag & 7;
    switch (tag >>> 3) {
      case 1: wireOf('name', wire, 2); o.name = r.string(end); break;
      case 2: wireOf('parameters', wire, 2); readParamEntry(r, end, o.parameters); break;
      default: r.skip(wire, end);
    }
  }
  return o;
}

/**
 * A ModelInferRequest in proto-loader's plain shape (keepCase, defaults, oneofs) with these
 * differences: int64s are numbers (bigints past 2^53) instead of strings, and `contents` lists are
 * typed arrays. Raw contents stay views of `buf`: the caller must not reuse it while they are in use.
 */
export function readModelInferRequest(buf: Buffer): Obj {
  const r = new Reader(buf);
  const end = buf.byteLength;
  const msg: Obj = { model_name: '', model_version: '', id: '', parameters: {}, inputs: [], outputs: [], raw_input_contents: [] };
  while (r.pos < end) {
    const tag = r.uint32(end);
    const wire = tag & 7;
    switch (tag >>> 3) {
      case 1: wireOf('model_name', wire, 2); msg.model_name = r.string(end); break;
      case 2: wireOf('model_version', wire, 2); msg.model_version = r.string(end); break;
      case 3: wireOf('id', wire, 2); msg.id = r.string(end); break;
      case 4: wireOf('parameters', wire, 2); readParamEntry(r, end, msg.parameters); break;
      case 5: wireOf('inputs', wire, 2); msg.inputs.push(readInput(r, r.delimited(end))); break;
      case 6: wireOf('outputs', wire, 2); msg.outputs.push(readOutput(r, r.delimited(end))); break;
      case 7: wireOf('raw_input_contents', wire, 2); msg.raw_input_contents.push(r.bytes(end)); break;
      default: r.skip(wire, end);
    }
  }
  return msg;
}

/**
 * Where the first `raw_input_contents` bytes start in a ModelInferRequest whose beginning `head` holds,
 * or undefined when they do not start within it or it does not parse (readModelInferRequest will say
 * why). The receiver joins a large request's chunks so that this offset is 8-byte aligned: the input
 * is then viewed, not copied, as a typed array.
 */
export function firstRawContentsAt(head: Buffer): number | undefined {
  const r = new Reader(head);
  const end = head.byteLength;
  try {
    while (r.pos < end) {
      const tag = r.uint32(end);
      if (tag === ((7 << 3) | 2)) {
        r.uint32(end);
        return r.pos;
      }
      r.skip(tag & 7, end);
    }
  } catch {
    // A field runs past `head`, or the bytes are not a message.
  }
  return undefined;
}
