/**
 * The browser project (test/browser/vitest.project.ts) is left out of the run when Chromium is
 * missing, since vitest cannot start it; this stands in for the dropped project so the run says so:
 * skipped with the reason on a developer's machine, failed under CI, whose .ci/run installs Chromium.
 */

import { existsSync } from 'node:fs';
import { describe, it } from 'vitest';
import { CHROMIUM } from '../browser/chromium.js';
import { requireCapability } from '../helpers/capability.js';

describe('browser project', () => {
  it('has the Chromium the browser tests run in', (ctx) => {
    requireCapability(ctx, !!process.env.CI, 'Chromium', existsSync(CHROMIUM) ? undefined : `no executable at ${CHROMIUM} (apt-get install -y chromium, or set TSI_CHROMIUM)`);
  });
});
