/**
 * Helpers for the GPU tests: whether this machine has a WebGPU adapter (Dawn on a real GPU, or Mesa's
 * lavapipe software Vulkan device that CI installs), a copy of a default-repository model re-configured
 * for KIND_GPU, deterministic inputs built from a model's metadata, and the comparison the GPU tests
 * hold outputs to (integers and strings exact, floats within 1e-5 absolute + 1e-4 relative).
 */

import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { modelConfigToJson, parseModelConfig, type ModelConfig } from '../../core/index.js';
import { probeWebGpu, type WebGpuProbe } from '../../runtime-node/gpu/index.js';
import type { InferInputSpec } from '../../client/index.js';
import { mulberry32 } from '../../graph/onnx-builder.js';
import { MODELS } from './server.js';

// Mesa prints an error line on every start without one.
process.env.XDG_RUNTIME_DIR ??= '/tmp';

/** The adapter probe, and why there is no adapter (undefined when there is one), for describeWith. */
export async function webgpuProbe(): Promise<{ probe: WebGpuProbe; missing: string | undefined }> {
  const probe = await probeWebGpu();
  return { probe, missing: probe.adapters.length > 0 ? undefined : probe.reason ?? 'no adapter' };
}

/** Default-repository models served by onnxruntime (the ones a KIND_GPU instance can put on a GPU). */
export function onnxModels(): string[] {
  return ['add_sub', 'autocomplete_add', 'image_classifier', 'mlp_batch', 'simple', 'simple_dyna_sequence', 'simple_int8', 'simple_sequence', 'simple_sequence_state', 'simple_string']
    .filter((m) => existsSync(join(MODELS, m, '1', 'model.onnx')));
}

/**
 * Copies `models/<model>` into `repo` as `<as>` with its config rewritten (as config.json, which
 * tsi reads like Triton): `edit` gets the parsed config (empty for auto-completed models).
 */
export function copyModel(repo: string, model: string, as: string, edit: (c: ModelConfig) => ModelConfig): void {
  const dest = join(repo, as);
  cpSync(join(MODELS, model), dest, { recursive: true });
  const pbtxt = join(dest, 'config.pbtxt');
  let config: ModelConfig = {};
  if (existsSync(pbtxt)) {
    config = parseModelConfig(readFileSync(pbtxt, 'utf8'), pbtxt);
    rmSync(pbtxt);
  }
  const out = edit({ ...config, name: as });
  writeFileSync(join(dest, 'config.json'), JSON.stringify(modelConfigToJson(out), null, 2));
}

/** The config a KIND_GPU copy gets: two GPU instances, and dynamic batching where the model batches. */
export function gpuVariant(count = 2) {
  return (c: ModelConfig): ModelConfig => {
    const out: ModelConfig = { ...c, instance_group: [{ kind: 'KIND_GPU', count }] };
    if ((c.max_batch_size ?? 0) > 0 && !c.sequence_batching && !c.dynamic_batching) out.dynamic_batching = {};
    return out;
  };
}

interface IoMeta { name: string; datatype: string; shape: number[] }

/** Deterministic inputs for a model's metadata: `rows` in the batch dimension, 3 in other variable ones. */
export function inputsFor(meta: { inputs: IoMeta[] }, batching: boolean, rows: number, seed: number): InferInputSpec[] {
  const rnd = mulberry32(seed);
  return meta.inputs.map((io) => {
    const shape = io.shape.map((d, i) => (d >= 0 ? d : i === 0 && batching ? rows : 3));
    const n = shape.reduce((a, b) => a * b, 1);
    const ints = () => Array.from({ length: n }, () => Math.floor(rnd() * 200) - 100);
    let data: InferInputSpec['data'];
    switch (io.datatype) {
      case 'FP32': data = Float32Array.from({ length: n }, () => rnd() * 2 - 1); break;
      case 'FP64': data = Float64Array.from({ length: n }, () => rnd() * 2 - 1); break;
      case 'INT32': data = Int32Array.from(ints()); break;
      case 'INT64': data = BigInt64Array.from(ints().map(BigInt)); break;
      case 'INT8': data = Int8Array.from(ints()); break;
      case 'UINT8': data = Uint8Array.from(ints().map((v) => v + 100)); break;
      case 'BYTES': data = ints().map(String); break;
      default: throw new Error(`no test data for ${io.datatype} (input '${io.name}')`);
    }
    return { name: io.name, datatype: io.datatype as InferInputSpec['datatype'], shape, data };
  });
}

type Out = { name: string; datatype: string; shape: readonly number[]; data: unknown };

/** Why two outputs differ beyond the tolerance (undefined when they agree). */
export function outputMismatch(gpu: Out, cpu: Out): string | undefined {
  if (gpu.datatype !== cpu.datatype) return `${gpu.name}: datatype ${gpu.datatype} vs ${cpu.datatype}`;
  if (String(gpu.shape) !== String(cpu.shape)) return `${gpu.name}: shape [${gpu.shape}] vs [${cpu.shape}]`;
  const a = gpu.data as ArrayLike<unknown>;
  const b = cpu.data as ArrayLike<unknown>;
  if (a.length !== b.length) return `${gpu.name}: ${a.length} vs ${b.length} elements`;
  const float = gpu.datatype === 'FP32' || gpu.datatype === 'FP64' || gpu.datatype === 'FP16';
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x instanceof Uint8Array && y instanceof Uint8Array) {
      if (Buffer.compare(x, y) !== 0) return `${gpu.name}[${i}]: bytes differ`;
    } else if (float) {
      const fx = Number(x);
      const fy = Number(y);
      if (!(Math.abs(fx - fy) <= 1e-5 + 1e-4 * Math.abs(fy))) return `${gpu.name}[${i}]: ${fx} vs ${fy}`;
    } else if (x !== y) return `${gpu.name}[${i}]: ${String(x)} vs ${String(y)}`;
  }
  return undefined;
}

/** Runs `tsi-node doctor --json` from the sources (under tsx) with extra environment; its report. */
export async function doctorJson(env: Record<string, string> = {}): Promise<import('../../runtime-node/doctor.js').DoctorReport> {
  const { execFile } = await import('node:child_process');
  const cli = join(MODELS, '..', 'runtime-node', 'cli.ts');
  const code = `import(${JSON.stringify(cli)}).then((m) => m.main(['node', 'tsi-node', 'doctor', '--json']))`;
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', '-e', code], { env: { ...process.env, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`doctor failed: ${err.message}\n${stderr}`));
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`doctor printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}
