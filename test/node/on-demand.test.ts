/**
 * On-demand loading within a budget (core/repository/residency.ts) through the real server: models registered
 * and listed as "not loaded: budget", loaded by their first request, the least recently used idle
 * model unloaded to make room, never one with a request in flight, an open sequence or a pin; a
 * failed load answered with its error until the model's folder changes; loads, unloads and memory in
 * the statistics and metrics; in explicit mode an unload waits for the request in flight. Each copy
 * of the offset model answers x + its number, so a request served by the wrong model shows.
 */

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseMemoryBudget } from '../../core/index.js';
import { offsetModel, simpleSequenceModel } from '../../scripts/gen-models.js';
import { blockingJsModel, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const N = 20;
const MAX = 3;

function offsetConfig(name: string, extra = ''): string {
  return `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n`
    + `input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n`
    + `instance_group [{ count: 1 kind: KIND_CPU }]\n${extra}`;
}

const SEQUENCE_CONFIG = readFileSync(join(import.meta.dirname, '../../models/simple_sequence/config.pbtxt'), 'utf8').replace('"simple_sequence"', '"seq"')
  // Idle sequences are reaped after 1 s by default; on-demand loads on a busy machine may take that long.
  .replace('sequence_batching {', 'sequence_batching {\n  max_sequence_idle_microseconds: 60000000');

let repo: ReturnType<typeof tempRepo>;
let s: TestServer;

beforeAll(async () => {
  const files: Record<string, string | Uint8Array> = {
    'pinned/config.pbtxt': offsetConfig('pinned', 'parameters { key: "tsi_pinned" value: { string_value: "true" } }\n'),
    'pinned/1/model.onnx': offsetModel(500),
    'slow/config.pbtxt': `name: "slow"\nbackend: "javascript"\nmax_batch_size: 0\n`
      + `input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n`,
    'slow/1/model.js': blockingJsModel(10),
    'seq/config.pbtxt': SEQUENCE_CONFIG,
    'seq/1/model.onnx': simpleSequenceModel(),
    'broken/config.pbtxt': offsetConfig('broken'),
    'broken/1/model.onnx': new TextEncoder().encode('not an onnx model'),
  };
  for (let i = 0; i < N; i++) {
    files[`m${i}/config.pbtxt`] = offsetConfig(`m${i}`);
    files[`m${i}/1/model.onnx`] = offsetModel(i);
  }
  repo = tempRepo(files);
  s = await startTestServer({ modelRepositories: [repo.path], maxLoadedModels: MAX, metricsPort: 0, metricsAddress: '127.0.0.1' });
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

async function infer(model: string, x: number): Promise<{ status: number; value?: number; error?: string }> {
  const r = await postJson(`${s.url}/v2/models/${model}/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: [x] }] });
  return { status: r.status, value: r.body.outputs?.[0]?.data[0], error: r.body.error };
}

async function loaded(): Promise<string[]> {
  const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string; state: string }[];
  return index.filter((e) => e.state === 'READY').map((e) => e.name).sort();
}

function sequenceStep(flags: Record<string, boolean>, x: number) {
  return postJson(`${s.url}/v2/models/seq/infer`, {
    parameters: { sequence_id: 42, ...flags },
    inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: [x] }],
  });
}

describe('on-demand loading with --max-loaded-models', () => {
  it('registers every model without loading it, and is ready', async () => {
    expect((await getJson(`${s.url}/v2/health/ready`)).status).toBe(200);
    const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as { name: string; state: string; reason: string }[];
    expect(index).toHaveLength(N + 4);
    for (const e of index) expect(e).toMatchObject({ state: 'UNAVAILABLE', reason: 'not loaded: budget' });
  });

  it('loads a model on its first request, which waits and gets the right answer', async () => {
    expect(await infer('m5', 1)).toEqual({ status: 200, value: 6, error: undefined });
    expect(await loaded()).toEqual(['m5']);
    const stats = (await getJson(`${s.url}/v2/models/m5/stats`)).body.model_stats[0];
    expect(stats.on_demand_load.count).toBe(1);
    expect(stats.on_demand_load.ns).toBeGreaterThan(0);
    expect(stats.memory_usage[0]).toMatchObject({ type: 'CPU', id: 0 });
  });

  it('unloads the least recently used model to make room, and serves every model right', async () => {
    for (const m of ['m0', 'm1', 'm2']) expect((await infer(m, 10)).status).toBe(200);
    expect(await loaded()).toEqual(['m0', 'm1', 'm2']);
    expect((await infer('m0', 1)).value).toBe(1); // m0 is now the most recently used: m1 goes next
    expect((await infer('m3', 1)).value).toBe(4);
    expect(await loaded()).toEqual(['m0', 'm2', 'm3']);
    const asks = Array.from({ length: 60 }, (_, k) => ({ model: `m${k % N}`, x: k }));
    const got = await Promise.all(asks.map((a) => infer(a.model, a.x)));
    expect(got.map((g) => g.value)).toEqual(asks.map((a) => a.x + (k(a.model))));
    // During the burst every loaded model may be busy, and then a load goes ahead over the budget
    // (residency.ts: rather than fail the request); the next load, with the others idle, evicts
    // back within it.
    const after = await loaded();
    const cold = Array.from({ length: N }, (_, i) => `m${i}`).find((m) => !after.includes(m))!;
    expect((await infer(cold, 0)).status).toBe(200);
    expect((await loaded()).length).toBeLessThanOrEqual(MAX);
  }, 60_000);

  it('never unloads a model with a request in flight', async () => {
    // Blocks its instance for 8 s: the three loads below unload every other model meanwhile.
    const slow = postJson(`${s.url}/v2/models/slow/infer`, { parameters: { ms: 8000 }, inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [3] }] });
    while (!(await loaded()).includes('slow')) await new Promise((r) => setTimeout(r, 20));
    for (const m of ['m7', 'm8', 'm9']) expect((await infer(m, 0)).status).toBe(200);
    expect(await loaded()).toContain('slow');
    const r = await slow;
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0].data).toEqual([3]);
  }, 60_000);

  it('never unloads a model with an open sequence', async () => {
    expect((await sequenceStep({ sequence_start: true }, 5)).status).toBe(200);
    for (const m of ['m11', 'm12', 'm13', 'm14']) expect((await infer(m, 0)).status).toBe(200);
    expect(await loaded()).toContain('seq');
    const end = await sequenceStep({ sequence_end: true }, 2);
    expect(end.status, JSON.stringify(end.body)).toBe(200);
    expect(end.body.outputs[0].data[0]).toBe(2);
  }, 60_000);

  it('keeps a pinned model loaded however long it stays unused', async () => {
    expect((await infer('pinned', 1)).value).toBe(501);
    for (let i = 0; i < 6; i++) expect((await infer(`m${i}`, 0)).status).toBe(200);
    expect(await loaded()).toContain('pinned');
  }, 60_000);

  it('answers every request for a model that fails to load with its error, until its folder changes', async () => {
    const first = await infer('broken', 1);
    expect(first.status).toBe(503);
    expect(first.error).toMatch(/^model 'broken' could not be loaded on demand: ./);
    expect(await infer('broken', 1)).toEqual(first);
    writeFileSync(join(repo.path, 'broken/1/model.onnx'), offsetModel(77));
    expect(await infer('broken', 1)).toMatchObject({ status: 200, value: 78 });
  }, 60_000);

  it('exports loads, unloads with their reasons and memory per model and instance', async () => {
    const text = await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text();
    expect(text).toMatch(/tsi_model_loads_total\{model="m5",reason="on_demand"\} [1-9]/);
    expect(text).toMatch(/tsi_model_unloads_total\{model="m1",reason="budget"\} \d/);
    expect(text).toMatch(/tsi_model_on_demand_load_count\{model="m5"\} [1-9]/);
    expect(text).toMatch(/tsi_model_memory_bytes\{model="pinned",version="1"\} \d+/);
    expect(text).toMatch(/tsi_model_instance_memory_bytes\{model="pinned",version="1",instance="pinned_0_0"\} \d+/);
  });

  it('still loads and unloads explicitly only in explicit mode', async () => {
    expect((await postJson(`${s.url}/v2/repository/models/m1/load`, {})).status).toBe(503);
  });
});

describe('explicit mode with a budget', () => {
  it('loads explicitly, and an unload during a request for the model waits for its answer', async () => {
    const r = tempRepo({
      'slow/config.pbtxt': `name: "slow"\nbackend: "javascript"\nmax_batch_size: 0\n`
        + `input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n`,
      'slow/1/model.js': blockingJsModel(10),
    });
    const e = await startTestServer({ modelRepositories: [r.path], maxLoadedModels: 2, modelControlMode: 'explicit' });
    try {
      expect((await postJson(`${e.url}/v2/repository/models/slow/load`, {})).status).toBe(200);
      const order: string[] = [];
      const request = postJson(`${e.url}/v2/models/slow/infer`, { parameters: { ms: 1500 }, inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [7] }] })
        .then((res) => (order.push('answer'), res));
      await new Promise((res) => setTimeout(res, 300));
      const unload = await postJson(`${e.url}/v2/repository/models/slow/unload`, {});
      order.push('unloaded');
      expect(unload.status).toBe(200);
      const res = await request;
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.outputs[0].data).toEqual([7]);
      expect(order).toEqual(['answer', 'unloaded']);
      const index = (await postJson(`${e.url}/v2/repository/index`, {})).body;
      expect(index).toEqual([{ name: 'slow', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' }]);
    } finally {
      await e.stop();
      r.cleanup();
    }
  }, 60_000);
});

describe('--model-memory-budget', () => {
  it('reads bytes, binary suffixes and a percentage of memory', () => {
    expect(parseMemoryBudget('1048576', 0)).toBe(1048576);
    expect(parseMemoryBudget('512M', 0)).toBe(512 * 1024 ** 2);
    expect(parseMemoryBudget('2GiB', 0)).toBe(2 * 1024 ** 3);
    expect(parseMemoryBudget('25%', 8000)).toBe(2000);
    expect(() => parseMemoryBudget('lots', 0)).toThrow(/expects bytes/);
    expect(() => parseMemoryBudget('150%', 0)).toThrow(/within \(0, 100\]/);
  });
});

function k(model: string): number {
  return Number(model.slice(1));
}
