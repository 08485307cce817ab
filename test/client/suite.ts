/**
 * One behaviour suite for both clients: every tritonclient operation against the real tsi server,
 * asserted identically over HTTP and gRPC (only the error status numbers differ, by the protocol's own
 * tables). Operations whose server side is not built yet (the route answers 404 "Not Found", or gRPC
 * says the method is not implemented) are skipped with that reason printed, so the suite starts
 * covering them the day they land.
 */

import { describe, expect, it, type TestContext } from 'vitest';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { InferenceServerError, type InferResult } from '../../client/index.js';
import type { InferenceClient } from '../../client/inference-client.js';
import { classifierPattern, IMAGE_CLASSIFIER_LABELS } from '../../scripts/gen-models.js';

export interface SuiteContext {
  /** A client of the server over the default repository (model control mode none). */
  client: () => InferenceClient;
  /** A client of a server in explicit model-control mode with only `simple` loaded. */
  explicitClient: () => InferenceClient;
  /** A client pointed at a port where nothing listens. */
  deadClient: () => InferenceClient;
}

/** Protocol status for a core error code: HTTP by Triton's table, gRPC by grpc_utils.cc's. */
export const STATUS = {
  http: { INVALID_ARG: 400, NOT_FOUND: 404, UNAVAILABLE: 503, UNSUPPORTED: 501, ALREADY_EXISTS: 400 },
  grpc: { INVALID_ARG: 3, NOT_FOUND: 5, UNAVAILABLE: 14, UNSUPPORTED: 12, ALREADY_EXISTS: 6 },
} as const;

/** Expects an InferenceServerError from `source` with `status` (any non-zero one when undefined). */
export async function expectError(p: Promise<unknown>, source: string, status: number | undefined, message: string | RegExp): Promise<InferenceServerError> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err, 'expected the call to fail').toBeInstanceOf(InferenceServerError);
  const e = err as InferenceServerError;
  expect({ source: e.source, status: e.status }).toEqual({ source, status: status ?? (e.status || -1) });
  if (typeof message === 'string') expect(e.message).toContain(message);
  else expect(e.message).toMatch(message);
  return e;
}

const range = (n: number, f: (i: number) => number) => Int32Array.from({ length: n }, (_, i) => f(i));

export function clientSuite(protocol: 'http' | 'grpc', s: SuiteContext, label: string = protocol): void {
  const st = STATUS[protocol];
  const a = range(16, (i) => i);
  const b = range(16, () => 3);
  const simpleInputs = [
    { name: 'INPUT0', shape: [1, 16], data: a },
    { name: 'INPUT1', shape: [1, 16], data: b },
  ];

  describe(`${label} client: health and metadata`, () => {
    it('reports server and model readiness', async () => {
      const c = s.client();
      expect(await c.isServerLive()).toBe(true);
      expect(await c.isServerReady()).toBe(true);
      expect(await c.isModelReady('simple')).toBe(true);
      expect(await c.isModelReady('simple', 1)).toBe(true);
      expect(await c.isModelReady('simple', '7')).toBe(false);
      expect(await c.isModelReady('no_such_model')).toBe(false);
    });

    it('reads server metadata, model metadata and config', async () => {
      const c = s.client();
      const meta = await c.getServerMetadata();
      expect(meta.name).toBe('triton');
      expect(meta.extensions).toEqual(expect.arrayContaining(['binary_tensor_data', 'classification', 'statistics', 'sequence']));
      expect(await c.getModelMetadata('simple')).toEqual({
        name: 'simple', versions: ['1'], platform: 'onnxruntime_onnx',
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] }],
        outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] }],
      });
      expect((await c.getModelMetadata('simple', 1)).versions).toEqual(['1']);
      const cfg = await c.getModelConfig('simple');
      expect(cfg.name).toBe('simple');
      expect(cfg.max_batch_size).toBe(8);
      expect(cfg.input?.[0]).toMatchObject({ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] });
      expect(cfg.instance_group?.[0]).toMatchObject({ kind: 'KIND_CPU', count: 1 });
      const seqCfg = await c.getModelConfig('simple_sequence_state');
      expect(seqCfg.sequence_batching?.max_sequence_idle_microseconds).toBe(5_000_000);
    });

    it('reports unknown models with the server status and message', async () => {
      const c = s.client();
      await expectError(c.getModelMetadata('no_such_model'), protocol, st.NOT_FOUND, "Request for unknown model: 'no_such_model' is not found");
      await expectError(c.getModelConfig('simple', 7), protocol, st.NOT_FOUND, "'simple' version 7");
    });
  });

  describe(`${label} client: inference`, () => {
    it('infers INT32 tensors into typed arrays by name, echoing the id', async () => {
      const r = await s.client().infer('simple', simpleInputs, { id: 'req-1' });
      expect(r.model_name).toBe('simple');
      expect(r.model_version).toBe('1');
      expect(r.id).toBe('req-1');
      expect(r.data('OUTPUT0')).toBeInstanceOf(Int32Array);
      expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 3));
      expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 3));
      expect(r.output('OUTPUT0')?.shape).toEqual([1, 16]);
      expect(r.timing.waitNs).toBeGreaterThan(0);
    });

    it('returns only the requested outputs, for a given version', async () => {
      const r = await s.client().infer('simple', simpleInputs, { outputs: ['OUTPUT1'], version: 1 });
      expect(r.outputs.map((o) => o.name)).toEqual(['OUTPUT1']);
      expect(() => r.data('OUTPUT0')).toThrow(/no output 'OUTPUT0'/);
    });

    it('converts plain number arrays to the declared datatype (FP32 batch of 2)', async () => {
      const x = Array.from({ length: 32 }, (_, i) => i / 4);
      const y = Array.from({ length: 32 }, () => 0.5);
      const r = await s.client().infer('add_sub', [
        { name: 'INPUT0', datatype: 'FP32', shape: [2, 16], data: x },
        { name: 'INPUT1', datatype: 'FP32', shape: [2, 16], data: y },
      ]);
      expect(r.data('OUTPUT0')).toBeInstanceOf(Float32Array);
      expect(Array.from(r.data<Float32Array>('OUTPUT0'))).toEqual(x.map((v) => v + 0.5));
      expect(r.output('OUTPUT1')?.shape).toEqual([2, 16]);
    });

    it('sends strings as BYTES and reads BYTES outputs back', async () => {
      const c = s.client();
      const r = await c.infer('simple_string', [
        { name: 'INPUT0', shape: [1, 16], data: Array.from(a, String) },
        { name: 'INPUT1', shape: [1, 16], data: Array.from(b, String) },
      ]);
      expect(r.strings('OUTPUT0')).toEqual(Array.from(a, (x) => String(x + 3)));
      expect(r.strings('OUTPUT1')).toEqual(Array.from(a, (x) => String(x - 3)));
      // Valid UTF-8 only: ONNX Runtime string tensors are C strings, so the model itself would cut at NUL.
      const raw = [new Uint8Array([1, 2, 127]), new TextEncoder().encode('héllo ✓'), new Uint8Array(0)];
      const id = await c.infer('simple_identity', [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 3], data: raw }]);
      expect(id.data<Uint8Array[]>('OUTPUT0').map((e) => Array.from(e))).toEqual(raw.map((e) => Array.from(e)));
    });

    it('asks for top-N classification and gets "score:index:label" strings', async () => {
      const r = await s.client().infer('image_classifier', [{ name: 'image', shape: [1, 3, 16, 16], data: classifierPattern(4) }], {
        outputs: [{ name: 'scores', classification: 3 }],
      });
      const top = r.strings('scores');
      expect(r.output('scores')).toMatchObject({ datatype: 'BYTES', shape: [1, 3] });
      expect(top).toHaveLength(3);
      expect(top[0]!.split(':').slice(1)).toEqual(['4', IMAGE_CLASSIFIER_LABELS[4]]);
    });

    it('keeps sequences apart by sequence_id (number, bigint and string ids)', async () => {
      const c = s.client();
      const step = (id: number | bigint | string, v: number, start: boolean, end: boolean) =>
        c.infer('simple_sequence_state', [{ name: 'INPUT', shape: [1, 1], data: new Int32Array([v]) }], { sequenceId: id, sequenceStart: start, sequenceEnd: end });
      const out = (r: InferResult) => r.data<Int32Array>('OUTPUT')[0];
      const ids = [1001, 1002n, 'seq-three'] as const;
      expect(await Promise.all(ids.map((id, k) => step(id, 10 * (k + 1), true, false).then(out)))).toEqual([10, 20, 30]);
      expect(await Promise.all(ids.map((id, k) => step(id, k + 1, false, false).then(out)))).toEqual([11, 22, 33]);
      expect(await Promise.all(ids.map((id) => step(id, 100, false, true).then(out)))).toEqual([111, 122, 133]);
    });

    it('passes priority, timeout and custom parameters', async () => {
      const options = { priority: 1, timeout: 5_000_000, parameters: { my_key: 'v', flag: true, n: 3 } };
      const r = await s.client().infer('simple', simpleInputs, options);
      expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 3));
      // A model that answers with what its request arrived with.
      const echo = await s.client().infer('echo_request', [{ name: 'IN', shape: [1], data: Int32Array.of(0) }], options);
      expect(echo.data<BigUint64Array>('PRIORITY')[0]).toBe(1n);
      expect(echo.data<BigUint64Array>('TIMEOUT_US')[0]).toBe(5_000_000n);
      expect(JSON.parse(echo.strings('PARAMETERS')[0]!)).toEqual({ my_key: 'v', flag: true, n: 3 });
      const plain = await s.client().infer('echo_request', [{ name: 'IN', shape: [1], data: Int32Array.of(0) }]);
      expect([plain.data<BigUint64Array>('PRIORITY')[0], plain.data<BigUint64Array>('TIMEOUT_US')[0], plain.strings('PARAMETERS')[0]]).toEqual([0n, 0n, '{}']);
    });
  });

  describe(`${label} client: errors`, () => {
    it("carries the server's status and message for bad requests", async () => {
      const c = s.client();
      await expectError(c.infer('simple', [{ name: 'INPUT0', shape: [1, 8], data: new Int32Array(8) }, simpleInputs[1]!]),
        protocol, st.INVALID_ARG, "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]");
      await expectError(c.infer('simple', [{ name: 'INPUT0', shape: [1, 16], data: new Float32Array(16) }, simpleInputs[1]!]),
        protocol, st.INVALID_ARG, "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'");
      await expectError(c.infer('simple', [simpleInputs[0]!]), protocol, st.INVALID_ARG, 'expected 2 inputs but got 1 inputs');
      await expectError(c.infer('simple', [...simpleInputs, { name: 'EXTRA', shape: [1], data: new Int32Array(1) }]), protocol, st.INVALID_ARG, "unexpected inference input 'EXTRA'");
      await expectError(c.infer('no_such_model', simpleInputs), protocol, st.NOT_FOUND, "Request for unknown model: 'no_such_model' is not found");
      await expectError(c.infer('simple', [{ name: 'INPUT0', shape: [9, 16], data: new Int32Array(144) }, { name: 'INPUT1', shape: [9, 16], data: new Int32Array(144) }]),
        protocol, st.INVALID_ARG, "inference request batch-size must be <= 8 for 'simple'");
      await expectError(c.infer('repeat', [{ name: 'IN', shape: [1], data: new Int32Array([2]) }]), protocol, st.UNSUPPORTED,
        "doesn't support models with decoupled transaction policy");
    });

    it('rejects inputs it cannot encode before sending anything', async () => {
      const c = s.client();
      await expectError(c.infer('simple', [{ name: 'INPUT0', shape: [1, 16], data: new Int32Array(15) }]), 'client', 0, "shape [1,16] holds 16 element(s) but the data has 15");
      await expectError(c.infer('simple', [{ name: 'INPUT0', shape: [1, 2], data: [1, 2] }]), 'client', 0, 'datatype is required');
    });

    it('reports an unreachable server as an error, not as "not live"', async () => {
      const err = await s.deadClient().isServerLive({ timeoutMs: 3000 }).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(InferenceServerError);
      expect((err as InferenceServerError).source).toBe(protocol);
      expect((err as InferenceServerError).status).toBe(protocol === 'grpc' ? 14 : 0);
    });
  });

  describe(`${label} client: statistics and repository`, () => {
    it('reads statistics whose counters move with inference', async () => {
      const c = s.client();
      const before = (await c.getInferenceStatistics('simple'))[0]!;
      for (let i = 0; i < 3; i++) await c.infer('simple', simpleInputs);
      const [after] = await c.getInferenceStatistics('simple', 1);
      expect(after).toMatchObject({ name: 'simple', version: '1' });
      expect(after!.inference_stats.success.count - before.inference_stats.success.count).toBe(3);
      expect(after!.inference_count - before.inference_count).toBe(3);
      expect(after!.inference_stats.compute_infer.ns).toBeGreaterThan(before.inference_stats.compute_infer.ns);
      expect(after!.last_inference).toBeGreaterThan(0);
      expect(after!.batch_stats.find((x) => x.batch_size === 1)?.compute_infer.count).toBeGreaterThan(0);
      const all = await c.getInferenceStatistics();
      expect(all.map((m) => m.name)).toEqual(expect.arrayContaining(['simple', 'add_sub', 'simple_sequence']));
      await expectError(c.getInferenceStatistics('no_such_model'), protocol, st.INVALID_ARG, "requested model 'no_such_model' is not available");
    });

    it('lists the repository index', async () => {
      const idx = await s.client().getModelRepositoryIndex();
      expect(idx).toEqual(expect.arrayContaining([{ name: 'simple', version: '1', state: 'READY', reason: '' }]));
      expect((await s.client().getModelRepositoryIndex({ ready: true })).every((e) => e.state === 'READY')).toBe(true);
    });

    it('loads and unloads models (explicit mode), also from a config override', async () => {
      const c = s.explicitClient();
      expect(await c.isModelReady('add_sub')).toBe(false);
      await c.loadModel('add_sub');
      expect(await c.isModelReady('add_sub')).toBe(true);
      expect((await c.getModelRepositoryIndex()).find((e) => e.name === 'add_sub')?.state).toBe('READY');
      await c.unloadModel('add_sub', { unloadDependents: false });
      expect(await c.isModelReady('add_sub')).toBe(false);
      const cfg = await c.getModelConfig('simple');
      await c.loadModel('simple', { config: { ...cfg, max_batch_size: 4 } });
      expect((await c.getModelConfig('simple')).max_batch_size).toBe(4);
      await c.loadModel('simple', { config: JSON.stringify({ ...cfg, max_batch_size: 8 }) });
      expect((await c.getModelConfig('simple')).max_batch_size).toBe(8);
      await expectError(c.loadModel('no_such_model'), protocol, undefined, 'no_such_model');
    });

    it('loads a model from in-memory files', async () => {
      const c = s.explicitClient();
      const cfg = await c.getModelConfig('simple');
      const onnx = new Uint8Array(readFileSync(new URL('../../models/simple/1/model.onnx', import.meta.url)));
      await c.loadModel('simple_mem', {
        config: { ...cfg, name: 'simple_mem' }, files: { '1/model.onnx': onnx },
      });
      const r = await c.infer('simple_mem', simpleInputs);
      expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 3));
      await c.unloadModel('simple_mem');
    });
  });

  describe(`${label} client: shared memory, logging, tracing`, () => {
    it('registers a system shared-memory region, infers through it, and unregisters it', async () => {
      const c = s.client();
      await c.getSystemSharedMemoryStatus();
      const key = `tsi_client_${protocol}_${process.pid}`;
      mkdirSync('/dev/shm', { recursive: true });
      const file = `/dev/shm/${key}`;
      const region = new Uint8Array(256);
      region.set(new Uint8Array(a.buffer), 0);
      region.set(new Uint8Array(b.buffer), 64);
      writeFileSync(file, region);
      try {
        await c.unregisterSystemSharedMemory();
        await c.registerSystemSharedMemory('in_out', `/${key}`, 256);
        expect(await c.getSystemSharedMemoryStatus()).toEqual([{ name: 'in_out', key: `/${key}`, offset: 0, byte_size: 256 }]);
        expect(await c.getSystemSharedMemoryStatus('in_out')).toHaveLength(1);
        const r = await c.infer('simple', [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: 'in_out', byteSize: 64 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: 'in_out', byteSize: 64, offset: 64 } },
        ], { outputs: [{ name: 'OUTPUT0', sharedMemory: { region: 'in_out', byteSize: 64, offset: 128 } }, 'OUTPUT1'] });
        expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 3));
        const back = new Int32Array(new Uint8Array(readFileSync(file)).slice(128, 192).buffer);
        expect(Array.from(back)).toEqual(Array.from(a, (x) => x + 3));
        await expectError(c.registerSystemSharedMemory('in_out', `/${key}`, 256), protocol, st.ALREADY_EXISTS, 'in_out');
        await c.unregisterSystemSharedMemory('in_out');
        expect(await c.getSystemSharedMemoryStatus()).toEqual([]);
      } finally {
        await c.unregisterSystemSharedMemory().catch(() => {});
        rmSync(file, { force: true });
      }
    });

    it('reads and updates log settings', async () => {
      const c = s.client();
      const before = await c.getLogSettings();
      expect(before).toMatchObject({ log_info: expect.any(Boolean), log_verbose_level: expect.any(Number) });
      const after = await c.updateLogSettings({ log_verbose_level: 2 });
      expect(after.log_verbose_level).toBe(2);
      await c.updateLogSettings({ log_verbose_level: before.log_verbose_level! });
      await expectError(c.updateLogSettings({ log_file: '/tmp/x.log' }), protocol, st.UNSUPPORTED, 'log file location can not be updated through network protocol');
    });

    it('reads and updates trace settings, globally and per model', async () => {
      const c = s.client();
      const global = await c.getTraceSettings();
      expect(global).toHaveProperty('trace_rate');
      const m = await c.updateTraceSettings({ trace_rate: 7 }, 'simple');
      expect(m.trace_rate).toBe('7');
      expect((await c.getTraceSettings('simple')).trace_rate).toBe('7');
      const reset = await c.updateTraceSettings({ trace_rate: null }, 'simple');
      expect(reset.trace_rate).toBe(global.trace_rate);
    });
  });
}
