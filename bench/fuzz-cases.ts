/**
 * The cases of the hostile-client fuzz (bench/fuzz.ts), as fast-check arbitraries and the functions
 * that turn a sampled plan into bytes: values where something else belongs (JSON nested ten thousand
 * deep, integers past a double, wrong types) and a JSON writer for them; a request drafted valid for
 * one of the server's models and then mutated (its parameters, shapes, datatypes, data and framing);
 * the draft as an HTTP request or a gRPC ModelInferRequest; raw HTTP/1.1 heads no client library would
 * write; and the other HTTP routes with bodies of any kind.
 */

import { gzipSync } from 'node:zlib';
import fc from 'fast-check';

type Obj = Record<string, any>;

// ---------------------------------------------------------------------------------------------------
// Values where something else belongs, and a JSON writer for them.
// ---------------------------------------------------------------------------------------------------

/** JSON nested `depth` arrays (or objects) deep, written as text: no JavaScript value that deep exists here. */
class Deep {
  constructor(readonly depth: number, readonly objects: boolean, readonly inner: unknown = 1) {}
}
/** An integer past what a double holds, written as its digits. */
export class BigNum {
  constructor(readonly digits: string) {}
}

export function toJson(v: unknown): string {
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
export interface ModelMeta {
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

export const rawArb: fc.Arbitrary<{ kind: number; n: number; text: string }> = fc.record({ kind: fc.nat(23), n: fc.nat(40_000), text: fc.string({ maxLength: 30, unit: 'binary-ascii' }) });

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

export const otherArb = fc.record({ route: fc.nat(20), value: hostile, name: fc.oneof(fc.constantFrom('simple', 'token_streamer', 'nope', '%00', '..', 'a/b'), fc.string({ maxLength: 10 })), method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'HEAD') });

export function otherRequest(o: { route: number; value: unknown; name: string; method: string }, models: ModelMeta[]): { method: string; path: string; body?: Buffer } {
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
