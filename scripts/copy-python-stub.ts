/**
 * Build step: tsc compiles the TypeScript of the python backend into dist/, but its Python half
 * (runtime-node/python/stub/*.py: the stub process and triton_python_backend_utils) is not
 * TypeScript, so this copies it beside the compiled backend, where process.ts finds it relative to
 * its own URL (dist/runtime-node/python/stub/). Run as `node dist/scripts/copy-python-stub.js`.
 */

import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('copy-python-stub: no package.json above the script');
    dir = parent;
  }
  return dir;
}

const root = packageRoot();
const from = join(root, 'runtime-node', 'python', 'stub');
const to = join(root, 'dist', 'runtime-node', 'python', 'stub');
mkdirSync(to, { recursive: true });
const files = readdirSync(from).filter((f) => f.endsWith('.py'));
for (const f of files) copyFileSync(join(from, f), join(to, f));
console.log(`copied ${files.length} Python files of the python backend to ${to}`);
