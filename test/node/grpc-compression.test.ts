/**
 * `--grpc-infer-response-compression-level` on the wire. grpc-js's server never compresses, so tsi
 * gzips inference answers itself: with a level set and a client that lists gzip in
 * `grpc-accept-encoding`, a ModelInfer answer comes with `grpc-encoding: gzip` and a frame whose
 * compressed flag is 1 and whose bytes gunzip to the answer; a client that accepts only identity, or
 * a server left at `none`, gets the plain frame. Checked with a raw node:http2 client (a grpc-js
 * client would hide the framing), and end to end with tsi's GrpcClient, which must read the
 * compressed answers.
 */

import type { IncomingHttpHeaders } from 'node:http2';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcClient } from '../../client/grpc.js';
import { loadProtos } from '../../runtime-node/grpc/server.js';
import { identityModel } from '../../scripts/gen-models.js';
import { grpcFrame, rawGrpcCall } from '../helpers/grpc.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

type Obj = Record<string, unknown>;
const protos = loadProtos().inference;
const N = 65536;
const data = Float32Array.from({ length: N }, (_, i) => i % 7); // compresses well, as gzip is meant for
let plain: TestServer;
let gz: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'identity_fp32/config.pbtxt': 'name: "identity_fp32"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n',
    'identity_fp32/1/model.onnx': identityModel('FP32', { batch: false }),
  });
  const common = { modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' };
  [gz, plain] = await Promise.all([startTestServer({ ...common, grpcResponseCompression: 'medium' }), startTestServer(common)]);
}, 60_000);
afterAll(async () => {
  await Promise.all([gz?.stop(), plain?.stop()]);
  repo?.cleanup();
});

interface RawAnswer { headers: IncomingHttpHeaders; flag: number; message: Buffer; trailers: IncomingHttpHeaders }

/** One ModelInfer over a bare HTTP/2 stream, the answer's first frame as it came. */
async function rawInfer(port: number, acceptEncoding: string): Promise<RawAnswer> {
  const request = protos.ModelInfer!.requestSerialize({
    model_name: 'identity_fp32',
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [N] }],
    raw_input_contents: [Buffer.from(data.buffer)],
  }) as Buffer;
  const a = await rawGrpcCall(port, '/inference.GRPCInferenceService/ModelInfer', grpcFrame(request), { 'grpc-accept-encoding': acceptEncoding });
  const size = a.body.readUInt32BE(1);
  expect(a.body.byteLength).toBe(5 + size);
  return { headers: a.headers, flag: a.body[0]!, message: a.body.subarray(5), trailers: a.trailers };
}

function outputOf(message: Buffer): Float32Array {
  const resp = protos.ModelInfer!.responseDeserialize(message) as Obj;
  expect((resp.outputs as Obj[])[0]!.name).toBe('OUTPUT0');
  const raw = (resp.raw_output_contents as Buffer[])[0]!;
  return new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
}

describe('gRPC response compression', () => {
  it('gzips a ModelInfer answer for a client that accepts gzip', async () => {
    const a = await rawInfer(gz.grpc!.port, 'identity,deflate,gzip');
    expect(a.trailers['grpc-status']).toBe('0');
    expect(a.headers['grpc-encoding']).toBe('gzip');
    expect(a.flag).toBe(1);
    expect(a.message.byteLength).toBeLessThan(data.byteLength / 4);
    expect(Buffer.from(outputOf(gunzipSync(a.message)).buffer).equals(Buffer.from(data.buffer))).toBe(true);
  });

  it('answers plainly a client that accepts only identity, and always from a server at level none', async () => {
    for (const a of [await rawInfer(gz.grpc!.port, 'identity'), await rawInfer(plain.grpc!.port, 'identity,deflate,gzip')]) {
      expect(a.trailers['grpc-status']).toBe('0');
      expect(a.headers['grpc-encoding'] ?? 'identity').toBe('identity');
      expect(a.flag).toBe(0);
      expect(Buffer.from(outputOf(a.message).buffer).equals(Buffer.from(data.buffer))).toBe(true);
    }
  });

  it("is read by tsi's GrpcClient, unary and streaming", async () => {
    const client = new GrpcClient(`127.0.0.1:${gz.grpc!.port}`);
    try {
      const res = await client.infer('identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [N], data }]);
      const same = (o: Float32Array) => Buffer.from(o.buffer, o.byteOffset, o.byteLength).equals(Buffer.from(data.buffer));
      expect(same(res.outputs[0]!.data as Float32Array)).toBe(true);
      const stream = client.stream();
      stream.send('identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [N], data }]);
      stream.send('identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [N], data }]);
      stream.end();
      let answers = 0;
      for await (const item of stream) {
        expect(item.error).toBeUndefined();
        expect(same(item.result!.outputs[0]!.data as Float32Array)).toBe(true);
        answers++;
      }
      expect(answers).toBe(2);
    } finally {
      client.close();
    }
  });
});
