/**
 * Helpers for the Python backend tests: a throw-away repository made of fixture models
 * (test/fixtures/python) and default models (models/), the real server over it (whose python
 * backend runs them), and a look at which Python stub processes this test process has started (to
 * check that unload and stop leave none behind).
 */

import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../core/index.js';
import { startServer, type NodeServerOptions } from '../../runtime-node/index.js';
import { MODELS, ROOT, type TestServer } from './server.js';

export const PY_FIXTURES = join(ROOT, 'test', 'fixtures', 'python');

/** A temporary repository with copies of the named fixture models and default models. */
export function pythonRepo(fixtures: string[], models: string[] = []): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), 'tsi-pyrepo-'));
  for (const f of fixtures) cpSync(join(PY_FIXTURES, f), join(path, f), { recursive: true });
  for (const m of models) cpSync(join(MODELS, m), join(path, m), { recursive: true });
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/**
 * The real server (HTTP, and gRPC/metrics when asked) over `modelRepositories`; `python` are the
 * python backend's settings, as `--backend-config python,<key>=<value>` gives them.
 */
export async function startPythonServer(
  opts: Partial<NodeServerOptions> & { modelRepositories: string[]; python?: Record<string, string> },
): Promise<TestServer> {
  const logs: string[] = [];
  const log = createLogger((_l, line) => logs.push(line), opts.logVerbose ?? 1);
  const running = await startServer({
    httpPort: 0, httpAddress: '127.0.0.1', log, ...opts, backendConfig: { ...opts.backendConfig, python: opts.python ?? {} },
  });
  return Object.assign(running, { url: `http://127.0.0.1:${running.http!.port}`, logs });
}

/** Live (not zombie) tsi_python_stub processes whose parent is this process. */
export function stubProcesses(): { pid: number; cmdline: string }[] {
  const out: { pid: number; cmdline: string }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command (which may hold spaces) start past the last ')'.
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) !== process.pid || state === 'Z') continue;
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      if (cmdline.includes('tsi_python_stub.py')) out.push({ pid: Number(name), cmdline });
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

/** Polls `check` until it returns true or `ms` pass. */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 5000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Whether /dev/shm holds files this process created for the python backend (it must not). */
export function leftoverShm(): string[] {
  if (!existsSync('/dev/shm')) return [];
  return readdirSync('/dev/shm').filter((f) => f.startsWith(`tsi-python-${process.pid}-`));
}
