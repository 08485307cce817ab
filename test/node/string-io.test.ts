/**
 * Triton's L0_string_io, against the real server: BYTES elements that are not UTF-8 (the protobuf
 * fragments of Triton's test) go through a string identity model unchanged over the binary data
 * extension and gRPC; asked for as JSON, they fail the request with a clear 400 instead of reaching
 * the client with U+FFFD in place of their bytes (Triton writes the raw bytes into its JSON, which the
 * client's parser then refuses). UTF-8 strings still come back as JSON strings.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binaryOutputs, lengthPrefixedBytes, postBinary, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient, type GrpcTestClient } from '../helpers/grpc.js';

// Two of the eight elements of Triton's _test_unicode_bytes_dtype (serialized protobufs).
const NOT_UTF8 = [
  Buffer.from('0a3a0a1a0a0161121a1a130a112ae305c506da07cb067eb105b301a902150a0d0a016212081a060a04f6a2c5010a0d0a0163120812060a04bb5b0abf', 'hex'),
  Buffer.from('0a260a070a016112021a000a0c0a016212071a050a0389cc3d0a0d0a0163120812060a047bbc0e3e000000', 'hex'),
];

describe('BYTES that are not UTF-8', () => {
  const repo = tempRepo({
    'string_identity/config.pbtxt': `name: "string_identity"\nbackend: "identity"\nmax_batch_size: 0\ninput [{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] }]\n`,
    'string_identity/1/.keep': '',
  });
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
  });

  const send = (elements: Uint8Array[], binaryOut: boolean) => {
    const raw = lengthPrefixedBytes(elements);
    return postBinary(`${s.url}/v2/models/string_identity/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [elements.length], parameters: { binary_data_size: raw.byteLength } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: binaryOut } }],
    }, [raw]);
  };

  it('come back unchanged as binary data over HTTP, and over gRPC', async () => {
    const r = await send(NOT_UTF8, true);
    expect(r.status).toBe(200);
    expect(Buffer.from(binaryOutputs(r.json, r.binary).get('OUTPUT0')!)).toEqual(Buffer.from(lengthPrefixedBytes(NOT_UTF8)));
    const g = await c.call('ModelInfer', {
      model_name: 'string_identity', inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [2] }], raw_input_contents: [Buffer.from(lengthPrefixedBytes(NOT_UTF8))],
    });
    expect(g.raw_output_contents[0]).toEqual(Buffer.from(lengthPrefixedBytes(NOT_UTF8)));
  });

  it('fail the request with 400 when asked for as JSON, naming the output and the element', async () => {
    const text = "sending BYTES data that is not valid UTF-8 via JSON is not supported (element 0 of output 'OUTPUT0'). Please use the binary data format for output tensors";
    const r = await send(NOT_UTF8, false);
    expect(r).toMatchObject({ status: 400, json: { error: text } });
    // Past 4,096 elements the JSON is written in pieces: the same check.
    const many = [...Array.from({ length: 5000 }, () => Buffer.from('ok')), NOT_UTF8[1]!];
    expect(await send(many, false)).toMatchObject({
      status: 400, json: { error: expect.stringContaining("(element 5000 of output 'OUTPUT0')") },
    });
    // The server goes on serving.
    expect((await send([Buffer.from('fine')], false)).status).toBe(200);
  });

  it('UTF-8 strings, any script, still come back as JSON strings', async () => {
    const strings = ['10000', 'héllo', '日本語', '🙂', ''];
    const r = await postJson(`${s.url}/v2/models/string_identity/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [strings.length], data: strings }],
    });
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].data).toEqual(strings);
  });
});
