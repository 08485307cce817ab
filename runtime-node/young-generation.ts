/**
 * `serve` runs with V8's young generation at a fixed size: before it loads anything it replaces its own
 * process image (execve: the same PID, so process managers and Triton's qa scripts, which watch the PID
 * they started, see no change) with the same command plus `--min-semi-space-size=16
 * --max-semi-space-size=16`.
 *
 * Why: V8 grows and shrinks the young generation by its own heuristics, 1 to 16 MiB per semi-space,
 * and every resize shows in the resident set. Measured with Triton's L0_http many-chunks test (100
 * requests of a million one-byte chunks, each refused past 65,536; the client sends 6 bytes per
 * write, so the server does thousands of small reads per request): a server started plainly grew by
 * 10-20 MiB over the 100 requests in one run and shrank by 22-24 MiB in the next, where Triton allows
 * 1 MiB; with the young generation fixed the same runs moved by -4.6 to +0.2 MiB. A fixed young
 * generation costs at most 32 MiB of resident memory that a loaded server reaches anyway (16 MiB is
 * V8's own ceiling); the flags cannot be set later, V8 sizes the generation when the heap is made.
 *
 * bin/tsi-node.js calls it for `serve`, before the CLI's modules load (so the exec costs a bare Node
 * start, ~50 ms); `main()` called in-process (the tests' children) does not re-execute.
 * Node 22.15+ has process.execve; on Node 20 the libc call goes through koffi (already a dependency,
 * for shared memory), after clearing close-on-exec on stdin, stdout and stderr, which Node sets.
 * Nothing happens when the flags (or any semi-space flag) are already there, with TSI_YOUNG_GENERATION=
 * off, under an IPC channel (a forked child: its channel would not survive), or where neither way of
 * exec is available: the server then runs as started.
 */

import { createRequire } from 'node:module';

export const YOUNG_GENERATION_FLAGS = ['--min-semi-space-size=16', '--max-semi-space-size=16'];
const ENV = 'TSI_YOUNG_GENERATION';

export type YoungGenerationPlan = { action: 'exec'; file: string; argv: string[]; env: NodeJS.ProcessEnv } | { action: 'keep'; why: string };

/**
 * Pure: whether to re-execute, and with what. The new image is run through the name this one was
 * started by (`argv0`, when it is a path: e.g. a link named `tritonserver`, which `ps | grep
 * tritonserver` must still find after the exec, as Triton's qa scripts look for their server so),
 * else through the node binary itself.
 */
export function youngGenerationPlan(
  execPath: string, execArgv: readonly string[], argv: readonly string[], env: NodeJS.ProcessEnv, platform: string, argv0: string = execPath,
): YoungGenerationPlan {
  if (env[ENV] === 'fixed') return { action: 'keep', why: 're-executed already' };
  if (env[ENV] === 'off') return { action: 'keep', why: `${ENV}=off` };
  if ([...execArgv, ...(env.NODE_OPTIONS ?? '').split(/\s+/)].some((a) => /^--(min|max)[-_]semi[-_]space[-_]size\b/.test(a))) {
    return { action: 'keep', why: 'semi-space flags given' };
  }
  if (env.NODE_CHANNEL_FD !== undefined) return { action: 'keep', why: 'an IPC channel would not survive exec' };
  if (platform !== 'linux' && platform !== 'darwin') return { action: 'keep', why: `no execve on ${platform}` };
  const file = argv0.includes('/') ? argv0 : execPath;
  return { action: 'exec', file, argv: [file, ...YOUNG_GENERATION_FLAGS, ...execArgv, ...argv.slice(1)], env: { ...env, [ENV]: 'fixed' } };
}

/**
 * Replaces this process with the planned one; returns only when it does not (why, for a debug line).
 * Call before anything has been written to stdout or stderr, or started.
 */
export function fixYoungGeneration(): string {
  const plan = youngGenerationPlan(process.execPath, process.execArgv, process.argv, process.env, process.platform, process.argv0);
  if (plan.action === 'keep') return plan.why;
  const execve = (process as { execve?: (file: string, args: string[], env: NodeJS.ProcessEnv) => never }).execve;
  if (typeof execve === 'function') execve(plan.file, plan.argv, plan.env);
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const libc = koffi.load(null);
    const fcntl = libc.func('int fcntl(int fd, int cmd, ...)');
    const F_SETFD = 2;
    for (const fd of [0, 1, 2]) fcntl(fd, F_SETFD, 'int', 0);
    const exec = libc.func('int execve(const char *path, const char **argv, const char **envp)');
    const envp = Object.entries(plan.env).filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${v}`);
    exec(plan.file, [...plan.argv, null], [...envp, null]);
    return 'execve failed';
  } catch (err) {
    return `koffi could not be loaded: ${(err as Error).message.split('\n')[0]}`;
  }
}

/** The log line of a re-executed serve (undefined otherwise). */
export function youngGenerationNote(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env[ENV] === 'fixed'
    ? `V8 young generation fixed at 16 MiB semi-spaces (re-executed with ${YOUNG_GENERATION_FLAGS.join(' ')}, so resident memory does not move with V8's resizing; ${ENV}=off to keep V8's own)`
    : undefined;
}
