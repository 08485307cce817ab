/**
 * tsi's platform-neutral public surface: the server, its HTTP protocol as a Web-standard handler, the
 * Backend interface backends implement, the config pipeline and the tensor helpers. Runtimes (Node,
 * browser) import only from here.
 */

export * from './types.js';
export * from './errors.js';
export * from './backend.js';
export type * from './model-config.js';
export * from './config.js';
export * from './tensor.js';
export { InferenceServer, TSI_VERSION, type ServerOptions, type ModelControlMode } from './server.js';
export { ModelRepository, type RepositorySource, type IndexEntry, type LoadOverrides } from './repository.js';
export { ModelVersion, type ModelState } from './model.js';
export { ModelStats, type FailureReason } from './stats.js';
export { PendingRequest, validateRequest, requestPrefix, type SequenceFlags } from './request.js';
export { createHttpApp, chooseEncoding, errorResponse, json, readBody, DEFAULT_MAX_INPUT_SIZE, type HttpOptions } from './http.js';
export { decodeInferRequest, encodeInferResponse, HEADER_LENGTH, type OutputEncoding, type DecodedRequest } from './v2-codec.js';
export { DefaultScheduler, InstancePool, runExecution, type Scheduler, type SchedulerContext } from './scheduler.js';
export { createScheduler } from './schedulers.js';
export { createLogger, type LogLevel } from './logger.js';
