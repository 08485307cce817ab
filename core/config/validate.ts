/**
 * Triton's checks of a normalised model configuration (core `model_config_utils.cc`
 * ValidateModelConfig, ValidateModelIOConfig, ValidateInstanceGroup and the configuration-only part
 * of the ensemble checks), with Triton's error texts: clients and operators grep for them. Each
 * failure is a ConfigError carrying the field path, and the file position when the config was
 * parsed from a file. Checks that need other models (ensemble steps against the composing models'
 * configs) belong to the repository, which sees all models.
 */

import { errorAt } from './reflect.js';
import type { ModelConfig, ModelInput, ModelOutput, SequenceControlKind } from './model-config.js';

export interface ValidateOptions {
  /** The model's folder name; the config's name must equal it. */
  modelName: string;
  /** When given, GPU ids listed by instance groups are checked against [0, gpuCount). */
  gpuCount?: number;
  /**
   * Where inputs and outputs are checked. Triton checks them before the folder name when
   * auto-complete is off ('first'), and otherwise once the backend has completed them, after the
   * instance groups ('last', the default); 'skip' leaves them for a later call on the completed config.
   */
  io?: 'first' | 'last' | 'skip';
}

const WILDCARD = -1;
const ENSEMBLE = 'ensemble';
const TENSORRT_PLAN = 'tensorrt_plan';

// Backends whose platform name Triton knows; any other backend accepts any platform.
const BACKEND_OF_PLATFORM: Record<string, string> = {
  tensorflow_graphdef: 'tensorflow', tensorflow_savedmodel: 'tensorflow', tensorrt_plan: 'tensorrt',
  onnxruntime_onnx: 'onnxruntime', pytorch_libtorch: 'pytorch', torch_aoti: 'pytorch_aoti',
};
const KNOWN_BACKENDS = new Set(Object.values(BACKEND_OF_PLATFORM));

/** Throws the first problem Triton would report for `cfg`; returns when the config is acceptable. */
export function validateModelConfig(cfg: ModelConfig, opts: ValidateOptions): void {
  const fail: Fail = (path, detail) => {
    throw errorAt(cfg, path, detail);
  };
  const name = cfg.name ?? '';
  if (!name) fail('name', "model configuration must specify 'name'");

  const platform = cfg.platform ?? '';
  const backend = cfg.backend ?? '';
  if (!backend && platform !== ENSEMBLE) fail('platform', `unexpected platform type '${platform}' for ${name}`);
  if (backend && platform === ENSEMBLE) {
    fail('backend', `Ensemble model '${name}' must have platform type '${platform}' and empty backend type`);
  }
  if (KNOWN_BACKENDS.has(backend) && BACKEND_OF_PLATFORM[platform] !== backend) {
    fail('platform', `unexpected 'platform' and 'backend' pair, got:${platform}, ${backend}`);
  }

  const mbs = cfg.max_batch_size ?? 0;
  if (mbs < 0) fail('max_batch_size', `'max_batch_size' must be non-negative value for ${name}`);
  if (!cfg.version_policy) fail('version_policy', `must specify 'version policy' for ${name}`);

  const db = cfg.dynamic_batching;
  if (db) {
    (db.preferred_batch_size ?? []).forEach((size, i) => {
      const at = `dynamic_batching.preferred_batch_size[${i}]`;
      if (size <= 0) fail(at, `dynamic batching preferred size must be positive for ${name}`);
      if (size > mbs) fail(at, `dynamic batching preferred size must be <= max batch size for ${name}`);
    });
    const levels = db.priority_levels ?? 0;
    if (levels !== 0) {
      const def = db.default_priority_level ?? 0;
      if (def === 0 || def > levels) {
        fail('dynamic_batching.default_priority_level', `default priority level must be in range [1, ${levels}] for ${name}`);
      }
      for (const key of Object.keys(db.priority_queue_policy ?? {})) {
        const level = Number(key);
        if (level === 0 || level > levels) {
          fail(`dynamic_batching.priority_queue_policy[${JSON.stringify(key)}]`,
            `priority queue policy must have priority level in range [1, ${levels}] for ${name}`);
        }
      }
    }
    if (db.preserve_ordering) {
      if (levels > 1) {
        fail('dynamic_batching.preserve_ordering', `Only one priority level is allowed when 'preserve_ordering' is true for ${name}`);
      }
      const policies = [['dynamic_batching.default_queue_policy', db.default_queue_policy] as const,
        ...Object.entries(db.priority_queue_policy ?? {}).map(([k, p]) => [`dynamic_batching.priority_queue_policy[${JSON.stringify(k)}]`, p] as const)];
      for (const [at, p] of policies) {
        if (p && (p.default_timeout_microseconds ?? 0) !== 0 && p.timeout_action === 'DELAY') {
          fail(at, `Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for ${name}`);
        }
      }
    }
  }

  const sb = cfg.sequence_batching;
  if (sb) {
    if (cfg.response_cache?.enable) {
      fail('response_cache.enable', `Response Cache does not currently support model ${name} with sequence batching scheduler. Please disable the response cache.`);
    }
    for (const kind of ['CONTROL_SEQUENCE_START', 'CONTROL_SEQUENCE_END', 'CONTROL_SEQUENCE_READY', 'CONTROL_SEQUENCE_CORRID'] as const) {
      checkSequenceControl(cfg, kind, fail);
    }
    (sb.oldest?.preferred_batch_size ?? []).forEach((size, i) => {
      const at = `sequence_batching.oldest.preferred_batch_size[${i}]`;
      if (size <= 0) fail(at, `sequence batching preferred batch size must be positive for ${name}`);
      if (size > mbs) fail(at, `sequence batching preferred batch size must be <= max batch size for ${name}`);
    });
    const util = sb.direct?.minimum_slot_utilization ?? 0;
    if (sb.direct && (util < 0 || util > 1)) {
      fail('sequence_batching.direct.minimum_slot_utilization', `sequence batching minimum slot utilization must be in range (0.0, 1.0] for ${name}`);
    }
  }

  if (cfg.ensemble_scheduling) validateEnsembleConfig(cfg, fail);
  else if (platform === ENSEMBLE) {
    fail('platform', `ensemble scheduling must be set for ensemble ${name} whose platform is ${ENSEMBLE}`);
  }

  if (cfg.model_transaction_policy?.decoupled && cfg.response_cache?.enable) {
    fail('response_cache.enable', `Response Cache does not currently support model ${name} with 'decoupled' transaction policy. Please disable the response cache.`);
  }
  validateMetrics(cfg, fail);
  // Triton's order: the config itself, then the folder name, then the instance groups (checked
  // before the backend looks for the model file), then inputs and outputs.
  const io = opts.io ?? 'last';
  if (io === 'first') validateIo(cfg, fail);
  if (name !== opts.modelName) {
    fail('name', `unexpected directory name '${opts.modelName}' for model '${name}', directory name must equal model name`);
  }
  validateInstanceGroups(cfg, opts, fail);
  if (io === 'last') validateIo(cfg, fail);
}

type Fail = (path: string, detail: string) => never;

/** Triton's GetBooleanSequenceControlProperties / GetTypedSequenceControlProperties checks. */
function checkSequenceControl(cfg: ModelConfig, kind: SequenceControlKind, fail: Fail): void {
  const name = cfg.name ?? '';
  const typed = kind === 'CONTROL_SEQUENCE_CORRID';
  const seenTensors = new Set<string>();
  let seen = false;
  (cfg.sequence_batching?.control_input ?? []).forEach((ci, i) => {
    const at = `sequence_batching.control_input[${i}]`;
    if (!ci.name) fail(at, `sequence batching control tensor must have a name for ${name}`);
    if (seenTensors.has(ci.name)) {
      fail(`${at}.name`, `sequence batching control tensor '${ci.name}' is specified for multiple control kinds for ${name}`);
    }
    seenTensors.add(ci.name);
    (ci.control ?? []).forEach((c, j) => {
      if ((c.kind ?? 'CONTROL_SEQUENCE_START') !== kind) return;
      const cat = `${at}.control[${j}]`;
      if (seen) fail(cat, `sequence batching specifies multiple ${kind} tensors for ${name}`);
      seen = true;
      const sizes = [c.int32_false_true?.length ?? 0, c.fp32_false_true?.length ?? 0, c.bool_false_true?.length ?? 0];
      const given = sizes.filter((n) => n > 0).length;
      if (typed) {
        if (given > 0) {
          fail(cat, `sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kind} for ${name}`);
        }
        const dt = c.data_type ?? 'TYPE_INVALID';
        if (!['TYPE_UINT64', 'TYPE_INT64', 'TYPE_UINT32', 'TYPE_INT32', 'TYPE_STRING'].includes(dt)) {
          fail(`${cat}.data_type`, `unexpected data type for control ${kind} for ${name}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING`);
        }
        return;
      }
      if (given === 0) {
        fail(cat, `sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kind} for ${name}`);
      }
      if (given > 1) {
        fail(cat, `sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for ${kind} for ${name}`);
      }
      const which = sizes[0] ? 'int32_false_true' : sizes[1] ? 'fp32_false_true' : 'bool_false_true';
      if (sizes[0] + sizes[1] + sizes[2] !== 2) {
        fail(`${cat}.${which}`, `sequence batching control '${which}' must have exactly 2 entries for ${kind} for ${name}`);
      }
    });
  });
}

/** The configuration-only part of Triton's ValidateEnsembleSchedulingConfig (data flow included). */
function validateEnsembleConfig(cfg: ModelConfig, fail: Fail): void {
  const name = cfg.name ?? '';
  if (cfg.platform !== ENSEMBLE) {
    fail('ensemble_scheduling', `ensemble scheduling cannot be set for model '${name}' whose platform is not ${ENSEMBLE}`);
  }
  if ((cfg.instance_group ?? []).length) fail('instance_group', `instance group should not be specified for ensemble '${name}'`);
  if (cfg.optimization) fail('optimization', `optimization should not be specified for ensemble '${name}'`);
  if ((cfg.model_warmup ?? []).length) fail('model_warmup', `model_warmup can not be specified for ensemble '${name}'`);
  const steps = cfg.ensemble_scheduling?.step ?? [];
  if (!steps.length) fail('ensemble_scheduling', `must specify 'step' for ensemble '${name}'`);

  // Ensemble tensors as a graph: each step's outputs depend on all of its inputs.
  interface Node { name: string; isOutput: boolean; ready: boolean; prev: Node[]; next: Node[] }
  const tensors = new Map<string, Node>();
  const node = (t: string): Node => {
    let n = tensors.get(t);
    if (!n) tensors.set(t, (n = { name: t, isOutput: false, ready: false, prev: [], next: [] }));
    return n;
  };
  steps.forEach((step, idx) => {
    const at = `ensemble_scheduling.step[${idx}]`;
    if (!step.model_name) fail(at, `must specify 'model_name' in step ${idx} of ensemble '${name}'`);
    const inputs = Object.values(step.input_map ?? {});
    const outputs = Object.values(step.output_map ?? {});
    if (!inputs.length) fail(at, `must specify 'input_map' in step ${idx} of ensemble '${name}'`);
    if (!outputs.length) fail(at, `must specify 'output_map' in step ${idx} of ensemble '${name}'`);
    const produced = outputs.map((t) => {
      const n = node(t);
      if (n.isOutput) fail(`${at}.output_map`, `ensemble tensor '${t}' can appear in an output map only once for ensemble '${name}' step ${idx}`);
      n.isOutput = true;
      return n;
    });
    for (const t of inputs) {
      const n = node(t);
      for (const out of produced) {
        out.prev.push(n);
        n.next.push(out);
      }
    }
  });
  const queue: Node[] = [];
  (cfg.input ?? []).forEach((io, i) => {
    const n = tensors.get(io.name ?? '');
    if (!n) fail(`input[${i}]`, `ensemble input '${io.name}' for ensemble ${name}' is not used`);
    n.ready = true;
    queue.push(n);
  });
  for (let n = queue.shift(); n; n = queue.shift()) {
    for (const next of n.next) {
      if (!next.ready && next.prev.every((p) => p.ready)) {
        next.ready = true;
        queue.push(next);
      }
    }
  }
  const outputs = new Set<string>();
  (cfg.output ?? []).forEach((io, i) => {
    const t = io.name ?? '';
    const n = tensors.get(t);
    if (!n) fail(`output[${i}]`, `ensemble output '${t}' for ensemble ${name}' is not used`);
    if (!n.ready) {
      // Walk back to an unconnected source to say which tensor breaks the flow.
      let last = t;
      let prev = n.prev;
      const seenNames = new Set<string>();
      for (;;) {
        const src = prev.find((p) => !p.ready && !seenNames.has(p.name));
        if (!src) break;
        last = src.name;
        seenNames.add(last);
        prev = src.prev;
      }
      const tail = last !== t ? `: at least one of its depending tensors, '${last}', is not connected` : '';
      fail(`output[${i}]`, `output '${t}' for ensemble '${name}' is not written${tail}`);
    }
    outputs.add(t);
  });
  for (const [t, n] of tensors) {
    if (outputs.has(t)) continue;
    if (!n.ready || n.next.length === 0) fail('ensemble_scheduling', `ensemble tensor '${t}' is unused in ensemble '${name}'`);
  }
}

function validateMetrics(cfg: ModelConfig, fail: Fail): void {
  const controls = ((cfg.model_metrics as { metric_control?: unknown[] } | undefined)?.metric_control ?? []) as {
    metric_identifier?: { family?: string }; histogram_options?: { buckets?: number[] };
  }[];
  controls.forEach((c, i) => {
    const at = `model_metrics.metric_control[${i}]`;
    if (!c.metric_identifier) fail(at, "metric control must specify 'metric_identifier'");
    if (!c.metric_identifier.family) fail(`${at}.metric_identifier`, "metric identifier must specify non-empty 'family'");
    if (!c.histogram_options) fail(at, "metric control must specify 'histogram_options'");
    if (!(c.histogram_options.buckets ?? []).length) fail(`${at}.histogram_options`, "histogram options must specify non-empty 'buckets'");
  });
}

/** Element count as Triton computes it: 0 for no dims, -1 when any dim is variable. */
function elementCount(dims: readonly number[]): number {
  let cnt = 0;
  for (const d of dims) {
    if (d === WILDCARD) return WILDCARD;
    cnt = cnt === 0 ? d : cnt * d;
  }
  return cnt;
}

/** Triton's ValidateIOShape plus the per-kind input/output rules, messages suffixed "for <m>". */
function validateTensor(cfg: ModelConfig, io: ModelInput | ModelOutput, isInput: boolean, at: string, fail: Fail): void {
  const name = cfg.name ?? '';
  const mbs = cfg.max_batch_size ?? 0;
  const kind = isInput ? 'model input ' : 'model output ';
  const f: Fail = (path, detail) => fail(path, `${detail} for ${name}`);
  if (!io.name) f(at, `${kind}must specify 'name'`);
  const prefix = `${kind}'${io.name}' `;
  if ((io.data_type ?? 'TYPE_INVALID') === 'TYPE_INVALID') f(`${at}.data_type`, `${prefix}must specify 'data_type'`);
  const dims = io.dims ?? [];
  if (!dims.length) f(`${at}.dims`, `${prefix}must specify 'dims'`);
  const shape = io.reshape?.shape;
  if (io.reshape && !(shape ?? []).length && mbs === 0) {
    f(`${at}.reshape`, `${prefix}cannot have empty reshape for non-batching model as scalar tensors are not supported`);
  }
  dims.forEach((d, i) => {
    if (d < 1 && d !== WILDCARD) {
      f(`${at}.dims[${i}]`, `${prefix}dimension must be integer >= 1, or ${WILDCARD} to indicate a variable-size dimension`);
    }
  });
  if (io.reshape) {
    const rs = shape ?? [];
    rs.forEach((d, i) => {
      if (d < 1 && d !== WILDCARD) {
        f(`${at}.reshape.shape[${i}]`, `${prefix}reshape dimensions must be integer >= 1, or ${WILDCARD} to indicate a variable-size dimension`);
      }
    });
    const dimsSize = elementCount(dims);
    const reshapeSize = elementCount(rs);
    if (dimsSize !== reshapeSize && (reshapeSize !== 0 || dimsSize !== 1)) f(`${at}.reshape`, `${prefix}has different size for dims and reshape`);
    if (dimsSize === WILDCARD) {
      // Compare the runs of fixed dims between variable ones, e.g. [2,4,-1,6] vs [8,-1,1,6].
      const runs = (ds: readonly number[]): number[] => {
        const out: number[] = [];
        let cur = 1;
        for (const d of ds) {
          if (d === WILDCARD) {
            out.push(cur);
            cur = 1;
          } else {
            cur *= d;
          }
        }
        out.push(cur);
        return out;
      };
      const a = runs(dims);
      const b = runs(rs);
      if (a.length !== b.length) f(`${at}.reshape`, `${prefix}has different number of variable-size dimensions for dims and reshape`);
      if (a.some((v, i) => v !== b[i])) f(`${at}.reshape`, `${prefix}has different size for dims and reshape`);
    }
  }
  if (isInput) {
    const fmt = (io as ModelInput).format ?? 'FORMAT_NONE';
    if (fmt !== 'FORMAT_NONE' && dims.length !== 3) f(`${at}.format`, 'model input NHWC/NCHW require 3 dims');
  }
  if (cfg.platform !== TENSORRT_PLAN && io.is_shape_tensor) f(`${at}.is_shape_tensor`, 'shape tensors are only supported for TensorRT platform');
  if (io.is_non_linear_format_io) {
    if (cfg.platform !== TENSORRT_PLAN) f(`${at}.is_non_linear_format_io`, 'Non-linear IO format is only supported for the TensorRT platform');
    if (dims.length !== 3) f(`${at}.dims`, `Non-linear IO format ${isInput ? 'input' : 'output'} requires 3 dims`);
  }
}

function validateIo(cfg: ModelConfig, fail: Fail): void {
  const name = cfg.name ?? '';
  for (const [list, isInput] of [[cfg.input ?? [], true], [cfg.output ?? [], false]] as const) {
    const key = isInput ? 'input' : 'output';
    const seen = new Set<string>();
    list.forEach((io, i) => {
      validateTensor(cfg, io, isInput, `${key}[${i}]`, fail);
      if (seen.has(io.name!)) fail(`${key}[${i}].name`, `model ${key} '${io.name}' is specified more than once for ${name}`);
      seen.add(io.name!);
    });
  }
  const inputs = new Set((cfg.input ?? []).map((io) => io.name));
  const outputs = new Set((cfg.output ?? []).map((io) => io.name));
  const f: Fail = (path, detail) => fail(path, `${detail} for ${name}`);
  (cfg.batch_input ?? []).forEach((bi, i) => {
    const at = `batch_input[${i}]`;
    const kind = bi.kind ?? 'BATCH_ELEMENT_COUNT';
    const n = (bi.source_input ?? []).length;
    if (n !== 1) f(`${at}.source_input`, `batch input kind '${kind}' expects 1 source input, got ${n}`);
    if (bi.data_type !== 'TYPE_INT32' && bi.data_type !== 'TYPE_FP32') f(`${at}.data_type`, 'batch input data type must be TYPE_INT32 or TYPE_FP32');
    for (const src of bi.source_input ?? []) if (!inputs.has(src)) f(`${at}.source_input`, `unknown source input name '${src}'`);
  });
  (cfg.batch_output ?? []).forEach((bo, i) => {
    const at = `batch_output[${i}]`;
    const n = (bo.source_input ?? []).length;
    if (n !== 1) f(`${at}.source_input`, `batch output kind '${bo.kind ?? 'BATCH_SCATTER_WITH_INPUT_SHAPE'}' expects 1 source input, got ${n}`);
    for (const src of bo.source_input ?? []) if (!inputs.has(src)) f(`${at}.source_input`, `unknown source input name '${src}'`);
    const targets = new Set<string>();
    for (const t of bo.target_name ?? []) {
      if (!outputs.has(t)) f(`${at}.target_name`, `unknown target output name '${t}'`);
      if (targets.has(t)) f(`${at}.target_name`, `target output name '${t}' can only be specified once`);
      targets.add(t);
    }
  });
}

/** Triton's default --min-supported-compute-capability (6.0), printed as its messages print it. */
const MIN_COMPUTE_CAPABILITY = '6.000000';

function validateInstanceGroups(cfg: ModelConfig, opts: ValidateOptions, fail: Fail): void {
  if (cfg.ensemble_scheduling) return;
  const name = cfg.name ?? '';
  const groups = cfg.instance_group ?? [];
  if (!groups.length) fail('instance_group', `must specify one or more 'instance group's for ${name}`);
  groups.forEach((g, i) => {
    const at = `instance_group[${i}]`;
    const prefix = `instance group ${g.name ?? ''} of model ${name}`;
    const gpus = g.gpus ?? [];
    const kind = g.kind ?? 'KIND_AUTO';
    if ((kind === 'KIND_MODEL' || kind === 'KIND_CPU') && gpus.length) {
      fail(`${at}.gpus`, `${prefix} has kind ${kind} but specifies one or more GPUs`);
    } else if (kind === 'KIND_GPU') {
      // Unlike Triton, tsi does not refuse a KIND_GPU group on a machine without GPUs: the backend
      // falls back to the CPU provider (or WebGPU's adapter) and logs it, so one repository runs on
      // laptops and GPU hosts. Device 0 is therefore always there; any other id must be a GPU this
      // machine has (a negative one names none anywhere), refused with Triton's text otherwise.
      const count = opts.gpuCount;
      const bad = gpus.find((id) => id < 0 || (count !== undefined && id >= Math.max(count, 1)));
      if (bad !== undefined) {
        const avail = Array.from({ length: count ?? 0 }, (_, k) => k).join(', ');
        fail(`${at}.gpus`, `${prefix} specifies invalid or unsupported gpu id ${bad}. GPUs with at least the minimum required CUDA compute compatibility of ${MIN_COMPUTE_CAPABILITY} are: ${avail}`);
      }
      if (!gpus.length && count !== 0) fail(`${at}.gpus`, `${prefix} has kind KIND_GPU but specifies no GPUs`);
    } else if (kind === 'KIND_AUTO') {
      fail(`${at}.kind`, `${prefix} has unexpected kind KIND_AUTO`);
    }
    if (cfg.platform !== TENSORRT_PLAN && (g.profile ?? []).length) {
      fail(`${at}.profile`, `${prefix} and platform ${cfg.platform ?? ''}specifies profile field which is only supported for TensorRT models`);
    }
  });
}
