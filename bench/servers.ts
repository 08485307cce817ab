/**
 * Starting and stopping the benchmarks' servers as child processes. Each prints "PORT <n>" once it
 * listens. tsi runs from the compiled build in dist/ when it is there (what `tsi-node serve` runs), else
 * from the sources under tsx (bench/tsi-server.ts), whose helper code makes every call a little dearer;
 * `server: 'dist' | 'tsx'` forces one and `dist` points at another build folder.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..');

export interface Child {
  child: ChildProcess;
  port: number;
}

/** Runs `node <argv>` from the repository root and waits for its "PORT <n>" line. */
export function spawnServer(argv: string[], what: string): Promise<Child> {
  const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'inherit'], cwd: ROOT });
  return new Promise<Child>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.once('exit', (code) => reject(new Error(`${what} exited with code ${code}`)));
  });
}

export async function stopServer(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/** A bench script from this folder under tsx (for the baselines written in TypeScript). */
export const benchScript = (name: string, args: string[]) => ['--import', 'tsx', join(HERE, name), ...args];

/**
 * The node arguments that start tsi over `repo`, and which build they run. `work` is a scratch folder
 * for the compiled server's entry file (a file, not `-e`: worker threads inherit the exec flags).
 */
export function tsiServer(repo: string, work: string, opts: { server?: string; dist?: string } = {}): { argv: string[]; build: string } {
  const distDir = opts.dist ? resolve(opts.dist) : join(ROOT, 'dist');
  const entry = join(distDir, 'runtime-node', 'index.js');
  const useDist = opts.server ? opts.server === 'dist' : existsSync(entry);
  if (!useDist) return { argv: benchScript('tsi-server.ts', [repo]), build: 'sources under tsx' };
  const file = join(work, 'tsi-server.mjs');
  writeFileSync(file, `import { startServer } from ${JSON.stringify(pathToFileURL(entry).href)};
const s = await startServer({ modelRepositories: [process.argv[2]], httpPort: 0, httpAddress: '127.0.0.1', logVerbose: 0 });
process.stdout.write('PORT ' + s.http.port + '\\n');
process.on('SIGTERM', () => void s.stop(5000).then(() => process.exit(0)));
`);
  return { argv: [file, repo], build: `compiled (${distDir})` };
}
