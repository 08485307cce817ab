/**
 * The gRPC API of the real Node server, through a grpc-js client over our own proto/: health (and
 * grpc.health.v1), metadata, config, inference with typed and raw contents, streams (several requests,
 * per-request errors that keep the stream open, sequences, a decoupled model and the empty final
 * response), statistics, the repository index, shared memory, trace and log settings, Triton's status
 * codes, 2 GiB message limits and gzip-compressed requests.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { readFileSync } from 'node:fs';
import { classifierPattern, identityModel } from '../../scripts/gen-models.js';
import type { Backend, BackendRequest } from '../../core/index.js';
import { MODELS, getJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { fromRaw, grpcClient, int32Raw, streamAll, type GrpcTestClient, type Obj } from '../helpers/grpc.js';

const seq = (n: number, f: (i: number) => number) => Array.from({ length: n }, (_, i) => f(i));

/** A decoupled backend: for IN = n it answers n responses OUT = 0..n-1, then a bare final flag. */
const repeatBackend = (): Backend => ({
  name: 'repeat',
  async loadModel() {
    return {
      async createInstance(spec) {
        return {
          spec, device: 'cpu',
          async execute(requests: BackendRequest[]) {
            for (const r of requests) {
              const n = (r.inputs.get('IN')!.data as Int32Array)[0]!;
              for (let i = 0; i < n; i++) r.send({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: Int32Array.of(i) }] }, false);
              setTimeout(() => r.send({ outputs: [] }, true), 5);
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
});

let s: TestServer;
let c: GrpcTestClient;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'id_fp16/config.pbtxt': 'name: "id_fp16"\nbackend: "onnxruntime"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP16 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP16 dims: [ -1 ] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n',
    'id_fp16/1/model.onnx': identityModel('FP16'),
    'repeat/config.pbtxt': 'name: "repeat"\nbackend: "repeat"\ninput [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]\nmodel_transaction_policy { decoupled: true }\n',
    'repeat/1/.keep': '',
  });
  s = await startTestServer({
    modelRepositories: [MODELS, repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', extraBackends: { repeat: repeatBackend },
  });
  c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  c?.close();
  await s?.stop();
  repo?.cleanup();
});

const simpleRequest = (a: number[], b: number[], extra: Obj = {}): Obj => ({
  model_name: 'simple',
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16] },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] },
  ],
  raw_input_contents: [int32Raw(a), int32Raw(b)],
  ...extra,
});

describe('health and metadata', () => {
  it('answers ServerLive, ServerReady, ModelReady and grpc.health.v1', async () => {
    expect(await c.call('ServerLive', {})).toEqual({ live: true });
    expect(await c.call('ServerReady', {})).toEqual({ ready: true });
    expect(await c.call('ModelReady', { name: 'simple', version: '' })).toEqual({ ready: true });
    expect(await c.call('ModelReady', { name: 'simple', version: '1' })).toEqual({ ready: true });
    expect(await c.health()).toBe('SERVING');
    expect(await c.health('inference.GRPCInferenceService')).toBe('SERVING');
    await expect(c.health('nope')).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
    // Triton answers an unknown model or version with OK and ready=false (docs/example-clients.md).
    expect(await c.call('ModelReady', { name: 'nope' })).toEqual({ ready: false });
    expect(await c.call('ModelReady', { name: 'simple', version: '7' })).toEqual({ ready: false });
    await expect(c.call('ModelReady', { name: 'simple', version: '-1' })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: "invalid model version specified '-1' , version should be an integral value > 0",
    });
  });

  it('serves server and model metadata', async () => {
    const m = await c.call('ServerMetadata', {});
    expect(m.name).toBe('triton');
    expect(m.extensions).toEqual(expect.arrayContaining(['model_repository', 'system_shared_memory', 'statistics', 'trace', 'logging']));
    const md = await c.call('ModelMetadata', { name: 'simple', version: '' });
    expect(md).toMatchObject({ name: 'simple', versions: ['1'], platform: 'onnxruntime_onnx' });
    expect(md.inputs[0]).toEqual({ name: 'INPUT0', datatype: 'INT32', shape: ['-1', '16'] });
  });

  it('serves the model config through model_config.proto, agreeing with HTTP', async () => {
    const { config } = await c.call('ModelConfig', { name: 'simple', version: '' });
    const http = (await getJson(`${s.url}/v2/models/simple/config`)).body;
    expect(config.name).toBe('simple');
    expect(config.max_batch_size).toBe(http.max_batch_size);
    expect(config.input.map((i: Obj) => [i.name, i.data_type, i.dims.map(Number)])).toEqual(
      http.input.map((i: Obj) => [i.name, i.data_type, i.dims]));
    expect(config.instance_group[0]).toMatchObject({ kind: 'KIND_CPU', count: 1 });
    expect(config.version_policy).toMatchObject({ latest: { num_versions: 1 } });
    const seqCfg = (await c.call('ModelConfig', { name: 'simple_sequence_state', version: '' })).config;
    expect(seqCfg.scheduling_choice).toBe('sequence_batching');
    expect(Number(seqCfg.sequence_batching.max_sequence_idle_microseconds)).toBe(5_000_000);
  });
});

describe('ModelInfer', () => {
  it('infers with raw contents and answers raw contents', async () => {
    const a = seq(16, (i) => i);
    const b = seq(16, () => 1);
    const r = await c.call('ModelInfer', simpleRequest(a, b, { id: 'req-7' }));
    expect(r).toMatchObject({ model_name: 'simple', model_version: '1', id: 'req-7' });
    expect(r.outputs.map((o: Obj) => [o.name, o.datatype, o.shape])).toEqual([['OUTPUT0', 'INT32', ['1', '16']], ['OUTPUT1', 'INT32', ['1', '16']]]);
    expect(r.raw_output_contents).toHaveLength(2);
    expect(fromRaw(r.raw_output_contents[0], Int32Array)).toEqual(a.map((x) => x + 1));
    expect(fromRaw(r.raw_output_contents[1], Int32Array)).toEqual(a.map((x) => x - 1));
  });

  it('infers with typed contents and a requested output subset', async () => {
    const r = await c.call('ModelInfer', {
      model_name: 'simple', model_version: '1',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], contents: { int_contents: seq(16, (i) => 10 * i) } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], contents: { int_contents: seq(16, (i) => i) } },
      ],
      outputs: [{ name: 'OUTPUT1' }],
    });
    expect(r.outputs.map((o: Obj) => o.name)).toEqual(['OUTPUT1']);
    expect(fromRaw(r.raw_output_contents[0], Int32Array)).toEqual(seq(16, (i) => 9 * i));
  });

  it('round-trips FP16 as raw bytes and refuses it as typed contents', async () => {
    const half = Uint16Array.from([0x3c00, 0xc000, 0x7bff, 0x0001]);
    const r = await c.call('ModelInfer', {
      model_name: 'id_fp16', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, 4] }], raw_input_contents: [Buffer.from(half.buffer)],
    });
    expect(r.outputs[0]).toMatchObject({ datatype: 'FP16', shape: ['1', '4'] });
    expect(fromRaw(r.raw_output_contents[0], Uint16Array)).toEqual(Array.from(half));
    await expect(c.call('ModelInfer', {
      model_name: 'id_fp16', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, 1], contents: { fp32_contents: [1] } }],
    })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("of type 'FP32', expected datatype 'FP16'") });
  });

  it('classifies over gRPC', async () => {
    const labels = readFileSync(`${MODELS}/image_classifier/labels.txt`, 'utf8').trim().split('\n');
    const img = classifierPattern(3);
    const out = await c.call('ModelInfer', {
      model_name: 'image_classifier', inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 3, 16, 16] }],
      raw_input_contents: [Buffer.from(img.buffer, img.byteOffset, img.byteLength)],
      outputs: [{ name: 'scores', parameters: { classification: { int64_param: '2' } } }],
    });
    expect(out.outputs[0]).toMatchObject({ name: 'scores', datatype: 'BYTES', shape: ['1', '2'] });
    const raw: Buffer = out.raw_output_contents[0];
    const first = raw.subarray(4, 4 + raw.readUInt32LE(0)).toString();
    expect(first).toMatch(new RegExp(`^[0-9.]+:3:${labels[3]}$`));
  });

  it('maps errors to Triton\'s status codes and texts', async () => {
    await expect(c.call('ModelInfer', simpleRequest(seq(16, () => 0), seq(16, () => 0), { model_name: 'nope' })))
      .rejects.toMatchObject({ code: grpc.status.NOT_FOUND, details: "Request for unknown model: 'nope' is not found" });
    await expect(c.call('ModelInfer', { ...simpleRequest(seq(16, () => 0), seq(16, () => 0)), raw_input_contents: [int32Raw(seq(16, () => 0))] }))
      .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: "unable to find data for input tensor 'INPUT1' for model 'simple' in request." });
    const mixed = simpleRequest(seq(16, () => 0), seq(16, () => 0));
    mixed.inputs[0].contents = { int_contents: seq(16, () => 0) };
    await expect(c.call('ModelInfer', mixed)).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    });
    await expect(c.call('ModelInfer', simpleRequest(seq(16, () => 0), seq(16, () => 0), { parameters: { sequence_start: { string_param: 'yes' } } })))
      .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: "invalid value type for 'sequence_start' parameter, expected bool_param." });
    const bad = simpleRequest(seq(16, () => 0), seq(16, () => 0));
    bad.inputs[0].shape = [1, 15];
    bad.raw_input_contents[0] = int32Raw(seq(15, () => 0));
    await expect(c.call('ModelInfer', bad)).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]"),
    });
    await expect(c.call('ModelInfer', { model_name: 'repeat', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1] }], raw_input_contents: [int32Raw([1])] }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: "ModelInfer RPC doesn't support models with decoupled transaction policy" });
    await expect(c.call('RepositoryIndex', { repository_name: 'other' }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: "'repository_name' specification is not supported" });
  });

  it('accepts gzip-compressed requests and messages far above grpc\'s 4 MiB default', async () => {
    const gz = grpcClient(`127.0.0.1:${s.grpc!.port}`, { 'grpc.default_compression_algorithm': 2 });
    try {
      const r = await gz.call('ModelInfer', simpleRequest(seq(16, (i) => i), seq(16, (i) => i)));
      expect(fromRaw(r.raw_output_contents[0], Int32Array)).toEqual(seq(16, (i) => 2 * i));
    } finally {
      gz.close();
    }
    // 8 MiB of FP16 identity: 4 Mi elements in, the same back.
    const n = 4 * 1024 * 1024;
    const big = new Uint16Array(n);
    for (let i = 0; i < n; i++) big[i] = i & 0x7bff;
    const r = await c.call('ModelInfer', {
      model_name: 'id_fp16', inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, n] }], raw_input_contents: [Buffer.from(big.buffer)],
    });
    expect(r.raw_output_contents[0].byteLength).toBe(2 * n);
    expect(Buffer.compare(r.raw_output_contents[0], Buffer.from(big.buffer))).toBe(0);
  });
});

describe('ModelStreamInfer', () => {
  it('answers several requests on one stream and reports a bad one without closing it', async () => {
    const msgs = await streamAll(c, [
      simpleRequest(seq(16, () => 1), seq(16, () => 2), { id: 'a' }),
      { ...simpleRequest(seq(16, () => 0), seq(16, () => 0), { id: 'b' }), model_name: 'nope' },
      simpleRequest(seq(16, () => 5), seq(16, () => 5), { id: 'c' }),
    ]);
    expect(msgs).toHaveLength(3);
    const byId = new Map(msgs.map((m) => [m.infer_response.id, m]));
    expect(byId.get('b')!.error_message).toBe("Request for unknown model: 'nope' is not found");
    expect(byId.get('a')!.error_message).toBe('');
    expect(fromRaw(byId.get('a')!.infer_response.raw_output_contents[0], Int32Array)).toEqual(seq(16, () => 3));
    expect(fromRaw(byId.get('c')!.infer_response.raw_output_contents[0], Int32Array)).toEqual(seq(16, () => 10));
  });

  it('runs a sequence over a stream, in order', async () => {
    const step = (v: number, flags: Obj) => ({
      model_name: 'simple_sequence_state', inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1] }], raw_input_contents: [int32Raw([v])],
      parameters: { sequence_id: { int64_param: '4242' }, ...flags },
    });
    const s2 = c.stream();
    const got: number[] = [];
    const done = new Promise<void>((resolve, reject) => {
      s2.on('data', (m: Obj) => {
        expect(m.error_message).toBe('');
        got.push(fromRaw(m.infer_response.raw_output_contents[0], Int32Array)[0] as number);
      });
      s2.on('end', resolve);
      s2.on('error', reject);
    });
    // Each step waits for the previous answer: a sequence's requests must arrive in order.
    const values = [3, 4, 5, 6];
    for (let i = 0; i < values.length; i++) {
      const flags: Obj = {};
      if (i === 0) flags.sequence_start = { bool_param: true };
      if (i === values.length - 1) flags.sequence_end = { bool_param: true };
      s2.write(step(values[i]!, flags));
      await expect.poll(() => got.length).toBe(i + 1);
    }
    s2.end();
    await done;
    expect(got).toEqual([3, 7, 12, 18]);
  });

  it('streams a decoupled model\'s responses and, when asked, the empty final one', async () => {
    const req = (n: number, empty: boolean, id: string): Obj => ({
      model_name: 'repeat', id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1] }], raw_input_contents: [int32Raw([n])],
      parameters: empty ? { triton_enable_empty_final_response: { bool_param: true } } : {},
    });
    const plain = await streamAll(c, [req(3, false, 'p')]);
    expect(plain.map((m) => fromRaw(m.infer_response.raw_output_contents[0], Int32Array)[0])).toEqual([0, 1, 2]);
    expect(plain.map((m) => m.infer_response.parameters.triton_final_response.bool_param)).toEqual([false, false, false]);
    const flagged = await streamAll(c, [req(2, true, 'f')]);
    expect(flagged).toHaveLength(3);
    expect(flagged.map((m) => m.infer_response.parameters.triton_final_response?.bool_param)).toEqual([false, false, true]);
    expect(flagged[2]!.infer_response.outputs).toEqual([]);
    const none = await streamAll(c, [req(0, true, 'z')]);
    expect(none).toHaveLength(1);
    expect(none[0]!.infer_response.parameters.triton_final_response.bool_param).toBe(true);
  });
});

describe('statistics and repository', () => {
  it('serves ModelStatistics that count requests, rows and executions like HTTP', async () => {
    const before = (await c.call('ModelStatistics', { name: 'simple', version: '' })).model_stats[0];
    for (let i = 0; i < 3; i++) await c.call('ModelInfer', simpleRequest(seq(16, () => i), seq(16, () => i)));
    const after = (await c.call('ModelStatistics', { name: 'simple', version: '1' })).model_stats[0];
    expect(Number(after.inference_stats.success.count) - Number(before.inference_stats.success.count)).toBe(3);
    expect(Number(after.inference_count) - Number(before.inference_count)).toBe(3);
    expect(Number(after.execution_count) - Number(before.execution_count)).toBe(3);
    expect(Number(after.inference_stats.queue.count)).toBe(Number(after.inference_stats.success.count));
    expect(after.batch_stats.find((b: Obj) => b.batch_size === '1')).toBeDefined();
    const http = (await getJson(`${s.url}/v2/models/simple/stats`)).body.model_stats[0];
    expect(http.inference_stats.success.count).toBe(Number(after.inference_stats.success.count));
    const all = await c.call('ModelStatistics', { name: '', version: '' });
    expect(all.model_stats.map((m: Obj) => m.name)).toContain('simple_sequence');
    await expect(c.call('ModelStatistics', { name: 'nope' }))
      .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: "requested model 'nope' is not available" });
  });

  it('lists the repository index and refuses load/unload outside explicit mode', async () => {
    const idx = await c.call('RepositoryIndex', { repository_name: '', ready: true });
    expect(idx.models).toEqual(expect.arrayContaining([{ name: 'simple', version: '1', state: 'READY', reason: '' }]));
    await expect(c.call('RepositoryModelLoad', { model_name: 'simple' })).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE, details: 'explicit model load / unload is not allowed if polling is enabled',
    });
    await expect(c.call('RepositoryModelUnload', { model_name: 'simple' })).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });
});

describe('settings and shared-memory RPCs', () => {
  it('reads and updates log settings, which take effect', async () => {
    const r = await c.call('LogSettings', { settings: {} });
    expect(r.settings.log_verbose_level).toEqual({ uint32_param: 1, parameter_choice: 'uint32_param' });
    const u = await c.call('LogSettings', { settings: { log_verbose_level: { uint32_param: 0 }, log_info: { bool_param: false } } });
    expect(u.settings.log_verbose_level.uint32_param).toBe(0);
    expect(u.settings.log_info.bool_param).toBe(false);
    const before = s.logs.length;
    s.log.info('should not print');
    s.log.verbose(1, 'should not print either');
    expect(s.logs.length).toBe(before);
    await c.call('LogSettings', { settings: { log_info: { bool_param: true }, log_verbose_level: { uint32_param: 1 } } });
    s.log.info('prints again');
    expect(s.logs.at(-1)).toMatch(/prints again$/);
    await expect(c.call('LogSettings', { settings: { log_file: { string_param: '/tmp/x.log' } } })).rejects.toMatchObject({
      code: grpc.status.UNIMPLEMENTED, details: 'log file location can not be updated through network protocol',
    });
  });

  it('reads and updates trace settings globally and per model', async () => {
    const g = await c.call('TraceSetting', { settings: {}, model_name: '' });
    expect(g.settings.trace_level.value).toEqual(['OFF']);
    expect(g.settings.trace_rate.value).toEqual(['1000']);
    const m = await c.call('TraceSetting', { model_name: 'simple', settings: { trace_rate: { value: ['5'] }, trace_level: { value: ['TIMESTAMPS'] } } });
    expect(m.settings.trace_rate.value).toEqual(['5']);
    expect(m.settings.trace_level.value).toEqual(['TIMESTAMPS']);
    expect((await c.call('TraceSetting', { settings: {} })).settings.trace_rate.value).toEqual(['1000']);
    const cleared = await c.call('TraceSetting', { model_name: 'simple', settings: { trace_rate: { value: [] }, trace_level: { value: [] } } });
    expect(cleared.settings.trace_rate.value).toEqual(['1000']);
    await expect(c.call('TraceSetting', { settings: { trace_file: { value: ['/tmp/t.json'] } } }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: 'trace file location can not be updated through network protocol' });
    await expect(c.call('TraceSetting', { model_name: 'nope', settings: {} }))
      .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: 'Request for unknown model : nope' });
  });

  it('refuses system shared memory unless allowed, and CUDA shared memory with UNIMPLEMENTED', async () => {
    await expect(c.call('SystemSharedMemoryRegister', { name: 'r', key: '/r', offset: 0, byte_size: 64 }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: expect.stringContaining('--allow-client-shm=true') });
    expect(await c.call('SystemSharedMemoryStatus', { name: '' })).toEqual({ regions: {} });
    // CUDA regions are refused as client shared memory first, as in Triton.
    await expect(c.call('CudaSharedMemoryRegister', { name: 'g', raw_handle: Buffer.alloc(64), device_id: 0, byte_size: 64 }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: expect.stringContaining('--allow-client-shm=true') });
    expect(await c.call('CudaSharedMemoryStatus', { name: '' })).toEqual({ regions: {} });
    await expect(c.call('CudaSharedMemoryUnregister', { name: '' }))
      .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: expect.stringContaining('--allow-client-shm=true') });
  });
});
