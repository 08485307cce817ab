/**
 * The `browser` vitest project: `test/browser/*.browser.test.ts` run in real headless Chromium
 * (Debian's /usr/bin/chromium, driven by @vitest/browser-playwright). `--enable-unsafe-webgpu` gives
 * a SwiftShader WebGPU adapter, so the WebGPU path runs for real (slowly). A global setup starts the
 * real Node server (CORS open, browser demo routes on) whose answers the page's must match. Without
 * Chromium the project is left out with a printed reason, and test/node/browser-project.test.ts
 * stands in for it (skipped here, failed under CI, whose `.ci/run` installs Chromium).
 */

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { playwright } from '@vitest/browser-playwright';
import type { TestProjectConfiguration } from 'vitest/config';
import { CHROMIUM, CHROMIUM_ARGS } from './chromium.js';

export function browserProject(): TestProjectConfiguration[] {
  if (!existsSync(CHROMIUM)) {
    console.warn(`[tsi] browser tests skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set TSI_CHROMIUM)`);
    return [];
  }
  return [{
    optimizeDeps: { exclude: ['onnxruntime-web'] },
    test: {
      name: 'browser',
      root: fileURLToPath(new URL('../..', import.meta.url)),
      include: ['test/browser/**/*.browser.test.ts'],
      globalSetup: ['test/browser/global-setup.ts', 'test/browser/llm-folder-setup.ts', 'test/browser/vlm-setup.ts'],
      testTimeout: 120_000,
      hookTimeout: 120_000,
      // One Chromium, one file at a time: CI has two cores and the Node server under test shares them.
      fileParallelism: false,
      browser: {
        enabled: true,
        headless: true,
        screenshotFailures: false,
        instances: [{ browser: 'chromium' }],
        provider: playwright({ launchOptions: { executablePath: CHROMIUM, args: CHROMIUM_ARGS } }),
      },
    },
  }];
}
