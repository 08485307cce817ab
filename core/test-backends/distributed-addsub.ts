/**
 * Triton's distributed_addsub test backend (server's src/test/distributed_addsub; L0_passive_instance):
 * a model of two instance kinds working together. Its config has a CPU group and a passive GPU group;
 * the scheduler hands requests only to the CPU instance, which computes OUTPUT0 = INPUT0 + INPUT1 itself
 * and asks the passive GPU instance for OUTPUT1 = INPUT0 - INPUT1. Inputs and outputs INPUT0/INPUT1 and
 * OUTPUT0/OUTPUT1 are INT32 of one dimension, all of one size. A CPU instance must not be passive and a
 * GPU one must be (Triton's texts); a request reaching a GPU instance fails the execution. Each execution
 * is logged with the instance's kind and device, as Triton's backend logs it (L0_passive_instance greps
 * the log for a GPU instance executing). On a machine without a GPU the GPU instance still loads (tsi
 * runs KIND_GPU groups on the CPU there) and is what OUTPUT1 comes from.
 */

import type { Backend, BackendInstance, InstanceSpec } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import { invalid } from './common.js';

/** Triton's distributed_addsub ValidateModelConfig, with its texts. */
function checkAddSubConfig(cfg: ModelConfig): void {
  const inputs = cfg.input ?? [];
  const outputs = cfg.output ?? [];
  if (inputs.length !== 2) throw invalid('model must have two inputs');
  if (outputs.length !== 2) throw invalid('model must have two outputs');
  let dim: number | undefined;
  for (let i = 0; i < 2; i++) {
    const input = inputs[i]!;
    const output = outputs[i]!;
    const inDims = input.dims ?? [];
    if (inDims.length !== 1) throw invalid('model must have input of one-dimensional shape');
    if (i === 0) dim = inDims[0];
    else if (dim !== inDims[0]) throw invalid('model must have consistent shape for all tensors');
    if (input.data_type !== 'TYPE_INT32') throw invalid('model input must have TYPE_INT32 data-type');
    if (input.name !== `INPUT${i}`) throw invalid(`model input must be named 'INPUT${i}' at index ${i}`);
    const outDims = output.dims ?? [];
    if (outDims.length !== 1 || outDims[0] !== inDims[0]) throw invalid('model must have consistent shape for all tensors');
    if (output.data_type !== 'TYPE_INT32') throw invalid('model output must have TYPE_INT32 data-type');
    if (output.name !== `OUTPUT${i}`) throw invalid(`model output must be named 'OUTPUT${i}' at index ${i}`);
  }
}

/** An instance's arithmetic, refused on the wrong kind as Triton's Add and Sub refuse. */
function operate(spec: InstanceSpec, op: 'Add' | 'Sub', a: Int32Array, b: Int32Array): Int32Array {
  const want = op === 'Add' ? 'KIND_CPU' : 'KIND_GPU';
  if (spec.kind !== want) throw new TsiError('INTERNAL', `${op} operation must be done by ${want === 'KIND_CPU' ? 'CPU' : 'GPU'} instance`);
  const out = new Int32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = op === 'Add' ? (a[i]! + b[i]!) | 0 : (a[i]! - b[i]!) | 0;
  return out;
}

export function distributedAddSubBackend(): Backend {
  return {
    name: 'distributed_addsub',
    async loadModel(ctx) {
      checkAddSubConfig(ctx.config);
      const model = ctx.config.name ?? '';
      // The passive instance the CPU instance hands subtraction to (the last one created, as in Triton).
      let sub: InstanceSpec | undefined;
      return {
        createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => {
          if (spec.kind === 'KIND_CPU' && spec.passive) throw invalid('CPU instance should not be passive');
          if (spec.kind === 'KIND_GPU' && !spec.passive) throw invalid('GPU instance should be passive');
          if (spec.kind !== 'KIND_CPU' && spec.kind !== 'KIND_GPU') throw invalid('instance kind must be CPU or GPU');
          if (spec.passive) sub = spec;
          const kindText = spec.kind === 'KIND_CPU' ? 'CPU' : 'GPU';
          const device = spec.kind === 'KIND_GPU' ? Math.max(0, spec.deviceId) : 0;
          return {
            spec,
            device: 'cpu',
            unload: async () => {},
            execute: async (requests) => {
              ctx.log.info(`model ${model}, instance ${spec.name} (${kindText} device ${device}), executing ${requests.length} requests`);
              if (spec.kind !== 'KIND_CPU') throw new TsiError('INTERNAL', 'Unexpected inference request sent to non-CPU instance');
              for (const r of requests) {
                const in0 = r.inputs.get('INPUT0')!;
                const a = in0.data as Int32Array;
                const b = r.inputs.get('INPUT1')!.data as Int32Array;
                try {
                  const outputs = r.requestedOutputs.map((name) => ({
                    name, datatype: in0.datatype, shape: [...in0.shape],
                    data: name === 'OUTPUT0' ? operate(spec, 'Add', a, b) : sub ? operate(sub, 'Sub', a, b) : operate(spec, 'Sub', a, b),
                  }));
                  r.send({ outputs }, true);
                } catch (err) {
                  r.send(err as TsiError, true);
                }
              }
            },
          };
        },
        unload: async () => {},
      };
    },
  };
}
