/**
 * Triton's dyna_sequence test backend (L0_http's simple_string_dyna_sequence, L0_dyna_sequence_batcher):
 * a sequence model with START, END and READY controls, a CORRID control of TYPE_UINT64 or TYPE_STRING
 * (a string holding an integer, read as C++'s stoi reads it) and an INT32 INPUT of one dimension. One int32
 * accumulator per sequence: when READY, START sets it to the sum of INPUT and later requests add to it;
 * END adds the correlation id (its low 32 bits) and ends the sequence. OUTPUT has INPUT's shape, every
 * element the accumulator. `execute_delay_ms` delays each execution, as in Triton's.
 */

import type { Backend } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { Tensor } from '../types.js';
import { invalid, param, sleep, stateless } from './common.js';

function checkDynaSequenceConfig(cfg: ModelConfig): void {
  const controls = cfg.sequence_batching?.control_input ?? [];
  const names = controls.map((c) => c.name);
  if (controls.length !== 4 || !['START', 'END', 'READY', 'CORRID'].every((n) => names.includes(n))) {
    throw invalid("'START', 'END, 'READY' and 'CORRID' must be configured as the control inputs");
  }
  const corrid = controls.find((c) => c.name === 'CORRID')!.control?.[0]?.data_type;
  if (corrid !== 'TYPE_UINT64' && corrid !== 'TYPE_STRING') throw invalid('model CORRID control input must have TYPE_UINT64 or TYPE_STRING data-type');
  const [input] = cfg.input ?? [];
  const [output] = cfg.output ?? [];
  if ((cfg.input ?? []).length !== 1 || input!.name !== 'INPUT' || input!.data_type !== 'TYPE_INT32' || (input!.dims ?? []).length !== 1) {
    throw invalid("expected one input, 'INPUT', of TYPE_INT32 with one dimension");
  }
  if ((cfg.output ?? []).length !== 1 || output!.name !== 'OUTPUT' || output!.data_type !== 'TYPE_INT32') {
    throw invalid("expected one output, 'OUTPUT', of TYPE_INT32");
  }
}

/** The correlation id as uint64, or undefined where a string does not start with an int (C++ stoi). */
function dynaCorrelationId(t: Tensor | undefined): bigint | undefined {
  const v = t?.data[0];
  if (v === undefined) return undefined;
  if (!(v instanceof Uint8Array)) return BigInt.asUintN(64, BigInt(v));
  const m = /^\s*([+-]?\d+)/.exec(new TextDecoder().decode(v));
  if (!m) return undefined;
  const n = BigInt(m[1]!);
  return n < -(2n ** 31n) || n >= 2n ** 31n ? undefined : BigInt.asUintN(64, n);
}

export function dynaSequenceBackend(): Backend {
  return {
    name: 'dyna_sequence',
    async loadModel(ctx) {
      checkDynaSequenceConfig(ctx.config);
      const delayMs = Number(param(ctx.config, 'execute_delay_ms') ?? 0);
      // By correlation id: the sequence batcher keeps each sequence on one instance.
      const accumulators = new Map<bigint, number>();
      return stateless(async (requests) => {
        await sleep(delayMs);
        const seen = new Set<bigint>();
        for (const r of requests) {
          const corrid = dynaCorrelationId(r.inputs.get('CORRID'));
          if (corrid === undefined) {
            r.send(invalid('dyna sequence backend expects correlation ID to be decodable into an integer'), true);
            continue;
          }
          if (seen.has(corrid)) {
            r.send(new TsiError('UNSUPPORTED', 'Execute() called with batch containing multiple inferences requests for the same Correlation ID'), true);
            continue;
          }
          seen.add(corrid);
          const flag = (name: string) => Number(r.inputs.get(name)?.data[0] ?? 0) !== 0;
          const input = r.inputs.get('INPUT');
          if (!flag('READY') || !input) {
            r.send({ outputs: [] }, true);
            continue;
          }
          let acc = flag('START') ? 0 : (accumulators.get(corrid) ?? 0);
          for (const v of input.data as Int32Array) acc = (acc + v) | 0;
          if (flag('END')) {
            acc = (acc + Number(BigInt.asIntN(32, corrid))) | 0;
            accumulators.delete(corrid);
          } else {
            accumulators.set(corrid, acc);
          }
          r.send({ outputs: [{ name: 'OUTPUT', datatype: 'INT32', shape: [...input.shape], data: new Int32Array(input.data.length).fill(acc) }] }, true);
        }
      });
    },
  };
}
