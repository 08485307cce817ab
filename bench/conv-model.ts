/**
 * The convolutional image model of the GPU benchmark (bench/gpu.ts), generated rather than downloaded
 * so the bench needs no network and no Python: a ResNet-18-shaped network (stem conv 7×7/2 + BN + Relu
 * + max-pool, four stages of basic residual blocks — two 3×3 conv+BN(+Relu) with a skip Add, a strided
 * 1×1 conv+BN projection where the shape changes —, global average pool, Gemm to 1000 classes) built
 * with graph/onnx-builder.ts. Input `image` FP32 [batch,3,size,size], output `logits` [batch,1000].
 * At the default width (64) it has 11.7 M parameters, like torchvision's resnet18, whatever the
 * resolution: `size` changes only the compute (1.8 GMAC an image at 224, 0.15 at 64), which is what
 * makes it practical on a software WebGPU device. With `dense: K` the classifier gives way to a dense
 * (segmentation-style) head instead — a 1×1 conv to K classes on the last features, upsampled ×8
 * (nearest) to a stride-4 map: output `scores` [batch,K,size/4,size/4], 1 MiB an image at size 128 and
 * K 256, the shape of answer bench/protocols-served.ts needs; bench:gpu keeps the classifier. Weights come from the builder's seeded PRNG, so the
 * bytes are the same on every machine. Kept out of models/: the file is ~47 MB, written to a scratch
 * folder at bench time.
 *
 * Standalone check:  npx tsx bench/conv-model.ts [--size 64] [--width 64] [--blocks 2,2,2,2]
 *   [--dense 256] [--out file.onnx] — builds the model, runs it on onnxruntime-node's CPU provider (finite outputs?)
 *   and, when a WebGPU adapter is there, on WebGPU too, and prints the largest CPU/WebGPU difference.
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { attrFloat, fillUniform, GraphBuilder } from '../graph/onnx-builder.js';

export interface ConvModelOptions {
  /** Input height and width (≥ 32: five halvings leave at least 1×1 for the average pool). */
  size: number;
  /** Channels of the stem and first stage; each later stage doubles them (resnet18: 64). */
  width?: number;
  /** Residual blocks per stage (resnet18: 2,2,2,2; resnet34: 3,4,6,3, 21.8 M parameters). */
  blocks?: readonly number[];
  classes?: number;
  /** Classes of a dense head replacing the classifier (output `scores` [batch,dense,size/4,size/4]); size must divide by 32. */
  dense?: number;
  seed?: number;
}

export interface ConvModel {
  bytes: Uint8Array;
  params: number;
  /** Multiply-accumulates of one image's forward pass (convolutions and the Gemm). */
  macs: number;
  size: number;
  width: number;
  blocks: readonly number[];
  classes: number;
  /** The output's name and its shape for one image (without the batch dimension). */
  output: string;
  outputDims: number[];
  /** A one-line description for bench headers. */
  describe: string;
}

export const CONV_INPUT = 'image';
export const CONV_OUTPUT = 'logits';
export const CONV_DENSE_OUTPUT = 'scores';

/** Builds the model's bytes (about 1 s and 50 MB of memory at width 64). */
export function buildConvModel(opts: ConvModelOptions): ConvModel {
  const size = opts.size;
  const width = opts.width ?? 64;
  const blocks = opts.blocks ?? [2, 2, 2, 2];
  const classes = opts.classes ?? 1000;
  if (!Number.isInteger(size) || size < 32) throw new Error(`conv model: size ${size} must be an integer ≥ 32`);
  if (!Number.isInteger(width) || width < 1) throw new Error(`conv model: width ${width} must be a positive integer`);
  if (opts.dense !== undefined && size % 32 !== 0) throw new Error(`conv model: size ${size} must be a multiple of 32 for a dense head`);
  let seed = opts.seed ?? 1234;
  let params = 0;
  let macs = 0;
  const g = new GraphBuilder('conv_resnet', { docString: `ResNet-style stack, ${blocks.join('-')} blocks, width ${width}, ${size}×${size} input; synthetic weights from bench/conv-model.ts` });
  const uniform = (name: string, dims: number[], lo: number, hi: number) => {
    const n = dims.reduce((a, b) => a * b, 1);
    params += n;
    return g.initializer(name, 'FLOAT', dims, fillUniform(new Float32Array(n), seed++, lo, hi));
  };

  // He-uniform convolutions keep a ReLU stack's activations O(1); BN statistics near (0, 1) keep that
  // true while giving ORT's Conv+BN fusion real numbers to fold. The last BN of each residual branch
  // scales by ~0.3 so the eight skip Adds grow the variance by ~10 % a block rather than doubling it.
  let hw = size;
  const convBn = (name: string, x: string, cin: number, cout: number, k: number, stride: number, gamma: number, relu: boolean) => {
    const a = Math.sqrt(6 / (cin * k * k));
    const w = uniform(`${name}.weight`, [cout, cin, k, k], -a, a);
    const out = Math.floor((hw + 2 * Math.floor(k / 2) - k) / stride) + 1;
    macs += cout * cin * k * k * out * out;
    const y = g.op('Conv', [x, w], { kernel_shape: [k, k], strides: [stride, stride], pads: Array(4).fill(Math.floor(k / 2)) });
    const bn = g.op('BatchNormalization', [y,
      uniform(`${name}.bn.scale`, [cout], 0.8 * gamma, 1.2 * gamma),
      uniform(`${name}.bn.bias`, [cout], -0.05, 0.05),
      uniform(`${name}.bn.mean`, [cout], -0.05, 0.05),
      uniform(`${name}.bn.var`, [cout], 0.8, 1.2)], { epsilon: attrFloat(1e-5) });
    return { y: relu ? g.op('Relu', [bn]) : bn, hw: out };
  };

  let x = g.input(CONV_INPUT, 'FLOAT', ['batch', 3, size, size]);
  const stem = convBn('stem', x, 3, width, 7, 2, 1, true);
  hw = stem.hw;
  x = g.op('MaxPool', [stem.y], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] });
  hw = Math.floor((hw + 2 - 3) / 2) + 1;
  let cin = width;
  blocks.forEach((n, s) => {
    const cout = width << s;
    for (let b = 0; b < n; b++) {
      const stride = s > 0 && b === 0 ? 2 : 1;
      const name = `stage${s + 1}.${b}`;
      const at = hw;
      const c1 = convBn(`${name}.conv1`, x, cin, cout, 3, stride, 1, true);
      hw = c1.hw;
      const c2 = convBn(`${name}.conv2`, c1.y, cout, cout, 3, 1, 0.3, false);
      let skip = x;
      if (stride !== 1 || cin !== cout) {
        hw = at;
        skip = convBn(`${name}.down`, x, cin, cout, 1, stride, 1, false).y;
        hw = c2.hw;
      }
      x = g.op('Relu', [g.op('Add', [c2.y, skip])]);
      cin = cout;
    }
  });
  let output: string;
  let outputDims: number[];
  if (opts.dense !== undefined) {
    const k = opts.dense;
    const a = Math.sqrt(3 / cin);
    macs += cin * k * hw * hw;
    const logits = g.op('Conv', [x, uniform('head.weight', [k, cin, 1, 1], -a, a), uniform('head.bias', [k], -0.01, 0.01)], { kernel_shape: [1, 1] });
    const scales = g.initializer('head.scales', 'FLOAT', [4], Float32Array.from([1, 1, 8, 8]));
    output = g.op('Resize', [logits, '', scales], { mode: 'nearest' }, CONV_DENSE_OUTPUT);
    outputDims = [k, size / 4, size / 4];
  } else {
    const pooled = g.op('Flatten', [g.op('GlobalAveragePool', [x])], { axis: 1 });
    const a = Math.sqrt(3 / cin);
    macs += cin * classes;
    output = g.op('Gemm', [pooled, uniform('fc.weight', [classes, cin], -a, a), uniform('fc.bias', [classes], -0.01, 0.01)], { transB: 1 }, CONV_OUTPUT);
    outputDims = [classes];
  }
  g.output(output, 'FLOAT', ['batch', ...outputDims]);
  const bytes = g.encode();
  const head = opts.dense !== undefined ? `, dense head [${outputDims.join(',')}]` : '';
  const describe = `ResNet-style ${blocks.join('-')} blocks, width ${width}, ${size}×${size}${head}: ${(params / 1e6).toFixed(2)} M parameters, ${(macs / 1e9).toFixed(3)} GMAC an image, ${(bytes.byteLength / 1e6).toFixed(1)} MB`;
  return { bytes, params, macs, size, width, blocks, classes, output, outputDims, describe };
}

/** Writes the model as `<dir>/model.onnx` (dir: a scratch folder of the caller's) and returns it. */
export function writeConvModel(dir: string, opts: ConvModelOptions): ConvModel & { path: string } {
  const m = buildConvModel(opts);
  const path = join(dir, 'model.onnx');
  writeFileSync(path, m.bytes);
  return { ...m, path };
}

/** `batch` deterministic test images, values in [-1, 1) like a normalised photo; image i differs from i+1. */
export function convImages(size: number, batch: number, seed = 99): Float32Array {
  return fillUniform(new Float32Array(batch * 3 * size * size), seed, -1, 1);
}

export interface Diff {
  maxAbs: number;
  /** maxAbs over the largest magnitude of the reference: elementwise ratios blow up near zero. */
  maxRel: number;
  /** Largest elementwise |a−b| / |b| where |b| ≥ 1e-3 · max|b|. */
  maxElemRel: number;
  finite: boolean;
}

export function compareOutputs(got: Float32Array, ref: Float32Array): Diff {
  let maxAbs = 0;
  let scale = 0;
  let finite = true;
  for (let i = 0; i < ref.length; i++) {
    if (!Number.isFinite(got[i]!) || !Number.isFinite(ref[i]!)) finite = false;
    maxAbs = Math.max(maxAbs, Math.abs(got[i]! - ref[i]!));
    scale = Math.max(scale, Math.abs(ref[i]!));
  }
  let maxElemRel = 0;
  for (let i = 0; i < ref.length; i++) {
    if (Math.abs(ref[i]!) >= 1e-3 * scale) maxElemRel = Math.max(maxElemRel, Math.abs(got[i]! - ref[i]!) / Math.abs(ref[i]!));
  }
  return { maxAbs, maxRel: scale > 0 ? maxAbs / scale : 0, maxElemRel, finite };
}

/** Mean, standard deviation and finiteness of an output, to see that the weights' scales are sane. */
export function outputStats(x: Float32Array): { mean: number; std: number; finite: boolean } {
  let s = 0;
  let s2 = 0;
  let finite = true;
  for (const v of x) {
    if (!Number.isFinite(v)) finite = false;
    s += v;
    s2 += v * v;
  }
  const mean = s / x.length;
  return { mean, std: Math.sqrt(Math.max(0, s2 / x.length - mean * mean)), finite };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { size: { type: 'string', default: '64' }, width: { type: 'string', default: '64' }, blocks: { type: 'string' }, dense: { type: 'string' }, out: { type: 'string' } },
  });
  const opts: ConvModelOptions = { size: Number(values.size), width: Number(values.width), blocks: values.blocks?.split(',').map(Number), dense: values.dense ? Number(values.dense) : undefined };
  const dir = mkdtempSync(join(tmpdir(), 'tsi-conv-'));
  try {
    const t0 = performance.now();
    const m = writeConvModel(dir, opts);
    if (values.out) writeFileSync(resolve(values.out), m.bytes);
    process.stdout.write(`${m.describe}; built in ${(performance.now() - t0).toFixed(0)} ms${values.out ? `, written to ${values.out}` : ''}\n`);
    const ort = await import('onnxruntime-node');
    const batch = 2;
    const feeds = { [CONV_INPUT]: new ort.Tensor('float32', convImages(m.size, batch), [batch, 3, m.size, m.size]) };
    const run = async (ep: string) => {
      const s = await ort.InferenceSession.create(m.path, { executionProviders: [ep], graphOptimizationLevel: 'all' });
      const out = (await s.run(feeds))[m.output]!.data as Float32Array;
      await s.release();
      return out;
    };
    const cpu = await run('cpu');
    const st = outputStats(cpu);
    process.stdout.write(`cpu: ${m.output} [${batch},${m.outputDims.join(',')}] mean ${st.mean.toFixed(3)} std ${st.std.toFixed(3)} ${st.finite ? 'all finite' : 'NOT FINITE'}\n`);
    let gpu: Float32Array;
    try {
      gpu = await run('webgpu');
    } catch (err) {
      process.stdout.write(`webgpu: skipped (${(err as Error).message.split('\n')[0]})\n`);
      return;
    }
    const d = compareOutputs(gpu, cpu);
    process.stdout.write(`webgpu vs cpu: max |diff| ${d.maxAbs.toExponential(2)}, ${d.maxRel.toExponential(2)} of max |logit|, largest elementwise relative ${d.maxElemRel.toExponential(2)}${d.finite ? '' : ' (NOT FINITE)'}\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) await main();
