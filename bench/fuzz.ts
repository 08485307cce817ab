/**
 * The hostile-client fuzz: N generated requests at a running server, over HTTP/1.1 and gRPC, each one
 * wrong in some way a careless or malicious client could make it — parameters of the wrong type or
 * range, reserved names, shapes that overflow or go negative, datatypes that do not exist, JSON nested
 * ten thousand deep, binary framing that lies about its sizes, gzip that is not, request heads that
 * break HTTP/1.1, protobuf bytes that are not the message, streams of all of those — built from the
 * models the server actually has (their metadata), so most requests get deep into validation.
 * Requests come from fast-check arbitraries sampled with a seed: a run is reproducible.
 *
 * Every answer is checked: (a) no 5xx over HTTP other than Triton's own 501 for what it does not
 * support, no INTERNAL, UNKNOWN or DATA_LOSS over gRPC, and an answer to every complete request;
 * (b) every HTTP error has a `{"error": "<non-empty>"}` body and every gRPC error a message; (c) every
 * `probeEvery` requests the server must still answer a correct inference over both protocols.
 *
 *   npx tsx bench/fuzz.ts [--requests 10000] [--seed 1] [--probe-every 200] [--exclude repeat_int32] [--trace]
 *   npx tsx bench/fuzz.ts --http http://127.0.0.1:8000 --grpc 127.0.0.1:8001   (a server already running)
 *   npm run bench:fuzz -- --requests 2000
 *
 * Without --http a server is started from the sources over models/ (bench/soak.ts spawnServer). A
 * short run is part of the test suite (test/node/fuzz-server.test.ts).
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { loadProtos } from '../runtime-node/grpc/server.js';

type Obj = Record<string, any>;

// ---------------------------------------------------------------------------------------------------
// Values where something else belongs, and a JSON writer for them.
// ---------------------------------------------------------------------------------------------------

/** JSON nested `depth` arrays (or objects) deep, written as text: no JavaScript value that deep exists here. */
class Deep {
  constructor(readonly depth: number, readonly objects: boolean, readonly inner: unknown = 1) {}
}
/** An integer past what a double holds, written as its digits. */
class BigNum {
  constructor(readonly digits: string) {}
}

function toJson(v: unknown): string {
  if (v instanceof Deep) {
    const [o, c] = v.objects ? ['{"a":', '}'] : ['[', ']'];
    return `${o.repeat(v.depth)}${toJson(v.inner)}${c.repeat(v.depth)}`;
  }
  if (v instanceof BigNum) return v.digits;
  if (v instanceof Uint8Array) return JSON.stringify(Array.from(v));
  if (Array.isArray(v)) return `[${v.map(toJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`).join(',')}}`;
  }
  if (typeof v === 'bigint') return v.toString();
  return JSON.stringify(v) ?? 'null';
}

const SPECIAL: unknown[] = [
  null, true, false, 0, -0, 1, -1, 2, 2.5, -0.5, 1e30, -1e30, 2 ** 31, 2 ** 32, 2 ** 53 + 2, 2 ** 63, 2 ** 64, 1e308,
  '', 'yes', 'true', '1', '-1', '1e30', '\u0000', 'INT32', 'BYTES', 'triton_', '💥', 'a'.repeat(300), [], {}, [[]], [null], { a: 1 }, [1, 2, 3],
  new BigNum('18446744073709551616'), new BigNum('-9223372036854775809'), new BigNum('123456789012345678901234567890'),
];

export const hostile: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...SPECIAL) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40, unit: 'binary' }) },
  { weight: 1, arbitrary: fc.integer({ min: 90, max: 20_000 }).chain((d) => fc.boolean().map((o) => new Deep(d, o))) },
  { weight: 1, arbitrary: fc.double() },
  { weight: 1, arbitrary: fc.integer() },
);

const DIMS: unknown[] = [-1, -5, 0, 1, 3, 1.5, 1e30, 2 ** 40, 2 ** 63, 2 ** 64, '3', null, [2], new BigNum('99999999999999999999')];
const REQUEST_KEYS = ['sequence_id', 'sequence_start', 'sequence_end', 'priority', 'timeout', 'binary_data_output', 'triton_x', 'triton_enable_empty_final_response', 'headers', 'custom'];
const INPUT_KEYS = ['binary_data_size', 'shared_memory_region', 'shared_memory_offset', 'shared_memory_byte_size', 'custom'];
const OUTPUT_KEYS = ['binary_data', 'classification', 'shared_memory_region', 'shared_memory_byte_size', 'custom'];
const DATATYPE_NAMES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES', 'BF16'];

// ---------------------------------------------------------------------------------------------------
// A request as drafted: valid for its model, then mutated.
// ---------------------------------------------------------------------------------------------------

interface TensorMeta {
  name: string;
  datatype: string;
  shape: number[];
}
interface ModelMeta {
  name: string;
  inputs: TensorMeta[];
  outputs: TensorMeta[];
}

interface InputDraft {
  name: unknown;
  datatype: unknown;
  shape: unknown;
  /** JSON data, or bytes sent as binary (HTTP binary extension, gRPC raw contents). */
  data?: unknown;
  bytes?: Uint8Array;
  parameters?: Record<string, unknown>;
}
interface Draft {
  model: string;
  version?: string;
  id?: unknown;
  parameters?: unknown;
  inputs: unknown;
  outputs?: unknown;
  /** HTTP framing and gRPC-only twists. */
  twists: string[];
  twistValue: number;
}

const ELEMENT: Record<string, number> = { BOOL: 1, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, FP16: 2, BF16: 2, UINT32: 4, INT32: 4, FP32: 4, UINT64: 8, INT64: 8, FP64: 8 };

function valuesFor(dt: string, n: number, seed: number): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const x = (seed * 7919 + i * 104729) % 1000;
    switch (dt) {
      case 'BOOL': out.push(x % 2 === 0); break;
      case 'BYTES': out.push(String(x - 500)); break;
      case 'FP32': case 'FP64': out.push((x - 500) / 8); break;
      case 'UINT8': case 'UINT16': case 'UINT32': case 'UINT64': out.push(x % 200); break;
      default: out.push((x % 200) - 100);
    }
  }
  return out;
}

function bytesFor(dt: string, values: unknown[]): Uint8Array {
  if (dt === 'BYTES') {
    const parts = values.map((v) => Buffer.from(String(v)));
    return Buffer.concat(parts.flatMap((p) => {
      const h = Buffer.alloc(4);
      h.writeUInt32LE(p.length);
      return [h, p];
    }));
  }
  const size = ELEMENT[dt] ?? 4;
  const b = Buffer.alloc(values.length * size);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  values.forEach((v, i) => {
    // Whatever the value, some bytes: typed-array writes wrap, as a careless client's would.
    const x = v === true ? 1 : v === false ? 0 : Number(v);
    const n = Number.isFinite(x) ? x : 0;
    const big = BigInt.asIntN(64, BigInt(Math.trunc(Math.max(-1e18, Math.min(1e18, n)))));
    switch (dt) {
      case 'BOOL': case 'UINT8': view.setUint8(i, n); break;
      case 'INT8': view.setInt8(i, n); break;
      case 'UINT16': case 'FP16': case 'BF16': view.setUint16(i * 2, n, true); break;
      case 'INT16': view.setInt16(i * 2, n, true); break;
      case 'UINT32': view.setUint32(i * 4, n, true); break;
      case 'INT32': view.setInt32(i * 4, n, true); break;
      case 'FP32': view.setFloat32(i * 4, x, true); break;
      case 'FP64': view.setFloat64(i * 8, x, true); break;
      case 'UINT64': view.setBigUint64(i * 8, BigInt.asUintN(64, big), true); break;
      case 'INT64': view.setBigInt64(i * 8, big, true); break;
    }
  });
  return b;
}

interface Mutation {
  kind: string;
  index: number;
  index2: number;
  key: string;
  value: unknown;
  dim: unknown;
}

const MUTATIONS = [
  'request-field', 'request-param', 'request-param', 'input-field', 'input-param', 'shape-dim', 'shape-dim', 'datatype-swap', 'data-element',
  'data-deep', 'dup-input', 'drop-input', 'extra-input', 'output-param', 'output-name', 'binary-size', 'model', 'version', 'id',
];
const TWISTS = ['header-length', 'truncate-body', 'garbage-body', 'gzip', 'gzip-garbage', 'unknown-encoding', 'trailing-bytes', 'typed-contents', 'raw-size', 'param-choice', 'shape-string'];

const mutationArb: fc.Arbitrary<Mutation> = fc.record({
  kind: fc.constantFrom(...MUTATIONS),
  index: fc.nat(8),
  index2: fc.nat(4000),
  key: fc.oneof(fc.constantFrom(...REQUEST_KEYS, ...INPUT_KEYS, ...OUTPUT_KEYS, 'name', 'datatype', 'shape', 'data', 'parameters', 'id', 'inputs', 'outputs'), fc.string({ maxLength: 12 })),
  value: hostile,
  dim: fc.constantFrom(...DIMS),
});

export interface Plan {
  model: number;
  batch: number;
  binary: boolean[];
  outputs: boolean;
  mutations: Mutation[];
  twists: string[];
  twistValue: number;
  seed: number;
}

export const planArb: fc.Arbitrary<Plan> = fc.record({
  model: fc.nat(1000),
  batch: fc.integer({ min: 1, max: 3 }),
  binary: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  outputs: fc.boolean(),
  mutations: fc.array(mutationArb, { minLength: 0, maxLength: 3 }),
  twists: fc.oneof({ weight: 3, arbitrary: fc.constant([] as string[]) }, { weight: 1, arbitrary: fc.array(fc.constantFrom(...TWISTS), { minLength: 1, maxLength: 2 }) }),
  twistValue: fc.integer({ min: -50, max: 100_000 }),
  seed: fc.nat(),
});

/** A valid request for the model, then the plan's mutations. */
export function draft(models: ModelMeta[], plan: Plan): Draft {
  const m = models[plan.model % models.length]!;
  const inputs: InputDraft[] = m.inputs.map((t, i) => {
    const shape = t.shape.map((d, j) => (d >= 0 ? d : j === 0 ? plan.batch : 1 + ((plan.seed >> j) % 3)));
    const n = shape.reduce((a, b) => a * b, 1);
    const values = valuesFor(t.datatype, n, plan.seed + i);
    const binary = plan.binary[i % 4]! || t.datatype === 'FP16' || t.datatype === 'BF16';
    return binary ? { name: t.name, datatype: t.datatype, shape, bytes: bytesFor(t.datatype, values) } : { name: t.name, datatype: t.datatype, shape, data: values };
  });
  const d: Draft = { model: m.name, inputs, twists: plan.twists, twistValue: plan.twistValue };
  if (plan.outputs) d.outputs = m.outputs.map((o) => ({ name: o.name }));
  for (const mu of plan.mutations) mutate(d, mu, m);
  return d;
}

function mutate(d: Draft, mu: Mutation, m: ModelMeta): void {
  const ins = Array.isArray(d.inputs) ? (d.inputs as InputDraft[]) : [];
  const input = ins.length > 0 ? ins[mu.index % ins.length] : undefined;
  const obj = (x: unknown) => (x !== null && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : undefined);
  switch (mu.kind) {
    case 'request-field': (d as unknown as Record<string, unknown>)[['id', 'parameters', 'inputs', 'outputs'][mu.index % 4]!] = mu.value; break;
    case 'request-param': d.parameters = { ...(obj(d.parameters) ?? {}), [REQUEST_KEYS.includes(mu.key) ? mu.key : REQUEST_KEYS[mu.index2 % REQUEST_KEYS.length]!]: mu.value }; break;
    case 'input-field': if (obj(input)) (input as unknown as Record<string, unknown>)[['name', 'datatype', 'shape', 'data', 'parameters'][mu.index2 % 5]!] = mu.value; break;
    case 'input-param': if (obj(input)) input!.parameters = { ...(input!.parameters ?? {}), [INPUT_KEYS[mu.index2 % INPUT_KEYS.length]!]: mu.value }; break;
    case 'shape-dim': if (obj(input) && Array.isArray(input!.shape)) (input!.shape as unknown[])[mu.index2 % Math.max(1, (input!.shape as unknown[]).length)] = mu.dim; break;
    case 'datatype-swap': if (obj(input)) input!.datatype = DATATYPE_NAMES[mu.index2 % DATATYPE_NAMES.length]; break;
    case 'data-element': if (obj(input) && Array.isArray(input!.data)) (input!.data as unknown[])[mu.index2 % Math.max(1, (input!.data as unknown[]).length)] = mu.value; break;
    case 'data-deep': if (obj(input)) { input!.data = new Deep(1 + (mu.index2 % 300), false, input!.data ?? 1); delete input!.bytes; } break;
    case 'dup-input': if (input) ins.push({ ...input }); break;
    case 'drop-input': if (ins.length > 0) ins.splice(mu.index % ins.length, 1); break;
    case 'extra-input': ins.push({ name: typeof mu.value === 'string' ? mu.value : `EXTRA${mu.index}`, datatype: 'INT32', shape: [1, 1], data: [1] }); break;
    case 'output-param': {
      const outs = Array.isArray(d.outputs) ? (d.outputs as Record<string, unknown>[]) : (d.outputs = m.outputs.map((o) => ({ name: o.name }))) as Record<string, unknown>[];
      const o = outs[mu.index % Math.max(1, outs.length)];
      if (obj(o)) o!.parameters = { ...(obj(o!.parameters) ?? {}), [OUTPUT_KEYS[mu.index2 % OUTPUT_KEYS.length]!]: mu.value };
      break;
    }
    case 'output-name': d.outputs = [...(Array.isArray(d.outputs) ? d.outputs : []), { name: mu.value }]; break;
    case 'binary-size': if (obj(input)) {
      input!.bytes ??= bytesFor('INT32', [1, 2, 3]);
      delete input!.data;
      input!.parameters = { ...(input!.parameters ?? {}), binary_data_size: typeof mu.value === 'number' ? mu.value : input!.bytes.byteLength + (mu.index2 % 9) - 4 };
    } break;
    case 'model': d.model = typeof mu.value === 'string' && mu.value !== '' ? mu.value : `nope${mu.index2}`; break;
    case 'version': d.version = ['0', '2', '99', 'x', '-1', '1'][mu.index2 % 6]!; break;
    case 'id': d.id = mu.value; break;
  }
}

// ---------------------------------------------------------------------------------------------------
// Drafts on the wires.
// ---------------------------------------------------------------------------------------------------

/** The HTTP request for a draft: path, headers and body, framing twists applied. */
export function httpRequest(d: Draft): { path: string; headers: Record<string, string>; body: Buffer } {
  const chunks: Uint8Array[] = [];
  const inputs = Array.isArray(d.inputs)
    ? (d.inputs as unknown[]).map((x) => {
      if (x === null || typeof x !== 'object' || Array.isArray(x) || !(x as InputDraft).bytes) return x;
      const t = x as InputDraft;
      chunks.push(t.bytes!);
      const { bytes: _bytes, ...rest } = t;
      return { ...rest, parameters: { binary_data_size: t.bytes!.byteLength, ...(t.parameters ?? {}) } };
    })
    : d.inputs;
  const head: Record<string, unknown> = { id: d.id, parameters: d.parameters, inputs, outputs: d.outputs };
  const json = Buffer.from(toJson(head));
  let body = Buffer.concat([json, ...chunks]);
  const headers: Record<string, string> = { 'Content-Type': chunks.length > 0 ? 'application/octet-stream' : 'application/json' };
  if (chunks.length > 0) headers['Inference-Header-Content-Length'] = String(json.byteLength);
  const v = d.twistValue;
  for (const t of d.twists) {
    switch (t) {
      case 'header-length': headers['Inference-Header-Content-Length'] = [String(v), 'abc', '-1', '0', String(json.byteLength + 1), '1e3', ' 12 '][Math.abs(v) % 7]!; break;
      case 'truncate-body': body = body.subarray(0, Math.abs(v) % Math.max(1, body.length)); break;
      case 'garbage-body': body = Buffer.from(Array.from({ length: Math.abs(v) % 300 }, (_, i) => (i * 131 + v) & 0xff)); break;
      case 'gzip': body = gzipSync(body); headers['Content-Encoding'] = 'gzip'; break;
      case 'gzip-garbage': headers['Content-Encoding'] = v % 2 === 0 ? 'gzip' : 'deflate'; break;
      case 'unknown-encoding': headers['Content-Encoding'] = ['br', 'zstd', 'gzip, gzip', 'x'][Math.abs(v) % 4]!; break;
      case 'trailing-bytes': body = Buffer.concat([body, Buffer.from('\u0000garbage')]); break;
      default: break;
    }
  }
  const version = d.version !== undefined ? `/versions/${d.version}` : '';
  return { path: `/v2/models/${encodeURIComponent(d.model)}${version}/infer`, headers, body };
}

/** A JavaScript value as an InferParameter, the way a client library would write it, or not. */
function inferParameter(v: unknown, twisted: boolean): Obj {
  if (twisted) return [{}, { uint64_param: '3' }, { double_param: 1e30 }, { string_param: 'x' }, { bool_param: true }][String(v).length % 5]!;
  if (typeof v === 'boolean') return { bool_param: v };
  if (typeof v === 'string') return { string_param: v };
  if (typeof v === 'number') return Number.isSafeInteger(v) ? { int64_param: String(v) } : { double_param: v };
  if (v instanceof BigNum) return { int64_param: v.digits.slice(0, 19) };
  return { string_param: toJson(v).slice(0, 200) };
}

/** The ModelInferRequest for a draft (values that protobuf cannot hold become strings or defaults). */
export function grpcRequest(d: Draft): Obj {
  const str = (v: unknown) => (typeof v === 'string' ? v : toJson(v).slice(0, 100));
  const twisted = (t: string) => d.twists.includes(t);
  const params = (p: unknown) => {
    const out: Obj = {};
    if (p !== null && typeof p === 'object' && !Array.isArray(p)) {
      for (const [k, v] of Object.entries(p as Obj)) out[k] = inferParameter(v, twisted('param-choice'));
    }
    return out;
  };
  const raw: Buffer[] = [];
  const inputs = (Array.isArray(d.inputs) ? d.inputs : []).map((x: unknown, i: number) => {
    const t = (x !== null && typeof x === 'object' && !Array.isArray(x) ? x : {}) as InputDraft;
    const dt = str(t.datatype);
    const shape = Array.isArray(t.shape)
      ? t.shape.map((s) => (twisted('shape-string') && i === 0 ? '9223372036854775807' : typeof s === 'number' && Number.isFinite(s) ? String(Math.trunc(s)) : s instanceof BigNum ? s.digits.slice(0, 19) : '-1'))
      : [];
    const io: Obj = { name: str(t.name), datatype: dt, shape, parameters: params(t.parameters) };
    const values = Array.isArray(t.data) ? t.data : t.data === undefined ? undefined : [t.data];
    if (twisted('typed-contents') && values) {
      const list = { BOOL: 'bool_contents', INT32: 'int_contents', INT64: 'int64_contents', FP32: 'fp32_contents', BYTES: 'bytes_contents' }[dt] ?? 'int_contents';
      io.contents = { [list]: values.map((v) => (list === 'bytes_contents' ? Buffer.from(str(v)) : list === 'bool_contents' ? v === true : list === 'int64_contents' ? String(Math.trunc(Number(v) || 0)) : Number(v) || 0)) };
    } else {
      let b = Buffer.from(t.bytes ?? bytesFor(DATATYPE_NAMES.includes(dt) ? dt : 'INT32', values ?? []));
      if (twisted('raw-size') && i === 0) b = b.subarray(0, Math.max(0, b.length - 1 - (Math.abs(d.twistValue) % 5)));
      raw.push(b);
    }
    return io;
  });
  if (twisted('raw-size') && d.twistValue % 2 === 0) raw.push(Buffer.from([1, 2, 3, 4]));
  const outputs = (Array.isArray(d.outputs) ? d.outputs : []).map((o: unknown) => {
    const oo = (o !== null && typeof o === 'object' ? o : {}) as Obj;
    return { name: str(oo.name), parameters: params(oo.parameters) };
  });
  return {
    model_name: d.model, model_version: d.version ?? '', id: typeof d.id === 'string' ? d.id : d.id === undefined ? '' : str(d.id),
    parameters: params(d.parameters), inputs, outputs, raw_input_contents: raw,
  };
}

// ---------------------------------------------------------------------------------------------------
// Raw HTTP/1.1: heads no client library would write.
// ---------------------------------------------------------------------------------------------------

export interface RawCase {
  bytes: Buffer;
  /** false when the bytes are not a whole request (the server may rightly wait for more). */
  complete: boolean;
  what: string;
}

const rawArb: fc.Arbitrary<{ kind: number; n: number; text: string }> = fc.record({ kind: fc.nat(23), n: fc.nat(40_000), text: fc.string({ maxLength: 30, unit: 'binary-ascii' }) });

export function rawCase(p: { kind: number; n: number; text: string }): RawCase {
  const body = '{"inputs":[]}';
  const req = (line: string, headers: string[], b = body, complete = true, what = line): RawCase => ({
    bytes: Buffer.from(`${line}\r\n${headers.join('\r\n')}${headers.length ? '\r\n' : ''}\r\n${b}`, 'latin1'), complete, what,
  });
  const H = 'Host: 127.0.0.1';
  const cl = `Content-Length: ${body.length}`;
  const clean = p.text.replace(/[\r\n]/g, '');
  switch (p.kind) {
    case 0: return req(`${clean || 'X'} / HTTP/1.1`, [H], '', true, 'a garbage method');
    case 1: return req(`POST /v2/models/simple/infer HTTP/1.${p.n % 10}`, [H, cl]);
    case 2: return req(`POST /v2/models/simple/infer HTTP/2.0`, [H, cl]);
    case 3: return req(`POST /v2/models/simple/infer${'?q'.repeat(p.n % 12_000)} HTTP/1.1`, [H, cl], body, true, 'a long target');
    case 4: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, `X-Big: ${'a'.repeat(p.n % 30_000)}`, cl], body, true, 'a big header');
    case 5: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, `Bad Name: x`, cl], body, true, 'a space in a header name');
    case 6: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, 'nocolon', cl], body, true, 'a header without a colon');
    case 7: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, cl, ' folded'], body, true, 'obs-fold');
    case 8: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, cl, `Content-Length: ${body.length + 1}`], body, true, 'two Content-Lengths');
    case 9: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, `Content-Length: ${clean || '-1'}x`], body, true, 'a bad Content-Length');
    case 10: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, cl, 'Transfer-Encoding: chunked'], `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`, true, 'CL and TE');
    case 11: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, 'Transfer-Encoding: chunked'], `${clean.length ? 'zz' : 'fffffffffffff'}\r\n${body}\r\n0\r\n\r\n`, true, 'a bad chunk size');
    case 12: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, 'Transfer-Encoding: chunked'], `${body.length.toString(16)};ext=${clean}\r\n${body}XX0\r\n\r\n`, true, 'chunk data without CRLF');
    case 13: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, 'Transfer-Encoding: gzip, chunked'], `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`, true, 'TE gzip, chunked');
    case 14: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, cl, `Expect: ${clean || '200-ok'}`], body, true, 'an Expect');
    case 15: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, cl, 'Expect: 100-continue'], body, true, '100-continue');
    case 16: return req(`GET /v2/health/ready HTTP/1.1`, [], '', true, 'no Host');
    case 17: return req(`GET /v2/models/${encodeURIComponent(p.text)}/ready HTTP/1.1`, [H], '', true, 'an odd model name');
    case 18: return req(`GET http://x${clean.replace(/[ ]/g, '')}/v2 HTTP/1.1`, [H], '', true, 'an absolute-form target');
    case 19: return req(`POST /v2/models/simple/infer HTTP/1.1`, [H, `X-Ctl: a\u0000b\u007f${clean}`, cl], body, true, 'control characters in a header');
    case 20: return { bytes: Buffer.from(`POST /v2/models/simple/infer HTTP/1.1\r\n${H}\r\nContent-Length: 100\r\n\r\n{"in`, 'latin1'), complete: false, what: 'a body cut short' };
    case 21: return { bytes: Buffer.from(`GET /v2 HTTP/1.1\n${H}\n\n`, 'latin1'), complete: false, what: 'LF-only line ends' };
    case 22: return { bytes: Buffer.from(`\r\n\r\n${clean}\r\n\r\n`, 'latin1'), complete: clean.trim().length > 0, what: 'garbage' };
    default: return req(`GET /v2/models/simple HTTP/1.0`, [], '', true, 'HTTP/1.0');
  }
}

// ---------------------------------------------------------------------------------------------------
// Other HTTP routes, with bodies of any kind.
// ---------------------------------------------------------------------------------------------------

const otherArb = fc.record({ route: fc.nat(20), value: hostile, name: fc.oneof(fc.constantFrom('simple', 'token_streamer', 'nope', '%00', '..', 'a/b'), fc.string({ maxLength: 10 })), method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'HEAD') });

function otherRequest(o: { route: number; value: unknown; name: string; method: string }, models: ModelMeta[]): { method: string; path: string; body?: Buffer } {
  const m = encodeURIComponent(o.name);
  const known = models.length > 0 ? models[o.route % models.length]!.name : 'simple';
  const body = Buffer.from(toJson(o.value));
  const routes: [string, string, Buffer?][] = [
    ['GET', '/v2'], ['GET', '/v2/health/live'], ['GET', '/v2/health/ready'], ['GET', `/v2/models/${m}`], ['GET', `/v2/models/${m}/ready`],
    ['GET', `/v2/models/${m}/config`], ['GET', `/v2/models/${m}/versions/${o.route}/stats`], ['GET', '/v2/models/stats'],
    ['POST', '/v2/repository/index', body], ['POST', `/v2/repository/models/${m}/load`, body], ['POST', `/v2/repository/models/${m}/unload`, body],
    ['POST', `/v2/models/${known}/generate`, body], ['POST', `/v2/models/${known}/generate_stream`, body], ['POST', `/v2/models/${m}/generate`, body],
    ['GET', '/v2/systemsharedmemory/status'], ['POST', `/v2/systemsharedmemory/region/${m}/register`, body], ['POST', '/v2/cudasharedmemory/region/x/register', body],
    ['GET', '/v2/trace/setting'], ['GET', '/v2/logging'], [o.method, `/v2/models/${known}/infer`, body], [o.method, `/v2/${m}`, body],
  ];
  const [method, path, b] = routes[o.route % routes.length]!;
  return { method, path, body: b };
}

// ---------------------------------------------------------------------------------------------------
// Sending and judging.
// ---------------------------------------------------------------------------------------------------

interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Sends raw bytes on a fresh connection and reads one response (skipping 1xx); undefined if none. */
function sendRaw(port: number, bytes: Buffer, waitMs: number): Promise<{ answer?: HttpAnswer; closedEarly: boolean }> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let settled = false;
    const finish = (answer?: HttpAnswer, closedEarly = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ answer, closedEarly });
    };
    const timer = setTimeout(() => finish(undefined), waitMs);
    sock.on('error', () => finish(undefined, true));
    sock.on('close', () => finish(parseAnswer(buf, true), buf.length === 0));
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const a = parseAnswer(buf, false);
      if (a) finish(a);
    });
    sock.on('connect', () => sock.write(bytes));
  });
}

function parseAnswer(buf: Buffer, eof: boolean): HttpAnswer | undefined {
  let start = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', start);
    if (end < 0) return undefined;
    const lines = buf.subarray(start, end).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? NaN);
    if (status >= 100 && status < 200) {
      start = end + 4;
      continue;
    }
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).trim().toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const cl = headers['content-length'];
    if (cl !== undefined) {
      if (buf.length < end + 4 + Number(cl)) return undefined;
      return { status, headers, body: buf.subarray(end + 4, end + 4 + Number(cl)) };
    }
    if (headers['transfer-encoding']) {
      if (!eof && !buf.includes('0\r\n\r\n', end)) return undefined;
      return { status, headers, body: buf.subarray(end + 4) };
    }
    return { status, headers, body: buf.subarray(end + 4) };
  }
}

/** Triton's 503 texts (UNAVAILABLE): a model not ready, model control off, a full or timed-out queue. */
const TRITON_503 = /is not at ready state|not allowed if polling is enabled|Exceeds maximum queue size|Request timeout expired|Server not ready/;
/** A model that fails on input it accepted is Triton's 500 (the backend's INTERNAL), not a protocol error. */
const MODEL_FAILURE = /failed to run model|^\[request id: [^\]]*\] model '/;

/** What is wrong with an HTTP answer, or undefined. 501 (UNSUPPORTED) is Triton's answer where it has one. */
function judgeHttp(a: HttpAnswer | undefined, method: string): string | undefined {
  if (!a) return 'no answer';
  if (!Number.isInteger(a.status)) return 'an unparsable status line';
  const text = a.body.toString();
  if (a.status === 503 && TRITON_503.test(text)) return undefined;
  if (a.status === 500 && MODEL_FAILURE.test(errorOf(text))) return MODEL_FAILED;
  if (a.status >= 500 && a.status !== 501) return `status ${a.status}: ${text.slice(0, 300)}`;
  if (a.status >= 400 && method !== 'HEAD') {
    let j: unknown;
    try {
      j = JSON.parse(a.body.toString());
    } catch {
      return `status ${a.status} with a body that is not JSON: ${JSON.stringify(a.body.toString().slice(0, 200))}`;
    }
    const e = (j as Obj)?.error;
    if (typeof e !== 'string' || e.trim() === '') return `status ${a.status} without an error message: ${a.body.toString().slice(0, 200)}`;
  }
  return undefined;
}

const MODEL_FAILED = 'model failure';
const errorOf = (text: string): string => {
  try {
    return String(JSON.parse(text).error ?? '');
  } catch {
    return '';
  }
};

const BAD_GRPC = new Set([grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.DATA_LOSS]);

function judgeGrpc(err: grpc.ServiceError | null | undefined): string | undefined {
  if (!err) return undefined;
  if (err.code === grpc.status.DEADLINE_EXCEEDED) return 'no answer before the deadline';
  if (err.code === grpc.status.INTERNAL && MODEL_FAILURE.test(err.details)) return MODEL_FAILED;
  if (err.code === grpc.status.UNAVAILABLE && TRITON_503.test(err.details)) return undefined;
  if (BAD_GRPC.has(err.code)) return `${grpc.status[err.code]}: ${err.details}`;
  if (err.code === grpc.status.UNAVAILABLE && /Connection dropped|No connection established|connect/i.test(err.details)) return `the server went away: ${err.details}`;
  if (!err.details || err.details.trim() === '') return `${grpc.status[err.code]} without a message`;
  return undefined;
}

export interface FuzzOptions {
  requests: number;
  seed: number;
  probeEvery: number;
  /**
   * Models left out. By default repeat_int32, whose inputs are sleep durations: a hostile DELAY or
   * WAIT keeps its instance busy for as long as it says (as Triton's repeat backend would), which
   * stalls every later request to it without anything being wrong with the server.
   */
  exclude?: string[];
  /** Print each request as it goes, and those that took over a second. */
  trace?: boolean;
  log?: (line: string) => void;
}

export const DEFAULT_EXCLUDE = ['repeat_int32'];

export interface BadAnswer {
  what: string;
  problem: string;
}

export interface FuzzReport {
  sent: Record<string, number>;
  /** HTTP statuses and gRPC codes seen, by protocol. */
  answers: Record<string, number>;
  bad: BadAnswer[];
  /** Models that failed on input the server had accepted (Triton's 500 / INTERNAL, counted apart). */
  modelFailures: BadAnswer[];
  probes: number;
  /** The longest a single request (or stream) took to be answered, and which. */
  slowestMs: number;
  slowest: string;
  seconds: number;
}

/** Sends `requests` hostile requests at the server behind `http` (a URL) and `grpcAddress`; checks every answer. */
export async function runFuzz(http: string, grpcAddress: string, opts: FuzzOptions): Promise<FuzzReport> {
  const log = opts.log ?? (() => {});
  const port = Number(new URL(http).port);
  const t0 = Date.now();
  const defs = loadProtos().inference;
  const Client = grpc.makeGenericClientConstructor(defs as unknown as grpc.ServiceDefinition, 'GRPCInferenceService');
  const client = new Client(grpcAddress, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 }) as unknown as Obj & grpc.Client;

  // The models as the server describes them.
  const index = (await (await fetch(`${http}/v2/repository/index`, { method: 'POST', body: '{"ready":true}' })).json()) as Obj[];
  const models: ModelMeta[] = [];
  for (const e of index) {
    const md = (await (await fetch(`${http}/v2/models/${encodeURIComponent(e.name)}`)).json()) as Obj;
    if (md.inputs && !(opts.exclude ?? DEFAULT_EXCLUDE).includes(md.name)) models.push({ name: md.name, inputs: md.inputs, outputs: md.outputs });
  }
  log(`fuzz: ${models.length} models (${models.map((m) => m.name).join(', ')}), ${opts.requests} requests, seed ${opts.seed}`);

  const kinds = fc.sample(fc.nat(99), { numRuns: opts.requests, seed: opts.seed });
  const plans = fc.sample(planArb, { numRuns: opts.requests, seed: opts.seed + 1 });
  const raws = fc.sample(rawArb, { numRuns: opts.requests, seed: opts.seed + 2 });
  const others = fc.sample(otherArb, { numRuns: opts.requests, seed: opts.seed + 3 });
  const byteCases = fc.sample(fc.record({ method: fc.constantFrom('ModelInfer', 'ModelInfer', 'ModelMetadata', 'ModelReady', 'ModelConfig', 'ModelStatistics', 'RepositoryIndex', 'ModelStreamInfer'), bytes: fc.uint8Array({ maxLength: 200 }), cut: fc.nat(), flip: fc.nat() }), { numRuns: opts.requests, seed: opts.seed + 4 });

  const sent: Record<string, number> = {};
  const answers: Record<string, number> = {};
  const bad: BadAnswer[] = [];
  const modelFailures: BadAnswer[] = [];
  let probes = 0;
  const count = (r: Record<string, number>, k: string) => (r[k] = (r[k] ?? 0) + 1);
  const flag = (what: string, problem: string | undefined) => {
    if (problem === MODEL_FAILED) modelFailures.push({ what, problem });
    else if (problem) {
      bad.push({ what, problem });
      if (bad.length <= 20) log(`  BAD ${what}: ${problem}`);
    }
  };

  const unary = (method: string, msg: Obj | Buffer, rawBytes: boolean): Promise<grpc.ServiceError | null> => {
    const def = defs[method]!;
    return new Promise((resolve) => {
      const serialize = rawBytes ? (b: Buffer) => b : (def.requestSerialize as (m: Obj) => Buffer);
      client.makeUnaryRequest(def.path, serialize as (m: unknown) => Buffer, def.responseDeserialize as (b: Buffer) => Obj, msg, { deadline: Date.now() + 10_000 }, (err) => resolve(err));
    });
  };
  const stream = (messages: Buffer[]): Promise<{ err: grpc.ServiceError | null; errors: string[] }> => {
    const def = defs.ModelStreamInfer!;
    return new Promise((resolve) => {
      const s = client.makeBidiStreamRequest(def.path, (b: Buffer) => b, def.responseDeserialize as (b: Buffer) => Obj, { deadline: Date.now() + 20_000 });
      const errors: string[] = [];
      s.on('data', (m: Obj) => {
        if (m.error_message !== '') errors.push(m.error_message);
      });
      s.on('error', (err: grpc.ServiceError) => resolve({ err, errors }));
      s.on('end', () => resolve({ err: null, errors }));
      for (const m of messages) s.write(m);
      s.end();
    });
  };
  const encodeOr = (method: string, msg: Obj): Buffer => {
    try {
      return defs[method]!.requestSerialize(msg) as Buffer;
    } catch {
      return Buffer.from(toJson(msg).slice(0, 200));
    }
  };

  /** simple, right over both protocols. */
  const probe = async (i: number) => {
    probes++;
    const a = Array.from({ length: 16 }, (_, k) => ((i * 31 + k * 7) % 1000) - 500);
    const b = Array.from({ length: 16 }, (_, k) => ((i * 17 + k * 3) % 1000) - 500);
    const want0 = a.map((x, k) => x + b[k]!);
    const r = await fetch(`${http}/v2/models/simple/infer`, {
      method: 'POST', body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b }] }),
    }).then(async (res) => ({ status: res.status, body: await res.json() as Obj })).catch((e: Error) => ({ status: 0, body: { error: e.message } as Obj }));
    const got = r.body.outputs?.find((o: Obj) => o.name === 'OUTPUT0')?.data;
    flag(`probe ${probes} over HTTP`, r.status === 200 && JSON.stringify(got) === JSON.stringify(want0) ? undefined : `HTTP ${r.status}: ${JSON.stringify(r.body).slice(0, 200)}`);
    const g = await new Promise<Obj | Error>((resolve) => {
      client.ModelInfer({
        model_name: 'simple', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: ['1', '16'] }, { name: 'INPUT1', datatype: 'INT32', shape: ['1', '16'] }],
        raw_input_contents: [Buffer.from(Int32Array.from(a).buffer), Buffer.from(Int32Array.from(b).buffer)],
      }, (e: Error | null, res: Obj) => resolve(e ?? res));
    });
    const gGot = g instanceof Error ? undefined : Array.from(new Int32Array(new Uint8Array(g.raw_output_contents[0]).buffer));
    flag(`probe ${probes} over gRPC`, gGot && JSON.stringify(gGot) === JSON.stringify(want0) ? undefined : `gRPC: ${g instanceof Error ? g.message : 'wrong answer'}`);
  };

  /**
   * Answers Triton gives exactly, where a hostile request once got another (found by this fuzz):
   * each is sent once and its status compared, not only judged as an error.
   */
  const tritonAnswers = async () => {
    const simpleInputs = [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) }];
    const cls = await sendRaw(port, Buffer.from(((body: string) => `POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)(
      toJson({ inputs: simpleInputs, outputs: [{ name: 'OUTPUT0', parameters: { classification: new BigNum('18446744073709551616') } }] }))), 20_000);
    flag('classification 2^64 over HTTP', cls.answer?.status === 400 ? undefined : `HTTP ${cls.answer?.status ?? 'none'}, Triton answers 400`);
    const version = await unary('ModelInfer', {
      model_name: 'simple', model_version: '-1', inputs: simpleInputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: ['1', '16'] })),
      raw_input_contents: [Buffer.alloc(64), Buffer.alloc(64)],
    }, false);
    flag('gRPC ModelInfer model_version "-1"', version?.code === grpc.status.INVALID_ARGUMENT ? undefined : `${version ? grpc.status[version.code] : 'OK'}, Triton answers INVALID_ARGUMENT`);
    const ready = await new Promise<Obj | Error>((resolve) => client.ModelReady({ name: 'no_such_model', version: '' }, (e: Error | null, r: Obj) => resolve(e ?? r)));
    flag('gRPC ModelReady of an unknown model', !(ready instanceof Error) && ready.ready === false ? undefined : `${ready instanceof Error ? ready.message : JSON.stringify(ready)}, Triton answers OK with ready=false`);
  };
  await tritonAnswers();

  let slowest = { ms: 0, what: '' };
  for (let i = 0; i < opts.requests; i++) {
    if (i % opts.probeEvery === 0) await probe(i);
    const k = kinds[i]!;
    const started = Date.now();
    if (opts.trace) log(`  #${i} kind ${k} ${k < 40 || (k >= 60 && k < 88) ? draft(models, plans[i]!).model : ''} ${JSON.stringify(plans[i]!.mutations.map((m) => m.kind))} ${plans[i]!.twists}`);
    if (k < 40) {
      // Structured infer over HTTP.
      const d = draft(models, plans[i]!);
      const r = httpRequest(d);
      const head = `POST ${r.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${r.body.byteLength}\r\n${Object.entries(r.headers).map(([h, v]) => `${h}: ${v}\r\n`).join('')}Connection: close\r\n\r\n`;
      const { answer } = await sendRaw(port, Buffer.concat([Buffer.from(head, 'latin1'), r.body]), 20_000);
      count(sent, 'http infer');
      count(answers, `http ${answer?.status ?? 'none'}`);
      flag(`http infer #${i} (${d.model}: ${plans[i]!.mutations.map((m) => m.kind).join(', ') || 'valid'}; ${d.twists.join(', ')})`, judgeHttp(answer, 'POST'));
    } else if (k < 50) {
      const o = otherRequest(others[i]!, models);
      const head = `${o.method} ${o.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${o.body?.byteLength ?? 0}\r\nConnection: close\r\n\r\n`;
      const { answer } = await sendRaw(port, Buffer.concat([Buffer.from(head, 'latin1'), o.body ?? Buffer.alloc(0)]), 20_000);
      count(sent, 'http other');
      count(answers, `http ${answer?.status ?? 'none'}`);
      flag(`http ${o.method} ${o.path} #${i}`, judgeHttp(answer, o.method));
    } else if (k < 60) {
      const c = rawCase(raws[i]!);
      const { answer, closedEarly } = await sendRaw(port, c.bytes, c.complete ? 5000 : 300);
      count(sent, 'http/1.1 raw');
      count(answers, `http ${answer?.status ?? 'none'}`);
      if (c.complete || answer) flag(`http/1.1 raw #${i} (${c.what})`, answer ? judgeHttp(answer, 'GET') : closedEarly ? 'closed without an answer' : 'no answer');
    } else if (k < 88) {
      const d = draft(models, plans[i]!);
      const msg = grpcRequest(d);
      const err = await unary('ModelInfer', encodeOr('ModelInfer', msg), true);
      count(sent, 'grpc infer');
      count(answers, `grpc ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc infer #${i} (${d.model}: ${plans[i]!.mutations.map((m) => m.kind).join(', ') || 'valid'}; ${d.twists.join(', ')})`, judgeGrpc(err));
    } else if (k < 95) {
      const bc = byteCases[i]!;
      // Random bytes, or a real message cut short or with a byte flipped.
      let bytes: Buffer = Buffer.from(bc.bytes);
      if (bc.flip % 3 !== 0) {
        const real = encodeOr('ModelInfer', grpcRequest(draft(models, plans[i]!)));
        bytes = bc.flip % 3 === 1 ? real.subarray(0, bc.cut % Math.max(1, real.length)) : Buffer.from(real);
        if (bc.flip % 3 === 2 && bytes.length > 0) bytes[bc.cut % bytes.length] ^= 1 << (bc.flip % 8);
      }
      let err: grpc.ServiceError | null;
      if (bc.method === 'ModelStreamInfer') err = (await stream([bytes])).err;
      else err = await unary(bc.method, bytes, true);
      count(sent, 'grpc bytes');
      count(answers, `grpc ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc bytes to ${bc.method} #${i}`, judgeGrpc(err));
    } else {
      const n = 1 + (i % 5);
      const msgs = Array.from({ length: n }, (_, j) => encodeOr('ModelStreamInfer', grpcRequest(draft(models, plans[(i + j * 7919) % plans.length]!))));
      const { err, errors } = await stream(msgs);
      count(sent, 'grpc stream');
      count(answers, `grpc stream ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc stream of ${n} #${i}`, judgeGrpc(err) ?? (errors.some((e) => e.trim() === '') ? 'an empty error_message' : undefined));
    }
    const took = Date.now() - started;
    if (took > slowest.ms) slowest = { ms: took, what: `#${i} (kind ${k})` };
    if (opts.trace && took > 1000) log(`  SLOW #${i}: ${took} ms`);
    if ((i + 1) % 1000 === 0) log(`  ${i + 1} requests, ${bad.length} bad, ${Math.round((Date.now() - t0) / 1000)} s`);
  }
  await probe(opts.requests);
  client.close();
  return { sent, answers, bad, modelFailures, probes, slowestMs: slowest.ms, slowest: slowest.what, seconds: Math.round((Date.now() - t0) / 100) / 10 };
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      requests: { type: 'string', default: '10000' },
      seed: { type: 'string', default: '1' },
      'probe-every': { type: 'string', default: '200' },
      http: { type: 'string' },
      grpc: { type: 'string' },
      exclude: { type: 'string', default: DEFAULT_EXCLUDE.join(',') },
      trace: { type: 'boolean', default: false },
    },
  });
  const { spawnServer } = await import('./soak.js');
  const server = a.http ? undefined : await spawnServer();
  const http = a.http ?? server!.http;
  const grpcAddress = a.grpc ?? server?.grpc ?? '127.0.0.1:8001';
  const rssStart = server ? await server.rss() : 0;
  let report: FuzzReport;
  try {
    report = await runFuzz(http, grpcAddress, {
      requests: Number(a.requests), seed: Number(a.seed), probeEvery: Number(a['probe-every']), log: (l) => console.log(l),
      exclude: a.exclude ? a.exclude.split(',') : [], trace: a.trace,
    });
  } finally {
    if (server) {
      const rss = await server.rss();
      console.log(`server RSS: ${Math.round(rssStart / 1048576)} MiB at start, ${Math.round(rss / 1048576)} MiB at the end`);
      await server.stop();
    }
  }
  console.log(`sent: ${JSON.stringify(report.sent)}`);
  console.log(`answers: ${JSON.stringify(report.answers)}`);
  console.log(`probes: ${report.probes} (every ${a['probe-every']} requests, HTTP and gRPC each); slowest answer ${report.slowestMs} ms (${report.slowest})`);
  console.log(`model failures on accepted input (Triton's 500/INTERNAL, not counted as bad): ${report.modelFailures.length}`);
  for (const b of report.modelFailures.slice(0, 5)) console.log(`  ${b.what}`);
  console.log(`${Object.values(report.sent).reduce((x, y) => x + y, 0)} requests in ${report.seconds} s: ${report.bad.length} bad answers`);
  for (const b of report.bad.slice(0, 50)) console.log(`  ${b.what}: ${b.problem}`);
  process.exitCode = report.bad.length > 0 ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
