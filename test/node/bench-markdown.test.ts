/**
 * `npm run bench:<name> -- --markdown` (bench/markdown.ts): a bench run with the flag replaces its own
 * section of docs/performance.md and nothing else, and the bench's flag parser never sees the flag.
 * Run here on a scratch copy of the file with a bench of a few lines, as a real process.
 */

import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from '../helpers/server.js';

function runBench(dir: string, doc: string, args: string[]) {
  const bench = join(dir, 'tiny.ts');
  writeFileSync(bench, [
    `import ${JSON.stringify(join(ROOT, 'bench', 'markdown.ts'))};`,
    `import { parseArgs } from 'node:util';`,
    `const { values } = parseArgs({ options: { rounds: { type: 'string', default: '1' } } });`,
    `console.log('| rounds | ratio |');`,
    `console.log('| ' + values.rounds + ' | 1.23 |');`,
  ].join('\n'));
  return spawnSync(process.execPath, ['--import', 'tsx', bench, ...args], { env: { ...process.env, TSI_PERFORMANCE_DOC: doc, TSI_README_DOC: join(dir, 'README.md') }, encoding: 'utf8' });
}

describe('bench --markdown', () => {
  it('writes, then replaces, only its own section', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tsi-bench-md-'));
    try {
      const doc = join(dir, 'performance.md');
      writeFileSync(doc, '# Performance\n\nprose\n\n<!-- bench:other -->\nkept\n<!-- /bench:other -->\n\n<!-- bench:tiny -->\nold\n<!-- /bench:tiny -->\n\nmore prose\n');
      writeFileSync(join(dir, 'README.md'), '# readme\n');
      const first = runBench(dir, doc, ['--markdown', '--rounds', '3']);
      expect(first.status, first.stderr).toBe(0);
      const text = readFileSync(doc, 'utf8');
      expect(text).toContain('| 3 | 1.23 |');
      expect(text).toContain('`npm run bench:tiny -- --rounds 3`');
      expect(text).toMatch(/cores, /);
      expect(text).not.toContain('\nold\n');
      expect(text).toContain('<!-- bench:other -->\nkept\n<!-- /bench:other -->');
      expect(text.startsWith('# Performance\n\nprose\n')).toBe(true);
      expect(text.trimEnd().endsWith('more prose')).toBe(true);

      expect(readFileSync(join(dir, 'README.md'), 'utf8'), 'a README without the markers is not touched').toBe('# readme\n');

      const plain = runBench(dir, doc, ['--rounds', '5']);
      expect(plain.status, plain.stderr).toBe(0);
      expect(readFileSync(doc, 'utf8')).toBe(text);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes the same section into the README where the README shows that bench', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tsi-bench-md-'));
    try {
      const doc = join(dir, 'performance.md');
      writeFileSync(doc, '# Performance\n');
      writeFileSync(join(dir, 'README.md'), '# readme\n\n<!-- bench:tiny -->\nold\n<!-- /bench:tiny -->\n\nrest\n');
      const run = runBench(dir, doc, ['--markdown', '--rounds', '4']);
      expect(run.status, run.stderr).toBe(0);
      const readme = readFileSync(join(dir, 'README.md'), 'utf8');
      expect(readme).toContain('| 4 | 1.23 |');
      expect(readme).not.toContain('\nold\n');
      expect(readme.trimEnd().endsWith('rest')).toBe(true);
      expect(readFileSync(doc, 'utf8')).toContain('| 4 | 1.23 |');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
