/**
 * The browser runtime's WebGPU backend on a real WebGPU implementation, in Node: `createServer` from
 * runtime-browser/ with onnxruntime-web's WebGPU (JSEP) build on Dawn's `navigator.gpu` (the `webgpu`
 * package; a real GPU, or in CI Mesa's lavapipe software Vulkan device). Every ONNX model of the
 * default repository is served as KIND_GPU and must give the wasm answers (integers and strings exact,
 * floats within 1e-5 + 1e-4 relative), also when concurrent calls are batched; instances must say
 * where they run, and models WebGPU cannot take must run on wasm and say why. In headless Chromium
 * (test/browser/) WebGPU is SwiftShader or absent; this is the path a real adapter takes.
 * Without an adapter (or without Dawn) the tests are a named skip, except under CI, where they fail.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { createLogger } from '../../core/index.js';
import { createServer, type BrowserServer, type InputValue, type OutputTensor } from '../../runtime-browser/index.js';
import { floats, ints } from '../browser/cases.js';
import { describeWith } from '../helpers/capability.js';
import { ROOT } from '../helpers/server.js';
import { baselineWasmOnly, installWebGpu, loadBrowserOrt, memoryRepository, onGpu, onnxModels } from '../helpers/webgpu-node.js';

// Vitest runs each test file in a process of its own (forks pool), so this V8 flag stays in this file.
baselineWasmOnly();
const webgpu = await installWebGpu();
const withAdapter = describeWith(!!process.env.CI, 'WebGPU adapter (Dawn)', webgpu.adapter ? undefined : webgpu.reason ?? 'no adapter');
const withDawn = describeWith(!!process.env.CI, "Dawn (the 'webgpu' package)", webgpu.loaded ? undefined : webgpu.reason ?? 'not loaded');

/** Models whose every input and output WebGPU can hold. */
const ON_WEBGPU = onnxModels(['add_sub', 'autocomplete_add', 'image_classifier', 'mlp_batch', 'simple', 'simple_sequence']);
/** Models the runtime keeps on wasm, and the reason it gives. */
const ON_WASM: Record<string, string> = {
  simple_string: 'WebGPU has no string tensors',
  simple_dyna_sequence: 'WebGPU has no uint64 tensors',
};
const MODELS = [...ON_WEBGPU, ...onnxModels(Object.keys(ON_WASM))];

interface IoMeta { name: string; datatype: string; shape: number[] }

/** Deterministic inputs from a model's metadata: `rows` in the batch dimension, 3 in other variable ones. */
function inputsFor(meta: { inputs: IoMeta[] }, batching: boolean, rows: number, seed: number): Record<string, InputValue> {
  const out: Record<string, InputValue> = {};
  meta.inputs.forEach((io, k) => {
    const shape = io.shape.map((d, i) => (d >= 0 ? d : i === 0 && batching ? rows : 3));
    const n = shape.reduce((a, b) => a * b, 1);
    const s = seed * 31 + k;
    const data = io.datatype === 'FP32' ? Float32Array.from(floats(n, s))
      : io.datatype === 'INT32' ? Int32Array.from(ints(n, s))
        : io.datatype === 'BYTES' ? ints(n, s, 0, 100).map(String)
          : io.datatype === 'INT64' ? BigInt64Array.from(ints(n, s), BigInt)
            : io.datatype === 'UINT64' ? BigUint64Array.from(ints(n, s, 0, 100), BigInt)
              : undefined;
    if (!data) throw new Error(`no test data for ${io.datatype} input ${io.name}`);
    out[io.name] = { data, shape };
  });
  return out;
}

/** The first difference between two outputs in words: floats within 1e-5 + 1e-4 relative, the rest exact. */
function mismatch(what: string, got: OutputTensor | undefined, want: OutputTensor | undefined): string | undefined {
  if (!got || !want) return `${what}: ${got ? 'unexpected' : 'missing'}`;
  if (got.datatype !== want.datatype || JSON.stringify(got.shape) !== JSON.stringify(want.shape)) {
    return `${what}: ${got.datatype}${JSON.stringify(got.shape)} != ${want.datatype}${JSON.stringify(want.shape)}`;
  }
  const g = got.data as ArrayLike<unknown>;
  const w = want.data as ArrayLike<unknown>;
  const float = got.datatype === 'FP32' || got.datatype === 'FP64';
  for (let i = 0; i < w.length; i++) {
    const ok = float ? Math.abs((g[i] as number) - (w[i] as number)) <= 1e-5 + 1e-4 * Math.abs(w[i] as number) : g[i] === w[i];
    if (!ok) return `${what}[${i}]: ${String(g[i])} != ${String(w[i])}`;
  }
  return undefined;
}

function outputsMismatch(model: string, got: Record<string, OutputTensor>, want: Record<string, OutputTensor>): string | undefined {
  const names = new Set([...Object.keys(got), ...Object.keys(want)]);
  for (const n of names) {
    const m = mismatch(`${model}.${n}`, got[n], want[n]);
    if (m) return m;
  }
  return undefined;
}

withAdapter('the browser runtime on WebGPU under Node (Dawn)', () => {
  const logs: string[] = [];
  const log = createLogger((_l, line) => logs.push(line), 1);
  let gpu: BrowserServer;
  let wasm: BrowserServer;

  beforeAll(async () => {
    // One onnxruntime-web module for both: the same wasm kernels on the wasm side of every comparison.
    gpu = await createServer({ repository: memoryRepository(MODELS, onGpu), ort: loadBrowserOrt, log });
    wasm = await createServer({ repository: memoryRepository(MODELS), ort: loadBrowserOrt, device: 'wasm', log });
  }, 180_000);

  afterAll(async () => {
    await gpu?.stop(5000);
    await wasm?.stop(5000);
    webgpu.dispose();
  });

  it('has a WebGPU adapter (CI installs Mesa lavapipe)', () => {
    expect(webgpu.adapter, webgpu.reason).toBeDefined();
    console.log(`[tsi] Dawn adapter: ${JSON.stringify(webgpu.adapter)}`);
  });

  it('sees the adapter Dawn offers, and runs wasm on one thread (Node has no Worker global)', () => {
    const a = webgpu.adapter!;
    expect(gpu.environment.webgpu).toEqual({ available: true, vendor: a.vendor, architecture: a.architecture, fallback: a.isFallbackAdapter, shaderF16: expect.any(Boolean) });
    expect(gpu.environment.numThreads).toBe(1);
    expect(gpu.index().map((e) => [e.name, e.state, e.reason ?? ''])).toEqual(MODELS.toSorted().map((m) => [m, 'READY', '']));
  });

  it('puts KIND_GPU instances of float and int32 models on webgpu', () => {
    for (const m of ON_WEBGPU) expect(gpu.instances(m), m).toEqual([{ name: expect.any(String), kind: 'KIND_GPU', device: 'webgpu' }]);
    // A config without an instance count (autocomplete_add has none at all) gets two KIND_CPU instances, as in Triton.
    for (const m of MODELS) for (const i of wasm.instances(m)) expect([i.kind, i.device], m).toEqual(['KIND_CPU', 'wasm']);
  });

  it('keeps models with string or 64-bit tensors on wasm, and says why', () => {
    for (const [m, reason] of Object.entries(ON_WASM)) {
      expect(gpu.instances(m), m).toEqual([{ name: expect.any(String), kind: 'KIND_GPU', device: 'wasm', fallbackReason: reason }]);
      expect(logs.some((l) => l.includes(m) && l.includes(`${reason}; running on wasm`)), m).toBe(true);
    }
  });

  for (const m of MODELS) {
    it(`${m}: the same outputs on ${m in ON_WASM ? 'its wasm fallback' : 'webgpu'} as on wasm`, async () => {
      const meta = gpu.metadata(m) as { inputs: IoMeta[] };
      const config = gpu.config(m) as { max_batch_size?: number; sequence_batching?: unknown };
      const batching = (config.max_batch_size ?? 0) > 0;
      // Sequence models carry state from call to call: a three-step sequence of batch 1; others batch 2.
      const steps = config.sequence_batching ? 3 : 1;
      const before = webgpu.submits();
      for (let step = 0; step < steps; step++) {
        const inputs = inputsFor(meta, batching, config.sequence_batching ? 1 : 2, step + 1);
        const sequence = config.sequence_batching ? { id: 77, start: step === 0, end: step === steps - 1 } : undefined;
        const got = await gpu.inferTensors({ model: m, inputs, sequence });
        const want = await wasm.inferTensors({ model: m, inputs, sequence });
        expect(outputsMismatch(m, got, want)).toBeUndefined();
      }
      // Independent of what the runtime reports: webgpu instances submit GPU work, wasm ones none.
      if (m in ON_WASM) expect(webgpu.submits()).toBe(before);
      else expect(webgpu.submits()).toBeGreaterThan(before);
    });
  }

  it('batches concurrent calls on webgpu, each getting its own rows as wasm computes them', async () => {
    const rows = Array.from({ length: 32 }, (_, i) => Float32Array.from(floats(1024, 500 + i)));
    const all = new Float32Array(32 * 1024);
    rows.forEach((r, i) => all.set(r, i * 1024));
    const want = (await wasm.infer({ model: 'mlp_batch', inputs: { INPUT: { data: all, shape: [32, 1024] } } })).OUTPUT as Float32Array;
    const stats = () => gpu.stats('mlp_batch').model_stats[0] as { execution_count: number; inference_count: number; batch_stats: { batch_size: number }[] };
    const before = stats();
    const outs = await Promise.all(rows.map((r) => gpu.inferTensors({ model: 'mlp_batch', inputs: { INPUT: r } })));
    const after = stats();
    expect(after.inference_count - before.inference_count).toBe(32);
    const executions = after.execution_count - before.execution_count;
    console.log(`[tsi] 32 concurrent calls on webgpu ran in ${executions} executions (batch sizes seen: ${after.batch_stats.map((b) => b.batch_size).join(',')})`);
    expect(executions).toBeLessThan(32);
    outs.forEach((o, r) => {
      const row: OutputTensor = { datatype: 'FP32', shape: [1, 1024], data: want.subarray(r * 1024, (r + 1) * 1024) };
      expect(mismatch(`mlp_batch row ${r}`, o.OUTPUT, row)).toBeUndefined();
    });
  });
});

withAdapter("onnxruntime-web's own Node entry", () => {
  it('has no WebGPU backend, so KIND_GPU instances run on wasm and say why', async () => {
    // No `ort`: the runtime's default import('onnxruntime-web'), which Node resolves to ort.node.min.mjs.
    const logs: string[] = [];
    const s = await createServer({ repository: memoryRepository(['add_sub'], onGpu), log: createLogger((_l, line) => logs.push(line), 0) });
    try {
      expect(s.instances('add_sub')).toEqual([{
        name: expect.any(String), kind: 'KIND_GPU', device: 'wasm',
        fallbackReason: expect.stringMatching(/^webgpu session failed: .*\[webgpu\] backend not found/),
      }]);
      expect(logs.some((l) => l.includes('[webgpu] backend not found') && l.includes('running on wasm'))).toBe(true);
      const out = await s.infer({ model: 'add_sub', inputs: { INPUT0: new Float32Array(16).fill(1), INPUT1: new Float32Array(16).fill(2) } });
      expect(Array.from(out.OUTPUT0 as Float32Array)).toEqual(Array(16).fill(3));
    } finally {
      await s.stop(5000);
    }
  });
});

withDawn('with the Vulkan driver hidden', () => {
  it('finds no adapter, runs KIND_GPU on wasm and says why', async () => {
    const script = join(ROOT, 'test', 'helpers', 'webgpu-no-adapter.ts');
    const env = { ...process.env, VK_DRIVER_FILES: '/nonexistent', VK_ICD_FILENAMES: '/nonexistent' };
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', script], { cwd: ROOT, env, timeout: 60_000 }, (err, out, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else resolve(out);
      });
    });
    const r = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(r.dawnLoaded).toBe(true);
    expect(r.adapter).toBeNull();
    expect(r.environment).toEqual({ available: false, reason: 'no WebGPU adapter (requestAdapter() returned null)' });
    expect(r.instances).toEqual([{
      name: expect.any(String), kind: 'KIND_GPU', device: 'wasm', fallbackReason: 'no WebGPU adapter (requestAdapter() returned null)',
    }]);
    expect(r.logs.some((l: string) => l.includes('no WebGPU adapter (requestAdapter() returned null); running on wasm'))).toBe(true);
    expect(r.sum).toEqual(r.expected);
    expect(r.submits).toBe(0);
  });
});
