/**
 * Triton's C++ test backends that tsi builds in for Triton's qa suites, over the real server (HTTP and
 * a gRPC stream), asserting what those suites assert:
 * - square's CUSTOM_* parameters and the response statistics they produce (L0_response_statistics):
 *   per response index, success / fail / empty / cancel counts and durations, the same over HTTP and gRPC;
 * - iterative_sequence (L0_iterative_sequence): a countdown that reschedules its request through the
 *   sequence batcher's iterative scheduling, over gRPC streams and generate_stream, and its refusals;
 * - distributed_addsub (L0_passive_instance): a passive GPU instance that never gets a request.
 * Delays are scaled down from the suites' (0.4 s and 0.2 s there); durations are checked from below
 * only, as a loaded machine can only make them longer.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromRaw, grpcClient, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const INFER_MS = 40;
const OUTPUT_MS = 20;
const SLOW = { infer: 400, output: 100, cancel: 60 };

const squareConfig = (params: Record<string, number>) => `backend: "square"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: True }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
${Object.entries(params).map(([k, v]) => `parameters [{ key: "${k}" value: { string_value: "${v}" } }]`).join('\n')}\n`;

const iterativeConfig = (scheduling: string) => `backend: "iterative_sequence"\nmax_batch_size: 1
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
model_transaction_policy { decoupled: True }\n${scheduling}\ninstance_group [{ kind: KIND_CPU }]\n`;

const addSubIo = `input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]\n`;

const repo = tempRepo({
  'square_int32/config.pbtxt': squareConfig({ CUSTOM_INFER_DELAY_NS: INFER_MS * 1e6, CUSTOM_OUTPUT_DELAY_NS: OUTPUT_MS * 1e6, CUSTOM_FAIL_COUNT: 2, CUSTOM_EMPTY_COUNT: 1 }),
  'square_int32/1/.keep': '',
  'square_int32_slow/config.pbtxt': squareConfig({ CUSTOM_INFER_DELAY_NS: SLOW.infer * 1e6, CUSTOM_OUTPUT_DELAY_NS: SLOW.output * 1e6, CUSTOM_CANCEL_DELAY_NS: SLOW.cancel * 1e6 }),
  'square_int32_slow/1/.keep': '',
  'square_bad/config.pbtxt': `backend: "square"\ninput [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "X" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]\n`,
  'square_bad/1/.keep': '',
  'iterative_sequence/config.pbtxt': iterativeConfig('sequence_batching { iterative_sequence: true }'),
  'iterative_sequence/1/.keep': '',
  // The suite's test_backlog_fill: an idle limit long enough for a sequence waiting in the backlog.
  'iterative_backlog/config.pbtxt': iterativeConfig('sequence_batching { iterative_sequence: true max_sequence_idle_microseconds: 8000000 direct { max_queue_delay_microseconds: 10000000 } }'),
  'iterative_backlog/1/.keep': '',
  'iterative_idle/config.pbtxt': iterativeConfig('sequence_batching { iterative_sequence: true max_sequence_idle_microseconds: 200000 }'),
  'iterative_idle/1/.keep': '',
  'iterative_dynamic/config.pbtxt': iterativeConfig('dynamic_batching {}'),
  'iterative_dynamic/1/.keep': '',
  'distributed_int32_int32_int32/config.pbtxt': `backend: "distributed_addsub"\nmax_batch_size: 1\n${addSubIo}
instance_group [{ kind: KIND_CPU }, { kind: KIND_GPU passive: true }]\n`,
  'distributed_int32_int32_int32/1/.keep': '',
  'distributed_active_gpu/config.pbtxt': `backend: "distributed_addsub"\nmax_batch_size: 1\n${addSubIo}
instance_group [{ kind: KIND_CPU }, { kind: KIND_GPU }]\n`,
  'distributed_active_gpu/1/.keep': '',
  // Two CPU instances of which one is passive: requests taking 300 ms each run one at a time.
  'identity_passive/config.pbtxt': `backend: "identity"\nmax_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]
parameters [{ key: "execute_delay_ms" value: { string_value: "300" } }]
instance_group [{ kind: KIND_CPU count: 1 }, { kind: KIND_CPU count: 1 passive: true }]\n`,
  'identity_passive/1/.keep': '',
});

let s: TestServer;
let grpc: GrpcTestClient;

beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  grpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  grpc?.close();
  await s?.stop();
  repo.cleanup();
});

const squareRequest = (model: string, n: number) => ({ model_name: model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], contents: { int_contents: [n] } }] });

/** The model's response_stats over HTTP, checked equal to gRPC's (numbers there come as strings). */
async function responseStats(model: string): Promise<Record<string, Record<string, { count: number; ns: number }>>> {
  const http = (await getJson(`${s.url}/v2/models/${model}/stats`)).body.model_stats[0].response_stats;
  const g = (await grpc.call('ModelStatistics', { name: model })).model_stats[0].response_stats as Obj;
  const normal = Object.fromEntries(Object.entries(g).map(([k, v]) => [k, Object.fromEntries(Object.entries(v as Obj).map(([n, d]) => [n, { count: Number(d.count), ns: Number(d.ns) }]))]));
  expect(normal).toEqual(http);
  return http;
}

describe('square with CUSTOM_* parameters (L0_response_statistics)', () => {
  it('answers n responses: successes, then CUSTOM_FAIL_COUNT failures, then CUSTOM_EMPTY_COUNT sent as nothing', async () => {
    const got = await streamAll(grpc, [squareRequest('square_int32', 4)]);
    // 4 = 1 success + 2 failures + 1 empty (not sent).
    expect(got.map((m) => m.error_message)).toEqual(['', 'simulated failure', 'simulated failure']);
    expect(fromRaw(got[0]!.infer_response.raw_output_contents[0], Int32Array)).toEqual([4]);
  });

  it("keeps Triton's statistics per response index, added up over requests", async () => {
    // The test above sent 4; now 6 and 3 more, as the suite does (4, 6, 3).
    await streamAll(grpc, [squareRequest('square_int32', 6)]);
    await streamAll(grpc, [squareRequest('square_int32', 3)]);
    const stats = await responseStats('square_int32');
    // Expected counts per index, as the suite's _update_statistics_counts works them out.
    const want: Record<string, { success: number; fail: number; empty: number }> = {};
    for (const n of [4, 6, 3]) {
      for (let i = 0; i < n; i++) {
        const w = (want[i] ??= { success: 0, fail: 0, empty: 0 });
        if (i + 3 < n) w.success++;
        else if (i + 1 < n) w.fail++;
        else w.empty++;
      }
    }
    expect(Object.keys(stats).sort()).toEqual(Object.keys(want).sort());
    for (const [i, w] of Object.entries(want)) {
      const st = stats[i]!;
      const withOutput = w.success + w.fail;
      expect(st.success.count).toBe(w.success);
      expect(st.fail.count).toBe(w.fail);
      expect(st.empty_response.count).toBe(w.empty);
      expect(st.compute_infer.count).toBe(withOutput + w.empty);
      expect(st.compute_output.count).toBe(withOutput);
      expect(st.cancel.count).toBe(0);
      expect(st.compute_infer.ns).toBeGreaterThanOrEqual(0.9 * INFER_MS * 1e6 * st.compute_infer.count);
      expect(st.compute_output.ns).toBeGreaterThanOrEqual(0.9 * OUTPUT_MS * 1e6 * st.compute_output.count);
      expect(st.success.ns).toBeGreaterThanOrEqual(0.9 * (INFER_MS + OUTPUT_MS) * 1e6 * w.success);
      expect(st.empty_response.ns).toBeGreaterThanOrEqual(0.9 * INFER_MS * 1e6 * w.empty);
    }
  });

  it('stops a cancelled request at the next response, counted as cancelled after its CUSTOM_CANCEL_DELAY_NS', async () => {
    const stream = grpc.stream();
    const got: Obj[] = [];
    const closed = new Promise<void>((resolve) => {
      stream.on('data', (m: Obj) => {
        got.push(m);
        // Cancel as the suite does: on the first response, while the second is computing.
        if (got.length === 1) stream.cancel();
      });
      stream.on('error', () => resolve());
      stream.on('end', () => resolve());
    });
    stream.write(squareRequest('square_int32_slow', 4));
    await closed;
    // The second response finishes (and counts), the third sees the cancellation and sends nothing.
    let stats = await responseStats('square_int32_slow');
    for (let waited = 0; !stats['2'] && waited < 5000; waited += 100) {
      await new Promise((r) => setTimeout(r, 100));
      stats = await responseStats('square_int32_slow');
    }
    expect(Object.keys(stats).sort()).toEqual(['0', '1', '2']);
    expect(stats['0']!.success.count).toBe(1);
    expect(stats['1']!.success.count).toBe(1);
    expect(stats['2']!.cancel.count).toBe(1);
    expect(stats['2']!.compute_infer.count).toBe(0);
    expect(stats['2']!.cancel.ns).toBeGreaterThanOrEqual(0.9 * SLOW.cancel * 1e6);
    expect(stats['1']!.success.ns).toBeGreaterThanOrEqual(0.9 * (SLOW.infer + SLOW.output) * 1e6);
  });

  it("refuses a config with Triton's text", async () => {
    const index = await postJson(`${s.url}/v2/repository/index`, {});
    const bad = index.body.find((m: Obj) => m.name === 'square_bad');
    expect(bad.state).toBe('UNAVAILABLE');
    expect(bad.reason).toContain('expected 1 input, got 2');
  });
});

describe('iterative_sequence (L0_iterative_sequence)', () => {
  const request = (model: string, params: Obj = {}) => ({
    model_name: model, parameters: params, inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], contents: { int_contents: [2] } }],
  });
  const outputs = (got: Obj[]) => got.map((m) => (m.error_message ? m.error_message : fromRaw(m.infer_response.raw_output_contents[0], Int32Array)[0]));

  it('counts INPUT = 2 down as two responses, 1 then 0, the request rescheduled in between', async () => {
    expect(outputs(await streamAll(grpc, [request('iterative_sequence')]))).toEqual([1, 0]);
    // Two requests without a correlation id are two sequences, the second in the backlog until the
    // first ends (one slot): four responses.
    const two = outputs(await streamAll(grpc, [request('iterative_backlog'), request('iterative_backlog')]));
    expect(two.sort()).toEqual([0, 0, 1, 1]);
  });

  it('streams the countdown over generate_stream', async () => {
    const r = await fetch(`${s.url}/v2/models/iterative_sequence/generate_stream`, { method: 'POST', body: JSON.stringify({ INPUT: 2 }), headers: { Accept: 'text/event-stream' } });
    const events = (await r.text()).split('\n').filter((l) => l.startsWith('data:')).map((l) => JSON.parse(l.slice(5)));
    expect(events.map((e) => e.OUTPUT)).toEqual([1, 0]);
  });

  it('refuses the rescheduled request once the sequence idled past max_sequence_idle (the run takes 0.5 s)', async () => {
    const got = outputs(await streamAll(grpc, [request('iterative_idle')]));
    expect(got.at(-1)).toMatch(/must specify the START flag on the first request of the sequence/);
  });

  it("answers Triton's refusal where the scheduler cannot take a request back", async () => {
    const got = outputs(await streamAll(grpc, [request('iterative_dynamic')]));
    expect(got.at(-1)).toContain('Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE');
  });
});

describe('distributed_addsub with a passive instance (L0_passive_instance)', () => {
  it('sends requests only to the CPU instance, which hands subtraction to the passive GPU one', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i);
    const b = Array.from({ length: 16 }, () => 1);
    // Eight at once, as the suite's perf_analyzer --concurrency-range 4 does: with the CPU instance
    // busy, a scheduler that counted the passive one would hand it the next request.
    const answers = await Promise.all(Array.from({ length: 8 }, () => postJson(`${s.url}/v2/models/distributed_int32_int32_int32/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b }],
    })));
    for (const r of answers) {
      expect(r.status).toBe(200);
      const out = Object.fromEntries(r.body.outputs.map((o: Obj) => [o.name, o.data]));
      expect(out.OUTPUT0).toEqual(a.map((x) => x + 1));
      expect(out.OUTPUT1).toEqual(a.map((x) => x - 1));
    }
    const executing = s.logs.filter((l) => l.includes('distributed_int32_int32_int32') && l.includes(', executing '));
    expect(executing.length).toBe(8);
    // What the suite greps the server's log for: no GPU instance ever executed.
    expect(executing.every((l) => l.includes('(CPU device 0), executing'))).toBe(true);
  });

  it('gives a passive instance no requests: two concurrent requests on one active instance take two executions\' time', async () => {
    const t0 = performance.now();
    const answers = await Promise.all([1, 2].map((v) => postJson(`${s.url}/v2/models/identity_passive/infer`, { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], data: [v] }] })));
    // A lower bound only: the two 300 ms executions ran one after the other (both instances in use: ~300 ms).
    expect(performance.now() - t0).toBeGreaterThanOrEqual(590);
    expect(answers.map((r) => r.body.outputs[0].data[0])).toEqual([1, 2]);
  });

  it("refuses a GPU instance that is not passive, with Triton's text", async () => {
    const index = await postJson(`${s.url}/v2/repository/index`, {});
    const bad = index.body.find((m: Obj) => m.name === 'distributed_active_gpu');
    expect(bad.state).toBe('UNAVAILABLE');
    expect(bad.reason).toContain('GPU instance should be passive');
  });
});
