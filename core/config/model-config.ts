/**
 * TypeScript shape of Triton's ModelConfig (proto/model_config.proto), in the protocol's snake_case so
 * that config.pbtxt, config.json and the JSON served at /config are the same object. int64 fields are
 * plain numbers (as Triton prints them in JSON). Enums are their names. Every field is optional here:
 * a parsed file sets what it sets; `normalizeModelConfig` fills the defaults Triton fills.
 */

export type ConfigDataType =
  | 'TYPE_INVALID' | 'TYPE_BOOL' | 'TYPE_UINT8' | 'TYPE_UINT16' | 'TYPE_UINT32' | 'TYPE_UINT64'
  | 'TYPE_INT8' | 'TYPE_INT16' | 'TYPE_INT32' | 'TYPE_INT64' | 'TYPE_FP16' | 'TYPE_FP32' | 'TYPE_FP64'
  | 'TYPE_STRING' | 'TYPE_BF16';

export interface ModelTensorReshape { shape?: number[] }

export interface ModelInput {
  name?: string;
  data_type?: ConfigDataType;
  format?: 'FORMAT_NONE' | 'FORMAT_NHWC' | 'FORMAT_NCHW';
  dims?: number[];
  reshape?: ModelTensorReshape;
  is_shape_tensor?: boolean;
  allow_ragged_batch?: boolean;
  optional?: boolean;
  is_non_linear_format_io?: boolean;
}

export interface ModelOutput {
  name?: string;
  data_type?: ConfigDataType;
  dims?: number[];
  reshape?: ModelTensorReshape;
  label_filename?: string;
  is_shape_tensor?: boolean;
  is_non_linear_format_io?: boolean;
}

export interface BatchInput {
  kind?: string;
  target_name?: string[];
  data_type?: ConfigDataType;
  source_input?: string[];
}

export interface BatchOutput {
  target_name?: string[];
  kind?: string;
  source_input?: string[];
}

export interface ModelVersionPolicy {
  latest?: { num_versions?: number };
  all?: Record<string, never>;
  specific?: { versions?: number[] };
}

export type InstanceKind = 'KIND_AUTO' | 'KIND_GPU' | 'KIND_CPU' | 'KIND_MODEL';

export interface ModelInstanceGroup {
  name?: string;
  kind?: InstanceKind;
  count?: number;
  rate_limiter?: { resources?: { name?: string; global?: boolean; count?: number }[]; priority?: number };
  gpus?: number[];
  secondary_devices?: { kind?: string; device_id?: number }[];
  profile?: string[];
  passive?: boolean;
  host_policy?: string;
}

export interface ModelQueuePolicy {
  timeout_action?: 'REJECT' | 'DELAY';
  default_timeout_microseconds?: number;
  allow_timeout_override?: boolean;
  max_queue_size?: number;
}

export interface ModelDynamicBatching {
  preferred_batch_size?: number[];
  max_queue_delay_microseconds?: number;
  preserve_ordering?: boolean;
  priority_levels?: number;
  default_priority_level?: number;
  default_queue_policy?: ModelQueuePolicy;
  priority_queue_policy?: Record<string, ModelQueuePolicy>;
}

export type SequenceControlKind =
  | 'CONTROL_SEQUENCE_START' | 'CONTROL_SEQUENCE_READY' | 'CONTROL_SEQUENCE_END' | 'CONTROL_SEQUENCE_CORRID';

export interface SequenceControl {
  kind?: SequenceControlKind;
  int32_false_true?: number[];
  fp32_false_true?: number[];
  bool_false_true?: boolean[];
  data_type?: ConfigDataType;
}

export interface SequenceInitialState {
  data_type?: ConfigDataType;
  dims?: number[];
  zero_data?: boolean;
  data_file?: string;
  name?: string;
}

export interface SequenceState {
  input_name?: string;
  output_name?: string;
  data_type?: ConfigDataType;
  dims?: number[];
  initial_state?: SequenceInitialState[];
  use_same_buffer_for_input_output?: boolean;
  use_growable_memory?: boolean;
}

export interface ModelSequenceBatching {
  direct?: { max_queue_delay_microseconds?: number; minimum_slot_utilization?: number };
  oldest?: {
    max_candidate_sequences?: number;
    preferred_batch_size?: number[];
    max_queue_delay_microseconds?: number;
    preserve_ordering?: boolean;
  };
  max_sequence_idle_microseconds?: number;
  control_input?: { name?: string; control?: SequenceControl[] }[];
  state?: SequenceState[];
  iterative_sequence?: boolean;
}

export interface EnsembleStep {
  model_name?: string;
  model_version?: number;
  input_map?: Record<string, string>;
  output_map?: Record<string, string>;
  model_namespace?: string;
}

export interface ModelEnsembling {
  step?: EnsembleStep[];
  /** Per ensemble request, at most this many requests in flight at each step (0 = unbounded). */
  max_inflight_requests?: number;
}

export interface ModelOptimizationPolicy {
  graph?: { level?: number };
  priority?: 'PRIORITY_DEFAULT' | 'PRIORITY_MAX' | 'PRIORITY_MIN';
  cuda?: Record<string, unknown>;
  execution_accelerators?: {
    gpu_execution_accelerator?: { name?: string; parameters?: Record<string, string> }[];
    cpu_execution_accelerator?: { name?: string; parameters?: Record<string, string> }[];
  };
  input_pinned_memory?: { enable?: boolean };
  output_pinned_memory?: { enable?: boolean };
  gather_kernel_buffer_threshold?: number;
  eager_batching?: boolean;
}

export interface ModelWarmup {
  name?: string;
  batch_size?: number;
  inputs?: Record<string, {
    data_type?: ConfigDataType; dims?: number[]; zero_data?: boolean; random_data?: boolean; input_data_file?: string;
  }>;
  count?: number;
}

export interface ModelConfig {
  name?: string;
  platform?: string;
  backend?: string;
  runtime?: string;
  version_policy?: ModelVersionPolicy;
  max_batch_size?: number;
  input?: ModelInput[];
  output?: ModelOutput[];
  batch_input?: BatchInput[];
  batch_output?: BatchOutput[];
  optimization?: ModelOptimizationPolicy;
  dynamic_batching?: ModelDynamicBatching;
  sequence_batching?: ModelSequenceBatching;
  ensemble_scheduling?: ModelEnsembling;
  instance_group?: ModelInstanceGroup[];
  default_model_filename?: string;
  cc_model_filenames?: Record<string, string>;
  metric_tags?: Record<string, string>;
  parameters?: Record<string, { string_value?: string }>;
  model_warmup?: ModelWarmup[];
  model_operations?: Record<string, unknown>;
  model_transaction_policy?: { decoupled?: boolean };
  model_repository_agents?: Record<string, unknown>;
  response_cache?: { enable?: boolean };
  model_metrics?: Record<string, unknown>;
}
