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

export interface BuiltServer {
  child: ChildProcess;
  http: number;
  grpc: number;
}

/**
 * The built command (bin/tsi-node.js over dist/) in a child process, as a user starts it, its HTTP
 * and gRPC services on 127.0.0.1 at ports the system picks: for what is measured on the process
 * itself (its resident memory). Resolves once both have started; the caller kills the child.
 */
export async function serveBuilt(repository: string, extra: string[] = []): Promise<BuiltServer> {
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'tsi-node.js'), 'serve', '--model-repository', repository, '--http-address', '127.0.0.1',
    '--http-port', '0', '--grpc-address', '127.0.0.1', '--grpc-port', '0', ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const [http, grpc] = await new Promise<[number, number]>((resolve, reject) => {
    child.stderr!.on('data', (d) => {
      err += d;
      const h = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
      const g = /Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/.exec(err);
      if (h && g) resolve([Number(h[1]), Number(g[1])]);
    });
    child.on('exit', (c) => reject(new Error(`tsi-node exited with ${c}: ${err}`)));
  });
  return { child, http, grpc };
}
