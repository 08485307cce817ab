/**
 * The browser runtime in real headless Chromium against the real Node server: every model of the
 * default repository (ONNX on wasm and on WebGPU/SwiftShader, JavaScript models, the ensemble) gives
 * the Node server's answers in the page, through both the v2 `fetch` and the in-page `infer`;
 * instances report the execution provider they got and why they fell back; concurrent in-page calls
 * form batches; decoupled models stream; bad input gets the server's error texts.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TsiError, createLogger } from '../../core/index.js';
import { createServer, type BrowserServer } from '../../runtime-browser/index.js';
import { requireCapability } from '../helpers/capability.js';
import { BAD_REQUESTS, compareResponses, floats, genericCase, ints, modelCases, requestInit, type V2Request } from './cases.js';

const NODE = inject('nodeUrl');
const REPO = `${NODE}/repository/`;
const logs: string[] = [];
const log = createLogger((_l, line) => logs.push(line), 1);

/** Every await on ORT gets a deadline, so a hang fails the test with a reason instead of stalling CI. */
function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms))]);
}

async function nodeAnswer(r: V2Request): Promise<{ status: number; body: any }> {
  const res = await fetch(`${NODE}${r.path}`, requestInit(r));
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function pageAnswer(s: BrowserServer, r: V2Request): Promise<{ status: number; body: any }> {
  const res = await within(60_000, s.fetch(r.path, requestInit(r)), `${r.method ?? 'GET'} ${r.path}`);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

let wasm: BrowserServer;
let gpu: BrowserServer | undefined;
/** Why this Chromium has no WebGPU adapter; undefined when it has one. */
let gpuMissing: string | undefined;
const CI = inject('ci');

beforeAll(async () => {
  wasm = await within(90_000, createServer({ repository: REPO, device: 'wasm', log }), 'createServer(wasm)');
  const env = wasm.environment;
  if (!env.webgpu.available) {
    gpuMissing = env.webgpu.reason;
    console.warn(`[tsi] no WebGPU adapter in this Chromium: ${gpuMissing}`);
    return;
  }
  gpu = await within(90_000, createServer({ repository: REPO, device: 'webgpu', log }), 'createServer(webgpu)');
});

afterAll(async () => {
  await wasm?.stop(5000);
  await gpu?.stop(5000);
});

/** The Node server's view of the repository: every model, its config and metadata, fetched up front. */
interface ModelInfo { name: string; config: any; meta: any }
const nodeIndex = (await (await fetch(`${NODE}/v2/repository/index`, { method: 'POST' })).json()) as { name: string; state: string }[];
const MODELS: ModelInfo[] = await Promise.all(nodeIndex.map(async (e) => ({
  name: e.name,
  config: await (await fetch(`${NODE}/v2/models/${e.name}/config`)).json(),
  meta: await (await fetch(`${NODE}/v2/models/${e.name}`)).json(),
})));
const isOnnx = (m: ModelInfo) => m.config.backend === 'onnxruntime' || m.config.platform === 'onnxruntime_onnx';
const requestsFor = (m: ModelInfo, seqBase: number): V2Request[] => modelCases(seqBase)[m.name] ?? [genericCase(m.meta, m.config, seqBase + 99)];

describe('the page serves the default repository', () => {
  it('loads every model the Node server loads, from its /repository/ URL', () => {
    expect(nodeIndex.length).toBeGreaterThanOrEqual(Object.keys(modelCases()).length);
    expect(wasm.index().map((e) => [e.name, e.state])).toEqual(nodeIndex.map((e) => [e.name, e.state]));
    expect(wasm.ready()).toBe(true);
    if (!wasm.environment.crossOriginIsolated) expect(wasm.environment.numThreads).toBe(1);
  });

  for (const [device, seqBase] of [['wasm', 1000], ['webgpu', 2000]] as const) {
    // The tiny Whisper's encoder (1500 positions) takes minutes on SwiftShader's WebGPU: whisper is
    // compared on wasm here and in whisper.browser.test.ts.
    for (const m of MODELS.filter((x) => device === 'wasm' || x.config.backend !== 'whisper')) {
      // Decoupled models answer /infer with an error on both sides; that error must match too.
      const decoupled = m.config.model_transaction_policy?.decoupled === true;
      it(`${m.name} on ${device}: same ${decoupled ? 'refusal' : 'answers'} as the Node server`, async (ctx) => {
        if (device === 'webgpu') requireCapability(ctx, CI, 'WebGPU adapter in Chromium', gpuMissing);
        const s = device === 'wasm' ? wasm : gpu!;
        for (const r of requestsFor(m, seqBase)) {
          const want = await nodeAnswer(r);
          const got = await pageAnswer(s, r);
          if (decoupled) {
            expect(want.status).toBeGreaterThanOrEqual(400);
            expect(got).toEqual(want);
            continue;
          }
          expect(want.status, JSON.stringify(want.body)).toBe(200);
          expect(got.status, JSON.stringify(got.body)).toBe(200);
          expect(compareResponses(got.body, want.body)).toBeNull();
        }
      });
    }
  }

  it('reports the execution provider each instance got, and why it fell back', async (ctx) => {
    for (const m of MODELS) {
      const want = isOnnx(m) ? 'wasm' : m.config.backend === 'javascript' ? 'js' : undefined;
      if (want) expect([...new Set(wasm.instances(m.name).map((i) => i.device))], m.name).toEqual([want]);
    }
    requireCapability(ctx, CI, 'WebGPU adapter in Chromium', gpuMissing);
    for (const m of ['simple', 'add_sub', 'image_classifier', 'autocomplete_add', 'mlp_batch', 'simple_sequence']) {
      for (const i of gpu!.instances(m)) expect(i, m).toEqual({ name: expect.any(String), kind: 'KIND_CPU', device: 'webgpu' });
    }
    // Strings and 64-bit integers have no WebGPU buffer type: those models run on wasm, with the reason.
    expect(gpu!.instances('simple_string')[0]).toMatchObject({ device: 'wasm', fallbackReason: 'WebGPU has no string tensors' });
    expect(gpu!.instances('simple_dyna_sequence')[0]).toMatchObject({ device: 'wasm', fallbackReason: 'WebGPU has no uint64 tensors' });
    expect(logs.some((l) => l.includes('simple_string') && l.includes('running on wasm'))).toBe(true);
  });
});

describe('the in-page API', () => {
  it('takes typed arrays and string arrays and returns typed arrays by output name', async () => {
    const a = Int32Array.from(ints(16, 1));
    const b = Int32Array.from(ints(16, 2));
    const out = await within(30_000, wasm.infer({ model: 'simple', inputs: { INPUT0: a, INPUT1: b } }), 'infer simple');
    expect(out.OUTPUT0).toBeInstanceOf(Int32Array);
    expect(Array.from(out.OUTPUT0 as Int32Array)).toEqual(Array.from(a, (x, i) => x + b[i]!));
    expect(Array.from(out.OUTPUT1 as Int32Array)).toEqual(Array.from(a, (x, i) => x - b[i]!));
    const s = await wasm.infer({
      model: 'simple_string', inputs: { INPUT0: Array.from(a, String), INPUT1: { data: Array.from(b, String), shape: [1, 16] } }, outputs: ['OUTPUT1'],
    });
    expect(Object.keys(s)).toEqual(['OUTPUT1']);
    expect(s.OUTPUT1).toEqual(Array.from(a, (x, i) => String(x - b[i]!)));
  });

  it('gives the same numbers as the Node server through infer() as through fetch()', async () => {
    const image = Float32Array.from(floats(2 * 768, 7));
    const want = await nodeAnswer(modelCases().image_classifier[0]!);
    const t = await wasm.inferTensors({ model: 'image_classifier', inputs: { image } });
    expect(t.scores!.shape).toEqual([2, 10]);
    const ref = want.body.outputs[0].data as number[];
    (t.scores!.data as Float32Array).forEach((v, i) => expect(Math.abs(v - ref[i]!)).toBeLessThan(1e-4));
    const top = await wasm.infer({ model: 'image_classifier', inputs: { image: image.subarray(0, 768) }, outputs: [{ name: 'scores', classification: 2 }] });
    expect((top.scores as string[])[0]).toMatch(/^[0-9.-]+:\d:[a-z]+$/);
  });

  it('runs sequences with the sequence option', async () => {
    const seq = async (id: number, v: number, start: boolean, end: boolean) =>
      (await wasm.infer({ model: 'simple_sequence_state', inputs: { INPUT: Int32Array.of(v) }, sequence: { id, start, end } })).OUTPUT as Int32Array;
    expect((await seq(7001, 10, true, false))[0]).toBe(10);
    expect((await seq(7002, 1, true, false))[0]).toBe(1);
    expect((await seq(7001, 5, false, true))[0]).toBe(15);
    expect((await seq(7002, 2, false, true))[0]).toBe(3);
  });

  it('streams the responses of a decoupled JavaScript model', async () => {
    const words: string[] = [];
    for await (const out of wasm.inferStream({ model: 'token_streamer', inputs: { text_input: ['the page streams too'] } })) {
      words.push(...(out.text_output as string[]));
    }
    expect(words).toEqual(['the', 'page', 'streams', 'too']);
    const http = await wasm.fetch('/v2/models/token_streamer/infer', { method: 'POST', body: JSON.stringify({ inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1], data: ['x'] }] }) });
    expect(http.status).toBe(501);
  });

  it('batches concurrent in-page calls (fewer executions than requests), each getting its own rows', async () => {
    const rows = Array.from({ length: 32 }, (_, i) => Float32Array.from(floats(1024, 100 + i)));
    const want = await nodeAnswer({
      path: '/v2/models/mlp_batch/infer', method: 'POST',
      body: { inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [32, 1024], data: rows.flatMap((r) => Array.from(r)) }] },
    });
    const before = wasm.stats('mlp_batch').model_stats[0] as { execution_count: number; inference_count: number };
    const outs = await within(60_000, Promise.all(rows.map((r) => wasm.infer({ model: 'mlp_batch', inputs: { INPUT: r } }))), '32 concurrent calls');
    const after = wasm.stats('mlp_batch').model_stats[0] as { execution_count: number; inference_count: number; batch_stats: { batch_size: number }[] };
    expect(after.inference_count - before.inference_count).toBe(32);
    const executions = after.execution_count - before.execution_count;
    console.log(`[tsi] 32 concurrent in-page calls ran in ${executions} executions; batch sizes seen: ${after.batch_stats.map((b) => b.batch_size).join(',')}`);
    expect(executions).toBeLessThan(32);
    const ref = want.body.outputs[0].data as number[];
    outs.forEach((o, r) => {
      const got = o.OUTPUT as Float32Array;
      for (let i = 0; i < 1024; i += 37) expect(Math.abs(got[i]! - ref[r * 1024 + i]!)).toBeLessThan(1e-3);
    });
  });
});

describe('bad input gets the Node server\'s errors', () => {
  for (const [what, r] of Object.entries(BAD_REQUESTS)) {
    it(`${what}: same status and body`, async () => {
      const want = await nodeAnswer(r);
      const got = await pageAnswer(wasm, r);
      expect(want.status).toBeGreaterThanOrEqual(400);
      expect(got).toEqual(want);
    });
  }

  it('infer() throws a TsiError with the text the HTTP error body carries', async () => {
    const want = await nodeAnswer({
      path: '/v2/models/simple/infer', method: 'POST',
      body: { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: floats(16, 1) }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ints(16, 1) }] },
    });
    const err = await wasm.infer({ model: 'simple', inputs: { INPUT0: Float32Array.from(floats(16, 1)), INPUT1: Int32Array.from(ints(16, 1)) } }).catch((e) => e);
    expect(err).toBeInstanceOf(TsiError);
    expect(err.code).toBe('INVALID_ARG');
    expect(err.message).toBe(want.body.error);
    const unknown = await wasm.infer({ model: 'nope', inputs: {} }).catch((e) => e);
    expect(unknown.message).toBe((await nodeAnswer(BAD_REQUESTS['unknown model']!)).body.error);
  });
});
