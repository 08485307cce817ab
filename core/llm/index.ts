/**
 * LLM serving, the platform-neutral part: the `llm` backend (backend.ts) that a runtime completes
 * with a decoder session (decoder.ts: Node's worker thread, the page's onnxruntime-web), its
 * scheduler and in-flight batching engine, sampling, the byte-level BPE tokenizer, chat templates,
 * statistics, and the OpenAI-compatible API. See docs/llm.md.
 */

export { createLlmBackend, llmModelOf, LLM_INPUTS, LLM_OUTPUTS, type DecoderRuntime, type LlmModelInfo } from './backend.js';
export { kvBytesPerToken, layoutOf, type DecoderLayout, type DecoderSession, type StepRequest, type StepResult } from './decoder.js';
export { KvBatch, type KvArray, type KvGroup, type TensorKit } from './kv-batch.js';
export { hostMoves, isHostKv, type KvData, type KvHandle, type KvMoves, type KvRows, type RowCopy } from './kv-moves.js';
export { completions, getModel, listModels, openAiError } from '../protocol/openai.js';
export { Tokenizer, TextStream } from './tokenizer.js';
export { VARIANTS, VARIANT_RULES, allGpu, type MemoryFacts, type VariantRule } from './model-folder.js';
export { ChatTemplate, type ChatMessage } from './chat.js';
export { LlmStats } from './stats.js';
