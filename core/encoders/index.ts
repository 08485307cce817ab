/**
 * Encoders: transformer encoders served as text in, numbers out — sentence embeddings
 * (embedding.ts) and sequence classification with cross-encoder reranking (classifier.ts). One room
 * because they share a loader and the way a gathered batch becomes one padded ONNX run (encoder.ts).
 */

export { createEmbeddingBackend, EMBEDDING_INPUTS, EMBEDDING_OUTPUTS, POOLINGS, type Pooling } from './embedding.js';
export {
  createClassifierBackend, activate, activationOf, ACTIVATIONS, CLASSIFIER_INPUTS, CLASSIFIER_OUTPUTS, type Activation,
} from './classifier.js';
