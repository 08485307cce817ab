/**
 * docs/cli.md is generated from the CLI's own --help (scripts/gen-cli-docs.ts): a flag added, renamed
 * or re-described without `npm run docs:cli` fails here, so the reference never drifts from the CLI.
 */

import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { cliDocPath, cliDocs } from '../../scripts/gen-cli-docs.js';

describe('docs/cli.md', () => {
  it('is what `npm run docs:cli` writes today', () => {
    const text = cliDocs();
    expect(text).toContain('## `tsi-node serve`');
    expect(text).toContain('--model-repository');
    expect(readFileSync(cliDocPath, 'utf8'), 'docs/cli.md is stale: run `npm run docs:cli`').toBe(text);
  });
});
