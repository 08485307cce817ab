import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { ModelIoInfo } from '../../core/backend.js';
import {
  autoCompleteConfig, checkConfigAgainstModel, ConfigError, configDiff, configTypeToDatatype,
  datatypeToConfigType, fullDims, modelConfigToJson, normalizeModelConfig, ortTypeToConfigType,
  parseModelConfig, parsePbtxt, validateModelConfig,
} from '../../core/config/pipeline.js';
import type { ConfigDataType, ModelConfig } from '../../core/config/model-config.js';
import { modelConfigSchema } from '../../core/config/model-config-schema.js';
import { generateSchemaModule, protoPath, schemaModulePath } from '../../scripts/gen-config-schema.js';

function thrown(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

const pb = (text: string): ModelConfig => parseModelConfig(text, 'config.pbtxt');

/** Parse -> normalise -> validate, as the repository will. */
function load(text: string, modelName: string, gpuCount = 0): ModelConfig {
  const cfg = normalizeModelConfig(pb(text), { modelName, gpuCount });
  validateModelConfig(cfg, { modelName, gpuCount });
  return cfg;
}

describe('proto/model_config.proto and its generated schema', () => {
  it('matches the committed core/config/model-config-schema.ts', () => {
    const regenerated = generateSchemaModule(readFileSync(protoPath, 'utf8'));
    expect(regenerated).toBe(readFileSync(schemaModulePath, 'utf8'));
  });

  it("keeps Triton's field numbers and enum values", () => {
    const ns = modelConfigSchema.nested.inference.nested;
    const f = ns.ModelConfig.fields;
    expect([f.name.id, f.backend.id, f.runtime.id, f.version_policy.id, f.max_batch_size.id]).toEqual([1, 17, 25, 3, 4]);
    expect([f.dynamic_batching.id, f.sequence_batching.id, f.ensemble_scheduling.id]).toEqual([11, 13, 15]);
    expect([f.instance_group.id, f.parameters.id, f.model_warmup.id, f.response_cache.id, f.model_metrics.id]).toEqual([7, 14, 16, 24, 26]);
    expect(ns.ModelConfig.oneofs.scheduling_choice.oneof).toEqual(['dynamic_batching', 'sequence_batching', 'ensemble_scheduling']);
    expect(ns.ModelOutput.fields.label_filename.id).toBe(4);
    expect(ns.ModelInstanceGroup.fields.kind.id).toBe(4);
    expect(ns.ModelEnsembling.fields.max_inflight_requests.id).toBe(2);
    expect(ns.ModelSequenceBatching.nested.Control.fields.bool_false_true.id).toBe(5);
    expect(ns.DataType.values.TYPE_STRING).toBe(13);
    expect(ns.DataType.values.TYPE_BF16).toBe(14);
    expect(ns.ModelDynamicBatching.fields.priority_queue_policy).toEqual({ keyType: 'uint64', type: 'ModelQueuePolicy', id: 7 });
  });
});

describe('parseModelConfig', () => {
  it('picks the format from the file name', () => {
    const text = 'name: "m" max_batch_size: 2';
    for (const file of ['config.pbtxt', 'configs/h100.txt', 'config']) {
      expect(parseModelConfig(text, file)).toEqual({ name: 'm', max_batch_size: 2 });
    }
    expect(parseModelConfig('{"name": "m", "max_batch_size": 2}', 'models/m/config.json')).toEqual({ name: 'm', max_batch_size: 2 });
    expect(parseModelConfig(' {"name": "m"}', 'm/config.json (load override)')).toEqual({ name: 'm' });
  });

  it("reads Triton's JSON form: both name spellings, enums by name or number, int64 as strings, null as unset", () => {
    const cfg = parseModelConfig(JSON.stringify({
      name: 'm',
      maxBatchSize: 8,
      input: [{ name: 'x', dataType: 'TYPE_FP32', dims: ['-1', 16] }, { name: 'y', data_type: 8, dims: [1], reshape: null }],
      dynamic_batching: {
        preferredBatchSize: [4],
        max_queue_delay_microseconds: '100',
        priority_levels: 2,
        default_priority_level: 1,
        priority_queue_policy: { 2: { timeout_action: 'delay', max_queue_size: 3 } },
      },
      instance_group: [{ kind: 'kind_cpu', count: 2 }],
      parameters: { threads: { string_value: '4' } },
      sequence_batching: null,
    }), 'config.json');
    expect(cfg).toEqual({
      name: 'm',
      max_batch_size: 8,
      input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [-1, 16] }, { name: 'y', data_type: 'TYPE_INT32', dims: [1] }],
      dynamic_batching: {
        preferred_batch_size: [4],
        max_queue_delay_microseconds: 100,
        priority_levels: 2,
        default_priority_level: 1,
        priority_queue_policy: { '2': { timeout_action: 'DELAY', max_queue_size: 3 } },
      },
      instance_group: [{ kind: 'KIND_CPU', count: 2 }],
      parameters: { threads: { string_value: '4' } },
    });
  });

  it('reports JSON errors with line, column and field path', () => {
    const text = '{\n  "name": "m",\n  "input": [\n    { "name": "x", "data_type": "TYPE_FLOAT32" }\n  ]\n}';
    const err = thrown(() => parseModelConfig(text, 'config.json'));
    expect(err.message).toBe("config.json:4:33: error at input[0].data_type: unknown enum value 'TYPE_FLOAT32' (did you mean 'TYPE_FP32'?)");
    const unknown = thrown(() => parseModelConfig('{\n  "max_batch": 4\n}', 'config.json'));
    expect([unknown.line, unknown.column, unknown.fieldPath]).toEqual([2, 3, 'max_batch']);
    expect(unknown.detail).toBe("unknown field 'max_batch' in inference.ModelConfig (did you mean 'max_batch_size'?)");
    expect(thrown(() => parseModelConfig('{"max_batch_size": "$MAX"}', 'c.json')).detail).toBe("expected an integer, got '$MAX'");
    expect(thrown(() => parseModelConfig('{"max_batch_size": 1.5}', 'c.json')).detail).toBe("expected an integer, got '1.5'");
    expect(thrown(() => parseModelConfig('{"input": {}}', 'c.json')).detail).toBe("expected a JSON array for repeated field 'input'");
    const both = thrown(() => parseModelConfig('{"maxBatchSize": 1, "max_batch_size": 2}', 'c.json'));
    expect(both.detail).toBe("field 'max_batch_size' is specified more than once (first at 1:2)");
    const oneof = thrown(() => parseModelConfig('{"dynamic_batching": {}, "sequenceBatching": {}}', 'c.json'));
    expect(oneof.detail).toBe("field 'sequence_batching' is specified along with 'dynamic_batching', another member of oneof 'scheduling_choice'");
    const syntax = thrown(() => parseModelConfig('{\n  "name": "m",\n}', 'c.json'));
    expect([syntax.line, syntax.column, syntax.detail]).toEqual([3, 1, 'invalid JSON: expected a member name, got \'}\'']);
    // A bare identifier is a member name, as protobuf's JSON parser takes it (L0_iterative_sequence's override).
    expect(parseModelConfig('{"sequence_batching": { direct: { "max_queue_delay_microseconds": 10 } }}', 'c.json').sequence_batching?.direct?.max_queue_delay_microseconds).toBe(10);
  });
});

describe('normalizeModelConfig', () => {
  it('fills the ONNX Runtime, version, batching and pinned-memory defaults without touching its input', () => {
    const parsed = pb(`
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ -1 ] }
dynamic_batching { }
`);
    const before = structuredClone(parsed);
    const cfg = normalizeModelConfig(parsed, { modelName: 'clf', gpuCount: 0 });
    expect(parsed).toEqual(before);
    expect(cfg).toEqual({
      name: 'clf',
      platform: 'onnxruntime_onnx',
      backend: 'onnxruntime',
      default_model_filename: 'model.onnx',
      version_policy: { latest: { num_versions: 1 } },
      max_batch_size: 8,
      input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [-1, 3] }],
      output: [{ name: 'y', data_type: 'TYPE_FP32', dims: [-1] }],
      dynamic_batching: { preferred_batch_size: [8] },
      optimization: { input_pinned_memory: { enable: true }, output_pinned_memory: { enable: true } },
      instance_group: [{ name: 'clf', kind: 'KIND_CPU', count: 2 }],
    });
  });

  it('fills platform from backend and keeps explicit choices', () => {
    const cfg = normalizeModelConfig(pb(`
name: "m" backend: "onnxruntime" default_model_filename: "net.onnx"
version_policy { all { } }
dynamic_batching { preferred_batch_size: [ 2 ] }
max_batch_size: 4
optimization { input_pinned_memory { enable: false } }
`), { modelName: 'm', gpuCount: 0 });
    expect(cfg.platform).toBe('onnxruntime_onnx');
    expect(cfg.default_model_filename).toBe('net.onnx');
    expect(cfg.version_policy).toEqual({ all: {} });
    expect(cfg.dynamic_batching!.preferred_batch_size).toEqual([2]);
    expect(cfg.optimization).toEqual({ input_pinned_memory: { enable: false }, output_pinned_memory: { enable: true } });
  });

  it('leaves preferred_batch_size empty for a non-batching model', () => {
    const cfg = normalizeModelConfig(pb('name: "m" backend: "onnxruntime" dynamic_batching {}'), { modelName: 'm', gpuCount: 0 });
    expect(cfg.dynamic_batching).toEqual({});
  });

  it('fills sequence batching defaults', () => {
    const direct = normalizeModelConfig(pb('name: "s" backend: "onnxruntime" max_batch_size: 4 sequence_batching {}'), { modelName: 's', gpuCount: 0 });
    expect(direct.sequence_batching).toEqual({ max_sequence_idle_microseconds: 1_000_000 });
    const oldest = normalizeModelConfig(
      pb('name: "s" backend: "onnxruntime" max_batch_size: 4 sequence_batching { max_sequence_idle_microseconds: 7 oldest { max_candidate_sequences: 4 } }'),
      { modelName: 's', gpuCount: 0 },
    );
    expect(oldest.sequence_batching).toEqual({
      max_sequence_idle_microseconds: 7, oldest: { max_candidate_sequences: 4, preferred_batch_size: [4] },
    });
  });

  it('resolves instance groups: kinds, counts, GPUs and names', () => {
    const text = `name: "g" backend: "onnxruntime"
instance_group [
  { kind: KIND_GPU },
  { name: "cpus" kind: KIND_CPU },
  { count: 3 },
  { kind: KIND_AUTO gpus: [ 5 ] },
  { kind: KIND_MODEL count: -2 }
]`;
    expect(normalizeModelConfig(pb(text), { modelName: 'g', gpuCount: 2 }).instance_group).toEqual([
      { name: 'g_0', kind: 'KIND_GPU', count: 1, gpus: [0, 1] },
      { name: 'cpus', kind: 'KIND_CPU', count: 2 },
      { name: 'g_2', kind: 'KIND_GPU', count: 3, gpus: [0, 1] },
      { name: 'g_3', kind: 'KIND_CPU', count: 2, gpus: [5] },
      { name: 'g_4', kind: 'KIND_MODEL', count: 1 },
    ]);
    const noGpu = normalizeModelConfig(pb('name: "p" backend: "python" instance_group [ { } ]'), { modelName: 'p', gpuCount: 0 });
    expect(noGpu.instance_group).toEqual([{ name: 'p_0', kind: 'KIND_CPU', count: 1 }]);
    const oneGpu = normalizeModelConfig(pb('name: "p" backend: "onnxruntime"'), { modelName: 'p', gpuCount: 1 });
    expect(oneGpu.instance_group).toEqual([{ name: 'p', kind: 'KIND_GPU', count: 1, gpus: [0] }]);
  });

  it("completes a Python model as Triton does: model.py, one instance, KIND_GPU on GPU 0 where there is one", () => {
    for (const [gpuCount, group] of [[0, { kind: 'KIND_CPU', count: 1 }], [1, { kind: 'KIND_GPU', count: 1, gpus: [0] }]] as const) {
      const cfg = normalizeModelConfig(pb('name: "py" backend: "python"'), { modelName: 'py', gpuCount });
      expect(cfg.default_model_filename).toBe('model.py');
      expect(cfg.instance_group).toEqual([{ name: 'py', ...group }]);
    }
    const named = normalizeModelConfig(pb('name: "py" backend: "python" default_model_filename: "main.py"'), { modelName: 'py', gpuCount: 0 });
    expect(named.default_model_filename).toBe('main.py');
  });

  it('leaves ensembles without instance groups or optimization', () => {
    const cfg = normalizeModelConfig(pb('name: "e" platform: "ensemble" ensemble_scheduling { }'), { modelName: 'e', gpuCount: 1 });
    expect(cfg).toEqual({ name: 'e', platform: 'ensemble', ensemble_scheduling: {}, version_policy: { latest: { num_versions: 1 } } });
  });
});

describe('validateModelConfig', () => {
  const base = `backend: "onnxruntime"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
`;
  const problem = (text: string, modelName = 'm', gpuCount = 0): ConfigError => thrown(() => load(text, modelName, gpuCount));

  it('accepts the realistic configs', () => {
    expect(() => load(`name: "m"\n${base}dynamic_batching { preferred_batch_size: [ 4, 8 ] priority_levels: 2 default_priority_level: 1
      priority_queue_policy { key: 2 value { timeout_action: DELAY default_timeout_microseconds: 10 } } }`, 'm')).not.toThrow();
    expect(() => load(`name: "m"\n${base}instance_group { kind: KIND_GPU gpus: [ 1 ] }`, 'm', 2)).not.toThrow();
  });

  it('requires the name to match the folder, pointing into the file', () => {
    const err = problem(`name: "other"\n${base}`, 'm');
    expect(err.detail).toBe("unexpected directory name 'm' for model 'other', directory name must equal model name");
    expect([err.file, err.line, err.column, err.fieldPath]).toEqual(['config.pbtxt', 1, 1, 'name']);
  });

  it("checks dynamic batching with Triton's texts", () => {
    const big = problem(`name: "m"\n${base}dynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n}`);
    expect(big.message).toBe('config.pbtxt:7:30: error at dynamic_batching.preferred_batch_size[1]: dynamic batching preferred size must be <= max batch size for m');
    expect(problem(`name: "m"\n${base}dynamic_batching { preferred_batch_size: 0 }`).detail).toBe('dynamic batching preferred size must be positive for m');
    expect(problem(`name: "m"\n${base}dynamic_batching { priority_levels: 3 }`).detail).toBe('default priority level must be in range [1, 3] for m');
    expect(problem(`name: "m"\n${base}dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 5 value {} } }`).detail)
      .toBe('priority queue policy must have priority level in range [1, 2] for m');
    expect(problem(`name: "m"\n${base}dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }`).detail)
      .toBe("Only one priority level is allowed when 'preserve_ordering' is true for m");
    expect(problem(`name: "m"\n${base}dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 } }`).detail)
      .toBe("Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m");
  });

  it('checks sequence batching controls', () => {
    const seq = (controls: string): ConfigError => problem(`name: "m"\n${base}sequence_batching { ${controls} }`);
    expect(seq('control_input { control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } }').detail)
      .toBe('sequence batching control tensor must have a name for m');
    expect(seq('control_input { name: "S" control { kind: CONTROL_SEQUENCE_START } }').detail)
      .toBe("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_START for m");
    expect(seq('control_input { name: "S" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 1 ] } }').detail)
      .toBe("sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END for m");
    expect(seq('control_input [ { name: "A" control { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } }, { name: "B" control { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } } ]').detail)
      .toBe('sequence batching specifies multiple CONTROL_SEQUENCE_READY tensors for m');
    expect(seq('control_input [ { name: "A" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } }, { name: "A" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } } ]').detail)
      .toBe("sequence batching control tensor 'A' is specified for multiple control kinds for m");
    const corrid = seq('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } }');
    expect(corrid.detail).toBe('unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING');
    expect(corrid.fieldPath).toBe('sequence_batching.control_input[0].control[0].data_type');
    expect(seq('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ] } }').detail)
      .toBe("sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for m");
    expect(seq('oldest { preferred_batch_size: [ 9 ] }').detail).toBe('sequence batching preferred batch size must be <= max batch size for m');
  });

  it('checks inputs and outputs', () => {
    const io = (tensors: string, mbs = 8): ConfigError =>
      problem(`name: "m" backend: "onnxruntime" max_batch_size: ${mbs}\n${tensors}`);
    expect(io('input { name: "x" data_type: TYPE_FP32 }').detail).toBe("model input 'x' must specify 'dims' for m");
    expect(io('input { name: "x" dims: [ 1 ] }').detail).toBe("model input 'x' must specify 'data_type' for m");
    expect(io('output { data_type: TYPE_FP32 dims: [ 1 ] }').detail).toBe("model output must specify 'name' for m");
    const zero = io('input { name: "x" data_type: TYPE_FP32 dims: [ 4, 0 ] }');
    expect(zero.detail).toBe("model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m");
    expect(zero.fieldPath).toBe('input[0].dims[1]');
    expect(io('input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 3 ] } }').detail)
      .toBe("model input 'x' has different size for dims and reshape for m");
    expect(io('input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] reshape { } }', 0).detail)
      .toBe("model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not supported for m");
    expect(io('input { name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 4 ] }').detail).toBe('model input NHWC/NCHW require 3 dims for m');
    const dup = io('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]');
    expect([dup.detail, dup.fieldPath]).toEqual(["model input 'x' is specified more than once for m", 'input[1].name']);
    expect(io('input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] is_shape_tensor: true }').detail).toBe('shape tensors are only supported for TensorRT platform for m');
    // Variable dims with a matching reshape are fine: [2,4,-1,6] -> [8,-1,1,6].
    expect(() => load('name: "m" backend: "onnxruntime" max_batch_size: 1 input { name: "x" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] } }', 'm')).not.toThrow();
  });

  it('checks platform, max_batch_size, instance groups and response cache', () => {
    expect(problem('name: "m" platform: "pytorch_libtorch"').detail).toBe("unexpected platform type 'pytorch_libtorch' for m");
    expect(problem('name: "m" backend: "onnxruntime" platform: "tensorrt_plan"').detail)
      .toBe("unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime");
    expect(problem('name: "m" backend: "onnxruntime" max_batch_size: -1').detail).toBe("'max_batch_size' must be non-negative value for m");
    // tsi accepts KIND_GPU without GPUs (the backend falls back to CPU); with GPUs, ids must exist.
    expect(() => validateModelConfig(normalizeModelConfig(parsePbtxt('name: "m" backend: "onnxruntime" instance_group { kind: KIND_GPU }'), { modelName: 'm', gpuCount: 0 }), { modelName: 'm', gpuCount: 0 })).not.toThrow();
    expect(problem('name: "m" backend: "onnxruntime" instance_group { kind: KIND_CPU gpus: [ 0 ] }').detail)
      .toBe('instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs');
    expect(problem('name: "m" backend: "onnxruntime" max_batch_size: 1 sequence_batching {} response_cache { enable: true }').detail)
      .toBe('Response Cache does not currently support model m with sequence batching scheduler. Please disable the response cache.');
    const raw: ModelConfig = { name: 'm', backend: 'onnxruntime', platform: 'onnxruntime_onnx', version_policy: { latest: {} } };
    expect(thrown(() => validateModelConfig(raw, { modelName: 'm' })).message)
      .toBe("error at instance_group: must specify one or more 'instance group's for m");
  });

  it('checks ensembles on their own (not against the composing models)', () => {
    const ens = (extra: string, steps: string): string => `name: "e" platform: "ensemble" max_batch_size: 1
input { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }
${extra}
ensemble_scheduling { ${steps} }`;
    const ok = 'step { model_name: "a" input_map { key: "x" value: "IN" } output_map { key: "y" value: "mid" } } step { model_name: "b" input_map { key: "x" value: "mid" } output_map { key: "y" value: "OUT" } }';
    expect(() => load(ens('', ok), 'e')).not.toThrow();
    expect(problem(ens('instance_group { count: 1 }', ok), 'e').detail).toBe("instance group should not be specified for ensemble 'e'");
    expect(problem(ens('', ''), 'e').detail).toBe("must specify 'step' for ensemble 'e'");
    expect(problem(ens('', 'step { model_name: "a" input_map { key: "x" value: "IN" } }'), 'e').detail)
      .toBe("must specify 'output_map' in step 0 of ensemble 'e'");
    expect(problem(ens('', 'step { model_name: "a" input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } output_map { key: "z" value: "extra" } }'), 'e').detail)
      .toBe("ensemble tensor 'extra' is unused in ensemble 'e'");
    expect(problem(ens('', 'step { model_name: "a" input_map { key: "x" value: "other" } output_map { key: "y" value: "OUT" } }'), 'e').detail)
      .toBe("ensemble input 'IN' for ensemble e' is not used");
    expect(problem(ens('', 'step { model_name: "a" input_map { key: "x" value: "IN" } output_map { key: "y" value: "mid" } } step { model_name: "b" input_map [ { key: "x" value: "mid" }, { key: "w" value: "ghost" } ] output_map { key: "y" value: "OUT" } }'), 'e').detail)
      .toBe("output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, 'ghost', is not connected");
    expect(problem('name: "e" platform: "ensemble"', 'e').detail).toBe('ensemble scheduling must be set for ensemble e whose platform is ensemble');
  });
});

describe('autoCompleteConfig', () => {
  // The reference example: two INT32 [-1,16] inputs, two INT8 [-1,16] outputs.
  const addSub: ModelIoInfo = {
    inputs: [{ name: 'INPUT0', datatype: 'int32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'int32', shape: ['batch', 16] }],
    outputs: [{ name: 'OUTPUT0', datatype: 'int8', shape: [-1, 16] }, { name: 'OUTPUT1', datatype: 'int8', shape: ['N', 16] }],
  };

  it('fills a batchable model, then normalises as Triton does', () => {
    const { config, notes } = autoCompleteConfig({ name: 'add_sub', backend: 'onnxruntime' }, addSub, { defaultMaxBatchSize: 4, modelName: 'add_sub' });
    expect(config).toEqual({
      name: 'add_sub',
      backend: 'onnxruntime',
      max_batch_size: 4,
      dynamic_batching: {},
      input: [
        { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
        { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
      ],
      output: [
        { name: 'OUTPUT0', data_type: 'TYPE_INT8', dims: [16] },
        { name: 'OUTPUT1', data_type: 'TYPE_INT8', dims: [16] },
      ],
    });
    expect(notes[0]).toMatch(/^autofilled max_batch_size to 4 for model 'add_sub'/);
    const normalized = normalizeModelConfig(config, { modelName: 'add_sub', gpuCount: 1 });
    expect(normalized.dynamic_batching).toEqual({ preferred_batch_size: [4] });
    expect(normalized.instance_group).toEqual([{ name: 'add_sub', kind: 'KIND_GPU', count: 1, gpus: [0] }]);
    expect(() => validateModelConfig(normalized, { modelName: 'add_sub' })).not.toThrow();
  });

  it('keeps a given max_batch_size and scheduler, and adds no dynamic batching at 1', () => {
    const seq = autoCompleteConfig({ name: 'm', max_batch_size: 2, sequence_batching: {} }, addSub, { defaultMaxBatchSize: 4, modelName: 'm' });
    expect(seq.config.max_batch_size).toBe(2);
    expect(seq.config.dynamic_batching).toBeUndefined();
    expect(seq.notes).toEqual([]);
    const one = autoCompleteConfig({ name: 'm', max_batch_size: 1 }, addSub, { defaultMaxBatchSize: 4, modelName: 'm' });
    expect(one.config.dynamic_batching).toBeUndefined();
  });

  it('fills a non-batching model with full dims and keeps max_batch_size 0', () => {
    const io: ModelIoInfo = {
      inputs: [{ name: 'image', datatype: 'float32', shape: [1, 3, 224, 224] }],
      outputs: [{ name: 'logits', datatype: 'float16', shape: [1, 'classes'] }],
    };
    const { config } = autoCompleteConfig({}, io, { defaultMaxBatchSize: 4, modelName: 'resnet' });
    expect(config.max_batch_size).toBeUndefined();
    expect(config.input).toEqual([{ name: 'image', data_type: 'TYPE_FP32', dims: [1, 3, 224, 224] }]);
    expect(config.output).toEqual([{ name: 'logits', data_type: 'TYPE_FP16', dims: [1, -1] }]);
  });

  it('refuses a non-zero max_batch_size for a model that cannot batch', () => {
    const io: ModelIoInfo = { inputs: [{ name: 'x', datatype: 'float32', shape: [4] }], outputs: [{ name: 'y', datatype: 'float32', shape: [-1] }] };
    const err = thrown(() => autoCompleteConfig({ name: 'm', max_batch_size: 8 }, io, { defaultMaxBatchSize: 4, modelName: 'm' }));
    expect(err.detail).toBe("autofill failed for model 'm': model does not support batching while non-zero max_batch_size is specified");
  });

  it('gives scalars dims [1], with an empty reshape when batching', () => {
    const scalar: ModelIoInfo = { inputs: [{ name: 's', datatype: 'bool', shape: [] }], outputs: [{ name: 'o', datatype: 'string', shape: [] }] };
    const plain = autoCompleteConfig({}, scalar, { defaultMaxBatchSize: 4, modelName: 'm' }).config;
    expect(plain.input).toEqual([{ name: 's', data_type: 'TYPE_BOOL', dims: [1] }]);
    expect(plain.output).toEqual([{ name: 'o', data_type: 'TYPE_STRING', dims: [1] }]);
    const batchOnly: ModelIoInfo = { inputs: [{ name: 's', datatype: 'int64', shape: [-1] }], outputs: [{ name: 'o', datatype: 'float64', shape: ['b'] }] };
    const batched = autoCompleteConfig({}, batchOnly, { defaultMaxBatchSize: 8, modelName: 'm' }).config;
    expect(batched.input).toEqual([{ name: 's', data_type: 'TYPE_INT64', dims: [1], reshape: { shape: [] } }]);
    expect(batched.output).toEqual([{ name: 'o', data_type: 'TYPE_FP64', dims: [1], reshape: { shape: [] } }]);
  });

  it('fills only the missing side, and skips when both are given', () => {
    const onlyOut = autoCompleteConfig({ name: 'm', input: [{ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] }] }, addSub, { defaultMaxBatchSize: 4, modelName: 'm' }).config;
    expect(onlyOut.input).toEqual([{ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] }]);
    expect(onlyOut.output!.map((o) => o.name)).toEqual(['OUTPUT0', 'OUTPUT1']);
    const given: ModelConfig = { name: 'm', input: [{ name: 'a' }], output: [{ name: 'b' }] };
    const skipped = autoCompleteConfig(given, addSub, { defaultMaxBatchSize: 4, modelName: 'm' });
    expect(skipped.config).toEqual(given);
    expect(skipped.config.max_batch_size).toBeUndefined();
    expect(skipped.notes).toEqual(["skipping model configuration auto-complete for 'm': inputs and outputs already specified"]);
  });
});

describe('checkConfigAgainstModel', () => {
  const io: ModelIoInfo = {
    inputs: [{ name: 'INPUT0', datatype: 'int32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'int32', shape: [-1, 16] }],
    outputs: [{ name: 'OUTPUT0', datatype: 'int32', shape: [-1, 16] }],
  };
  const tensor = (name: string, dims: number[], data_type: ConfigDataType = 'TYPE_INT32') => ({ name, data_type, dims });
  const cfg = (over: Partial<ModelConfig>): ModelConfig => ({
    name: 'm', max_batch_size: 8,
    input: [tensor('INPUT0', [16]), tensor('INPUT1', [16])],
    output: [tensor('OUTPUT0', [16])],
    ...over,
  });

  it('accepts a matching config', () => {
    expect(() => checkConfigAgainstModel(cfg({}), io, 'm')).not.toThrow();
  });

  it('reports count, name, datatype and shape mismatches in Triton words', () => {
    expect(thrown(() => checkConfigAgainstModel(cfg({ input: [tensor('INPUT0', [16])] }), io, 'm')).detail)
      .toBe("unable to load model 'm', configuration expects 1 inputs, model provides 2");
    expect(thrown(() => checkConfigAgainstModel(cfg({ input: [tensor('INPUT0', [16]), tensor('IN1', [16])] }), io, 'm')).detail)
      .toBe("unexpected inference input 'IN1', allowed inputs are: INPUT0, INPUT1");
    const shape = thrown(() => checkConfigAgainstModel(cfg({ input: [tensor('INPUT0', [16, 1]), tensor('INPUT1', [16])] }), io, 'm'));
    expect(shape.detail).toBe("model 'm', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model configuration specifies 3 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,16,1])");
    expect(shape.fieldPath).toBe('input[0].dims');
    const dtype = thrown(() => checkConfigAgainstModel(cfg({ output: [tensor('OUTPUT0', [16], 'TYPE_FP32')] }), io, 'm'));
    expect(dtype.detail).toBe("unable to load model 'm, unexpected datatype INT32 for output 'OUTPUT0', expecting TYPE_FP32");
    const unbatched = thrown(() => checkConfigAgainstModel(cfg({ max_batch_size: 0, input: [tensor('INPUT0', [-1, 16]), tensor('INPUT1', [16])] }), io, 'm'));
    expect(unbatched.detail).toBe("model 'm', tensor 'INPUT1': the model expects 2 dimensions (shape [-1,16]) but the model configuration specifies 1 dimensions (shape [16])");
    const fixed: ModelIoInfo = { ...io, inputs: [{ name: 'INPUT0', datatype: 'int32', shape: [1, 16] }, io.inputs[1]!] };
    expect(thrown(() => checkConfigAgainstModel(cfg({}), fixed, 'm')).detail)
      .toBe("model 'm', tensor 'INPUT0': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is [1,16]");
  });

  it('compares outputs exactly and counts sequence controls as inputs', () => {
    const outFixed = thrown(() => checkConfigAgainstModel(cfg({ max_batch_size: 0, input: [tensor('INPUT0', [-1, 16]), tensor('INPUT1', [-1, 16])], output: [tensor('OUTPUT0', [4, 16])] }), io, 'm'));
    expect(outFixed.detail).toContain("tensor 'OUTPUT0': the model expects 2 dimensions (shape [-1,16])");
    const seqIo: ModelIoInfo = { ...io, inputs: [...io.inputs, { name: 'START', datatype: 'int32', shape: [-1, 1] }] };
    const seq = cfg({ sequence_batching: { control_input: [{ name: 'START', control: [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [0, 1] }] }] } });
    expect(() => checkConfigAgainstModel(seq, seqIo, 'm')).not.toThrow();
  });
});

describe('modelConfigToJson', () => {
  it('prints every primitive, repeated and map field with its default, enums by name, int64 as numbers', () => {
    const cfg = normalizeModelConfig(pb(`
name: "m" backend: "onnxruntime" max_batch_size: 4
input { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] }
dynamic_batching { max_queue_delay_microseconds: 100 }
`), { modelName: 'm', gpuCount: 0 });
    expect(modelConfigToJson(cfg)).toEqual({
      name: 'm',
      platform: 'onnxruntime_onnx',
      backend: 'onnxruntime',
      runtime: '',
      version_policy: { latest: { num_versions: 1 } },
      max_batch_size: 4,
      input: [{
        name: 'x', data_type: 'TYPE_FP32', format: 'FORMAT_NONE', dims: [-1, 3], is_shape_tensor: false,
        allow_ragged_batch: false, optional: false, is_non_linear_format_io: false,
      }],
      output: [],
      batch_input: [],
      batch_output: [],
      optimization: {
        priority: 'PRIORITY_DEFAULT',
        input_pinned_memory: { enable: true },
        output_pinned_memory: { enable: true },
        gather_kernel_buffer_threshold: 0,
        eager_batching: false,
      },
      dynamic_batching: {
        preferred_batch_size: [4], max_queue_delay_microseconds: 100, preserve_ordering: false, priority_levels: 0,
        default_priority_level: 0, priority_queue_policy: {},
      },
      instance_group: [{
        name: 'm', kind: 'KIND_CPU', count: 2, gpus: [], secondary_devices: [], profile: [], passive: false, host_policy: '',
      }],
      default_model_filename: 'model.onnx',
      cc_model_filenames: {},
      metric_tags: {},
      parameters: {},
      model_warmup: [],
    });
  });

  it('prints set oneof members and map values, and omits unset ones', () => {
    const json = modelConfigToJson(pb(`
sequence_batching { direct { } control_input { name: "S" control { fp32_false_true: [ 0, 1 ] } } }
model_warmup { inputs { key: "x" value { random_data: true } } }
parameters { key: "k" value { } }
`));
    const sb = json.sequence_batching as Record<string, unknown>;
    expect(sb.direct).toEqual({ max_queue_delay_microseconds: 0, minimum_slot_utilization: 0 });
    expect(sb).not.toHaveProperty('oldest');
    expect(sb.control_input).toEqual([{
      name: 'S', control: [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [], fp32_false_true: [0, 1], bool_false_true: [], data_type: 'TYPE_INVALID' }],
    }]);
    expect(json).not.toHaveProperty('dynamic_batching');
    expect(json).not.toHaveProperty('version_policy');
    expect((json.model_warmup as unknown[])[0]).toEqual({
      name: '', batch_size: 0, inputs: { x: { data_type: 'TYPE_INVALID', dims: [], random_data: true } }, count: 0,
    });
    expect(json.parameters).toEqual({ k: { string_value: '' } });
  });

  it('round-trips through the JSON parser', () => {
    const cfg = load(`name: "m" backend: "onnxruntime" max_batch_size: 2
input { name: "x" data_type: TYPE_STRING dims: [ 1 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 5 ] }
dynamic_batching { priority_levels: 2 default_priority_level: 2 priority_queue_policy { key: 1 value { max_queue_size: 3 } } }`, 'm');
    const json = modelConfigToJson(cfg);
    const again = parseModelConfig(JSON.stringify(json), 'config.json');
    expect(modelConfigToJson(again)).toEqual(json);
    expect(configDiff(cfg, again)).toBe('none');
  });
});

describe('configDiff', () => {
  const text = `name: "m" backend: "onnxruntime" max_batch_size: 4
input { name: "x" data_type: TYPE_FP32 dims: [ 2 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 2 ] }
instance_group { kind: KIND_CPU count: 1 }`;
  const norm = (t: string): ModelConfig => normalizeModelConfig(pb(t), { modelName: 'm', gpuCount: 0 });

  it('sees no change for the same config, or one that spells out defaults', () => {
    expect(configDiff(norm(text), norm(text))).toBe('none');
    expect(configDiff(norm(text), norm(`${text}\nruntime: ""\nparameters []`))).toBe('none');
  });

  it('applies instance_group changes in place and reloads for anything else', () => {
    expect(configDiff(norm(text), norm(text.replace('count: 1', 'count: 3')))).toBe('instance_group');
    expect(configDiff(norm(text), norm(text.replace('KIND_CPU', 'KIND_MODEL')))).toBe('instance_group');
    expect(configDiff(norm(text), norm(`${text}\ninstance_group { kind: KIND_CPU }`))).toBe('instance_group');
    expect(configDiff(norm(text), norm(text.replace('max_batch_size: 4', 'max_batch_size: 8')))).toBe('full');
    expect(configDiff(norm(text), norm(`${text}\nparameters { key: "k" value { string_value: "v" } }`))).toBe('full');
  });

  it('ignores version_policy, which the repository handles per version', () => {
    expect(configDiff(norm(text), norm(`${text}\nversion_policy { all {} }`))).toBe('none');
  });
});

describe('datatype helpers and fullDims', () => {
  it('maps config, wire and ONNX Runtime type names', () => {
    expect(configTypeToDatatype('TYPE_STRING')).toBe('BYTES');
    expect(configTypeToDatatype('TYPE_FP16')).toBe('FP16');
    expect(configTypeToDatatype('TYPE_BF16')).toBe('BF16');
    expect(() => configTypeToDatatype('TYPE_INVALID')).toThrow(/no inference protocol datatype/);
    expect(datatypeToConfigType('BYTES')).toBe('TYPE_STRING');
    expect(datatypeToConfigType('UINT64')).toBe('TYPE_UINT64');
    expect(ortTypeToConfigType('float32')).toBe('TYPE_FP32');
    expect(ortTypeToConfigType('float')).toBe('TYPE_FP32');
    expect(ortTypeToConfigType('string')).toBe('TYPE_STRING');
    expect(ortTypeToConfigType('bool')).toBe('TYPE_BOOL');
    expect(ortTypeToConfigType('float16')).toBe('TYPE_FP16');
    expect(ortTypeToConfigType('int64')).toBe('TYPE_INT64');
    expect(ortTypeToConfigType('complex64')).toBe('TYPE_INVALID');
  });

  it('prefixes the batch dimension only when the model batches', () => {
    expect(fullDims({ dims: [3, -1] }, 8)).toEqual([-1, 3, -1]);
    expect(fullDims({ dims: [3, -1] }, 0)).toEqual([3, -1]);
    expect(fullDims({}, 0)).toEqual([]);
  });
});
