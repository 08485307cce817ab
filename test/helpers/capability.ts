/**
 * What a test does when the machine lacks something it needs (a WebGPU adapter, Python, HAProxy,
 * openssl, Chromium): on a developer's machine it is skipped with the capability named, so the run
 * says what was not checked; under CI (CI=true) it fails, because .ci/run installs every one of these
 * and a missing one there is a broken install, not a smaller machine. Platform-neutral: browser tests
 * pass the CI flag the global setup provides.
 */

import type { TestContext } from 'vitest';

/** `missing`: why the capability is absent, or undefined when it is there. */
export function requireCapability(ctx: TestContext, ci: boolean, capability: string, missing: string | undefined): void {
  if (missing === undefined) return;
  if (ci) throw new Error(`${capability} is missing under CI, whose .ci/run installs it: ${missing}`);
  ctx.skip(`no ${capability}: ${missing}`);
}
