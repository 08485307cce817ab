/**
 * Shutdown in phases through the programmatic API (RunningServer.beginDrain / stop), with real HTTP
 * and gRPC listeners: not ready while everything is still served; then a gRPC client on its own
 * HTTP/2 connection receives GOAWAY while its call in flight completes; a sequence in progress on an
 * open stream finishes (its next requests are taken, a new sequence is not) before the models unload.
 * The signals, the drain delay and the exit code are test/node/shutdown-cli.test.ts's.
 */

import { afterEach, describe, expect, it } from 'vitest';
import * as http2 from 'node:http2';
import { createLogger } from '../../core/index.js';
import { startServer, type RunningServer } from '../../runtime-node/index.js';
import { loadProtos } from '../../runtime-node/grpc/server.js';
import { grpcClient, type Obj } from '../helpers/grpc.js';
import { getJson, postJson, tempRepo } from '../helpers/server.js';

const io = 'input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n';
const files = {
  // Answers X + 1 after `ms` milliseconds.
  'slow/config.pbtxt': `name: "slow"\nbackend: "javascript"\n${io}`,
  'slow/1/model.js': `export default class {
    async execute(requests) {
      await new Promise((r) => setTimeout(r, 600));
      return requests.map((r) => ({ outputs: { Y: Float32Array.of(r.input('X').data[0] + 1) } }));
    }
  }`,
  // A running sum per sequence, kept by the model (one instance, one slot per sequence).
  'acc/config.pbtxt': `name: "acc"\nbackend: "javascript"\nmax_batch_size: 0\n${io}sequence_batching { max_sequence_idle_microseconds: 20000000 }\n`,
  'acc/1/model.js': `export default class {
    sum = 0;
    execute(requests) {
      return requests.map((r) => {
        this.sum += r.input('X').data[0];
        return { outputs: { Y: Float32Array.of(this.sum) } };
      });
    }
  }`,
};

const quiet = createLogger(() => {}, 0);
let running: RunningServer | undefined;
let repo: ReturnType<typeof tempRepo> | undefined;

async function start(): Promise<{ url: string; grpc: string }> {
  repo = tempRepo(files);
  running = await startServer({ modelRepositories: [repo.path], httpPort: 0, httpAddress: '127.0.0.1', grpcPort: 0, grpcAddress: '127.0.0.1', log: quiet });
  return { url: `http://127.0.0.1:${running.http!.port}`, grpc: `127.0.0.1:${running.grpc!.port}` };
}

afterEach(async () => {
  await running?.stop();
  running = undefined;
  repo?.cleanup();
});

const x = (v: number) => ({ inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [v] }] });
const rawX = (v: number) => ({ inputs: [{ name: 'X', datatype: 'FP32', shape: [1] }], raw_input_contents: [Buffer.from(Float32Array.of(v).buffer)] });
const yOf = (res: Obj) => new Float32Array(new Uint8Array(res.raw_output_contents[0]).buffer)[0];

describe('phase a: not ready, still serving', () => {
  it('says not ready on HTTP and gRPC (server and model) while inference, metadata and live still answer', async () => {
    const { url, grpc } = await start();
    const c = grpcClient(grpc);
    try {
      expect((await fetch(`${url}/v2/health/ready`)).status).toBe(200);
      running!.beginDrain();
      expect((await fetch(`${url}/v2/health/ready`)).status).toBe(400);
      expect((await fetch(`${url}/v2/health/live`)).status).toBe(200);
      expect((await fetch(`${url}/v2/models/acc/ready`)).status).toBe(400);
      expect(await c.call('ServerReady', {})).toEqual({ ready: false });
      expect(await c.call('ModelReady', { name: 'slow' })).toEqual({ ready: false });
      expect(await c.call('ServerLive', {})).toEqual({ live: true });
      expect(await c.health()).toBe('NOT_SERVING');
      expect((await postJson(`${url}/v2/models/slow/infer`, x(2))).body.outputs[0].data).toEqual([3]);
      expect(yOf(await c.call('ModelInfer', { model_name: 'slow', ...rawX(4) }))).toBe(5);
      expect((await getJson(`${url}/v2/models/slow`)).status).toBe(200);
      expect(running!.shutdownProgress().phase).toBe('not ready');
    } finally {
      c.close();
    }
  });
});

describe('phase b: gRPC', () => {
  it('sends GOAWAY to an open HTTP/2 session while its call in flight completes', async () => {
    const { grpc } = await start();
    const protos = loadProtos().inference;
    const session = http2.connect(`http://${grpc}`);
    const goaway = new Promise<{ code: number; at: number }>((resolve) => session.on('goaway', (code) => resolve({ code, at: performance.now() })));
    session.on('error', () => {});
    const body = protos.ModelInfer!.requestSerialize({ model_name: 'slow', ...rawX(41) }) as Buffer;
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
    frame.writeUInt32BE(body.length, 1);
    const req = session.request({ ':method': 'POST', ':path': protos.ModelInfer!.path, 'content-type': 'application/grpc', te: 'trailers' });
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    const done = new Promise<{ status: string; at: number }>((resolve) => req.on('trailers', (t) => resolve({ status: String(t['grpc-status']), at: performance.now() })));
    req.end(frame);
    // The call is running in the model (600 ms) when the shutdown begins.
    await new Promise((r) => setTimeout(r, 200));
    expect(running!.server.inflightRequests()).toBe(1);
    const stopped = running!.stop({ drainDelayMs: 0, timeoutMs: 10_000 });
    const g = await goaway;
    expect(g.code).toBe(http2.constants.NGHTTP2_NO_ERROR);
    const d = await done;
    expect(d.status).toBe('0');
    expect(g.at).toBeLessThan(d.at);
    const msg = Buffer.concat(chunks);
    const res = protos.ModelInfer!.responseDeserialize(msg.subarray(5, 5 + msg.readUInt32BE(1))) as Obj;
    expect(yOf(res)).toBe(42);
    const report = await stopped;
    expect(report.unfinished).toBe(0);
    // And the listener is gone: a new connection is refused.
    const again = http2.connect(`http://${grpc}`);
    const err = await new Promise<NodeJS.ErrnoException>((resolve) => again.on('error', resolve));
    expect(err.code).toBe('ECONNREFUSED');
    session.destroy();
  });
});

describe('phase c: a sequence in progress', () => {
  it('finishes on its open stream before the models unload; a new sequence is refused', async () => {
    const { grpc } = await start();
    const c = grpcClient(grpc);
    const s = c.stream();
    const answers: Obj[] = [];
    let wake: (() => void) | undefined;
    s.on('data', (m: Obj) => {
      answers.push(m);
      wake?.();
    });
    s.on('error', () => {});
    const next = async (n: number) => {
      while (answers.length < n) await new Promise<void>((r) => (wake = r));
      return answers[n - 1]!;
    };
    const step = (v: number, params: Obj) => ({ model_name: 'acc', id: String(v), ...rawX(v), parameters: Object.fromEntries(Object.entries(params).map(([k, val]) => [k, typeof val === 'boolean' ? { bool_param: val } : { int64_param: val }])) });
    try {
      s.write(step(1, { sequence_id: 7, sequence_start: true }));
      expect(yOf((await next(1)).infer_response)).toBe(1);
      let stoppedAt = 0;
      const stopped = running!.stop({ drainDelayMs: 0, timeoutMs: 10_000 }).then((r) => {
        stoppedAt = performance.now();
        return r;
      });
      await new Promise((r) => setTimeout(r, 150));
      expect(running!.shutdownProgress()).toMatchObject({ phase: 'draining', sequences: 1 });
      s.write(step(2, { sequence_id: 7 }));
      expect(yOf((await next(2)).infer_response)).toBe(3);
      // A sequence that had not begun is not taken any more.
      s.write(step(100, { sequence_id: 8, sequence_start: true }));
      expect((await next(3)).error_message).toMatch(/Server is stopping/);
      await new Promise((r) => setTimeout(r, 150));
      expect(stoppedAt).toBe(0);
      const endAt = performance.now();
      s.write(step(4, { sequence_id: 7, sequence_end: true }));
      expect(yOf((await next(4)).infer_response)).toBe(7);
      s.end();
      const report = await stopped;
      expect(stoppedAt).toBeGreaterThan(endAt);
      expect(report.unfinished).toBe(0);
    } finally {
      c.close();
    }
  });
});
