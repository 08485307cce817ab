/**
 * Property tests of the gRPC request decoding (fast-check): the handlers' decoder (protobuf bytes →
 * message, runtime-node/grpc/server.ts) and the ModelInferRequest → InferRequest codec (grpc-codec.ts), then
 * core's validation. For any bytes, any real message cut short or with bits flipped, and any message
 * whose fields hold what they should not (parameter kinds, shapes of any int64, datatypes, raw and typed
 * contents of any size), the result is a request or a TsiError INVALID_ARG with a message — nothing
 * grpc-js would turn into INTERNAL. And what a client encodes is what the server reads back.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildInferRequest } from '../../client/grpc-codec.js';
import { TsiError, validateRequest, type ModelConfig } from '../../core/index.js';
import { loadProtos, rawRequestService } from '../../runtime-node/grpc/server.js';
import { decodeInferRequest } from '../../runtime-node/grpc/codec.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 300);
const protos = loadProtos().inference;
const { decoders } = rawRequestService(protos);
const serialize = (m: Record<string, unknown>) => protos.ModelInfer!.requestSerialize(m) as Buffer;

const config: ModelConfig = {
  name: 'm', max_batch_size: 4,
  input: [
    { name: 'I', data_type: 'TYPE_INT32', dims: [-1] },
    { name: 'S', data_type: 'TYPE_STRING', dims: [2], optional: true },
    { name: 'F', data_type: 'TYPE_FP32', dims: [1], optional: true },
  ],
  output: [{ name: 'X', data_type: 'TYPE_FP32', dims: [1] }],
} as ModelConfig;

/** Decode, convert, validate: 'ok' or the TsiError; anything else fails the property. */
function attempt(bytes: Buffer): 'ok' | TsiError {
  try {
    const msg = decoders.ModelInfer!(bytes);
    const { request } = decodeInferRequest(msg);
    validateRequest(request, { modelName: 'm', config, sink: () => {} });
    return 'ok';
  } catch (err) {
    if (!(err instanceof TsiError)) throw new Error(`not a TsiError: ${(err as Error)?.stack ?? String(err)}`);
    if (err.code !== 'INVALID_ARG') throw new Error(`${err.code}: ${err.message}`);
    if (err.message.length === 0 || err.message.length > 2000) throw new Error(`message of ${err.message.length} characters`);
    return err;
  }
}

const good = serialize({
  model_name: 'm', id: 'x', parameters: { priority: { int64_param: '1' } },
  inputs: [{ name: 'I', datatype: 'INT32', shape: ['1', '3'] }, { name: 'S', datatype: 'BYTES', shape: ['1', '2'] }],
  outputs: [{ name: 'X' }],
  raw_input_contents: [Buffer.from(Int32Array.of(1, 2, 3).buffer), Buffer.from([1, 0, 0, 0, 65, 0, 0, 0, 0])],
});

const param = fc.oneof(
  fc.constant({}),
  fc.boolean().map((b) => ({ bool_param: b })),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map((n) => ({ int64_param: n.toString() })),
  fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((n) => ({ uint64_param: n.toString() })),
  fc.double().map((d) => ({ double_param: d })),
  fc.string({ maxLength: 10 }).map((s) => ({ string_param: s })),
);
const params = fc.dictionary(
  fc.oneof(fc.constantFrom('priority', 'timeout', 'sequence_id', 'sequence_start', 'sequence_end', 'triton_enable_empty_final_response', 'triton_x',
    'classification', 'shared_memory_region', 'shared_memory_offset', 'shared_memory_byte_size', 'binary_data_output',
    // Keys every object inherits: a lookup by the client's key must not find these.
    '__proto__', 'toString', 'constructor'), fc.string({ maxLength: 6 })),
  param, { maxKeys: 3 },
);
const dim = fc.oneof(fc.integer({ min: -3, max: 5 }).map(String), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String));
const message = fc.record({
  model_name: fc.string({ maxLength: 4 }),
  id: fc.string({ maxLength: 4 }),
  parameters: params,
  inputs: fc.array(fc.record({
    name: fc.oneof(fc.constantFrom('I', 'S', 'F'), fc.string({ maxLength: 3 })),
    datatype: fc.oneof(fc.constantFrom('INT32', 'BYTES', 'FP32', 'FP16', 'BOOL', 'UINT64'), fc.string({ maxLength: 5 })),
    shape: fc.array(dim, { maxLength: 3 }),
    parameters: params,
    contents: fc.option(fc.record({
      int_contents: fc.array(fc.integer(), { maxLength: 6 }),
      bytes_contents: fc.array(fc.uint8Array({ maxLength: 4 }).map((b) => Buffer.from(b)), { maxLength: 3 }),
      fp32_contents: fc.array(fc.float(), { maxLength: 3 }),
      uint64_contents: fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map(String), { maxLength: 2 }),
    }, { requiredKeys: [] }), { nil: undefined }),
  }, { requiredKeys: ['name', 'datatype', 'shape'] }), { maxLength: 3 }),
  outputs: fc.array(fc.record({ name: fc.constantFrom('X', 'Y', ''), parameters: params }), { maxLength: 2 }),
  raw_input_contents: fc.array(fc.uint8Array({ maxLength: 24 }).map((b) => Buffer.from(b)), { maxLength: 3 }),
});

describe('gRPC requests never fail but with INVALID_ARG', () => {
  it('for any bytes', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), (b) => {
      attempt(Buffer.from(b));
    }), { numRuns: NUM_RUNS });
  });

  it('for a real message cut short, or with bits flipped', () => {
    fc.assert(fc.property(fc.nat(good.length), fc.array(fc.tuple(fc.nat(good.length - 1), fc.integer({ min: 1, max: 255 })), { maxLength: 4 }), (cut, flips) => {
      attempt(good.subarray(0, cut));
      const b = Buffer.from(good);
      for (const [at, x] of flips) b[at]! ^= x;
      attempt(b);
    }), { numRuns: NUM_RUNS });
  });

  it('for well-formed messages whose fields hold anything', () => {
    fc.assert(fc.property(message, (m) => {
      attempt(serialize(m));
    }), { numRuns: NUM_RUNS });
  });
});

describe('what a client encodes is what the server reads', () => {
  it('tensors and parameters round-trip through the client codec, the wire and the server codec', () => {
    fc.assert(fc.property(
      fc.integer({ min: 1, max: 4 }),
      fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { minLength: 12, maxLength: 12 }),
      fc.array(fc.string({ maxLength: 5 }), { minLength: 8, maxLength: 8 }),
      fc.option(fc.nat(9)), fc.option(fc.string({ minLength: 1, maxLength: 8 })), fc.option(fc.oneof(fc.string({ maxLength: 5 }), fc.integer(), fc.boolean())),
      (batch, ints, strings, priority, id, custom) => {
        const i = ints.slice(0, batch * 3);
        const s = strings.slice(0, batch * 2);
        const msg = buildInferRequest('m', [
          { name: 'I', datatype: 'INT32', shape: [batch, 3], data: Int32Array.from(i) },
          { name: 'S', datatype: 'BYTES', shape: [batch, 2], data: s },
        ], { id: id ?? undefined, priority: priority ?? undefined }, custom === null ? undefined : { custom });
        const p = validateRequest(decodeInferRequest(decoders.ModelInfer!(serialize(msg))).request, { modelName: 'm', config, sink: () => {} });
        expect(Array.from(p.inputs.get('I')!.data as Int32Array)).toEqual(i);
        expect((p.inputs.get('S')!.data as Uint8Array[]).map((b) => new TextDecoder().decode(b))).toEqual(s.map((x) => new TextDecoder().decode(new TextEncoder().encode(x))));
        expect(p.batchSize).toBe(batch);
        expect(p.priority).toBe(priority ?? 0);
        expect(p.id).toBe(id ?? '');
        if (custom !== null) expect(p.parameters.custom).toBe(custom);
      },
    ), { numRuns: NUM_RUNS });
  });
});
