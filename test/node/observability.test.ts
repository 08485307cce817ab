/**
 * Observability on the real server: Prometheus metrics on their own listener (Triton's names, types,
 * HELP texts and labels, parsed as text and checked against the statistics extension after a known
 * number of requests), the statistics semantics (requests vs rows vs executions, batch_stats), the
 * logging extension changing what the real logger prints, and request tracing writing Triton-style
 * timestamp files that respect trace_rate, trace_count and log_frequency.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addSubModel, slowModel } from '../../scripts/gen-models.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient, int32Raw, parsePrometheus } from '../helpers/grpc.js';

const addSub = addSubModel('FP32', [4]);
const cfg = (name: string, extra = '') =>
  `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n${extra}\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`;
const rows = (n: number) => ({
  inputs: [
    { name: 'INPUT0', datatype: 'FP32', shape: [n, 4], data: Array(4 * n).fill(1) },
    { name: 'INPUT1', datatype: 'FP32', shape: [n, 4], data: Array(4 * n).fill(2) },
  ],
});

const TRITON_HELP: Record<string, [string, string]> = {
  nv_inference_request_success: ['counter', 'Number of successful inference requests, all batch sizes'],
  nv_inference_request_failure: ['counter', 'Number of failed inference requests, all batch sizes'],
  nv_inference_count: ['counter', 'Number of inferences performed (does not include cached requests)'],
  nv_inference_exec_count: ['counter', 'Number of model executions performed (does not include cached requests)'],
  nv_inference_request_duration_us: ['counter', 'Cumulative inference request duration in microseconds (includes cached requests)'],
  nv_inference_queue_duration_us: ['counter', 'Cumulative inference queuing duration in microseconds (includes cached requests)'],
  nv_inference_compute_input_duration_us: ['counter', 'Cumulative compute input duration in microseconds (does not include cached requests)'],
  nv_inference_compute_infer_duration_us: ['counter', 'Cumulative compute inference duration in microseconds (does not include cached requests)'],
  nv_inference_compute_output_duration_us: ['counter', 'Cumulative inference compute output duration in microseconds (does not include cached requests)'],
  nv_inference_pending_request_count: ['gauge', 'Instantaneous number of pending requests awaiting execution per-model.'],
  nv_model_load_duration_secs: ['gauge', 'Model load time in seconds'],
  nv_cpu_utilization: ['gauge', 'CPU utilization rate [0.0 - 1.0]'],
  nv_cpu_memory_total_bytes: ['gauge', 'CPU total memory (RAM), in bytes'],
  nv_cpu_memory_used_bytes: ['gauge', 'CPU used memory (RAM), in bytes'],
};

describe('metrics and statistics', () => {
  let s: TestServer;
  let repo: ReturnType<typeof tempRepo>;
  let metricsUrl: string;
  beforeAll(async () => {
    repo = tempRepo({
      'm/config.pbtxt': cfg('m'),
      'm/1/model.onnx': addSub,
      'batched/config.pbtxt': cfg('batched', 'dynamic_batching { max_queue_delay_microseconds: 200000 }'),
      'batched/1/model.onnx': addSub,
      'slow/config.pbtxt': 'name: "slow"\nbackend: "onnxruntime"\nmax_batch_size: 1\ninput [{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }]\noutput [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n',
      'slow/1/model.onnx': slowModel(250),
    });
    s = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, grpcPort: 0, grpcAddress: '127.0.0.1' });
    metricsUrl = `http://127.0.0.1:${s.metrics!.port}/metrics`;
  });
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  const scrape = async () => {
    const r = await fetch(metricsUrl);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    return parsePrometheus(await r.text());
  };

  it('serves Triton\'s families with their types and HELP texts on a listener of its own', async () => {
    const p = await scrape();
    for (const [name, [type, help]] of Object.entries(TRITON_HELP)) {
      expect(p.type.get(name), name).toBe(type);
      expect(p.help.get(name), name).toBe(help);
    }
    expect(p.get('nv_inference_request_success', { model: 'm', version: '1' })).toBe(0);
    for (const reason of ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER']) {
      expect(p.get('nv_inference_request_failure', { model: 'm', reason, version: '1' })).toBe(0);
    }
    expect(p.get('nv_model_load_duration_secs', { model: 'm', version: '1' })).toBeGreaterThan(0);
    const cpu = p.get('nv_cpu_utilization')!;
    expect(cpu).toBeGreaterThanOrEqual(0);
    expect(cpu).toBeLessThanOrEqual(1);
    expect(p.get('nv_cpu_memory_total_bytes')).toBeGreaterThan(p.get('nv_cpu_memory_used_bytes')!);
    expect(p.get('process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(p.type.get('nodejs_heap_size_used_bytes')).toBe('gauge');
    expect((await fetch(`${metricsUrl}/`)).status).toBe(200);
    expect((await fetch(metricsUrl.replace('/metrics', '/other'))).status).toBe(404);
    expect((await fetch(metricsUrl, { method: 'POST' })).status).toBe(405);
    // Not on the HTTP API's port.
    expect((await fetch(`${s.url}/metrics`)).status).toBe(404);
  });

  it('agrees with the statistics extension after a known number of requests', async () => {
    for (let i = 0; i < 7; i++) expect((await postJson(`${s.url}/v2/models/m/infer`, rows(1))).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await postJson(`${s.url}/v2/models/m/infer`, rows(3))).status).toBe(200);
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      const f32 = (v: number[]) => Buffer.from(Float32Array.from(v).buffer);
      await c.call('ModelInfer', {
        model_name: 'm', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 4] }, { name: 'INPUT1', datatype: 'FP32', shape: [2, 4] }],
        raw_input_contents: [f32(Array(8).fill(1)), f32(Array(8).fill(1))],
      });
    } finally {
      c.close();
    }
    // Rejected before the model runs: counts neither as success nor as an execution.
    expect((await postJson(`${s.url}/v2/models/m/infer`, { inputs: [] })).status).toBe(400);

    const st = (await getJson(`${s.url}/v2/models/m/stats`)).body.model_stats[0];
    const p = await scrape();
    const L = { model: 'm', version: '1' };
    expect(st.inference_stats.success.count).toBe(10);
    expect(st.inference_count).toBe(7 + 6 + 2);
    expect(st.execution_count).toBe(10);
    expect(st.inference_stats.queue.count).toBe(10);
    expect(st.inference_stats.compute_infer.count).toBe(10);
    expect(st.batch_stats.map((b: any) => [b.batch_size, b.compute_infer.count])).toEqual([[1, 7], [2, 1], [3, 2]]);
    expect(st.last_inference).toBeGreaterThan(Date.now() - 60_000);
    expect(p.get('nv_inference_request_success', L)).toBe(st.inference_stats.success.count);
    expect(p.get('nv_inference_count', L)).toBe(st.inference_count);
    expect(p.get('nv_inference_exec_count', L)).toBe(st.execution_count);
    expect(p.get('nv_inference_request_duration_us', L)).toBe(Math.floor(st.inference_stats.success.ns / 1000));
    expect(p.get('nv_inference_queue_duration_us', L)).toBe(Math.floor(st.inference_stats.queue.ns / 1000));
    expect(p.get('nv_inference_compute_input_duration_us', L)).toBe(Math.floor(st.inference_stats.compute_input.ns / 1000));
    expect(p.get('nv_inference_compute_infer_duration_us', L)).toBe(Math.floor(st.inference_stats.compute_infer.ns / 1000));
    expect(p.get('nv_inference_compute_output_duration_us', L)).toBe(Math.floor(st.inference_stats.compute_output.ns / 1000));
    expect(p.get('nv_inference_request_duration_us', L)).toBeGreaterThan(0);
    expect(p.get('nv_inference_pending_request_count', L)).toBe(0);
  });

  it('counts rows and executions separately when the dynamic batcher gathers requests', async () => {
    const answers = await Promise.all([1, 1, 2, 1].map((n) => postJson(`${s.url}/v2/models/batched/infer`, rows(n))));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    const st = (await getJson(`${s.url}/v2/models/batched/versions/1/stats`)).body.model_stats[0];
    expect(st.inference_stats.success.count).toBe(4);
    expect(st.inference_count).toBe(5);
    expect(st.execution_count).toBeLessThan(4);
    const sum = st.batch_stats.reduce((n: number, b: any) => n + b.batch_size * b.compute_infer.count, 0);
    expect(sum).toBe(5);
    expect(st.batch_stats.reduce((n: number, b: any) => n + b.compute_infer.count, 0)).toBe(st.execution_count);
    const p = await scrape();
    expect(p.get('nv_inference_count', { model: 'batched', version: '1' })).toBe(5);
    expect(p.get('nv_inference_exec_count', { model: 'batched', version: '1' })).toBe(st.execution_count);
  });

  it('shows requests waiting for the instance as pending', async () => {
    const req = { inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1], data: [1] }] };
    const all = Promise.all(Array.from({ length: 4 }, () => postJson(`${s.url}/v2/models/slow/infer`, req)));
    // One executes; the other three wait for the single instance.
    await expect.poll(async () => (await scrape()).get('nv_inference_pending_request_count', { model: 'slow', version: '1' }), { interval: 20 }).toBe(3);
    expect((await all).every((a) => a.status === 200)).toBe(true);
    expect((await scrape()).get('nv_inference_pending_request_count', { model: 'slow', version: '1' })).toBe(0);
  });

  it('lists only ready versions in statistics, with Triton\'s error for unknown models', async () => {
    const all = (await getJson(`${s.url}/v2/models/stats`)).body.model_stats.map((m: any) => `${m.name}:${m.version}`);
    expect(all).toEqual(['batched:1', 'm:1', 'slow:1']);
    const unknown = await getJson(`${s.url}/v2/models/nope/stats`);
    expect(unknown).toMatchObject({ status: 400, body: { error: "requested model 'nope' is not available" } });
  });
});

describe('logging extension', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS], logVerbose: 1 });
  });
  afterAll(async () => s?.stop());

  it('reports and changes the real logger\'s settings', async () => {
    const g = await getJson(`${s.url}/v2/logging`);
    expect(g.body).toEqual({ log_file: '', log_info: true, log_warning: true, log_error: true, log_verbose_level: 1, log_format: 'default' });
    const u = await postJson(`${s.url}/v2/logging`, { log_verbose_level: 0, log_warning: false, log_format: 'ISO8601', log_file: null });
    expect(u.body).toEqual({ log_file: '', log_info: true, log_warning: false, log_error: true, log_verbose_level: 0, log_format: 'ISO8601' });
    const before = s.logs.length;
    s.log.verbose(1, 'hidden');
    s.log.warn('hidden too');
    expect(s.logs.length).toBe(before);
    s.log.info('shown');
    expect(s.logs.at(-1)).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z I \d+ [\w.]+:\d+\] shown$/);
    await postJson(`${s.url}/v2/logging`, { log_verbose_level: 2, log_warning: true, log_format: 'default' });
    s.log.verbose(2, 'verbose again');
    expect(s.logs.at(-1)).toMatch(/^I\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [\w.]+:\d+\] verbose again$/);
    // Real work logs through it too: a request at verbose 2 leaves no error, a load would log.
    expect((await postJson(`${s.url}/v2/logging`, { log_file: '/tmp/elsewhere.log' }))).toMatchObject({
      status: 501, body: { error: 'log file location can not be updated through network protocol' },
    });
    expect(await postJson(`${s.url}/v2/logging`, { log_format: 'fancy' })).toMatchObject({
      status: 503, body: { error: 'invalid argument for --log_format, got: fancy' },
    });
    expect((await postJson(`${s.url}/v2/logging`, { log_info: 'yes' })).status).toBe(400);
    expect((await postJson(`${s.url}/v2/logging`, { log_verbose_level: -1 })).status).toBe(400);
    expect((await fetch(`${s.url}/v2/logging`, { method: 'PUT' })).status).toBe(405);
  });
});

describe('trace extension', () => {
  let s: TestServer | undefined;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tsi-trace-'));
    s = await startTestServer({
      modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1', trace: { file: join(dir, 'trace.json') },
    });
  });
  afterAll(async () => {
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const simple = {
    id: 'r1',
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) },
    ],
  };
  interface TraceEntry { id: number; model_name: string; model_version: number; request_id?: string; stamps: { name: string; ns: number }[] }
  const traces = (file: string): TraceEntry[] => {
    const recs = JSON.parse(readFileSync(file, 'utf8')) as any[];
    const heads = recs.filter((r) => r.model_name);
    return heads.map((h) => ({ ...h, stamps: recs.find((r) => r.id === h.id && r.timestamps).timestamps as { name: string; ns: number }[] }));
  };

  it('serves and validates trace settings, globally and per model', async () => {
    const g = await getJson(`${s!.url}/v2/trace/setting`);
    expect(g.body).toEqual({
      trace_level: ['OFF'], trace_rate: '1000', trace_count: '-1', log_frequency: '0', trace_file: join(dir, 'trace.json'), trace_mode: 'triton',
    });
    const bad = async (b: unknown, status: number, error: string) =>
      expect(await postJson(`${s!.url}/v2/trace/setting`, b)).toMatchObject({ status, body: { error } });
    await bad({ trace_file: '/tmp/x' }, 501, 'trace file location can not be updated through network protocol');
    await bad({ trace_level: ['OFF', 'TIMESTAMPS'] }, 400, "Expect only one trace level 'OFF' is specified");
    await bad({ trace_rate: 'often' }, 400, "Unable to parse 'trace_rate', got: often");
    await bad({ trace_count: '-2' }, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2");
    const m = await postJson(`${s!.url}/v2/models/simple/trace/setting`, { trace_rate: '7' });
    expect(m.body.trace_rate).toBe('7');
    expect((await getJson(`${s!.url}/v2/trace/setting`)).body.trace_rate).toBe('1000');
    expect((await postJson(`${s!.url}/v2/models/simple/trace/setting`, {})).body.trace_rate).toBe('1000');
    expect(await postJson(`${s!.url}/v2/models/nope/trace/setting`, {})).toMatchObject({ status: 400, body: { error: 'Request for unknown model : nope' } });
    expect((await getJson(`${s!.url}/v2/models/simple/versions/1/trace/setting`)).status).toBe(404);
  });

  it('writes Triton-style timestamps, honouring trace_rate, trace_count and log_frequency', async () => {
    const u = await postJson(`${s!.url}/v2/trace/setting`, { trace_level: ['TIMESTAMPS'], trace_rate: '2', trace_count: '3', log_frequency: '2' });
    expect(u.body).toMatchObject({ trace_level: ['TIMESTAMPS'], trace_rate: '2', trace_count: '3', log_frequency: '2' });
    const c = grpcClient(`127.0.0.1:${s!.grpc!.port}`);
    try {
      for (let i = 0; i < 8; i++) {
        if (i === 3) {
          await c.call('ModelInfer', {
            model_name: 'simple', id: 'g3', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }],
            raw_input_contents: [int32Raw(Array(16).fill(1)), int32Raw(Array(16).fill(1))],
          });
        } else expect((await postJson(`${s!.url}/v2/models/simple/infer`, { ...simple, id: `h${i}` })).status).toBe(200);
      }
    } finally {
      c.close();
    }
    // Every second request is sampled, counting from 1 as Triton does (the 2nd, 4th and 6th), and then the
    // count is spent; two traces fill file .0.
    expect((await getJson(`${s!.url}/v2/trace/setting`)).body.trace_count).toBe('0');
    await expect.poll(() => existsSync(join(dir, 'trace.json.0'))).toBe(true);
    const first = traces(join(dir, 'trace.json.0'));
    expect(first.map((t) => t.request_id)).toEqual(['h1', 'g3']);
    expect(first[0]).toMatchObject({ model_name: 'simple', model_version: 1 });
    const names = (t: (typeof first)[number]) => t.stamps.map((x) => x.name);
    expect(names(first[0]!)).toEqual([
      'HTTP_RECV_START', 'HTTP_RECV_END', 'REQUEST_START', 'QUEUE_START', 'COMPUTE_START', 'COMPUTE_INPUT_END',
      'COMPUTE_OUTPUT_START', 'COMPUTE_END', 'REQUEST_END', 'INFER_RESPONSE_COMPLETE', 'HTTP_SEND_START', 'HTTP_SEND_END',
    ].filter((n) => names(first[0]!).includes(n)));
    for (const n of ['HTTP_RECV_START', 'REQUEST_START', 'QUEUE_START', 'COMPUTE_START', 'COMPUTE_END', 'REQUEST_END', 'INFER_RESPONSE_COMPLETE', 'HTTP_SEND_END']) {
      expect(names(first[0]!)).toContain(n);
    }
    expect(names(first[1]!)).toEqual(expect.arrayContaining(['GRPC_WAITREAD_END', 'COMPUTE_START', 'COMPUTE_END', 'REQUEST_END']));
    for (const t of first) for (let i = 1; i < t.stamps.length; i++) expect(t.stamps[i]!.ns).toBeGreaterThanOrEqual(t.stamps[i - 1]!.ns);
    // The third trace waits for the next log_frequency batch, or shutdown.
    expect(existsSync(join(dir, 'trace.json.1'))).toBe(false);
    await s!.stop();
    s = undefined;
    expect(traces(join(dir, 'trace.json.1')).map((t) => t.request_id)).toEqual(['h5']);
  });
});

/**
 * Triton's TraceManager keeps the start-up setting (global_default_, from --trace-config) apart from the
 * global one: clearing a global field (`null`) goes back to the start-up value, not the built-in
 * default (L0_trace trace_endpoint_test, whose tearDown clears every field).
 */
describe('trace extension: clearing a global field', () => {
  let s: TestServer | undefined;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tsi-trace-'));
    s = await startTestServer({
      modelRepositories: [MODELS], trace: { file: join(dir, 'trace.json'), level: ['TIMESTAMPS'], rate: 6, count: 5, logFrequency: 3 },
    });
  });
  afterAll(async () => {
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('restores the start-up values', async () => {
    const started = { trace_level: ['TIMESTAMPS'], trace_rate: '6', trace_count: '5', log_frequency: '3' };
    expect((await getJson(`${s!.url}/v2/trace/setting`)).body).toMatchObject(started);
    const set = await postJson(`${s!.url}/v2/trace/setting`, { trace_level: ['OFF'], trace_rate: '2', trace_count: '1', log_frequency: '9' });
    expect(set.body).toMatchObject({ trace_level: ['OFF'], trace_rate: '2', trace_count: '1', log_frequency: '9' });
    const cleared = await postJson(`${s!.url}/v2/trace/setting`, { trace_level: null, trace_rate: null, trace_count: null, log_frequency: null });
    expect(cleared.status).toBe(200);
    expect(cleared.body).toMatchObject(started);
  });
});
