/**
 * Unary ModelInfer answered on node:http2 ahead of grpc-js (runtime-node/grpc/direct.ts), seen on the
 * wire with a bare HTTP/2 client. A plain call takes the direct path and a call with
 * `grpc-encoding: gzip` (its message uncompressed, flag 0, which gRPC allows) takes grpc-js's: both
 * must answer the same headers, frame and trailers (the listener's count of direct calls shows which
 * path served each call), and so must a failure and a 1 MiB tensor (joined
 * from many DATA chunks with its bytes aligned, answered from the output tensor's own bytes). The direct path keeps
 * grpc-js's behaviour where a client can see it: `grpc-timeout` (DEADLINE_EXCEEDED, and the request
 * is cancelled, not computed), a malformed timeout, a call with no message or with two; and the
 * server goes on serving after each.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadProtos } from '../../runtime-node/grpc/server.js';
import { identityModel } from '../../scripts/gen-models.js';
import { grpcFrame, rawGrpcCall, type RawGrpcAnswer } from '../helpers/grpc.js';
import { blockingJsModel, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

type Obj = Record<string, unknown>;
const protos = loadProtos().inference;
let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

const slow = blockingJsModel(0);

beforeAll(async () => {
  repo = tempRepo({
    'slow/config.pbtxt': 'name: "slow"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n',
    'slow/1/model.js': slow,
    'identity_fp32/config.pbtxt': 'name: "identity_fp32"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n',
    'identity_fp32/1/model.onnx': identityModel('FP32', { batch: false }),
  });
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
}, 60_000);
afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const message = (m: Obj) => protos.ModelInfer!.requestSerialize(m) as Buffer;
const request = (ms: number, model = 'slow') => message({
  model_name: model, parameters: { ms: { int64_param: ms } },
  inputs: [{ name: 'X', datatype: 'FP32', shape: [2], contents: { fp32_contents: [1, 2] } }],
});
const INFER = '/inference.GRPCInferenceService/ModelInfer';
/**
 * One call on the wire, and which path served it: the direct path counts the calls it takes, so a
 * plain call must raise the count by one and a gzip-encoded one (grpc-js's) leave it as it was.
 */
const raw = async (body: Buffer, extra: Record<string, string> = {}): Promise<RawGrpcAnswer> => {
  const before = s.grpc!.directCalls();
  const answer = await rawGrpcCall(s.grpc!.port, INFER, body, extra);
  const direct = extra['grpc-encoding'] === undefined;
  expect(s.grpc!.directCalls() - before, direct ? 'the direct path served the call' : 'grpc-js served the call').toBe(direct ? 1 : 0);
  return answer;
};
const frame = grpcFrame;
type Raw = RawGrpcAnswer;

/** Headers and trailers without what differs by moment (date). */
const shape = (r: Raw) => ({ headers: { ...r.headers, date: undefined }, trailers: r.trailers });
/** A trailers-only failure: its status and message, wherever they came. */
const status = (r: Raw) => ({ code: (r.trailers['grpc-status'] ?? r.headers['grpc-status']) as string, message: decodeURI(String(r.trailers['grpc-message'] ?? r.headers['grpc-message'])) });

describe('ModelInfer on node:http2 ahead of grpc-js', () => {
  it('answers as grpc-js does: the same headers, frame and trailers, for an answer and for a failure', async () => {
    const direct = await raw(frame(request(0)));
    const viaGrpcJs = await raw(frame(request(0)), { 'grpc-encoding': 'gzip' });
    expect(shape(direct)).toEqual(shape(viaGrpcJs));
    expect(direct.trailers['grpc-status']).toBe('0');
    expect(direct.body.equals(viaGrpcJs.body)).toBe(true);
    expect(direct.body.readUInt32BE(1)).toBe(direct.body.byteLength - 5);
    const answer = protos.ModelInfer!.responseDeserialize(direct.body.subarray(5)) as Obj;
    expect((answer.outputs as Obj[])[0]!.name).toBe('Y');

    const failed = [await raw(frame(request(0, 'nope'))), await raw(frame(request(0, 'nope')), { 'grpc-encoding': 'gzip' })];
    expect(shape(failed[0]!)).toEqual(shape(failed[1]!));
    expect(status(failed[0]!)).toEqual({ code: String(5), message: "Request for unknown model: 'nope' is not found" });
  });

  it('carries a large tensor both ways as grpc-js does: many DATA chunks in, the answer written from the tensor itself', async () => {
    // 1 MiB + 4 bytes: many DATA frames in, a raw output far past what is copied into the frame.
    const data = Float32Array.from({ length: 262_145 }, (_, i) => i * 0.5);
    for (const id of ['', 'x', 'xyz']) { // moves the raw bytes to each alignment in the message
      const msg = message({ model_name: 'identity_fp32', id, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length] }], raw_input_contents: [Buffer.from(data.buffer)] });
      const direct = await raw(frame(msg));
      const viaGrpcJs = await raw(frame(msg), { 'grpc-encoding': 'gzip' });
      expect(shape(direct)).toEqual(shape(viaGrpcJs));
      expect(direct.body.equals(viaGrpcJs.body)).toBe(true);
      const answer = protos.ModelInfer!.responseDeserialize(direct.body.subarray(5)) as Obj;
      const out = (answer.raw_output_contents as Buffer[])[0]!;
      expect(Buffer.from(out).equals(Buffer.from(data.buffer)), `id '${id}'`).toBe(true);
    }
  });

  it('ends a call past its grpc-timeout with DEADLINE_EXCEEDED and never computes it', async () => {
    const stats = async () => (await (await fetch(`${s.url}/v2/models/slow/stats`)).json()).model_stats[0];
    const before = await stats();
    const calls = s.grpc!.directCalls();
    // `slow` has one instance: the late call waits behind the first, which runs until the late one's
    // deadline has passed (the server reports the first as executing before the late one is sent).
    const first = rawGrpcCall(s.grpc!.port, INFER, frame(request(1500)));
    const st = s.server.model('slow').stats;
    await expect.poll(() => st.inflight === 1 && st.pending === 0, { timeout: 10_000, interval: 5 }).toBe(true);
    const late = await rawGrpcCall(s.grpc!.port, INFER, frame(request(0)), { 'grpc-timeout': '100m' });
    expect(status(late)).toEqual({ code: String(4), message: 'Deadline exceeded' });
    expect((await first).trailers['grpc-status']).toBe('0');
    // One more call behind them: had the late one stayed queued, it would have run before this one.
    expect((await raw(frame(request(0)))).trailers['grpc-status']).toBe('0');
    expect(s.grpc!.directCalls() - calls).toBe(3);
    const after = await stats();
    expect(after.execution_count - before.execution_count).toBe(2);
    expect(after.inference_stats.fail.count - before.inference_stats.fail.count).toBe(1);
  });

  it('answers a malformed timeout, no message and two messages with grpc-js\'s codes and texts, and goes on', async () => {
    // A message of 1 MiB or more is gathered into one buffer of its declared length as it comes: one cut
    // short, or followed by another, is refused as a small one is.
    const large = frame(message({ model_name: 'identity_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1 << 19] }], raw_input_contents: [Buffer.alloc(1 << 21)] }));
    for (const [body, extra, code, text] of [
      [large.subarray(0, large.byteLength - 1000), {}, 12, 'Received no request message for server streaming method /inference.GRPCInferenceService/ModelInfer'],
      [Buffer.concat([large, frame(request(0))]), {}, 12, 'Received a second request message for server streaming method /inference.GRPCInferenceService/ModelInfer'],
      [frame(request(0)), { 'grpc-timeout': 'soon' }, 13, 'Invalid grpc-timeout value "soon"'],
      [Buffer.alloc(0), {}, 12, 'Received no request message for server streaming method /inference.GRPCInferenceService/ModelInfer'],
      [Buffer.concat([frame(request(0)), frame(request(0))]), {}, 12, 'Received a second request message for server streaming method /inference.GRPCInferenceService/ModelInfer'],
    ] as [Buffer, Record<string, string>, number, string][]) {
      for (const route of [{}, { 'grpc-encoding': 'gzip' }] as Record<string, string>[]) {
        expect(status(await raw(body, { ...extra, ...route })), `${text} (${route['grpc-encoding'] ?? 'direct'})`).toEqual({ code: String(code), message: text });
      }
    }
    expect((await raw(frame(request(0)))).trailers['grpc-status']).toBe('0');
  });
});
