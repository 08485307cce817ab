/**
 * The protobuf wire format of the messages on gRPC's hot path, by hand, writing side:
 * ModelInferResponse and ModelStreamInferResponse written into one buffer (wire-reader.ts reads the
 * requests). protobufjs (through proto-loader) turns an object into a message and encodes it in a
 * second pass; here a response is measured once (its Plan) and written once, with the gRPC frame
 * prefix in the bytes before it so grpc-js sends it without another copy, and large raw outputs go out
 * as views of their tensors.
 */

import { toBytes, type InferResponse, type Parameters, type ParamValue } from '../../core/index.js';

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
