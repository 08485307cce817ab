/**
 * Triton's L0_parameters, against the real server over HTTP and gRPC: headers (HTTP) and metadata
 * (gRPC) that --http/--grpc-header-forward-pattern match reach the model as string request parameters,
 * case-insensitively unless the pattern starts with `(?-i)`, and a reserved name refuses the request;
 * classification (`class_count`) refused on BYTES outputs and on outputs over 1,000,000 elements per
 * batch entry, with Triton's texts; --grpc-max-response-pool-size bounds a stream's unsent responses.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { MODELS, postBinary, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient, streamAll, type GrpcTestClient } from '../helpers/grpc.js';
import { parseServeArgs } from '../helpers/cli.js';

/** A JavaScript model answering with its request's parameters, as JSON in the BYTES output P. */
const PARAMETER_MODEL = {
  'parameter/config.pbtxt': `name: "parameter"\nbackend: "javascript"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "P" data_type: TYPE_STRING dims: [ 1 ] }]\n`,
  'parameter/1/model.js': `export default class {
    execute(requests) { return requests.map((r) => ({ outputs: { P: [JSON.stringify(r.parameters)] } })); }
  }`,
};

const FORWARD_HEADERS = {
  header_1: 'value_1',
  header_2: 'value_2',
  my_header_1: 'my_value_1',
  my_header_2: 'my_value_2',
  my_header_3: 'This is a "quoted" string with a backslash\\',
};
// Triton's test ends my_header_3 with a space; HTTP/1.1 and HTTP/2 strip a field value's surrounding
// whitespace (RFC 9110 5.5, RFC 9113 8.2.1), so fetch and grpc-js never send it (see docs/features.md).
const MY_HEADERS = { my_header_1: 'my_value_1', my_header_2: 'my_value_2', my_header_3: 'This is a "quoted" string with a backslash\\' };
const RESERVED = ['sequence_id', 'sequence_start', 'sequence_end', 'priority', 'timeout', 'headers', 'binary_data_output',
  'triton_enable_empty_final_response', 'triton_final_response', 'triton_injected_via_header'];

/** One server per pattern, asked over HTTP, gRPC ModelInfer and a gRPC stream. */
function forwarding(pattern: string) {
  const repo = tempRepo(PARAMETER_MODEL);
  let s: TestServer;
  let c: GrpcTestClient;
  const ctx = {
    async start() {
      s = await startTestServer({
        modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', httpHeaderForwardPattern: pattern, grpcHeaderForwardPattern: pattern,
      });
      c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    },
    async stop() {
      c?.close();
      await s?.stop();
      repo.cleanup();
    },
    async http(headers: Record<string, string>) {
      return postJson(`${s.url}/v2/models/parameter/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [1] }] }, headers);
    },
    async grpc(headers: Record<string, string>) {
      const req = { model_name: 'parameter', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], contents: { fp32_contents: [1] } }] };
      const unary: { params?: Buffer; err?: grpc.ServiceError } = await c.call('ModelInfer', req, headers)
        .then((r) => ({ params: r.raw_output_contents[0] as Buffer }), (e: grpc.ServiceError) => ({ err: e }));
      const [streamed] = await streamAll(c, [req], headers);
      return { unary, streamed: streamed! };
    },
  };
  return ctx;
}

/** The JSON the parameter model wrote, out of a raw BYTES element (4-byte length, then the text). */
const rawParams = (b: Buffer) => JSON.parse(b.subarray(4).toString('utf8'));
const pick = (o: Record<string, unknown>, keys: string[]) => Object.fromEntries(Object.entries(o).filter(([k]) => keys.includes(k)));

describe('--http/--grpc-header-forward-pattern MY_HEADER.*', () => {
  const f = forwarding('MY_HEADER.*');
  beforeAll(() => f.start());
  afterAll(() => f.stop());

  it('forwards the matching headers as string parameters over HTTP, case-insensitively', async () => {
    const r = await f.http(FORWARD_HEADERS);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const params = JSON.parse(r.body.outputs[0].data[0]);
    expect(pick(params, Object.keys(FORWARD_HEADERS))).toEqual(MY_HEADERS);
  });

  it('forwards the matching metadata over gRPC, unary and streamed', async () => {
    const { unary, streamed } = await f.grpc(FORWARD_HEADERS);
    expect(pick(rawParams(unary.params!), Object.keys(FORWARD_HEADERS))).toEqual(MY_HEADERS);
    expect(streamed.error_message).toBe('');
    expect(pick(rawParams(streamed.infer_response.raw_output_contents[0]), Object.keys(FORWARD_HEADERS))).toEqual(MY_HEADERS);
  });
});

describe('--grpc-header-forward-pattern (?-i)MY_HEADER.*', () => {
  const f = forwarding('(?-i)MY_HEADER.*');
  beforeAll(() => f.start());
  afterAll(() => f.stop());

  it('is case-sensitive: gRPC metadata keys are lower case, so nothing is forwarded', async () => {
    const { unary, streamed } = await f.grpc(FORWARD_HEADERS);
    expect(pick(rawParams(unary.params!), Object.keys(FORWARD_HEADERS))).toEqual({});
    expect(pick(rawParams(streamed.infer_response.raw_output_contents[0]), Object.keys(FORWARD_HEADERS))).toEqual({});
  });
});

describe('--http/--grpc-header-forward-pattern .*', () => {
  const f = forwarding('.*');
  beforeAll(() => f.start());
  afterAll(() => f.stop());

  it("refuses a request whose header takes a reserved name, with Triton's text", async () => {
    for (const key of RESERVED) {
      const text = `Header '${key}' is reserved for Triton usage and cannot be forwarded.`;
      expect(await f.http({ [key]: 'dummy-value' }), key).toMatchObject({ status: 400, body: { error: text } });
      const { unary, streamed } = await f.grpc({ [key]: 'dummy-value' });
      expect(unary, key).toMatchObject({ err: { code: grpc.status.INVALID_ARGUMENT, details: text } });
      expect(streamed.error_message, key).toBe(text);
    }
    // Other headers are forwarded, and the request answered.
    expect((await f.http({ my_header_1: 'x' })).status).toBe(200);
  });
});

describe('classification (class_count) refusals', () => {
  const identity = (name: string, type: string) =>
    `name: "${name}"\nbackend: "identity"\nmax_batch_size: 8\ninput [{ name: "INPUT0" data_type: ${type} dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: ${type} dims: [ -1 ] }]\n`;
  const repo = tempRepo({
    'identity_fp32/config.pbtxt': identity('identity_fp32', 'TYPE_FP32'),
    'identity_fp32/1/.keep': '',
    'identity_bytes/config.pbtxt': identity('identity_bytes', 'TYPE_STRING'),
    'identity_bytes/1/.keep': '',
  });
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', maxInputSize: 16 * 1024 * 1024 });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
  });
  const grpcClassify = (model: string, datatype: string, n: number, raw: Buffer) => c.call('ModelInfer', {
    model_name: model,
    inputs: [{ name: 'INPUT0', datatype, shape: [1, n] }],
    outputs: [{ name: 'OUTPUT0', parameters: { classification: { int64_param: '5' } } }],
    raw_input_contents: [raw],
  });

  it('classifies FP32 (Triton\'s test_classificattion)', async () => {
    const r = await postJson(`${s.url}/v2/models/identity_fp32/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 8], data: Array(8).fill(1) }],
      outputs: [{ name: 'OUTPUT0', parameters: { classification: 5 } }],
    });
    expect(r.body.outputs[0]).toMatchObject({ datatype: 'BYTES', shape: [1, 5] });
    for (const v of r.body.outputs[0].data) expect(v).toMatch(/^1\.000000:/);
  });

  it("refuses BYTES outputs with Triton's text (HTTP and gRPC)", async () => {
    const text = "class result not available for output due to unsupported type 'BYTES'";
    const r = await postJson(`${s.url}/v2/models/identity_bytes/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 8], data: Array(8).fill('test') }],
      outputs: [{ name: 'OUTPUT0', parameters: { classification: 5 } }],
    });
    expect(r.status).toBe(400);
    expect(r.body.error).toContain(text);
    const raw = Buffer.concat(Array.from({ length: 8 }, () => Buffer.from([4, 0, 0, 0, ...Buffer.from('test')])));
    await expect(grpcClassify('identity_bytes', 'BYTES', 8, raw)).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining(text),
    });
  });

  it('refuses an output of more than 1,000,000 elements per batch entry (HTTP and gRPC)', async () => {
    const n = 1_000_001;
    const data = new Float32Array(n).fill(1);
    const r = await postBinary(`${s.url}/v2/models/identity_fp32/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, n], parameters: { binary_data_size: n * 4 } }],
      outputs: [{ name: 'OUTPUT0', parameters: { classification: 5 } }],
    }, [new Uint8Array(data.buffer)]);
    expect(r.status).toBe(400);
    expect(r.json.error).toMatch(/^classification output tensor too large/);
    await expect(grpcClassify('identity_fp32', 'FP32', n, Buffer.from(data.buffer))).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/^classification output tensor too large/),
    });
    // 1,000,000 is still classified.
    const ok = await grpcClassify('identity_fp32', 'FP32', n - 1, Buffer.from(data.buffer, 0, (n - 1) * 4));
    expect(ok.outputs[0]).toMatchObject({ datatype: 'BYTES', shape: ['1', '5'] });
  });
});

describe('--grpc-max-response-pool-size', () => {
  it('must be greater than 0, as Triton requires', async () => {
    for (const v of ['0', '-3']) {
      await expect(parseServeArgs(['serve', `--grpc-max-response-pool-size=${v}`])).rejects.toThrow(/--grpc-max-response-pool-size must be greater than 0/);
    }
    expect((await parseServeArgs(['serve', '--grpc-max-response-pool-size', '2'])).grpcMaxResponsePoolSize).toBe(2);
  });

  it('--grpc-infer-thread-count takes 2 to 128 and refuses the rest with Triton\'s text (L0_sequence_stress starts servers with -1, 0, 1, 129 and 128)', async () => {
    for (const v of ['-1', '0', '1', '129', 'x']) {
      await expect(parseServeArgs(['serve', `--grpc-infer-thread-count=${v}`])).rejects.toThrow('invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.');
    }
    for (const v of [2, 128]) expect((await parseServeArgs(['serve', '--grpc-infer-thread-count', String(v)])).grpcInferThreadCount).toBe(v);
  });

  it('with a pool of 1, a stream still answers every response of a decoupled model, in order', async () => {
    const s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['repeat_int32'], grpcPort: 0, grpcAddress: '127.0.0.1', grpcMaxResponsePoolSize: 1,
    });
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      const n = 50;
      const req = (id: string) => ({
        model_name: 'repeat_int32', id,
        inputs: [
          { name: 'IN', datatype: 'INT32', shape: [n], contents: { int_contents: Array.from({ length: n }, (_, i) => i) } },
          { name: 'DELAY', datatype: 'UINT32', shape: [n], contents: { uint_contents: Array(n).fill(0) } },
          { name: 'WAIT', datatype: 'UINT32', shape: [1], contents: { uint_contents: [0] } },
        ],
      });
      const out = await streamAll(c, [req('a'), req('b')]);
      for (const id of ['a', 'b']) {
        const mine = out.filter((m) => m.infer_response?.id === id && m.infer_response.raw_output_contents.length > 0);
        expect(mine.map((m) => m.infer_response.raw_output_contents[0].readInt32LE(0))).toEqual(Array.from({ length: n }, (_, i) => i));
      }
    } finally {
      c.close();
      await s.stop();
    }
  });
});
