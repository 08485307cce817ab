/**
 * Triton's identity test backend: inputs INPUT<i> and outputs OUTPUT<i> in pairs of equal datatype and
 * shape; each response carries OUTPUT<i> equal to INPUT<i> (an optional input left out gives zeros) and
 * the parameters param0..param3 Triton's backend attaches. Config parameters `execute_delay_ms` (with
 * `instance_wise_delay_multiplier`) and `creation_delay_sec` slow it down, as in Triton;
 * `enable_custom_tracing: "true"` adds its activities to a traced request's trace after the delay,
 * as Triton's does (CUSTOM_ACTIVITY_START/_END, CUSTOM_SINGLE_ACTIVITY, then `nested_span_count`
 * nested CUSTOM_ACTIVITY<i>_START/_END pairs, `single_activity_frequency`). Its load-time texts are
 * Triton's, which its tests look for.
 */

import type { Backend, BackendRequest } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ConfigDataType, ModelConfig, ModelInput } from '../config/model-config.js';
import { configTypeToDatatype } from '../config/model-io.js';
import { allocate, elementCount } from '../tensor.js';
import type { Parameters, Tensor, TraceStamps } from '../types.js';
import { copyData, invalid, ioShape, param, shapeText, sleep, stateless } from './common.js';

/** The parameters Triton's identity backend attaches to every response. */
const IDENTITY_PARAMETERS: Parameters = { param0: 'an example string parameter', param1: 42, param2: false, param3: 123.123 };

/** Triton's identity ValidateModelConfig; returns the optional inputs by index with their shape. */
function checkIdentityConfig(cfg: ModelConfig): Map<string, ModelInput> {
  const inputs = cfg.input ?? [];
  const outputs = cfg.output ?? [];
  if (inputs.length !== outputs.length) throw invalid('model configuration must have equal input/output pairs');
  const ins = new Map<string, { type?: string; shape: number[] }>();
  const outs = new Map<string, { type?: string; shape: number[] }>();
  const optional = new Map<string, ModelInput>();
  inputs.forEach((input, i) => {
    const output = outputs[i]!;
    const iname = input.name ?? '';
    const oname = output.name ?? '';
    if (!iname.startsWith('INPUT')) throw invalid(`expected input name to follow INPUT<index> pattern, got '${iname}'`);
    if (!oname.startsWith('OUTPUT')) throw invalid(`expected output name to follow OUTPUT<index> pattern, got '${oname}'`);
    ins.set(iname.slice(5), { type: input.data_type, shape: ioShape(input) });
    outs.set(oname.slice(6), { type: output.data_type, shape: ioShape(output) });
    if (input.optional) optional.set(iname.slice(5), input);
  });
  for (const [idx, out] of [...outs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const inp = ins.get(idx);
    if (!inp) throw invalid('expected input and output indices to match');
    if (inp.type !== out.type) throw invalid(`expected input and output datatype to match, got ${inp.type} and ${out.type}`);
    if (shapeText(inp.shape) !== shapeText(out.shape)) {
      throw invalid(`expected input and output shape to match, got ${shapeText(inp.shape)} and ${shapeText(out.shape)}`);
    }
  }
  return optional;
}

export function identityBackend(): Backend {
  return {
    name: 'identity',
    async loadModel(ctx) {
      const cfg = ctx.config;
      const optional = checkIdentityConfig(cfg);
      await sleep(Number(param(cfg, 'creation_delay_sec') ?? 0) * 1000);
      const delayMs = Number(param(cfg, 'execute_delay_ms') ?? 0);
      const multiplier = Number(param(cfg, 'instance_wise_delay_multiplier') ?? 0);
      const batching = (cfg.max_batch_size ?? 0) > 0;
      const respond = (r: BackendRequest): void => {
        const outputs: Tensor[] = [];
        for (const name of r.requestedOutputs) {
          const idx = name.slice(6);
          const input = r.inputs.get(`INPUT${idx}`);
          if (input) {
            outputs.push({ name, datatype: input.datatype, shape: [...input.shape], data: copyData(input) });
            continue;
          }
          const opt = optional.get(idx);
          if (!opt) {
            r.send(new TsiError('UNSUPPORTED', `failed to get input 'INPUT${idx}'`), true);
            return;
          }
          // A left-out optional input answers zeros of its configured shape (-1 read as 1).
          const shape = [...(batching ? [r.batchSize] : []), ...ioShape(opt).map((d) => (d === -1 ? 1 : d))];
          const datatype = configTypeToDatatype(opt.data_type as ConfigDataType);
          const count = elementCount(shape);
          const data = datatype === 'BYTES' ? Array.from({ length: count }, () => new Uint8Array(0)) : allocate(datatype, count);
          outputs.push({ name, datatype, shape, data });
        }
        r.send({ outputs, parameters: { ...IDENTITY_PARAMETERS } }, true);
      };
      // Triton's identity backend reports activities of its own into traced requests' traces.
      const customTracing = param(cfg, 'enable_custom_tracing') === 'true';
      const nested = Math.max(0, Number(param(cfg, 'nested_span_count') ?? 0) || 0);
      const every = Math.max(1, Number(param(cfg, 'single_activity_frequency') ?? 1) || 1);
      return stateless(async (requests, spec) => {
        if (delayMs > 0) await sleep(delayMs * Math.max(multiplier > 0 ? multiplier * spec.index : 1, 1));
        for (const r of requests) {
          if (customTracing && r.trace) await customActivities(r.trace, nested, every);
          respond(r);
        }
      });
    },
  };
}

/**
 * Triton's identity custom activities for one traced request, in its order and with its 100 ms pauses
 * (OpenTelemetry mode nests spans by that order): CUSTOM_ACTIVITY_START/_END, CUSTOM_SINGLE_ACTIVITY,
 * then `nested` CUSTOM_ACTIVITY<i>_START each inside the last, with CUSTOM_SINGLE_ACTIVITY in every
 * `every`'th, and their ENDs innermost first.
 */
async function customActivities(t: TraceStamps, nested: number, every: number): Promise<void> {
  t.activity('CUSTOM_ACTIVITY_START');
  await sleep(100);
  t.activity('CUSTOM_ACTIVITY_END');
  t.activity('CUSTOM_SINGLE_ACTIVITY');
  for (let i = 0; i < nested; i++) {
    t.activity(`CUSTOM_ACTIVITY${i}_START`);
    await sleep(100);
    if (i % every === 0) t.activity('CUSTOM_SINGLE_ACTIVITY');
  }
  for (let i = nested - 1; i >= 0; i--) t.activity(`CUSTOM_ACTIVITY${i}_END`);
}
