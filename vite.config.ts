/**
 * Vitest configuration. Node tests start real servers on port 0 and run real ONNX models in
 * onnxruntime-node; the default `forks` pool keeps the native addon happy (vmThreads breaks ORT's
 * typed-array checks across realms).
 */
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
