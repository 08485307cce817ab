/**
 * finalize() of a Python model as under Triton, through the real server: it runs when the model is
 * unloaded and when the server stops (also `tsi-node serve` stopped by a Ctrl-C, which reaches the
 * Python processes of its process group too: they live through it, as Triton's stub does), what it logs (pb_utils.Logger, and unflushed print output)
 * reaches the server's log, a BLS call from it is refused with Triton's text, and a finalize that
 * never returns is cut off after stub-timeout-seconds with a log line saying so.
 */

import { spawn } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { ROOT } from '../helpers/server.js';
import { eventually, PY_FIXTURES, pythonRepo, startPythonServer, stubProcesses } from '../helpers/python-server.js';

const REFUSED = "BLS in finalize refused: BLS is only supported during the 'execute' function.";

/** A repository with finalize_py and a copy named `hang_py` whose finalize never returns. */
function repository(): ReturnType<typeof pythonRepo> {
  const repo = pythonRepo(['finalize_py']);
  const dir = join(repo.path, 'hang_py');
  cpSync(join(PY_FIXTURES, 'finalize_py'), dir, { recursive: true });
  const cfg = join(dir, 'config.pbtxt');
  writeFileSync(cfg, `${readFileSync(cfg, 'utf8').replace('name: "finalize_py"', 'name: "hang_py"')}\nparameters { key: "FINALIZE_HANG" value { string_value: "true" } }\n`);
  return repo;
}

it('runs at unload and at shutdown, with its log lines delivered and BLS refused with Triton\'s text', async () => {
  const repo = repository();
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['finalize_py'] });
  const has = (text: string) => s.logs.some((l) => l.includes(text));
  try {
    await new HttpClient(s.url).unloadModel('finalize_py');
    expect(await eventually(() => stubProcesses().length === 0, 30_000)).toBe(true);
    for (const text of ['finalize_py finalize called', 'finalize_py finalize printed', `finalize_py ${REFUSED}`]) expect(has(text), text).toBe(true);
    await new HttpClient(s.url).loadModel('finalize_py');
    s.logs.length = 0;
  } finally {
    await s.stop();
    repo.cleanup();
  }
  for (const text of ['finalize_py finalize called', 'finalize_py finalize printed', `finalize_py ${REFUSED}`]) expect(has(text), text).toBe(true);
}, 120_000);

it('a finalize that never returns is cut off after stub-timeout-seconds, with a log line', async () => {
  const repo = repository();
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['hang_py'], python: { 'stub-timeout-seconds': '20' } });
  try {
    const t0 = performance.now();
    await new HttpClient(s.url).unloadModel('hang_py');
    expect(await eventually(() => stubProcesses().length === 0, 40_000)).toBe(true);
    expect(performance.now() - t0).toBeLessThan(40_000);
    expect(s.logs.some((l) => l.includes(`hang_py ${REFUSED}`))).toBe(true);
    expect(s.logs.some((l) => l.includes("hang_py (hang_py_0_0): finalize() did not return within 20 s (stub-timeout-seconds); the Python process was killed"))).toBe(true);
  } finally {
    await s.stop();
    repo.cleanup();
  }
}, 120_000);

it('`tsi-node serve` stopped by Ctrl-C (SIGINT to its whole process group) still runs finalize and logs it', async () => {
  const repo = repository();
  const args = ['serve', '--model-repository', repo.path, '--model-control-mode', 'explicit', '--load-model', 'finalize_py',
    '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false', '--allow-metrics', 'false'];
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
  // detached: a process group of its own, as a shell gives a foreground job.
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  const waiters: (() => void)[] = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.on('data', (d) => {
      out += d;
      for (const w of waiters.splice(0)) w();
    });
  }
  const exit = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  try {
    while (!/Started HTTPService at/.test(out)) {
      if (child.exitCode !== null) throw new Error(`exited before serving: ${out}`);
      await Promise.race([new Promise<void>((r) => waiters.push(r)), exit]);
    }
    process.kill(-child.pid!, 'SIGINT');
    expect(await exit).toBe(0);
    for (const text of ['finalize_py finalize called', 'finalize_py finalize printed', `finalize_py ${REFUSED}`]) expect(out, text).toContain(text);
    // The process that ran finalize is the one that served: the signal did not end it (to be restarted).
    expect(out).not.toContain('KeyboardInterrupt');
    expect(out).not.toContain('is not healthy');
  } finally {
    if (child.exitCode === null) process.kill(-child.pid!, 'SIGKILL');
    repo.cleanup();
  }
}, 120_000);
