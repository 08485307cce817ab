/**
 * json-exact.ts: parseJsonExact reads any JSON as JSON.parse does except that integer literals past
 * 2^53 are exact bigints; stringifyJson writes bigints as integer literals; parseInferJson reads a
 * header again only where a 64-bit tensor or a parameter needs it. fast-check drives arbitrary JSON
 * (strings with escapes and control characters, `__proto__` keys, deep nesting, numbers of every form).
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseInferJson, parseJson, parseJsonExact, stringifyJson } from '../../core/protocol/json-exact.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const bigints = fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n });
/** JSON values whose integers are all safe (the rest parseJsonExact reads as bigints, on purpose). */
const safeJson = fc.jsonValue().filter((v) => !JSON.stringify(v).match(/(?<![\d.])\d{16,}(?![\d.eE])/));
const safe = (b: bigint) => b >= -BigInt(Number.MAX_SAFE_INTEGER) && b <= BigInt(Number.MAX_SAFE_INTEGER);

describe('parseJsonExact', () => {
  it('reads any JSON.stringify text as JSON.parse does when every integer is safe', () => {
    fc.assert(fc.property(safeJson, fc.constantFrom(0, 2), (v, indent) => {
      const text = JSON.stringify(v, null, indent);
      expect(parseJsonExact(text)).toStrictEqual(JSON.parse(text));
    }), { numRuns: NUM_RUNS });
  });

  it('keeps every digit of integer literals past 2^53, and only of those', () => {
    fc.assert(fc.property(fc.array(bigints, { maxLength: 20 }), (values) => {
      const got = parseJsonExact(`{"data":[${values.join(', ')}],"f":[1.5,1e300,-0,9007199254740993.0]}`) as { data: unknown[]; f: number[] };
      expect(got.data).toEqual(values.map((b) => (safe(b) ? Number(b) : b)));
      expect(got.f).toEqual([1.5, 1e300, -0, 9007199254740992]);
    }), { numRuns: NUM_RUNS });
  });

  it('keeps `__proto__` as an own key and refuses what JSON.parse refuses', () => {
    const o = parseJsonExact('{"__proto__":{"x":1},"a":"\\u0041\\n"}') as Record<string, unknown>;
    expect(Object.getPrototypeOf(o)).toBe(Object.prototype);
    expect(Object.keys(o)).toEqual(['__proto__', 'a']);
    expect(o.a).toBe('A\n');
    for (const bad of ['', '[1,]', '{"a" 1}', '[01]', '"\u0001"', '[1] x', '{"a":1,}', 'nul', '[-]', '"abc']) {
      expect(() => JSON.parse(bad), bad).toThrow(SyntaxError);
      expect(() => parseJsonExact(bad), bad).toThrow(SyntaxError);
    }
  });
});

describe('stringifyJson', () => {
  it('is JSON.stringify without bigints, and writes bigints as literals parseJsonExact reads back', () => {
    fc.assert(fc.property(safeJson, fc.array(bigints, { maxLength: 8 }), (v, big) => {
      expect(stringifyJson(v)).toBe(JSON.stringify(v));
      const mixed = { v, big, s: '@@tsi-bigint:5@@', n: 1.5 };
      const back = parseJsonExact(stringifyJson(mixed)) as typeof mixed;
      expect(back.big).toEqual(big.map((b) => (safe(b) ? Number(b) : b)));
      expect(back.s).toBe('@@tsi-bigint:5@@');
      expect(back.v).toStrictEqual(JSON.parse(JSON.stringify(v)));
    }), { numRuns: NUM_RUNS });
  });
});

describe('parseInferJson', () => {
  it('reads 64-bit data and parameters exactly, and leaves everything else as JSON.parse read it', () => {
    const text = '{"parameters":{"sequence_id":18446744073709551615,"p":1},"inputs":[' +
      '{"name":"A","datatype":"INT64","shape":[2],"data":[9007199254740993,1],"parameters":{"q":9223372036854775807}},' +
      '{"name":"B","datatype":"FP64","shape":[1],"data":[9007199254740993]}],' +
      '"outputs":[{"name":"Y","parameters":{"classification":2}}]}';
    const h = parseInferJson(text) as any;
    expect(h.parameters).toEqual({ sequence_id: 2n ** 64n - 1n, p: 1 });
    expect(h.inputs[0].data).toEqual([9007199254740993n, 1]);
    expect(h.inputs[0].parameters).toEqual({ q: 2n ** 63n - 1n });
    expect(h.inputs[1].data).toEqual([9007199254740992]);
    expect(h.outputs[0].parameters).toEqual({ classification: 2 });
  });

  it('is JSON.parse when nothing past 2^53 is where a 64-bit integer can be', () => {
    const text = '{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[1e300]},{"name":"B","datatype":"INT64","shape":[1],"data":[5]}]}';
    expect(parseInferJson(text)).toStrictEqual(JSON.parse(text));
    expect(parseJson('{"a":[1,{"b":2}]}')).toStrictEqual({ a: [1, { b: 2 }] });
    expect(parseJson('{"a":[1,{"b":18446744073709551615}]}')).toStrictEqual({ a: [1, { b: 2n ** 64n - 1n }] });
  });
});
