/**
 * GrpcClient against the real tsi gRPC server: the shared suite (every tritonclient operation, errors
 * with gRPC codes and the server's details), then what only gRPC has — ModelStreamInfer as an async
 * iterator and callbacks (request/response and decoupled models, in-stream errors), request
 * compression, metadata, deadlines, and reading typed `contents` answers from other v2 servers.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcClient, InferenceServerError } from '../../client/grpc.js';
import type { InferResult } from '../../client/index.js';
import { parseInferResponse } from '../../client/grpc-codec.js';
import { clientSuite, expectError } from './suite.js';
import { startClientServers, type ClientServers } from './servers.js';

let servers: ClientServers;
const clients: GrpcClient[] = [];
const track = (c: GrpcClient) => (clients.push(c), c);

beforeAll(async () => {
  servers = await startClientServers();
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await servers?.stop();
});

clientSuite('grpc', {
  client: () => track(new GrpcClient(servers.grpcUrl)),
  explicitClient: () => track(new GrpcClient(servers.explicitGrpcUrl)),
  deadClient: () => track(new GrpcClient('127.0.0.1:1')),
});

const a = Int32Array.from({ length: 16 }, (_, i) => i);
const b = Int32Array.from({ length: 16 }, () => 2);
const inputs = [{ name: 'INPUT0', shape: [1, 16], data: a }, { name: 'INPUT1', shape: [1, 16], data: b }];
const repeat = (n: number) => [{ name: 'IN', shape: [1], data: new Int32Array([n]) }];

describe('grpc client: ModelStreamInfer', () => {
  it('streams request/response inferences in order, by async iteration', async () => {
    const stream = track(new GrpcClient(servers.grpcUrl)).stream();
    for (let k = 0; k < 3; k++) stream.send('simple', inputs, { id: `s${k}` });
    stream.end();
    const got: InferResult[] = [];
    for await (const item of stream) {
      expect(item.error).toBeUndefined();
      got.push(item.result!);
    }
    expect(got.map((r) => r.id)).toEqual(['s0', 's1', 's2']);
    expect(Array.from(got[2]!.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 2));
  });

  it('delivers a decoupled model\'s many responses, with the final flag when asked', async () => {
    const seen: (boolean | undefined)[] = [];
    const stream = track(new GrpcClient(servers.grpcUrl)).stream({ onResult: (_r, final) => seen.push(final) });
    stream.send('repeat', repeat(3), { enableEmptyFinalResponse: true });
    stream.end();
    const items = [];
    for await (const item of stream) items.push(item);
    expect(items.map((i) => (i.result!.outputs.length ? i.result!.data<Int32Array>('OUT')[0] : 'end'))).toEqual([0, 1, 2, 'end']);
    expect(items.map((i) => i.result!.outputs.length === 0 ? true : i.final ?? false)).toEqual([false, false, false, true]);
    expect(seen).toHaveLength(4);
  });

  it('reports a failed request in the stream and keeps the stream open', async () => {
    const errors: InferenceServerError[] = [];
    const stream = track(new GrpcClient(servers.grpcUrl)).stream({ onError: (e) => errors.push(e) });
    stream.send('simple', [{ name: 'INPUT0', shape: [1, 4], data: new Int32Array(4) }, inputs[1]!]);
    stream.send('simple', inputs, { id: 'after' });
    stream.end();
    const items = [];
    for await (const item of stream) items.push(item);
    expect(items).toHaveLength(2);
    expect(items[0]!.error).toBeInstanceOf(InferenceServerError);
    expect(items[0]!.error!.message).toContain("unexpected shape for input 'INPUT0'");
    expect(items[1]!.result!.id).toBe('after');
    expect(errors).toHaveLength(1);
  });

  it('lets a consumer stop early (the call is cancelled, not leaked)', async () => {
    const stream = track(new GrpcClient(servers.grpcUrl)).stream();
    stream.send('repeat', repeat(50));
    let n = 0;
    for await (const item of stream) {
      expect(item.result).toBeDefined();
      if (++n === 2) break;
    }
    expect(n).toBe(2);
    expect((await stream[Symbol.asyncIterator]().next()).done).toBe(true);
    expect(() => stream.send('simple', inputs)).toThrow('the stream is closed');
  });
});

describe('grpc client: transport options', () => {
  it('compresses requests with gzip and names status codes', async () => {
    const c = track(new GrpcClient({ url: `grpc://${servers.grpcUrl}`, compression: 'gzip' }));
    const r = await c.infer('simple', inputs);
    expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 2));
    const e = await expectError(c.getModelMetadata('nope'), 'grpc', 5, "'nope'");
    expect(e.codeName).toBe('NOT_FOUND');
  });

  it('applies deadlines and aborts', async () => {
    const c = track(new GrpcClient(servers.grpcUrl));
    const ac = new AbortController();
    const p = c.infer('simple', inputs, { signal: ac.signal });
    ac.abort();
    await expectError(p, 'grpc', 1, /cancel/i);
    const stream = c.stream({}, { timeoutMs: 50 });
    stream.send('repeat', repeat(1000));
    const err = await (async () => {
      for await (const _ of stream) void _;
    })().then(() => undefined, (e: unknown) => e);
    expect((err as InferenceServerError).status).toBe(4);
  });

  it('reads typed InferTensorContents answers (servers that do not use raw contents)', () => {
    const r = parseInferResponse({
      model_name: 'm', model_version: '1', id: '', parameters: {},
      outputs: [
        { name: 'F', datatype: 'FP32', shape: ['2'], parameters: {}, contents: { fp32_contents: [1.5, 2.5] } },
        { name: 'I', datatype: 'INT64', shape: ['1'], parameters: {}, contents: { int64_contents: ['9007199254740993'] } },
        { name: 'S', datatype: 'BYTES', shape: ['1'], parameters: {}, contents: { bytes_contents: [Buffer.from('hi')] } },
        { name: 'B', datatype: 'BOOL', shape: ['2'], parameters: {}, contents: { bool_contents: [true, false] } },
      ],
      raw_output_contents: [],
    });
    expect(Array.from(r.data<Float32Array>('F'))).toEqual([1.5, 2.5]);
    expect(r.data<BigInt64Array>('I')[0]).toBe(9007199254740993n);
    expect(r.strings('S')).toEqual(['hi']);
    expect(Array.from(r.data<Uint8Array>('B'))).toEqual([1, 0]);
  });
});
