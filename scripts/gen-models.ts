/**
 * Generates the `.onnx` files of the default model repository (`models/<name>/1/model.onnx`) and
 * exports the builders behind them so tests can make fixture models in temp folders. Only the ONNX
 * bytes are generated: `config.pbtxt` and label files are hand-written and committed, so the
 * repository reads like a real Triton one, and so are the JavaScript models (`<name>/1/model.js`),
 * which stand where Triton's examples use custom backends or the Python backend. Weights come from
 * seeded mulberry32 fills, so every run writes the same bytes; the whole repository (16.8 MB, mostly
 * `mlp_batch`) builds in well under a second. Run directly (`npm run models`, or
 * `node dist/scripts/gen-models.js`) it fills the package's own `models/` folder. Float64 and integer
 * reference functions let tests check the numerics.
 */
import { existsSync, realpathSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ElemType, GraphBuilder, attrFloat, fillUniform, type Dim, type ElemTypeName } from '../graph/onnx-builder.js';
import { decoderModel } from './llm-model.js';
import { encoderModel } from './embedding-model.js';
import { CROSS_ENCODER_MODELS } from './cross-encoder-model.js';
import { writeWhisperFolder } from './whisper-model.js';

/** Triton datatypes and the ONNX element type each maps to (Triton's BYTES is ONNX's STRING). */
export type Datatype =
  | 'BOOL' | 'UINT8' | 'UINT16' | 'UINT32' | 'UINT64' | 'INT8' | 'INT16' | 'INT32' | 'INT64'
  | 'FP16' | 'FP32' | 'FP64' | 'BYTES';
export const ONNX_ELEM_TYPE: Readonly<Record<Datatype, ElemTypeName>> = {
  BOOL: 'BOOL', UINT8: 'UINT8', UINT16: 'UINT16', UINT32: 'UINT32', UINT64: 'UINT64',
  INT8: 'INT8', INT16: 'INT16', INT32: 'INT32', INT64: 'INT64',
  FP16: 'FLOAT16', FP32: 'FLOAT', FP64: 'DOUBLE', BYTES: 'STRING',
};

/** Config-style dims (-1 = variable) to ONNX dims; variable dims get distinct symbolic names. */
function onnxShape(dims: readonly number[], batch: boolean): Dim[] {
  const shape: Dim[] = dims.map((d, i) => (d < 0 ? `dim${i}` : d));
  return batch ? ['batch', ...shape] : shape;
}

// ---------------------------------------------------------------------------------------------
// Test-fixture builders
// ---------------------------------------------------------------------------------------------

/** `INPUT0` → Identity → `OUTPUT0` of `datatype`; shape `[batch?, ...dims]` (default dims [-1]). */
export function identityModel(datatype: Datatype, opts: { batch?: boolean; dims?: number[] } = {}): Uint8Array {
  const t = ONNX_ELEM_TYPE[datatype];
  const shape = onnxShape(opts.dims ?? [-1], opts.batch ?? true);
  const g = new GraphBuilder(`identity_${datatype.toLowerCase()}`);
  g.op('Identity', [g.input('INPUT0', t, shape)], undefined, 'OUTPUT0');
  g.output('OUTPUT0', t, shape);
  return g.encode();
}

/** `INPUT0`,`INPUT1` → `OUTPUT0` = INPUT0+INPUT1, `OUTPUT1` = INPUT0−INPUT1 (numeric datatypes). */
export function addSubModel(datatype: Datatype, dims: readonly number[] = [16], batch = true): Uint8Array {
  if (datatype === 'BYTES' || datatype === 'BOOL') throw new Error(`addSubModel: ${datatype} has no Add/Sub`);
  const t = ONNX_ELEM_TYPE[datatype];
  const shape = onnxShape(dims, batch);
  // Add/Sub accept 8- and 16-bit integers only from opset 14.
  const small = ['UINT8', 'INT8', 'UINT16', 'INT16'].includes(datatype);
  const g = new GraphBuilder(`add_sub_${datatype.toLowerCase()}`, { opset: small ? 14 : 13 });
  const a = g.input('INPUT0', t, shape);
  const b = g.input('INPUT1', t, shape);
  g.op('Add', [a, b], undefined, g.output('OUTPUT0', t, shape));
  g.op('Sub', [a, b], undefined, g.output('OUTPUT1', t, shape));
  return g.encode();
}

/**
 * A model that keeps one CPU thread busy for about `ms` for a batch of 1 (to prove a server stays
 * responsive while it runs): `INPUT` FP32 [batch,1] is broadcast into a [batch,N,N] matrix that is
 * multiplied by the N×N averaging matrix `k` times, then averaged back, so `OUTPUT` ≈ `INPUT`
 * (equal up to float rounding). The matrix depends on the input, so ONNX Runtime cannot
 * constant-fold the chain away. `k` comes from a nominal single-thread speed (`gflops`, measured
 * at ~90 on one AVX2 AMD EPYC core); real time scales with the host.
 */
export function slowModel(ms = 300, opts: { gflops?: number; n?: number } = {}): Uint8Array {
  const n = opts.n ?? 512;
  const flopsPerMatMul = 2 * n * n * n;
  const k = Math.max(1, Math.round((ms * 1e-3 * (opts.gflops ?? 90) * 1e9) / flopsPerMatMul));
  const g = new GraphBuilder('slow', { docString: `${k} chained ${n}x${n} MatMuls (~${ms} ms nominal)` });
  const x = g.input('INPUT', 'FLOAT', ['batch', 1]);
  const shape3 = g.initializer('shape3', 'INT64', [3], BigInt64Array.from([-1n, 1n, 1n]));
  const square = g.initializer('square', 'INT64', [2], BigInt64Array.from([BigInt(n), BigInt(n)]));
  // ConstantOfShape keeps the file tiny; ORT folds it once at session creation.
  const avg = g.op('ConstantOfShape', [square], { value: { elemType: 'FLOAT', dims: [1], data: Float32Array.of(1 / n) } });
  let m = g.op('Expand', [g.op('Reshape', [x, shape3]), square]);
  for (let i = 0; i < k; i++) m = g.op('MatMul', [m, avg]);
  const rows = g.op('ReduceMean', [m], { axes: [2], keepdims: 0 });
  g.op('ReduceMean', [rows], { axes: [1], keepdims: 1 }, g.output('OUTPUT', 'FLOAT', ['batch', 1]));
  return g.encode();
}

// ---------------------------------------------------------------------------------------------
// Default repository models
// ---------------------------------------------------------------------------------------------

/** `simple_string`: decimal strings are Cast to INT32, added/subtracted, and Cast back to strings. */
export function simpleStringModel(): Uint8Array {
  const shape: Dim[] = ['batch', 16];
  const g = new GraphBuilder('simple_string');
  const a = g.op('Cast', [g.input('INPUT0', 'STRING', shape)], { to: ElemType.INT32 });
  const b = g.op('Cast', [g.input('INPUT1', 'STRING', shape)], { to: ElemType.INT32 });
  g.op('Cast', [g.op('Add', [a, b])], { to: ElemType.STRING }, g.output('OUTPUT0', 'STRING', shape));
  g.op('Cast', [g.op('Sub', [a, b])], { to: ElemType.STRING }, g.output('OUTPUT1', 'STRING', shape));
  return g.encode();
}

/**
 * `INPUT0` FP32 [batch,1] → `OUTPUT0` = INPUT0 + `offset`: copies of one tiny model that each answer
 * differently, so a request served by the wrong copy shows. With `weightBytes`, a weight of that size
 * is read too (a Gather indexed by the input, so onnxruntime cannot fold it away; its first element 0).
 */
export function offsetModel(offset: number, weightBytes = 0): Uint8Array {
  const shape: Dim[] = ['batch', 1];
  const g = new GraphBuilder('offset');
  const x = g.input('INPUT0', 'FLOAT', shape);
  let y = g.op('Add', [x, g.initializer('offset', 'FLOAT', [1], Float32Array.of(offset))]);
  if (weightBytes > 0) {
    const w = new Float32Array(Math.max(1, Math.floor(weightBytes / 4)));
    for (let i = 1; i < w.length; i++) w[i] = (i % 97) + 1;
    const zeros = g.op('Cast', [g.op('Mul', [x, g.initializer('zero', 'FLOAT', [1], Float32Array.of(0))])], { to: ElemType.INT64 });
    y = g.op('Add', [y, g.op('Gather', [g.initializer('weight', 'FLOAT', [w.length], w), zeros])]);
  }
  g.op('Identity', [y], undefined, g.output('OUTPUT0', 'FLOAT', shape));
  return g.encode();
}

/** `autocomplete_add`: `A`,`B` FP32 [batch,4] → `SUM`; shipped without a config.pbtxt. */
export function autocompleteAddModel(): Uint8Array {
  const shape: Dim[] = ['batch', 4];
  const g = new GraphBuilder('autocomplete_add');
  g.op('Add', [g.input('A', 'FLOAT', shape), g.input('B', 'FLOAT', shape)], undefined, 'SUM');
  g.output('SUM', 'FLOAT', shape);
  return g.encode();
}

/**
 * `simple_sequence` / `simple_dyna_sequence`: Triton's example sequence models, which keep no state;
 * the sequence batcher's control inputs make the answer. OUTPUT = READY * (INPUT + START), and in
 * the dyna variant READY * (INPUT + START + END * int32(CORRID)), so a sequence's first answer is its
 * input plus 1 and its last answer carries its correlation id (truncated to 32 bits).
 */
export function simpleSequenceModel(opts: { dyna?: boolean } = {}): Uint8Array {
  const shape: Dim[] = ['batch', 1];
  const g = new GraphBuilder(opts.dyna ? 'simple_dyna_sequence' : 'simple_sequence');
  const input = g.input('INPUT', 'INT32', shape);
  const start = g.input('START', 'INT32', shape);
  const end = opts.dyna ? g.input('END', 'INT32', shape) : undefined;
  const ready = g.input('READY', 'INT32', shape);
  let sum = g.op('Add', [input, start]);
  if (end) {
    const corrid = g.op('Cast', [g.input('CORRID', 'UINT64', shape)], { to: ElemType.INT32 });
    sum = g.op('Add', [sum, g.op('Mul', [end, corrid])]);
  }
  g.op('Mul', [ready, sum], undefined, g.output('OUTPUT', 'INT32', shape));
  return g.encode();
}

/** `simpleSequenceModel` for one request (END and CORRID only for the dyna variant), with int32 wrap-around. */
export function referenceSimpleSequence(s: { input: number; start: number; ready: number; end?: number; corrid?: bigint }): number {
  const corrid = Number(BigInt.asIntN(32, s.corrid ?? 0n));
  return Math.imul(s.ready, (s.input + s.start + Math.imul(s.end ?? 0, corrid)) | 0);
}

/**
 * `simple_sequence_state`: tsi's implicit-state example, an accumulator. OUTPUT_STATE = READY ?
 * (START ? INPUT : INPUT_STATE + INPUT) : INPUT_STATE, and OUTPUT = OUTPUT_STATE, i.e. the running sum
 * of INPUT since the sequence started; the sequence batcher carries OUTPUT_STATE to INPUT_STATE.
 */
export function sequenceStateModel(): Uint8Array {
  const shape: Dim[] = ['batch', 1];
  const g = new GraphBuilder('simple_sequence_state');
  const input = g.input('INPUT', 'INT32', shape);
  const start = g.input('START', 'INT32', shape);
  const ready = g.input('READY', 'INT32', shape);
  const state = g.input('INPUT_STATE', 'INT32', shape);
  const started = g.op('Where', [g.op('Cast', [start], { to: ElemType.BOOL }), input, g.op('Add', [state, input])]);
  const next = g.op('Where', [g.op('Cast', [ready], { to: ElemType.BOOL }), started, state], undefined, 'OUTPUT_STATE');
  g.output('OUTPUT_STATE', 'INT32', shape);
  g.op('Identity', [next], undefined, 'OUTPUT');
  g.output('OUTPUT', 'INT32', shape);
  return g.encode();
}

/** One step of `sequenceStateModel` for one sequence. */
export function referenceSequenceStep(s: { input: number; start: number; ready: number; state: number }): { state: number; output: number } {
  const state = s.ready ? (s.start ? s.input : (s.state + s.input) | 0) : s.state;
  return { state, output: state };
}

export const IMAGE_CLASSIFIER_LABELS = [
  'airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck',
] as const;
const IMG = { c: 3, h: 16, w: 16, hidden: 64, classes: 10, block: 4 } as const;
const IMG_FEATURES = IMG.c * IMG.h * IMG.w;

/**
 * The synthetic image the classifier maps to class `k`: zero except 1.0 (all channels) in 4×4
 * block k of the 16×16 grid, blocks numbered row-major (block k = rows 4⌊k/4⌋.., cols 4(k%4)..).
 */
export function classifierPattern(k: number, value = 1): Float32Array {
  const img = new Float32Array(IMG_FEATURES);
  const by = Math.floor(k / 4) * IMG.block;
  const bx = (k % 4) * IMG.block;
  for (let c = 0; c < IMG.c; c++) {
    for (let y = by; y < by + IMG.block; y++) {
      for (let x = bx; x < bx + IMG.block; x++) img[c * IMG.h * IMG.w + y * IMG.w + x] = value;
    }
  }
  return img;
}

let classifierCache: { w1: Float32Array; b1: Float32Array; w2: Float32Array; b2: Float32Array } | undefined;
/**
 * Hidden units 0..9 are block detectors (mean of block k), hidden units 10..63 are random; the
 * output layer maps detector k to class k with weight 2 and −0.5 to the other classes, while the
 * random units add only ±0.02-scale noise, so each `classifierPattern(k)` wins by a wide margin.
 */
function classifierWeights(): NonNullable<typeof classifierCache> {
  if (classifierCache) return classifierCache;
  const { hidden, classes } = IMG;
  const w1 = fillUniform(new Float32Array(hidden * IMG_FEATURES), 11, -0.05, 0.05);
  const b1 = fillUniform(new Float32Array(hidden), 12, -0.05, 0.05);
  const w2 = fillUniform(new Float32Array(classes * hidden), 13, -0.02, 0.02);
  const b2 = fillUniform(new Float32Array(classes), 14, -0.05, 0.05);
  const blockSize = IMG.c * IMG.block * IMG.block;
  for (let k = 0; k < classes; k++) {
    const pattern = classifierPattern(k, 1 / blockSize);
    w1.set(pattern, k * IMG_FEATURES);
    b1[k] = 0;
    for (let j = 0; j < classes; j++) w2[k * hidden + j] = j === k ? 2 : -0.5;
  }
  return (classifierCache = { w1, b1, w2, b2 });
}

/** `image_classifier`: image FP32 [batch,3,16,16] → Flatten → Gemm(768→64) → Relu → Gemm(64→10). */
export function imageClassifierModel(): Uint8Array {
  const { w1, b1, w2, b2 } = classifierWeights();
  const g = new GraphBuilder('image_classifier', { docString: 'classifierPattern(k) is classified as class k' });
  const flat = g.op('Flatten', [g.input('image', 'FLOAT', ['batch', IMG.c, IMG.h, IMG.w])], { axis: 1 });
  const fc1 = g.op('Gemm', [flat, g.initializer('fc1.weight', 'FLOAT', [IMG.hidden, IMG_FEATURES], w1),
    g.initializer('fc1.bias', 'FLOAT', [IMG.hidden], b1)], { transB: 1, alpha: attrFloat(1), beta: attrFloat(1) });
  g.op('Gemm', [g.op('Relu', [fc1]), g.initializer('fc2.weight', 'FLOAT', [IMG.classes, IMG.hidden], w2),
    g.initializer('fc2.bias', 'FLOAT', [IMG.classes], b2)], { transB: 1 }, 'scores');
  g.output('scores', 'FLOAT', ['batch', IMG.classes]);
  return g.encode();
}

/** Float64 reference for `image_classifier`; `images` holds `batch` images of 768 values. */
export function referenceImageClassifier(images: Float32Array, batch: number): Float64Array {
  const { w1, b1, w2, b2 } = classifierWeights();
  const h = denseRelu(images, batch, w1, b1, IMG_FEATURES, IMG.hidden, true);
  return denseRelu(h, batch, w2, b2, IMG.hidden, IMG.classes, false);
}

const MLP = { width: 1024, layers: 4 } as const;
let mlpCache: { w: Float32Array[]; b: Float32Array[] } | undefined;
/** He-scaled uniform weights (variance 2/fan_in) keep ReLU activations O(1) through all layers. */
function mlpBatchWeights(): NonNullable<typeof mlpCache> {
  if (mlpCache) return mlpCache;
  const n = MLP.width;
  const a = Math.sqrt(6 / n);
  const w: Float32Array[] = [];
  const b: Float32Array[] = [];
  for (let l = 0; l < MLP.layers; l++) {
    w.push(fillUniform(new Float32Array(n * n), 1000 + l, -a, a));
    b.push(fillUniform(new Float32Array(n), 2000 + l, -0.01, 0.01));
  }
  return (mlpCache = { w, b });
}

/** `mlp_batch`: INPUT FP32 [batch,1024] → 4 × (Gemm 1024×1024 + Relu) → OUTPUT FP32 [batch,1024]. */
export function mlpBatchModel(): Uint8Array {
  const { w, b } = mlpBatchWeights();
  const n = MLP.width;
  const g = new GraphBuilder('mlp_batch');
  let x = g.input('INPUT', 'FLOAT', ['batch', n]);
  for (let l = 0; l < MLP.layers; l++) {
    const y = g.op('Gemm', [x, g.initializer(`fc${l}.weight`, 'FLOAT', [n, n], w[l]!),
      g.initializer(`fc${l}.bias`, 'FLOAT', [n], b[l]!)], { transB: 1 });
    x = g.op('Relu', [y], undefined, l === MLP.layers - 1 ? 'OUTPUT' : undefined);
  }
  g.output('OUTPUT', 'FLOAT', ['batch', n]);
  return g.encode();
}

/** Float64 reference for `mlp_batch`; `input` holds `batch` rows of 1024 values. */
export function referenceMlpBatch(input: Float32Array | Float64Array, batch: number): Float64Array {
  const { w, b } = mlpBatchWeights();
  let x: Float32Array | Float64Array = input;
  for (let l = 0; l < MLP.layers; l++) x = denseRelu(x, batch, w[l]!, b[l]!, MLP.width, MLP.width, true);
  return x as Float64Array;
}

/** y = x·Wᵀ + b (W is [out,in], as Gemm with transB=1), optionally followed by ReLU, in float64. */
function denseRelu(
  x: Float32Array | Float64Array, batch: number, w: Float32Array, b: Float32Array,
  nIn: number, nOut: number, relu: boolean,
): Float64Array {
  const y = new Float64Array(batch * nOut);
  for (let r = 0; r < batch; r++) {
    for (let o = 0; o < nOut; o++) {
      let s = b[o]!;
      const wo = o * nIn;
      const xr = r * nIn;
      for (let i = 0; i < nIn; i++) s += x[xr + i]! * w[wo + i]!;
      y[r * nOut + o] = relu && s < 0 ? 0 : s;
    }
  }
  return y;
}

/**
 * The default repository's ONNX models: model name → builder of its version-1 `model.onnx`. The
 * JavaScript models beside them (simple_identity, simple_string_dyna_sequence, repeat_int32,
 * custom_identity_int32, image_preprocess, image_postprocess, token_streamer) are committed files.
 */
export const DEFAULT_MODELS: Readonly<Record<string, () => Uint8Array>> = {
  simple: () => addSubModel('INT32', [16], true),
  add_sub: () => addSubModel('FP32', [16], true),
  simple_int8: () => addSubModel('INT8', [16], true),
  simple_string: simpleStringModel,
  image_classifier: imageClassifierModel,
  autocomplete_add: autocompleteAddModel,
  simple_sequence: () => simpleSequenceModel(),
  simple_dyna_sequence: () => simpleSequenceModel({ dyna: true }),
  simple_sequence_state: sequenceStateModel,
  mlp_batch: mlpBatchModel,
  // The llm backend's test model; its tokenizer.json and config.json are committed (llm-model.ts).
  tiny_gpt: () => decoderModel(),
  // The embedding backend's test model; its tokenizer and sentence-transformers files are committed (embedding-model.ts).
  tiny_embed: () => encoderModel(),
  // The classifier backend's cross-encoders and classifier; their tokenizer and config files are committed (cross-encoder-model.ts).
  ...CROSS_ENCODER_MODELS,
};

/**
 * The default repository's models that are whole generated folders rather than one model.onnx:
 * model name → writer of its version-1 folder (config.pbtxt stays committed).
 */
export const FOLDER_MODELS: Readonly<Record<string, (dir: string) => Promise<void>>> = {
  // The whisper backend's test model: onnx-community's layout, its tokenizer built on tiny_gpt's committed one (whisper-model.ts).
  whisper: (dir) => writeWhisperFolder(dir, join(packageRoot(), 'models', 'tiny_gpt', '1', 'tokenizer.json')),
};

/**
 * Writes `<repoDir>/<model>/1/model.onnx` for the default models (or just those in `only`). A full run
 * also deletes a `model.onnx` left beside a `model.js` by an earlier generation (a model that has
 * become JavaScript), so a stale ONNX file never passes for the model.
 */
export async function generateModels(
  repoDir: string, opts: { only?: string[]; log?: (s: string) => void } = {},
): Promise<void> {
  const names = opts.only ?? [...Object.keys(DEFAULT_MODELS), ...Object.keys(FOLDER_MODELS)];
  for (const name of names) {
    const folder = FOLDER_MODELS[name];
    if (folder) {
      const t0 = performance.now();
      await folder(join(repoDir, name, '1'));
      opts.log?.(`${name}/1/  ${(performance.now() - t0).toFixed(0)} ms`);
      continue;
    }
    const build = DEFAULT_MODELS[name];
    if (!build) throw new Error(`unknown default model '${name}' (known: ${[...Object.keys(DEFAULT_MODELS), ...Object.keys(FOLDER_MODELS)].join(', ')})`);
    const t0 = performance.now();
    const bytes = build();
    const dir = join(repoDir, name, '1');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'model.onnx'), bytes);
    opts.log?.(`${name}/1/model.onnx  ${bytes.byteLength} B  ${(performance.now() - t0).toFixed(0)} ms`);
  }
  if (!opts.only) await removeStaleOnnx(repoDir);
}

async function removeStaleOnnx(repoDir: string): Promise<void> {
  for (const entry of await readdir(repoDir, { withFileTypes: true })) {
    if (!entry.isDirectory() || entry.name in DEFAULT_MODELS || entry.name in FOLDER_MODELS) continue;
    const dir = join(repoDir, entry.name, '1');
    if (existsSync(join(dir, 'model.js')) && existsSync(join(dir, 'model.onnx'))) await rm(join(dir, 'model.onnx'));
  }
}

/** The package root: the first ancestor of this file's folder holding a package.json. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('gen-models: no package.json above the script');
    dir = parent;
  }
  return dir;
}

function isMain(): boolean {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  const t0 = performance.now();
  const repo = join(packageRoot(), 'models');
  await generateModels(repo, { log: (s) => console.log(s) });
  console.log(`generated ${Object.keys(DEFAULT_MODELS).length + Object.keys(FOLDER_MODELS).length} models in ${repo} (${(performance.now() - t0).toFixed(0)} ms)`);
}
