/**
 * `tsi-node gpu install cuda`: onnxruntime's CUDA (and TensorRT) provider for Linux x64, fetched from the
 * npm registry as pinned packages, checked, and put beside the onnxruntime core it was built with, in
 * tsi's cache. onnxruntime-node's own install script fetches the provider from a host many machines
 * cannot reach; npm holds Microsoft's 1.29.0 provider build in `com.github.asus4.onnxruntime.linux-x64-gpu`.
 *
 * Why a core of its own in the cache rather than pinning the onnxruntime-node dependency to 1.29.0:
 * the provider bridge has no version check (a provider of another version crashes the process), so the
 * provider needs its own core, but everyone else (CPU, WebGPU, the browser bundle's ORT version) keeps
 * the newer dependency; only a `serve` that uses CUDA runs on the cached 1.29.0 core (cuda-env.ts).
 *
 * Every package is checked against its pinned sha512 integrity and every native file against its
 * pinned sha256 before anything is placed. All work happens in a staging folder inside the cache, and
 * one rename at the end makes the install visible: offline, on a mismatch or on any other failure
 * nothing half-installed is left, and an earlier install stays as it was.
 */

import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import { createReadStream, createWriteStream, existsSync, readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A package fetched from the registry, with the hashes it must have. */
export interface PinnedPackage {
  name: string;
  version: string;
  /** npm's `dist.integrity` of the tarball (sha512, base64). */
  integrity: string;
  /** Paths inside the package (below `package/`) that are kept, each with its sha256 (hex), or '' for files not hashed. */
  files: Record<string, string>;
}

/** What one provider install needs: the provider package, the matching core and its JS API package. */
export interface CudaPins {
  /** The onnxruntime version the provider and the core share. */
  ortVersion: string;
  provider: PinnedPackage;
  core: PinnedPackage;
  common: PinnedPackage;
}

const X64 = 'bin/napi-v6/linux/x64';
const PLUGINS = 'Plugins/Linux/x64';

/** The pinned packages: Microsoft's onnxruntime 1.29.0 CUDA 13 provider build, and onnxruntime-node 1.29.0. */
export const CUDA_PINS: CudaPins = {
  ortVersion: '1.29.0',
  provider: {
    name: 'com.github.asus4.onnxruntime.linux-x64-gpu',
    version: '0.4.9',
    integrity: 'sha512-FopIhNE/Ng+v2X65wVc9clPCBCvhvA53Hxo2U0Kf5fGdVsC7iCA+mZ0KLWggcQAj7TIZ6pNidR4AC10g74Xo6w==',
    files: {
      [`${PLUGINS}/libonnxruntime_providers_shared.so`]: 'c6a12593396095f5670160e284c35d1700b7708cf3037b7042e2a5200ccae772',
      [`${PLUGINS}/libonnxruntime_providers_cuda.so`]: '56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037',
      [`${PLUGINS}/libonnxruntime_providers_tensorrt.so`]: 'ef6071798a339038ad66c428fb1a809cf8e499bffc3b6870e4e8bc4f4c6a6320',
      LICENSE: '',
    },
  },
  core: {
    name: 'onnxruntime-node',
    version: '1.29.0',
    integrity: 'sha512-WjiVVB72riILz8HbYvxvmjKyE/WmkYoSfKY++axo5jAR609HQg8MwiG/HhShpTcJfmmAdzxxmB+MMST3A+SiPA==',
    files: {
      [`${X64}/libonnxruntime.so.1`]: '89688f5cf51c7e31befbb7b9101bc027799009b18d1baa9a5b1146a72e69538d',
      [`${X64}/onnxruntime_binding.node`]: 'd182244fbce3a2398b60e92a65a4a2ee2d399ea73a57928a6482e875b9745e3d',
      'package.json': '',
      dist: '',
    },
  },
  common: {
    name: 'onnxruntime-common',
    version: '1.29.0',
    integrity: 'sha512-/F63/e2VJoaVXGGNu6S5QH7jivBThGO95OzAVXXQ8hTta/b1QxI8udHa6cI3+3mAb5WWIIaMMwfZw01oivjJ1g==',
    files: { 'package.json': '', dist: '' },
  },
};

/** The provider libraries placed beside the core, in the order onnxruntime loads them. */
export const PROVIDER_FILES = ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so', 'libonnxruntime_providers_tensorrt.so'];

/** What an install leaves in the package folder, so doctor and serve can tell what is there. */
export const INSTALL_RECORD = 'tsi-cuda-install.json';

/** tsi's cache: TSI_CACHE_DIR, else $XDG_CACHE_HOME/tsi, else ~/.cache/tsi. */
export function tsiCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.TSI_CACHE_DIR) return env.TSI_CACHE_DIR;
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'tsi');
}

/** The folder an install of `pins` makes: an onnxruntime-node package that `require` loads (ort.ts). */
export function cudaCoreDir(cacheDir = tsiCacheDir(), pins: CudaPins = CUDA_PINS): string {
  return join(cacheDir, 'cuda', `onnxruntime-node-${pins.ortVersion}`);
}

export interface CudaInstallRecord {
  ortVersion: string;
  provider: string;
  core: string;
  registry: string;
  installedAt: string;
}

/** The install in `cacheDir`, when there is a complete one. */
export function installedCuda(cacheDir = tsiCacheDir(), pins: CudaPins = CUDA_PINS): { dir: string; record: CudaInstallRecord } | undefined {
  const dir = cudaCoreDir(cacheDir, pins);
  try {
    const record = JSON.parse(readFileSync(join(dir, INSTALL_RECORD), 'utf8')) as CudaInstallRecord;
    return existsSync(join(dir, X64, 'libonnxruntime_providers_cuda.so')) ? { dir, record } : undefined;
  } catch {
    return undefined;
  }
}

export interface CudaInstallOptions {
  /** The npm registry's URL; default: npm's configured one. */
  registry?: string;
  cacheDir?: string;
  pins?: CudaPins;
  /** Progress in words; `done` closes a line (a download finished). */
  progress?: (line: string, done: boolean) => void;
}

/** npm's configured registry, or the public one when npm cannot be asked. */
export async function npmRegistry(): Promise<string> {
  try {
    const { stdout } = await run(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['config', 'get', 'registry'], { timeout: 15_000 });
    const url = stdout.trim();
    if (/^https?:\/\//.test(url)) return url;
  } catch { /* no npm on the path: the public registry */ }
  return 'https://registry.npmjs.org/';
}

/** The registry's tarball URL for an unscoped package (what `npm pack` downloads). */
export function tarballUrl(registry: string, pkg: PinnedPackage): string {
  return `${registry.replace(/\/+$/, '')}/${pkg.name}/-/${pkg.name}-${pkg.version}.tgz`;
}

const mib = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

/** Downloads `url` to `file`, hashing as it streams; returns npm's integrity string of what arrived. */
async function download(url: string, file: string, label: string, progress: CudaInstallOptions['progress']): Promise<string> {
  let res: Response;
  try {
    res = await fetch(url);
  } catch (err) {
    const cause = (err as { cause?: Error }).cause?.message ?? (err as Error).message;
    throw new Error(`cannot reach the npm registry for ${label} (${url}: ${cause}); nothing was installed. Check the network or name a reachable registry with --registry`);
  }
  if (!res.ok || !res.body) throw new Error(`the npm registry answered ${res.status} ${res.statusText} for ${label} (${url}); nothing was installed`);
  const total = Number(res.headers.get('content-length') ?? 0);
  const hash = createHash('sha512');
  const out = createWriteStream(file);
  let got = 0;
  let shown = 0;
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      got += chunk.length;
      if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      const now = Date.now();
      if (now - shown > 250) {
        shown = now;
        progress?.(`downloading ${label}: ${mib(got)}${total ? ` of ${mib(total)} (${Math.floor((got / total) * 100)}%)` : ''}`, false);
      }
    }
  } catch (err) {
    out.destroy();
    throw new Error(`the download of ${label} broke off after ${mib(got)} (${(err as Error).message}); nothing was installed`);
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  progress?.(`downloaded ${label}: ${mib(got)}`, true);
  return `sha512-${hash.digest('base64')}`;
}

async function sha256(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Fetches one pinned package into `stage/<name>/`: integrity checked, only its kept files unpacked and hashed. */
async function fetchPackage(pkg: PinnedPackage, registry: string, stage: string, progress: CudaInstallOptions['progress']): Promise<string> {
  const label = `${pkg.name}@${pkg.version}`;
  const tgz = join(stage, `${pkg.name}.tgz`);
  const url = tarballUrl(registry, pkg);
  const integrity = await download(url, tgz, label, progress);
  if (integrity !== pkg.integrity) {
    throw new Error(`${label} from ${url} fails its integrity check (expected ${pkg.integrity}, got ${integrity}): refusing it; nothing was installed`);
  }
  const dir = join(stage, pkg.name);
  await mkdir(dir);
  const members = Object.keys(pkg.files).map((f) => `package/${f}`);
  try {
    await run('tar', ['-xzf', tgz, '-C', dir, ...members], { maxBuffer: 1 << 20 });
  } catch (err) {
    throw new Error(`${label}: cannot unpack ${members.join(', ')} (${(err as { stderr?: string }).stderr?.trim() || (err as Error).message}); nothing was installed`);
  }
  await rm(tgz);
  for (const [f, want] of Object.entries(pkg.files)) {
    if (!want) continue;
    const got = await sha256(join(dir, 'package', f));
    if (got !== want) throw new Error(`${label}: ${f} has sha256 ${got}, expected ${want}: refusing it; nothing was installed`);
  }
  return join(dir, 'package');
}

/**
 * Installs the provider and its core into the cache; returns the package folder. Throws with the reason
 * (and leaves the cache as it was) when anything cannot be fetched or fails a check.
 */
export async function installCuda(opts: CudaInstallOptions = {}): Promise<{ dir: string; record: CudaInstallRecord }> {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the CUDA provider on npm is built for Linux x64 only, not ${process.platform}-${process.arch}`);
  }
  const pins = opts.pins ?? CUDA_PINS;
  const cacheDir = opts.cacheDir ?? tsiCacheDir();
  const registry = opts.registry ?? await npmRegistry();
  const root = join(cacheDir, 'cuda');
  await mkdir(root, { recursive: true });
  // Staging folders a killed install left behind go first: they are never an install.
  for (const e of await readdir(root)) if (e.startsWith('.staging-')) await rm(join(root, e), { recursive: true, force: true });
  const stage = await mkdtemp(join(root, '.staging-'));
  try {
    const provider = await fetchPackage(pins.provider, registry, stage, opts.progress);
    const core = await fetchPackage(pins.core, registry, stage, opts.progress);
    const common = await fetchPackage(pins.common, registry, stage, opts.progress);
    // The core package as npm would lay it out (its JS API beside it in node_modules), with the
    // provider libraries in the binding's folder, where onnxruntime looks for them.
    await mkdir(join(core, 'node_modules'));
    await rename(common, join(core, 'node_modules', pins.common.name));
    for (const f of PROVIDER_FILES) await cp(join(provider, PLUGINS, f), join(core, X64, f));
    await cp(join(provider, 'LICENSE'), join(core, X64, 'LICENSE.providers'));
    const record: CudaInstallRecord = {
      ortVersion: pins.ortVersion,
      provider: `${pins.provider.name}@${pins.provider.version}`,
      core: `${pins.core.name}@${pins.core.version}`,
      registry,
      installedAt: new Date().toISOString(),
    };
    await writeFile(join(core, INSTALL_RECORD), JSON.stringify(record, null, 2) + '\n');
    const dir = cudaCoreDir(cacheDir, pins);
    // The old install moves aside before the new one takes its name, and goes only after.
    const old = existsSync(dir) ? join(stage, 'previous') : undefined;
    if (old) await rename(dir, old);
    try {
      await rename(core, dir);
    } catch (err) {
      if (old) await rename(old, dir);
      throw err;
    }
    return { dir, record };
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}
