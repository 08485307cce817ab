/**
 * JSON tensor data written and read without per-element overhead (issue #20) must stay byte for byte
 * what the plain way gives: jsonDataText (chunked formatting) against JSON.stringify of the values,
 * encodeInferResponse's pieces against JSON.stringify of the whole response object, and
 * fromJsonValues's flat fast path against the same values flattened, with its errors naming the
 * element. fast-check drives values across float32 and float64 edges (-0, subnormals, NaN, ±Infinity,
 * the 1e21 and 1e-7 switches to exponent notation) and sizes across the chunk boundary.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stringifyJson } from '../../core/protocol/json-exact.js';
import { fromJsonValues, jsonDataText, toJsonValues } from '../../core/tensor.js';
import type { DataType, InferResponse, NumericArray, Parameters, TensorData } from '../../core/types.js';
import { bodyBytes, encodeInferResponse, type OutputEncoding } from '../../core/protocol/v2-codec.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 100);

/** Where JavaScript's Number→string changes form, and float32's own edges. */
const EDGES = [
  0, -0, 1, -1, 0.1, 1e21, -1e21, 1e21 - 65536, 999999999999999900000, 1e-7, 1.0000000000000001e-7, 9.999999999999999e-7, 1e-6,
  5e-324, -5e-324, 2.2250738585072014e-308, Number.MAX_VALUE, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2,
  NaN, Infinity, -Infinity, 1.401298464324817e-45, 1.1754942106924411e-38, 1.1754943508222875e-38, 3.4028234663852886e38,
  16777216, 16777217, 4294967295, -2147483648,
];
const float64 = fc.oneof(fc.double(), fc.constantFrom(...EDGES), fc.integer().map((i) => i * 1e15));
const float32 = fc.oneof(fc.float(), fc.constantFrom(...EDGES.map(Math.fround)), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }).map((b) => new Float32Array(new Int32Array([b]).buffer)[0]!));
/** A length that is often 0, small, or just around a multiple of the 4096-element chunk. */
const length = fc.oneof(fc.nat({ max: 40 }), fc.constantFrom(4095, 4096, 4097, 8191, 8192, 8193, 12289));

/** An array of `n` values, drawn a few at a time and repeated (big arrays without drawing each element). */
function sized<T>(value: fc.Arbitrary<T>): fc.Arbitrary<T[]> {
  return fc.tuple(length, fc.array(value, { minLength: 1, maxLength: 64 })).map(([n, pool]) => Array.from({ length: n }, (_, i) => pool[(i * 7 + (i >> 5)) % pool.length]!));
}

const INT_TYPES: [DataType, (v: number[]) => NumericArray, fc.Arbitrary<number>][] = [
  ['INT8', (v) => Int8Array.from(v), fc.integer({ min: -128, max: 127 })],
  ['UINT8', (v) => Uint8Array.from(v), fc.integer({ min: 0, max: 255 })],
  ['INT16', (v) => Int16Array.from(v), fc.integer({ min: -32768, max: 32767 })],
  ['UINT16', (v) => Uint16Array.from(v), fc.integer({ min: 0, max: 65535 })],
  ['INT32', (v) => Int32Array.from(v), fc.integer()],
  ['UINT32', (v) => Uint32Array.from(v), fc.integer({ min: 0, max: 4294967295 })],
];

// NaN and the infinities as Triton writes them (NaN, Infinity, -Infinity), where JSON.stringify writes null.
const MARK = '\u0000';
const marked = (v: unknown): unknown => (typeof v === 'number' && !Number.isFinite(v) ? `${MARK}${Number.isNaN(v) ? 'NaN' : v > 0 ? 'Infinity' : '-Infinity'}${MARK}` : v);
const unmark = (text: string): string => text.replace(/"\\u0000(NaN|-?Infinity)\\u0000"/g, '$1');
const plain = (dt: DataType, data: TensorData) => {
  const values = toJsonValues(dt, data);
  return Array.isArray(values) && (dt === 'FP32' || dt === 'FP64') ? unmark(stringifyJson(values.map(marked))) : stringifyJson(values);
};

describe('JSON tensor data: written by chunks, byte for byte JSON.stringify', () => {
  it('FP32 and FP64', () => {
    fc.assert(fc.property(sized(float32), sized(float64), (a, b) => {
      const f32 = Float32Array.from(a);
      expect(jsonDataText('FP32', f32).join('')).toBe(plain('FP32', f32));
      const f64 = Float64Array.from(b);
      expect(jsonDataText('FP64', f64).join('')).toBe(plain('FP64', f64));
    }), { numRuns: NUM_RUNS });
  });

  it('every integer type, 64-bit ones exact', () => {
    const ints = fc.constantFrom(...INT_TYPES).chain(([dt, make, arb]) => sized(arb).map((v) => [dt, make(v)] as const));
    fc.assert(fc.property(ints, sized(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })), ([dt, data], big) => {
      expect(jsonDataText(dt, data).join('')).toBe(plain(dt, data));
      const i64 = BigInt64Array.from(big);
      expect(jsonDataText('INT64', i64).join('')).toBe(plain('INT64', i64));
      const u64 = BigUint64Array.from(big, (v) => (v < 0n ? -v : v));
      expect(jsonDataText('UINT64', u64).join('')).toBe(plain('UINT64', u64));
      // The decimal digits of every value, none rounded to a double.
      expect(jsonDataText('INT64', i64).join('')).toBe(`[${big.join(',')}]`);
      expect(jsonDataText('UINT64', u64).join('')).toBe(`[${Array.from(u64).join(',')}]`);
    }), { numRuns: NUM_RUNS });
  });

  it('splits big arrays into pieces and keeps small ones whole', () => {
    expect(jsonDataText('FP32', new Float32Array(4096))).toHaveLength(1);
    expect(jsonDataText('FP32', new Float32Array(0))).toEqual(['[]']);
    const parts = jsonDataText('INT32', Int32Array.from({ length: 8193 }, (_, i) => i));
    expect(parts).toHaveLength(3);
    expect(parts[1]!.startsWith(',4096,')).toBe(true);
    expect(JSON.parse(parts.join(''))).toHaveLength(8193);
  });

  it('BOOL and BYTES as before', () => {
    const bools = Uint8Array.from([1, 0, 1]);
    expect(jsonDataText('BOOL', bools)).toEqual(['[true,false,true]']);
    const bytes = ['a', 'é"\\', ''].map((s) => new TextEncoder().encode(s));
    expect(jsonDataText('BYTES', bytes)).toEqual([JSON.stringify(['a', 'é"\\', ''])]);
  });
});

/** The response object the encoder used to build and stringify whole: the reference its pieces must equal. */
function reference(resp: InferResponse, encoding: OutputEncoding, skip: ReadonlySet<string>): string {
  const outputs = resp.outputs.map((t) => {
    const o: Record<string, unknown> = { name: t.name, datatype: t.datatype, shape: t.shape };
    const params: Parameters = { ...(t.parameters ?? {}) };
    if (skip.has(t.name)) {
      // no data
    } else if (encoding.binary.get(t.name) ?? encoding.binaryDefault) {
      params.binary_data_size = (t.data as NumericArray).byteLength;
    } else {
      const values = toJsonValues(t.datatype, t.data);
      o.data = Array.isArray(values) ? values.map(marked) : values;
    }
    if (Object.keys(params).length > 0) o.parameters = params;
    return o;
  });
  const head: Record<string, unknown> = {};
  if (resp.id !== undefined && resp.id !== '') head.id = resp.id;
  head.model_name = resp.model_name;
  head.model_version = resp.model_version;
  if (resp.parameters) head.parameters = resp.parameters;
  head.outputs = outputs;
  return unmark(JSON.stringify(head));
}

describe('encodeInferResponse: the JSON header is JSON.stringify of the response', () => {
  const text = fc.string({ unit: 'binary', maxLength: 8 });
  const param = fc.dictionary(text, fc.oneof(text, fc.integer(), fc.boolean(), fc.double({ noNaN: true, noDefaultInfinity: true })), { maxKeys: 3 });
  const output = fc.record({
    name: fc.oneof(text, fc.constantFrom('data', '"data":0', 'outputs')),
    values: sized(float32),
    parameters: fc.option(param, { nil: undefined }),
    mode: fc.constantFrom('json', 'binary', 'shm', 'default'),
  });
  it('for any ids, parameters, names and mix of JSON, binary and shared-memory outputs', () => {
    fc.assert(fc.property(
      fc.option(text, { nil: undefined }), fc.option(param, { nil: undefined }), fc.option(fc.constantFrom('1', '7'), { nil: undefined }),
      fc.array(output, { maxLength: 4 }), fc.boolean(),
      (id, parameters, version, outs, binaryDefault) => {
        const resp: InferResponse = {
          id, model_name: 'm', model_version: version as string, parameters,
          outputs: outs.map((o) => ({ name: o.name, datatype: 'FP32', shape: [1, o.values.length], data: Float32Array.from(o.values), parameters: o.parameters })),
        };
        const encoding: OutputEncoding = { binaryDefault, binary: new Map() };
        const skip = new Set<string>();
        for (const o of outs) {
          if (o.mode === 'json' || o.mode === 'binary') encoding.binary.set(o.name, o.mode === 'binary');
          if (o.mode === 'shm') skip.add(o.name);
        }
        const enc = encodeInferResponse(resp, encoding, skip);
        const body = bodyBytes(enc.parts);
        const headerLength = enc.headerLength ?? body.byteLength;
        expect(new TextDecoder().decode(body.subarray(0, headerLength))).toBe(reference(resp, encoding, skip));
        expect(enc.contentType).toBe(enc.headerLength === undefined ? 'application/json' : 'application/octet-stream');
      },
    ), { numRuns: NUM_RUNS });
  });

  it('keeps a small answer in one piece', () => {
    const enc = encodeInferResponse(
      { model_name: 'm', model_version: '1', outputs: [{ name: 'Y', datatype: 'INT32', shape: [3], data: Int32Array.from([1, 2, 3]) }] },
      { binaryDefault: false, binary: new Map() },
    );
    expect(enc.parts).toEqual(['{"model_name":"m","model_version":"1","outputs":[{"name":"Y","datatype":"INT32","shape":[3],"data":[1,2,3]}]}']);
  });
});

describe('fromJsonValues: flat arrays straight into the typed array', () => {
  /** The index of the first element whose bits differ, or -1 (deep equality is slow on 12k elements). */
  const firstDiff = (a: NumericArray | TensorData, b: NumericArray) => {
    const x = new Uint8Array((a as NumericArray).buffer, (a as NumericArray).byteOffset, (a as NumericArray).byteLength);
    const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    if (x.length !== y.length || a.constructor !== b.constructor) return -2;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
    return -1;
  };
  it('reads flat and nested data alike', () => {
    fc.assert(fc.property(sized(float32.filter(Number.isFinite)), fc.integer({ min: 1, max: 5 }), (values, width) => {
      const expected = Float32Array.from(values);
      expect(firstDiff(fromJsonValues('FP32', values, 'x'), expected)).toBe(-1);
      const rows = Array.from({ length: Math.ceil(values.length / width) }, (_, r) => values.slice(r * width, (r + 1) * width));
      expect(firstDiff(fromJsonValues('FP32', rows, 'x'), expected)).toBe(-1);
      const ints = values.map((v) => Math.trunc(v) | 0);
      expect(firstDiff(fromJsonValues('INT32', [ints], 'x'), Int32Array.from(ints))).toBe(-1);
      expect(firstDiff(fromJsonValues('INT32', ints, 'x'), Int32Array.from(ints))).toBe(-1);
    }), { numRuns: NUM_RUNS });
  });

  it('names the bad element, flat or nested', () => {
    expect(() => fromJsonValues('FP32', [1, 2, 'x'], "input 'I'")).toThrow(`input 'I': element 2 is "x", expected a number for datatype FP32`);
    expect(() => fromJsonValues('INT8', [[1], [2, 300]], "input 'I'")).toThrow(`input 'I': element 2 is 300, expected a value in [-128, 127] for datatype INT8`);
    expect(() => fromJsonValues('INT32', [1, [2.5]], "input 'I'")).toThrow(`input 'I': element 1 is 2.5, expected an integer for datatype INT32`);
    expect(() => fromJsonValues('UINT16', [null], "input 'I'")).toThrow(`input 'I': element 0 is null, expected an integer for datatype UINT16`);
  });
});
