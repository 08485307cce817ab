/**
 * The onnxruntime backend for Node: backend.ts loads a model and starts one worker thread per instance
 * (worker.ts holds that instance's onnxruntime-node session, so inference never blocks the event
 * loop); session-options.ts maps a config to ORT session options and opens a session with the
 * first execution provider that works (the llm backend's decoders open theirs the same way); channel.ts is the shared-memory hand-off between the main thread and a worker; info.ts reads
 * a model's inputs and outputs from the ONNX protobuf for auto-complete without a session.
 */

export * from './backend.js';
export { computeCores, intraOpThreads, NO_SPINNING, sessionOptions } from './session-options.js';
