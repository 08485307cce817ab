/**
 * Model control as the repository extension and `--model-control-mode` define it, shared by every
 * transport: explicit load (with a `config` override and `file:<version>/<name>` model files) and unload
 * (with `unload_dependents`), and the poll loop of poll mode. Override files become a model folder of
 * their own through an injected ModelFileStager — a fresh temporary directory in Node, memory in the
 * browser — and every file name is checked here first, so no name (`..`, an absolute path, a backslash)
 * can place a file outside that folder whatever the stager does. As in Triton the override folder
 * replaces the repository's folder for that load, and it is discarded once a later load or an unload
 * replaces it.
 *
 * A load request must not be a way to run code on the server. Unless the operator allows it
 * (`--allow-model-code-upload`), a load is refused with PERMISSION_DENIED before anything is staged
 * or parsed by a backend when its files would be served by a backend that runs them (anything but
 * ONNX weights and ensembles: the JavaScript and Python backends import the uploaded file, and Python
 * auto-complete runs it during the load itself), when it uploads a file of a kind some backend imports
 * or executes (so auto-detection cannot pick a code backend either), or when its config override points
 * a path setting the server acts on — the Python interpreter (`EXECUTION_ENV_PATH`), a TensorRT engine
 * cache — anywhere the repository's own config for that model does not.
 */

import type { ModelFiles } from '../backend.js';
import { parseModelConfig } from '../config/pipeline.js';
import { TsiError, asTsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { LoadOverrides, Repository } from './repository.js';
import { repositoryParts } from './namespaces.js';
import type { InferenceServer } from '../server.js';

export interface StagedFiles {
  files: ModelFiles;
  /** Frees what staging took (deletes the temporary folder). */
  dispose(): Promise<void>;
}

/** Lays validated relative paths → bytes out as a model folder. */
export type ModelFileStager = (model: string, files: ReadonlyMap<string, Uint8Array>) => Promise<StagedFiles>;

/** A load parameter after transport decoding: strings stay strings, file contents are bytes. */
export type LoadParamValue = string | Uint8Array | boolean | number;

const FILE_PREFIX = 'file:';

/**
 * Checks a `file:` parameter's path: within the model folder, `/`-separated, no `.`/`..`/empty
 * segments, no backslash or NUL. A leading `/` names the model folder's root, as Triton joins the
 * path to the model folder (`file:/1/model.py` is the model's `1/model.py`). Returns the path
 * relative to the model folder (without the prefix).
 */
export function checkOverridePath(key: string): string {
  const rel = key.slice(FILE_PREFIX.length).replace(/^\/+/, '');
  const bad = (why: string) => new TsiError('INVALID_ARG',
    `Invalid file parameter '${key}': ${why}; model files must stay within the model directory`);
  if (rel === '') throw bad('the path is empty');
  if (rel.includes('\\')) throw bad('backslashes are not allowed in the path');
  if (rel.includes('\0')) throw bad('NUL characters are not allowed in the path');
  if (/^[A-Za-z]:/.test(rel)) throw bad('drive letters are not allowed in the path');
  for (const seg of rel.split('/')) {
    if (seg === '..') throw bad(`'..' is not allowed in the path`);
    if (seg === '' || seg === '.') throw bad('empty or \'.\' path segments are not allowed');
  }
  return rel;
}

/**
 * Triton's model name check for loads: blank after trimming whitespace, or `..` (after trimming), or a
 * name holding a path separator is refused; other names with dots (`...`, `a..b`) are plain names.
 * A NUL or a backslash (a separator on Windows) is refused too, where Triton would pass them on.
 */
export function checkModelName(name: string): void {
  const trimmed = name.replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, '');
  if (trimmed === '') throw new TsiError('INVALID_ARG', 'Model name cannot be empty. Please enter a valid name to deploy.');
  if (trimmed === '..' || trimmed === '.' || /[/\\\0]/.test(name)) {
    throw new TsiError('INVALID_ARG', `invalid model name '${name}', model name must not contain path traversal characters`);
  }
}

/** A stager that keeps the files in memory (browser, tests); paths are already validated. */
export const memoryStager: ModelFileStager = async (_model, files) => {
  const map = new Map(files);
  const dirs = new Map<string, Map<string, boolean>>();
  for (const p of map.keys()) {
    const parts = p.split('/');
    for (let i = 0; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (!dirs.has(dir)) dirs.set(dir, new Map());
      dirs.get(dir)!.set(parts[i]!, i < parts.length - 1);
    }
  }
  const files_: ModelFiles = {
    read: async (p) => {
      const b = map.get(p);
      if (!b) throw new TsiError('INVALID_ARG', `unable to read '${p}': no such file in the load request's model files`);
      return b;
    },
    exists: async (p) => map.has(p) || dirs.has(p),
    list: async (d) => [...(dirs.get(d) ?? new Map<string, boolean>())].map(([name, isDir]) => ({ name, isDir })),
  };
  return { files: files_, dispose: async () => map.clear() };
};

/** Decodes standard base64 (HTTP carries file contents that way). */
export function decodeBase64(s: string, what: string): Uint8Array {
  const clean = s.replace(/[\r\n\s]/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length % 4 === 1) {
    throw new TsiError('INVALID_ARG', `Unable to decode base64 content of '${what}'`);
  }
  const bin = atob(clean);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** What a load request may bring besides ONNX weights and configs. */
export interface ModelCodePolicy {
  /** `--allow-model-code-upload`: load requests may bring code and point path settings anywhere (default false). */
  allowCodeUpload?: boolean;
  /** Backends whose model files are data the server only reads (default: onnxruntime and llm; ensembles always are). */
  dataBackends?: readonly string[];
}

export const CODE_UPLOAD_FLAG = '--allow-model-code-upload';
// llm reads ONNX weights, JSON and a chat template that @huggingface/jinja interprets in its own
// sandbox (no host objects, no imports): data, like onnxruntime's.
const DATA_BACKENDS = ['onnxruntime', 'llm', 'whisper'];
/**
 * Files some backend imports or executes: Python sources and bytecode, JavaScript modules, native
 * libraries (Python extensions, Node addons, custom-op libraries).
 */
const CODE_FILE = /\.(?:py|pyc|pyo|pyd|pyx|pth|js|mjs|cjs|ts|mts|cts|node|so(?:\.\d+)*|dylib|dll|sh)$/i;
/** Config settings naming a path the server opens or runs, by where they sit in the config. */
const PATH_PARAMETERS = ['EXECUTION_ENV_PATH'];
const PATH_ACCELERATOR_PARAMETERS = ['trt_engine_cache_path'];
const MODEL_DIR = '$$TRITON_MODEL_DIRECTORY';

/** The backend a config names, as the repository resolves it (undefined: detected from the files). */
function declaredBackend(c: ModelConfig): string | undefined {
  if (c.platform === 'ensemble') return 'ensemble';
  if (c.backend) return c.backend;
  if (c.platform === 'onnxruntime_onnx' || c.default_model_filename === 'model.onnx') return 'onnxruntime';
  return c.platform || undefined;
}

/** Every path setting of a config, as `where → value`. */
function pathSettings(c: ModelConfig | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const k of PATH_PARAMETERS) {
    const v = c?.parameters?.[k]?.string_value;
    if (v) out.set(`parameters.${k}`, v);
  }
  for (const a of c?.optimization?.execution_accelerators?.gpu_execution_accelerator ?? []) {
    for (const k of PATH_ACCELERATOR_PARAMETERS) {
      const v = a.parameters?.[k];
      if (v) out.set(`gpu_execution_accelerator '${a.name ?? ''}' ${k}`, v);
    }
  }
  return out;
}

function codeRefused(model: string, why: string): TsiError {
  return new TsiError('PERMISSION_DENIED',
    `failed to load '${model}', ${why}: model code cannot be uploaded through the model load API unless the server `
    + `runs with ${CODE_UPLOAD_FLAG}=true, which lets every client of that API run code as the server's user`);
}

/** Explicit load / unload with staging and clean-up of override folders. */
export class ModelControl {
  private readonly staged = new Map<string, StagedFiles>();
  private readonly dataBackends: ReadonlySet<string>;

  constructor(
    private readonly server: InferenceServer, private readonly stage: ModelFileStager = memoryStager,
    private readonly policy: ModelCodePolicy = {},
  ) {
    this.dataBackends = new Set(['ensemble', ...(policy.dataBackends ?? DATA_BACKENDS)]);
  }

  /**
   * Refuses a load that would run code the client sent or chose (see the file comment). Runs before
   * staging, so nothing of a refused request reaches the disk or a backend.
   */
  private async checkCode(name: string, configJson: string | undefined, files: ReadonlyMap<string, Uint8Array>): Promise<void> {
    if (this.policy.allowCodeUpload || configJson === undefined) return;
    let config: ModelConfig;
    try {
      config = parseModelConfig(configJson, `${name}/config.json (load override)`);
    } catch {
      return; // not a config at all: the repository refuses it with the parser's message
    }
    if (files.size > 0) {
      const backend = declaredBackend(config);
      if (backend !== undefined && !this.dataBackends.has(backend)) {
        throw codeRefused(name, `its files would be run by the '${backend}' backend`);
      }
      for (const rel of files.keys()) {
        if (CODE_FILE.test(rel)) throw codeRefused(name, `'file:${rel}' is a file that backends import or execute`);
      }
    }
    const wanted = pathSettings(config);
    if (wanted.size === 0) return;
    const own = await this.repositoryConfig(name);
    for (const [where, value] of wanted) {
      if (own.get(where) === value) continue;
      // Inside the repository's own model folder (the runtime refuses a path that leaves it): the operator's files.
      if (where === 'parameters.EXECUTION_ENV_PATH' && value.startsWith(MODEL_DIR) && files.size === 0) continue;
      throw codeRefused(name, `its config override sets ${where} to '${value}', which the repository's config does not`);
    }
  }

  /** The path settings of the model's config as the operator wrote it: loaded from the repository, else on disk. */
  private async repositoryConfig(name: string): Promise<Map<string, string>> {
    const loaded = this.server.repository.readyVersions(name)[0];
    if (loaded && !this.staged.has(name)) return pathSettings(loaded.config);
    const source = (await this.server.repository.scan()).get(name);
    if (!source || source instanceof Error) return new Map();
    const files = source.files(name);
    for (const file of ['config.pbtxt', 'config.json']) {
      try {
        if (await files.exists(file)) return pathSettings(parseModelConfig(new TextDecoder().decode(await files.read(file)), `${name}/${file}`));
      } catch {
        return new Map();
      }
    }
    return new Map();
  }

  private checkMode(): void {
    if (this.server.options.modelControlMode !== 'explicit') {
      throw new TsiError('UNAVAILABLE', 'explicit model load / unload is not allowed if polling is enabled');
    }
  }

  async load(name: string, params: ReadonlyMap<string, LoadParamValue>): Promise<void> {
    this.checkMode();
    checkModelName(name);
    let configJson: string | undefined;
    const files = new Map<string, Uint8Array>();
    for (const [key, value] of params) {
      if (key === 'config') {
        if (typeof value !== 'string') throw new TsiError('INVALID_ARG', `Config parameter 'config' must have string type for its value`);
        configJson = value;
      } else if (key.startsWith(FILE_PREFIX)) {
        if (!(value instanceof Uint8Array)) throw new TsiError('INVALID_ARG', `File parameter '${key}' must have bytes type for its value`);
        try {
          files.set(checkOverridePath(key), value);
        } catch (err) {
          // Triton refuses such a file while polling the override folder: its text, then the reason.
          throw new TsiError('INVALID_ARG', `failed to load '${name}', failed to poll from model repository: ${asTsiError(err).message}`);
        }
      }
    }
    await this.checkCode(name, configJson, files);
    let staged: StagedFiles | undefined;
    if (files.size > 0) {
      if (configJson === undefined) throw new TsiError('INVALID_ARG', `Load parameter 'config' must be specified for model file override`);
      try {
        staged = await this.stage(name, files);
      } catch (err) {
        // Triton cannot write such files either, and says so as a failed repository poll.
        throw new TsiError('INTERNAL', `failed to load '${name}', failed to poll from model repository: ${asTsiError(err).message}`);
      }
    }
    const overrides: LoadOverrides | undefined = configJson === undefined && !staged ? undefined : { configJson, files: staged?.files };
    if (!overrides && await this.server.repository.keepsConfigOverride(name)) {
      this.server.log.info(`model '${name}' unchanged on disk since its config override was loaded: keeping it`);
      return;
    }
    try {
      await this.server.loadModel(name, overrides);
    } catch (err) {
      await staged?.dispose();
      const e = asTsiError(err, 'INVALID_ARG');
      // Clients look for Triton's "failed to load '<model>', ..." (the config or the repository) or
      // "load failed for model '<model>': ..." (its versions) in load errors.
      throw /^(?:failed to load|load failed for model)/.test(e.message) ? e : new TsiError(e.code, `failed to load '${name}', ${e.message}`);
    }
    const previous = this.staged.get(name);
    if (staged) this.staged.set(name, staged);
    else this.staged.delete(name);
    await previous?.dispose();
  }

  async unload(name: string, unloadDependents = false): Promise<void> {
    this.checkMode();
    const steps = unloadDependents
      ? (this.server.repository.readyVersions(name)[0]?.config.ensemble_scheduling?.step ?? []).map((s) => s.model_name!).filter(Boolean)
      : [];
    await this.server.unloadModel(name);
    for (const dep of new Set(steps)) await this.server.unloadModel(dep).catch(() => {});
    const previous = this.staged.get(name);
    this.staged.delete(name);
    await previous?.dispose();
  }

  async close(): Promise<void> {
    const all = [...this.staged.values()];
    this.staged.clear();
    await Promise.all(all.map((s) => s.dispose().catch(() => {})));
  }
}

/**
 * Poll mode: every interval, compare the repository with what is loaded; load new models, reload
 * changed ones (a failed reload keeps the old versions serving) and unload removed ones (in-flight
 * requests finish first). Polls never overlap.
 */
export class RepositoryPoller {
  private cancel?: () => void;
  private running?: Promise<unknown>;
  private stopped = false;

  constructor(private readonly server: InferenceServer, private readonly intervalMs: number) {}

  start(): void {
    if (this.intervalMs > 0) this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.cancel = this.server.clock.setTimer(() => {
      this.running = this.pollOnce().finally(() => {
        this.running = undefined;
        this.schedule();
      });
    }, this.intervalMs);
  }

  async pollOnce(): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    // Under --model-namespacing each repository is polled on its own: a model leaving one leaves the
    // same name in the others serving.
    const all: { added: string[]; removed: string[]; modified: string[] } = { added: [], removed: [], modified: [] };
    for (const part of repositoryParts(this.server.repository)) {
      const c = await this.pollRepository(part);
      all.added.push(...c.added);
      all.removed.push(...c.removed);
      all.modified.push(...c.modified);
    }
    return all;
  }

  private async pollRepository(repository: Repository): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    const { log } = this.server;
    let c: { added: string[]; removed: string[]; modified: string[] };
    try {
      c = await repository.changes();
    } catch (err) {
      log.error(`failed to poll the model repository: ${asTsiError(err).message}`);
      return { added: [], removed: [], modified: [] };
    }
    for (const name of c.removed) {
      log.info(`model '${name}' was removed from the repository; unloading it`);
      await repository.unload(name).catch(() => {});
      this.server.residency.unloaded(name, 'removed');
      repository.forget(name);
    }
    // On demand, new models are registered to load on their first request, and only loaded ones reload.
    const onDemand = this.server.onDemand;
    if (onDemand) repository.park(c.added);
    else repository.markLoading(c.added);
    const toLoad = onDemand ? c.modified.filter((n) => repository.parkedReason(n) === undefined) : [...c.added, ...c.modified];
    await repository.forEachLoad(toLoad, async (name) => {
      log.info(`${c.added.includes(name) ? 'loading new' : 'reloading changed'} model '${name}'`);
      // Failures are logged by the repository and leave the model as it was (or UNAVAILABLE if new).
      await repository.load(name).then(() => this.server.residency.loaded(name, 'poll'), () => {});
    });
    return c;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cancel?.();
    await this.running;
  }
}
