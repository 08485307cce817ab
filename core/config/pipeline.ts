/**
 * The model-configuration pipeline, as pure steps: parse (config.pbtxt or config.json) -> backend
 * auto-complete -> normalise defaults -> validate -> diff against the loaded config on reload. Every
 * step takes and returns plain ModelConfig objects (never mutating its input) and reports problems
 * as ConfigError with file, line, column and field path where they are known.
 *
 * The steps live in sibling modules (pbtxt.ts, json.ts, validate.ts,
 * model-io.ts, reflect.ts); this module is the one to import.
 */

import { modelConfigToJson, parseConfigJson } from './json.js';
import { cloneConfig } from './reflect.js';
import type { ModelConfig, ModelInstanceGroup } from './model-config.js';
import { parsePbtxt } from './pbtxt.js';

export { ConfigError, type ConfigErrorWhere, type SourcePos } from './reflect.js';
export { configJsonText, modelConfigToJson, modelConfigToProtoObject, parseConfigJson } from './json.js';
export { formatPbtxt, parsePbtxt } from './pbtxt.js';
export { validateModelConfig, type ValidateOptions } from './validate.js';
export {
  autoCompleteConfig, checkConfigAgainstModel, configTypeToDatatype, datatypeToConfigType, fullDims,
  ortTypeToConfigType, type AutoCompleteOptions,
} from './model-io.js';

/**
 * Parses a configuration by its file name: `*.json` as Triton's JSON form, anything else
 * (`config.pbtxt`, `configs/h100.txt`, no extension) as protobuf text format. Text starting with `{`
 * is JSON whatever the name says, since a text-format message cannot start with a brace; this
 * keeps labels such as `m/config.json (load override)` working.
 */
export function parseModelConfig(text: string, file: string): ModelConfig {
  const base = file.slice(Math.max(file.lastIndexOf('/'), file.lastIndexOf('\\')) + 1);
  const json = /\.json$/i.test(base) || /^\uFEFF?\s*\{/.test(text);
  return json ? parseConfigJson(text, file) : parsePbtxt(text, file);
}

export interface NormalizeOptions {
  /** The model's folder name, used when the config has no name. */
  modelName: string;
  /** GPUs this server may use, numbered 0..gpuCount-1. */
  gpuCount: number;
  /**
   * Accepted for symmetry with auto-complete, which is where Triton applies its default max batch
   * size; normalisation itself never changes max_batch_size.
   */
  defaultMaxBatchSize?: number;
}

const SEQUENCE_IDLE_DEFAULT_US = 1_000_000;
// Backends that get two CPU instances by default (Triton's SetDefaultInstanceCount).
const TWO_CPU_INSTANCE_BACKENDS = new Set(['onnxruntime', 'tensorflow']);

/**
 * Fills the defaults Triton fills (core NormalizeModelConfig, NormalizeInstanceGroup and the ONNX
 * part of AutoCompleteBackendFields). Deliberately *not* filled, as Triton does not fill them either
 * and they would then show in /config: a sequence strategy (absent means direct) and queue policies
 * (absent means the policy's zero values).
 */
export function normalizeModelConfig(cfg: ModelConfig, opts: NormalizeOptions): ModelConfig {
  const out = cloneConfig(cfg);
  if (!out.name) out.name = opts.modelName;

  if (!out.backend && (out.platform === 'onnxruntime_onnx' || out.default_model_filename === 'model.onnx')) {
    out.backend = 'onnxruntime';
  }
  if (out.backend === 'onnxruntime') {
    out.platform ||= 'onnxruntime_onnx';
    out.default_model_filename ||= 'model.onnx';
  }
  // Triton's AutoCompleteBackendFields names the Python file whether or not auto-complete is on.
  if (out.backend === 'python') out.default_model_filename ||= 'model.py';

  out.version_policy ??= { latest: { num_versions: 1 } };
  const mbs = out.max_batch_size ?? 0;
  const db = out.dynamic_batching;
  if (db && !(db.preferred_batch_size ?? []).length && mbs > 0) db.preferred_batch_size = [mbs];
  const sb = out.sequence_batching;
  if (sb) {
    if (!sb.max_sequence_idle_microseconds) sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US;
    if (sb.oldest && !(sb.oldest.preferred_batch_size ?? []).length && mbs > 0) sb.oldest.preferred_batch_size = [mbs];
  }

  if (!out.ensemble_scheduling) {
    const opt = (out.optimization ??= {});
    opt.input_pinned_memory ??= { enable: true };
    opt.output_pinned_memory ??= { enable: true };
    out.instance_group = normalizeInstanceGroups(out.instance_group ?? [], out.name, out.backend ?? '', opts.gpuCount);
  }
  return out;
}

function normalizeInstanceGroups(groups: ModelInstanceGroup[], model: string, backend: string, gpuCount: number): ModelInstanceGroup[] {
  // No group at all means one group named after the model (not `<model>_0`), as in Triton.
  const list = groups.length ? groups : [{ name: model }];
  const allGpus = Array.from({ length: Math.max(0, gpuCount) }, (_, i) => i);
  list.forEach((g, i) => {
    if (!g.name) g.name = `${model}_${i}`;
    let kind = g.kind ?? 'KIND_AUTO';
    if (kind === 'KIND_AUTO') {
      // As Triton: GPU unless a listed id is missing or there is no GPU. Device 0 counts as present
      // everywhere (validate.ts: a KIND_GPU instance without a GPU runs on the CPU provider), so a
      // group naming only it stays a GPU group on a laptop, as on the host it was written for.
      const listed = g.gpus ?? [];
      const listedMissing = listed.some((id) => id < 0 || id >= Math.max(gpuCount, 1));
      kind = listedMissing || (gpuCount <= 0 && !listed.length) ? 'KIND_CPU' : 'KIND_GPU';
    }
    g.kind = kind;
    if ((g.count ?? 0) < 1) g.count = kind === 'KIND_CPU' && TWO_CPU_INSTANCE_BACKENDS.has(backend) ? 2 : 1;
    if (kind === 'KIND_GPU' && !(g.gpus ?? []).length) g.gpus = [...allGpus];
  });
  return list;
}

/** JSON text with object keys sorted, so that equal configs compare equal whatever their key order. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * What a changed configuration needs when a loaded model is reloaded: nothing, an in-place update of
 * its instances (any change confined to `instance_group`, as Triton's ConfigChangeRequiresReload
 * allows: repository/instance-update.ts), or a full reload. Compared through the JSON form, so a
 * field written as its default equals an absent one (as protobuf compares them). Like Triton,
 * version_policy is ignored here: the repository re-derives the set of versions on every load and
 * loads or unloads versions on its own.
 */
export function configDiff(a: ModelConfig, b: ModelConfig): 'none' | 'instance_group' | 'full' {
  const ja = modelConfigToJson(a);
  const jb = modelConfigToJson(b);
  const rest = (j: Record<string, unknown>): string => {
    const { instance_group: _g, version_policy: _v, ...others } = j;
    return canonical(others);
  };
  if (rest(ja) !== rest(jb)) return 'full';
  return canonical(ja.instance_group) === canonical(jb.instance_group) ? 'none' : 'instance_group';
}
