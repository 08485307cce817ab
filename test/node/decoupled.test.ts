/**
 * Decoupled models over the real servers: a JavaScript model that sends 0, 1 or many responses per
 * request (and errors mid-stream), delivered by HTTP `generate_stream` (server-sent events, sent as
 * they happen), `generate` (exactly one response) and gRPC ModelStreamInfer (with and without the
 * empty final response); plain `infer` refuses them. Also: `generate` on an ordinary ONNX model, and a
 * decoupled ensemble (the default token_streamer followed by a JavaScript step).
 */

import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSubModel } from '../../scripts/gen-models.js';
import { grpcClient, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { MODELS, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const FILES: Record<string, string | Uint8Array> = {
  // COUNT responses OUT = 0..COUNT-1; `fail_at` sends an error there instead (and ends the stream);
  // `last_is_final` puts the final flag on the last data response instead of a bare one.
  'js_stream/config.pbtxt': `name: "js_stream"\nbackend: "javascript"\ninput [{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]\nmodel_transaction_policy { decoupled: true }\n`,
  'js_stream/1/model.mjs': `
    export default class {
      execute(requests) {
        for (const r of requests) {
          const sender = r.responseSender();
          const n = r.input('COUNT').data[0];
          const failAt = r.parameters.fail_at;
          setTimeout(() => {
            for (let i = 0; i < n; i++) {
              if (i === failAt) return sender.send(new Error('stream broke at ' + i), true);
              sender.send({ outputs: { OUT: [i] } }, r.parameters.last_is_final === true && i === n - 1);
            }
            sender.send(null, true);
          }, 1);
        }
      }
    }`,
  'addsub4/config.pbtxt': `name: "addsub4"\nbackend: "onnxruntime"\nmax_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
instance_group [{ kind: KIND_CPU count: 1 }]\n`,
  'addsub4/1/model.onnx': addSubModel('FP32', [4], true),
  // token_streamer → shout: a decoupled ensemble.
  'shout/config.pbtxt': `name: "shout"\nbackend: "javascript"\ninput [{ name: "T" data_type: TYPE_STRING dims: [ 1 ] }]\noutput [{ name: "U" data_type: TYPE_STRING dims: [ 1 ] }]\n`,
  'shout/1/model.js': `export default class { execute(rs) { return rs.map((r) => ({ outputs: { U: [r.input('T').data[0].toUpperCase() + '!'] } })); } }`,
  'loud_streamer/config.pbtxt': `name: "loud_streamer"\nplatform: "ensemble"
input [{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }]\noutput [{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }]
ensemble_scheduling { step [
  { model_name: "token_streamer" model_version: -1 input_map { key: "text_input" value: "text_input" } output_map { key: "text_output" value: "token" } },
  { model_name: "shout" model_version: -1 input_map { key: "T" value: "token" } output_map { key: "U" value: "text_output" } }
] }\n`,
  'loud_streamer/1/README.txt': 'ensemble',
  // BLS into a decoupled model: inferStream collects every token; plain infer is refused.
  'js_collect/config.pbtxt': `name: "js_collect"\nbackend: "javascript"\ninput [{ name: "T" data_type: TYPE_STRING dims: [ 1 ] }]\noutput [{ name: "U" data_type: TYPE_STRING dims: [ 1 ] }]\n`,
  'js_collect/1/model.js': `
    export default class {
      initialize(args) { this.server = args.server; }
      async execute(requests) {
        return Promise.all(requests.map(async (r) => {
          const tokens = [];
          const req = { model_name: 'token_streamer', inputs: { text_input: [r.input('T').data[0]] } };
          await this.server.inferStream(req, (resp, final) => tokens.push(resp.outputs.text_output ? resp.outputs.text_output.data[0] : (final ? '<end>' : '?')));
          const refused = await this.server.infer(req).then(() => 'accepted', (e) => e.code + ': ' + e.message);
          return { outputs: { U: [tokens.join('|')] }, parameters: { refused } };
        }));
      }
    }`,
};

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;
let grpc: GrpcTestClient;

beforeAll(async () => {
  repo = tempRepo(FILES);
  cpSync(join(MODELS, 'token_streamer'), join(repo.path, 'token_streamer'), { recursive: true });
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  grpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  grpc?.close();
  await s?.stop();
  repo?.cleanup();
});

/** POSTs to generate_stream and returns the status, content type and each `data:` event (parsed). */
async function sse(model: string, body: unknown) {
  const r = await fetch(`${s.url}/v2/models/${model}/generate_stream`, { method: 'POST', body: JSON.stringify(body) });
  // `read`: which of the body's reads brought the event (events sent apart arrive in reads apart).
  const events: { read: number; data: any }[] = [];
  const reader = r.body!.getReader();
  let buf = '';
  for (let read = 0; ; read++) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += new TextDecoder().decode(value);
    for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
      const chunk = buf.slice(0, i);
      buf = buf.slice(i + 2);
      expect(chunk.startsWith('data: ')).toBe(true);
      events.push({ read, data: JSON.parse(chunk.slice(6)) });
    }
  }
  expect(buf).toBe('');
  return { status: r.status, type: r.headers.get('content-type'), events };
}

describe('decoupled models over HTTP', () => {
  it('refuses plain infer with Triton\'s message', async () => {
    const r = await postJson(`${s.url}/v2/models/js_stream/infer`, { inputs: [{ name: 'COUNT', datatype: 'INT32', shape: [1], data: [2] }] });
    expect(r.status).toBe(501);
    expect(r.body.error).toBe("HTTP end point doesn't support models with decoupled transaction policy");
  });

  it('generate_stream sends 0, 1 and many responses as server-sent events', async () => {
    const none = await sse('js_stream', { COUNT: 0 });
    expect(none).toMatchObject({ status: 200, type: 'text/event-stream; charset=utf-8', events: [] });
    const one = await sse('js_stream', { COUNT: 1 });
    expect(one.events.map((e) => e.data)).toEqual([{ OUT: 0, model_name: 'js_stream', model_version: '1' }]);
    const many = await sse('js_stream', { COUNT: 5 });
    expect(many.events.map((e) => e.data.OUT)).toEqual([0, 1, 2, 3, 4]);
    const flagged = await sse('js_stream', { COUNT: 3, last_is_final: true });
    expect(flagged.events.map((e) => e.data.OUT)).toEqual([0, 1, 2]);
  });

  it('generate_stream reports an error after the first event as an error event under 200', async () => {
    const mid = await sse('js_stream', { COUNT: 5, parameters: { fail_at: 2 } });
    expect(mid.status).toBe(200);
    expect(mid.events.map((e) => e.data)).toEqual([
      { OUT: 0, model_name: 'js_stream', model_version: '1' },
      { OUT: 1, model_name: 'js_stream', model_version: '1' },
      { error: 'stream broke at 2' },
    ]);
    const first = await sse('js_stream', { COUNT: 5, fail_at: 0 });
    expect(first.status).toBe(400);
    expect(first.events.map((e) => e.data)).toEqual([{ error: 'stream broke at 0' }]);
  });

  it('refuses a bad generate request before inference with a JSON error', async () => {
    const bad = await fetch(`${s.url}/v2/models/js_stream/generate_stream`, { method: 'POST', body: JSON.stringify({ COUNT: 'three' }) });
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toBe('application/json');
    expect((await bad.json()).error).toMatch(/input 'COUNT'.*expected an integer/);
    const unknown = await postJson(`${s.url}/v2/models/nope/generate_stream`, { COUNT: 1 });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe("Request for unknown model: 'nope' is not found");
  });

  it('generate wants exactly one response', async () => {
    const one = await postJson(`${s.url}/v2/models/js_stream/generate`, { COUNT: 1 });
    expect(one).toMatchObject({ status: 200, body: { OUT: 0, model_name: 'js_stream', model_version: '1' } });
    const many = await postJson(`${s.url}/v2/models/js_stream/generate`, { COUNT: 3 });
    expect(many.body.error).toBe('generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses');
  });

  it('generate maps JSON fields to the inputs of an ordinary model and outputs back to fields', async () => {
    const r = await postJson(`${s.url}/v2/models/addsub4/generate`, { INPUT0: [1, 2, 3, 4], INPUT1: [1, 1, 1, 1], parameters: { note: 'x' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({ OUTPUT0: [2, 3, 4, 5], OUTPUT1: [0, 1, 2, 3], model_name: 'addsub4', model_version: '1' });
  });

  it('streams token_streamer token by token as they are produced', async () => {
    const r = await sse('token_streamer', { text_input: 'tokens arrive one by one', delay_ms: 250 });
    expect(r.events.map((e) => e.data.text_output)).toEqual(['tokens', 'arrive', 'one', 'by', 'one']);
    // The model pauses 250 ms before each token: held back until the end, all five would come in
    // one read; as produced, the first comes in a read of its own, 1 s before the last is made
    // (only a client stalled that long could see them together).
    expect(r.events.filter((e) => e.read === r.events[0]!.read)).toHaveLength(1);
    expect(r.events[4]!.read).toBeGreaterThan(r.events[0]!.read);
    const capped = await sse('token_streamer', { text_input: 'a b c d', max_tokens: 2 });
    expect(capped.events.map((e) => e.data.text_output)).toEqual(['a', 'b']);
  });

  it('lets a JavaScript model stream from a decoupled model through BLS', async () => {
    const r = await postJson(`${s.url}/v2/models/js_collect/infer`, { inputs: [{ name: 'T', datatype: 'BYTES', shape: [1], data: ['x y z'] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0].data).toEqual(['x|y|z']);
    expect(r.body.parameters.refused).toBe("UNSUPPORTED: model 'token_streamer' uses the decoupled transaction policy: call server.inferStream() for it");
  });

  it('runs a decoupled ensemble: every streamed token flows through the next step', async () => {
    const cfg = (await (await fetch(`${s.url}/v2/models/loud_streamer/config`)).json()) as Obj;
    expect(cfg.model_transaction_policy).toEqual({ decoupled: true });
    const r = await sse('loud_streamer', { text_input: 'ensembles stream too' });
    expect(r.events.map((e) => e.data.text_output).sort()).toEqual(['ENSEMBLES!', 'STREAM!', 'TOO!']);
  });
});

describe('decoupled models over gRPC ModelStreamInfer', () => {
  const bytesRaw = (s: string) => {
    const b = Buffer.from(s);
    const out = Buffer.alloc(4 + b.length);
    out.writeUInt32LE(b.length, 0);
    b.copy(out, 4);
    return out;
  };
  const req = (text: string, empty: boolean, model = 'token_streamer'): Obj => ({
    model_name: model, id: text, inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1] }], raw_input_contents: [bytesRaw(text)],
    parameters: empty ? { triton_enable_empty_final_response: { bool_param: true } } : {},
  });
  const text = (m: Obj) => Buffer.from(m.infer_response.raw_output_contents[0]).subarray(4).toString();

  it('streams each response and, only when asked, the empty final one', async () => {
    const plain = await streamAll(grpc, [req('one two three', false)]);
    expect(plain.map(text)).toEqual(['one', 'two', 'three']);
    expect(plain.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, false, false]);
    const flagged = await streamAll(grpc, [req('one two', true)]);
    expect(flagged.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, false, true]);
    expect(flagged[2]!.infer_response.outputs).toEqual([]);
    const empty = await streamAll(grpc, [req('', true)]);
    expect(empty).toHaveLength(1);
    expect(empty[0]!.infer_response.parameters.triton_final_response.bool_param).toBe(true);
    const nothing = await streamAll(grpc, [req('', false)]);
    expect(nothing).toEqual([]);
  });

  it('streams a decoupled ensemble and reports a mid-stream error without closing the stream', async () => {
    const loud = await streamAll(grpc, [req('a b', false, 'loud_streamer')]);
    expect(loud.map(text).sort()).toEqual(['A!', 'B!']);
    const count = (n: number, failAt?: number): Obj => ({
      model_name: 'js_stream', inputs: [{ name: 'COUNT', datatype: 'INT32', shape: [1] }], raw_input_contents: [Buffer.from(Int32Array.of(n).buffer)],
      parameters: failAt === undefined ? {} : { fail_at: { int64_param: failAt } },
    });
    const msgs = await streamAll(grpc, [count(3, 1), count(2)]);
    expect(msgs.filter((m) => m.error_message)).toEqual([expect.objectContaining({ error_message: 'stream broke at 1' })]);
    expect(msgs.filter((m) => !m.error_message)).toHaveLength(3);
  });
});

/** A server of `repo` with gRPC, and a gRPC client of it, for one describe block. */
function serveWithGrpc(repo: { path: string; cleanup: () => void }): { s: TestServer; c: GrpcTestClient } {
  const served = {} as { s: TestServer; c: GrpcTestClient };
  beforeAll(async () => {
    served.s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
    served.c = grpcClient(`127.0.0.1:${served.s.grpc!.port}`);
  });
  afterAll(async () => {
    served.c?.close();
    await served.s?.stop();
    repo.cleanup();
  });
  return served;
}

/**
 * Triton's NonDecoupledTest (L0_decoupled): the built-in repeat backend under `decoupled: false`. It
 * sends its one response and then the final flag on its own; the request gets that response (HTTP,
 * gRPC ModelInfer, a gRPC stream). More than one response is an error, in Triton's words.
 */
describe('the repeat backend with decoupled: false', () => {
  const repo = tempRepo({
    'repeat_int32/config.pbtxt': `name: "repeat_int32"\nbackend: "repeat"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: false }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }, { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }]\n`,
    'repeat_int32/1/.keep': '',
  });
  const served = serveWithGrpc(repo);
  // Triton's matrix (IN, DELAY, WAIT), its delays cut from seconds to milliseconds.
  const MATRIX: [number[], number[], number][] = [[[1], [0], 0], [[1], [40], 20], [[1], [20], 40]];
  const json = (inp: number[], delay: number[], wait: number) => ({
    inputs: [
      { name: 'IN', datatype: 'INT32', shape: [inp.length], data: inp },
      { name: 'DELAY', datatype: 'UINT32', shape: [delay.length], data: delay },
      { name: 'WAIT', datatype: 'UINT32', shape: [1], data: [wait] },
    ],
  });
  const proto = (inp: number[], delay: number[], wait: number) => ({
    model_name: 'repeat_int32',
    inputs: [
      { name: 'IN', datatype: 'INT32', shape: [inp.length], contents: { int_contents: inp } },
      { name: 'DELAY', datatype: 'UINT32', shape: [delay.length], contents: { uint_contents: delay } },
      { name: 'WAIT', datatype: 'UINT32', shape: [1], contents: { uint_contents: [wait] } },
    ],
  });
  const outs = (r: Obj) => Object.fromEntries(r.outputs.map((o: Obj, i: number) => [o.name, r.raw_output_contents[i].readInt32LE(0)]));

  it('answers once with OUT = IN and IDX = 0 over HTTP, gRPC and a gRPC stream', async () => {
    for (const [inp, delay, wait] of MATRIX) {
      const h = await postJson(`${served.s.url}/v2/models/repeat_int32/infer`, json(inp, delay, wait));
      expect(h.status, JSON.stringify(h.body)).toBe(200);
      expect(Object.fromEntries(h.body.outputs.map((o: Obj) => [o.name, o.data[0]]))).toEqual({ OUT: 1, IDX: 0 });
      expect(outs(await served.c.call('ModelInfer', proto(inp, delay, wait)))).toEqual({ OUT: 1, IDX: 0 });
      const streamed = await streamAll(served.c, [proto(inp, delay, wait)]);
      expect(streamed).toHaveLength(1);
      expect(outs(streamed[0]!.infer_response)).toEqual({ OUT: 1, IDX: 0 });
    }
    expect((await served.c.call('ModelReady', { name: 'repeat_int32' })).ready).toBe(true);
  });

  it("refuses a second response with Triton's text", async () => {
    const h = await postJson(`${served.s.url}/v2/models/repeat_int32/infer`, json([1, 2], [0, 0], 0));
    expect(h).toMatchObject({ status: 500, body: { error: 'expected a single response, got 2' } });
  });
});

/**
 * Triton's square test backend (L0_decoupled's square_int32, L0_response_statistics): IN = n gets n
 * responses OUT = n on a gRPC stream, then the final flag; a non-decoupled config loads as in Triton.
 */
describe('the square backend', () => {
  const config = (decoupled: boolean) => `backend: "square"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: ${decoupled} }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]\n`;
  const repo = tempRepo({
    'square_int32/config.pbtxt': config(true),
    'square_int32/1/.keep': '',
    'square_plain/config.pbtxt': config(false),
    'square_plain/1/.keep': '',
  });
  const served = serveWithGrpc(repo);
  const request = (n: number) => ({ model_name: 'square_int32', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], contents: { int_contents: [n] } }] });

  it('streams IN = n as n responses OUT = n', async () => {
    for (const n of [0, 1, 4]) {
      const got = await streamAll(served.c, [request(n)]);
      expect(got.map((m) => m.error_message)).toEqual(Array(n).fill(''));
      expect(got.map((m) => m.infer_response.raw_output_contents[0].readInt32LE(0))).toEqual(Array(n).fill(n));
    }
  });

  it('loads a config that is not decoupled, as Triton\'s square checks no transaction policy: IN = 1 is one response', async () => {
    const r = await postJson(`${served.s.url}/v2/models/square_plain/infer`, { inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [1] }] });
    expect(r).toMatchObject({ status: 200, body: { outputs: [{ name: 'OUT', data: [1] }] } });
  });
});
