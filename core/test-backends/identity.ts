/**
 * Triton's identity test backend: inputs INPUT<i> and outputs OUTPUT<i> in pairs of equal datatype and
 * shape; each response carries OUTPUT<i> equal to INPUT<i> (an optional input left out gives zeros) and
 * the parameters param0..param3 Triton's backend attaches. Config parameters `execute_delay_ms` (with
 * `instance_wise_delay_multiplier`) and `creation_delay_sec` slow it down, as in Triton;
 * `enable_custom_tracing: "true"` adds its activities to a traced request's timestamps
 * (CUSTOM_ACTIVITY_START, CUSTOM_SINGLE_ACTIVITY, CUSTOM_ACTIVITY_END around the delay, with
 * `nested_span_count` CUSTOM_ACTIVITY<i>_START/_END pairs nested inside). Its load-time texts are
 * Triton's, which its tests look for.
 */

import type { Backend, BackendRequest } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ConfigDataType, ModelConfig, ModelInput } from '../config/model-config.js';
import { configTypeToDatatype } from '../config/model-io.js';
import { allocate, elementCount } from '../tensor.js';
import type { Parameters, Tensor } from '../types.js';
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
      return stateless(async (requests, spec) => {
        const traces = customTracing ? requests.flatMap((r) => (r.trace ? [r.trace] : [])) : [];
        for (const t of traces) {
          t.mark('CUSTOM_ACTIVITY_START');
          for (let i = 0; i < nested; i++) t.mark(`CUSTOM_ACTIVITY${i}_START`);
          t.mark('CUSTOM_SINGLE_ACTIVITY');
        }
        if (delayMs > 0) await sleep(delayMs * Math.max(multiplier > 0 ? multiplier * spec.index : 1, 1));
        for (const t of traces) {
          for (let i = nested - 1; i >= 0; i--) t.mark(`CUSTOM_ACTIVITY${i}_END`);
          t.mark('CUSTOM_ACTIVITY_END');
        }
        for (const r of requests) respond(r);
      });
    },
  };
}
