/**
 * Large tensors over gRPC (issue #20). Flow control: with Node's 64 KiB windows a 4 MB tensor crossed
 * in ~64 stop-and-wait round trips and gRPC ran at 0.3 of HTTP's req/s, so the server must advertise
 * its large stream window and frame size in its first SETTINGS and open its connection window, and
 * tsi's gRPC client (grpc-js) and `tsi-node perf`'s node:http2 load path must open theirs, as a
 * stand-in server sees them. Framing: an answer grpc/wire-writer.ts wrote goes out as the frame it was
 * written in, not copied into a new one. And a 4 MB FP32 tensor round-trips intact through the server.
 */

import { connect, createServer, type ClientHttp2Session, type Http2Server, type ServerHttp2Session, type Settings } from 'node:http2';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GRPC_CLIENT_WINDOW, GrpcClient } from '../../client/grpc.js';
import { BaseServerInterceptingCall } from '@grpc/grpc-js/build/src/server-interceptors.js';
import { GRPC_SERVER_HTTP2 } from '../../runtime-node/grpc/server.js';
import { writeModelInferResponse } from '../../runtime-node/grpc/wire-writer.js';
import { wireSender } from '../../runtime-node/perf/wire.js';
import { identityModel } from '../../scripts/gen-models.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const N = (4 * 2 ** 20) / 4;
let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'identity_fp32/config.pbtxt': 'name: "identity_fp32"\nbackend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n',
    'identity_fp32/1/model.onnx': identityModel('FP32', { batch: false }),
  });
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', maxInputSize: 2 ** 26 });
}, 60_000);
afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

/** Resolves once the session has applied the peer's SETTINGS and every frame sent before a PING. */
async function settled(session: ClientHttp2Session): Promise<Settings> {
  const [settings] = (await once(session, 'remoteSettings')) as [Settings];
  await new Promise<void>((resolve, reject) => session.ping((err) => (err ? reject(err) : resolve())));
  return settings;
}

describe('the gRPC server', () => {
  it('advertises its stream window and frame size in SETTINGS and opens its connection window', async () => {
    // A raw client at Node's defaults: what any HTTP/2 client, grpc C++ included, is told.
    const session = connect(`http://127.0.0.1:${s.grpc!.port}`);
    try {
      const settings = await settled(session);
      expect(settings.initialWindowSize).toBe(GRPC_SERVER_HTTP2.streamWindow);
      expect(settings.maxFrameSize).toBe(GRPC_SERVER_HTTP2.maxFrameSize);
      // What this client may send before the server's next WINDOW_UPDATE: far more than a 4 MB tensor.
      expect(session.state.remoteWindowSize).toBe(GRPC_SERVER_HTTP2.connectionWindow);
      expect(GRPC_SERVER_HTTP2.streamWindow).toBeGreaterThan(4 * 2 ** 20 + 64);
    } finally {
      session.destroy();
    }
  });

  it("sends an answer in the frame grpc/wire-writer.ts wrote it in, and frames other messages as grpc-js does", () => {
    // The server's framing step (grpc-js's private serializeMessage, wrapped once a server listens).
    const frame = (BaseServerInterceptingCall.prototype as unknown as { serializeMessage: (v: unknown) => Buffer }).serializeMessage;
    const call = { handler: { serialize: (v: Buffer) => v } };
    const msg = writeModelInferResponse({ model_name: 'm', model_version: '1', outputs: [{ name: 'OUT', datatype: 'FP32', shape: [4096], data: new Float32Array(4096) }] });
    const framed = frame.call(call, msg);
    expect(framed.buffer).toBe(msg.buffer);
    expect(framed.byteOffset + 5).toBe(msg.byteOffset);
    expect([framed[0], framed.readUInt32BE(1)]).toEqual([0, msg.byteLength]);
    const other = Buffer.from('abc');
    expect([...frame.call(call, other)]).toEqual([0, 0, 0, 0, 3, 0x61, 0x62, 0x63]);
  });

  it('answers a 4 MB FP32 tensor intact to tsi gRPC client', async () => {
    const data = Float32Array.from({ length: N }, (_, i) => i * 0.25);
    const client = new GrpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      const res = await client.infer('identity_fp32', [{ name: 'INPUT0', datatype: 'FP32', shape: [N], data }]);
      const out = res.outputs.find((o) => o.name === 'OUTPUT0')!;
      expect(out.shape).toEqual([N]);
      const got = out.data as Float32Array;
      // Bytes, not toEqual: vitest compares a million floats one by one in seconds.
      expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(data.buffer))).toBe(true);
    } finally {
      client.close();
    }
  });
});

describe('tsi gRPC clients', () => {
  let stand: Http2Server;
  const seen: { settings: Settings; session: ServerHttp2Session }[] = [];
  beforeAll(async () => {
    // A stand-in server that records each client's SETTINGS and session, then refuses the call.
    stand = createServer();
    stand.on('session', (session) => session.once('remoteSettings', (settings: Settings) => seen.push({ settings, session })));
    stand.on('stream', (stream) => stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12' }, { endStream: true }));
    stand.listen(0, '127.0.0.1');
    await once(stand, 'listening');
  });
  afterAll(() => new Promise<void>((resolve) => stand.close(() => resolve())));
  const target = () => `127.0.0.1:${(stand.address() as AddressInfo).port}`;
  const input = [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [4], data: new Float32Array(4) }];

  it('open the same windows: GrpcClient (grpc-js) and the perf node:http2 path', async () => {
    const client = new GrpcClient(target());
    const wire = wireSender({ protocol: 'grpc', url: target(), model: 'identity_fp32', headers: {}, inputSets: [input], callOptions: {} })!;
    try {
      await expect(client.infer('identity_fp32', input)).rejects.toThrow(/UNIMPLEMENTED|12/);
      await expect(wire.send(0)).rejects.toThrow();
      expect(seen.length).toBe(2);
      for (const { settings, session } of seen) {
        expect(settings.initialWindowSize).toBe(GRPC_CLIENT_WINDOW);
        // The client's connection-level WINDOW_UPDATE follows its SETTINGS once it has the server's.
        await expect.poll(() => session.state.remoteWindowSize).toBe(GRPC_CLIENT_WINDOW);
      }
    } finally {
      client.close();
      wire.close();
    }
  });
});
