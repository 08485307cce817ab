/**
 * `tsi-node gpu install cuda` and the CUDA library discovery, without a GPU and without the real 171 MiB
 * download: packages with the real ones' layout are built here with tar, and a registry on 127.0.0.1
 * serves their tarballs at npm's tarball paths. What is checked: integrity and sha256 pins, where the
 * provider lands (beside the matching core, which `require` loads), refusal on a mismatch with nothing
 * left behind (and an earlier install kept), a clear error when the registry cannot be reached (the real
 * command, real pins), and discovery over a fake site-packages tree the way pip's nvidia wheels lay it out.
 */

import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cudaCoreDir, installCuda, installedCuda, PROVIDER_FILES, tarballUrl, type CudaPins, type PinnedPackage } from '../../runtime-node/gpu/cuda-install.js';
import { findCudaLibraries, loadable, serveCudaPlan } from '../../runtime-node/gpu/cuda-env.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const X64 = 'bin/napi-v6/linux/x64';
const linuxX64 = process.platform === 'linux' && process.arch === 'x64';

const work = mkdtempSync(join(tmpdir(), 'tsi-cuda-install-'));
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Writes `files` under <dir>/package/ and packs them as npm does; returns the pin with real hashes. */
function pack(name: string, version: string, files: Record<string, string | Buffer>, hashed: string[], kept: string[]): { pin: PinnedPackage; tgz: Buffer } {
  const dir = join(work, `src-${name}`);
  for (const [f, body] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, 'package', f)), { recursive: true });
    writeFileSync(join(dir, 'package', f), body);
  }
  const tgzPath = join(work, `${name}-${version}.tgz`);
  execFileSync('tar', ['-czf', tgzPath, '-C', dir, 'package']);
  const tgz = readFileSync(tgzPath);
  const pinFiles: Record<string, string> = {};
  for (const f of kept) pinFiles[f] = hashed.includes(f) ? sha256(Buffer.from(files[f]!)) : '';
  return { pin: { name, version, integrity: `sha512-${createHash('sha512').update(tgz).digest('base64')}`, files: pinFiles }, tgz };
}

const plugin = (f: string) => `Plugins/Linux/x64/${f}`;
const provider = pack('fake-ort-gpu', '0.0.1', {
  ...Object.fromEntries(PROVIDER_FILES.map((f) => [plugin(f), randomBytes(4096)])),
  [`${plugin('libonnxruntime_providers_cuda.so')}.meta`]: 'unity metadata, not kept',
  LICENSE: 'MIT', 'package.json': '{"name":"fake-ort-gpu","version":"0.0.1"}',
}, PROVIDER_FILES.map(plugin), [...PROVIDER_FILES.map(plugin), 'LICENSE']);
const core = pack('fake-ort-node', '9.9.0', {
  'package.json': JSON.stringify({ name: 'fake-ort-node', version: '9.9.0', main: 'dist/index.js' }),
  'dist/index.js': "module.exports = { coreVersion: '9.9.0', common: require('fake-ort-common').name };",
  [`${X64}/libonnxruntime.so.1`]: randomBytes(2048),
  [`${X64}/onnxruntime_binding.node`]: randomBytes(1024),
  'bin/napi-v6/darwin/arm64/onnxruntime_binding.node': 'another platform, not kept',
}, [`${X64}/libonnxruntime.so.1`, `${X64}/onnxruntime_binding.node`], [`${X64}/libonnxruntime.so.1`, `${X64}/onnxruntime_binding.node`, 'package.json', 'dist']);
const common = pack('fake-ort-common', '9.9.0', {
  'package.json': JSON.stringify({ name: 'fake-ort-common', version: '9.9.0', main: 'dist/index.js' }),
  'dist/index.js': "module.exports = { name: 'fake-ort-common' };",
}, [], ['package.json', 'dist']);
const pins: CudaPins = { ortVersion: '9.9.0', provider: provider.pin, core: core.pin, common: common.pin };

/** The local registry: npm's tarball paths; `tamper` flips a byte of the provider's tarball. */
let server: Server;
let registry = '';
let tamper = false;
const requested: string[] = [];
beforeAll(async () => {
  const byPath = new Map([provider, core, common].map((p) => [new URL(tarballUrl('http://x/', p.pin)).pathname, p.tgz]));
  server = createServer((req, res) => {
    requested.push(req.url!);
    let body = byPath.get(req.url!);
    if (!body) return void res.writeHead(404).end('not found');
    if (tamper && req.url!.includes(provider.pin.name)) body = Buffer.concat([body.subarray(0, 100), Buffer.from([body[100]! ^ 1]), body.subarray(101)]);
    res.writeHead(200, { 'content-length': body.length, 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  registry = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  rmSync(work, { recursive: true, force: true });
});

/** Everything under the cache's cuda/ folder, as relative paths: what an install left. */
const leftIn = (cache: string) => (existsSync(join(cache, 'cuda')) ? readdirSync(join(cache, 'cuda')) : []);

describe.runIf(linuxX64)('tsi-node gpu install cuda (a local registry, packages with the real layout)', () => {
  it('checks the integrity and the hashes, and puts the provider beside the matching core, which require loads', async () => {
    const cache = join(work, 'cache-ok');
    const lines: string[] = [];
    const r = await installCuda({ registry, cacheDir: cache, pins, progress: (l, done) => done && lines.push(l) });
    expect(r.dir).toBe(cudaCoreDir(cache, pins));
    for (const f of PROVIDER_FILES) expect(readFileSync(join(r.dir, X64, f))).toEqual(readFileSync(join(work, 'src-fake-ort-gpu/package', plugin(f))));
    expect(existsSync(join(r.dir, X64, 'libonnxruntime.so.1'))).toBe(true);
    // Only the linux-x64 binaries and the JS are kept; the JS API package sits where require finds it.
    expect(existsSync(join(r.dir, 'bin/napi-v6/darwin'))).toBe(false);
    const loaded = (await import(join(r.dir, 'dist/index.js'))).default as { coreVersion: string; common: string };
    expect(loaded).toEqual({ coreVersion: '9.9.0', common: 'fake-ort-common' });
    expect(installedCuda(cache, pins)?.record).toMatchObject({ provider: 'fake-ort-gpu@0.0.1', core: 'fake-ort-node@9.9.0', registry });
    expect(lines).toEqual(['downloaded fake-ort-gpu@0.0.1: 0.0 MiB', 'downloaded fake-ort-node@9.9.0: 0.0 MiB', 'downloaded fake-ort-common@9.9.0: 0.0 MiB']);
    expect(leftIn(cache)).toEqual(['onnxruntime-node-9.9.0']);
  });

  it('refuses a tarball that fails its integrity check, leaves nothing, and keeps an earlier install', async () => {
    const cache = join(work, 'cache-tampered');
    await expect((async () => {
      tamper = true;
      try {
        await installCuda({ registry, cacheDir: cache, pins });
      } finally {
        tamper = false;
      }
    })()).rejects.toThrow(/fake-ort-gpu@0\.0\.1 from http:\/\/127\.0\.0\.1:\d+\/fake-ort-gpu\/-\/fake-ort-gpu-0\.0\.1\.tgz fails its integrity check \(expected sha512-.*, got sha512-.*\): refusing it; nothing was installed/);
    expect(leftIn(cache)).toEqual([]);
    const first = await installCuda({ registry, cacheDir: cache, pins });
    tamper = true;
    await expect(installCuda({ registry, cacheDir: cache, pins })).rejects.toThrow(/integrity check/);
    tamper = false;
    expect(leftIn(cache)).toEqual(['onnxruntime-node-9.9.0']);
    expect(installedCuda(cache, pins)?.record.installedAt).toBe(first.record.installedAt);
  });

  it('refuses a native file whose sha256 differs from its pin, and leaves nothing', async () => {
    const cache = join(work, 'cache-sha');
    const so = plugin('libonnxruntime_providers_cuda.so');
    const wrong: CudaPins = { ...pins, provider: { ...pins.provider, files: { ...pins.provider.files, [so]: '0'.repeat(64) } } };
    await expect(installCuda({ registry, cacheDir: cache, pins: wrong })).rejects.toThrow(
      `fake-ort-gpu@0.0.1: ${so} has sha256 ${pins.provider.files[so]}, expected ${'0'.repeat(64)}: refusing it; nothing was installed`);
    expect(leftIn(cache)).toEqual([]);
  });

  it('the command says the registry cannot be reached, exits 1 and installs nothing (real pins, no network)', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as { port: number }).port;
    await new Promise((r) => closed.close(r));
    const cache = join(work, 'cache-offline');
    const args = ['node', 'tsi-node', 'gpu', 'install', 'cuda', '--registry', `http://127.0.0.1:${port}/`, '--cache-dir', cache];
    const code0 = `import('./runtime-node/cli.ts').then((m) => m.main(${JSON.stringify(args)}))`;
    const child = spawn(process.execPath, ['--import', 'tsx', '-e', code0], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => child.on('exit', r));
    expect(code).toBe(1);
    expect(err).toContain(`tsi-node gpu install cuda: cannot reach the npm registry for com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 (http://127.0.0.1:${port}/com.github.asus4.onnxruntime.linux-x64-gpu/-/com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz: connect ECONNREFUSED`);
    expect(err).toContain('nothing was installed');
    expect(leftIn(cache)).toEqual([]);
  }, 60_000);
});

describe('CUDA library discovery', () => {
  /** A site-packages tree as pip's CUDA 13 wheels lay it out, and a driver folder on LD_LIBRARY_PATH. */
  function tree(without: string[] = []): { site: string; driver: string } {
    const base = mkdtempSync(join(work, 'site-'));
    const site = join(base, 'site-packages');
    const driver = join(base, 'driver');
    const files: Record<string, string> = {
      'nvidia/cu13/lib/libcudart.so.13': '', 'nvidia/cu13/lib/libcublas.so.13': '', 'nvidia/cu13/lib/libcublasLt.so.13': '',
      'nvidia/cu13/lib/libcurand.so.10': '', 'nvidia/cu13/lib/libcufft.so.12': '', 'nvidia/cu13/lib/libnvrtc.so.13': '',
      'nvidia/cudnn/lib/libcudnn.so.9': '',
    };
    for (const [f, body] of Object.entries(files)) {
      if (without.some((w) => f.endsWith(w))) continue;
      mkdirSync(dirname(join(site, f)), { recursive: true });
      writeFileSync(join(site, f), body);
    }
    mkdirSync(driver);
    writeFileSync(join(driver, 'libcuda.so.1'), '');
    return { site, driver };
  }

  it('finds every library in the wheels\' folders and the driver on LD_LIBRARY_PATH, in that order', () => {
    const { site, driver } = tree();
    const scan = findCudaLibraries({ env: { LD_LIBRARY_PATH: driver }, sitePackages: [site], systemDirs: [], ldconfig: false });
    expect(scan.missing).toEqual([]);
    expect(scan.found['libcudnn.so.9']).toBe(join(site, 'nvidia/cudnn/lib/libcudnn.so.9'));
    expect(scan.found['libcublasLt.so.13']).toBe(join(site, 'nvidia/cu13/lib/libcublasLt.so.13'));
    expect(scan.libraryPath).toEqual([driver, join(site, 'nvidia/cu13/lib'), join(site, 'nvidia/cudnn/lib')]);
    expect(loadable(scan)).toBe(true);
  });

  it('names what is missing and the pip command that installs it', () => {
    const { site, driver } = tree(['libcublasLt.so.13', 'libcublas.so.13', 'libcudnn.so.9']);
    const scan = findCudaLibraries({ env: { LD_LIBRARY_PATH: driver }, sitePackages: [site], systemDirs: [], ldconfig: false });
    expect(scan.missing.map((l) => l.soname)).toEqual(['libcublas.so.13', 'libcublasLt.so.13', 'libcudnn.so.9']);
    expect(scan.fix).toBe('pip install nvidia-cublas nvidia-cudnn-cu13');
    expect(loadable(scan)).toBe(false);
    // cuDNN alone is loaded on use: the provider still loads without it.
    const noCudnn = findCudaLibraries({ env: { LD_LIBRARY_PATH: driver }, sitePackages: [tree(['libcudnn.so.9']).site], systemDirs: [], ldconfig: false });
    expect(loadable(noCudnn)).toBe(true);
  });

  it.runIf(linuxX64)('serve re-executes with the library path and the cached core, or warns with the fix', async () => {
    const cache = join(work, 'cache-serve');
    const { dir } = await installCuda({ registry, cacheDir: cache, pins });
    const { site, driver } = tree();
    // The plan reads the install with the real pins' name; point it at the fake install's folder name.
    const real = cudaCoreDir(cache);
    mkdirSync(dirname(real), { recursive: true });
    execFileSync('cp', ['-r', dir, real]);
    const scan = () => findCudaLibraries({ env: { LD_LIBRARY_PATH: `${driver}:/opt/other` }, sitePackages: [site], systemDirs: [], ldconfig: false });
    const plan = serveCudaPlan({ TSI_CACHE_DIR: cache, LD_LIBRARY_PATH: `${driver}:/opt/other` }, scan);
    expect(plan).toMatchObject({ action: 'reexec', env: { TSI_ORT_DIR: real, TSI_CUDA_REEXEC: '1', LD_LIBRARY_PATH: `${driver}:/opt/other:${join(site, 'nvidia/cu13/lib')}:${join(site, 'nvidia/cudnn/lib')}` } });
    expect(serveCudaPlan({ TSI_CACHE_DIR: cache, TSI_CUDA_REEXEC: '1' }, scan)).toEqual({ action: 'ready' });
    expect(serveCudaPlan({ TSI_CACHE_DIR: cache, TSI_CUDA: 'off' }, scan).action).toBe('none');
    const broken = serveCudaPlan({ TSI_CACHE_DIR: cache }, () => findCudaLibraries({ env: {}, sitePackages: [tree(['libcurand.so.10']).site], systemDirs: [], ldconfig: false }));
    expect(broken.action).toBe('warn');
    expect((broken as { message: string }).message).toMatch(/cannot load: missing libcuda\.so\.1 \(the NVIDIA driver\), libcurand\.so\.10 \(cuRAND\): pip install nvidia-curand .*libcuda\.so\.1 comes with the NVIDIA driver/);
    expect(serveCudaPlan({ TSI_CACHE_DIR: join(work, 'empty-cache') }, scan)).toEqual({ action: 'none', reason: 'CUDA provider not installed' });
  });
});
