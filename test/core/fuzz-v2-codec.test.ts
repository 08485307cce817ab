/**
 * Property tests of the v2 HTTP body codec and the request validation behind it (fast-check): for any
 * bytes, any header-length value and any JSON a client can send, decoding and validating either
 * succeed or throw a TsiError INVALID_ARG with a short, non-empty message — never another error, never
 * a stack overflow, never an exception that is not ours. And what the codec reads is what was sent:
 * tensors written as JSON or as binary come back with the same values, and responses encoded by the
 * server parse back to the same outputs.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import { validateRequest } from '../../core/request.js';
import { encodeBytesElements } from '../../core/tensor.js';
import { bodyBytes, decodeInferRequest, encodeInferResponse } from '../../core/protocol/v2-codec.js';
import type { InferRequest } from '../../core/types.js';

const config: ModelConfig = {
  name: 'm', max_batch_size: 4,
  input: [
    { name: 'I', data_type: 'TYPE_INT32', dims: [-1] },
    { name: 'F', data_type: 'TYPE_FP32', dims: [2] },
    { name: 'S', data_type: 'TYPE_STRING', dims: [-1], optional: true },
    { name: 'L', data_type: 'TYPE_INT64', dims: [1], optional: true },
    { name: 'B', data_type: 'TYPE_BOOL', dims: [1], optional: true },
  ],
  output: [{ name: 'X', data_type: 'TYPE_FP32', dims: [2] }],
} as ModelConfig;
const oneInput: ModelConfig = { ...config, input: [config.input![0]!] } as ModelConfig;

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 300);

/** Decodes and validates; returns 'ok' or the TsiError, and fails the property on anything else. */
function attempt(body: Uint8Array, headerLength: string | undefined, cfg = config): 'ok' | TsiError {
  try {
    const d = decodeInferRequest(body, headerLength, 'm', undefined, () => cfg);
    validateRequest(d.request, { modelName: 'm', config: cfg, sink: () => {} });
    return 'ok';
  } catch (err) {
    if (!(err instanceof TsiError)) throw new Error(`not a TsiError: ${(err as Error)?.stack ?? String(err)}`);
    if (err.code !== 'INVALID_ARG') throw new Error(`${err.code}: ${err.message}`);
    if (err.message.length === 0 || err.message.length > 2000) throw new Error(`message of ${err.message.length} characters: ${err.message.slice(0, 200)}`);
    return err;
  }
}

const enc = new TextEncoder();
/** Keys an object inherits: a lookup by a client's key must not find these (CI once found `toString`). */
const PROTO_KEYS = ['__proto__', 'toString', 'constructor', 'hasOwnProperty'] as const;
/** JSON values with a bias toward what the decoder reads: known keys, near-valid tensors. */
const value = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.constantFrom(null, true, -1, 0, 1.5, 1e30, 2 ** 64, '', 'INT32', 'FP32', 'BYTES', [], {}, [[1]], [-1, 2]),
);
const tensor = fc.record({
  name: fc.oneof(fc.constantFrom('I', 'F', 'S', 'L', 'B', 'nope'), value),
  datatype: fc.oneof(fc.constantFrom('INT32', 'FP32', 'BYTES', 'INT64', 'BOOL', 'FP16'), value),
  shape: fc.oneof(fc.array(fc.oneof(fc.integer({ min: -2, max: 4 }), value), { maxLength: 3 }), value),
  data: fc.option(fc.oneof(fc.array(fc.oneof(fc.integer(), fc.string(), fc.boolean(), fc.double(), value), { maxLength: 10 }), value)),
  parameters: fc.option(fc.dictionary(fc.constantFrom('binary_data_size', 'shared_memory_region', 'custom', 'shared_memory_byte_size', ...PROTO_KEYS), value, { maxKeys: 2 })),
}, { requiredKeys: ['name'] });
const request = fc.record({
  id: value,
  parameters: fc.oneof(value, fc.dictionary(fc.constantFrom('priority', 'timeout', 'sequence_id', 'sequence_start', 'binary_data_output', 'triton_x', 'k', ...PROTO_KEYS), value, { maxKeys: 3 })),
  inputs: fc.oneof(fc.array(tensor, { maxLength: 4 }), value),
  outputs: fc.oneof(fc.array(fc.record({ name: fc.oneof(fc.constant('X'), value), parameters: fc.dictionary(fc.constantFrom('binary_data', 'classification', 'shared_memory_region', ...PROTO_KEYS), value, { maxKeys: 2 }) }), { maxLength: 2 }), value),
}, { requiredKeys: [] });

describe('the v2 codec never fails but with INVALID_ARG', () => {
  it('for any bytes and any Inference-Header-Content-Length', () => {
    fc.assert(fc.property(
      fc.uint8Array({ maxLength: 300 }),
      fc.option(fc.oneof(fc.nat(400).map(String), fc.string({ maxLength: 8 }))),
      (body, hl) => {
        attempt(body, hl ?? undefined);
        attempt(body, hl ?? undefined, oneInput);
      },
    ), { numRuns: NUM_RUNS });
  });

  it('for any JSON value as the request', () => {
    fc.assert(fc.property(value, (v) => {
      attempt(enc.encode(JSON.stringify(v)), undefined);
    }), { numRuns: NUM_RUNS });
  });

  it('for requests shaped like infer requests, with binary data that may or may not match', () => {
    fc.assert(fc.property(request, fc.uint8Array({ maxLength: 64 }), fc.boolean(), (req, tail, binary) => {
      const json = enc.encode(JSON.stringify(req));
      if (binary) {
        const body = new Uint8Array(json.byteLength + tail.byteLength);
        body.set(json);
        body.set(tail, json.byteLength);
        attempt(body, String(json.byteLength));
      } else {
        attempt(json, undefined);
      }
    }), { numRuns: NUM_RUNS });
  });

  it('for JSON nested deeper than anything recursion could follow, anywhere in the request', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 50_000 }), fc.constantFrom('data', 'shape', 'name', 'datatype', 'parameters', 'id', 'outputs', 'param'), fc.boolean(), (depth, where, objects) => {
      const deep = objects ? `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}` : `${'['.repeat(depth)}1${']'.repeat(depth)}`;
      const t: Record<string, string> = { name: '"I"', datatype: '"INT32"', shape: '[1,1]', data: '[1]' };
      let top = '';
      if (where === 'id' || where === 'outputs') top = `"${where}":${deep},`;
      else if (where === 'param') top = `"parameters":{"priority":${deep}},`;
      else t[where] = deep;
      const body = `{${top}"inputs":[{${Object.entries(t).map(([k, v]) => `"${k}":${v}`).join(',')}},{"name":"F","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`;
      const r = attempt(enc.encode(body), undefined);
      // A tensor's unknown parameters are ignored, as Triton ignores them; anywhere else it is refused.
      if (depth >= 100 && where !== 'parameters') expect(r).not.toBe('ok');
    }), { numRuns: Math.min(NUM_RUNS, 100) });
  });
});

// ---------------------------------------------------------------------------------------------------

type Kind = 'I' | 'F' | 'S' | 'L' | 'B';
/** JSON has no -0 (JSON.stringify(-0) is "0"). */
const noNegZero = (x: number) => (Object.is(x, -0) ? 0 : x);
const rows = fc.integer({ min: 1, max: 4 });
const sample = fc.record({
  batch: rows,
  width: fc.integer({ min: 0, max: 5 }),
  ints: fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { minLength: 20, maxLength: 20 }),
  // JSON has no NaN or Infinity.
  floats: fc.array(fc.float({ noNaN: true, noDefaultInfinity: true }), { minLength: 8, maxLength: 8 }),
  strings: fc.array(fc.string({ unit: 'binary', maxLength: 6 }), { minLength: 20, maxLength: 20 }),
  longs: fc.array(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), { minLength: 4, maxLength: 4 }),
  bools: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  binary: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
});

function le(kind: Kind, values: unknown[]): Uint8Array {
  switch (kind) {
    case 'I': return new Uint8Array(Int32Array.from(values as number[]).buffer);
    case 'F': return new Uint8Array(Float32Array.from(values as number[]).buffer);
    case 'L': return new Uint8Array(BigInt64Array.from(values as bigint[]).buffer);
    case 'B': return Uint8Array.from(values as boolean[], (b) => (b ? 1 : 0));
    default:
      return encodeBytesElements((values as string[]).map((s) => enc.encode(s)));
  }
}

describe('what the codec reads is what was sent', () => {
  it('tensors as JSON or binary, in any mix, decode to the values sent', () => {
    fc.assert(fc.property(sample, (s) => {
      const b = s.batch;
      const tensors: { name: Kind; datatype: string; shape: number[]; values: unknown[] }[] = [
        { name: 'I', datatype: 'INT32', shape: [b, s.width], values: s.ints.slice(0, b * s.width) },
        { name: 'F', datatype: 'FP32', shape: [b, 2], values: s.floats.slice(0, b * 2) },
        { name: 'S', datatype: 'BYTES', shape: [b, s.width], values: s.strings.slice(0, b * s.width) },
        { name: 'L', datatype: 'INT64', shape: [b, 1], values: s.longs.slice(0, b) },
        { name: 'B', datatype: 'BOOL', shape: [b, 1], values: s.bools.slice(0, b) },
      ];
      const chunks: Uint8Array[] = [];
      const inputs = tensors.map((t, i) => {
        // INT64 beyond 2^53 cannot travel as a JSON number: those go binary.
        const binary = s.binary[i]! || (t.name === 'L' && (t.values as bigint[]).some((v) => v > 2n ** 53n || v < -(2n ** 53n)));
        if (!binary) return { name: t.name, datatype: t.datatype, shape: t.shape, data: t.name === 'L' ? (t.values as bigint[]).map(Number) : t.values };
        const bytes = le(t.name, t.values);
        chunks.push(bytes);
        return { name: t.name, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: bytes.byteLength } };
      });
      const json = enc.encode(JSON.stringify({ inputs }));
      const body = bodyBytes([json, ...chunks]);
      const d = decodeInferRequest(body, chunks.length > 0 ? String(json.byteLength) : undefined, 'm', undefined, () => config);
      const p = validateRequest(d.request, { modelName: 'm', config, sink: () => {} });
      expect(p.batchSize).toBe(b);
      for (const t of tensors) {
        const got = p.inputs.get(t.name)!;
        expect(got.shape).toEqual(t.shape);
        if (t.name === 'S') expect((got.data as Uint8Array[]).map((x) => new TextDecoder().decode(x))).toEqual(t.values.map((v) => new TextDecoder().decode(enc.encode(v as string))));
        else if (t.name === 'B') expect(Array.from(got.data as Uint8Array)).toEqual((t.values as boolean[]).map((v) => (v ? 1 : 0)));
        else if (t.name === 'L') expect(Array.from(got.data as BigInt64Array)).toEqual(t.values);
        else if (t.name === 'F') expect(Array.from(got.data as Float32Array).map(noNegZero)).toEqual(Array.from(Float32Array.from(t.values as number[])).map(noNegZero));
        else expect(Array.from(got.data as Int32Array)).toEqual(t.values);
      }
    }), { numRuns: NUM_RUNS });
  });

  it('responses encoded as JSON or binary parse back to the outputs', () => {
    fc.assert(fc.property(
      fc.array(fc.float({ noNaN: true, noDefaultInfinity: true }), { maxLength: 12 }),
      fc.array(fc.string({ maxLength: 5 }), { maxLength: 6 }),
      fc.boolean(), fc.option(fc.string({ maxLength: 10 })),
      (floats, strings, binary, id) => {
        const f = Float32Array.from(floats);
        const s = strings.map((x) => enc.encode(x));
        const enc1 = encodeInferResponse(
          { id: id ?? undefined, model_name: 'm', model_version: '1', outputs: [{ name: 'X', datatype: 'FP32', shape: [f.length], data: f }, { name: 'Y', datatype: 'BYTES', shape: [s.length], data: s }] },
          { binaryDefault: binary, binary: new Map() },
        );
        const body = bodyBytes(enc1.parts);
        const hl = enc1.headerLength ?? body.byteLength;
        const head = JSON.parse(new TextDecoder().decode(body.subarray(0, hl)));
        if (id) expect(head.id).toBe(id);
        const [x, y] = head.outputs;
        if (!binary) {
          expect(x.data.map(noNegZero)).toEqual(Array.from(f).map(noNegZero));
          expect(y.data).toEqual(strings.map((v) => new TextDecoder().decode(enc.encode(v))));
        } else {
          const rest = body.slice(hl);
          expect(Array.from(new Float32Array(rest.slice(0, x.parameters.binary_data_size).buffer))).toEqual(Array.from(f));
          expect(rest.byteLength).toBe(x.parameters.binary_data_size + y.parameters.binary_data_size);
        }
      },
    ), { numRuns: NUM_RUNS });
  });
});

// A request built in-process (no wire) meets the same rules.
describe('validation of requests that come without a wire', () => {
  it('never fails but with INVALID_ARG for any parameter values', () => {
    fc.assert(fc.property(fc.dictionary(fc.constantFrom('priority', 'timeout', 'sequence_id', 'sequence_start', 'sequence_end', 'binary_data_output', 'x'), fc.oneof(fc.integer(), fc.double(), fc.string(), fc.boolean(), fc.bigInt())), (parameters) => {
      const req: InferRequest = {
        model_name: 'm', parameters: parameters as InferRequest['parameters'],
        inputs: [{ name: 'I', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(1) }, { name: 'F', datatype: 'FP32', shape: [1, 2], data: new Float32Array(2) }],
      };
      try {
        validateRequest(req, { modelName: 'm', config, sink: () => {} });
      } catch (err) {
        expect(err).toBeInstanceOf(TsiError);
        expect((err as TsiError).code).toBe('INVALID_ARG');
      }
    }), { numRuns: NUM_RUNS });
  });
});
