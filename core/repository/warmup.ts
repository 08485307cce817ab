/**
 * `model_warmup`: sample requests a model version runs on every instance before it is READY, as
 * Triton does, so the first client does not pay for lazy initialisation (on a GPU: shader or kernel
 * compilation, memory pools). A sample of `batch_size` N is N requests of batch 1 handed to the
 * instance as one batch, `count` times (at least once); its inputs are zeros, random values, or the
 * bytes of a file in the model's `warmup/` folder. A failing sample fails the load with Triton's text
 * ("failed to run warmup sample '<name>': ..."), so the model is UNAVAILABLE with the reason.
 */

import type { BackendInstance, BackendRequest, ModelFiles, ResponsePayload } from '../backend.js';
import { configTypeToDatatype } from '../config/pipeline.js';
import { TsiError, asTsiError } from '../errors.js';
import type { ModelConfig, ModelWarmup } from '../config/model-config.js';
import { allocate, decodeBytesElements, elementCount, elementSize, fromBytes } from '../tensor.js';
import type { DataType, Logger, NumericArray, Tensor, TensorData } from '../types.js';

/** The folder, inside the model's, where `input_data_file` names are looked up (Triton's kWarmupDataFolder). */
export const WARMUP_FOLDER = 'warmup';

interface Sample {
  name: string;
  iterations: number;
  /** One request's inputs; the sample's batch is `batchSize` such requests. */
  inputs: Tensor[];
  batchSize: number;
}

/** Builds every sample of the config (reading input files once); throws INVALID_ARG for bad settings. */
export async function warmupSamples(config: ModelConfig, files: ModelFiles, log: Logger): Promise<Sample[]> {
  const batching = (config.max_batch_size ?? 0) > 0;
  const out: Sample[] = [];
  for (const [k, w] of (config.model_warmup ?? []).entries()) {
    const name = w.name || `sample ${k}`;
    const batchSize = w.batch_size ?? 0;
    if (batchSize === 0) {
      log.verbose(1, `model '${config.name}': skipping batch 0 warmup sample '${name}'`);
      continue;
    }
    if (!batching && batchSize > 1) {
      throw new TsiError('INVALID_ARG', `warmup sample '${name}' of model '${config.name}' has batch_size ${batchSize}, but the model does not batch (max_batch_size 0)`);
    }
    const inputs: Tensor[] = [];
    for (const [input, spec] of Object.entries(w.inputs ?? {})) {
      // Every input of a sample gets the batch dimension, control and state tensors too: the model
      // takes them batched (Triton's L0_warmup names a sequence model's START and READY as [1]).
      inputs.push(await sampleInput(config, name, input, spec, files, batching));
    }
    out.push({ name, iterations: Math.max(1, w.count ?? 0), inputs, batchSize });
  }
  return out;
}

type InputSpec = NonNullable<ModelWarmup['inputs']>[string];

async function sampleInput(
  config: ModelConfig, sample: string, name: string, spec: InputSpec, files: ModelFiles, addBatchDim: boolean,
): Promise<Tensor> {
  const dims = spec.dims ?? [];
  if (dims.some((d) => d < 0)) {
    throw new TsiError('INVALID_ARG', `warmup setting expects all variable-size dimensions are specified for input '${name}'`);
  }
  if (!spec.data_type || spec.data_type === 'TYPE_INVALID') {
    throw new TsiError('INVALID_ARG', `warmup sample '${sample}' of model '${config.name}': input '${name}' has no data_type`);
  }
  const datatype = configTypeToDatatype(spec.data_type);
  const shape = addBatchDim ? [1, ...dims] : [...dims];
  const count = elementCount(dims);
  let data: TensorData;
  if (spec.input_data_file !== undefined && spec.input_data_file !== '') {
    const file = `${WARMUP_FOLDER}/${spec.input_data_file}`;
    if (spec.input_data_file.split(/[\\/]/).includes('..')) {
      throw new TsiError('INVALID_ARG', `warmup sample '${sample}' of model '${config.name}': input_data_file '${spec.input_data_file}' must stay inside the model's ${WARMUP_FOLDER}/ folder`);
    }
    if (!(await files.exists(file))) {
      throw new TsiError('INVALID_ARG', `warmup sample '${sample}' of model '${config.name}': input_data_file '${file}' not found in the model's folder`);
    }
    const bytes = await files.read(file);
    if (datatype === 'BYTES') {
      data = decodeBytesElements(bytes);
      if (data.length !== count) {
        throw new TsiError('INVALID_ARG', `warmup sample '${sample}' of model '${config.name}': ${file} holds ${data.length} length-prefixed BYTES elements, input '${name}' needs ${count}`);
      }
    } else {
      const need = count * elementSize(datatype);
      if (bytes.byteLength < need) {
        throw new TsiError('INVALID_ARG', `warmup setting expects ${need} bytes, but the data provided from ${spec.input_data_file} only has ${bytes.byteLength} bytes`);
      }
      data = fromBytes(datatype, bytes.slice(0, need), count);
    }
  } else if (spec.random_data !== undefined) {
    // The oneof's case decides, not its value: L0_warmup's sample says `zero_data: false`, which
    // Triton (input_data_type_case() == kZeroData) warms up with zeros.
    data = randomData(datatype, count);
  } else if (spec.zero_data !== undefined) {
    data = allocate(datatype, count);
  } else {
    throw new TsiError('INVALID_ARG', `warmup setting expects input '${name}' to have input_data_type set`);
  }
  return { name, datatype, shape, data };
}

/**
 * Random values: uniform in [-1, 1) for floating point (Triton uses raw random bytes, which can make
 * NaNs that some kernels take slow paths on), random bytes for integers, 0/1 for BOOL, and empty
 * strings for BYTES (as Triton, which uses zeros there).
 */
function randomData(dt: DataType, count: number): TensorData {
  const data = allocate(dt, count);
  if (dt === 'BYTES') return data;
  if (dt === 'FP32' || dt === 'FP64') {
    const a = data as Float32Array | Float64Array;
    for (let i = 0; i < count; i++) a[i] = Math.random() * 2 - 1;
    return data;
  }
  if (dt === 'BOOL') {
    const a = data as Uint8Array;
    for (let i = 0; i < count; i++) a[i] = Math.random() < 0.5 ? 0 : 1;
    return data;
  }
  // FP16/BF16 bit patterns of small numbers: a sign, exponent < 15 and random mantissa.
  const d = data as NumericArray;
  const bytes = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (Math.random() * 256) | 0;
  if (dt === 'FP16' || dt === 'BF16') {
    const a = data as Uint16Array;
    const expMask = dt === 'FP16' ? 0x3800 : 0x3f00;
    for (let i = 0; i < count; i++) a[i] = (a[i]! & (dt === 'FP16' ? 0x83ff : 0x807f)) | expMask;
  }
  return data;
}

/** One warmup request: it only records whether the instance answered it with an error. */
class WarmupRequest implements BackendRequest {
  readonly parameters = {};
  readonly batchSize = 1;
  readonly inputs: Map<string, Tensor>;
  error?: TsiError;
  finished = false;
  done!: Promise<void>;
  private finish!: () => void;

  constructor(readonly id: string, inputs: Tensor[], readonly requestedOutputs: string[]) {
    // Every request gets its own arrays: backends may take (transfer) what they are given.
    this.inputs = new Map(inputs.map((t) => [t.name, { ...t, data: copyData(t.data) }]));
    this.done = new Promise<void>((r) => (this.finish = r));
  }

  send(response: ResponsePayload | TsiError, final: boolean): void {
    if (this.finished) return;
    if (response instanceof TsiError) this.error ??= response;
    if (final) {
      this.finished = true;
      this.finish();
    }
  }
}

function copyData(d: TensorData): TensorData {
  return Array.isArray(d) ? d.map((e) => e.slice()) : (d as NumericArray).slice();
}

/**
 * Runs every sample on `instance`, one batch at a time. Resolves when all answered; throws
 * INVALID_ARG naming the sample and the errors as soon as one fails.
 */
export async function warmUpInstance(config: ModelConfig, instance: BackendInstance, samples: Sample[], log: Logger): Promise<void> {
  const outputs = (config.output ?? []).map((o) => o.name!);
  const decoupled = config.model_transaction_policy?.decoupled === true;
  for (const s of samples) {
    for (let it = 1; it <= s.iterations; it++) {
      log.verbose(1, `model '${config.name}' instance ${instance.spec.name} is running warmup sample '${s.name}' for iteration ${it}`);
      const requests = Array.from({ length: s.batchSize }, (_, i) => new WarmupRequest(`warmup_${s.name}_${i}`, s.inputs, outputs));
      try {
        await instance.execute(requests);
        // A decoupled model may answer after execute returns; any other must have answered by now.
        if (!decoupled) {
          for (const r of requests) if (!r.finished) r.send(new TsiError('INTERNAL', `model '${config.name}' returned no response for a warmup request`), true);
        }
        await Promise.all(requests.map((r) => r.done));
      } catch (err) {
        throw new TsiError('INVALID_ARG', `failed to run warmup sample '${s.name}': ${asTsiError(err).message}; `);
      }
      const errors = requests.filter((r) => r.error).map((r) => r.error!.message);
      if (errors.length > 0) {
        throw new TsiError('INVALID_ARG', `failed to run warmup sample '${s.name}': ${[...new Set(errors)].join('; ')}; `);
      }
    }
  }
}
