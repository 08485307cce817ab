/**
 * gRPC as a hostile or careless client uses it: bytes that are not the message they claim to be
 * (INVALID_ARGUMENT naming the message, never grpc-js's INTERNAL "Error deserializing request"),
 * parameters of the wrong type and reserved `triton_` keys (Triton's infer_handler.cc texts), tensor
 * descriptions that cannot be (wildcard, negative or overflowing dimensions, wrong byte counts), and a
 * stream whose client stops reading, which must not make the server buffer without bound. After each,
 * the server still answers correctly.
 */

import * as grpc from '@grpc/grpc-js';
import * as http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STREAM_LIMITS, loadProtos } from '../../runtime-node/grpc/server.js';
import { fromRaw, grpcClient, int32Raw, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { ECHO_REQUEST_FILES, echoRequestBackend } from '../helpers/echo-request.js';
import { MODELS, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const MIB_FLOATS = 262_144;
const repo = tempRepo({
  ...ECHO_REQUEST_FILES,
  'big/config.pbtxt': `name: "big"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ ${MIB_FLOATS} ] }]\n`,
  'big/1/model.js': `export default class {
    execute(requests) {
      return requests.map((r) => ({ outputs: { Y: new Float32Array(${MIB_FLOATS}).fill(r.input('X').data[0]) } }));
    }
  }`,
  'flood/config.pbtxt': `name: "flood"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ ${MIB_FLOATS} ] }]\nmodel_transaction_policy { decoupled: true }\n`,
  'flood/1/model.js': `export default class {
    execute(requests) {
      for (const r of requests) {
        const sender = r.responseSender();
        for (let i = 0; i < Number(r.parameters.n ?? 1); i++) sender.send({ outputs: { Y: new Float32Array(${MIB_FLOATS}).fill(i) } });
        sender.send(null, true);
      }
    }
  }`,
});

let s: TestServer;
let c: GrpcTestClient;
let raw: grpc.Client;
let address: string;
const protos = loadProtos().inference;

beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS, repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', extraBackends: { echo_request_js: echoRequestBackend } });
  address = `127.0.0.1:${s.grpc!.port}`;
  c = grpcClient(address);
  raw = new grpc.Client(address, grpc.credentials.createInsecure());
});
afterAll(async () => {
  c?.close();
  raw?.close();
  await s?.stop();
  repo.cleanup();
});

const seq = (f: (i: number) => number) => Array.from({ length: 16 }, (_, i) => f(i));
const simple = (extra: Obj = {}) => ({
  model_name: 'simple',
  inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }],
  raw_input_contents: [int32Raw(seq((i) => i)), int32Raw(seq(() => 1))],
  ...extra,
});

/** A unary call that sends `bytes` as they are, as a client with its own (broken) encoder would. */
function rawUnary(method: string, bytes: Buffer): Promise<Obj> {
  const def = protos[method]!;
  return new Promise((resolve, reject) => {
    raw.makeUnaryRequest(def.path, (b: Buffer) => b, def.responseDeserialize as (b: Buffer) => Obj, bytes, (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

const encode = (method: string, msg: Obj) => protos[method]!.requestSerialize(msg) as Buffer;

async function expectServing() {
  const r = await c.call('ModelInfer', simple());
  expect(fromRaw(r.raw_output_contents[0], Int32Array)).toEqual(seq((i) => i + 1));
}

describe('bytes that do not decode', () => {
  const good = () => encode('ModelInfer', simple());
  const cases: [string, () => Buffer][] = [
    ['random bytes', () => Buffer.from('this is not a protobuf message at all \xff\xfe', 'latin1')],
    ['a message cut short', () => good().subarray(0, good().length - 7)],
    ['a nested message whose length runs past the end', () => Buffer.from([0x22, 0x10, 0x0a, 0x01])],
    ['a field with an impossible wire type', () => Buffer.from([0x9f, 0x06, 0x01])],
  ];
  for (const [name, bytes] of cases) {
    it(`answers INVALID_ARGUMENT to ${name} on ModelInfer, naming the message`, async () => {
      const err = await rawUnary('ModelInfer', bytes()).catch((e) => e);
      expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
      expect(err.details).toMatch(/^unable to decode the request as inference\.ModelInferRequest \(\d+ bytes\): .+/);
    });
  }

  it('answers INVALID_ARGUMENT on the other RPCs too', async () => {
    for (const method of ['ModelMetadata', 'ModelReady', 'ModelConfig', 'RepositoryModelLoad']) {
      const err = await rawUnary(method, Buffer.from([0x12])).catch((e) => e);
      expect([method, err.code]).toEqual([method, grpc.status.INVALID_ARGUMENT]);
      expect(err.details).toMatch(/^unable to decode the request as inference\.\w+Request/);
    }
  });

  it('answers a message on a stream that does not decode with an error message, and goes on', async () => {
    const def = protos.ModelStreamInfer!;
    const stream = raw.makeBidiStreamRequest(def.path, (b: Buffer) => b, def.responseDeserialize as (b: Buffer) => Obj);
    const got: Obj[] = [];
    const done = new Promise<void>((resolve, reject) => {
      stream.on('data', (m: Obj) => got.push(m));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    stream.write(Buffer.from([0x22, 0x10, 0x0a]));
    stream.write(encode('ModelStreamInfer', simple({ id: 'after' })));
    stream.end();
    await done;
    expect(got).toHaveLength(2);
    const bad = got.find((m) => m.error_message !== '')!;
    expect(bad.error_message).toMatch(/^unable to decode the request as inference\.ModelInferRequest \(3 bytes\): /);
    const ok = got.find((m) => m.infer_response.id === 'after')!;
    expect(ok.error_message).toBe('');
  });

  it('still serves', expectServing);
});

describe('parameters over gRPC, by Triton\'s rules', () => {
  const reject = async (msg: Obj, details: string | RegExp) => {
    const err = await c.call('ModelInfer', msg).catch((e) => e);
    expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
    if (typeof details === 'string') expect(err.details).toBe(details);
    else expect(err.details).toMatch(details);
  };

  it('refuses reserved triton_ keys, as over HTTP', async () => {
    await reject(simple({ parameters: { triton_anything: { bool_param: true } } }),
      `parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response`);
    await reject(simple({ parameters: { triton_enable_empty_final_response: { int64_param: '1' } } }),
      `invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param.`);
  });

  it('takes triton_enable_empty_final_response as a boolean', async () => {
    const r = await c.call('ModelInfer', simple({ parameters: { triton_enable_empty_final_response: { bool_param: false } } }));
    expect(r.outputs).toHaveLength(2);
  });

  it('checks the type of every reserved and custom parameter', async () => {
    await reject(simple({ parameters: { priority: { double_param: 1e30 } } }), `invalid value type for 'priority' parameter, expected int64_param or uint64_param.`);
    await reject(simple({ parameters: { priority: { int64_param: '-3' } } }), `invalid value for 'priority', expected value >= 0.`);
    await reject(simple({ parameters: { timeout: { string_param: '10' } } }), `invalid value type for 'timeout' parameter, expected int64_param.`);
    await reject(simple({ parameters: { sequence_id: { bool_param: true } } }), `invalid value type for 'sequence_id' parameter, expected int64_param or string_param.`);
    await reject(simple({ parameters: { sequence_end: { string_param: 'yes' } } }), `invalid value type for 'sequence_end' parameter, expected bool_param.`);
    // An InferParameter with nothing set, and an unsigned custom value, are not among Triton's choices.
    await reject(simple({ parameters: { mine: {} } }), `invalid value type for 'mine' parameter, expected int64_param, bool_param, or string_param.`);
    await reject(simple({ parameters: { mine: { uint64_param: '3' } } }), `invalid value type for 'mine' parameter, expected int64_param, bool_param, or string_param.`);
    await reject(simple({ outputs: [{ name: 'OUTPUT0', parameters: { classification: { string_param: '2' } } }] }),
      `invalid value type for 'classification' parameter, expected int64_param`);
    const shm = { shared_memory_region: { string_param: 'r' }, shared_memory_byte_size: { double_param: 64 } };
    await reject(simple({ outputs: [{ name: 'OUTPUT0', parameters: shm }] }),
      `invalid value type for 'shared_memory_byte_size' parameter for tensor 'OUTPUT0', expected int64_param.`);
  });

  it('passes custom parameters of Triton\'s types on', async () => {
    const r = await c.call('ModelInfer', simple({
      parameters: { a: { int64_param: '5' }, b: { bool_param: true }, c: { string_param: 'x' }, d: { double_param: 2.5 }, priority: { uint64_param: '1' } },
    }));
    expect(r.outputs).toHaveLength(2);
    // A model that answers with what its request arrived with: the reserved priority taken out of
    // the parameters, each custom one with its type's value.
    const echo = await c.call('ModelInfer', {
      model_name: 'echo_request', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1] }], raw_input_contents: [int32Raw([0])],
      parameters: { a: { int64_param: '5' }, b: { bool_param: true }, c: { string_param: 'x' }, d: { double_param: 2.5 }, priority: { uint64_param: '1' }, timeout: { uint64_param: '7000' } },
    });
    const [priority, timeout, params] = echo.raw_output_contents as Buffer[];
    expect([fromRaw(priority!, BigUint64Array), fromRaw(timeout!, BigUint64Array)]).toEqual([[1n], [7000n]]);
    expect(params!.readUInt32LE(0)).toBe(params!.byteLength - 4);
    expect(JSON.parse(params!.subarray(4).toString())).toEqual({ a: 5, b: true, c: 'x', d: 2.5 });
  });
});

describe('tensor descriptions over gRPC', () => {
  const reject = async (msg: Obj, details: string | RegExp) => {
    const err = await c.call('ModelInfer', msg).catch((e) => e);
    expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
    if (typeof details === 'string') expect(err.details).toBe(details);
    else expect(err.details).toMatch(details);
  };
  const shaped = (shape: (string | number)[], bytes = int32Raw(seq((i) => i))) => simple({
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }],
    raw_input_contents: [bytes, int32Raw(seq(() => 1))],
  });

  it('refuses a wildcard, a negative and an overflowing dimension with Triton\'s texts', async () => {
    await reject(shaped([-1, 16]), `All input dimensions should be specified for input 'INPUT0' for model 'simple', got [-1,16]`);
    await reject(shaped([1, -16]), `invalid shape for input 'INPUT0': shape [1,-16] contains one or more invalid dimensions (model 'simple')`);
    await reject(shaped(['4294967296', '4294967296']),
      `invalid shape for input 'INPUT0': shape [4294967296,4294967296] causes total element count to exceed maximum size of 9223372036854775807`);
    await reject(shaped(['9223372036854775807']), /causes total element count to exceed maximum size of 9223372036854775807$/);
  });

  it('refuses raw contents of the wrong size, a bad datatype name, and undecodable BYTES', async () => {
    await reject(shaped([1, 16], int32Raw(seq((i) => i)).subarray(0, 63)), `input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 63`);
    await reject(simple({ inputs: [{ name: 'INPUT0', datatype: 'INT33', shape: [1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }] }),
      /^input 'INPUT0' for model 'simple': invalid datatype "INT33", expected one of BOOL, /);
    await reject({
      model_name: 'simple_identity', inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 1] }], raw_input_contents: [Buffer.from([9, 0, 0, 0, 65])],
    }, `input 'INPUT0' for model 'simple_identity': BYTES element 0 claims 9 bytes but only 1 remain`);
  });

  it('answers ModelReady for an unknown model as Triton does: OK with ready=false', async () => {
    // Triton core's ModelIsReady (server.cc) turns a failed lookup into ready=false and success.
    expect(await c.call('ModelReady', { name: 'nope', version: '' })).toEqual({ ready: false });
  });

  it('refuses a negative model_version with INVALID_ARGUMENT, as Triton\'s GetModelVersionFromString does', async () => {
    const err = await c.call('ModelInfer', {
      model_name: 'simple', model_version: '-1', inputs: [], outputs: [],
    }).catch((e) => e);
    expect([err.code, err.details]).toEqual([grpc.status.INVALID_ARGUMENT, "invalid model version specified '-1' , version should be an integral value > 0"]);
  });

  it('still serves', expectServing);
});

/**
 * ModelStreamInfer over a bare HTTP/2 stream, so that "not reading" really stops at the socket: a
 * grpc-js client keeps taking messages into its own memory while the application is paused.
 */
function h2Stream() {
  const session = http2.connect(`http://${address}`);
  const req = session.request({
    ':method': 'POST', ':path': protos.ModelStreamInfer!.path, 'content-type': 'application/grpc', te: 'trailers',
  });
  const decode = protos.ModelStreamInfer!.responseDeserialize as (b: Buffer) => Obj;
  let buf = Buffer.alloc(0);
  const messages: Obj[] = [];
  req.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const n = buf.readUInt32BE(1);
      messages.push(decode(buf.subarray(5, 5 + n)));
      buf = buf.subarray(5 + n);
    }
  });
  const status = new Promise<{ code: number; message: string }>((resolve) => {
    req.on('trailers', (t) => resolve({ code: Number(t['grpc-status']), message: decodeURIComponent(String(t['grpc-message'] ?? '')) }));
  });
  req.pause();
  return {
    messages, status,
    send(msg: Obj) {
      const body = encode('ModelStreamInfer', msg);
      const head = Buffer.alloc(5);
      head.writeUInt32BE(body.length, 1);
      req.write(Buffer.concat([head, body]));
    },
    end: () => req.end(),
    read: () => req.resume(),
    close: () => session.close(),
  };
}

describe('a stream whose client stops reading', () => {
  const saved = { ...STREAM_LIMITS };
  beforeAll(() => Object.assign(STREAM_LIMITS, { inflight: 8, high: 2 * 1024 * 1024, low: 512 * 1024, cap: 32 * 1024 * 1024 }));
  afterAll(() => Object.assign(STREAM_LIMITS, saved));

  const executions = async (model: string) =>
    Number((await (await fetch(`${s.url}/v2/models/${model}/stats`)).json()).model_stats[0].inference_stats.success.count);
  const req = (model: string, x: number, params: Obj = {}) => ({
    model_name: model, inputs: [{ name: 'X', datatype: 'FP32', shape: [1] }], raw_input_contents: [Buffer.from(Float32Array.of(x).buffer)], parameters: params,
  });

  it('is no longer read while its answers wait, and every request is answered once it reads again', async () => {
    const stream = h2Stream();
    try {
      const N = 60;
      // One every 10 ms, from a client that never reads the answers (1 MiB each).
      for (let i = 0; i < N; i++) {
        stream.send(req('big', i));
        await new Promise((r) => setTimeout(r, 10));
      }
      stream.end();
      await new Promise((r) => setTimeout(r, 500));
      // The server stopped taking requests once a few MiB of answers were waiting (the rest of the
      // client's requests wait in HTTP/2 flow control): not 60 answers, 60 MiB, in its memory.
      expect(await executions('big')).toBeLessThan(40);
      stream.read();
      expect((await stream.status).code).toBe(grpc.status.OK);
      const got = stream.messages.map((m) => fromRaw(m.infer_response.raw_output_contents[0].subarray(0, 4), Float32Array)[0]!);
      expect(got.sort((a, b) => a - b)).toEqual(Array.from({ length: N }, (_, i) => i));
    } finally {
      stream.close();
    }
  }, 60_000);

  it('is ended with RESOURCE_EXHAUSTED when a decoupled model keeps producing for it', async () => {
    const stream = h2Stream();
    try {
      stream.send(req('flood', 0, { n: { int64_param: '100' } }));
      stream.end();
      await new Promise((r) => setTimeout(r, 2500));
      stream.read();
      const status = await stream.status;
      expect(status.code, status.message).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(status.message).toMatch(/^stream closed: the client has not read \d+ bytes of responses \(limit 33554432\)$/);
      expect(stream.messages.length).toBeLessThan(100);
    } finally {
      stream.close();
    }
  }, 60_000);

  it('still serves', expectServing);
});
