/**
 * The response cache over the real HTTP server: identical requests are answered from the cache (hits
 * count as successes but not as inferences or executions, as in Triton), anything that changes the
 * answer misses, entries are evicted least-recently-used when the byte budget is spent, models opt in
 * per config, whole ensembles can be cached, and the counters reach /metrics. Plus the
 * `--cache-config` parser and the key's sensitivity.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PendingRequest, ResponseCache, parseCacheConfig, requestKey, type Tensor } from '../../core/index.js';
import { addSubModel } from '../../scripts/gen-models.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const addsub = (name: string, cached: boolean) => `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
instance_group [{ kind: KIND_CPU count: 1 }]\n${cached ? 'response_cache { enable: true }\n' : ''}`;

// One cached entry of addsub: 2 outputs x 16 bytes, plus the cache's fixed per-entry charges.
const ENTRY = 128 + 16 + 2 * (64 + 7 + 16);

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'cached/config.pbtxt': addsub('cached', true),
    'cached/1/model.onnx': addSubModel('FP32', [4], true),
    'plain/config.pbtxt': addsub('plain', false),
    'plain/1/model.onnx': addSubModel('FP32', [4], true),
    'cached_pipe/config.pbtxt': `name: "cached_pipe"\nplatform: "ensemble"\nmax_batch_size: 8
input [{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "S" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [{ model_name: "plain" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "S" } }] }
response_cache { enable: true }\n`,
    'cached_pipe/1/README.txt': 'ensemble',
  });
  s = await startTestServer({ modelRepositories: [repo.path], responseCacheBytes: 2 * ENTRY + 10, metricsPort: 0, metricsAddress: '127.0.0.1' });
});
afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const body = (a: number[], extra: Record<string, unknown> = {}) => ({
  inputs: [
    { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: a },
    { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
  ],
  ...extra,
});
const infer = (model: string, a: number[], extra?: Record<string, unknown>) => postJson(`${s.url}/v2/models/${model}/infer`, body(a, extra));
const stats = async (m: string) => (await getJson(`${s.url}/v2/models/${m}/stats`)).body.model_stats[0];

describe('response cache', () => {
  it('answers a repeated request from the cache, with Triton\'s statistics', async () => {
    const first = await infer('cached', [1, 2, 3, 4], { id: 'a' });
    const second = await infer('cached', [1, 2, 3, 4], { id: 'b' });
    expect(first.body.outputs).toEqual(second.body.outputs);
    expect(second.body.id).toBe('b');
    expect(second.body.outputs[0].data).toEqual([2, 3, 4, 5]);
    const st = await stats('cached');
    expect(st.inference_stats.cache_miss.count).toBe(1);
    expect(st.inference_stats.cache_hit.count).toBe(1);
    expect(st.inference_stats.success.count).toBe(2);
    expect(st.inference_count).toBe(1);
    expect(st.execution_count).toBe(1);
    expect(st.inference_stats.cache_hit.ns).toBeGreaterThan(0);
  });

  it('misses when inputs, requested outputs or parameters differ; classification still applies on a hit', async () => {
    const before = await stats('cached');
    await infer('cached', [1, 2, 3, 5]);
    await infer('cached', [1, 2, 3, 4], { outputs: [{ name: 'OUTPUT1' }] });
    await infer('cached', [1, 2, 3, 4], { parameters: { flavour: 'other' } });
    const after = await stats('cached');
    expect(after.inference_stats.cache_miss.count - before.inference_stats.cache_miss.count).toBe(3);
    expect(after.inference_stats.cache_hit.count).toBe(before.inference_stats.cache_hit.count);
    const top = await infer('cached', [1, 2, 3, 5], { outputs: [{ name: 'OUTPUT0', parameters: { classification: 1 } }] });
    expect(top.body.outputs[0].data).toEqual(['6.000000:3']);
  });

  it('evicts the least recently used entries when the byte budget is spent', async () => {
    s.server.cache!.clear();
    const ev0 = s.server.cache!.stats().evictions;
    await infer('cached', [9, 9, 9, 1]);
    await infer('cached', [9, 9, 9, 2]);
    await infer('cached', [9, 9, 9, 1]); // hit: now the most recent
    await infer('cached', [9, 9, 9, 3]); // evicts [9,9,9,2]
    const c = s.server.cache!.stats();
    expect(c.evictions - ev0).toBe(1);
    expect(c.entries).toBe(2);
    expect(c.bytes).toBeLessThanOrEqual(c.capacity);
    const before = await stats('cached');
    await infer('cached', [9, 9, 9, 1]);
    await infer('cached', [9, 9, 9, 2]);
    const after = await stats('cached');
    expect(after.inference_stats.cache_hit.count - before.inference_stats.cache_hit.count).toBe(1);
    expect(after.inference_stats.cache_miss.count - before.inference_stats.cache_miss.count).toBe(1);
  });

  it('leaves models that do not enable it alone, and caches whole ensembles that do', async () => {
    await infer('plain', [1, 1, 1, 1]);
    await infer('plain', [1, 1, 1, 1]);
    const plain = await stats('plain');
    expect(plain.inference_stats.cache_hit.count + plain.inference_stats.cache_miss.count).toBe(0);
    const pipe = (a: number[]) => postJson(`${s.url}/v2/models/cached_pipe/infer`, {
      inputs: [{ name: 'A', datatype: 'FP32', shape: [1, 4], data: a }, { name: 'B', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] }],
    });
    const runs = (await stats('plain')).inference_count;
    expect((await pipe([5, 5, 5, 5])).body.outputs[0].data).toEqual([6, 6, 6, 6]);
    expect((await pipe([5, 5, 5, 5])).body.outputs[0].data).toEqual([6, 6, 6, 6]);
    expect((await stats('plain')).inference_count - runs).toBe(1);
    expect((await stats('cached_pipe')).inference_stats.cache_hit.count).toBe(1);
  });

  it('exports hits and misses as metrics', async () => {
    const text = await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text();
    expect(text).toMatch(/nv_cache_num_hits_per_model\{model="cached",version="1"\} [1-9]/);
    expect(text).toMatch(/nv_cache_num_misses_per_model\{model="cached",version="1"\} [1-9]/);
  });
});

describe('cache configuration and keys', () => {
  it('parses --cache-config like tritonserver', () => {
    expect(parseCacheConfig([])).toBeUndefined();
    expect(parseCacheConfig(['local,size=1048576'])).toEqual({ size: 1048576 });
    expect(() => parseCacheConfig(['redis,host=x'])).toThrow("unsupported cache 'redis': only the 'local' cache is available");
    expect(() => parseCacheConfig(['local,size=lots'])).toThrow("local cache size must be a number of bytes, got 'lots'");
    expect(() => parseCacheConfig(['local'])).toThrow('--cache-config expects <cache>,<key>=<value>');
  });

  it('keys on model, version, input names, types, shapes and bytes, outputs and parameters', () => {
    const t = (name: string, data: Float32Array, shape = [data.length]): Tensor => ({ name, datatype: 'FP32', shape, data });
    const req = (inputs: Tensor[], outputs = ['Y'], parameters = {}) => new PendingRequest({
      id: '', inputs: new Map(inputs.map((x) => [x.name, x])), requestedOutputs: outputs, parameters, batchSize: 1, priority: 0,
      timeoutUs: 0, sink: () => {},
    });
    const base = requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 4))]));
    expect(requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 4))]))).toBe(base);
    const variants = [
      requestKey('n', 1, req([t('X', Float32Array.of(1, 2, 3, 4))])),
      requestKey('m', 2, req([t('X', Float32Array.of(1, 2, 3, 4))])),
      requestKey('m', 1, req([t('Z', Float32Array.of(1, 2, 3, 4))])),
      requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 5))])),
      requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 4), [2, 2])])),
      requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 4))], ['Y', 'W'])),
      requestKey('m', 1, req([t('X', Float32Array.of(1, 2, 3, 4))], ['Y'], { k: 1 })),
    ];
    expect(new Set([base, ...variants]).size).toBe(variants.length + 1);
    const cache = new ResponseCache(10);
    cache.set('big', { outputs: [t('Y', new Float32Array(100))] });
    expect(cache.stats().entries).toBe(0);
  });
});
