/**
 * tsi's platform-neutral public surface: the server, its HTTP protocol as a Web-standard handler, the
 * Backend interface backends implement, the config pipeline and the tensor helpers. Runtimes (Node,
 * browser) import only from here.
 */

export * from './types.js';
export * from './errors.js';
export * from './backend.js';
export type * from './config/model-config.js';
export * from './config/pipeline.js';
export { GPU_ACCELERATORS, acceleratorParameters, namedGpuAccelerators, withChosenAccelerators, type GpuAccelerator } from './config/accelerators.js';
export * from './tensor.js';
export { InferenceServer, TSI_VERSION, type ServerOptions, type ModelControlMode } from './server.js';
export { ModelRepository, NOT_LOADED_BUDGET, type RepositorySource, type IndexEntry, type LoadOverrides } from './repository/repository.js';
export {
  PIN_PARAMETER, Residency, parseMemoryBudget, versionMemory, type LoadReason, type ResidencyCounts, type ResidencyOptions, type UnloadReason,
} from './repository/residency.js';
export { ModelVersion, type ModelState } from './repository/model.js';
export { ModelStats, type FailureReason } from './stats.js';
export { PendingRequest, validateRequest, requestPrefix, type SequenceFlags } from './request.js';
export {
  describeValue, checkJsonParam, checkProtoParam, checkDatatype, checkShape, REQUEST_PARAMS, INPUT_PARAMS, OUTPUT_PARAMS,
  TRITON_GRPC_PARAMS, RESERVED_PREFIX_MESSAGE_GRPC, forwardHeaders, headerForwardPattern, type ParamRules,
} from './protocol/request-params.js';
export {
  createHttpApp, inferEndpoint, chooseEncoding, errorResponse, errorReply, json, readBody, DEFAULT_MAX_INPUT_SIZE, DEFAULT_COMPRESSION,
  type CompressionPolicy,
  type HttpOptions, type HttpReply, type InferHttpRequest,
} from './protocol/http.js';
export {
  createSagemakerApp, createVertexAiApp, vertexAiDefaultModel, cloudHeaderLength, SAGEMAKER_BINARY, VERTEX_AI_BINARY, VERTEX_AI_REDIRECT,
  type SagemakerModelStore, type SagemakerOptions, type SagemakerInferenceType, type VertexAiOptions,
} from './protocol/cloud-endpoints.js';
export { readRequestBody, readWebBody, tooLarge, type BodyKind, type BodySource, type BodyOptions } from './protocol/http-body.js';
export { decodeInferRequest, encodeInferResponse, markRequestBody, HEADER_LENGTH, type OutputEncoding, type DecodedRequest } from './protocol/v2-codec.js';
export { InstancePool, runExecution, type Scheduler, type SchedulerContext, type SchedulerDelay } from './scheduling/scheduler.js';
export { createScheduler } from './scheduling/schedulers.js';
export { DynamicBatchScheduler, decideBatch, batchPolicy, type BatchPolicy, type BatchDecision } from './scheduling/batcher.js';
export { RequestQueue, queuePolicy, type QueuePolicy } from './scheduling/queue.js';
export { SequenceBatcher, sequenceInternalInputs } from './scheduling/sequence.js';
export { createLogger, type ConfigurableLogger, type LogFormat, type LogLevel } from './logger.js';
export {
  ServerExtensions, parseRestrictions, httpCategory, grpcCategory, API_CATEGORIES,
  parseApiKey, parseApiKeyFile, bearerKey, checkApiKey,
  type ApiCategory, type Restrictions, type ExtensionOptions, type ApiKeyScope, type ApiKeyRule, type AuthRefusal,
} from './extensions.js';
export { SharedMemoryManager, type SystemShmProvider, type ShmHandle, type ShmRef, type SystemRegionStatus } from './shared-memory.js';
export {
  TraceManager, Trace, attachTrace, traceOf, traceContextOf, type TraceSetting, type TraceWriter, type TraceLevel, type TraceSettingUpdate,
  type TraceMode, type TraceContext, type TraceExporter, type TraceAttribute,
} from './trace.js';
export { LogSettings, controllableLogger, parseTraceConfig, legacyTraceSpecs, type LegacyTraceFlags, parseTraceUpdate, traceSettingsJson, type LogSettingsJson, type TraceSettingsJson } from './settings.js';
export {
  ModelControl, RepositoryPoller, checkOverridePath, checkModelName, memoryStager, CODE_UPLOAD_FLAG,
  type ModelFileStager, type StagedFiles, type LoadParamValue, type ModelCodePolicy,
} from './repository/model-control.js';
export { checkTraceModel } from './protocol/http-admin.js';
export { createEnsembleBackend, ensembleComposingModels, validateEnsemble } from './ensemble.js';
export { CustomMetrics, type MetricKind } from './custom-metrics.js';
export { MetricsRegistry, MetricFamily, MetricSeries, type MetricSample, type MetricSource, type MetricType } from './metrics.js';
export { ResponseCache, parseCacheConfig, parseCacheFlags, requestKey, type CacheStats } from './cache.js';
export { ModelRateLimit, RateLimiter, parseRateLimitResource, type RateLimitMode, type ResourceLimit } from './scheduling/rate-limiter.js';
export { generate, generateRequest, generateResponseJson } from './protocol/generate.js';
export { anthropicErrorBody } from './protocol/anthropic-messages.js';
export {
  createEmbeddingBackend, EMBEDDING_INPUTS, EMBEDDING_OUTPUTS, POOLINGS, type Pooling,
  createClassifierBackend, activate, activationOf, ACTIVATIONS, CLASSIFIER_INPUTS, CLASSIFIER_OUTPUTS, type Activation,
} from './encoders/index.js';
export { createWhisperBackend, WHISPER_INPUTS, WHISPER_OUTPUTS, AUDIO_ACCEPTED, audioSamples, decodeAudio, encodeWav, logMel, type Segment } from './speech/index.js';
export {
  createLlmBackend, llmModelOf, KvBatch, Tokenizer, TextStream, ChatTemplate, LlmStats, layoutOf, kvBytesPerToken, VARIANTS, VARIANT_RULES, allGpu,
  type DecoderRuntime, type DecoderSession, type DecoderLayout, type StepRequest, type StepResult, type LlmModelInfo, type TensorKit, type KvArray, type KvGroup, type MemoryFacts, type VariantRule,
} from './llm/index.js';
export {
  JsModelHost, ModelRequest, ModelTensor, InferError, instantiateModel, toTensor, toTensors, errorOf, findModelFile,
  type JsHost, type InitInfo, type ModelTrace, type TraceSlot, type InitializeArgs, type ModelResponse, type ResponseSender, type BlsRequest,
  type BlsResponse, type TensorInit, type TensorValue, type TensorsInit, type WireRequest, type WireResponse,
} from './js-model.js';
