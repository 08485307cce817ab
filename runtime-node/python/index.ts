/**
 * The `python` backend: Triton Python-backend models (`<version>/model.py` with a class
 * `TritonPythonModel`) run unchanged. Each model instance is one Python process running tsi's stub
 * (stub/tsi_python_stub.py), which imports model.py and tsi's own `triton_python_backend_utils`;
 * the process and tsi talk over a control socket and exchange tensors through shared memory.
 * This file is the subsystem's one door: the Backend (auto-complete, load), and the backend
 * settings `--backend-config python,<key>=<value>` accepts:
 *
 * - `executable`: the interpreter for every Python model (default `python3` from PATH);
 * - `shm-default-byte-size`, `shm-growth-byte-size`: each shared-memory file's first size and the
 *   least it grows by (Triton's names; default 1 MiB each);
 * - `stub-timeout-seconds`: how long an interpreter may take to start, and finalize() to end,
 *   before the process is killed (default 30).
 *
 * The files: interpreter.ts (which Python, probed for numpy), autocomplete.ts, instance.ts (one
 * instance = one process, restarts), process.ts (spawning, stdio, exit), channel.ts (framing),
 * shm.ts (the shared-memory layouts), services.ts (BLS, metrics, logs for the model). The Python
 * half is in stub/: tsi_python_stub.py (the process: channel, threads, BLS plumbing), tsi_shm.py,
 * tsi_executor.py (initialize/execute/finalize), and triton_python_backend_utils.py, which gathers
 * tsi_pb_base.py (tensors, errors, constants) and the modules built on it (tsi_requests.py,
 * tsi_observability.py, tsi_model_config.py; tsi_dlpack.py behind Tensor).
 */

import { TsiError, type Backend, type Logger, type ModelLoadContext } from '../../core/index.js';
import { autoCompletePython } from './autocomplete.js';
import { PythonInstance, type ModelSetup } from './instance.js';
import { Interpreters } from './interpreter.js';

export { STUB_PATH } from './process.js';

export interface PythonBackendSettings {
  executable?: string;
  shmDefaultBytes: number;
  shmGrowthBytes: number;
  stubTimeoutMs: number;
}

const MiB = 1024 * 1024;
/** Settings Triton's python backend has that mean nothing here; accepted so shared command lines work. */
const IGNORED = new Set(['shm-region-prefix-name', 'thread-pool-size', 'shm_message_queue_size', 'backend-directory', 'default-max-batch-size']);

export function parsePythonSettings(config: Record<string, string>, log?: Logger): PythonBackendSettings {
  const s: PythonBackendSettings = { shmDefaultBytes: MiB, shmGrowthBytes: MiB, stubTimeoutMs: 30_000 };
  const positive = (key: string, v: string, min: number, what: string): number => {
    const n = Number(v);
    if (!/^\d+$/.test(v.trim()) || n < min) throw new TsiError('INVALID_ARG', `--backend-config python,${key}=${v}: ${what}`);
    return n;
  };
  for (const [key, value] of Object.entries(config)) {
    switch (key) {
      case 'executable':
        if (!value) throw new TsiError('INVALID_ARG', '--backend-config python,executable= needs a path');
        s.executable = value;
        break;
      case 'shm-default-byte-size':
        s.shmDefaultBytes = positive(key, value, 64 * 1024, 'expected a byte count of at least 65536');
        break;
      case 'shm-growth-byte-size':
        s.shmGrowthBytes = positive(key, value, 1, "can't be smaller than or equal to zero");
        break;
      case 'stub-timeout-seconds':
        s.stubTimeoutMs = positive(key, value, 1, "can't be smaller than or equal to zero") * 1000;
        break;
      default:
        if (IGNORED.has(key)) log?.verbose(1, `python backend: setting '${key}' has no effect in tsi`);
        else log?.warn(`python backend: unknown setting '${key}' ignored (known: executable, shm-default-byte-size, shm-growth-byte-size, stub-timeout-seconds)`);
    }
  }
  return s;
}

export function createPythonBackend(opts: { log: Logger; config: Record<string, string> }): Backend {
  const settings = parsePythonSettings(opts.config, opts.log);
  const interpreters = new Interpreters(settings.executable, opts.log);
  return {
    name: 'python',
    autoCompleteConfig: (config, ctx) => autoCompletePython(config, ctx, { interpreters, startTimeoutMs: settings.stubTimeoutMs }),
    async loadModel(ctx: ModelLoadContext) {
      const name = ctx.config.name ?? '';
      const rel = `${ctx.version}/${ctx.config.default_model_filename || 'model.py'}`;
      if (!(await ctx.files.exists(rel))) {
        // Triton's stub finds the file missing before its interpreter starts; log checks match its words.
        throw new TsiError('INVALID_ARG', `Failed to preinitialize Python stub: Python model file not found in '${ctx.files.localPath?.(rel) ?? rel}'`);
      }
      const file = ctx.files.localPath?.(rel);
      const modelDir = ctx.files.localPath?.('');
      if (!file || !modelDir) throw new TsiError('UNSUPPORTED', `model '${name}': Python models need their files on disk`);
      const setup: ModelSetup = {
        ctx, log: opts.log, file, modelDir, runtime: await interpreters.resolve(ctx.config, modelDir),
        shm: { initial: settings.shmDefaultBytes, growth: settings.shmGrowthBytes },
        startTimeoutMs: settings.stubTimeoutMs, stopTimeoutMs: settings.stubTimeoutMs,
      };
      return {
        createInstance: (spec) => PythonInstance.start(setup, spec),
        // Each instance is a stub process of its own, started at once as Triton's Python backend does.
        parallelInstances: true,
        unload: async () => {},
      };
    },
  };
}
