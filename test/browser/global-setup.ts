/**
 * Global setup of the browser project (runs in Node): starts the real tsi-node server over the
 * default repository, with CORS open so the test page may call it and with the browser routes on, so
 * the page can also read the repository by URL from `/repository/`. Tests get its URL by `inject`.
 */

import type { TestProject } from 'vitest/node';
import { createLogger } from '../../core/index.js';
import { startServer } from '../../runtime-node/index.js';
import { MODELS } from '../helpers/server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    nodeUrl: string;
    /** CI=true: a capability CI installs (WebGPU on SwiftShader) must be there (test/helpers/capability.ts). */
    ci: boolean;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const running = await startServer({
    modelRepositories: [MODELS], httpPort: 0, httpAddress: '127.0.0.1', corsOrigin: '*', browserDemo: true,
    log: createLogger(() => {}),
  });
  project.provide('nodeUrl', `http://127.0.0.1:${running.http!.port}`);
  project.provide('ci', !!process.env.CI);
  return async () => {
    await running.stop(5000);
  };
}
