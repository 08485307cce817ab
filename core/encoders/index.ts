/**
 * Encoders: transformer encoders served as text in, numbers out — sentence embeddings
 * (embedding.ts). One room because they share a loader (tokenizer, ONNX encoder on the runtime's
 * onnxruntime backend) and the way a gathered batch becomes one padded run.
 */

export { createEmbeddingBackend, EMBEDDING_INPUTS, EMBEDDING_OUTPUTS, POOLINGS, type Pooling } from './embedding.js';
