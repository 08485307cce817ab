#!/usr/bin/env node
// The tsi-node command: runs the compiled CLI (npm install builds it through the `prepare` script).
import { existsSync } from 'node:fs';

const cli = new URL('../dist/runtime-node/cli.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write('tsi-node is not built yet: run `npm install` (or `npm run build`) in the package folder first.\n');
  process.exit(1);
}
// `serve` first replaces itself with the same command and V8's young generation at a fixed size
// (runtime-node/young-generation.ts says why); it returns only where it does not.
if (process.argv[2] === 'serve') {
  const { fixYoungGeneration } = await import(new URL('../dist/runtime-node/young-generation.js', import.meta.url).href);
  fixYoungGeneration();
}
const { main } = await import(cli.href);
await main();
