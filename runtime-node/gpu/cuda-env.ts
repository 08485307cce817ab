/**
 * The CUDA 13 libraries the CUDA provider needs, where this machine has them, and the environment a
 * `serve` that uses CUDA runs in. The provider NEEDS libcudart, libcublas, libcublasLt, libcurand and the
 * driver's libcuda, and dlopens cuDNN, cuFFT and NVRTC when a model uses them. NVIDIA's pip wheels hold
 * them all (what PyTorch for CUDA 13 installs: `site-packages/nvidia/cu13/lib`, `nvidia/cudnn/lib`), and
 * so does a CUDA toolkit; the driver's library is in the system's loader cache.
 *
 * The dynamic loader reads LD_LIBRARY_PATH once, when a process starts, so setting it later does not
 * reach the provider's dlopen: `serve` re-executes itself with the path and TSI_ORT_DIR (ort.ts) set,
 * once, before anything loads onnxruntime (serveCudaEnv, used by cli.ts).
 */

import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { installedCuda, tsiCacheDir } from './cuda-install.js';
import { ORT_DIR_ENV } from './ort.js';

export interface CudaLibrary {
  soname: string;
  /** Loaded when the provider loads (NEEDED), or only when a model's operators call for it. */
  when: 'load' | 'on use';
  /** What it is, for the doctor's table. */
  what: string;
  /** The pip wheel that holds it (CUDA 13 builds); absent for the driver's own library. */
  wheel?: string;
}

export const CUDA_LIBRARIES: CudaLibrary[] = [
  { soname: 'libcuda.so.1', when: 'load', what: 'the NVIDIA driver' },
  { soname: 'libcudart.so.13', when: 'load', what: 'CUDA runtime', wheel: 'nvidia-cuda-runtime' },
  { soname: 'libcublas.so.13', when: 'load', what: 'cuBLAS', wheel: 'nvidia-cublas' },
  { soname: 'libcublasLt.so.13', when: 'load', what: 'cuBLASLt', wheel: 'nvidia-cublas' },
  { soname: 'libcurand.so.10', when: 'load', what: 'cuRAND', wheel: 'nvidia-curand' },
  { soname: 'libcudnn.so.9', when: 'on use', what: 'cuDNN 9, for convolutions', wheel: 'nvidia-cudnn-cu13' },
  { soname: 'libcufft.so.12', when: 'on use', what: 'cuFFT, for FFT operators', wheel: 'nvidia-cufft' },
  { soname: 'libnvrtc.so.13', when: 'on use', what: 'NVRTC, for kernels compiled at run time', wheel: 'nvidia-cuda-nvrtc' },
];

export interface CudaLibraryScan {
  /** soname → the file found, for each library found. */
  found: Record<string, string>;
  missing: CudaLibrary[];
  /** The folders to put on LD_LIBRARY_PATH (those found outside the system loader's cache), in order. */
  libraryPath: string[];
  /** The command that installs what is missing, when pip wheels hold it. */
  fix?: string;
}

export interface CudaScanOptions {
  env?: NodeJS.ProcessEnv;
  /** Python site-packages folders; default: python3's own, and the virtual or conda environment's. */
  sitePackages?: string[];
  /** Toolkit and system folders searched after the wheels; default: /usr/local/cuda's and the loader cache. */
  systemDirs?: string[];
  /** Read `ldconfig -p` (the system loader cache); default true. */
  ldconfig?: boolean;
}

/** The site-packages folders of python3 (when it runs) and of an active virtual or conda environment. */
export function pythonSitePackages(env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  const r = spawnSync('python3', ['-c', 'import site, sys\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)'], { encoding: 'utf8', timeout: 5000 });
  if (r.status === 0) out.push(...r.stdout.split('\n').map((s) => s.trim()).filter(Boolean));
  for (const prefix of [env.VIRTUAL_ENV, env.CONDA_PREFIX]) {
    if (!prefix) continue;
    const lib = join(prefix, 'lib');
    try {
      for (const py of readdirSync(lib)) if (py.startsWith('python3')) out.push(join(lib, py, 'site-packages'));
    } catch { /* no lib folder */ }
  }
  return [...new Set(out)];
}

/** Where NVIDIA's wheels put libraries under one site-packages: nvidia/cu13/lib first, then nvidia/<part>/lib. */
function wheelDirs(site: string): string[] {
  const nvidia = join(site, 'nvidia');
  const out = [join(nvidia, 'cu13', 'lib')];
  try {
    for (const part of readdirSync(nvidia).sort()) if (part !== 'cu13') out.push(join(nvidia, part, 'lib'));
  } catch { /* no nvidia wheels here */ }
  return out.filter((d) => existsSync(d));
}

/** soname → path from the system loader cache (`ldconfig -p`), x86-64 entries only. */
function loaderCache(): Map<string, string> {
  const out = new Map<string, string>();
  try {
    const text = execFileSync('ldconfig', ['-p'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
    for (const line of text.split('\n')) {
      const m = /^\s*(\S+) \(([^)]*)\) => (\S+)/.exec(line);
      if (m && (m[2]!.includes('x86-64') || !m[2]!.includes('64'))) if (!out.has(m[1]!)) out.set(m[1]!, m[3]!);
    }
  } catch { /* no ldconfig: only the folders searched */ }
  return out;
}

/**
 * Finds each CUDA library: LD_LIBRARY_PATH's folders first (what the user chose), then the pip wheels'
 * folders under each site-packages, then the toolkit's folders, then the system loader cache.
 */
export function findCudaLibraries(opts: CudaScanOptions = {}): CudaLibraryScan {
  const env = opts.env ?? process.env;
  const userDirs = (env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  const sites = opts.sitePackages ?? pythonSitePackages(env);
  const systemDirs = opts.systemDirs ?? ['/usr/local/cuda/lib64', '/usr/local/cuda/targets/x86_64-linux/lib', '/usr/local/nvidia/lib64'];
  const dirs = [...new Set([...userDirs, ...sites.flatMap(wheelDirs), ...systemDirs])];
  const cache = opts.ldconfig === false ? new Map<string, string>() : loaderCache();
  const found: Record<string, string> = {};
  const path: string[] = [];
  const missing: CudaLibrary[] = [];
  for (const lib of CUDA_LIBRARIES) {
    const dir = dirs.find((d) => existsSync(join(d, lib.soname)));
    if (dir) {
      found[lib.soname] = join(dir, lib.soname);
      if (!path.includes(dir)) path.push(dir);
    } else if (cache.has(lib.soname)) found[lib.soname] = cache.get(lib.soname)!;
    else missing.push(lib);
  }
  const wheels = [...new Set(missing.flatMap((l) => (l.wheel ? [l.wheel] : [])))];
  return { found, missing, libraryPath: path, fix: wheels.length > 0 ? `pip install ${wheels.join(' ')}` : undefined };
}

/** The sentence doctor and serve print for what is missing. */
export function missingSentence(scan: CudaLibraryScan): string {
  const parts = scan.missing.map((l) => `${l.soname} (${l.what}${l.when === 'on use' ? ', loaded when a model needs it' : ''})`);
  const driver = scan.missing.some((l) => !l.wheel) ? '; libcuda.so.1 comes with the NVIDIA driver (in a container: the NVIDIA container toolkit)' : '';
  return `missing ${parts.join(', ')}${scan.fix ? `: ${scan.fix} (or install the CUDA 13 toolkit and cuDNN 9)` : ''}${driver}`;
}

/** Whether the provider can load here: every library it NEEDS at load is found. */
export const loadable = (scan: CudaLibraryScan) => scan.missing.every((l) => l.when !== 'load');

export type ServeCudaPlan =
  | { action: 'none'; reason: string }
  | { action: 'ready' }
  | { action: 'reexec'; env: NodeJS.ProcessEnv; libraryPath: string[] }
  | { action: 'warn'; message: string };

/** Set in the re-executed process, so it never re-executes again. */
export const REEXEC_ENV = 'TSI_CUDA_REEXEC';

/**
 * What `serve` does about CUDA before anything loads onnxruntime: nothing (no provider installed, not
 * Linux x64, or TSI_CUDA=off), re-execute itself with the library path and the cached core, or go on
 * with a warning that names the missing library and its fix.
 */
export function serveCudaPlan(env: NodeJS.ProcessEnv = process.env, scan?: () => CudaLibraryScan): ServeCudaPlan {
  if (env[REEXEC_ENV]) return { action: 'ready' };
  if (env.TSI_CUDA === 'off') return { action: 'none', reason: 'TSI_CUDA=off' };
  if (process.platform !== 'linux' || process.arch !== 'x64') return { action: 'none', reason: 'CUDA provider is for Linux x64' };
  const installed = installedCuda(tsiCacheDir(env));
  if (!installed) return { action: 'none', reason: 'CUDA provider not installed' };
  const libs = (scan ?? (() => findCudaLibraries({ env })))();
  if (!loadable(libs)) {
    return { action: 'warn', message: `the CUDA provider is installed (${installed.dir}) but cannot load: ${missingSentence(libs)}; KIND_GPU models use WebGPU or the CPU` };
  }
  const current = (env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  // The user's own path keeps its precedence; the folders found are added after it.
  const libraryPath = [...current, ...libs.libraryPath.filter((d) => !current.includes(d))];
  return {
    action: 'reexec',
    libraryPath: libs.libraryPath,
    env: { ...env, LD_LIBRARY_PATH: libraryPath.join(':'), [ORT_DIR_ENV]: installed.dir, [REEXEC_ENV]: '1' },
  };
}
