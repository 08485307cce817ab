/**
 * Triton's repeat test backend: decoupled (or not: then its one response, and the final flag sent on
 * its own, complete the request before execute returns), max_batch_size 0, inputs IN (INT32 vector),
 * DELAY (UINT32, IN's shape) and WAIT (UINT32 [1]); outputs OUT (INT32 [1]) and IDX (UINT32 [1]). One
 * response per element of IN, the i'th after DELAY[i] ms; the instance takes its next request after
 * WAIT ms, so responses of several requests may interleave. IN of shape [0] gives only the final flag.
 * Its load-time texts are Triton's.
 */

import type { Backend, BackendRequest } from '../backend.js';
import type { ModelConfig, ModelInput } from '../config/model-config.js';
import { answeredLater, invalid, shapeText, sleep } from './common.js';

/** Triton's repeat ValidateModelConfig, with its texts. */
function checkRepeatConfig(cfg: ModelConfig): void {
  if ((cfg.max_batch_size ?? 0) !== 0) throw invalid('repeat backend only supports models with max_batch_size == 0');
  const inputs = cfg.input ?? [];
  const outputs = cfg.output ?? [];
  if (inputs.length !== 3) throw invalid(`expected 3 inputs, got ${inputs.length}`);
  if (outputs.length !== 2) throw invalid(`expected 2 outputs, got ${outputs.length}`);
  const [inp, delay, wait] = inputs as [ModelInput, ModelInput, ModelInput];
  const [out, idx] = outputs as [ModelInput, ModelInput];
  const names: [string | undefined, string, string][] = [
    [inp.name, 'IN', 'first input'], [delay.name, 'DELAY', 'second input'], [wait.name, 'WAIT', 'third input'],
    [out.name, 'OUT', 'first output'], [idx.name, 'IDX', 'second output'],
  ];
  for (const [got, want, which] of names) {
    if (got !== want) throw invalid(`expected ${which} tensor name to be ${want}, got ${got ?? ''}`);
  }
  const dims = (io: ModelInput) => io.dims ?? [];
  if (dims(inp).length !== 1) throw invalid(`expected IN shape to have one dimension, got ${shapeText(dims(inp))}`);
  if (shapeText(dims(inp)) !== shapeText(dims(delay))) {
    throw invalid(`expected IN and DELAY shape to match, got ${shapeText(dims(inp))} and ${shapeText(dims(delay))}`);
  }
  for (const [io, n] of [[wait, 'WAIT'], [out, 'OUT'], [idx, 'IDX']] as const) {
    if (shapeText(dims(io)) !== '[1]') throw invalid(`expected ${n} shape to be [1], got ${shapeText(dims(io))}`);
  }
  const types: [ModelInput, string, string][] = [[inp, 'IN', 'INT32'], [delay, 'DELAY', 'UINT32'], [wait, 'WAIT', 'UINT32'], [out, 'OUT', 'INT32'], [idx, 'IDX', 'UINT32']];
  for (const [io, n, t] of types) {
    if (io.data_type !== `TYPE_${t}`) throw invalid(`expected ${n} datatype to be ${t}, got ${io.data_type ?? ''}`);
  }
}

export function repeatBackend(): Backend {
  return {
    name: 'repeat',
    async loadModel(ctx) {
      checkRepeatConfig(ctx.config);
      const decoupled = ctx.config.model_transaction_policy?.decoupled === true;
      const stream = async (r: BackendRequest, values: ArrayLike<number>, delays: ArrayLike<number>): Promise<void> => {
        for (let e = 0; e < values.length; e++) {
          await sleep(delays[e]!);
          r.send({
            outputs: [
              { name: 'OUT', datatype: 'INT32', shape: [1], data: Int32Array.of(values[e]!) },
              { name: 'IDX', datatype: 'UINT32', shape: [1], data: Uint32Array.of(e) },
            ],
          }, false);
        }
        r.send({ outputs: [] }, true);
      };
      return answeredLater(decoupled, async (requests, answer) => {
        if (requests.length > 1) throw invalid('repeat backend does not support batched request execution');
        let waitMs = 0;
        for (const r of requests) {
          const wait = r.inputs.get('WAIT')?.data;
          if (!wait || (wait as ArrayLike<number>).length !== 1) {
            r.send(invalid('unexpected size for WAIT input'), true);
            continue;
          }
          waitMs = (wait as Uint32Array)[0]!;
          const inp = r.inputs.get('IN')!;
          const delay = r.inputs.get('DELAY')!;
          if (shapeText(inp.shape) !== shapeText(delay.shape)) {
            r.send(invalid(`expected IN and DELAY shape to match, got ${shapeText(inp.shape)} and ${shapeText(delay.shape)}`), true);
            continue;
          }
          answer(stream(r, (inp.data as Int32Array).slice(), (delay.data as Uint32Array).slice()));
        }
        // The instance takes its next request after WAIT ms, whatever its responses are doing.
        await sleep(waitMs);
      });
    },
  };
}
