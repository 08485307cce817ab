/**
 * Triton's square test backend (square_backend's square.cc; L0_decoupled's square_int32,
 * L0_response_statistics): one input IN and one output OUT, INT32 [1]. A request with IN = n gets n
 * responses OUT = n, then the final flag on its own (n = 0: only the flag). As in Triton, each request
 * is answered by its own loop, started by `execute`, which returns at once: the instance takes its next
 * request while earlier ones are still answering (unload waits for them).
 *
 * Config parameters (string values of digits only; anything else is ignored, as Triton's does):
 * - CUSTOM_INFER_DELAY_NS: each response first "computes" this long (CUSTOM_CANCEL_DELAY_NS instead
 *   once the client cancelled the request), then CUSTOM_OUTPUT_DELAY_NS while writing its output.
 * - CUSTOM_FAIL_COUNT F and CUSTOM_EMPTY_COUNT E: of the n responses, the last E send nothing (empty)
 *   and the F before them fail with "simulated failure" (UNKNOWN).
 * A cancelled request stops after the response that saw the cancellation (which sends nothing).
 * Every response's timings go to the model's `response_stats` (TRITONBACKEND_ModelInstanceReportResponseStatistics).
 * Square checks neither max_batch_size nor the transaction policy at load, as Triton's does not.
 */

import type { Backend, BackendRequest } from '../backend.js';
import { TsiError } from '../errors.js';
import type { Logger } from '../types.js';
import type { ModelConfig } from '../config/model-config.js';
import { answeredLater, invalid, shapeText, sleep } from './common.js';

interface SquareParameters {
  inferNs: number;
  outputNs: number;
  cancelNs: number;
  failCount: number;
  emptyCount: number;
}

/** Triton's ReadParameter: a string of digits only, else the default (0) and a log line. */
function readParameters(cfg: ModelConfig, log: Logger): SquareParameters {
  const read = (key: string): number => {
    const v = cfg.parameters?.[key];
    if (v === undefined) return 0;
    const s = v.string_value ?? '';
    if (!/^\d+$/.test(s)) {
      log.info(`${s} string_value from ${key} parameter is not a number`);
      return 0;
    }
    return Number(s);
  };
  return {
    inferNs: read('CUSTOM_INFER_DELAY_NS'), outputNs: read('CUSTOM_OUTPUT_DELAY_NS'), cancelNs: read('CUSTOM_CANCEL_DELAY_NS'),
    failCount: read('CUSTOM_FAIL_COUNT'), emptyCount: read('CUSTOM_EMPTY_COUNT'),
  };
}

/** Triton's InferResult: of n responses, [n-E, n) are empty, [n-E-F, n-E) fail, the rest succeed. */
function resultOf(p: SquareParameters, index: number, count: number): 'success' | 'fail' | 'empty' {
  if (index + p.failCount + p.emptyCount < count) return 'success';
  if (index + p.emptyCount < count) return 'fail';
  return 'empty';
}

/** Triton's square ValidateModelConfig, with its texts. */
function checkSquareConfig(cfg: ModelConfig): void {
  const inputs = cfg.input ?? [];
  const outputs = cfg.output ?? [];
  if (inputs.length !== 1) throw invalid(`expected 1 input, got ${inputs.length}`);
  if (outputs.length !== 1) throw invalid(`expected 1 output, got ${outputs.length}`);
  const [inp, out] = [inputs[0]!, outputs[0]!];
  if (inp.name !== 'IN') throw invalid(`expected first input tensor name to be IN, got ${inp.name ?? ''}`);
  if (out.name !== 'OUT') throw invalid(`expected first output tensor name to be OUT, got ${out.name ?? ''}`);
  for (const [io, name] of [[inp, 'IN'], [out, 'OUT']] as const) {
    if (shapeText(io.dims ?? []) !== '[1]') throw invalid(`expected ${name} shape to be [1], got ${shapeText(io.dims ?? [])}`);
  }
  for (const [io, name] of [[inp, 'IN'], [out, 'OUT']] as const) {
    if (io.data_type !== 'TYPE_INT32') throw invalid(`expected ${name} datatype to be INT32, got ${io.data_type ?? ''}`);
  }
}

const nowNs = () => performance.now() * 1e6;
const sleepNs = (ns: number) => sleep(ns / 1e6);

/** Answers one request: its n responses one after another, each timed and reported, then the final flag. */
async function respond(r: BackendRequest, count: number, dims: number, p: SquareParameters): Promise<void> {
  for (let e = 0; e < count; e++) {
    const start = nowNs();
    const cancelled = r.cancelled === true;
    await sleepNs(cancelled ? p.cancelNs : p.inferNs);
    const result = resultOf(p, e, count);
    let outputStart: number | undefined;
    if (!cancelled && result !== 'empty') {
      outputStart = nowNs();
      await sleepNs(p.outputNs);
    }
    const end = nowNs();
    const error = cancelled ? new TsiError('CANCELLED', 'cancelled') : result === 'fail' ? new TsiError('UNKNOWN', 'simulated failure') : undefined;
    if (outputStart !== undefined) {
      // Triton sends the response with its error, if any: the client sees the error.
      r.send(error ?? { outputs: [{ name: 'OUT', datatype: 'INT32', shape: Array<number>(dims).fill(1), data: Int32Array.of(count) }] }, false);
      r.reportResponse?.({ inferNs: outputStart - start, outputNs: end - outputStart, error });
    } else {
      r.reportResponse?.({ inferNs: end - start, error });
    }
    if (cancelled) break;
  }
  r.send({ outputs: [] }, true);
}

export function squareBackend(): Backend {
  return {
    name: 'square',
    async loadModel(ctx) {
      checkSquareConfig(ctx.config);
      const p = readParameters(ctx.config, ctx.log);
      const decoupled = ctx.config.model_transaction_policy?.decoupled === true;
      return answeredLater(decoupled, async (requests, answer) => {
        for (const r of requests) {
          const input = r.inputs.get('IN')!;
          if (input.shape.length === 2 && input.shape[0] !== 1) {
            r.send(invalid('unexpected shape for IN input'), true);
            continue;
          }
          // Triton reads IN[0] as a size_t; a negative count answers nothing but the final flag here.
          answer(respond(r, Math.max(0, (input.data as Int32Array)[0] ?? 0), input.shape.length, p));
        }
      });
    },
  };
}
