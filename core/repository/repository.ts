/**
 * The model repository: Triton's layout (`<root>/<model>/config.pbtxt`, numeric version folders) read
 * through a platform-neutral RepositorySource (a folder on disk in Node, URLs or in-memory files in the
 * browser), and the lifecycle of every model in it. Loading a model is the config pipeline — parse,
 * backend auto-complete, normalise, validate — then one ModelVersion per version the version_policy
 * selects. A model that fails to load is UNAVAILABLE with its reason while the others serve. A reload
 * loads the new versions first and swaps them in, so requests never see a gap; replaced versions drain.
 */

import type { BackendRegistry, InProcessServer, ModelFiles } from '../backend.js';
import {
  autoCompleteConfig, checkConfigAgainstModel, normalizeModelConfig, parseModelConfig, validateModelConfig,
} from '../config/pipeline.js';
import { TsiError, asTsiError } from '../errors.js';
import { checkEnsembleSteps, type StepConfigs } from '../config/ensemble-check.js';
import type { ModelConfig } from '../config/model-config.js';
import { ModelVersion, type ModelState } from './model.js';
import { reloadInPlace } from './instance-update.js';
import type { Clock, Logger } from '../types.js';
import type { ResponseCache } from '../cache.js';
import type { MetricsRegistry } from '../metrics.js';
import type { RateLimiter } from '../scheduling/rate-limiter.js';
import type { SchedulerDelay } from '../scheduling/scheduler.js';

export interface RepositorySource {
  /** Where it is, for logs (a path or URL). */
  readonly location: string;
  /**
   * Models this source names itself rather than by their folders (a repository registered with a
   * folder-to-name mapping, as SageMaker's multi-model load does): their configs' own `name` gives way.
   */
  readonly namesModels?: ReadonlySet<string>;
  /** Model folder names. */
  listModels(): Promise<string[]>;
  files(model: string): ModelFiles;
  /** Changes whenever anything in the model folder changes (poll mode). */
  fingerprint?(model: string): Promise<string>;
  /** Like `fingerprint`, blind to the model's config files: absent, every changed config is a full reload. */
  filesFingerprint?(model: string): Promise<string>;
}

export interface RepositoryOptions {
  sources: RepositorySource[];
  backends: BackendRegistry;
  clock: Clock;
  log: Logger;
  server: InProcessServer;
  gpuCount: number;
  autoComplete: boolean;
  defaultMaxBatchSize: number;
  /** The server's response cache, handed to models whose config enables it. */
  cache?: ResponseCache;
  /** The server's custom metric families, handed to every backend model. */
  metrics?: MetricsRegistry;
  /** The server's rate limiter, with which every loaded version's instances register. */
  rateLimiter?: RateLimiter;
  /** Models loaded at once by `loadAll` (tritonserver's --model-load-thread-count; default 4). */
  loadThreadCount?: number;
  /** Times a version that fails to load is tried again (tritonserver's --model-load-retry-count; default 0). */
  loadRetryCount?: number;
  /** Handed to every scheduler (Triton's scheduler test hook). */
  schedulerDelay?: SchedulerDelay;
  /**
   * tritonserver's `--model-config-name`: a model's config is `configs/<name>.pbtxt` where that file
   * exists, its `config.pbtxt` otherwise.
   */
  configName?: string;
  /**
   * Under `--model-namespacing`, each repository is a ModelRepository of its own (namespaces.ts): its
   * location, which its models carry (an ensemble looks for its steps there first), and where its
   * ensembles' steps are found before they load (its own models first, then a name one repository has).
   */
  namespace?: string;
  stepSources?: () => Promise<Map<string, RepositorySource | Error>>;
}

/** A repository's public surface: a ModelRepository, or the namespaced one over several (namespaces.ts). */
export type Repository = Pick<ModelRepository, keyof ModelRepository>;

export interface IndexEntry {
  name: string;
  version?: string;
  /** Absent for a model that is in a repository but was never loaded (Triton lists just its name). */
  state?: ModelState;
  reason?: string;
}

/**
 * Overrides for an explicit load: a config (JSON text) and/or model files. As in Triton, files replace
 * the repository's model folder for that load (they are the whole model directory).
 */
export interface LoadOverrides {
  configJson?: string;
  files?: ModelFiles;
}

interface ModelEntry {
  name: string;
  source?: RepositorySource;
  versions: Map<number, ModelVersion>;
  /** Versions that failed or were unloaded, with their reason. */
  unavailable: Map<number, { state: ModelState; reason: string }>;
  /** A model-level failure (bad config, duplicate name), shown without a version. */
  error?: string;
  state: ModelState;
  fingerprint?: string;
  explicitlyUnloaded: boolean;
  /** Registered but not loaded, to be loaded on its first request (residency.ts); the index shows why. */
  parked?: string;
  /** The serving versions came from a load-API config override (no files), over this folder fingerprint. */
  configOverride?: { fingerprint: string | undefined };
  /** An ensemble's step models, from the config of its latest load (loading or loaded). */
  steps?: ReadonlySet<string>;
}

/** The index's reason for a model that on-demand loading has not loaded (yet, or again). */
export const NOT_LOADED_BUDGET = 'not loaded: budget';

const VERSION_DIR = /^[1-9][0-9]*$/;

export class ModelRepository {
  private readonly models = new Map<string, ModelEntry>();
  private readonly inflightLoads = new Map<string, Promise<void>>();
  /** Loads begun and not over, per model (inflightLoads keeps the last one after it is over). */
  private readonly loadsInProgress = new Map<string, number>();
  /** Model names seen by the last scan, for the index of an explicit-mode repository. */
  private known = new Set<string>();
  /**
   * Step configs an ensemble check prepared (kept for the step's own load while its folder is
   * unchanged) and configs a load is preparing (reused by an ensemble checked meanwhile), so a
   * step's model file is read, or its auto_complete_config run, once rather than twice.
   */
  private readonly checkedSteps = new Map<string, { fingerprint: string; config: Promise<ModelConfig>; loading?: boolean }>();

  constructor(private readonly opts: RepositoryOptions) {}

  /** Adds a repository while serving (what SageMaker's multi-model load does for each model). */
  addSource(src: RepositorySource): void {
    this.opts.sources.push(src);
  }

  /** Takes away a repository `addSource` added, once its models are unloaded. */
  removeSource(src: RepositorySource): void {
    const i = this.opts.sources.indexOf(src);
    if (i >= 0) this.opts.sources.splice(i, 1);
  }

  /** Model names in every source; a name found in two sources is reported and not served. */
  async scan(): Promise<Map<string, RepositorySource | Error>> {
    const found = new Map<string, RepositorySource | Error>();
    for (const src of this.opts.sources) {
      for (const name of await src.listModels()) {
        const prev = found.get(name);
        if (prev && !(prev instanceof Error)) {
          found.set(name, new Error(`model '${name}' appears in multiple repositories: ${prev.location} and ${src.location}`));
        } else if (!prev) found.set(name, src);
      }
    }
    this.known = new Set(found.keys());
    return found;
  }

  /** Loads every model of every source, `loadThreadCount` at a time (as Triton's --model-load-thread-count). */
  async loadAll(names?: string[]): Promise<void> {
    const found = await this.scan();
    const todo = names ? names.filter((n) => found.has(n) || this.missing(n)) : [...found.keys()];
    this.markLoading(todo);
    // A failure leaves that model UNAVAILABLE with its reason (logged); the others still load.
    // ensureLoaded: an ensemble loaded earlier in this pass may already have loaded its composing models.
    await this.forEachLoad(todo, (n) => this.ensureLoaded(n));
  }

  /** Runs `load` for every name, `loadThreadCount` at a time. */
  async forEachLoad(names: readonly string[], load: (name: string) => Promise<void>): Promise<void> {
    const queue = [...names];
    const worker = async () => {
      for (let n = queue.shift(); n !== undefined; n = queue.shift()) await load(n);
    };
    await Promise.all(Array.from({ length: Math.min(Math.max(1, this.opts.loadThreadCount ?? 4), queue.length) }, worker));
  }

  /**
   * Whether a load without overrides has nothing to do: the serving versions came from a config
   * override and the model's folder has not changed since. Triton then keeps the override (a load
   * reloads only what changed on disk); once the folder changes, the files there win.
   */
  async keepsConfigOverride(name: string): Promise<boolean> {
    const e = this.models.get(name);
    if (!e?.configOverride || e.versions.size === 0 || !e.source?.fingerprint) return false;
    return (await e.source.fingerprint(name)) === e.configOverride.fingerprint;
  }

  /**
   * Registers models about to load as LOADING, so that readiness waits for every one of them, not
   * only for those whose load has begun (loads run a few at a time).
   */
  markLoading(names: readonly string[]): void {
    for (const n of names) {
      const e = this.entry(n);
      if (e.versions.size === 0 && e.unavailable.size === 0 && !e.error) e.state = 'LOADING';
    }
  }

  private missing(name: string): boolean {
    const e = this.entry(name);
    e.state = 'UNAVAILABLE';
    e.error = `failed to poll model repository: model '${name}' not found in any model repository`;
    return false;
  }

  private entry(name: string): ModelEntry {
    let e = this.models.get(name);
    if (!e) {
      e = { name, versions: new Map(), unavailable: new Map(), state: 'UNKNOWN', explicitlyUnloaded: false };
      this.models.set(name, e);
    }
    return e;
  }

  /**
   * Loads a model unless a load of it was already started (an ensemble's composing models): waits for
   * that one instead of starting a second, and does not retry one that failed. Resolves when the
   * attempt is over, whatever its outcome; `get` then tells whether the model serves.
   */
  ensureLoaded(name: string): Promise<void> {
    const started = this.inflightLoads.get(name);
    const e = this.models.get(name);
    if (started && e && !e.explicitlyUnloaded) return started;
    return this.load(name).catch(() => {});
  }

  /** (Re)loads one model; concurrent calls for the same name run one after another. */
  load(name: string, overrides?: LoadOverrides): Promise<void> {
    // At once, not when this load's turn comes: readiness must not see a gap before it begins.
    this.markLoading([name]);
    const prev = this.inflightLoads.get(name) ?? Promise.resolve();
    this.loadsInProgress.set(name, (this.loadsInProgress.get(name) ?? 0) + 1);
    const next = prev.then(() => this.doLoad(name, overrides)).finally(() => {
      if (this.checkedSteps.get(name)?.loading) this.checkedSteps.delete(name);
      const left = (this.loadsInProgress.get(name) ?? 1) - 1;
      if (left > 0) this.loadsInProgress.set(name, left);
      else this.loadsInProgress.delete(name);
    });
    this.inflightLoads.set(name, next.catch(() => {}));
    return next;
  }

  private async doLoad(name: string, overrides?: LoadOverrides): Promise<void> {
    const { log } = this.opts;
    const e = this.entry(name);
    const repos = await this.scan();
    const found = repos.get(name);
    if (found instanceof Error) {
      e.error = found.message;
      e.state = 'UNAVAILABLE';
      throw new TsiError('INVALID_ARG', found.message);
    }
    if (!found && !overrides?.files) {
      if (e.versions.size === 0) this.models.delete(name);
      throw new TsiError('INTERNAL', `failed to load '${name}', failed to poll from model repository`);
    }
    e.source = found;
    e.parked = undefined;
    const files = overrides?.files ?? found!.files(name);
    const wasReady = e.versions.size > 0;
    if (!wasReady) e.state = 'LOADING';
    e.explicitlyUnloaded = false;
    // A model that never served shows the reason; a loaded one keeps serving its old config.
    const refuse = (err: unknown, logLine: (msg: string) => string): never => {
      const msg = asTsiError(err).message;
      log.error(logLine(msg));
      if (!wasReady) {
        e.error = msg;
        e.state = 'UNAVAILABLE';
      }
      throw asTsiError(err, 'INVALID_ARG');
    };
    let config: ModelConfig;
    let versions: number[];
    let filesFingerprint: string | undefined;
    try {
      filesFingerprint = overrides?.files ? undefined : await found?.filesFingerprint?.(name);
      const fingerprint = await found?.fingerprint?.(name);
      // Set before the config is read, so a poll retries a broken model once its folder changes, not every time.
      e.fingerprint = fingerprint;
      const checked = this.checkedSteps.get(name);
      const pending = !overrides && checked && checked.fingerprint === fingerprint
        ? checked.config
        : this.prepareConfig(name, files, overrides?.configJson, found);
      // Until this load is over, an ensemble checked meanwhile reuses it too (then the loaded version serves).
      if (!overrides && fingerprint !== undefined) this.checkedSteps.set(name, { fingerprint, config: pending, loading: true });
      else this.checkedSteps.delete(name);
      config = await pending;
      e.steps = config.platform === 'ensemble' ? new Set((config.ensemble_scheduling?.step ?? []).map((s) => s.model_name ?? '')) : undefined;
      versions = await this.selectVersions(name, files, config);
    } catch (err) {
      return refuse(err, (msg) => `failed to load '${name}': ${msg}`);
    }
    // Before any step loads, so a config mistake is reported whether or not the steps can load;
    // logged as Triton logs a dependency-graph error.
    if (config.platform === 'ensemble') {
      await checkEnsembleSteps(config, this.stepConfigs(this.opts.stepSources ? await this.opts.stepSources() : repos)).catch((err: unknown) => refuse(err, (msg) => `Invalid argument: ${msg}`));
    }
    // Only instance_group changed, or nothing: the loaded versions change in place (instance-update.ts).
    const inPlace = wasReady && !overrides?.files && await reloadInPlace({ name, loaded: e.versions, failed: e.unavailable.size, versions, config, filesFingerprint, log })
      .catch((err: unknown) => refuse(err, (msg) => `failed to update the instances of '${name}': ${msg}`));
    if (inPlace) {
      e.configOverride = overrides?.configJson !== undefined ? { fingerprint: e.fingerprint } : undefined;
      e.state = 'READY';
      return;
    }
    const backendName = config.platform === 'ensemble' ? 'ensemble' : config.backend!;
    const backend = await this.opts.backends.get(backendName);
    if (!backend) {
      const msg = `unable to find backend '${backendName}' for model '${name}'`;
      if (!wasReady) {
        e.error = msg;
        e.state = 'UNAVAILABLE';
      }
      throw new TsiError('INVALID_ARG', msg);
    }
    const loaded = new Map<number, ModelVersion>();
    const failed = new Map<number, string>();
    await Promise.all(versions.map(async (v) => {
      try {
        log.info(`loading: ${name}:${v}`);
        const loadOnce = () => ModelVersion.load({
          name, version: v, config, backend, files, clock: this.opts.clock, log, server: this.opts.server, cache: this.opts.cache,
          metrics: this.opts.metrics, rateLimiter: this.opts.rateLimiter, schedulerDelay: this.opts.schedulerDelay, filesFingerprint,
          namespace: this.opts.namespace,
        });
        let mv: ModelVersion | undefined;
        // As Triton: a failed version is created again, up to the retry count, before the load fails.
        for (let attempt = 0; !mv; attempt++) {
          try {
            mv = await loadOnce();
          } catch (err) {
            if (attempt >= (this.opts.loadRetryCount ?? 0)) throw err;
            log.warn(`failed to load '${name}' version ${v}: ${asTsiError(err).message}; retrying (${attempt + 1} of ${this.opts.loadRetryCount})`);
          }
        }
        if (config.platform === 'ensemble') this.completeEnsembleLabels(mv);
        loaded.set(v, mv);
        log.info(`loaded '${name}' version ${v} on ${mv.devices().join(', ')}`);
      } catch (err) {
        const msg = asTsiError(err).message;
        failed.set(v, msg);
        log.error(`failed to load '${name}' version ${v}: ${msg}`);
      }
    }));
    // Triton's text for versions that did not load: `load failed for model '<m>': version <v> is at
    // UNAVAILABLE state: <reason>;` for each.
    const loadFailed = () => new TsiError('INVALID_ARG',
      `load failed for model '${name}': ${[...failed].map(([v, msg]) => `version ${v} is at UNAVAILABLE state: ${msg};`).join('')}`);
    // A failed reload keeps serving the old versions, as Triton does.
    if (loaded.size === 0 && wasReady) throw loadFailed();
    const old = e.versions;
    e.versions = loaded;
    e.configOverride = overrides?.configJson !== undefined && !overrides.files ? { fingerprint: e.fingerprint } : undefined;
    e.unavailable = new Map([...failed].map(([v, reason]) => [v, { state: 'UNAVAILABLE' as ModelState, reason }]));
    e.error = undefined;
    e.state = loaded.size > 0 ? 'READY' : 'UNAVAILABLE';
    // Triton's line, once per load of the model however many versions it has (clients count them).
    if (loaded.size > 0 && failed.size === 0) log.info(`successfully loaded '${name}'`);
    for (const [v, mv] of old) {
      void mv.unload().then(() => log.info(`successfully unloaded '${name}' version ${v}`));
    }
    if (loaded.size === 0) throw loadFailed();
  }

  private async prepareConfig(name: string, files: ModelFiles, configJson?: string, src?: RepositorySource): Promise<ModelConfig> {
    let config: ModelConfig = {};
    const custom = this.opts.configName !== undefined ? `configs/${this.opts.configName}.pbtxt` : undefined;
    if (configJson !== undefined) config = parseModelConfig(configJson, `${name}/config.json (load override)`);
    else if (custom !== undefined && await files.exists(custom)) {
      config = parseModelConfig(new TextDecoder().decode(await files.read(custom)), `${name}/${custom}`);
    } else if (await files.exists('config.pbtxt')) {
      config = parseModelConfig(new TextDecoder().decode(await files.read('config.pbtxt')), `${name}/config.pbtxt`);
    } else if (await files.exists('config.json')) {
      config = parseModelConfig(new TextDecoder().decode(await files.read('config.json')), `${name}/config.json`);
    } else if (!this.opts.autoComplete) {
      throw new TsiError('INVALID_ARG', `failed to open text file for read ${name}/config.pbtxt: no such file (auto-complete is disabled)`);
    }
    if (!config.name || src?.namesModels?.has(name)) config = { ...config, name };
    if (!config.backend && !config.platform) {
      const detected = await this.detectBackend(files, config);
      if (detected) config = { ...config, ...detected };
      else if (!config.default_model_filename) config = { ...config, ...backendFromModelName(name) };
    }
    const normalize = (c: ModelConfig) => normalizeModelConfig(c, { modelName: name, gpuCount: this.opts.gpuCount, defaultMaxBatchSize: this.opts.defaultMaxBatchSize });
    // Triton's order: the config and the folder name are checked, and the instance groups, before
    // the backend completes the config or looks for the model file.
    const ioCheck = this.opts.autoComplete ? 'last' : 'first';
    validateModelConfig(normalize(config), { modelName: name, gpuCount: this.opts.gpuCount, io: ioCheck === 'last' ? 'skip' : ioCheck });
    const backendName = config.platform === 'ensemble' ? 'ensemble' : (config.backend || platformBackend(config.platform));
    const backend = backendName ? await this.opts.backends.get(backendName) : undefined;
    if (backend?.autoCompleteConfig && this.opts.autoComplete) {
      const versions = await this.versionDirs(files);
      if (versions.length > 0) {
        config = await backend.autoCompleteConfig(config, { files, version: versions[versions.length - 1]!, log: this.opts.log });
        if (config.name !== name) {
          throw new TsiError('INVALID_ARG', `auto-complete of model '${name}' changed its name to '${config.name}'`);
        }
      }
    }
    if (backend?.describeModel) {
      const versions = await this.versionDirs(files);
      if (versions.length > 0) {
        const filled = normalize(config);
        const io = await backend.describeModel(filled, versions[versions.length - 1]!, files);
        if (this.opts.autoComplete) {
          const r = autoCompleteConfig(config, io, { defaultMaxBatchSize: this.opts.defaultMaxBatchSize, modelName: name });
          for (const n of r.notes) this.opts.log.verbose(1, n);
          config = r.config;
        }
        checkConfigAgainstModel(config, io, name);
      }
    }
    const normalized = normalize(config);
    validateModelConfig(normalized, { modelName: name, gpuCount: this.opts.gpuCount, io: ioCheck });
    return normalized;
  }

  /** The step models of an ensemble, read from the repository (as `scan` found it) without loading them. */
  private stepConfigs(found: Map<string, RepositorySource | Error>): StepConfigs {
    const prepared = new Map<string, Promise<ModelConfig>>();
    const config = (m: string): Promise<ModelConfig> => {
      let p = prepared.get(m);
      if (!p) prepared.set(m, (p = this.prepareStep(m, found.get(m) as RepositorySource)));
      return p;
    };
    return {
      has: (m) => found.get(m) !== undefined && !(found.get(m) instanceof Error),
      config,
      versions: async (m) => this.selectVersions(m, (found.get(m) as RepositorySource).files(m), await config(m)),
    };
  }

  private async prepareStep(name: string, src: RepositorySource): Promise<ModelConfig> {
    const fingerprint = await src.fingerprint?.(name);
    const checked = this.checkedSteps.get(name);
    if (checked && checked.fingerprint === fingerprint) return checked.config;
    // A step already serving from an unchanged folder: the config it loaded with.
    const loaded = fingerprint !== undefined && this.models.get(name)?.fingerprint === fingerprint ? this.readyVersions(name)[0] : undefined;
    if (loaded) return loaded.config;
    const config = this.prepareConfig(name, src.files(name), undefined, src);
    // Only a source that can tell a changed folder may hand the result on; a failure is not kept.
    if (fingerprint !== undefined) {
      this.checkedSteps.set(name, { fingerprint, config });
      config.catch(() => {
        if (this.checkedSteps.get(name)?.config === config) this.checkedSteps.delete(name);
      });
    }
    return config;
  }

  private async detectBackend(files: ModelFiles, config: ModelConfig): Promise<ModelConfig | undefined> {
    const versions = await this.versionDirs(files);
    for (const v of versions.reverse()) {
      const fname = config.default_model_filename;
      if (fname && (await files.exists(`${v}/${fname}`))) continue;
      if (await files.exists(`${v}/model.onnx`)) return { backend: 'onnxruntime', platform: 'onnxruntime_onnx' };
      if (await files.exists(`${v}/model.mjs`)) return { backend: 'javascript' };
      if (await files.exists(`${v}/model.js`)) return { backend: 'javascript' };
      if (await files.exists(`${v}/model.py`)) return { backend: 'python' };
    }
    return undefined;
  }

  private async versionDirs(files: ModelFiles): Promise<number[]> {
    const entries = await files.list('');
    return entries.filter((d) => d.isDir && VERSION_DIR.test(d.name)).map((d) => Number(d.name)).sort((a, b) => a - b);
  }

  private async selectVersions(name: string, files: ModelFiles, config: ModelConfig): Promise<number[]> {
    const all = await this.versionDirs(files);
    const policy = config.version_policy ?? { latest: { num_versions: 1 } };
    let chosen: number[];
    if (policy.all) chosen = all;
    else if (policy.specific) {
      // As Triton: the listed versions that have a folder load, each missing one is logged.
      chosen = [];
      for (const v of new Set(policy.specific.versions ?? [])) {
        if (all.includes(v)) chosen.push(v);
        else this.opts.log.error(`version ${v} is specified for model '${name}', but the version directory is not present`);
      }
      chosen.sort((a, b) => a - b);
    } else chosen = all.slice(-(policy.latest?.num_versions ?? 1));
    if (chosen.length === 0) throw new TsiError('INVALID_ARG', `at least one version must be available under the version policy of model '${name}'`);
    return chosen;
  }

  /**
   * Registers models found in the repository without loading them: listed as UNAVAILABLE with
   * `reason`, ready to be loaded on demand, and no obstacle to readiness.
   */
  park(names: readonly string[], reason = NOT_LOADED_BUDGET): void {
    for (const n of names) {
      const e = this.entry(n);
      if (e.versions.size > 0) continue;
      e.parked = reason;
      e.state = 'UNAVAILABLE';
    }
  }

  /** Why a model is registered and not loaded, if it is (see `park`). */
  parkedReason(name: string): string | undefined {
    return this.models.get(name)?.parked;
  }

  /** The repository's current fingerprint of a model's folder (a failed on-demand load waits for a change). */
  async fingerprint(name: string): Promise<string | undefined> {
    const src = (await this.scan()).get(name);
    return src instanceof Error ? src.message : await src?.fingerprint?.(name);
  }

  /** Unloads every version of a model; in-flight requests finish first. `park`: to be loaded again on demand. */
  async unload(name: string, park?: string): Promise<void> {
    const e = this.models.get(name);
    // Triton: unloading a model it does not know is a no-op that succeeds.
    if (!e) return;
    // As Triton's dependency graph: the model's own load, and those of the ensembles that run it,
    // finish first (an ensemble loading its composing models must not see one leave under it).
    const loading = this.dependents(name).filter((n) => this.loadsInProgress.has(n));
    if (loading.length > 0) this.opts.log.info(`unloading '${name}' once the loads in progress of ${loading.map((n) => `'${n}'`).join(', ')} are over`);
    await Promise.all([name, ...loading].map((n) => this.inflightLoads.get(n)));
    const old = e.versions;
    e.versions = new Map();
    e.explicitlyUnloaded = park === undefined;
    e.parked = park;
    e.state = 'UNAVAILABLE';
    await Promise.all([...old].map(async ([v, mv]) => {
      await mv.unload();
      if (park === undefined) e.unavailable.set(v, { state: 'UNAVAILABLE', reason: 'unloaded' });
      this.opts.log.info(`successfully unloaded '${name}' version ${v}`);
    }));
  }

  /** The ensembles that run `name`, directly or through other ensembles. */
  dependents(name: string): string[] {
    const out = new Set<string>();
    const visit = (m: string) => {
      for (const [n, e] of this.models) {
        if (!out.has(n) && e.steps?.has(m)) {
          out.add(n);
          visit(n);
        }
      }
    };
    visit(name);
    out.delete(name);
    return [...out];
  }

  async unloadAll(): Promise<void> {
    await Promise.all([...this.models.keys()].map((n) => this.unload(n).catch(() => {})));
  }

  /**
   * The version a request addresses: a given version, or the highest READY one. Error texts are
   * Triton's ("Request for unknown model: ...").
   */
  /**
   * An ensemble output without a label file of its own takes the labels of the composing model's
   * output that produces it, as Triton completes an ensemble's label provider when it loads (its
   * composing models are loaded first), so `classification` on the ensemble names the classes.
   */
  private completeEnsembleLabels(mv: ModelVersion): void {
    for (const out of mv.config.output ?? []) {
      if (!out.name || mv.labels.has(out.name)) continue;
      for (const step of mv.config.ensemble_scheduling?.step ?? []) {
        const key = Object.entries(step.output_map ?? {}).find(([, tensor]) => tensor === out.name)?.[0];
        if (key === undefined) continue;
        let labels: string[] | undefined;
        try {
          labels = this.get(step.model_name ?? '', String(step.model_version ?? -1)).labels.get(key);
        } catch {
          // Not loaded: the ensemble's own load reports that.
        }
        if (labels) mv.labels.set(out.name, labels);
      }
    }
  }

  get(name: string, version?: string): ModelVersion {
    const e = this.models.get(name);
    if (!e || (e.versions.size === 0 && e.unavailable.size === 0 && !e.error && e.state !== 'LOADING' && e.parked === undefined)) {
      throw new TsiError('NOT_FOUND', `Request for unknown model: '${name}' is not found`);
    }
    if (version !== undefined && version !== '' && version !== '-1') {
      if (!/^[0-9]+$/.test(version)) {
        throw new TsiError('INVALID_ARG', `failed to get model version from specified version string '${version}' (details: stol), version should be an integral value > 0`);
      }
      const v = Number(version);
      const mv = e.versions.get(v);
      if (mv && mv.state === 'READY') return mv;
      if (mv || e.unavailable.has(v)) {
        throw new TsiError('UNAVAILABLE', `Request for unknown model: '${name}' version ${v} is not at ready state`);
      }
      throw new TsiError('NOT_FOUND', `Request for unknown model: '${name}' version ${v} is not found`);
    }
    let best: ModelVersion | undefined;
    for (const mv of e.versions.values()) if (mv.state === 'READY' && (!best || mv.version > best.version)) best = mv;
    if (!best) throw new TsiError('UNAVAILABLE', `Request for unknown model: '${name}' has no available versions`);
    return best;
  }

  /** Whether a model of this name is registered here and not unloaded: one identifier of the name (namespaces.ts). */
  holds(name: string): boolean {
    const e = this.models.get(name);
    return e !== undefined && !e.explicitlyUnloaded
      && (e.versions.size > 0 || e.unavailable.size > 0 || e.error !== undefined || e.state === 'LOADING' || e.parked !== undefined);
  }

  /** READY versions of a model, highest first. */
  readyVersions(name: string): ModelVersion[] {
    const e = this.models.get(name);
    if (!e) return [];
    return [...e.versions.values()].filter((m) => m.state === 'READY').sort((a, b) => b.version - a.version);
  }

  /** Every model version known, for the index and the start-up table. */
  index(): IndexEntry[] {
    const out: IndexEntry[] = [];
    const names = new Set([...this.models.keys(), ...this.known]);
    for (const name of [...names].sort((a, b) => a.localeCompare(b))) {
      const e = this.models.get(name);
      if (!e) {
        out.push({ name });
        continue;
      }
      if (e.error && e.versions.size === 0) {
        out.push({ name: e.name, state: 'UNAVAILABLE', reason: e.error });
        continue;
      }
      if (e.parked !== undefined && e.versions.size === 0) {
        out.push({ name: e.name, state: 'UNAVAILABLE', reason: e.parked });
        continue;
      }
      if (e.state === 'LOADING' && e.versions.size === 0) {
        out.push({ name: e.name, state: 'LOADING', reason: '' });
        continue;
      }
      const rows = new Map<number, IndexEntry>();
      for (const [v, u] of e.unavailable) rows.set(v, { name: e.name, version: String(v), state: u.state, reason: u.reason });
      for (const [v, mv] of e.versions) rows.set(v, { name: e.name, version: String(v), state: mv.state, reason: mv.reason });
      out.push(...[...rows.entries()].sort((a, b) => a[0] - b[0]).map(([, r]) => r));
    }
    return out;
  }

  /** Strict readiness: every known version READY, or unloaded on purpose. */
  allReady(): boolean {
    for (const e of this.models.values()) {
      if (e.explicitlyUnloaded || (e.parked !== undefined && e.versions.size === 0)) continue;
      if (e.error || e.state === 'LOADING') return false;
      for (const mv of e.versions.values()) if (mv.state !== 'READY') return false;
      for (const u of e.unavailable.values()) if (u.reason !== 'unloaded') return false;
    }
    return true;
  }

  names(): string[] {
    return [...this.models.keys()];
  }

  /** Drops a model that left the repository (poll mode), after `unload`. */
  forget(name: string): void {
    const e = this.models.get(name);
    if (e && e.versions.size === 0) this.models.delete(name);
  }

  /** Models whose folder changed since they were loaded (poll mode), plus new and removed ones. */
  async changes(): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    const found = await this.scan();
    // New models are LOADING from the moment the scan finds them, before any await: readiness is
    // false from here until their loads are over (the poller loads them next).
    const added = [...found.keys()].filter((name) => !this.models.has(name));
    this.markLoading(added);
    const modified: string[] = [];
    for (const [name, src] of found) {
      const e = this.models.get(name);
      if (e && !added.includes(name) && !(src instanceof Error) && src.fingerprint && (await src.fingerprint(name)) !== e.fingerprint) modified.push(name);
    }
    // Only models that came from a repository can leave it (not ones loaded from override files).
    const removed = [...this.models.entries()].filter(([n, e]) => !found.has(n) && e.source !== undefined).map(([n]) => n);
    return { added, removed, modified };
  }
}

/**
 * Triton's last resort for a config with no backend, no platform and no model file it knows: a
 * model named `<anything>.<backend>` runs that backend from `model.<backend>`.
 */
function backendFromModelName(name: string): ModelConfig {
  const dot = name.indexOf('.');
  if (dot < 0) {
    throw new TsiError('INVALID_ARG', `Invalid model name: Could not determine backend for model '${name}' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'.`);
  }
  const backend = name.slice(dot + 1);
  return { backend, default_model_filename: `model.${backend}` };
}

function platformBackend(platform: string | undefined): string | undefined {
  if (platform === 'onnxruntime_onnx') return 'onnxruntime';
  return undefined;
}
