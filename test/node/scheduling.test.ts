/**
 * Scheduling through the real HTTP server with real ONNX models on onnxruntime-node: 1,000+ concurrent
 * distinct requests on a dynamically batched model each get exactly their rows (and really were
 * batched); two instances overlap in time; queue policies answer 503 with Triton's texts and serve
 * priorities first; sequences over HTTP (`sequence_id` as number and string, start/end flags) keep
 * their implicit state per sequence across slots, instances and the backlog, and idle ones are reaped.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { identityModel, slowModel } from '../../scripts/gen-models.js';
import { grpcClient } from '../helpers/grpc.js';
import { expectComputeOverlap } from '../helpers/overlap.js';
import { MODELS, blockingJsModel, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const onnx = (m: string) => readFileSync(join(MODELS, m, '1', 'model.onnx'));
const io = (t: string, n: string, dims: string) => `{ name: "${n}" data_type: ${t} dims: ${dims} }`;
const slowConfig = (name: string, extra: string, maxBatch = 4) =>
  `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: ${maxBatch}\ninput [${io('TYPE_FP32', 'INPUT', '[1]')}]\n`
  + `output [${io('TYPE_FP32', 'OUTPUT', '[1]')}]\nparameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n${extra}`;
const simpleSeq = readFileSync(join(MODELS, 'simple_sequence_state', 'config.pbtxt'), 'utf8');

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'batched/config.pbtxt': readFileSync(join(MODELS, 'simple', 'config.pbtxt'), 'utf8')
      .replace('name: "simple"', 'name: "batched"')
      .replace(/instance_group[\s\S]*$/, 'instance_group [{ count: 2 kind: KIND_CPU }]\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n'),
    'batched/1/model.onnx': onnx('simple'),
    'slow2/config.pbtxt': slowConfig('slow2', 'instance_group [{ count: 2 kind: KIND_CPU }]\n'),
    'slow2/1/model.onnx': slowModel(150),
    // One instance that blocks (without using the CPU) for the request's `ms`; a queue of 2 whose
    // requests expire after 1 s.
    'limited/config.pbtxt': `name: "limited"\nbackend: "javascript"\nmax_batch_size: 1\ninput [${io('TYPE_FP32', 'X', '[1]')}]\n`
      + `output [${io('TYPE_FP32', 'Y', '[1]')}]\ninstance_group [{ count: 1 kind: KIND_CPU }]\n`
      + 'dynamic_batching { default_queue_policy { max_queue_size: 2 default_timeout_microseconds: 1000000 } }\n',
    'limited/1/model.js': blockingJsModel(0),
    'prio/config.pbtxt': slowConfig('prio', 'instance_group [{ count: 1 kind: KIND_CPU }]\n'
      + 'dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n', 1),
    'prio/1/model.onnx': slowModel(100),
    // L0_model_queue's test_max_priority_levels: UINT64_MAX levels, the default one past UINT32_MAX.
    'prio_max/config.pbtxt': slowConfig('prio_max', 'instance_group [{ count: 1 kind: KIND_CPU }]\n'
      + 'dynamic_batching { priority_levels: 18446744073709551615 default_priority_level: 4294967296 }\n', 1),
    'prio_max/1/model.onnx': slowModel(100),
    // L0_config_json's max_priority_level.pbtxt, as it is.
    'max_priority_level/config.pbtxt': `name: "max_priority_level"
backend: "identity"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching: {
    priority_levels: 18446744073709551615
    default_priority_level: 4294967295
    priority_queue_policy: [ { key: 4294967296 value: { timeout_action: REJECT default_timeout_microseconds: 18446744073709551615 allow_timeout_override: true max_queue_size: 10 } } ]
}
`,
    'max_priority_level/1/.keep': '',
    'seq2/config.pbtxt': simpleSeq.replace('name: "simple_sequence_state"', 'name: "seq2"').replace('max_batch_size: 8', 'max_batch_size: 2')
      .replace('max_sequence_idle_microseconds: 5000000', 'max_sequence_idle_microseconds: 200000').replace('count: 1', 'count: 2'),
    'seq2/1/model.onnx': onnx('simple_sequence_state'),
    'simple_sequence_state/config.pbtxt': simpleSeq,
    'simple_sequence_state/1/model.onnx': onnx('simple_sequence_state'),
    'simple_dyna_sequence/config.pbtxt': readFileSync(join(MODELS, 'simple_dyna_sequence', 'config.pbtxt'), 'utf8'),
    'simple_dyna_sequence/1/model.onnx': onnx('simple_dyna_sequence'),
    'simple_string_dyna_sequence/config.pbtxt': readFileSync(join(MODELS, 'simple_string_dyna_sequence', 'config.pbtxt'), 'utf8'),
    'simple_string_dyna_sequence/1/model.js': readFileSync(join(MODELS, 'simple_string_dyna_sequence', '1', 'model.js'), 'utf8'),
    // As L0_http makes its simple_string_dyna_sequence: the same config on Triton's dyna_sequence backend.
    'builtin_dyna/config.pbtxt': readFileSync(join(MODELS, 'simple_string_dyna_sequence', 'config.pbtxt'), 'utf8')
      .replace('name: "simple_string_dyna_sequence"', 'name: "builtin_dyna"').replace('backend: "javascript"', 'backend: "dyna_sequence"'),
    'builtin_dyna/1/.keep': '',
    // qa's custom_sequence_int32 as L0_sequence_stress makes its models2: Triton's `sequence` backend,
    // max_batch_size 2 and two instances (4 slots), a 3 ms execution delay.
    'builtin_seq/config.pbtxt': `name: "builtin_seq"
backend: "sequence"
max_batch_size: 2
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "3" } } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
`,
    'builtin_seq/1/.keep': '',
  });
  // Traces (off until a test turns them on for a model) give the server's own compute timestamps.
  s = await startTestServer({ modelRepositories: [repo.path], trace: { file: join(repo.path, 'trace.json') }, grpcPort: 0, grpcAddress: '127.0.0.1' });
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const infer = (model: string, body: unknown) => postJson(`${s.url}/v2/models/${model}/infer`, body);
/** Resolves once `check` holds, polling the server's state (never a fixed sleep). */
async function until(check: () => boolean, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}
const stats = async (model: string) => (await getJson(`${s.url}/v2/models/${model}/stats`)).body.model_stats[0];

describe('dynamic batching over HTTP', () => {
  it('gives each of 1,200 concurrent distinct requests exactly its own rows, in real batches', async () => {
    const N = 1200;
    const jobs = Array.from({ length: N }, (_, i) => {
      const rows = (i % 3) + 1;
      const a = Array.from({ length: rows * 16 }, (_, k) => i * 100 + k);
      const b = Array.from({ length: rows * 16 }, (_, k) => k - i);
      const body = {
        id: `r${i}`,
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [rows, 16], data: a },
          { name: 'INPUT1', datatype: 'INT32', shape: [rows, 16], data: b },
        ],
      };
      return { a, b, rows, res: infer('batched', body) };
    });
    let rowsTotal = 0;
    for (const [i, { a, b, rows, res }] of jobs.entries()) {
      const r = await res;
      expect(r.status).toBe(200);
      expect(r.body.id).toBe(`r${i}`);
      const out = Object.fromEntries(r.body.outputs.map((o: { name: string; data: number[]; shape: number[] }) => [o.name, o]));
      expect(out.OUTPUT0.shape).toEqual([rows, 16]);
      expect(out.OUTPUT0.data).toEqual(a.map((x, k) => x + b[k]!));
      expect(out.OUTPUT1.data).toEqual(a.map((x, k) => x - b[k]!));
      rowsTotal += rows;
    }
    const st = await stats('batched');
    expect(st.inference_count).toBe(rowsTotal);
    expect(st.inference_stats.success.count).toBe(N);
    expect(st.execution_count).toBeLessThan(N / 2);
    expect(Math.max(...st.batch_stats.map((b: { batch_size: number }) => b.batch_size))).toBeGreaterThan(4);
    expect(Math.max(...st.batch_stats.map((b: { batch_size: number }) => b.batch_size))).toBeLessThanOrEqual(8);
  }, 60_000);

  it('runs two instances at the same time', async () => {
    const one = { inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1], data: [1] }] };
    await Promise.all([infer('slow2', one), infer('slow2', one)]); // warm both instances
    // Each request is its own execution (no dynamic batching here).
    await expectComputeOverlap(s.url, join(repo.path, 'trace.json'), 'slow2', 2, () => Promise.all([0, 1].map(async () => {
      expect((await infer('slow2', one)).status).toBe(200);
    })));
  }, 30_000);

  it('answers queue-full and expired requests with 503 and Triton\'s texts', async () => {
    const body = (id: string, ms = 0) => ({ id, parameters: { ms }, inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 1], data: [1] }] });
    // Each step waits for the server's own queue state, not for time: on a busy machine a request
    // sent 30 ms after another may still reach the server first.
    const st = s.server.model('limited').stats;
    const running = infer('limited', body('running', 3000));
    await until(() => st.inflight === 1 && st.pending === 0, 'the first request executing');
    // The one instance is busy for 3 s from here; the queued requests expire after 1 s (the third
    // comes well within that second, and they expire well before the instance is free).
    const queued = [infer('limited', body('q1')), infer('limited', body('q2'))];
    await until(() => st.pending === 2, 'two requests queued');
    const full = await infer('limited', body('full'));
    expect(full.status).toBe(503);
    expect(full.body.error).toBe('[request id: full] Exceeds maximum queue size');
    for (const q of await Promise.all(queued)) {
      expect(q.status).toBe(503);
      expect(q.body.error).toBe('Request timeout expired');
    }
    expect((await running).status).toBe(200);
  }, 30_000);

  it("prints 64-bit config values past 2^53 with the digits the file wrote, as Triton does (L0_config_json's greps)", async () => {
    const text = await (await fetch(`${s.url}/v2/models/max_priority_level/config`)).text();
    for (const want of ['"priority_levels":18446744073709551615', '"default_priority_level":4294967295',
      '"4294967296":{"timeout_action":"REJECT","default_timeout_microseconds":18446744073709551615,"allow_timeout_override":true,"max_queue_size":10}']) {
      expect(text.split(want).length - 1, `${want} once in ${text}`).toBe(1);
    }
    // The rest of the document is unchanged, and still JSON.
    expect(JSON.parse(text).dynamic_batching.priority_levels).toBe(18446744073709551615);
  });

  it("carries them exactly in gRPC's ModelConfig too: a grpc-js client with our proto reads every digit back", async () => {
    // proto-loader hands uint64 fields over as decimal strings (longs: String), so nothing rounds on this side.
    const client = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      const { config } = await client.call('ModelConfig', { name: 'max_priority_level' });
      expect(config.dynamic_batching.priority_levels).toBe('18446744073709551615');
      expect(config.dynamic_batching.default_priority_level).toBe('4294967295');
      // protobufjs names a 64-bit map key by its 8 bytes, little-endian, one char each.
      const policies = Object.entries(config.dynamic_batching.priority_queue_policy as Record<string, unknown>)
        .map(([k, v]) => [[...k].reduceRight((n, c) => (n << 8n) | BigInt(c.charCodeAt(0)), 0n).toString(), v]);
      expect(policies.map(([k]) => k)).toEqual(['4294967296']);
      expect(policies[0]![1]).toMatchObject({
        timeout_action: 'REJECT', default_timeout_microseconds: '18446744073709551615', allow_timeout_override: true, max_queue_size: 10,
      });
      // A value inside 2^53 is its plain number, as before.
      expect((await client.call('ModelConfig', { name: 'prio' })).config.dynamic_batching.priority_levels).toBe('2');
    } finally {
      client.close();
    }
  });

  it.each([['prio', 2], ['prio_max', 4294967297]])('%s: serves priority 1 before the default level, then priority %d', async (model, low) => {
    const body = (priority?: number) => ({
      ...(priority ? { parameters: { priority } } : {}), inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1], data: [1] }],
    });
    const done: string[] = [];
    const go = (name: string, p?: number) => infer(model, body(p)).then((r) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      done.push(name);
    });
    const first = go('first');
    await new Promise((r) => setTimeout(r, 30));
    const rest = [go('low-a'), go('low-b', low)];
    await new Promise((r) => setTimeout(r, 5));
    await Promise.all([first, ...rest, go('high', 1)]);
    expect(done).toEqual(['first', 'high', 'low-a', 'low-b']);
  }, 30_000);
});

const step = (model: string, id: number | string, x: number, flags: { start?: boolean; end?: boolean } = {}) =>
  infer(model, {
    parameters: { sequence_id: id, ...(flags.start ? { sequence_start: true } : {}), ...(flags.end ? { sequence_end: true } : {}) },
    inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: [x] }],
  });
const out = (r: { status: number; body: any }) => {
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.outputs.find((o: { name: string }) => o.name === 'OUTPUT').data[0] as number;
};

/** Runs one sequence's steps in order, returning its outputs. */
async function sequence(model: string, id: number | string, xs: number[]): Promise<number[]> {
  const outs: number[] = [];
  for (const [k, x] of xs.entries()) outs.push(out(await step(model, id, x, { start: k === 0, end: k === xs.length - 1 })));
  return outs;
}
const sums = (xs: number[]) => xs.map((_, k) => xs.slice(0, k + 1).reduce((a, b) => a + b, 0));

describe('sequence batching over HTTP', () => {
  it('keeps implicit state per sequence: 20 concurrent sequences on 8 slots, numeric and string ids', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => (i % 2 ? 1000 + i : `client-${i}`));
    const inputs = ids.map((_, i) => Array.from({ length: 6 }, (_, k) => i * 7 + k + 1));
    const results = await Promise.all(ids.map((id, i) => sequence('simple_sequence_state', id, inputs[i]!)));
    results.forEach((r, i) => expect(r).toEqual(sums(inputs[i]!)));
    const st = await stats('simple_sequence_state');
    expect(st.inference_count).toBe(120);
    expect(st.execution_count).toBeLessThan(120);
  }, 60_000);

  it('routes sequences to slots over two instances and keeps them apart', async () => {
    const xs = [[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400], [5, 5, 5, 5], [7, 7, 7, 7]];
    const results = await Promise.all(xs.map((x, i) => sequence('seq2', 500 + i, x)));
    results.forEach((r, i) => expect(r).toEqual(sums(xs[i]!)));
  }, 30_000);

  it('passes the correlation id to the oldest-strategy model', async () => {
    const big = 2 ** 40 + 3;
    const results = await Promise.all([7, 8, big].map((id) => sequence('simple_dyna_sequence', id, [1, 2, 3])));
    // Triton's simple_dyna_sequence: READY * (INPUT + START + END * int32(CORRID)).
    expect(results[0]).toEqual([2, 2, 10]);
    expect(results[1]).toEqual([2, 2, 11]);
    expect(results[2]).toEqual([2, 2, 6]);
    const str = await step('simple_dyna_sequence', 'abc', 1, { start: true });
    expect(str.status).toBe(400);
    // Triton's texts (L0_sequence_corrid_batcher test_corrid_data_type), a string id to an integer
    // control and an integer id to a string one.
    expect(str.body.error).toContain("sequence batching control 'CORRID' data-type is 'BYTES', but model 'simple_dyna_sequence' expects 'UINT64'");
    const num = await step('simple_string_dyna_sequence', 123, 1, { start: true });
    expect(num.status).toBe(400);
    expect(num.body.error).toContain("sequence batching control 'CORRID' data-type is 'UINT64', but model 'simple_string_dyna_sequence' expects 'BYTES'");
  }, 30_000);

  it("accumulates per string correlation id on Triton's dyna_sequence backend, built in (L0_http's model)", async () => {
    const results = await Promise.all(['7', '12'].map((id) => sequence('builtin_dyna', id, [1, 2, 3])));
    // START sets the sum of INPUT, later steps add, END adds the id.
    expect(results).toEqual([[1, 3, 13], [1, 3, 18]]);
    const bad = await step('builtin_dyna', 'abc', 1, { start: true });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain('dyna sequence backend expects correlation ID to be decodable into an integer');
  }, 30_000);

  it("accumulates per batch slot on Triton's sequence backend, built in: 6 sequences over 4 slots of 2 instances (L0_sequence_stress's model)", async () => {
    const xs = [[1, 2, 3, 4], [10, 20, 30], [100, 200], [5, 5, 5, 5, 5], [7, -7, 7], [3]];
    const results = await Promise.all(xs.map((x, i) => sequence('builtin_seq', 900 + i, x)));
    results.forEach((r, i) => expect(r).toEqual(sums(xs[i]!)));
    // Every element of OUTPUT is the accumulator; more than one timestep in a request is refused.
    const wide = await infer('builtin_seq', { parameters: { sequence_id: 990, sequence_start: true }, inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 3], data: [1, 2, 3] }] });
    expect(wide.body.outputs[0]).toMatchObject({ shape: [1, 3], data: [6, 6, 6] });
    const two = await infer('builtin_seq', { parameters: { sequence_id: 991, sequence_start: true }, inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [2, 1], data: [1, 2] }] });
    expect(two.status).toBe(400);
  }, 30_000);

  it('rejects unknown sequences and batched requests with Triton\'s texts', async () => {
    const r = await step('simple_sequence_state', 424242, 1);
    expect(r.status).toBe(400);
    expect(r.body.error).toBe(
      "inference request for sequence 424242 to model 'simple_sequence_state' must specify the START flag on the first request of the sequence",
    );
    const b = await infer('simple_sequence_state', {
      id: 'b2', parameters: { sequence_id: 9, sequence_start: true },
      inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [2, 1], data: [1, 2] }],
    });
    expect(b.status).toBe(400);
    expect(b.body.error).toBe("inference request to model 'simple_sequence_state' must specify batch-size 1 due to requirements of sequence batcher");
    const ctl = await infer('simple_sequence_state', {
      parameters: { sequence_id: 9, sequence_start: true },
      inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: [1] }, { name: 'START', datatype: 'INT32', shape: [1, 1], data: [1] }],
    });
    expect(ctl.status).toBe(400);
    expect(ctl.body.error).toMatch(/input 'START' for model 'simple_sequence_state' is supplied by the server \(sequence control or state\)/);
  });

  it('reaps an idle sequence: its next request must START again', async () => {
    expect(out(await step('seq2', 'idle', 3, { start: true }))).toBe(3);
    expect(out(await step('seq2', 'idle', 4))).toBe(7);
    await new Promise((r) => setTimeout(r, 450));
    const r = await step('seq2', 'idle', 5);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/sequence idle to model 'seq2' must specify the START flag/);
    expect(out(await step('seq2', 'idle', 5, { start: true, end: true }))).toBe(5);
  }, 10_000);
});

describe('ragged batches on a model without a batch dimension (L0_batcher VARIABLE, onnx_zero_1_float32)', () => {
  it('loads with allow_ragged_batch and a scattered batch output, batches two shapes, scatters the answer back', async () => {
    // Triton's qa turns the nobatch identity model into this: max_batch_size 8, INPUT0 ragged, OUTPUT0
    // scattered by INPUT0's shapes (the model itself sees and returns one flat row).
    const r = tempRepo({
      'onnx_zero_1_float32/config.pbtxt': `name: "onnx_zero_1_float32"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0"
allow_ragged_batch: true
 data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ ${io('TYPE_FP32', 'OUTPUT0', '[ -1 ]')} ]
batch_output [{ target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT0" }]
dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }
`,
      'onnx_zero_1_float32/1/model.onnx': identityModel('FP32', { batch: false }),
    });
    const srv = await startTestServer({ modelRepositories: [r.path] });
    try {
      const send = (n: number) => postJson(`${srv.url}/v2/models/onnx_zero_1_float32/infer`, {
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, n], data: Array.from({ length: n }, (_, i) => n * 10 + i) }],
      });
      // Two requests of different shapes make the preferred batch of 2: one execution, no waiting.
      const [a, b] = await Promise.all([send(4), send(8)]);
      expect(a.status, JSON.stringify(a.body)).toBe(200);
      expect(a.body.outputs[0]).toMatchObject({ shape: [1, 4], data: [40, 41, 42, 43] });
      expect(b.body.outputs[0]).toMatchObject({ shape: [1, 8], data: [80, 81, 82, 83, 84, 85, 86, 87] });
      const st = (await getJson(`${srv.url}/v2/models/onnx_zero_1_float32/stats`)).body.model_stats[0];
      expect(st.execution_count).toBe(1);
      expect(st.batch_stats.map((x: any) => x.batch_size)).toEqual([2]);
    } finally {
      await srv.stop();
      r.cleanup();
    }
  }, 60_000);
});
