/**
 * Triton's own example clients (client repository, src/python/examples/) against tsi's default
 * repository: one test per client (and per `--dyna` run), named after it, that sends what that client
 * sends — same models, inputs, datatypes, JSON or binary encoding per tensor, parameters, sequence
 * ids and flags, request ids, streaming or not — and checks what it checks, over the protocol it
 * uses. tritonclient cannot be installed here, so test/helpers/example-tritonclient.ts rebuilds its
 * wire format. The server is the one `npx tsi-node serve` starts on the package's `models/`, plus
 * `--allow-client-shm` for the shared-memory clients (Triton needs that flag too) and, for the two
 * model-control clients, an explicit-mode server over a repository of the size they expect. After
 * the clients, the example models' own contracts: binary-safe simple_identity, the sequence models'
 * correlation-id rules, repeat_int32's delays and errors, custom_identity_int32.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { grpcClient, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { describeWith } from '../helpers/capability.js';
import { MODELS, ROOT, startTestServer, type TestServer } from '../helpers/server.js';
import {
  PyHttpClient, PyServerError, SHM_AVAILABLE, bytes, createShm, deserializeBytesTensor, destroyShm, grpcInfer, grpcInferRequest,
  grpcResult, serializeByteTensor, setShm, shmAsNumpy, type NumpyResult, type PyInferOptions, type PyInput, type PyResult,
} from '../helpers/example-tritonclient.js';

let server: TestServer;
let http: PyHttpClient;
let grpcAddress: string;
let rpc: GrpcTestClient;

beforeAll(async () => {
  server = await startTestServer({ modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1', allowClientShm: true });
  http = new PyHttpClient(server.url);
  grpcAddress = `127.0.0.1:${server.grpc!.port}`;
  rpc = grpcClient(grpcAddress);
}, 120_000);

afterAll(async () => {
  rpc?.close();
  await server?.stop();
});

// np.arange(16) and np.ones / np.full(-1), as [1, 16] INT32
const IN0 = Int32Array.from({ length: 16 }, (_, i) => i);
const ONES = new Int32Array(16).fill(1);
const MINUS_ONES = new Int32Array(16).fill(-1);
const int32Inputs = (in0: Int32Array, in1: Int32Array, binary: [boolean, boolean] = [true, true]): PyInput[] => [
  { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: in0, binary: binary[0] },
  { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: in1, binary: binary[1] },
];
const OUTPUTS = [{ name: 'OUTPUT0' }, { name: 'OUTPUT1' }];

/** The add/sub check every `simple` client makes: OUTPUT0[0][i] == in0+in1, OUTPUT1[0][i] == in0-in1. */
function expectAddSub(r: PyResult, in0: ArrayLike<number>, in1: ArrayLike<number>): void {
  const sum = Array.from(r.asNumpy('OUTPUT0') as Int32Array);
  const diff = Array.from(r.asNumpy('OUTPUT1') as Int32Array);
  expect(sum).toEqual(Array.from(in0, (a, i) => a + in1[i]!));
  expect(diff).toEqual(Array.from(in0, (a, i) => a - in1[i]!));
}

/** How the Python clients read a gRPC failure: `InferenceServerException` with the status details. */
async function grpcCall(method: string, request: Obj, headers?: Record<string, string>, client = rpc): Promise<Obj> {
  return client.call(method, request, headers).catch((e: grpc.ServiceError) => {
    throw new PyServerError(e.details, grpc.status[e.code]!);
  });
}

// ---------------------------------------------------------------------------------------------
// simple: infer, async, aio, health and metadata, custom channel args, keepalive
// ---------------------------------------------------------------------------------------------

describe('the simple model clients', () => {
  /** simple_http_infer_client's test_infer / test_infer_no_outputs. */
  const httpTestInfer = (model: string, in0: Int32Array, in1: Int32Array, withOutputs: boolean) => http.infer(model, int32Inputs(in0, in1, [false, true]), {
    outputs: withOutputs ? [{ name: 'OUTPUT0', binary: true }, { name: 'OUTPUT1', binary: false }] : undefined,
    query: { test_1: 1, test_2: 2 },
  });

  it('simple_http_infer_client', async () => {
    const r = await httpTestInfer('simple', IN0, MINUS_ONES, true);
    const stats = await http.get('v2/models/simple/stats');
    expect(stats.model_stats).toHaveLength(1);
    expectAddSub(r, IN0, MINUS_ONES);
    expectAddSub(await httpTestInfer('simple', IN0, MINUS_ONES, false), IN0, MINUS_ONES);
    const wrong = await httpTestInfer('wrong_model_name', IN0, MINUS_ONES, true).catch((e: PyServerError) => e);
    expect(wrong).toBeInstanceOf(PyServerError);
    expect((wrong as PyServerError).message.startsWith('Request for unknown model')).toBe(true);
  });

  it('simple_http_async_infer_client', async () => {
    // Two async_infer calls in flight at once (concurrency=2), every tensor binary.
    const results = await Promise.all([0, 1].map(() => http.infer('simple', int32Inputs(IN0, ONES), {
      outputs: [{ name: 'OUTPUT0', binary: true }, { name: 'OUTPUT1', binary: true }],
    })));
    for (const r of results) expectAddSub(r, IN0, ONES);
  });

  it('simple_http_aio_infer_client', async () => {
    const r = await httpTestInfer('simple', IN0, MINUS_ONES, true);
    expect((await http.get('v2/models/simple/stats')).model_stats).toHaveLength(1);
    expectAddSub(r, IN0, MINUS_ONES);
    expectAddSub(await httpTestInfer('simple', IN0, MINUS_ONES, false), IN0, MINUS_ONES);
    const wrong = await httpTestInfer('wrong_model_name', IN0, MINUS_ONES, true).catch((e: PyServerError) => e);
    expect((wrong as PyServerError).message.startsWith('Request for unknown model')).toBe(true);
    const [r1, r2] = await Promise.all([httpTestInfer('simple', IN0, MINUS_ONES, true), httpTestInfer('simple', IN0, MINUS_ONES, false)]);
    expectAddSub(r1, IN0, MINUS_ONES);
    expectAddSub(r2, IN0, MINUS_ONES);
  });

  it('simple_http_health_metadata', async () => {
    expect(await http.ok('v2/health/live', { test_1: 1, test_2: 2 })).toBe(true);
    expect(await http.ok('v2/health/ready')).toBe(true);
    expect(await http.ok('v2/models/simple/ready')).toBe(true);
    expect((await http.get('v2')).name).toBe('triton');
    expect((await http.get('v2/models/simple', { test_1: 1, test_2: 2 })).name).toBe('simple');
    const wrong = await http.get('v2/models/wrong_model_name').catch((e: PyServerError) => e);
    expect(wrong).toBeInstanceOf(PyServerError);
    expect((wrong as PyServerError).message).toContain('Request for unknown model');
  });

  it('simple_grpc_infer_client', async () => {
    const r = await grpcInfer(rpc, 'simple', int32Inputs(IN0, ONES), { outputs: OUTPUTS, headers: { test: '1' } });
    expect((await grpcCall('ModelStatistics', { name: 'simple', version: '' })).model_stats).toHaveLength(1);
    expectAddSub(r, IN0, ONES);
    expectAddSub(await grpcInfer(rpc, 'simple', int32Inputs(IN0, ONES)), IN0, ONES);
  });

  it('simple_grpc_async_infer_client', async () => {
    // One async_infer; its callback's result is checked (the client waits up to 10 s for it).
    const result = await Promise.race([
      grpcInfer(rpc, 'simple', int32Inputs(IN0, ONES), { outputs: OUTPUTS }),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('no callback within 10 s')), 10_000)),
    ]);
    expectAddSub(result, IN0, ONES);
  });

  it('simple_grpc_aio_infer_client', async () => {
    const r = await grpcInfer(rpc, 'simple', int32Inputs(IN0, ONES), { outputs: OUTPUTS, headers: { test: '1' } });
    expect((await grpcCall('ModelStatistics', { name: 'simple', version: '' })).model_stats).toHaveLength(1);
    expectAddSub(r, IN0, ONES);
    // The same request objects (outputs named) sent twice at once with outputs=None.
    const both = await Promise.all([0, 1].map(() => grpcInfer(rpc, 'simple', int32Inputs(IN0, ONES))));
    for (const x of both) expectAddSub(x, IN0, ONES);
  });

  it('simple_grpc_health_metadata', async () => {
    const headers = { test: '1', dummy: '2' };
    expect((await grpcCall('ServerLive', {}, headers)).live).toBe(true);
    expect((await grpcCall('ServerReady', {})).ready).toBe(true);
    expect((await grpcCall('ModelReady', { name: 'simple', version: '' })).ready).toBe(true);
    expect((await grpcCall('ServerMetadata', {})).name).toBe('triton');
    expect((await grpcCall('ModelMetadata', { name: 'simple', version: '' }, headers)).name).toBe('simple');
    const wrong = await grpcCall('ModelMetadata', { name: 'wrong_model_name', version: '' }).catch((e: PyServerError) => e);
    expect(wrong).toBeInstanceOf(PyServerError);
    expect((wrong as PyServerError).message).toContain('Request for unknown model');
    expect((await grpcCall('ModelConfig', { name: 'simple', version: '' })).config.name).toBe('simple');
  });

  it('simple_grpc_custom_args_client', async () => {
    const client = grpcClient(grpcAddress, {
      'grpc.max_send_message_length': 1024 * 1024,
      'grpc.max_receive_message_length': 1024 * 1024,
      'grpc.keepalive_time_ms': 2 ** 31 - 1,
      'grpc.keepalive_timeout_ms': 20000,
      'grpc.keepalive_permit_without_calls': 0,
      'grpc.http2.max_pings_without_data': 2,
      'grpc.dns_enable_srv_queries': 1,
    });
    try {
      expectAddSub(await grpcInfer(client, 'simple', int32Inputs(IN0, ONES), { outputs: OUTPUTS, headers: { test: '1' } }), IN0, ONES);
    } finally {
      client.close();
    }
  });

  it('simple_grpc_keepalive_client', async () => {
    // KeepAliveOptions with the client's default flags.
    const client = grpcClient(grpcAddress, {
      'grpc.keepalive_time_ms': 2 ** 31 - 1,
      'grpc.keepalive_timeout_ms': 20000,
      'grpc.keepalive_permit_without_calls': 0,
      'grpc.http2.max_pings_without_data': 2,
    });
    try {
      expectAddSub(await grpcInfer(client, 'simple', int32Inputs(IN0, ONES), { outputs: OUTPUTS, headers: { test: '1' } }), IN0, ONES);
    } finally {
      client.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Explicit tensor contents (no tritonclient: the raw protobuf request)
// ---------------------------------------------------------------------------------------------

describe('the explicit-content gRPC clients', () => {
  const explicitRequest = (model: string, datatype: string, in0: Obj, in1: Obj): Obj => ({
    model_name: model, model_version: '',
    inputs: [
      { name: 'INPUT0', datatype, shape: [1, 16], contents: in0 },
      { name: 'INPUT1', datatype, shape: [1, 16], contents: in1 },
    ],
    outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT1' }],
  });
  const input0 = Array.from({ length: 16 }, (_, i) => i);
  const input1 = new Array<number>(16).fill(1);
  /** np.frombuffer(raw_output_contents[i], dtype) for each output, in response order. */
  const rawOutputs = (response: Obj, datatype: string): NumpyResult[] =>
    response.outputs.map((o: Obj, i: number) => grpcResult(response).asNumpy(o.name) ?? expect.fail(`${datatype} output ${i} has no raw contents`));

  it('grpc_explicit_int_content_client', async () => {
    const request = explicitRequest('simple', 'INT32', { int_contents: input0 }, { int_contents: input1 });
    const response = await grpcCall('ModelInfer', request);
    const [sum, diff] = rawOutputs(response, 'INT32') as Int32Array[];
    expect(response.outputs).toHaveLength(2);
    expect(Array.from(sum!)).toEqual(input0.map((a, i) => a + input1[i]!));
    expect(Array.from(diff!)).toEqual(input0.map((a, i) => a - input1[i]!));
    // Half of INPUT0 in raw_input_contents and half in contents: the server must refuse the mix.
    request.raw_input_contents = [Buffer.from(BigInt64Array.from(input0.slice(0, 8).map(BigInt)).buffer)];
    request.inputs[0].contents = { int_contents: input0.slice(8) };
    const mixed = await grpcCall('ModelInfer', request).catch((e: PyServerError) => e);
    expect(String((mixed as PyServerError).message)).toContain(
      "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'");
  });

  it('grpc_explicit_int8_content_client', async () => {
    const request = explicitRequest('simple_int8', 'INT8', { int_contents: input0 }, { int_contents: input1 });
    const response = await grpcCall('ModelInfer', request);
    const [sum, diff] = rawOutputs(response, 'INT8') as Int8Array[];
    expect(response.outputs).toHaveLength(2);
    expect(Array.from(sum!)).toEqual(input0.map((a, i) => a + input1[i]!));
    expect(Array.from(diff!)).toEqual(input0.map((a, i) => a - input1[i]!));
    // The server must catch a version that is not a number, with Triton's words ("PASS: explicit int8").
    const wrong = await grpcCall('ModelInfer', { ...request, model_version: 'wrong_specification' }).catch((e: PyServerError) => e);
    expect(wrong).toBeInstanceOf(PyServerError);
    expect((wrong as PyServerError).message).toContain("failed to get model version from specified version string 'wrong_specification'");
  });

  it('grpc_explicit_byte_content_client', async () => {
    const request = explicitRequest('simple_string', 'BYTES',
      { bytes_contents: input0.map((i) => Buffer.from(String(i))) }, { bytes_contents: input1.map(() => Buffer.from('1')) });
    const response = await grpcCall('ModelInfer', request);
    const [sum, diff] = response.outputs.map((_: Obj, i: number) => deserializeBytesTensor(new Uint8Array(response.raw_output_contents[i])));
    expect(response.outputs).toHaveLength(2);
    const ints = (v: Uint8Array[]) => v.map((e) => Number.parseInt(new TextDecoder().decode(e), 10));
    expect(ints(sum!)).toEqual(input0.map((i) => i + 1));
    expect(ints(diff!)).toEqual(input0.map((i) => i - 1));
  });
});

// ---------------------------------------------------------------------------------------------
// Strings: simple_string, and simple_identity with NUL bytes
// ---------------------------------------------------------------------------------------------

describe('the string clients', () => {
  const decimal = (v: ArrayLike<number>) => Array.from(v, (x) => bytes(String(x)));
  const toInt = (e: Uint8Array | string) => Number.parseInt(typeof e === 'string' ? e : new TextDecoder().decode(e), 10);
  const STRING_INPUTS = (binary: [boolean, boolean]): PyInput[] => [
    { name: 'INPUT0', shape: [1, 16], datatype: 'BYTES', data: decimal(IN0), binary: binary[0] },
    { name: 'INPUT1', shape: [1, 16], datatype: 'BYTES', data: decimal(ONES), binary: binary[1] },
  ];
  const expectStringAddSub = (r: PyResult) => {
    expect((r.asNumpy('OUTPUT0') as (Uint8Array | string)[]).map(toInt)).toEqual(Array.from(IN0, (a) => a + 1));
    expect((r.asNumpy('OUTPUT1') as (Uint8Array | string)[]).map(toInt)).toEqual(Array.from(IN0, (a) => a - 1));
  };
  // "he\x00llo" 16 times, and the 4-byte blob 00 01 02 03 16 times, as [1, 16] BYTES.
  const NULS = Array.from({ length: 16 }, () => bytes('he\u0000llo'));
  const BLOBS = Array.from({ length: 16 }, () => Uint8Array.of(0, 1, 2, 3));
  const same = (got: NumpyResult | undefined, want: Uint8Array[]) =>
    expect((got as (Uint8Array | string)[]).map((e) => Array.from(typeof e === 'string' ? bytes(e) : e))).toEqual(want.map((e) => Array.from(e)));

  it('simple_http_string_infer_client', async () => {
    expectStringAddSub(await http.infer('simple_string', STRING_INPUTS([true, false]), {
      outputs: [{ name: 'OUTPUT0', binary: true }, { name: 'OUTPUT1', binary: false }],
    }));
    for (const data of [NULS, BLOBS]) {
      for (const binary of [true, false]) {
        const r = await http.infer('simple_identity', [{ name: 'INPUT0', shape: [1, 16], datatype: 'BYTES', data, binary }], {
          outputs: [{ name: 'OUTPUT0', binary }],
        });
        expect(r.getOutput('OUTPUT0')).toMatchObject({ datatype: 'BYTES', shape: [1, 16] });
        same(r.asNumpy('OUTPUT0'), data);
      }
    }
  });

  it('simple_grpc_string_infer_client', async () => {
    expectStringAddSub(await grpcInfer(rpc, 'simple_string', STRING_INPUTS([true, true]), { outputs: OUTPUTS }));
    for (const data of [NULS, BLOBS]) {
      const r = await grpcInfer(rpc, 'simple_identity', [{ name: 'INPUT0', shape: [1, 16], datatype: 'BYTES', data }], { outputs: [{ name: 'OUTPUT0' }] });
      same(r.asNumpy('OUTPUT0'), data);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Sequences: simple_sequence, and with --dyna simple_dyna_sequence + simple_string_dyna_sequence
// ---------------------------------------------------------------------------------------------

type SequenceTransport = 'http sync' | 'grpc sync' | 'grpc stream' | 'grpc aio stream';
const VALUES = [11, 7, 5, 3, 2, 0, 1];

/**
 * The sequence clients: three sequences of 8 requests — ids 1000 and 1001 on the int model, and a
 * string id on the string model (a UUID on simple_sequence, or "1002" on simple_string_dyna_sequence
 * with --dyna) — then the clients' shared check of every step.
 */
async function runSequenceClient(transport: SequenceTransport, dyna: boolean): Promise<void> {
  const intModel = dyna ? 'simple_dyna_sequence' : 'simple_sequence';
  const stringModel = dyna ? 'simple_string_dyna_sequence' : 'simple_sequence';
  const [id0, id1] = [1000, 1001];
  const stringId = dyna ? '1002' : randomUUID();
  const sequences = [
    { id: id0 as number | string, model: intModel, values: [0, ...VALUES] },
    { id: id1 as number | string, model: intModel, values: [100, ...VALUES.map((v) => 0 - v)] },
    { id: stringId as number | string, model: stringModel, values: [20, ...VALUES.map((v) => 0 - v)] },
  ];
  const stream = transport.includes('stream');
  const requests = sequences.flatMap((s) => s.values.map((value, k) => ({
    model: s.model,
    inputs: [{ name: 'INPUT', shape: [1, 1], datatype: 'INT32', data: Int32Array.of(value) }] as PyInput[],
    opts: {
      outputs: [{ name: 'OUTPUT' }], sequenceId: s.id, sequenceStart: k === 0, sequenceEnd: k === s.values.length - 1,
      ...(stream ? { requestId: `${s.id}_${k + 1}` } : {}),
    } as PyInferOptions,
  })));
  const results: number[][] = [[], [], []];
  const first = (r: PyResult) => (r.asNumpy('OUTPUT') as Int32Array)[0]!;

  if (!stream) {
    // sync_send: one sequence after the other, each request waiting for its answer.
    for (const r of requests) {
      const result = transport === 'http sync' ? await http.infer(r.model, r.inputs, r.opts) : await grpcInfer(rpc, r.model, r.inputs, r.opts);
      results[sequences.findIndex((s) => s.id === r.opts.sequenceId)]!.push(first(result));
    }
  } else {
    // Every request goes on one stream at once; answers are sorted by the sequence id in their request id.
    const call = rpc.stream();
    const messages: Obj[] = [];
    let onMessage = () => {};
    const ended = new Promise<void>((resolve, reject) => {
      call.on('data', (m: Obj) => {
        messages.push(m);
        onMessage();
      });
      call.on('end', resolve);
      call.on('error', reject);
    });
    for (const r of requests) call.write(grpcInferRequest(r.model, r.inputs, r.opts));
    if (transport === 'grpc aio stream') {
      // stream_infer over an async request iterator: the stream half-closes when the iterator is spent.
      call.end();
      await ended;
    } else {
      // start_stream + async_stream_infer: read the 24 answers, then leave the `with` block (stop_stream).
      await new Promise<void>((resolve) => {
        onMessage = () => messages.length >= requests.length && resolve();
        onMessage();
      });
      call.end();
      await ended;
    }
    expect(messages).toHaveLength(requests.length);
    for (const m of messages) {
      if (m.error_message) throw new PyServerError(m.error_message, 'stream');
      const thisId: string = m.infer_response.id.split('_')[0];
      const value = first(grpcResult(m.infer_response));
      // int(this_id) raises ValueError for a UUID: those answers belong to the string sequence.
      if (!/^\s*[+-]?\d+\s*$/.test(thisId)) results[2]!.push(value);
      else if (Number(thisId) === id0) results[0]!.push(value);
      else if (Number(thisId) === id1) results[1]!.push(value);
      else if (thisId === stringId) results[2]!.push(value);
      else expect.fail(`unexpected sequence id returned by the server: ${thisId}`);
    }
  }

  const [int0, int1, str0] = results as [number[], number[], number[]];
  for (let i = 0; i < int0.length; i++) {
    let want0 = i === 0 ? 1 : VALUES[i - 1]!;
    // (Python ints: -1 * 0 is 0, not JavaScript's -0.)
    const negated = i === 0 ? 0 : 0 - VALUES[i - 1]!;
    let want1 = i === 0 ? 101 : negated;
    let wantStr: number;
    if (i === 0) wantStr = dyna ? 20 : 21;
    else wantStr = dyna ? negated + str0[i - 1]! : negated;
    // The dyna models add the correlation id to the last request of a sequence.
    if (dyna && i !== 0 && VALUES[i - 1] === 1) {
      want0 += id0;
      want1 += id1;
      wantStr += Number.parseInt(stringId, 10);
    }
    expect([i, int0[i], int1[i], str0[i]], '[ expected ]').toEqual([i, want0, want1, wantStr]);
  }
  expect(int0).toHaveLength(8);
}

describe('the sequence clients', () => {
  const clients: [string, SequenceTransport][] = [
    ['simple_http_sequence_sync_infer_client', 'http sync'],
    ['simple_grpc_sequence_sync_infer_client', 'grpc sync'],
    ['simple_grpc_sequence_stream_infer_client', 'grpc stream'],
    ['simple_grpc_aio_sequence_stream_infer_client', 'grpc aio stream'],
  ];
  for (const [name, transport] of clients) {
    it(name, () => runSequenceClient(transport, false), 30_000);
    it(`${name} --dyna`, () => runSequenceClient(transport, true), 30_000);
  }
});

// ---------------------------------------------------------------------------------------------
// Decoupled: repeat_int32
// ---------------------------------------------------------------------------------------------

describe('the decoupled client', () => {
  it('simple_grpc_custom_repeat', async () => {
    // One request: IN = 100..109, DELAY = 1000 ms each, WAIT = 1000 ms; ten responses, OUT in order.
    const [repeatCount, dataOffset, delayTime, waitTime] = [10, 100, 1000, 1000];
    const inputs: PyInput[] = [
      { name: 'IN', shape: [repeatCount], datatype: 'INT32', data: Int32Array.from({ length: repeatCount }, (_, i) => dataOffset + i) },
      { name: 'DELAY', shape: [repeatCount], datatype: 'UINT32', data: new Uint32Array(repeatCount).fill(delayTime) },
      { name: 'WAIT', shape: [1], datatype: 'UINT32', data: Uint32Array.of(waitTime) },
    ];
    const call = rpc.stream();
    const received: Obj[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      call.on('data', (m: Obj) => received.push(m));
      call.on('end', resolve);
      call.on('error', reject);
    });
    const t0 = performance.now();
    call.write(grpcInferRequest('repeat_int32', inputs, { outputs: [{ name: 'OUT' }] }));
    await expect.poll(() => received.length, { timeout: 20_000, interval: 50 }).toBe(repeatCount);
    const ms = performance.now() - t0;
    call.end();
    await ended;
    // The client reads exactly repeat_count responses; nothing else (no error, no empty final) follows.
    expect(received).toHaveLength(repeatCount);
    let expected = dataOffset;
    for (const m of received) {
      expect(m.error_message).toBe('');
      const out = grpcResult(m.infer_response).asNumpy('OUT') as Int32Array;
      expect(out).toHaveLength(1);
      expect(out[0]).toBe(expected++);
      // Only OUT was asked for.
      expect(m.infer_response.outputs.map((o: Obj) => o.name)).toEqual(['OUT']);
    }
    expect(ms).toBeGreaterThanOrEqual(repeatCount * delayTime - 50);
  }, 30_000);
});

// ---------------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------------

describeWith(!!process.env.CI, '/dev/shm', SHM_AVAILABLE ? undefined : `no /dev/shm on ${process.platform}`)('the system shared-memory clients', () => {
  // The clients' keys ("/input_simple", ...), tagged so that parallel test files never share an object.
  const key = (k: string) => `/${k.slice(1)}-${process.pid}`;
  const i32 = (a: Int32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  type Proto = 'http' | 'grpc';
  const register = (p: Proto, name: string, k: string, size: number) => (p === 'http'
    ? http.registerSystemSharedMemory(name, k, size)
    : grpcCall('SystemSharedMemoryRegister', { name, key: k, offset: 0, byte_size: size }));
  const unregisterAll = async (p: Proto) => {
    if (p === 'http') {
      await http.unregisterSystemSharedMemory();
      await http.unregisterCudaSharedMemory();
    } else {
      await grpcCall('SystemSharedMemoryUnregister', { name: '' });
      await grpcCall('CudaSharedMemoryUnregister', { name: '' });
    }
  };
  const infer = (p: Proto, model: string, inputs: PyInput[], opts: PyInferOptions) =>
    (p === 'http' ? http.infer(model, inputs, opts) : grpcInfer(rpc, model, inputs, opts));
  const status = async (p: Proto) => (p === 'http'
    ? (await http.get('v2/systemsharedmemory/status')).map((r: Obj) => r.name)
    : Object.keys((await grpcCall('SystemSharedMemoryStatus', { name: '' })).regions));

  for (const p of ['http', 'grpc'] as const) {
    it(`simple_${p}_shm_client`, async () => {
      await unregisterAll(p);
      const [inKey, outKey] = [key('/input_simple'), key('/output_simple')];
      const size = IN0.byteLength;
      try {
        createShm(outKey, size * 2);
        await register(p, 'output_data', outKey, size * 2);
        createShm(inKey, size * 2);
        setShm(inKey, [i32(IN0)]);
        setShm(inKey, [i32(ONES)], size);
        await register(p, 'input_data', inKey, size * 2);
        const r = await infer(p, 'simple', [
          { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', shm: { region: 'input_data', byteSize: size } },
          { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', shm: { region: 'input_data', byteSize: size, offset: size } },
        ], {
          outputs: [
            { name: 'OUTPUT0', binary: true, shm: { region: 'output_data', byteSize: size } },
            { name: 'OUTPUT1', binary: true, shm: { region: 'output_data', byteSize: size, offset: size } },
          ],
        });
        const o0 = r.getOutput('OUTPUT0');
        const o1 = r.getOutput('OUTPUT1');
        expect(o0, 'OUTPUT0 is missing in the response.').toBeDefined();
        expect(o1, 'OUTPUT1 is missing in the response.').toBeDefined();
        const sum = shmAsNumpy(outKey, o0!.datatype, o0!.shape) as Int32Array;
        const diff = shmAsNumpy(outKey, o1!.datatype, o1!.shape, size) as Int32Array;
        expect(Array.from(sum)).toEqual(Array.from(IN0, (a, i) => a + ONES[i]!));
        expect(Array.from(diff)).toEqual(Array.from(IN0, (a, i) => a - ONES[i]!));
        expect((await status(p)).sort()).toEqual(['input_data', 'output_data']);
        await unregisterAll(p);
        expect(await status(p)).toEqual([]);
      } finally {
        destroyShm(inKey);
        destroyShm(outKey);
      }
    });

    it(`simple_${p}_shm_string_client`, async () => {
      await unregisterAll(p);
      const text = (v: ArrayLike<number>) => Array.from(v, (x) => bytes(String(x)));
      const [in0, in1] = [serializeByteTensor(text(IN0)), serializeByteTensor(text(ONES))];
      const expectedSum = text(Array.from(IN0, (a, i) => a + ONES[i]!));
      const expectedDiff = text(Array.from(IN0, (a, i) => a - ONES[i]!));
      const [out0Size, out1Size] = [serializeByteTensor(expectedSum).byteLength, serializeByteTensor(expectedDiff).byteLength];
      const keys = ['/output0_simple', '/output1_simple', '/input0_simple', '/input1_simple'].map(key);
      const [out0Key, out1Key, in0Key, in1Key] = keys as [string, string, string, string];
      try {
        createShm(out0Key, out0Size);
        createShm(out1Key, out1Size);
        await register(p, 'output0_data', out0Key, out0Size);
        await register(p, 'output1_data', out1Key, out1Size);
        createShm(in0Key, in0.byteLength);
        createShm(in1Key, in1.byteLength);
        setShm(in0Key, [in0]);
        setShm(in1Key, [in1]);
        await register(p, 'input0_data', in0Key, in0.byteLength);
        await register(p, 'input1_data', in1Key, in1.byteLength);
        const r = await infer(p, 'simple_string', [
          { name: 'INPUT0', shape: [1, 16], datatype: 'BYTES', shm: { region: 'input0_data', byteSize: in0.byteLength } },
          { name: 'INPUT1', shape: [1, 16], datatype: 'BYTES', shm: { region: 'input1_data', byteSize: in1.byteLength } },
        ], {
          outputs: [
            { name: 'OUTPUT0', binary: true, shm: { region: 'output0_data', byteSize: out0Size } },
            { name: 'OUTPUT1', binary: true, shm: { region: 'output1_data', byteSize: out1Size } },
          ],
        });
        const o0 = r.getOutput('OUTPUT0')!;
        const o1 = r.getOutput('OUTPUT1')!;
        expect(o0.datatype).toBe('BYTES');
        const got0 = shmAsNumpy(out0Key, o0.datatype, o0.shape) as Uint8Array[];
        const got1 = shmAsNumpy(out1Key, o1.datatype, o1.shape) as Uint8Array[];
        expect(got0.map((e) => Array.from(e))).toEqual(expectedSum.map((e) => Array.from(e)));
        expect(got1.map((e) => Array.from(e))).toEqual(expectedDiff.map((e) => Array.from(e)));
        expect((await status(p)).sort()).toEqual(['input0_data', 'input1_data', 'output0_data', 'output1_data']);
        await unregisterAll(p);
      } finally {
        keys.forEach(destroyShm);
      }
    });

    it(`reuse_infer_objects_client -i ${p}`, async () => {
      await unregisterAll(p);
      const size = IN0.byteLength;
      const keys = ['/output0_simple', '/output1_simple', '/input0_simple', '/input1_simple'].map(key);
      const [out0Key, out1Key, in0Key, in1Key] = keys as [string, string, string, string];
      try {
        for (const k of keys) createShm(k, size);
        await register(p, 'output0_data', out0Key, size);
        await register(p, 'output1_data', out1Key, size);
        setShm(in0Key, [i32(IN0)]);
        setShm(in1Key, [i32(ONES)]);
        await register(p, 'input0_data', in0Key, size);
        await register(p, 'input1_data', in1Key, size);
        // The same InferInput/InferRequestedOutput objects switched between shared memory and data.
        for (const useShm of [true, false, true]) {
          const in1 = useShm ? ONES : ONES.map((v) => v * 2);
          const r = await infer(p, 'simple', useShm
            ? [
              { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', shm: { region: 'input0_data', byteSize: size } },
              { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', shm: { region: 'input1_data', byteSize: size } },
            ]
            : int32Inputs(IN0, in1), {
            outputs: useShm
              ? [{ name: 'OUTPUT0', shm: { region: 'output0_data', byteSize: size } }, { name: 'OUTPUT1', shm: { region: 'output1_data', byteSize: size } }]
              : OUTPUTS,
          });
          const o0 = r.getOutput('OUTPUT0');
          const o1 = r.getOutput('OUTPUT1');
          expect(o0 && o1).toBeTruthy();
          const sum = useShm ? shmAsNumpy(out0Key, o0!.datatype, o0!.shape) : r.asNumpy('OUTPUT0');
          const diff = useShm ? shmAsNumpy(out1Key, o1!.datatype, o1!.shape) : r.asNumpy('OUTPUT1');
          expect(Array.from(sum as Int32Array)).toEqual(Array.from(IN0, (a, i) => a + in1[i]!));
          expect(Array.from(diff as Int32Array)).toEqual(Array.from(IN0, (a, i) => a - in1[i]!));
        }
        await unregisterAll(p);
      } finally {
        keys.forEach(destroyShm);
      }
    });
  }
});

// ---------------------------------------------------------------------------------------------
// The image clients, on tsi's own image_classifier (Triton's examples use downloaded models)
// ---------------------------------------------------------------------------------------------

describe('the image clients with -m image_classifier', () => {
  /** parse_model: one input and output, FP32 vector output, a 3-D image input in NCHW or NHWC. */
  function parseModel(meta: Obj, config: Obj) {
    expect(meta.inputs).toHaveLength(1);
    expect(meta.outputs).toHaveLength(1);
    expect(config.input).toHaveLength(1);
    expect(meta.outputs[0].datatype).toBe('FP32');
    const batching = Number(config.max_batch_size) > 0;
    const outDims = meta.outputs[0].shape.map(Number).slice(batching ? 1 : 0);
    expect(outDims.filter((d: number) => d > 1).length, 'expecting model output to be a vector').toBeLessThanOrEqual(1);
    const shape = meta.inputs[0].shape.map(Number).slice(batching ? 1 : 0);
    expect(shape).toHaveLength(3);
    const format = config.input[0].format;
    expect(['FORMAT_NCHW', 'FORMAT_NHWC']).toContain(format);
    const [c, h, w] = format === 'FORMAT_NHWC' ? [shape[2], shape[0], shape[1]] : shape;
    return { batching, input: meta.inputs[0].name as string, output: meta.outputs[0].name as string, c, h, w, format, datatype: meta.inputs[0].datatype as string };
  }

  /** The picture after preprocess (resized to w×h, RGB, --scaling NONE): white in the 'cat' block (top right), black elsewhere. */
  function picture(m: { c: number; h: number; w: number; format: string }): Float32Array {
    const out = new Float32Array(m.c * m.h * m.w);
    for (let y = 0; y < 4; y++) {
      for (let x = 12; x < 16; x++) {
        for (let ch = 0; ch < m.c; ch++) out[m.format === 'FORMAT_NHWC' ? (y * m.w + x) * m.c + ch : ch * m.h * m.w + y * m.w + x] = 255;
      }
    }
    return out;
  }

  /** postprocess: one row per image, each "value:index:label". */
  function postprocess(results: Uint8Array[], classes: number): string[][] {
    expect(results).toHaveLength(classes);
    return results.map((r) => {
      const cls = String.fromCharCode(...r).split(':');
      expect(cls).toHaveLength(3);
      return cls;
    });
  }

  for (const protocol of ['http', 'grpc'] as const) {
    it(`image_client -m image_classifier -c 3${protocol === 'grpc' ? ' -i grpc' : ''}`, async () => {
      const meta = protocol === 'http' ? await http.get('v2/models/image_classifier') : await grpcCall('ModelMetadata', { name: 'image_classifier', version: '' });
      const config = protocol === 'http' ? await http.get('v2/models/image_classifier/config') : (await grpcCall('ModelConfig', { name: 'image_classifier', version: '' })).config;
      const m = parseModel(meta, config);
      expect(m.batching).toBe(true);
      const shape = [1, ...(m.format === 'FORMAT_NHWC' ? [m.h, m.w, m.c] : [m.c, m.h, m.w])];
      const inputs: PyInput[] = [{ name: m.input, shape, datatype: m.datatype, data: picture(m) }];
      // InferRequestedOutput(output_name, class_count=3): HTTP asks for it in binary.
      const outputs = [{ name: m.output, classCount: 3 }];
      const result = protocol === 'http' ? await http.infer('image_classifier', inputs, { outputs }) : await grpcInfer(rpc, 'image_classifier', inputs, { outputs });
      const rows = result.asNumpy(m.output) as Uint8Array[];
      expect(result.getOutput(m.output)!.shape.map(Number)).toEqual([1, 3]);
      const top = postprocess(rows, 3);
      expect(top[0]![2]).toBe('cat');
    });
  }

  it('grpc_image_client -m image_classifier -c 3', async () => {
    const meta = await grpcCall('ModelMetadata', { name: 'image_classifier', version: '' });
    const m = parseModel(meta, (await grpcCall('ModelConfig', { name: 'image_classifier', version: '' })).config);
    const image = picture(m);
    const response = await grpcCall('ModelInfer', {
      model_name: 'image_classifier', model_version: '',
      outputs: [{ name: m.output, parameters: { classification: { int64_param: '3' } } }],
      inputs: [{ name: m.input, datatype: m.datatype, shape: [1, m.c, m.h, m.w] }],
      raw_input_contents: [Buffer.from(image.buffer)],
    });
    const contents = deserializeBytesTensor(new Uint8Array(response.raw_output_contents[0]));
    expect(postprocess(contents, 3)[0]![2]).toBe('cat');
  });
});

// ---------------------------------------------------------------------------------------------
// memory_growth_test: custom_identity_int32, a new client per inference
// ---------------------------------------------------------------------------------------------

describe('memory_growth_test', () => {
  // As Triton's L0 memory-growth tests do, the loop runs against a server process of its own, measured
  // after a warm-up and again after the measured loop: a new client per inference must not make the
  // server hold more (connections, streams, requests kept). Triton's test reads the heap (massif); here
  // the server's V8 heap after two full collections (on SIGUSR2, a hook this test's launcher adds to the
  // server process), which is steady to ~1 MB whatever else the machine runs, and resident memory with a
  // looser bound for what lives outside the heap.
  const warmUp = 600;
  const repetitions = 1200;
  /** Heap growth allowed over the measured loop: a 4 KB leak a request (~5 MB) fails it. */
  const MAX_HEAP_GROWTH_MB = 3;
  /** RSS growth allowed (a loaded run shows up to +22 MB from the allocator and V8's lazy old generation). */
  const MAX_GROWTH_MB = 32;
  const input: PyInput[] = [{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: IN0 }];
  const check = (r: PyResult) => {
    const out = r.asNumpy('OUTPUT0');
    expect(out).toBeInstanceOf(Int32Array);
    expect(r.getOutput('OUTPUT0')!.shape.map(Number)).toEqual([1, 16]);
    expect(Array.from(out as Int32Array)).toEqual(Array.from(IN0));
  };
  let own: { child: ChildProcess; url: string; grpc: string; err: () => string } | undefined;
  const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${own!.child.pid}/status`, 'utf8'))![1]) / 1024;

  beforeAll(async () => {
    const args = ['serve', '--model-repository', MODELS, '--model-control-mode', 'explicit', '--load-model', 'custom_identity_int32',
      '--http-port', '0', '--http-address', '127.0.0.1', '--grpc-port', '0', '--grpc-address', '127.0.0.1', '--allow-metrics', 'false'];
    const hook = `process.on('SIGUSR2', () => { gc(); gc(); const m = process.memoryUsage(); process.stderr.write('heap-after-gc ' + (m.heapUsed + m.external) + '\\n'); });`;
    const code = `${hook} import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    await new Promise<void>((resolve, reject) => {
      child.stderr!.on('data', (d) => {
        err += d;
        if (/Started HTTPService at/.test(err) && /Started GRPCInferenceService at/.test(err)) resolve();
      });
      child.once('exit', (c) => reject(new Error(`the server exited (${c}): ${err}`)));
    });
    own = {
      child,
      err: () => err,
      url: `http://127.0.0.1:${/Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err)![1]}`,
      grpc: `127.0.0.1:${/Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/.exec(err)![1]}`,
    };
  }, 60_000);
  afterAll(() => {
    own?.child.kill('SIGKILL');
  });

  /** The server's heap after full collections, in MB. */
  const heapMb = async () => {
    const seen = (own!.err().match(/heap-after-gc \d+/g) ?? []).length;
    own!.child.kill('SIGUSR2');
    for (let i = 0; i < 200; i++) {
      const all = own!.err().match(/heap-after-gc (\d+)/g) ?? [];
      if (all.length > seen) return Number(all[all.length - 1]!.split(' ')[1]) / 2 ** 20;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error('the server did not answer SIGUSR2 with its heap');
  };
  const measured = async (one: () => Promise<void>) => {
    for (let i = 0; i < warmUp; i++) await one();
    const [heap, before] = [await heapMb(), rssMb()];
    for (let i = 0; i < repetitions; i++) await one();
    const heapGrowth = (await heapMb()) - heap;
    const growth = rssMb() - before;
    expect(heapGrowth, `server heap grew ${heapGrowth.toFixed(2)} MB over ${repetitions} inferences`).toBeLessThan(MAX_HEAP_GROWTH_MB);
    expect(growth, `server RSS grew ${growth.toFixed(1)} MB over ${repetitions} inferences`).toBeLessThan(MAX_GROWTH_MB);
  };

  it.runIf(process.platform === 'linux')('memory_growth_test -i http', async () => {
    await measured(async () => check(await new PyHttpClient(own!.url).infer('custom_identity_int32', input, { outputs: [{ name: 'OUTPUT0' }] })));
  }, 120_000);

  it.runIf(process.platform === 'linux')('memory_growth_test -i grpc', async () => {
    await measured(async () => {
      const client = grpcClient(own!.grpc);
      try {
        check(await grpcInfer(client, 'custom_identity_int32', input, { outputs: [{ name: 'OUTPUT0' }] }));
      } finally {
        client.close();
      }
    });
  }, 120_000);
});

// ---------------------------------------------------------------------------------------------
// Model control: explicit mode, over a repository of the size each client counts
// ---------------------------------------------------------------------------------------------

describe('the model-control clients', () => {
  /**
   * The clients count the repository index (7 over HTTP, 8 over gRPC: Triton's QA repositories), then
   * load `simple`, reload it with a bad and a good config override, unload it, and load an unknown
   * model. The repository here is `simple` plus empty folders up to the count.
   */
  async function explicitServer(models: number): Promise<{ s: TestServer; repo: string }> {
    const repo = mkdtempSync(join(tmpdir(), 'tsi-model-control-'));
    cpSync(join(MODELS, 'simple'), join(repo, 'simple'), { recursive: true });
    for (let i = 1; i < models; i++) mkdirSync(join(repo, `unused_${i}`));
    const s = await startTestServer({ modelRepositories: [repo], modelControlMode: 'explicit', grpcPort: 0, grpcAddress: '127.0.0.1' });
    return { s, repo };
  }

  it('simple_http_model_control', async () => {
    const { s, repo } = await explicitServer(7);
    try {
      const c = new PyHttpClient(s.url);
      expect(await c.post('v2/repository/index')).toHaveLength(7);
      await c.post('v2/repository/models/simple/load');
      expect(await c.ok('v2/models/simple/ready')).toBe(true);
      const bad = await c.post('v2/repository/models/simple/load', { parameters: { config: '"parameters": {"config": {{"max_batch_size": "16"}}}' } })
        .catch((e: PyServerError) => e);
      expect(bad, 'Expect error occurs for invalid override config.').toBeInstanceOf(PyServerError);
      expect((bad as PyServerError).message).toContain('failed to load');
      await c.post('v2/repository/models/simple/load', { parameters: { config: '{"max_batch_size":"16"}' } });
      expect((await c.get('v2/models/simple/config')).max_batch_size).toBe(16);
      await c.post('v2/repository/models/simple/unload', { parameters: { unload_dependents: false } });
      expect(await c.ok('v2/models/simple/ready')).toBe(false);
      const wrong = await c.post('v2/repository/models/wrong_model_name/load').catch((e: PyServerError) => e);
      expect((wrong as PyServerError).message).toContain('failed to load');
    } finally {
      await s.stop();
      rmSync(repo, { recursive: true, force: true });
    }
  }, 60_000);

  it('simple_grpc_model_control', async () => {
    const { s, repo } = await explicitServer(8);
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    const call = (m: string, r: Obj) => grpcCall(m, r, undefined, c);
    const load = (config?: string, files?: Record<string, Buffer>) => call('RepositoryModelLoad', {
      repository_name: '', model_name: 'simple', parameters: {
        ...(config !== undefined ? { config: { string_param: config } } : {}),
        ...Object.fromEntries(Object.entries(files ?? {}).map(([k, v]) => [k, { bytes_param: v }])),
      },
    });
    try {
      expect((await call('RepositoryIndex', { repository_name: '', ready: false })).models).toHaveLength(8);
      await load();
      expect((await call('ModelReady', { name: 'simple', version: '' })).ready).toBe(true);
      const bad = await load('"parameters": {"config": {{"max_batch_size": "16"}}}').catch((e: PyServerError) => e);
      expect(bad, 'Expect error occurs for invalid override config.').toBeInstanceOf(PyServerError);
      expect((bad as PyServerError).message).toContain('failed to load');
      await load('{"max_batch_size":"16"}');
      expect((await call('ModelConfig', { name: 'simple', version: '' })).config.max_batch_size).toBe(16);
      await call('RepositoryModelUnload', { repository_name: '', model_name: 'simple', parameters: { unload_dependents: { bool_param: false } } });
      expect((await call('ModelReady', { name: 'simple', version: '' })).ready).toBe(false);
      // A file parameter with a 256-character name: INTERNAL "failed to poll from model repository", server still live.
      const long = await load('{}', { [`file:${'A'.repeat(256)}`]: Buffer.from('a') }).catch((e: PyServerError) => e);
      expect(long).toBeInstanceOf(PyServerError);
      expect((long as PyServerError).status).toBe('INTERNAL');
      expect((long as PyServerError).message).toContain('failed to poll from model repository');
      expect((await call('ServerLive', {})).live).toBe(true);
      const wrong = await call('RepositoryModelLoad', { repository_name: '', model_name: 'wrong_model_name', parameters: {} })
        .catch((e: PyServerError) => e);
      expect((wrong as PyServerError).message).toContain('failed to load');
    } finally {
      c.close();
      await s.stop();
      rmSync(repo, { recursive: true, force: true });
    }
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// The example models' own contracts, beyond what the clients check
// ---------------------------------------------------------------------------------------------

describe('the example models', () => {
  it('simple_identity gives back NUL and non-UTF-8 bytes exactly, over HTTP binary and gRPC', async () => {
    const data = [Uint8Array.of(0), Uint8Array.of(0xff, 0xfe, 0, 0x80), new Uint8Array(0), bytes('a\u0000b\u0000'), Uint8Array.of(0xc3, 0x28)];
    const inputs: PyInput[] = [{ name: 'INPUT0', shape: [1, 5], datatype: 'BYTES', data }];
    const viaHttp = await http.infer('simple_identity', inputs, { outputs: [{ name: 'OUTPUT0', binary: true }] });
    const viaGrpc = await grpcInfer(rpc, 'simple_identity', inputs);
    for (const r of [viaHttp, viaGrpc]) {
      expect((r.asNumpy('OUTPUT0') as Uint8Array[]).map((e) => Array.from(e))).toEqual(data.map((e) => Array.from(e)));
    }
    // A batch of two rows keeps its shape.
    const batch = await grpcInfer(rpc, 'simple_identity', [{ name: 'INPUT0', shape: [2, 2], datatype: 'BYTES', data: data.slice(0, 4) }]);
    expect(batch.getOutput('OUTPUT0')!.shape.map(Number)).toEqual([2, 2]);
  });

  const step = (model: string, id: number | string, value: number, start: boolean, end: boolean) =>
    http.infer(model, [{ name: 'INPUT', shape: [1, 1], datatype: 'INT32', data: Int32Array.of(value) }], {
      outputs: [{ name: 'OUTPUT' }], sequenceId: id, sequenceStart: start, sequenceEnd: end,
    }).then((r) => (r.asNumpy('OUTPUT') as Int32Array)[0]);

  it('simple_sequence is stateless: READY * (INPUT + START), for any id', async () => {
    expect(await step('simple_sequence', 'abc', 5, true, false)).toBe(6);
    expect(await step('simple_sequence', 'abc', 5, false, false)).toBe(5);
    expect(await step('simple_sequence', 'abc', -3, false, true)).toBe(-3);
    expect(await step('simple_sequence', 2 ** 40, 2147483647, true, true)).toBe(-2147483648);
  });

  it('simple_dyna_sequence adds int32(CORRID) on END and refuses string ids', async () => {
    expect(await step('simple_dyna_sequence', 7, 1, true, false)).toBe(2);
    expect(await step('simple_dyna_sequence', 7, 1, false, true)).toBe(8);
    // A one-request sequence gets START and END; the id is truncated to 32 bits.
    expect(await step('simple_dyna_sequence', 2 ** 32 + 5, 10, true, true)).toBe(16);
    const str = await step('simple_dyna_sequence', 'abc', 1, true, false).catch((e: PyServerError) => e);
    expect((str as PyServerError).message).toMatch(/sequence batching control 'CORRID' data-type is 'BYTES', but model '[a-z_]+' expects 'UINT64'/);
  });

  it('simple_string_dyna_sequence accumulates per string id, adds it on END, and refuses ids that are not integers', async () => {
    const [a, b] = ['31', '  -4'];
    expect(await step('simple_string_dyna_sequence', a, 10, true, false)).toBe(10);
    expect(await step('simple_string_dyna_sequence', b, 1, true, false)).toBe(1);
    expect(await step('simple_string_dyna_sequence', a, 5, false, false)).toBe(15);
    expect(await step('simple_string_dyna_sequence', b, 2, false, true)).toBe(3 - 4);
    expect(await step('simple_string_dyna_sequence', a, 0, false, true)).toBe(15 + 31);
    // Restarted after END: START resets the accumulator.
    expect(await step('simple_string_dyna_sequence', a, 2, true, true)).toBe(2 + 31);
    const bad = await step('simple_string_dyna_sequence', 'not-a-number', 1, true, true).catch((e: PyServerError) => e);
    expect(bad).toMatchObject({ status: 400, message: 'dyna sequence backend expects correlation ID to be decodable into an integer' });
  });

  it('repeat_int32 interleaves streams when WAIT is shorter than the delays, ends empty ones at once, and checks shapes', async () => {
    const request = (id: string, values: number[], delays: number[], wait: number, shape?: number[]) => grpcInferRequest('repeat_int32', [
      { name: 'IN', shape: [values.length], datatype: 'INT32', data: Int32Array.from(values) },
      { name: 'DELAY', shape: shape ?? [delays.length], datatype: 'UINT32', data: Uint32Array.from(delays) },
      { name: 'WAIT', shape: [1], datatype: 'UINT32', data: Uint32Array.of(wait) },
    ], { requestId: id });
    const call = rpc.stream();
    const got: string[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      call.on('data', (m: Obj) => {
        if (m.error_message) return got.push(`error ${m.error_message}`);
        const r = grpcResult(m.infer_response);
        got.push(`${m.infer_response.id}:${(r.asNumpy('OUT') as Int32Array)[0]}@${(r.asNumpy('IDX') as Uint32Array)[0]}`);
      });
      call.on('end', resolve);
      call.on('error', reject);
    });
    // One instance, WAIT 0: the second request runs while the first still streams.
    call.write(request('a', [1, 2, 3], [0, 300, 300], 0));
    call.write(request('b', [7, 8], [150, 300], 0));
    call.write(request('c', [], [], 0));
    call.write(request('d', [1, 2], [0], 0));
    call.end();
    await ended;
    expect(got.filter((g) => g.startsWith('a') || g.startsWith('b'))).toEqual(['a:1@0', 'b:7@0', 'a:2@1', 'b:8@1', 'a:3@2']);
    expect(got).toContain('error expected IN and DELAY shape to match, got [2] and [1]');
    expect(got).toHaveLength(6);
  }, 20_000);

  it('custom_identity_int32 returns its input for any length and batch', async () => {
    const data = Int32Array.from({ length: 12 }, (_, i) => (i - 6) * 1_000_003);
    for (const shape of [[1, 0], [3, 4], [1, 12]]) {
      const n = shape[0]! * shape[1]!;
      const r = await grpcInfer(rpc, 'custom_identity_int32', [{ name: 'INPUT0', shape, datatype: 'INT32', data: data.subarray(0, n) }]);
      expect(r.getOutput('OUTPUT0')!.shape.map(Number)).toEqual(shape);
      expect(Array.from((r.asNumpy('OUTPUT0') as Int32Array | undefined) ?? [])).toEqual(Array.from(data.subarray(0, n)));
    }
  });
});
