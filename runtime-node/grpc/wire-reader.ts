/**
 * The protobuf wire format of the messages on gRPC's hot path, by hand: ModelInferRequest read from the
 * bytes grpc-js hands over, and ModelInferResponse / ModelStreamInferResponse written into one buffer.
 * protobufjs (through proto-loader) builds a message object and then a plain copy of it with every
 * int64 as a decimal string and every list as a JS array, and on the way out turns an object into a
 * message and encodes it in a second pass. Here a request becomes, in one pass, the plain shape
 * codec.ts reads (the proto's field names, `parameter_choice` on each parameter, `contents` null
 * when absent) with `raw_input_contents` and `bytes_contents` as views of the received bytes and packed
 * typed contents as typed arrays (views when aligned); a response is measured once and written once.
 * Every other message keeps proto-loader's codec: they are rare and small.
 *
 * The reader accepts what protobuf parsers must: fields in any order, repeated scalars packed or not,
 * unknown fields skipped, the last value of a singular field winning. Malformed bytes throw an Error
 * naming the flaw, which the handlers answer with INVALID_ARG.
 */

import { putEntry, toBytes, type InferResponse, type Parameters, type ParamValue } from '../../core/index.js';

type Obj = Record<string, any>;

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

function varintSize(n: number): number {
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x200000) return 3;
  if (n < 0x10000000) return 4;
  let s = 4;
  for (let v = Math.floor(n / 0x10000000); v > 0; v = Math.floor(v / 128)) s++;
  return s;
}

/** A non-negative integer below 2^53. */
function putVarint(b: Buffer, pos: number, n: number): number {
  while (n >= 0x80) {
    b[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  b[pos++] = n;
  return pos;
}

/** Any int64 (two's complement, so negatives take 10 bytes) as its 64-bit unsigned varint bytes. */
function int64Bytes(v: number | bigint): number[] {
  let u = BigInt.asUintN(64, BigInt(v));
  const out: number[] = [];
  while (u >= 0x80n) {
    out.push(Number(u & 0x7fn) | 0x80);
    u >>= 7n;
  }
  out.push(Number(u));
  return out;
}

/** Each parameter's encoded InferParameter value, ready to size and copy. */
interface ParamBytes { key: string; keyLen: number; tag: number; num?: number; big?: number[]; str?: string; strLen?: number; dbl?: number; size: number }

function paramBytes(key: string, v: ParamValue): ParamBytes {
  const keyLen = Buffer.byteLength(key);
  let p: ParamBytes;
  if (typeof v === 'boolean') p = { key, keyLen, tag: 0x08, num: v ? 1 : 0, size: 2 };
  else if (typeof v === 'string') {
    const strLen = Buffer.byteLength(v);
    p = { key, keyLen, tag: 0x1a, str: v, strLen, size: 1 + varintSize(strLen) + strLen };
  } else if (typeof v === 'bigint' || (Number.isInteger(v) && (v < 0 || v > Number.MAX_SAFE_INTEGER))) {
    const big = int64Bytes(v);
    p = { key, keyLen, tag: 0x10, big, size: 1 + big.length };
  } else if (Number.isInteger(v)) p = { key, keyLen, tag: 0x10, num: v, size: 1 + varintSize(v) };
  else p = { key, keyLen, tag: 0x21, dbl: v, size: 9 };
  return p;
}

/** The size of one map entry's content (key field + value field). */
const entrySize = (p: ParamBytes) => 1 + varintSize(p.keyLen) + p.keyLen + 1 + varintSize(p.size) + p.size;
/** The size of a `map<string, InferParameter>` field `parameters` of `params`. */
function mapSize(params: readonly ParamBytes[]): number {
  let n = 0;
  for (const p of params) {
    const e = entrySize(p);
    n += 1 + varintSize(e) + e;
  }
  return n;
}

function putMap(b: Buffer, pos: number, fieldTag: number, params: readonly ParamBytes[]): number {
  for (const p of params) {
    b[pos++] = fieldTag;
    pos = putVarint(b, pos, entrySize(p));
    b[pos++] = 0x0a;
    pos = putVarint(b, pos, p.keyLen);
    pos += b.write(p.key, pos, 'utf8');
    b[pos++] = 0x12;
    pos = putVarint(b, pos, p.size);
    b[pos++] = p.tag;
    if (p.big) for (const x of p.big) b[pos++] = x;
    else if (p.str !== undefined) {
      pos = putVarint(b, pos, p.strLen!);
      pos += b.write(p.str, pos, 'utf8');
    } else if (p.dbl !== undefined) pos = b.writeDoubleLE(p.dbl, pos);
    else pos = putVarint(b, pos, p.num!);
  }
  return pos;
}

function paramList(p: Parameters | undefined): ParamBytes[] {
  const out: ParamBytes[] = [];
  if (p) for (const k in p) out.push(paramBytes(k, p[k]!));
  return out;
}

const stringField = (len: number) => (len === 0 ? 0 : 1 + varintSize(len) + len);

function putString(b: Buffer, pos: number, tag: number, s: string, len: number): number {
  if (len === 0) return pos;
  b[pos++] = tag;
  pos = putVarint(b, pos, len);
  return pos + b.write(s, pos, 'utf8');
}

const EMPTY = new Uint8Array(0);

/** A response measured: everything the writer needs, so nothing is sized twice. */
interface Plan {
  resp: InferResponse;
  modelLen: number;
  versionLen: number;
  idLen: number;
  params: ParamBytes[];
  outputs: { nameLen: number; dtLen: number; shapeLen: number; params: ParamBytes[]; size: number }[];
  raw: Uint8Array[];
  size: number;
}

function plan(resp: InferResponse, inShm: ReadonlySet<string> | undefined, extra: Parameters | undefined): Plan {
  const modelLen = Buffer.byteLength(resp.model_name);
  const versionLen = Buffer.byteLength(resp.model_version);
  const id = resp.id ?? '';
  const idLen = id === '' ? 0 : Buffer.byteLength(id);
  const params = paramList(extra ? { ...(resp.parameters ?? {}), ...extra } : resp.parameters);
  let size = stringField(modelLen) + stringField(versionLen) + stringField(idLen) + mapSize(params);
  const outputs: Plan['outputs'] = [];
  const raw: Uint8Array[] = [];
  for (const t of resp.outputs) {
    const nameLen = Buffer.byteLength(t.name);
    const dtLen = t.datatype.length;
    let shapeLen = 0;
    for (const d of t.shape) shapeLen += varintSize(d);
    const tp = paramList(t.parameters);
    const o = stringField(nameLen) + stringField(dtLen) + (t.shape.length > 0 ? 1 + varintSize(shapeLen) + shapeLen : 0) + mapSize(tp);
    outputs.push({ nameLen, dtLen, shapeLen, params: tp, size: o });
    size += 1 + varintSize(o) + o;
    const r = inShm?.has(t.name) ? EMPTY : toBytes(t.data);
    raw.push(r);
    size += 1 + varintSize(r.byteLength) + r.byteLength;
  }
  return { resp, modelLen, versionLen, idLen, params, outputs, raw, size };
}

function putResponse(b: Buffer, pos: number, pl: Plan): number {
  pos = putResponseHead(b, pos, pl);
  for (const r of pl.raw) {
    b[pos++] = 0x32;
    pos = putVarint(b, pos, r.byteLength);
    b.set(r, pos);
    pos += r.byteLength;
  }
  return pos;
}

/** Everything of the response before its raw output contents. */
function putResponseHead(b: Buffer, pos: number, pl: Plan): number {
  const { resp } = pl;
  pos = putString(b, pos, 0x0a, resp.model_name, pl.modelLen);
  pos = putString(b, pos, 0x12, resp.model_version, pl.versionLen);
  pos = putString(b, pos, 0x1a, resp.id ?? '', pl.idLen);
  pos = putMap(b, pos, 0x22, pl.params);
  for (let i = 0; i < resp.outputs.length; i++) {
    const t = resp.outputs[i]!;
    const o = pl.outputs[i]!;
    b[pos++] = 0x2a;
    pos = putVarint(b, pos, o.size);
    pos = putString(b, pos, 0x0a, t.name, o.nameLen);
    pos = putString(b, pos, 0x12, t.datatype, o.dtLen);
    if (t.shape.length > 0) {
      b[pos++] = 0x1a;
      pos = putVarint(b, pos, o.shapeLen);
      for (const d of t.shape) pos = putVarint(b, pos, d);
    }
    pos = putMap(b, pos, 0x22, o.params);
  }
  return pos;
}

/** Messages written below with their gRPC frame prefix (uncompressed, length) in the 5 bytes before them. */
const FRAMED = new WeakSet<Uint8Array>();

/**
 * A buffer of `size` message bytes after a filled-in 5-byte gRPC frame prefix, returned as the
 * message (server.ts's sender then writes the frame as it is, rather than copying a whole large answer
 * into a fresh frame as grpc-js does).
 */
function framedBuffer(size: number): Buffer {
  const b = Buffer.allocUnsafe(5 + size);
  b[0] = 0;
  b.writeUInt32BE(size, 1);
  const msg = b.subarray(5);
  FRAMED.add(msg);
  return msg;
}

/** The gRPC frame around a message written here (prefix included), or undefined for any other bytes. */
export function grpcFrameOf(message: Uint8Array): Buffer | undefined {
  return FRAMED.has(message) ? Buffer.from(message.buffer, message.byteOffset - 5, message.byteLength + 5) : undefined;
}

/**
 * A ModelInferResponse's bytes: every output's data in `raw_output_contents` (an empty entry for one
 * written to shared memory), as Triton's server sends them; `extra` parameters join the response's own.
 */
export function writeModelInferResponse(resp: InferResponse, inShm?: ReadonlySet<string>, extra?: Parameters): Buffer {
  const pl = plan(resp, inShm, extra);
  const b = framedBuffer(pl.size);
  const end = putResponse(b, 0, pl);
  if (end !== pl.size) throw new Error(`ModelInferResponse: wrote ${end} bytes of ${pl.size} measured`);
  return b;
}

/** Raw output contents from this size on go out as views of the tensor, not copied into the frame. */
const VIEWED_RAW_BYTES = 64 * 1024;

/**
 * A ModelInferResponse as its whole gRPC frame (prefix included), in pieces to write back to back:
 * raw output contents of VIEWED_RAW_BYTES or more are the output tensors' own bytes, and the rest is
 * written into one small buffer the pieces between them view. A 4 MB answer is then not copied (nor
 * a 4 MB frame allocated) before the socket write. One piece when no output is that large.
 */
export function writeModelInferResponseFrame(resp: InferResponse, inShm?: ReadonlySet<string>, extra?: Parameters): Uint8Array[] {
  const pl = plan(resp, inShm, extra);
  let viewed = 0;
  for (const r of pl.raw) if (r.byteLength >= VIEWED_RAW_BYTES) viewed += r.byteLength;
  const b = Buffer.allocUnsafe(5 + pl.size - viewed);
  b[0] = 0;
  b.writeUInt32BE(pl.size, 1);
  const pieces: Uint8Array[] = [];
  let from = 0;
  let pos = putResponseHead(b, 5, pl);
  for (const r of pl.raw) {
    b[pos++] = 0x32;
    pos = putVarint(b, pos, r.byteLength);
    if (r.byteLength >= VIEWED_RAW_BYTES) {
      pieces.push(b.subarray(from, pos), r);
      from = pos;
    } else {
      b.set(r, pos);
      pos += r.byteLength;
    }
  }
  if (pos !== b.byteLength) throw new Error(`ModelInferResponse: wrote ${pos} bytes of ${b.byteLength} measured`);
  if (pos > from) pieces.push(b.subarray(from, pos));
  return pieces;
}

/** A ModelStreamInferResponse: an answer, or an error text with what is known of the request. */
export function writeModelStreamInferResponse(resp: InferResponse, errorMessage = '', inShm?: ReadonlySet<string>, extra?: Parameters): Buffer {
  const pl = plan(resp, inShm, extra);
  const errLen = Buffer.byteLength(errorMessage);
  const size = stringField(errLen) + 1 + varintSize(pl.size) + pl.size;
  const b = framedBuffer(size);
  let pos = putString(b, 0, 0x0a, errorMessage, errLen);
  b[pos++] = 0x12;
  pos = putVarint(b, pos, pl.size);
  pos = putResponse(b, pos, pl);
  if (pos !== size) throw new Error(`ModelStreamInferResponse: wrote ${pos} bytes of ${size} measured`);
  return b;
}
