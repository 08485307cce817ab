/**
 * Triton's `sequence` test backend (qa's custom_sequence_int32: L0_sequence_stress, L0_rate_limiter): START
 * and READY controls, an INT32 INPUT of one dimension, OUTPUT of INPUT's shape. One int32 accumulator
 * per batch slot of each instance, as in Triton's: the direct sequence batcher keeps a sequence in one
 * slot, which is its row of every batch. READY with START sets it to the sum of INPUT, READY alone adds
 * INPUT, and every element of OUTPUT is the accumulator; a request not READY (a padding row) gets a
 * response without outputs. `execute_delay_ms` delays each execution.
 */

import type { Backend, BackendInstance, BackendRequest, InstanceSpec } from '../backend.js';
import type { ModelConfig } from '../config/model-config.js';
import { TsiError } from '../errors.js';
import { invalid, param, sleep } from './common.js';

function checkSequenceConfig(cfg: ModelConfig): void {
  const names = (cfg.sequence_batching?.control_input ?? []).map((c) => c.name).sort();
  if (names.length !== 2 || names[0] !== 'READY' || names[1] !== 'START') throw invalid("'START' and 'READY' must be configured as the control inputs");
  const [input] = cfg.input ?? [];
  const [output] = cfg.output ?? [];
  if ((cfg.input ?? []).length !== 1 || (input!.dims ?? []).length !== 1) throw invalid("model must have one input 'INPUT' with vector shape, any length");
  if (input!.data_type !== 'TYPE_INT32') throw invalid('model input must have TYPE_INT32 data-type');
  if (input!.name !== 'INPUT') throw invalid("model input must be named 'INPUT'");
  if ((cfg.output ?? []).length !== 1) throw invalid("model must have one output 'OUTPUT' with vector shape, any length");
  if ((output!.dims ?? []).length !== 1 || output!.dims![0] !== input!.dims![0]) throw invalid("model must have output 'OUTPUT' with shape matching 'INPUT'");
  if (output!.data_type !== 'TYPE_INT32') throw invalid('model output must have TYPE_INT32 data-type');
  if (output!.name !== 'OUTPUT') throw invalid("model output must be named 'OUTPUT'");
}

export function sequenceBackend(): Backend {
  return {
    name: 'sequence',
    async loadModel(ctx) {
      checkSequenceConfig(ctx.config);
      const delayMs = Number(param(ctx.config, 'execute_delay_ms') ?? 0);
      const batching = (ctx.config.max_batch_size ?? 0) > 0;
      const slots = Math.max(1, ctx.config.max_batch_size ?? 0);
      return {
        createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => {
          const accumulators = new Int32Array(slots);
          return {
            spec, device: 'cpu', unload: async () => {},
            execute: async (requests: BackendRequest[]) => {
              if (requests.length > slots) throw new TsiError('UNSUPPORTED', 'unable to execute batch larger than max-batch-size');
              await sleep(delayMs);
              requests.forEach((r, slot) => {
                const input = r.inputs.get('INPUT')!;
                if (batching && input.shape[0] !== 1) {
                  r.send(new TsiError('UNSUPPORTED', 'unable to execute more than one timestep at a time'), true);
                  return;
                }
                const flag = (name: string) => Number(r.inputs.get(name)?.data[0] ?? 0) !== 0;
                if (!flag('READY')) {
                  r.send({ outputs: [] }, true);
                  return;
                }
                let acc = flag('START') ? 0 : accumulators[slot]!;
                for (const v of input.data as Int32Array) acc = (acc + v) | 0;
                accumulators[slot] = acc;
                r.send({ outputs: [{ name: 'OUTPUT', datatype: 'INT32', shape: [...input.shape], data: new Int32Array(input.data.length).fill(acc) }] }, true);
              });
            },
          };
        },
        unload: async () => {},
      };
    },
  };
}

