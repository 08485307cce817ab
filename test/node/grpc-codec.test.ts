/**
 * The hand-written protobuf codec of gRPC's inference path (runtime-node/grpc/wire-reader.ts, wire-writer.ts). Unit level:
 * for any ModelInferRequest protobufjs writes, the reader reads what protobufjs itself reads (fields,
 * int64s of any size, every typed list, raw contents), also from unaligned and unpacked encodings; for
 * any response, protobufjs reads back exactly what the writer was given. End to end, through a real
 * server and a grpc-js client: every datatype round-trips in raw and in typed contents (FP16 raw only),
 * large tensors both ways, and the same over ModelStreamInfer, errors included.
 */

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InferResponse, Parameters } from '../../core/index.js';
import { loadProtos } from '../../runtime-node/grpc/server.js';
import { decodeInferRequest as decodeGrpcRequest } from '../../runtime-node/grpc/codec.js';
import { firstRawContentsAt, readModelInferRequest } from '../../runtime-node/grpc/wire-reader.js';
import { grpcFrameOf, writeModelInferResponse, writeModelInferResponseFrame, writeModelStreamInferResponse } from '../../runtime-node/grpc/wire-writer.js';
import { GraphBuilder } from '../../graph/onnx-builder.js';
import { ONNX_ELEM_TYPE, identityModel, type Datatype } from '../../scripts/gen-models.js';
import { grpcClient, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const protos = loadProtos().inference;
const serialize = (m: Obj) => protos.ModelInfer!.requestSerialize(m) as Buffer;
const protobufjsRead = (b: Buffer) => protos.ModelInfer!.requestDeserialize(b) as Obj;
const readResponse = (b: Buffer) => protos.ModelInfer!.responseDeserialize(b) as Obj;
const readStreamResponse = (b: Buffer) => protos.ModelStreamInfer!.responseDeserialize(b) as Obj;

const LISTS = ['bool_contents', 'int_contents', 'int64_contents', 'uint_contents', 'uint64_contents', 'fp32_contents', 'fp64_contents'];

/** One message as comparable strings, whichever reader produced it. */
function norm(m: Obj): unknown {
  const param = (p: Obj | null) => (p?.parameter_choice ? `${p.parameter_choice}:${String(p[p.parameter_choice])}` : 'unset');
  const params = (ps: Obj | null) => Object.fromEntries(Object.entries(ps ?? {}).map(([k, v]) => [k, param(v as Obj)]));
  const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
  const contents = (c: Obj | null) => c && {
    ...Object.fromEntries(LISTS.map((k) => [k, Array.from((c[k] ?? []) as ArrayLike<unknown>, (x) => String(typeof x === 'boolean' ? Number(x) : x))])),
    bytes_contents: ((c.bytes_contents ?? []) as Buffer[]).map(hex),
  };
  return {
    model_name: m.model_name, model_version: m.model_version, id: m.id, parameters: params(m.parameters),
    inputs: (m.inputs as Obj[]).map((i) => ({
      name: i.name, datatype: i.datatype, shape: (i.shape as unknown[]).map(Number), parameters: params(i.parameters), contents: contents(i.contents),
    })),
    outputs: (m.outputs as Obj[]).map((o) => ({ name: o.name, parameters: params(o.parameters) })),
    raw: (m.raw_input_contents as Buffer[]).map(hex),
  };
}

const int64 = fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String);
const uint64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map(String);
const param = fc.oneof(
  fc.boolean().map((b) => ({ bool_param: b })),
  int64.map((n) => ({ int64_param: n })),
  uint64.map((n) => ({ uint64_param: n })),
  fc.double().map((d) => ({ double_param: d })),
  fc.string({ maxLength: 10 }).map((s) => ({ string_param: s })),
);
const params = fc.dictionary(fc.string({ maxLength: 6 }), param, { maxKeys: 3 });
const message = fc.record({
  model_name: fc.string({ maxLength: 6 }),
  model_version: fc.string({ maxLength: 2 }),
  id: fc.string({ maxLength: 6 }),
  parameters: params,
  inputs: fc.array(fc.record({
    name: fc.string({ maxLength: 4 }),
    datatype: fc.constantFrom('INT32', 'BYTES', 'FP32', 'FP16', 'BOOL', 'UINT64'),
    shape: fc.array(int64, { maxLength: 3 }),
    parameters: params,
    contents: fc.option(fc.record({
      bool_contents: fc.array(fc.boolean(), { maxLength: 4 }),
      int_contents: fc.array(fc.integer(), { maxLength: 6 }),
      int64_contents: fc.array(int64, { maxLength: 3 }),
      uint_contents: fc.array(fc.nat({ max: 2 ** 32 - 1 }), { maxLength: 3 }),
      uint64_contents: fc.array(uint64, { maxLength: 3 }),
      fp32_contents: fc.array(fc.float(), { maxLength: 5 }),
      fp64_contents: fc.array(fc.double(), { maxLength: 3 }),
      bytes_contents: fc.array(fc.uint8Array({ maxLength: 4 }).map((b) => Buffer.from(b)), { maxLength: 3 }),
    }, { requiredKeys: [] }), { nil: null }),
  }), { maxLength: 3 }),
  outputs: fc.array(fc.record({ name: fc.string({ maxLength: 3 }), parameters: params }), { maxLength: 2 }),
  raw_input_contents: fc.array(fc.uint8Array({ maxLength: 24 }).map((b) => Buffer.from(b)), { maxLength: 3 }),
});

describe('the request reader', () => {
  it('reads any message as protobufjs does, at any alignment', () => {
    fc.assert(fc.property(message, fc.nat(7), (m, shift) => {
      const bytes = serialize(m);
      // The same bytes at another offset of a bigger buffer: packed floats are then views or copies.
      const shifted = Buffer.alloc(bytes.byteLength + shift);
      bytes.copy(shifted, shift);
      expect(norm(readModelInferRequest(shifted.subarray(shift)))).toEqual(norm(protobufjsRead(bytes)));
    }), { numRuns: NUM_RUNS });
  });

  it('reads unpacked repeated scalars, and several packed runs of one list, as one list', () => {
    const tag = (field: number, wire: number) => (field << 3) | wire;
    const f32 = (x: number) => {
      const b = Buffer.alloc(4);
      b.writeFloatLE(x);
      return [...b];
    };
    const contents = [
      tag(6, 5), ...f32(1.5), tag(6, 2), 8, ...f32(2.5), ...f32(-3), // fp32: one loose, then a packed run of two
      tag(2, 0), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // int_contents -1 (sign-extended)
      tag(2, 0), 5,
    ];
    const input = [tag(1, 2), 1, 0x78, tag(3, 0), 2, tag(3, 0), 3, tag(5, 2), contents.length, ...contents];
    const msg = readModelInferRequest(Buffer.from([tag(5, 2), input.length, ...input]));
    const io = msg.inputs[0];
    expect(io.name).toBe('x');
    expect(io.shape).toEqual([2, 3]);
    expect(Array.from(io.contents.fp32_contents)).toEqual([1.5, 2.5, -3]);
    expect(io.contents.fp32_contents).toBeInstanceOf(Float32Array);
    expect(Array.from(io.contents.int_contents)).toEqual([-1, 5]);
  });

  it('finds where the first raw contents start, in any message and in any prefix of it', () => {
    fc.assert(fc.property(message, (m) => {
      const bytes = serialize(m);
      const raws = readModelInferRequest(bytes).raw_input_contents as Buffer[];
      const at = firstRawContentsAt(bytes);
      expect(at).toBe(raws.length > 0 ? raws[0]!.byteOffset - bytes.byteOffset : undefined);
      // A prefix (the first DATA chunk of a request) knows it only when it reaches that far.
      for (const cut of [0, 1, Math.floor(bytes.byteLength / 2), bytes.byteLength - 1]) {
        const got = firstRawContentsAt(bytes.subarray(0, Math.max(0, cut)));
        if (got !== undefined) expect(got).toBe(at);
      }
    }), { numRuns: NUM_RUNS });
  });

  it('keeps parameter keys named like what every object inherits as the client\'s own entries', () => {
    const parameters = JSON.parse('{"__proto__":{"string_param":"p"},"toString":{"int64_param":"7"},"constructor":{"bool_param":true}}');
    const bytes = serialize({
      model_name: 'm', parameters,
      inputs: [{ name: 'I', datatype: 'INT32', shape: [1], parameters: JSON.parse('{"__proto__":{"string_param":"q"}}'), contents: { int_contents: [3] } }],
    });
    const msg = readModelInferRequest(bytes);
    expect(Object.keys(msg.parameters)).toEqual(['__proto__', 'toString', 'constructor']);
    expect(Object.getPrototypeOf(msg.parameters)).toBe(Object.prototype);
    const { request } = decodeGrpcRequest(msg);
    expect(Object.entries(request.parameters!)).toEqual([['__proto__', 'p'], ['toString', 7], ['constructor', true]]);
    expect(Object.entries(request.inputs[0]!.parameters!)).toEqual([['__proto__', 'q']]);
  });

  it('keeps raw contents as views of the message, and refuses malformed bytes with a reason', () => {
    const bytes = serialize({ model_name: 'm', raw_input_contents: [Buffer.from([1, 2, 3])] });
    const raw = readModelInferRequest(bytes).raw_input_contents[0] as Buffer;
    expect(raw.buffer).toBe(bytes.buffer);
    bytes[bytes.byteLength - 1] = 9;
    expect(raw[2]).toBe(9);
    expect(() => readModelInferRequest(bytes.subarray(0, bytes.byteLength - 1))).toThrow(/runs past the end/);
    expect(() => readModelInferRequest(Buffer.from([0x0b]))).toThrow(/wire type 3/);
    expect(() => readModelInferRequest(Buffer.from([0x08, 1]))).toThrow(/'model_name' has wire type 0, expected 2/);
  });
});

const DATATYPES: Datatype[] = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES'];

const paramValue = fc.oneof(fc.boolean(), fc.string({ maxLength: 8 }), fc.integer(), fc.double({ noInteger: true }),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).filter((b) => b < -(2n ** 53n) || b > 2n ** 53n));
const tensorOut = fc.record({
  name: fc.string({ maxLength: 5 }),
  datatype: fc.constantFrom('INT32', 'FP32', 'BYTES'),
  shape: fc.array(fc.nat({ max: 2 ** 40 }), { maxLength: 3 }),
  data: fc.uint8Array({ maxLength: 40 }),
  parameters: fc.option(fc.dictionary(fc.string({ maxLength: 4 }), paramValue, { maxKeys: 2 }), { nil: undefined }),
});
const response = fc.record({
  model_name: fc.string({ maxLength: 6 }), model_version: fc.string({ maxLength: 2 }), id: fc.option(fc.string({ maxLength: 5 }), { nil: undefined }),
  parameters: fc.option(fc.dictionary(fc.string({ maxLength: 4 }), paramValue, { maxKeys: 3 }), { nil: undefined }),
  outputs: fc.array(tensorOut, { maxLength: 3 }),
});

/** What protobufjs should read back from a written response. */
function expected(r: { model_name: string; model_version: string; id?: string; parameters?: Parameters; outputs: any[] }, inShm: Set<string>) {
  const p = (ps?: Parameters) => Object.fromEntries(Object.entries(ps ?? {}).map(([k, v]) => [k,
    typeof v === 'boolean' ? `bool_param:${v}` : typeof v === 'string' ? `string_param:${v}`
      : typeof v === 'bigint' || Number.isInteger(v) ? `int64_param:${BigInt(v)}` : `double_param:${v}`]));
  return {
    model_name: r.model_name, model_version: r.model_version, id: r.id ?? '', parameters: p(r.parameters),
    outputs: r.outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(String), parameters: p(t.parameters) })),
    raw: r.outputs.map((t) => (inShm.has(t.name) ? '' : Buffer.from(t.data).toString('hex'))),
  };
}
function got(m: Obj) {
  const p = (ps: Obj) => Object.fromEntries(Object.entries(ps).map(([k, v]) => [k, `${(v as Obj).parameter_choice}:${(v as Obj)[(v as Obj).parameter_choice]}`]));
  return {
    model_name: m.model_name, model_version: m.model_version, id: m.id, parameters: p(m.parameters),
    outputs: (m.outputs as Obj[]).map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape, parameters: p(o.parameters) })),
    raw: (m.raw_output_contents as Buffer[]).map((b) => b.toString('hex')),
  };
}

describe('the response writer', () => {
  it('writes what protobufjs reads back, unary and streamed, with outputs left to shared memory', () => {
    fc.assert(fc.property(response, fc.boolean(), fc.string({ maxLength: 9 }), (r, shm, err) => {
      const inShm = new Set(shm && r.outputs[0] ? [r.outputs[0].name] : []);
      const resp = r as unknown as InferResponse;
      expect(got(readResponse(writeModelInferResponse(resp, inShm)))).toEqual(expected(r, inShm));
      const s = readStreamResponse(writeModelStreamInferResponse(resp, err, inShm, { triton_final_response: true }));
      expect(s.error_message).toBe(err);
      expect(got(s.infer_response)).toEqual(expected({ ...r, parameters: { ...r.parameters, triton_final_response: true } }, inShm));
    }), { numRuns: NUM_RUNS });
  });

  it('writes the same frame in pieces, large outputs as the tensors\' own bytes', () => {
    fc.assert(fc.property(response, fc.nat(3), (r, bigAt) => {
      const outputs = [...r.outputs] as any[];
      // One output past the size that is viewed rather than copied (64 KiB), among the others.
      const big = new Uint8Array(70_000).map((_, i) => i % 251);
      outputs.splice(Math.min(bigAt, outputs.length), 0, { name: 'big', datatype: 'UINT8', shape: [big.length], data: big });
      for (const resp of [r, { ...r, outputs }] as unknown as InferResponse[]) {
        const whole = grpcFrameOf(writeModelInferResponse(resp))!;
        const pieces = writeModelInferResponseFrame(resp);
        expect(Buffer.concat(pieces).equals(whole)).toBe(true);
        expect(pieces.length).toBe(resp.outputs.length > r.outputs.length ? (bigAt >= r.outputs.length ? 2 : 3) : 1);
        if (pieces.length > 1) expect(pieces[1]!.buffer).toBe(big.buffer);
      }
    }), { numRuns: NUM_RUNS });
  });
});

// ---------------------------------------------------------------------------------------------
// Through a real server
// ---------------------------------------------------------------------------------------------

const TYPED: Exclude<Datatype, 'FP16'>[] = DATATYPES.filter((d): d is Exclude<Datatype, 'FP16'> => d !== 'FP16');
const CONFIG_TYPE = (d: Datatype) => (d === 'BYTES' ? 'TYPE_STRING' : `TYPE_${d}`);

/** One Identity per datatype: `IN_<dt>` → `OUT_<dt>`, shape [3]. */
function everyTypeModel(): Uint8Array {
  const g = new GraphBuilder('every_type');
  for (const d of TYPED) {
    g.op('Identity', [g.input(`IN_${d}`, ONNX_ELEM_TYPE[d], [3])], undefined, `OUT_${d}`);
    g.output(`OUT_${d}`, ONNX_ELEM_TYPE[d], [3]);
  }
  return g.encode();
}

const VALUES: Record<Exclude<Datatype, 'FP16'>, { raw: Uint8Array | Buffer[]; typed: Obj }> = (() => {
  const b = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  // onnxruntime-node holds strings as JS strings: valid UTF-8 is what survives a model.
  const strings = [Buffer.from(''), Buffer.from('héllo'), Buffer.from('日本\t')];
  return {
    BOOL: { raw: Uint8Array.of(1, 0, 1), typed: { bool_contents: [true, false, true] } },
    UINT8: { raw: Uint8Array.of(0, 255, 7), typed: { uint_contents: [0, 255, 7] } },
    UINT16: { raw: b(Uint16Array.of(0, 65535, 9)), typed: { uint_contents: [0, 65535, 9] } },
    UINT32: { raw: b(Uint32Array.of(0, 4294967295, 5)), typed: { uint_contents: [0, 4294967295, 5] } },
    UINT64: { raw: b(BigUint64Array.of(0n, 2n ** 64n - 1n, 3n)), typed: { uint64_contents: ['0', String(2n ** 64n - 1n), '3'] } },
    INT8: { raw: b(Int8Array.of(-128, 127, 0)), typed: { int_contents: [-128, 127, 0] } },
    INT16: { raw: b(Int16Array.of(-32768, 32767, 1)), typed: { int_contents: [-32768, 32767, 1] } },
    INT32: { raw: b(Int32Array.of(-(2 ** 31), 2 ** 31 - 1, 2)), typed: { int_contents: [-(2 ** 31), 2 ** 31 - 1, 2] } },
    INT64: { raw: b(BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, -1n)), typed: { int64_contents: [String(-(2n ** 63n)), String(2n ** 63n - 1n), '-1'] } },
    FP32: { raw: b(Float32Array.of(1.5, -0, 3.4e38)), typed: { fp32_contents: [1.5, -0, 3.4e38] } },
    FP64: { raw: b(Float64Array.of(Math.PI, -1e300, 5e-324)), typed: { fp64_contents: [Math.PI, -1e300, 5e-324] } },
    BYTES: { raw: strings, typed: { bytes_contents: strings } },
  };
})();

/** BYTES on the wire: 4-byte little-endian lengths before each element. */
const framed = (v: Uint8Array | Buffer[]) => (Array.isArray(v)
  ? Buffer.concat(v.flatMap((e) => [Buffer.from(Uint32Array.of(e.byteLength).buffer), e]))
  : Buffer.from(v));

function everyTypeRequest(typed: boolean): Obj {
  return {
    model_name: 'every_type', id: typed ? 'typed' : 'raw',
    inputs: TYPED.map((d) => ({ name: `IN_${d}`, datatype: d, shape: ['3'], ...(typed ? { contents: VALUES[d].typed } : {}) })),
    ...(typed ? {} : { raw_input_contents: TYPED.map((d) => framed(VALUES[d].raw)) }),
  };
}

function checkEveryType(res: Obj, id: string): void {
  expect(res.id).toBe(id);
  const byName = new Map((res.outputs as Obj[]).map((o, i) => [o.name, { o, raw: res.raw_output_contents[i] as Buffer }]));
  for (const d of TYPED) {
    const out = byName.get(`OUT_${d}`)!;
    expect(out.o.datatype, d).toBe(d);
    expect(out.o.shape, d).toEqual(['3']);
    expect(out.raw.toString('hex'), d).toBe(framed(VALUES[d].raw).toString('hex'));
  }
}

let s: TestServer;
let c: GrpcTestClient;
let repo: ReturnType<typeof tempRepo>;
const fp16 = Buffer.from(Uint16Array.of(0x3c00, 0xc000, 0x7bff, 0x0001).buffer);

beforeAll(async () => {
  const types = TYPED.map((d) => `{ name: "IN_${d}" data_type: ${CONFIG_TYPE(d)} dims: [ 3 ] }`).join(', ');
  const outs = TYPED.map((d) => `{ name: "OUT_${d}" data_type: ${CONFIG_TYPE(d)} dims: [ 3 ] }`).join(', ');
  repo = tempRepo({
    'every_type/config.pbtxt': `name: "every_type"\nbackend: "onnxruntime"\ninput [${types}]\noutput [${outs}]\n`,
    'every_type/1/model.onnx': everyTypeModel(),
    'id_fp16/config.pbtxt': 'name: "id_fp16"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP16 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP16 dims: [ -1 ] }]\n',
    'id_fp16/1/model.onnx': identityModel('FP16', { batch: false }),
    'id_fp32/config.pbtxt': 'name: "id_fp32"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n',
    'id_fp32/1/model.onnx': identityModel('FP32', { batch: false }),
  });
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
}, 60_000);

afterAll(async () => {
  c?.close();
  await s?.stop();
  repo?.cleanup();
});

describe('every datatype through a real server', () => {
  it('round-trips in raw contents and in typed contents', async () => {
    checkEveryType(await c.call('ModelInfer', everyTypeRequest(false)), 'raw');
    checkEveryType(await c.call('ModelInfer', everyTypeRequest(true)), 'typed');
  });

  it('round-trips FP16 in raw contents, and refuses it in typed contents', async () => {
    const res = await c.call('ModelInfer', { model_name: 'id_fp16', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: ['4'] }], raw_input_contents: [fp16] });
    expect(res.outputs[0].datatype).toBe('FP16');
    expect((res.raw_output_contents[0] as Buffer).equals(fp16)).toBe(true);
    await expect(c.call('ModelInfer', { model_name: 'id_fp16', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: ['1'], contents: { fp32_contents: [1] } }] }))
      .rejects.toMatchObject({ code: 3, details: expect.stringMatching(/of type 'FP32', expected datatype 'FP16'/) });
  });

  it('carries large tensors both ways, raw and typed', async () => {
    const n = 4 * 1024 * 1024;
    const big = new Float32Array(n);
    for (let i = 0; i < n; i += 997) big[i] = i / 3;
    const raw = Buffer.from(big.buffer);
    const res = await c.call('ModelInfer', { model_name: 'id_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [String(n)] }], raw_input_contents: [raw] });
    expect(res.outputs[0].shape).toEqual([String(n)]);
    expect((res.raw_output_contents[0] as Buffer).equals(raw)).toBe(true);
    const m = 1 << 18;
    const typed = await c.call('ModelInfer', { model_name: 'id_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [String(m)], contents: { fp32_contents: Array.from(big.subarray(0, m)) } }] });
    expect((typed.raw_output_contents[0] as Buffer).equals(raw.subarray(0, 4 * m))).toBe(true);
  }, 60_000);

  it('streams every datatype, FP16 and a large tensor in order, with an error answered in place', async () => {
    const big = Buffer.from(new Float32Array(1 << 20).fill(0.25).buffer);
    const out = await streamAll(c, [
      everyTypeRequest(false),
      { model_name: 'nope', id: 'lost', inputs: [] },
      everyTypeRequest(true),
      { model_name: 'id_fp16', id: 'half', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: ['4'] }], raw_input_contents: [fp16] },
      { model_name: 'id_fp32', id: 'big', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [String(1 << 20)] }], raw_input_contents: [big] },
    ]);
    expect(out).toHaveLength(5);
    const byId = new Map(out.map((m) => [m.infer_response.id, m]));
    checkEveryType(byId.get('raw')!.infer_response, 'raw');
    checkEveryType(byId.get('typed')!.infer_response, 'typed');
    expect(byId.get('lost')!.error_message).toMatch(/nope/);
    expect(byId.get('lost')!.infer_response.model_name).toBe('nope');
    expect((byId.get('half')!.infer_response.raw_output_contents[0] as Buffer).equals(fp16)).toBe(true);
    expect((byId.get('big')!.infer_response.raw_output_contents[0] as Buffer).equals(big)).toBe(true);
    for (const m of out) if (m.infer_response.id !== 'lost') expect(m.error_message).toBe('');
  }, 60_000);
});
