import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../core/config/pipeline.js';
import { parsePbtxt } from '../../core/config/pbtxt.js';

/** Parses and returns the ConfigError it must throw. */
function failure(text: string): ConfigError {
  try {
    parsePbtxt(text, 'config.pbtxt');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('parsePbtxt: realistic configs', () => {
  it('parses the classic "simple" model', () => {
    const cfg = parsePbtxt(`
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
`);
    expect(cfg).toEqual({
      name: 'simple',
      platform: 'onnxruntime_onnx',
      max_batch_size: 8,
      input: [
        { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
        { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
      ],
      output: [{ name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [16] }],
    });
  });

  it('parses dynamic batching with priority levels and per-level queue policies', () => {
    const cfg = parsePbtxt(`
name: "resnet"
backend: "onnxruntime"
max_batch_size: 16
input { name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" }
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy {
    timeout_action: REJECT
    default_timeout_microseconds: 5000
    allow_timeout_override: true
    max_queue_size: 64
  }
  priority_queue_policy [
    { key: 1 value: { timeout_action: DELAY default_timeout_microseconds: 1000 } },
    { key: 3 value { max_queue_size: 8 } }
  ]
}
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] }, { kind: KIND_CPU } ]
`);
    expect(cfg.input).toEqual([{ name: 'x', data_type: 'TYPE_FP32', format: 'FORMAT_NCHW', dims: [3, 224, 224] }]);
    expect(cfg.output![0]!.label_filename).toBe('labels.txt');
    expect(cfg.dynamic_batching).toEqual({
      preferred_batch_size: [4, 8],
      max_queue_delay_microseconds: 100,
      priority_levels: 3,
      default_priority_level: 2,
      default_queue_policy: {
        timeout_action: 'REJECT', default_timeout_microseconds: 5000, allow_timeout_override: true, max_queue_size: 64,
      },
      priority_queue_policy: {
        '1': { timeout_action: 'DELAY', default_timeout_microseconds: 1000 },
        '3': { max_queue_size: 8 },
      },
    });
    expect(cfg.instance_group).toEqual([{ count: 2, kind: 'KIND_GPU', gpus: [0, 1] }, { kind: 'KIND_CPU' }]);
  });

  it('parses sequence batching with every control kind, implicit state and the oldest strategy', () => {
    const cfg = parsePbtxt(`
name: "stateful"
backend: "onnxruntime"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 8 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [
    {
      input_name: "state_in"
      output_name: "state_out"
      data_type: TYPE_FP32
      dims: [ -1, 8 ]
      initial_state: { data_type: TYPE_FP32 dims: [ 1, 8 ] zero_data: true name: "zeros" }
    }
  ]
}
`);
    const sb = cfg.sequence_batching!;
    expect(sb.max_sequence_idle_microseconds).toBe(5_000_000);
    expect(sb.oldest).toEqual({ max_candidate_sequences: 8, preferred_batch_size: [2, 4], max_queue_delay_microseconds: 1000 });
    expect(sb.control_input!.map((c) => c.control![0]!.kind)).toEqual([
      'CONTROL_SEQUENCE_START', 'CONTROL_SEQUENCE_READY', 'CONTROL_SEQUENCE_END', 'CONTROL_SEQUENCE_CORRID',
    ]);
    expect(sb.control_input![0]!.control![0]!.fp32_false_true).toEqual([0, 1]);
    expect(sb.control_input![1]!.control![0]!.bool_false_true).toEqual([false, true]);
    expect(sb.control_input![3]!.control![0]!.data_type).toBe('TYPE_UINT64');
    expect(sb.state).toEqual([{
      input_name: 'state_in', output_name: 'state_out', data_type: 'TYPE_FP32', dims: [-1, 8],
      initial_state: [{ data_type: 'TYPE_FP32', dims: [1, 8], zero_data: true, name: 'zeros' }],
    }]);
  });

  it('parses ensemble steps with input_map and output_map', () => {
    const cfg = parsePbtxt(`
name: "pipeline"
platform: "ensemble"
max_batch_size: 1
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "CLASSIFICATION" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "RAW_IMAGE" value: "IMAGE" }
      output_map { key: "PREPROCESSED" value: "preprocessed_image" }
    },
    {
      model_name: "classifier"
      model_version: 3
      input_map { key: "INPUT" value: "preprocessed_image" }
      output_map [ { key: "PROB" value: "CLASSIFICATION" } ]
    }
  ]
}
`);
    expect(cfg.ensemble_scheduling!.step).toEqual([
      { model_name: 'preprocess', model_version: -1, input_map: { RAW_IMAGE: 'IMAGE' }, output_map: { PREPROCESSED: 'preprocessed_image' } },
      { model_name: 'classifier', model_version: 3, input_map: { INPUT: 'preprocessed_image' }, output_map: { PROB: 'CLASSIFICATION' } },
    ]);
  });

  it('parses parameters, execution accelerators, warmup, version policy and policies', () => {
    const cfg = parsePbtxt(`
name: "trt_onnx"
backend: "onnxruntime"
version_policy: { specific: { versions: [ 1, 3 ] } }
parameters { key: "intra_op_thread_count" value: { string_value: "4" } }
parameters: { key: "execution_mode" value: { string_value: "1" } }
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  } ]
  cpu_execution_accelerator : [ { name : "openvino" } ]
} }
model_warmup [ {
  name: "zeros"
  batch_size: 1
  inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
  count: 2
} ]
model_transaction_policy { decoupled: True }
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
cc_model_filenames { key: "7.5" value: "model_t4.onnx" }
`);
    expect(cfg.version_policy).toEqual({ specific: { versions: [1, 3] } });
    expect(cfg.parameters).toEqual({ intra_op_thread_count: { string_value: '4' }, execution_mode: { string_value: '1' } });
    expect(cfg.optimization!.execution_accelerators).toEqual({
      gpu_execution_accelerator: [
        { name: 'tensorrt', parameters: { precision_mode: 'FP16', max_workspace_size_bytes: '1073741824' } },
      ],
      cpu_execution_accelerator: [{ name: 'openvino' }],
    });
    expect(cfg.model_warmup).toEqual([{
      name: 'zeros', batch_size: 1, count: 2, inputs: { x: { data_type: 'TYPE_FP32', dims: [3], zero_data: true } },
    }]);
    expect(cfg.model_transaction_policy).toEqual({ decoupled: true });
    expect(cfg.response_cache).toEqual({ enable: true });
    expect(cfg.metric_tags).toEqual({ team: 'vision' });
    expect(cfg.cc_model_filenames).toEqual({ '7.5': 'model_t4.onnx' });
  });
});

describe('parsePbtxt: syntax', () => {
  it('reads integers in decimal, negative, hex and octal, and int64 as numbers', () => {
    const cfg = parsePbtxt('input { dims: [ 16, -1, 0x10, 010 ] } max_batch_size: -0 dynamic_batching { max_queue_delay_microseconds: 9007199254740991 }');
    expect(cfg.input![0]!.dims).toEqual([16, -1, 16, 8]);
    expect(cfg.max_batch_size).toBe(-0);
    expect(cfg.dynamic_batching!.max_queue_delay_microseconds).toBe(9007199254740991);
  });

  it('reads floats, including exponents, the f suffix, inf and nan', () => {
    const cfg = parsePbtxt(`sequence_batching { control_input { control {
      fp32_false_true: [ 1.5, -2e3, .25, 3f, -inf, nan, 7 ] } } }`);
    const vals = cfg.sequence_batching!.control_input![0]!.control![0]!.fp32_false_true!;
    expect(vals.slice(0, 5)).toEqual([1.5, -2000, 0.25, 3, -Infinity]);
    expect(Number.isNaN(vals[5])).toBe(true);
    expect(vals[6]).toBe(7);
  });

  it('reads every boolean spelling', () => {
    const cfg = parsePbtxt(`sequence_batching { control_input { control {
      bool_false_true: [ true, True, t, 1, false, False, f, 0 ] } } }`);
    expect(cfg.sequence_batching!.control_input![0]!.control![0]!.bool_false_true).toEqual([
      true, true, true, true, false, false, false, false,
    ]);
  });

  it('reads enums by name or number', () => {
    const cfg = parsePbtxt('input { data_type: 11 } input { data_type: TYPE_BF16 format: 2 }');
    expect(cfg.input).toEqual([{ data_type: 'TYPE_FP32' }, { data_type: 'TYPE_BF16', format: 'FORMAT_NCHW' }]);
  });

  it('decodes both quote kinds, every escape and adjacent string concatenation', () => {
    const cfg = parsePbtxt(String.raw`name: 'it\'s' platform: "a\"b\\c\n\t\r" backend: "\101\x42\u00e9\303\251" default_model_filename: "model" '.onnx' "" `);
    expect(cfg.name).toBe("it's");
    expect(cfg.platform).toBe('a"b\\c\n\t\r');
    // Octal and hex escapes are bytes, decoded as UTF-8 together (\303\251 is é).
    expect(cfg.backend).toBe('ABéé');
    expect(cfg.default_model_filename).toBe('model.onnx');
  });

  it('accepts messages with or without ":", in {} or <>, and "," or ";" between fields', () => {
    const cfg = parsePbtxt(`
version_policy: < latest < num_versions: 2 > >;
response_cache { enable: true },
model_transaction_policy: { decoupled: false };
name: "x", max_batch_size: 2;
`);
    expect(cfg).toEqual({
      version_policy: { latest: { num_versions: 2 } },
      response_cache: { enable: true },
      model_transaction_policy: { decoupled: false },
      name: 'x',
      max_batch_size: 2,
    });
  });

  it('accepts repeated fields as lists, as repeated entries, mixed, and empty lists', () => {
    const cfg = parsePbtxt(`
input { name: "a" dims: 1 dims: 2 }
input [ { name: "b" dims: [] } ]
input: { name: "c" dims: [ 3 ] dims: 4 }
output: []
`);
    expect(cfg.input).toEqual([
      { name: 'a', dims: [1, 2] }, { name: 'b', dims: [] }, { name: 'c', dims: [3, 4] },
    ]);
    expect(cfg.output).toEqual([]);
  });

  it('reads map entries as repeated key/value messages, in either order, the last duplicate winning', () => {
    const cfg = parsePbtxt(`
parameters { value { string_value: "2" } key: "k" }
parameters [ { key: "k" value: { string_value: "3" } }, { key: "empty" } ]
`);
    expect(cfg.parameters).toEqual({ k: { string_value: '3' }, empty: {} });
  });

  it('ignores # comments anywhere, including after values and inside lists', () => {
    const cfg = parsePbtxt(`# leading comment
name: "c" # trailing
input [ # open
  { dims: [ 1, # one
            2 ] } # done
]
# end`);
    expect(cfg).toEqual({ name: 'c', input: [{ dims: [1, 2] }] });
  });

  it('returns an empty config for an empty or comment-only file', () => {
    expect(parsePbtxt('')).toEqual({});
    expect(parsePbtxt('# nothing here\n')).toEqual({});
  });
});

describe('parsePbtxt: errors carry file, line, column and field path', () => {
  it('reports an unknown enum value with a suggestion', () => {
    const err = failure(`name: "m"
input [
  { name: "a" data_type: TYPE_FP32 dims: [1] },
  {
    name: "b"
    data_type: TYPE_FLOAT32
  }
]`);
    expect(err.message).toBe(
      "config.pbtxt:6:16: error at input[1].data_type: unknown enum value 'TYPE_FLOAT32' (did you mean 'TYPE_FP32'?)",
    );
    expect([err.file, err.line, err.column, err.fieldPath]).toEqual(['config.pbtxt', 6, 16, 'input[1].data_type']);
    expect(err.code).toBe('INVALID_ARG');
  });

  it('suggests enum values for other common spellings', () => {
    expect(failure('input { data_type: TYPE_BYTES }').detail).toContain("did you mean 'TYPE_STRING'");
    expect(failure('instance_group { kind: GPU }').detail).toContain("did you mean 'KIND_GPU'");
    expect(failure('input { data_type: 99 }').detail).toBe('unknown enum number 99 for inference.DataType');
  });

  it('reports an unknown field with the nearest field of that message', () => {
    const err = failure('name: "m"\ndynamic_batching {\n  prefered_batch_size: 4\n}');
    expect(err.message).toBe(
      "config.pbtxt:3:3: error at dynamic_batching.prefered_batch_size: unknown field 'prefered_batch_size' in inference.ModelDynamicBatching (did you mean 'preferred_batch_size'?)",
    );
    expect(failure('maxBatchSize: 4').detail).toContain("did you mean 'max_batch_size'");
    expect(failure('input { zzz: 1 }').detail).toBe("unknown field 'zzz' in inference.ModelInput");
  });

  it('reports type mismatches with what was expected (integers in the words of protobuf, as Triton reports them)', () => {
    const err = failure('max_batch_size: $MAX');
    expect(err.message).toBe('config.pbtxt:1:17: error at max_batch_size: Expected integer, got: $MAX');
    expect(failure('ensemble_scheduling { max_inflight_requests: "invalid_value" }').detail).toBe('Expected integer, got: "invalid_value"');
    const list = failure('dynamic_batching { preferred_batch_size: [ 4, 8.5 ] }');
    expect([list.fieldPath, list.line, list.column]).toEqual(['dynamic_batching.preferred_batch_size[1]', 1, 47]);
    expect(list.detail).toBe('Expected integer, got: 8.5');
    expect(failure('name: model').detail).toBe("expected a string, got 'model'");
    expect(failure('response_cache { enable: yes }').detail).toBe("expected true or false, got 'yes'");
    expect(failure('sequence_batching { direct { minimum_slot_utilization: "0.5" } }').detail).toBe(
      `expected a number, got '"0.5"'`,
    );
    expect(failure('version_policy: 3').detail).toBe(
      "expected '{' to start a message (inference.ModelVersionPolicy), got '3'",
    );
  });

  it("reports out-of-range integers, protobuf's words first (L0_simple_ensemble greps them)", () => {
    expect(failure('max_batch_size: 2147483648').detail).toBe('Integer out of range (2147483648); value 2147483648 is out of range for int32');
    expect(failure('version_policy { latest { num_versions: -1 } }').detail).toBe('Expected integer, got: -; value -1 is out of range for uint32');
    expect(failure('ensemble_scheduling { max_inflight_requests: 12345678901 }').detail).toMatch(/^Integer out of range \(12345678901\); /);
  });

  it("reads a 64-bit value past 2^53 that its type holds as the nearest safe number (L0_model_queue's UINT64_MAX levels)", () => {
    const cfg = parsePbtxt('dynamic_batching { priority_levels: 18446744073709551615 default_priority_level: 4294967296 }') as {
      dynamic_batching: { priority_levels: number; default_priority_level: number };
    };
    expect(cfg.dynamic_batching.priority_levels).toBe(Number.MAX_SAFE_INTEGER);
    expect(cfg.dynamic_batching.default_priority_level).toBe(4294967296);
    expect(failure('dynamic_batching { priority_levels: 18446744073709551616 }').detail).toMatch(/out of range for uint64/);
    expect(failure('dynamic_batching { priority_levels: -1 }').detail).toMatch(/out of range for uint64/);
  });

  it('rejects two members of one oneof and repeated singular fields', () => {
    const err = failure('dynamic_batching {}\nsequence_batching {}');
    expect(err.message).toBe(
      "config.pbtxt:2:1: error at sequence_batching: field 'sequence_batching' is specified along with 'dynamic_batching', another member of oneof 'scheduling_choice'",
    );
    const oneofInner = failure('model_warmup { inputs { key: "x" value { zero_data: true random_data: true } } }');
    expect(oneofInner.fieldPath).toBe('model_warmup[0].inputs["x"].random_data');
    const dup = failure('name: "a"\nname: "b"');
    expect(dup.detail).toBe("non-repeated field 'name' is specified multiple times (first at 1:1)");
    expect([dup.line, dup.column]).toEqual([2, 1]);
  });

  it('names map entries by key in field paths', () => {
    const err = failure('parameters { key: "threads" value { string_value: 4 } }');
    expect(err.fieldPath).toBe('parameters["threads"].string_value');
    expect(err.detail).toBe("expected a string, got '4'");
  });

  it('reports structural problems: missing ":", lists on singular fields, unclosed blocks, bad strings', () => {
    expect(failure('max_batch_size 4').detail).toBe("expected ':' after field name 'max_batch_size', got '4'");
    expect(failure('name: ["a"]').detail).toBe("field 'name' is not repeated, so it cannot take a list");
    const open = failure('input {\n  name: "a"\n');
    expect(open.detail).toBe("unexpected end of file: expected '}' to close 'input' opened at 1:7");
    expect([open.line, open.column, open.fieldPath]).toEqual([3, 1, 'input[0]']);
    const str = failure('name: "abc\n');
    expect(str.detail).toBe('unterminated string literal');
    expect([str.line, str.column]).toEqual([1, 7]);
    expect(failure('name: "a\\qb"').detail).toBe("invalid escape sequence '\\q' in string literal");
    expect(failure('input { dims: [1 2] }').detail).toBe("expected ',' or ']' in the list of 'dims', got '2'");
    expect(failure('} name: "x"').detail).toBe("expected a field name, got '}'");
  });
});
