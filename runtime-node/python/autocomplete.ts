/**
 * Triton's `auto_complete_config(auto_complete_model_config)` for Python models: a short-lived stub
 * process imports model.py and, when the class has the staticmethod, calls it with the config in
 * Triton's JSON form (`pb_utils.ModelConfig`); what it returns becomes the model's config, before
 * tsi normalises and validates it. This is what lets a Python model load with no config.pbtxt.
 *
 * Only top-level fields the script changed are taken back, parsed by core's JSON config reader, so
 * the fields it did not touch keep exactly what config.pbtxt said. No process is started for a
 * model.py that defines its own TritonPythonModel and never mentions `auto_complete_config`.
 */

import { TsiError, modelConfigToJson, parseModelConfig, type AutoCompleteContext, type ModelConfig } from '../../core/index.js';
import { StubProcess } from './process.js';
import type { Interpreters } from './interpreter.js';

/**
 * model.py defines TritonPythonModel itself, with no base class: then a text without
 * `auto_complete_config` has none. A class imported from elsewhere (`from common import *`, as Triton's
 * L0_model_namespacing models do) or inheriting one may have it, so the stub looks.
 */
const OWN_PLAIN_CLASS = /^class\s+TritonPythonModel\s*(?:\(\s*(?:object)?\s*\))?\s*:/m;

export interface AutoCompleteOptions {
  interpreters: Interpreters;
  startTimeoutMs: number;
}

export async function autoCompletePython(config: ModelConfig, ctx: AutoCompleteContext, opts: AutoCompleteOptions): Promise<ModelConfig> {
  const name = config.name ?? '';
  const rel = `${ctx.version}/${config.default_model_filename || 'model.py'}`;
  if (!(await ctx.files.exists(rel))) return config;
  const text = new TextDecoder().decode(await ctx.files.read(rel));
  if (!text.includes('auto_complete_config') && OWN_PLAIN_CLASS.test(text)) return config;
  const file = ctx.files.localPath?.(rel);
  const modelDir = ctx.files.localPath?.('');
  if (!file || !modelDir) throw new TsiError('UNSUPPORTED', `model '${name}': Python models need their files on disk`);
  const runtime = await opts.interpreters.resolve(config, modelDir);
  const before = modelConfigToJson(config);
  const proc = new StubProcess({
    python: runtime.python, env: runtime.env, model: name, instance: 'auto-complete', log: ctx.log,
    startTimeoutMs: opts.startTimeoutMs,
  }, 'autocomplete');
  let reply;
  try {
    reply = await proc.handshake(
      { k: 'ac', file, name, config: JSON.stringify(before) }, ['ac'], `auto_complete_config of model '${name}' failed`,
    );
  } finally {
    proc.kill();
  }
  const after = JSON.parse(String(reply.config)) as Record<string, unknown>;
  const changed: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(after)) {
    if (JSON.stringify(value) !== JSON.stringify(before[key])) changed[key] = value;
  }
  if (Object.keys(changed).length === 0) return config;
  const parsed = parseModelConfig(JSON.stringify(changed), `${name}/${rel} auto_complete_config`);
  ctx.log.verbose(1, `model '${name}': auto_complete_config set ${Object.keys(changed).join(', ')}`);
  return { ...config, ...parsed };
}
