/**
 * A downloaded onnx-community folder in the page (runtime-browser/llm-backend.ts), in real headless
 * Chromium: a tiny Llama (scripts/llm-families.ts) whose `onnx/model.onnx` keeps its weights in
 * `model.onnx_data` loads on onnxruntime-web with the external data read from the same repository
 * URL, and gives greedily the Node server's tokens for the same files, alone and batched; without a
 * `variant` the page takes the best present for wasm (int4 before fp32: the smaller download), says
 * why in its log, and gives the Node server's int4 tokens; on WebGPU (SwiftShader) it takes the
 * WebGPU order for the adapter's shader-f16. The folders are served by the Node server of
 * llm-folder-setup.ts.
 */

import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { VARIANT_RULES, createLogger } from '../../core/index.js';
import { createServer, createSession, loadOrt, type BrowserServer } from '../../runtime-browser/index.js';
import { requireCapability } from '../helpers/capability.js';

const NODE = inject('llmFolderUrl');
const CI = inject('ci');
type Obj = Record<string, any>;

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms))]);
}

const post = (body: Obj): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed * 3) % WORDS.length]).join(' ');

let page: BrowserServer;
const logs: string[] = [];

beforeAll(async () => {
  const log = createLogger((_l, line) => logs.push(line), 1);
  page = await within(90_000, createServer({ repository: `${NODE}/repository/`, device: 'wasm', log }), 'createServer(wasm)');
});

afterAll(async () => {
  await page?.stop(5000);
});

describe('an onnx-community folder in the page', () => {
  it('loads every entry, the fp32 one with its weights as external data', async () => {
    // The reason rides along where a model is not READY, so a failure says why.
    expect(page.index().map((m) => (m.state === 'READY' ? [m.name, m.state] : [m.name, m.state, m.reason]))).toEqual([['llama', 'READY'], ['llama_fp32', 'READY'], ['llama_q4', 'READY']]);
    const files = (await (await fetch(`${NODE}/repository/tsi-index.json`)).json()).models.llama_fp32.files as string[];
    expect(files).toContain('1/onnx/model.onnx_data');
    // The graph itself is small: the weights are in the data file.
    const size = async (f: string) => (await (await fetch(`${NODE}/repository/llama_fp32/1/onnx/${f}`)).arrayBuffer()).byteLength;
    expect(await size('model.onnx_data')).toBeGreaterThan(10 * (await size('model.onnx')));
  });

  it('creates sessions side by side, each keeping its own external data', async () => {
    // onnxruntime-web holds external data in one module-wide table that each finished create clears: a
    // session made beside the fp32 one would take its weights away unless creates wait their turn.
    const get = async (p: string) => new Uint8Array(await (await fetch(`${NODE}/repository/${p}`)).arrayBuffer());
    const [graph, data, small] = await Promise.all([get('llama_fp32/1/onnx/model.onnx'), get('llama_fp32/1/onnx/model.onnx_data'), get('llama_q4/1/onnx/model_q4.onnx')]);
    const ort = await loadOrt();
    const sessions = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => i % 2 === 0
      ? createSession(ort, graph.slice(), { executionProviders: ['wasm'], externalData: [{ path: 'model.onnx_data', data: data.slice() }] })
      : createSession(ort, small.slice(), { executionProviders: ['wasm'] })));
    for (const s of sessions) if (s.status === 'fulfilled') await s.value.release();
    expect(sessions.map((s) => (s.status === 'fulfilled' ? 'created' : String(s.reason).split('\n')[0]))).toEqual(Array(6).fill('created'));
  });

  it('takes the best variant present for wasm without a `variant`, saying why', () => {
    const line = logs.find((l) => l.includes("model 'llama': serving"));
    expect(line).toContain(`serving 1/onnx/model_q4.onnx (variant 'model_q4', the best present for wasm in the page: ${VARIANT_RULES['page-wasm'].why}; present: model, model_q4)`);
    expect(logs.find((l) => l.includes("model 'llama_fp32': serving"))).toContain("variant 'model', the config's variant");
  });

  it('takes the WebGPU order on WebGPU, by the adapter\'s shader-f16, and gives the Node server\'s int4 tokens', async (ctx) => {
    const webgpu = page.environment.webgpu;
    requireCapability(ctx, CI, 'WebGPU adapter in Chromium', webgpu.available ? undefined : webgpu.reason);
    const gpuLogs: string[] = [];
    const files = (await (await fetch(`${NODE}/repository/tsi-index.json`)).json()).models.llama.files as string[];
    const gpu = await within(90_000, createServer({
      repository: `${NODE}/repository/`, models: { llama: files }, device: 'webgpu', log: createLogger((_l, line) => gpuLogs.push(line), 1),
    }), 'createServer(webgpu)');
    try {
      const rule = webgpu.available && webgpu.shaderF16 ? VARIANT_RULES['page-webgpu'] : VARIANT_RULES['page-webgpu-no-f16'];
      expect(gpuLogs.find((l) => l.includes("model 'llama': serving"))).toContain(`(variant 'model_q4', the best present for ${rule.device}: ${rule.why}`);
      expect(gpu.instances('llama')).toMatchObject([{ device: 'webgpu' }]);
      const req = { text_input: promptOf(4, 2), max_tokens: 5, temperature: 0, exclude_input_in_output: true };
      const want = await (await fetch(`${NODE}/v2/models/llama_q4/generate`, post(req))).json();
      const got = await (await within(60_000, gpu.fetch('/v2/models/llama/generate', post(req)), 'webgpu generate')).json();
      expect(got.text_output).toBe(want.text_output);
    } finally {
      await gpu.stop(5000);
    }
  });

  for (const [model, node] of [['llama_fp32', 'llama_fp32'], ['llama', 'llama_q4']] as const) {
    it(`${model} gives the Node server's greedy tokens (${node}), one at a time and 4 at once`, async () => {
      const reqs = Array.from({ length: 4 }, (_, i) => ({ text_input: promptOf(1 + i * 5, i), max_tokens: 6 + i * 3, temperature: 0, exclude_input_in_output: true }));
      const want = await Promise.all(reqs.map(async (r) => (await fetch(`${NODE}/v2/models/${node}/generate`, post(r))).json()));
      const ask = async (r: Obj) => (await within(60_000, page.fetch(`/v2/models/${model}/generate`, post(r)), model)).json();
      const alone: Obj[] = [];
      for (const r of reqs) alone.push(await ask(r));
      const together = await Promise.all(reqs.map(ask));
      const pick = (a: Obj) => ({ text: a.text_output, n: a.num_output_tokens });
      expect(want.every((w) => w.num_output_tokens > 0)).toBe(true);
      expect(alone.map(pick)).toEqual(want.map(pick));
      expect(together.map(pick)).toEqual(want.map(pick));
    });
  }
});
