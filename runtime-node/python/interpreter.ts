/**
 * Which Python runs a model, and whether it can. The default is `python3` from PATH; the backend
 * setting `--backend-config python,executable=<path>` names another for every model; a model's own
 * `EXECUTION_ENV_PATH` parameter (Triton's custom execution environments) names a conda-pack
 * `.tar.gz` (extracted once into a cache folder) or an unpacked environment folder, whose
 * `bin/python3` then runs the model. `$$TRITON_MODEL_DIRECTORY` in it stands for the model's folder,
 * and the result must stay inside it, as Triton's documentation requires.
 *
 * Each interpreter is probed once (version, numpy) before its first model starts, so a machine
 * without python3 or numpy gets a model that is UNAVAILABLE with a reason saying what to install,
 * not a crash of a half-started process.
 */

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join, relative, resolve } from 'node:path';
import { TsiError, type Logger, type ModelConfig } from '../../core/index.js';

export interface PythonRuntime {
  python: string;
  env: NodeJS.ProcessEnv;
  /** For messages: `python3 3.11.2, numpy 1.24.2`. */
  label: string;
}

const INSTALL_HINT = 'install python3 and python3-numpy (apt-get install python3 python3-numpy), or name an interpreter '
  + 'with --backend-config python,executable=<path> or the model config parameter EXECUTION_ENV_PATH';

const PROBE = 'import sys\nsys.stdout.write("%d.%d.%d\\n" % sys.version_info[:3])\nimport numpy\nsys.stdout.write(numpy.__version__)';

export class Interpreters {
  private readonly probes = new Map<string, Promise<string>>();
  private readonly envs = new Map<string, Promise<string>>();

  constructor(private readonly executable: string | undefined, private readonly log: Logger) {}

  /** The interpreter for a model (by its config) and its environment, probed. */
  async resolve(config: ModelConfig, modelDir: string): Promise<PythonRuntime> {
    const param = config.parameters?.EXECUTION_ENV_PATH?.string_value;
    let python = this.executable ?? 'python3';
    let env: NodeJS.ProcessEnv = { ...process.env, PYTHONDONTWRITEBYTECODE: process.env.PYTHONDONTWRITEBYTECODE ?? '1' };
    let origin = this.executable ? '--backend-config python,executable' : 'PATH';
    if (param) {
      const dir = await this.environment(executionEnvPath(param, modelDir), config.name ?? '');
      python = ['python3', 'python'].map((n) => join(dir, 'bin', n)).find((p) => existsSync(p)) ?? join(dir, 'bin', 'python3');
      env = {
        ...env, PATH: `${join(dir, 'bin')}${delimiter}${process.env.PATH ?? ''}`,
        LD_LIBRARY_PATH: [join(dir, 'lib'), process.env.LD_LIBRARY_PATH].filter(Boolean).join(delimiter),
        PYTHONNOUSERSITE: '1',
      };
      origin = `EXECUTION_ENV_PATH ${param}`;
    }
    const key = `${python}\0${env.PATH ?? ''}`;
    let probe = this.probes.get(key);
    if (!probe) {
      probe = probeInterpreter(python, env, origin);
      this.probes.set(key, probe);
      // A failure is not remembered: installing numpy and loading the model again should work.
      probe.catch(() => this.probes.delete(key));
    }
    const versions = await probe;
    return { python, env, label: `${python} ${versions}` };
  }

  /** An environment folder: the given one, or a .tar.gz extracted once into the cache. */
  private environment(path: string, model: string): Promise<string> {
    if (!existsSync(path)) {
      return Promise.reject(new TsiError('INVALID_ARG', `model '${model}': EXECUTION_ENV_PATH '${path}' does not exist`));
    }
    if (statSync(path).isDirectory()) return Promise.resolve(path);
    let p = this.envs.get(path);
    if (!p) {
      p = extract(path, this.log);
      this.envs.set(path, p);
      p.catch(() => this.envs.delete(path));
    }
    return p;
  }
}

/** EXECUTION_ENV_PATH with `$$TRITON_MODEL_DIRECTORY` replaced, refused if it then leaves the model folder. */
export function executionEnvPath(value: string, modelDir: string): string {
  const KEY = '$$TRITON_MODEL_DIRECTORY';
  if (!value.includes(KEY)) return resolve(value);
  const path = resolve(value.replace(KEY, modelDir));
  const rel = relative(modelDir, path);
  if (rel.startsWith('..') || isAbsolute(rel)) {
    throw new TsiError('INVALID_ARG', `EXECUTION_ENV_PATH '${value}' leaves the model folder (${modelDir}), which $$TRITON_MODEL_DIRECTORY paths must not do`);
  }
  return path;
}

function run(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number | string | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(file, args, { env, timeout: timeoutMs, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      const code = err ? ((err as NodeJS.ErrnoException).code ?? (err as { status?: number }).status ?? 1) : 0;
      done({ code: code as number | string | null, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

async function probeInterpreter(python: string, env: NodeJS.ProcessEnv, origin: string): Promise<string> {
  const r = await run(python, ['-c', PROBE], env, 60_000);
  if (r.code === 'ENOENT' || r.code === 'EACCES') {
    throw new TsiError('UNAVAILABLE', `${python} not found (from ${origin}): the python backend needs a Python 3 interpreter; ${INSTALL_HINT}`);
  }
  const [version, numpy] = r.stdout.split('\n');
  if (!version || !/^\d+\.\d+\.\d+$/.test(version)) {
    throw new TsiError('UNAVAILABLE', `${python} (from ${origin}) did not run as Python 3: ${(r.stderr || r.stdout).trim().slice(0, 300)}; ${INSTALL_HINT}`);
  }
  const [major, minor] = version.split('.').map(Number) as [number, number];
  if (major !== 3 || minor < 8) {
    throw new TsiError('UNAVAILABLE', `${python} is Python ${version}; the python backend needs Python 3.8 or newer; ${INSTALL_HINT}`);
  }
  if (r.code !== 0 || !numpy) {
    const why = /No module named ['"]?numpy/.test(r.stderr) ? 'has no numpy' : `cannot import numpy (${r.stderr.trim().split('\n').pop()})`;
    throw new TsiError('UNAVAILABLE',
      `${python} (Python ${version}, from ${origin}) ${why}: the python backend needs numpy; install it with `
      + `apt-get install python3-numpy (Debian/Ubuntu system Python) or ${python} -m pip install numpy`);
  }
  return `(Python ${version}, numpy ${numpy.trim()})`;
}

/** Extracts a conda-pack archive into tsi's cache (keyed by path, size and mtime) with `tar`. */
async function extract(archive: string, log: Logger): Promise<string> {
  const st = statSync(archive);
  const key = createHash('sha1').update(`${archive}\0${st.size}\0${st.mtimeMs}`).digest('hex').slice(0, 16);
  const root = join(tmpdir(), 'tsi-python-envs');
  const dir = join(root, key);
  if (existsSync(join(dir, 'bin'))) return dir;
  mkdirSync(root, { recursive: true });
  const work = `${dir}.partial-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work);
  log.info(`python backend: extracting execution environment ${archive} into ${dir}`);
  const r = await run('tar', ['-xzf', archive, '-C', work], process.env, 10 * 60_000);
  if (r.code !== 0) {
    rmSync(work, { recursive: true, force: true });
    throw new TsiError('INVALID_ARG', `cannot extract EXECUTION_ENV_PATH ${archive}: ${r.code === 'ENOENT' ? 'tar is not installed' : r.stderr.trim()}`);
  }
  try {
    renameSync(work, dir);
  } catch {
    rmSync(work, { recursive: true, force: true }); // extracted meanwhile by another load
  }
  return dir;
}
