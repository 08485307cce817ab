/**
 * The real CUDA provider loaded without a GPU: stub libcudart/libcublas/libcublasLt/libcurand/libcuda,
 * built here with gcc from the symbols the provider imports (with the symbol versions it asks for, since
 * onnxruntime dlopens providers with RTLD_NOW), on the loader path of a child process that runs tsi's own
 * session opening (openSession) on the cached onnxruntime core (TSI_ORT_DIR, as `serve` sets it).
 *
 * Where it stops: onnxruntime loads libonnxruntime_providers_shared.so and _cuda.so, the provider's
 * static initialisers register its kernels with the stub runtime, the provider factory is created, and
 * the CUDA execution provider's constructor calls `cudaSetDevice(device_id)`
 * (onnxruntime/core/providers/cuda/cuda_execution_provider.cc), which the stub answers with error 100
 * (no device): session creation fails there with "CUDA failure 100: ... expr=cudaSetDevice(...)", and
 * openSession falls back to the CPU with that line as the reason. No kernel runs.
 *
 * It needs the real provider (171 MiB, kept out of CI): it runs where `tsi-node gpu install cuda` has
 * put it in the cache (TSI_CACHE_DIR or the default), and is skipped, with that reason, elsewhere.
 */

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { installedCuda } from '../../runtime-node/gpu/cuda-install.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const installed = installedCuda();
const gcc = (() => {
  try {
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    execFileSync('nm', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const missing = !installed ? 'the CUDA provider is not in tsi\'s cache (tsi-node gpu install cuda; 171 MiB, kept out of CI)' : !gcc ? 'gcc and nm' : undefined;

/** Stub libraries for every CUDA library the provider imports from, each symbol answering "no device". */
function buildStubs(provider: string, dir: string): void {
  const undefinedSyms = execFileSync('nm', ['-D', '--undefined-only', provider], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .split('\n').map((l) => l.trim().split(/\s+/).pop() ?? '').filter((s) => s.includes('@lib'));
  for (const lib of ['libcudart.so.13', 'libcublas.so.13', 'libcublasLt.so.13']) {
    const syms = [...new Set(undefinedSyms.filter((s) => s.endsWith(`@${lib}`)).map((s) => s.slice(0, s.indexOf('@'))))];
    const c = ['static const char msg[] = "tsi stub: no CUDA device";'];
    // 100 is cudaErrorNoDevice (and an error for cuBLAS too); the *String/*Name calls must return text.
    for (const s of syms) c.push(/(ErrorString|ErrorName|StatusString|StatusName)$/.test(s) ? `const char* ${s}(void) { return msg; }` : `long ${s}(void) { return 100; }`);
    writeFileSync(join(dir, `${lib}.c`), c.join('\n') + '\n');
    writeFileSync(join(dir, `${lib}.map`), `${lib} { global: *; };\n`);
    execFileSync('gcc', ['-shared', '-fPIC', '-o', join(dir, lib), join(dir, `${lib}.c`), `-Wl,--version-script=${join(dir, `${lib}.map`)}`, `-Wl,-soname,${lib}`]);
  }
  // Needed by name only (the provider calls nothing in them directly).
  for (const lib of ['libcurand.so.10', 'libcuda.so.1']) {
    writeFileSync(join(dir, `${lib}.c`), 'int tsi_stub(void) { return 0; }\n');
    execFileSync('gcc', ['-shared', '-fPIC', '-o', join(dir, lib), join(dir, `${lib}.c`), `-Wl,-soname,${lib}`]);
  }
}

describe('the CUDA provider against stub CUDA libraries (no GPU)', () => {
  it.skipIf(missing !== undefined)(`loads the provider and stops at device selection (cudaSetDevice), then falls back to the CPU${missing ? ` [skipped: needs ${missing}]` : ''}`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tsi-cuda-stub-'));
    try {
      buildStubs(join(installed!.dir, 'bin/napi-v6/linux/x64/libonnxruntime_providers_cuda.so'), dir);
      const code = `
        const { loadOrt, ortVersion } = await import('./runtime-node/gpu/ort.ts');
        const { openSession } = await import('./runtime-node/onnx/session-options.ts');
        const ort = loadOrt();
        const opened = await openSession(ort, 'models/simple/1/model.onnx', {}, [{ name: 'cuda', deviceId: 0 }, { name: 'cpu' }], new SharedArrayBuffer(4));
        console.log(JSON.stringify({ version: ortVersion(), backends: ort.listSupportedBackends(), provider: opened.provider, failures: opened.failures }));`;
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
        cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LD_LIBRARY_PATH: dir, TSI_ORT_DIR: installed!.dir },
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      const exit = await new Promise((r) => child.on('exit', r));
      expect(exit, err).toBe(0);
      const r = JSON.parse(out.trim().split('\n').pop()!) as { version: string; backends: { name: string }[]; provider: string; failures: string[] };
      expect(r.version).toBe(installed!.record.ortVersion);
      expect(r.backends.map((b) => b.name)).toContain('cuda');
      expect(r.provider).toBe('cpu');
      expect(r.failures).toHaveLength(1);
      expect(r.failures[0]).toMatch(/^cuda: .*CUDA failure 100: tsi stub: no CUDA device .*cuda_execution_provider\.cc.*expr=cudaSetDevice\(info_\.device_id\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
