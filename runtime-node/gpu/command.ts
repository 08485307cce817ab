/**
 * The command line's GPU side: `tsi-node gpu install cuda` (cuda-install.ts behind it), and the step
 * `serve` takes first, re-executing itself so the CUDA provider finds its libraries (cuda-env.ts).
 */

import { spawn } from 'node:child_process';
import { Command } from 'commander';
import { CUDA_PINS, installCuda, tsiCacheDir } from './cuda-install.js';
import { findCudaLibraries, loadable, missingSentence, REEXEC_ENV, serveCudaPlan } from './cuda-env.js';
import { ORT_DIR_ENV, ortVersion } from './ort.js';

export function gpuCommand(): Command {
  const gpu = new Command('gpu').description('GPU execution providers beyond the bundled WebGPU one (docs/gpu.md)');
  gpu
    .command('install')
    .description(`fetch onnxruntime's CUDA and TensorRT providers (${CUDA_PINS.provider.name}@${CUDA_PINS.provider.version}, onnxruntime ${CUDA_PINS.ortVersion}, CUDA 13, Linux x64) from the npm registry with the onnxruntime-node ${CUDA_PINS.ortVersion} core they match, check their pinned hashes and install them into tsi's cache; \`serve\` then runs KIND_GPU models on CUDA where it finds the CUDA 13 libraries`)
    .argument('<provider>', 'the provider to install: cuda (brings TensorRT\'s provider library too)')
    .option('--registry <url>', 'the npm registry to fetch from (default: npm\'s configured registry)')
    .option('--cache-dir <dir>', 'where tsi keeps it (default: $TSI_CACHE_DIR, else $XDG_CACHE_HOME/tsi, else ~/.cache/tsi)')
    .action(async (provider: string, o: { registry?: string; cacheDir?: string }) => {
      if (provider !== 'cuda') {
        process.stderr.write(`tsi-node gpu install: unknown provider '${provider}': only 'cuda' is installable (WebGPU is bundled; TensorRT's provider library comes with cuda)\n`);
        process.exitCode = 2;
        return;
      }
      const tty = process.stderr.isTTY;
      try {
        const r = await installCuda({
          registry: o.registry,
          cacheDir: o.cacheDir ?? tsiCacheDir(),
          progress: (line, done) => {
            if (tty) process.stderr.write(`\r\x1b[K${line}${done ? '\n' : ''}`);
            else if (done) process.stderr.write(`${line}\n`);
          },
        });
        process.stdout.write(`installed the CUDA provider (${r.record.provider}) with the onnxruntime ${r.record.ortVersion} core it matches into ${r.dir}\n`);
        const libs = findCudaLibraries();
        process.stdout.write(loadable(libs)
          ? `CUDA libraries found (${libs.libraryPath.join(', ') || 'system loader cache'}): tsi-node serve runs KIND_GPU models on CUDA${libs.missing.length > 0 ? `; ${missingSentence(libs)}` : ''}\n`
          : `CUDA cannot load yet: ${missingSentence(libs)}\n`);
      } catch (err) {
        process.stderr.write(`${tty ? '\n' : ''}tsi-node gpu install cuda: ${(err as Error).message}\n`);
        process.exitCode = 1;
      }
    });
  return gpu;
}

/**
 * Before `serve` loads anything: with the CUDA provider installed and its libraries found, runs this
 * same command again in a child process whose loader path has them and which loads the matching core
 * (cuda-env.ts says why a child), passing signals through, and resolves true when it has ended
 * (process.exitCode set to the child's). Otherwise resolves false, after a warning when the provider
 * is installed but cannot load.
 */
export async function reexecForCuda(warn: (message: string) => void): Promise<boolean> {
  const plan = serveCudaPlan();
  if (plan.action === 'warn') warn(plan.message);
  if (plan.action !== 'reexec') return false;
  const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { env: plan.env, stdio: 'inherit' });
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2'];
  const forward = (s: NodeJS.Signals) => child.kill(s);
  for (const s of signals) process.on(s, forward);
  const code = await new Promise<number>((resolve) => {
    child.on('exit', (c, s) => resolve(c ?? (s ? 128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1, SIGKILL: 9 } as Record<string, number>)[s]! || 1 : 1)));
    child.on('error', () => resolve(1));
  });
  for (const s of signals) process.off(s, forward);
  process.exitCode = code;
  return true;
}

/** The log line a `serve` re-executed for CUDA starts with: which core it runs on and the library path. */
export function cudaServeNote(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (!env[REEXEC_ENV] || !env[ORT_DIR_ENV]) return undefined;
  return `CUDA provider: running on onnxruntime-node ${ortVersion()} from ${env[ORT_DIR_ENV]} (the provider's own core), with the CUDA libraries on LD_LIBRARY_PATH=${env.LD_LIBRARY_PATH ?? ''}`;
}
