/**
 * What a test does when the machine lacks something it needs (a WebGPU adapter, Python, HAProxy,
 * openssl, Chromium): on a developer's machine it is skipped with the capability named, so the run
 * says what was not checked; under CI (CI=true) it fails, because .ci/run installs every one of these
 * and a missing one there is a broken install, not a smaller machine. Platform-neutral: browser tests
 * pass the CI flag the global setup provides, Node tests `!!process.env.CI`.
 */

import { describe, it, type TestContext } from 'vitest';

/** `missing`: why the capability is absent, or undefined when it is there. */
export function requireCapability(ctx: TestContext, ci: boolean, capability: string, missing: string | undefined): void {
  if (missing === undefined) return;
  if (ci) throw new Error(`${capability} is missing under CI, whose .ci/run installs it: ${missing}`);
  ctx.skip(`no ${capability}: ${missing}`);
}

/**
 * `describe` for a block whose every test needs `capability`. With it, the block as written. Without
 * it the block's tests and hooks do not run (its beforeAll would start what is missing) and one test
 * named after the capability stands in for them, skipped or failed as requireCapability says.
 */
export function describeWith(ci: boolean, capability: string, missing: string | undefined): (name: string, fn: () => void) => void {
  return (name, fn) => {
    if (missing === undefined) return void describe(name, fn);
    it(`${name}: needs ${capability}`, (ctx) => requireCapability(ctx, ci, capability, missing));
    describe.skip(name, fn);
  };
}
