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
 * The second test runs the real `tsi-node serve` with the provider installed and the stubs on the
 * library path: serve re-executes itself onto the 1.29.0 core, the model that names `cuda` finds the
 * provider library there, and, this machine having no NVIDIA GPU (/proc/driver/nvidia), skips it and
 * serves on the CPU; SIGTERM reaches the re-executed server through the first process.
 *
 * It needs the real provider (171 MiB from npm): it runs where `tsi-node gpu install cuda` has put it,
 * in TSI_CUDA_STUB_CACHE (.ci/run installs it there, apart from the cache the other tests' servers
 * read, so they keep the dependency's core) or else tsi's cache; missing, it is skipped with that
 * reason here and fails under CI.
 */

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { requireCapability } from '../helpers/capability.js';
import { installedCuda } from '../../runtime-node/gpu/cuda-install.js';
import { addSubModel } from '../../scripts/gen-models.js';
import { postJson, tempRepo } from '../helpers/server.js';
import { serveChild } from '../helpers/serve-child.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const installed = installedCuda(process.env.TSI_CUDA_STUB_CACHE || undefined);
const gcc = (() => {
  try {
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    execFileSync('nm', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const missing = !installed ? 'the CUDA provider is not installed (tsi-node gpu install cuda; TSI_CUDA_STUB_CACHE names where .ci/run puts it)' : !gcc ? 'gcc and nm' : undefined;
const need = (ctx: TestContext) => requireCapability(ctx, !!process.env.CI, 'CUDA provider and gcc', missing);

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
  const dir = mkdtempSync(join(tmpdir(), 'tsi-cuda-stub-'));
  beforeAll(() => {
    if (!missing) buildStubs(join(installed!.dir, 'bin/napi-v6/linux/x64/libonnxruntime_providers_cuda.so'), dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('loads the provider and stops at device selection (cudaSetDevice), then falls back to the CPU', async (ctx) => {
    need(ctx);
    {
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
    }
  }, 120_000);

  it('tsi-node serve re-executes onto the provider\'s core with the libraries found, and passes SIGTERM on', async (ctx) => {
    need(ctx);
    const repo = tempRepo({
      'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 2\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n'
        + 'instance_group [{ kind: KIND_GPU }]\noptimization { execution_accelerators { gpu_execution_accelerator [ { name: "cuda" } ] } }\n',
      'm/1/model.onnx': addSubModel('FP32', [4]),
    });
    const args = ['serve', '--model-repository', repo.path, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--http-address', '127.0.0.1', '--grpc-address', '127.0.0.1', '--drain-delay-secs', '0'];
    const env: NodeJS.ProcessEnv = { ...process.env, TSI_CACHE_DIR: join(installed!.dir, '..', '..'), LD_LIBRARY_PATH: dir };
    delete env.TSI_ORT_DIR;
    delete env.TSI_CUDA_REEXEC;
    const { child, port, stderr } = await serveChild(args, env, 90_000);
    try {
      const err = stderr();
      expect(err).toContain(`CUDA provider: running on onnxruntime-node ${installed!.record.ortVersion} from ${installed!.dir} (the provider's own core), with the CUDA libraries on LD_LIBRARY_PATH=${dir}`);
      expect(err).toMatch(/m \(m_0_0\): KIND_GPU instance runs on the CPU: no GPU execution provider could be used; providers as the config names them: cuda; cuda not available: provider library present but no NVIDIA GPU found/);
      const r = await postJson(`http://127.0.0.1:${port}/v2/models/m/infer`, { inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }, { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] }] });
      expect(r.body.outputs[0].data).toEqual([2, 3, 4, 5]);
      const exited = new Promise((r) => child.on('exit', r));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
      repo.cleanup();
    }
  }, 120_000);
});
