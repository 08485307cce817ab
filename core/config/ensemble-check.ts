/**
 * An ensemble checked from the repository's configs alone, before any of its steps loads, as Triton
 * checks it from its dependency graph: steps naming models no repository has, circular dependencies
 * between ensembles, steps whose own config is invalid, pinned versions the repository does not
 * have, then every tensor mapping (ensemble-validate.ts). A config mistake is therefore reported the
 * same way whether or not the steps could load, at start-up and on every load request. A step that
 * then fails to load is reported on its own (its index entry), and for the ensemble by the ensemble
 * backend ("... which has no loaded version").
 */

import { asTsiError, TsiError } from '../errors.js';
import { validateEnsemble } from './ensemble-validate.js';
import type { ModelConfig } from './model-config.js';

/** What the check may ask the repository about a step's model, without loading it. */
export interface StepConfigs {
  /** Whether some repository holds a model of this name. */
  has(model: string): boolean;
  /** The model's config as its load would see it (parsed, completed, normalised, validated); throws its config error. */
  config(model: string): Promise<ModelConfig>;
  /** The versions the model's version policy selects; throws when there are none. */
  versions(model: string): Promise<number[]>;
}

const invalid = (msg: string) => new TsiError('INVALID_ARG', msg);

/** Throws Triton's error for the first problem of ensemble `config` (normalised and config-validated). */
export async function checkEnsembleSteps(config: ModelConfig, repo: StepConfigs): Promise<void> {
  const name = config.name ?? '';
  const steps = config.ensemble_scheduling?.step ?? [];
  const models = [...new Set(steps.map((s) => s.model_name ?? ''))];
  const missing = models.filter((m) => !repo.has(m)).sort();
  if (missing.length) throw invalid(`ensemble ${name} contains models that are not available or ambiguous: ${missing.join(', ')}`);

  const configs = new Map<string, ModelConfig | TsiError>();
  const configOf = async (m: string): Promise<ModelConfig | TsiError> => {
    let c = configs.get(m);
    if (!c) configs.set(m, (c = await repo.config(m).catch((err: unknown) => asTsiError(err))));
    return c;
  };
  await cycleCheck(name, config, repo, configOf);

  for (const m of models) {
    const c = await configOf(m);
    if (c instanceof TsiError) throw invalid(`ensemble '${name}' depends on '${m}' which is not valid. Model '${m}' failed with error: ${c.message}`);
  }
  for (const step of steps) {
    const version = step.model_version ?? -1;
    if (version <= 0) continue;
    const model = step.model_name ?? '';
    const available = await repo.versions(model).catch(() => [] as number[]);
    if (!available.includes(version)) throw invalid(`ensemble '${name}' depends on '${model}' whose required version ${version} is not loaded.`);
  }
  const stepConfigs: ModelConfig[] = [];
  for (const s of steps) stepConfigs.push((await configOf(s.model_name ?? '')) as ModelConfig);
  validateEnsemble(config, stepConfigs);
}

/**
 * Triton's CircularDependencyCheck: walks upstream from the ensemble through the steps that are
 * ensembles themselves; reaching the start again names the last ensemble before it.
 */
async function cycleCheck(
  start: string, config: ModelConfig, repo: StepConfigs, configOf: (m: string) => Promise<ModelConfig | TsiError>,
): Promise<void> {
  const seen = new Set<string>();
  const walk = async (current: string, cfg: ModelConfig): Promise<void> => {
    for (const step of cfg.ensemble_scheduling?.step ?? []) {
      const up = step.model_name ?? '';
      if (up === start) throw invalid(`circular dependency between ensembles: ${start} -> ... -> ${current} -> ${start}`);
      if (seen.has(up) || !repo.has(up)) continue;
      seen.add(up);
      const c = await configOf(up);
      if (!(c instanceof TsiError) && c.ensemble_scheduling) await walk(up, c);
    }
  };
  await walk(start, config);
}
