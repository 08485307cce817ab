/**
 * Vitest configuration. Node tests start real servers on port 0 and run real ONNX models in
 * onnxruntime-node; the default `forks` pool keeps the native addon happy (vmThreads breaks ORT's
 * typed-array checks across realms). The `browser` project runs test/browser/*.browser.test.ts in
 * headless Chromium.
 */
import { configDefaults, defineConfig } from 'vitest/config';
import { browserProject } from './test/browser/vitest.project.js';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          // Real-Chromium tests belong to the browser project (test/browser/vitest.project.ts).
          exclude: [...configDefaults.exclude, 'test/**/*.browser.test.ts'],
          environment: 'node',
          testTimeout: 60_000,
          hookTimeout: 60_000,
          pool: 'forks',
        },
      },
      ...browserProject(),
    ],
  },
});
