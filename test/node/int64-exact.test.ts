/**
 * INT64 and UINT64 tensors keep every digit on every wire: identity ONNX models (no batch dimension,
 * as Triton's `onnx_nobatch_int64_int64_int64`) fed values at and around ±2^53, 2^63-1, -2^63 and
 * 2^64-1 as JSON literals, binary tensor data and gRPC contents, with tsi's own clients and as raw
 * text; values out of the datatype's range are a 400 naming the tensor. JSON.parse would round
 * 9007199254740993 to ...992 and 2^63-1 to 2^63 with no error.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcClient, HttpClient } from '../../client/node.js';
import { parseJsonExact } from '../../core/protocol/json-exact.js';
import { identityModel } from '../../scripts/gen-models.js';
import { grpcClient, type GrpcTestClient } from '../helpers/grpc.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const P53 = 2n ** 53n;
const INT64 = [0n, P53 - 1n, P53, P53 + 1n, -(P53 - 1n), -P53, -(P53 + 1n), 3762953099167629118n, 2n ** 63n - 1n, -(2n ** 63n), -1n];
const UINT64 = [0n, P53 - 1n, P53, P53 + 1n, 2n ** 63n, 2n ** 64n - 2n, 2n ** 64n - 1n];
const CASES = [['INT64', 'i64', INT64], ['UINT64', 'u64', UINT64]] as const;

const config = (name: string, type: string) => `
name: "${name}"
platform: "onnxruntime_onnx"
input [ { name: "INPUT0" data_type: ${type} dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: ${type} dims: [ -1 ] } ]
`;

let repo: ReturnType<typeof tempRepo>;
let server: TestServer;
let http: HttpClient;
let grpc: GrpcClient;
let rpc: GrpcTestClient;

beforeAll(async () => {
  repo = tempRepo({
    'i64/config.pbtxt': config('i64', 'TYPE_INT64'),
    'i64/1/model.onnx': identityModel('INT64', { batch: false }),
    'u64/config.pbtxt': config('u64', 'TYPE_UINT64'),
    'u64/1/model.onnx': identityModel('UINT64', { batch: false }),
  });
  server = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  http = new HttpClient(server.url);
  grpc = new GrpcClient(`127.0.0.1:${server.grpc!.port}`);
  rpc = grpcClient(`127.0.0.1:${server.grpc!.port}`);
}, 120_000);

afterAll(async () => {
  rpc?.close();
  await grpc?.close();
  await server?.stop();
  repo?.cleanup();
});

/** POSTs JSON text as written (literals JSON.stringify could not make) and returns the answer's text. */
async function postText(path: string, text: string): Promise<{ status: number; text: string }> {
  const r = await fetch(server.url + path, { method: 'POST', body: text, headers: { 'Content-Type': 'application/json' } });
  return { status: r.status, text: await r.text() };
}

describe.each(CASES)('%s identity', (datatype, model, values) => {
  const literals = values.join(',');

  it('HTTP JSON: the exact literals in, the exact literals out', async () => {
    const r = await postText(`/v2/models/${model}/infer`,
      `{"inputs":[{"name":"INPUT0","shape":[${values.length}],"datatype":"${datatype}","data":[${literals}]}]}`);
    expect(r.status, r.text).toBe(200);
    expect(r.text).toContain(`"data":[${literals}]`);
  });

  it('HTTP JSON, nested data and a request parameter past 2^53', async () => {
    const r = await postText(`/v2/models/${model}/infer`,
      `{"parameters":{"big":18446744073709551615},"inputs":[{"name":"INPUT0","shape":[${values.length}],"datatype":"${datatype}","data":[[${literals}]]}]}`);
    expect(r.status, r.text).toBe(200);
    expect(r.text).toContain(`"data":[${literals}]`);
  });

  it("tsi's HTTP client, JSON and binary both ways, and its gRPC client", async () => {
    const data = datatype === 'INT64' ? BigInt64Array.from(values) : BigUint64Array.from(values);
    for (const binary of [false, true]) {
      const r = await http.infer(model, [{ name: 'INPUT0', datatype, shape: [values.length], data }], { binaryInputs: binary, binaryOutputs: binary });
      expect(Array.from(r.output('OUTPUT0')!.data as BigInt64Array), `binary ${binary}`).toEqual(values);
    }
    const g = await grpc.infer(model, [{ name: 'INPUT0', datatype, shape: [values.length], data }]);
    expect(Array.from(g.output('OUTPUT0')!.data as BigInt64Array)).toEqual(values);
    // Plain JS bigints (no typed array) are sent exactly too.
    const plain = await http.infer(model, [{ name: 'INPUT0', datatype, shape: [values.length], data: [...values] }], { binaryInputs: false, binaryOutputs: false });
    expect(Array.from(plain.output('OUTPUT0')!.data as BigInt64Array)).toEqual(values);
  });

  it('gRPC contents as grpc-js sends them (decimal strings)', async () => {
    const field = datatype === 'INT64' ? 'int64_contents' : 'uint64_contents';
    const r = await rpc.call('ModelInfer', {
      model_name: model,
      inputs: [{ name: 'INPUT0', datatype, shape: [values.length], contents: { [field]: values.map(String) } }],
    });
    const raw = Uint8Array.from(r.raw_output_contents[0] as Buffer).buffer;
    const out = datatype === 'INT64' ? new BigInt64Array(raw) : new BigUint64Array(raw);
    expect(Array.from(out)).toEqual(values);
  });

  it('generate: a 64-bit input and its answer exact', async () => {
    const r = await postText(`/v2/models/${model}/generate`, `{"INPUT0":[${literals}]}`);
    expect(r.status, r.text).toBe(200);
    expect((parseJsonExact(r.text) as { OUTPUT0: unknown }).OUTPUT0).toEqual(values.map((v) => (v >= -(P53 - 1n) && v <= P53 - 1n ? Number(v) : v)));
  });
});

describe('values outside the datatype are refused, naming the tensor', () => {
  const refused = [
    ['i64', 'INT64', '9223372036854775808', 'a value in [-9223372036854775808, 9223372036854775807]'],
    ['i64', 'INT64', '-9223372036854775809', 'a value in [-9223372036854775808, 9223372036854775807]'],
    ['i64', 'INT64', '1e30', 'a value in [-9223372036854775808, 9223372036854775807]'],
    ['u64', 'UINT64', '18446744073709551616', 'a value in [0, 18446744073709551615]'],
    ['u64', 'UINT64', '-1', 'a value in [0, 18446744073709551615]'],
    ['u64', 'UINT64', '1.5', 'an integer'],
  ] as const;
  for (const [model, datatype, literal, expected] of refused) {
    it(`${datatype} ${literal}`, async () => {
      const r = await postText(`/v2/models/${model}/infer`, `{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"${datatype}","data":[1,${literal}]}]}`);
      expect(r.status).toBe(400);
      expect(JSON.parse(r.text).error).toMatch(`input 'INPUT0' for model '${model}': element 1 is`);
      expect(JSON.parse(r.text).error).toContain(`expected ${expected} for datatype ${datatype}`);
    });
  }

  it('and the server keeps serving', async () => {
    const r = await postText('/v2/models/i64/infer', '{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","data":[9007199254740993]}]}');
    expect(r.text).toContain('"data":[9007199254740993]');
  });
});

describe('a sequence id past 2^53 as a JSON number', () => {
  it('is read exactly (it used to be refused as having lost digits)', async () => {
    const seqRepo = tempRepo({
      'seq/config.pbtxt': `
name: "seq"
platform: "onnxruntime_onnx"
max_batch_size: 1
sequence_batching {}
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]
`,
      'seq/1/model.onnx': identityModel('INT64', { batch: true }),
    });
    const s = await startTestServer({ modelRepositories: [seqRepo.path] });
    try {
      for (const [flags, id] of [['"sequence_start":true', '18446744073709551615'], ['"sequence_end":true', '18446744073709551615']]) {
        const r = await fetch(`${s.url}/v2/models/seq/infer`, {
          method: 'POST',
          body: `{"parameters":{"sequence_id":${id},${flags}},"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT64","data":[5]}]}`,
        });
        expect(r.status, await r.clone().text()).toBe(200);
      }
      // A different id past 2^53 that JSON.parse would round onto the same double is another sequence.
      const other = await fetch(`${s.url}/v2/models/seq/infer`, {
        method: 'POST',
        body: '{"parameters":{"sequence_id":18446744073709551614},"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT64","data":[5]}]}',
      });
      expect(other.status).toBe(400);
      expect((await other.json()).error).toContain('18446744073709551614');
    } finally {
      await s.stop();
      seqRepo.cleanup();
    }
  });
});

describe('64-bit tensor parameters that reach arithmetic are range-checked', () => {
  // The fuzzer's case: a binary_data_size of 2^63-1 was read exactly as a bigint and answered 500
  // ("Cannot mix BigInt and other types"): now a 400 naming it.
  const head = (params: string) => `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","parameters":{${params}}}]}`;
  const cases = [
    ['binary_data_size', '"binary_data_size":9223372036854775807'],
    ['binary_data_size', '"binary_data_size":18446744073709551615'],
  ] as const;
  for (const [name, params] of cases) {
    it(`${params}`, async () => {
      const json = head(params);
      const body = new Uint8Array([...new TextEncoder().encode(json), 1, 0, 0, 0, 0, 0, 0, 0]);
      const r = await fetch(`${server.url}/v2/models/i64/infer`, {
        method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(json.length) },
      });
      const text = await r.text();
      expect(r.status, text).toBe(400);
      expect(JSON.parse(text).error).toMatch(new RegExp(`^'${name}' \\d+ is out of range for input 'INPUT0' for model 'i64'`));
    });
  }

  // Shared-memory offsets and sizes past 2^53 reach the region's checks exact, which answer them in
  // Triton's words (test/node/shared-memory.test.ts has them against a registered region); here the
  // region is unknown, and the answer is still a 400 rather than a bigint mixed into a sum.
  for (const [where, json] of [
    ['input byte size', '{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","parameters":{"shared_memory_region":"r","shared_memory_byte_size":9223372036854775807}}]}'],
    ['input offset', '{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":18446744073709551615}}]}'],
    ['output offset', '{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","data":[1]}],"outputs":[{"name":"OUTPUT0","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":9223372036854775807}}]}'],
  ] as const) {
    it(`a shared-memory ${where} past 2^53 on an unknown region`, async () => {
      const r = await postText('/v2/models/i64/infer', json);
      expect(r.status, r.text).toBe(400);
      expect(JSON.parse(r.text).error).toMatch(/^Unable to find shared memory region: 'r'/);
    });
  }

  it('and the server keeps serving', async () => {
    const r = await postText('/v2/models/i64/infer', '{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT64","data":[7]}]}');
    expect(r.text).toContain('"data":[7]');
  });
});
