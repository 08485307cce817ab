/**
 * The load-time checks of an ensemble against its composing models' (normalised) configs, Triton's
 * ValidateEnsembleConfig / ValidateTensorMapping: every composing input mapped exactly once and to an
 * existing input, outputs mapped from existing outputs, one datatype and a compatible shape per
 * ensemble tensor, the ensemble's max_batch_size within each step's, and no step fed by two different
 * decoupled models. The configuration-only checks (unused tensors, outputs written once, data flow)
 * run earlier in validate.ts. Messages keep Triton's texts, which name the ensemble, the model
 * and the tensor.
 */

import { TsiError } from '../errors.js';
import type { ModelConfig } from './model-config.js';

/** What an ensemble tensor is, as inferred from whichever model first mentions it. */
interface TensorNode {
  model: string;
  type: string;
  dims: number[];
  fullDims: number[];
  decoupled: boolean;
  /** Which decoupled producer the data originates from (0 = the ensemble request itself). */
  label: number;
  visited: boolean;
  prev: TensorNode[];
  next: TensorNode[];
  /** Outputs of one step share a label (a decoupled step's responses carry all of them). */
  sibling?: { label: number; visited: boolean };
  /** The model of the step writing this tensor. */
  producer?: string;
}

function node(model: string, batching: boolean, type: string | undefined, dims: readonly number[] | undefined): TensorNode {
  const d = [...(dims ?? [])];
  return {
    model, type: type ?? 'TYPE_INVALID', dims: d, fullDims: batching ? [-1, ...d] : d, decoupled: false, label: 0,
    visited: false, prev: [], next: [],
  };
}

/** Equal rank and every dim equal, or -1 on either side (checked again at run time). */
function dimsMatch(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === -1 || b[i] === -1 || d === b[i]);
}

const dimsText = (d: readonly number[]) => `[${d.join(',')}]`;

function consistent(lhs: TensorNode, rhs: TensorNode, prefix: string): void {
  if (lhs.type !== rhs.type) {
    throw invalid(`${prefix}inconsistent data type: ${lhs.type} is inferred from model ${lhs.model} while ${rhs.type} is inferred from model ${rhs.model}`);
  }
  // A tensor may pass between a batching and a non-batching model when the full shapes agree.
  if (!dimsMatch(lhs.dims, rhs.dims) && !dimsMatch(lhs.fullDims, rhs.fullDims)) {
    throw invalid(`${prefix}inconsistent shape: ${dimsText(lhs.fullDims)} is inferred from model ${lhs.model} while ${dimsText(rhs.fullDims)} is inferred from model ${rhs.model}`);
  }
}

const invalid = (msg: string) => new TsiError('INVALID_ARG', msg);

/**
 * Checks `ensemble` (normalised, already config-validated) against `steps[i]`, the config of the model
 * step i runs. Returns whether the ensemble is decoupled: true when any step's responses come from a
 * decoupled model, as Triton derives it.
 */
export function validateEnsemble(ensemble: ModelConfig, steps: readonly ModelConfig[]): { decoupled: boolean } {
  const name = ensemble.name ?? '';
  const batching = (ensemble.max_batch_size ?? 0) > 0;
  const tensors = new Map<string, TensorNode>();
  for (const input of ensemble.input ?? []) {
    tensors.set(input.name!, node(name, batching, input.data_type, input.reshape?.shape ?? input.dims));
  }
  // The response itself is a last "step" taking every ensemble output (Triton's sink node): outputs
  // from two different decoupled steps could not be paired into one response either.
  const sink = node(name, batching, undefined, undefined);
  for (const output of ensemble.output ?? []) {
    const out = node(name, batching, output.data_type, output.reshape?.shape ?? output.dims);
    tensors.set(output.name!, out);
    sink.prev.push(out);
    out.next.push(sink);
  }

  (ensemble.ensemble_scheduling?.step ?? []).forEach((step, idx) => {
    const cfg = steps[idx]!;
    const model = step.model_name ?? '';
    const mbs = cfg.max_batch_size ?? 0;
    if (mbs !== 0 && mbs < (ensemble.max_batch_size ?? 0)) {
      throw invalid(`ensemble ${name} allows maximum batch size ${ensemble.max_batch_size}, but it contains model ${model} which only allows maximum batch size to be ${mbs}`);
    }
    const stepBatching = mbs > 0;
    const inputMap = step.input_map ?? {};
    const outputMap = step.output_map ?? {};
    const inputs = new Map((cfg.input ?? []).map((i) => [i.name!, i]));
    for (const [input, tensor] of Object.entries(inputMap)) {
      if (!inputs.has(input)) {
        throw invalid(`in ensemble ${name}, ensemble tensor ${tensor} is mapping to non-existing input ${input} in model ${model}`);
      }
    }
    for (const [input, cfgInput] of inputs) {
      const tensor = inputMap[input];
      if (tensor === undefined) {
        if (cfgInput.optional) continue;
        throw invalid(`in ensemble ${name}, input ${input} in model ${model} is not mapped to any ensemble tensors`);
      }
      const t = node(model, stepBatching, cfgInput.data_type, cfgInput.dims);
      const known = tensors.get(tensor);
      if (known) consistent(known, t, `in ensemble ${name}, ensemble tensor ${tensor}: `);
      else tensors.set(tensor, t);
    }
    const outputs = new Map((cfg.output ?? []).map((o) => [o.name!, o]));
    const sibling = { label: 0, visited: false };
    const produced = new Set<string>();
    for (const [output, tensor] of Object.entries(outputMap)) {
      const cfgOutput = outputs.get(output);
      if (!cfgOutput) {
        throw invalid(`in ensemble ${name}, ensemble tensor ${tensor} is mapped from non-existing output ${output} in model ${model}`);
      }
      if (produced.has(tensor)) {
        throw invalid(`in ensemble ${name}, multiple outputs in model ${model} are mapped to the same ensemble tensor ${tensor}`);
      }
      produced.add(tensor);
      const t = node(model, stepBatching, cfgOutput.data_type, cfgOutput.dims);
      let known = tensors.get(tensor);
      if (known) consistent(known, t, `in ensemble ${name}, ensemble tensor ${tensor}: `);
      else tensors.set(tensor, (known = t));
      known.sibling = sibling;
      known.producer = model;
    }
    const decoupled = cfg.model_transaction_policy?.decoupled === true;
    for (const tensor of Object.values(outputMap)) {
      const out = tensors.get(tensor)!;
      out.decoupled = decoupled;
      for (const input of Object.values(inputMap)) {
        const src = tensors.get(input)!;
        out.prev.push(src);
        src.next.push(out);
      }
    }
  });

  // Walk the data flow from the ensemble inputs, labelling each tensor with the decoupled step its
  // data comes from: a step whose inputs carry two labels would have to pair responses of two streams.
  let label = 0;
  const queue: TensorNode[] = [];
  for (const input of ensemble.input ?? []) {
    const n = tensors.get(input.name!)!;
    n.visited = true;
    queue.push(n);
  }
  for (let cur = queue.shift(); cur; cur = queue.shift()) {
    for (const next of cur.next) {
      if (next.visited || !next.prev.every((p) => p.visited)) continue;
      const first = next.prev[0]!.label;
      if (next.prev.some((p) => p.label !== first)) {
        throw invalid(`in ensemble ${name}, step of model '${next.producer ?? next.model}' receives inputs originated from different decoupled models`);
      }
      if (next.sibling?.visited) next.label = next.sibling.label;
      else {
        next.label = next.decoupled ? ++label : first;
        if (next.sibling) {
          next.sibling.label = next.label;
          next.sibling.visited = true;
        }
      }
      next.visited = true;
      queue.push(next);
    }
  }
  // Triton marks the ensemble decoupled when a step is, and then its config check refuses a response
  // cache on it, as on any decoupled model (a cached ensemble would replay only one response).
  if (label !== 0 && ensemble.response_cache?.enable) {
    throw new TsiError('INVALID_ARG', `Response Cache does not currently support model ${name} with 'decoupled' transaction policy. Please disable the response cache.`);
  }
  return { decoupled: label !== 0 };
}

/** The models an ensemble runs, each once (for loading them first and for `unload_dependents`). */
export function ensembleComposingModels(config: ModelConfig): { name: string; version: number }[] {
  const seen = new Map<string, { name: string; version: number }>();
  for (const step of config.ensemble_scheduling?.step ?? []) {
    const key = `${step.model_name}:${step.model_version ?? -1}`;
    if (!seen.has(key)) seen.set(key, { name: step.model_name ?? '', version: step.model_version ?? -1 });
  }
  return [...seen.values()];
}
