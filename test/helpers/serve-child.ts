/**
 * `tsi-node serve` in a child process (tsx over the sources), for tests of what only the real command
 * does: its flags, its start-up, re-executing itself. Resolves once the HTTP service has started, with
 * its port and the stderr read so far (`stderr()` keeps growing); the caller kills the child.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './server.js';

export interface ServeChild {
  child: ChildProcess;
  port: number;
  stderr: () => string;
}

export async function serveChild(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 60_000): Promise<ServeChild> {
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env });
  return started(child, timeoutMs);
}

/**
 * Waits for a server started some other way (`child`'s stderr piped) to log its HTTP port; kills it
 * if it exits or stays silent first.
 */
export async function started(child: ChildProcess, timeoutMs = 60_000): Promise<ServeChild> {
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start-up line; stderr: ${err}`)), timeoutMs);
      child.stderr!.on('data', () => {
        const h = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
        if (h) {
          clearTimeout(timer);
          resolve(Number(h[1]));
        }
      });
      child.on('exit', (c) => reject(new Error(`exited early with ${c}: ${err}`)));
    });
    return { child, port, stderr: () => err };
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
}
