/**
 * Python models that answer over time, through the real servers: decoupled models (a response
 * sender used from a thread after execute returned, and `async def execute` overlapping on one
 * instance) streamed over HTTP generate_stream (SSE) and gRPC ModelStreamInfer; the response
 * sender's misuse errors; cancellation seen by the model (`request.is_cancelled()`) when an HTTP
 * client aborts or a gRPC call is cancelled; and custom metrics (pb_utils.MetricFamily) on /metrics.
 */

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpcJs from '@grpc/grpc-js';
import { GrpcClient } from '../../client/grpc.js';
import { grpcClient, parsePrometheus, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { postJson, type TestServer } from '../helpers/server.js';
import { eventually, pythonRepo, startPythonServer } from '../helpers/python-server.js';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;
let raw: GrpcTestClient;
let client: GrpcClient;

beforeAll(async () => {
  repo = pythonRepo(['repeat_py', 'async_repeat_py', 'cancel_py', 'metrics_py']);
  s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', metricsPort: 0, metricsAddress: '127.0.0.1' });
  raw = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  client = new GrpcClient(`127.0.0.1:${s.grpc!.port}`);
}, 60_000);

afterAll(async () => {
  raw?.close();
  await client?.close();
  await s?.stop();
  repo?.cleanup();
});

/** A generate_stream call's events; `onEvent` sees each one as it arrives. */
async function sse(model: string, body: unknown, onEvent?: (index: number) => void): Promise<{ status: number; events: { data: any }[] }> {
  const r = await fetch(`${s.url}/v2/models/${model}/generate_stream`, { method: 'POST', body: JSON.stringify(body) });
  const events: { data: any }[] = [];
  const reader = r.body!.getReader();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += new TextDecoder().decode(value);
    for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
      events.push({ data: JSON.parse(buf.slice(6, i)) });
      onEvent?.(events.length - 1);
      buf = buf.slice(i + 2);
    }
  }
  return { status: r.status, events };
}

const int32 = (values: number[]) => Buffer.from(Int32Array.from(values).buffer);
const streamRequest = (model: string, values: number[], parameters: Obj = {}): Obj => ({
  model_name: model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [values.length] }], raw_input_contents: [int32(values)], parameters,
});
const outOf = (m: Obj) => new Int32Array(new Uint8Array(m.infer_response.raw_output_contents[0]).buffer)[0];

describe('decoupled Python models', () => {
  it('stream each response over generate_stream as it is sent', async () => {
    // The model sends each value after the first only once this client has seen the one before (it
    // waits for a file the client creates): a server that held responses back would never finish.
    const gate = mkdtempSync(join(tmpdir(), 'tsi-gate-'));
    try {
      const r = await sse('repeat_py', { IN: [5, 6, 7], parameters: { gate } }, (i) => writeFileSync(join(gate, String(i + 1)), ''));
      expect(r.status).toBe(200);
      expect(r.events.map((e) => e.data.error ?? [e.data.OUT, e.data.IDX])).toEqual([[5, 0], [6, 1], [7, 2]]);
    } finally {
      rmSync(gate, { recursive: true, force: true });
    }
    const none = await sse('repeat_py', { IN: [] });
    expect(none.events).toEqual([]);
  }, 30_000);

  it('stream over gRPC ModelStreamInfer, with the empty final response only when asked', async () => {
    const plain = await streamAll(raw, [streamRequest('repeat_py', [1, 2, 3])]);
    expect(plain.map(outOf)).toEqual([1, 2, 3]);
    const flagged = await streamAll(raw, [streamRequest('repeat_py', [4, 5], { triton_enable_empty_final_response: { bool_param: true } })]);
    expect(flagged.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, false, true]);
    const withLast = await streamAll(raw, [streamRequest('repeat_py', [8, 9], {
      final_with_last: { bool_param: true }, triton_enable_empty_final_response: { bool_param: true },
    })]);
    expect(withLast.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, true]);
    expect(withLast.map(outOf)).toEqual([8, 9]);
  });

  it('report a model\'s error response mid-stream, and keep the stream open for other requests', async () => {
    const msgs = await streamAll(raw, [streamRequest('repeat_py', [1, 2, 3, 4], { fail_at: { int64_param: 2 } }), streamRequest('repeat_py', [7])]);
    const errors = msgs.filter((m) => m.error_message);
    expect(errors.map((m) => m.error_message)).toEqual(['repeat_py failed at 2']);
    expect(errors[0]!.infer_response.parameters.triton_final_response.bool_param).toBe(true);
    expect(msgs.filter((m) => !m.error_message).map(outOf).sort()).toEqual([1, 2, 7]);
  });

  it('flag every streamed response with triton_final_response, as Triton does, also when the client did not ask for empty finals', async () => {
    const plain = await streamAll(raw, [streamRequest('repeat_py', [1, 2, 3])]);
    expect(plain.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, false, false]);
    const withLast = await streamAll(raw, [streamRequest('repeat_py', [8, 9], { final_with_last: { bool_param: true } })]);
    expect(withLast.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, true]);
  });

  it('end the stream with the first error\'s status when the client sends the triton_grpc_error header', async () => {
    const got: Obj[] = [];
    const stream = raw.stream({ triton_grpc_error: 'true' });
    const ended = new Promise<grpcJs.ServiceError>((resolve, reject) => {
      stream.on('data', (m: Obj) => got.push(m));
      stream.on('error', resolve);
      stream.on('end', () => reject(new Error('the stream ended without an error status')));
    });
    stream.write(streamRequest('repeat_py', [1, 2, 3, 4], { fail_at: { int64_param: 2 }, delay_ms: { int64_param: 20 } }));
    const err = await ended;
    expect(err.code).toBe(grpcJs.status.INVALID_ARGUMENT);
    expect(err.details).toBe('repeat_py failed at 2');
    expect(got.map(outOf)).toEqual([1, 2]);
    expect(got.every((m) => !m.error_message)).toBe(true);
  });

  it('fail a decoupled execute that returns responses, with Triton\'s message', async () => {
    const msgs = await streamAll(raw, [streamRequest('repeat_py', [1], { wrong_return: { bool_param: true } })]);
    expect(msgs.map((m) => m.error_message)).toEqual([
      "Failed to process the request(s) for model 'repeat_py_0', message: TritonModelException: Python model 'repeat_py_0' is using the decoupled mode and the execute function must return None.",
    ]);
  });

  it('refuse a second final flag with Triton\'s message, and plain infer with Triton\'s refusal', async () => {
    await streamAll(raw, [streamRequest('repeat_py', [1])]);
    expect(await eventually(() => s.logs.some((l) => l.includes('second final refused: Unable to send response. Response sender has been closed.')))).toBe(true);
    const r = await postJson(`${s.url}/v2/models/repeat_py/infer`, { inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [1] }] });
    expect(r.status).toBe(501);
  });

  it('overlap `async def execute` requests on one instance, as Triton does', async () => {
    // After its first answer each request waits for the other to have sent its own: one after the
    // other, the first would wait in vain (and fail after 10 s).
    const meet = mkdtempSync(join(tmpdir(), 'tsi-meet-'));
    try {
      const [a, b] = await Promise.all([
        sse('async_repeat_py', { IN: [1, 2], parameters: { delay_ms: 20, meet, me: 'a', peer: 'b' } }),
        sse('async_repeat_py', { IN: [3, 4], parameters: { delay_ms: 20, meet, me: 'b', peer: 'a' } }),
      ]);
      expect(a.events.map((e) => e.data.error ?? e.data.OUT)).toEqual([1, 2]);
      expect(b.events.map((e) => e.data.error ?? e.data.OUT)).toEqual([3, 4]);
    } finally {
      rmSync(meet, { recursive: true, force: true });
    }
  }, 30_000);

  it('stream with tsi\'s gRPC client', async () => {
    const stream = client.stream();
    stream.send('repeat_py', [{ name: 'IN', datatype: 'INT32', shape: [3], data: Int32Array.of(10, 20, 30) }], { enableEmptyFinalResponse: true });
    stream.end();
    const got: number[] = [];
    for await (const item of stream) {
      if (item.result && item.result.outputs.length > 0) got.push(item.result.data<Int32Array>('OUT')[0]!);
    }
    expect(got).toEqual([10, 20, 30]);
  });
});

describe('cancellation', () => {
  const marker = join(tmpdir(), `tsi-py-cancel-${process.pid}.txt`);
  afterAll(() => rmSync(marker, { force: true }));
  const cancelled = async () => parsePrometheus(await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text()).get('tsi_py_cancelled_total');

  it('reaches request.is_cancelled() when an HTTP client aborts', async () => {
    const abort = new AbortController();
    const body = { id: 'http-abort', parameters: { marker }, inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [1] }] };
    const pending = fetch(`${s.url}/v2/models/cancel_py/infer`, { method: 'POST', body: JSON.stringify(body), signal: abort.signal }).catch((e: Error) => e);
    await new Promise((r) => setTimeout(r, 300));
    abort.abort();
    expect(await pending).toBeInstanceOf(Error);
    expect(await eventually(() => existsSync(marker) && readFileSync(marker, 'utf8').includes('http-abort'))).toBe(true);
    expect(await cancelled()).toBe(1);
  });

  it('reaches request.is_cancelled() when a gRPC call is cancelled', async () => {
    const req = { model_name: 'cancel_py', id: 'grpc-cancel', inputs: [{ name: 'X', datatype: 'INT32', shape: [1] }], raw_input_contents: [int32([1])],
      parameters: { marker: { string_param: marker } } };
    const outcome = new Promise<grpcJs.ServiceError | null>((resolve) => {
      const call = raw.raw.ModelInfer(req, new grpcJs.Metadata(), (err: grpcJs.ServiceError | null) => resolve(err));
      setTimeout(() => call.cancel(), 300);
    });
    expect((await outcome)?.code).toBe(grpcJs.status.CANCELLED);
    expect(await eventually(() => readFileSync(marker, 'utf8').includes('grpc-cancel'))).toBe(true);
    expect(await cancelled()).toBe(2);
  });
});

describe('cancellation of a stream', () => {
  it('reaches response_sender.is_cancelled() when an SSE client goes away mid-stream', async () => {
    const abort = new AbortController();
    const r = await fetch(`${s.url}/v2/models/repeat_py/generate_stream`, {
      method: 'POST', signal: abort.signal,
      body: JSON.stringify({ IN: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], parameters: { delay_ms: 60, check_cancel: true } }),
    });
    const reader = r.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toMatch(/^data: \{.*"OUT":1/);
    abort.abort();
    expect(await eventually(() => s.logs.some((l) => /repeat_py cancelled at [1-9]$/.test(l)))).toBe(true);
  });
});

describe('custom metrics', () => {
  it('shows counters, gauges and histograms a model defines on /metrics, next to nv_*', async () => {
    for (const x of [0.5, 5, 50]) {
      const r = await postJson(`${s.url}/v2/models/metrics_py/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [x] }] });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const last = await postJson(`${s.url}/v2/models/metrics_py/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [7] }] });
    expect(last.body.outputs[0].data).toEqual([4]);
    const text = await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text();
    const m = parsePrometheus(text);
    const labels = { model: 'metrics_py', version: '1' };
    expect(m.type.get('tsi_py_requests_total')).toBe('counter');
    expect(m.help.get('tsi_py_requests_total')).toBe('Requests metrics_py has seen');
    expect(m.get('tsi_py_requests_total', labels)).toBe(4);
    expect(m.type.get('tsi_py_last_value')).toBe('gauge');
    expect(m.get('tsi_py_last_value', labels)).toBe(7);
    expect(m.type.get('tsi_py_value')).toBe('histogram');
    expect([m.get('tsi_py_value_bucket', { ...labels, le: '1' }), m.get('tsi_py_value_bucket', { ...labels, le: '10' }),
      m.get('tsi_py_value_bucket', { ...labels, le: '100' }), m.get('tsi_py_value_bucket', { ...labels, le: '+Inf' })]).toEqual([1, 3, 4, 4]);
    expect(m.get('tsi_py_value_sum', labels)).toBe(62.5);
    expect(m.get('nv_inference_request_success', { model: 'metrics_py' })).toBe(4);
  });

  it('raises Triton-style errors for misuse, in the model', () => {
    const line = s.logs.find((l) => l.includes('metric errors: '))!;
    const errors = line.slice(line.indexOf('metric errors: ') + 15).split(' || ');
    expect(errors[0]).toMatch(/^Failed to increment metric value: /);
    expect(errors[1]).toMatch(/^Failed to set metric value: /);
    expect(errors[2]).toMatch(/^Failed to get metric value: /);
    expect(errors[3]).toMatch(/^Error when creating MetricFamily: metric family 'tsi_py_last_value' already exists as a gauge/);
    expect(errors[4]).toBe('Failed to create metric. Missing required buckets.');
    // A metric whose family was deleted (L0_backend_python custom_metrics' test_metric_lifetime_error).
    expect(errors.slice(5)).toEqual(Array(2).fill("Invalid metric operation as the corresponding 'MetricFamily' has been deleted."));
  });
});
