/**
 * Triton's small test backends, `identity`, `repeat`, `square` and `dyna_sequence`, built in so that
 * repositories from Triton's documentation, examples and tests (which name them as `backend: "identity"` or
 * `backend: "repeat"`) load unchanged, in Node and in the browser alike: they are pure TypeScript.
 *
 * - identity: inputs INPUT<i> and outputs OUTPUT<i> in pairs of equal datatype and shape; each
 *   response carries OUTPUT<i> equal to INPUT<i> (an optional input left out gives zeros) and the
 *   parameters param0..param3 Triton's backend attaches. Config parameters `execute_delay_ms`
 *   (with `instance_wise_delay_multiplier`) and `creation_delay_sec` slow it down, as in Triton;
 *   `enable_custom_tracing: "true"` adds its activities to a traced request's trace after the
 *   delay, as Triton's does (CUSTOM_ACTIVITY_START/_END, CUSTOM_SINGLE_ACTIVITY, then
 *   `nested_span_count` nested CUSTOM_ACTIVITY<i>_START/_END pairs, `single_activity_frequency`).
 * - repeat: decoupled (or not: then its one response, and the final flag sent on its own, complete
 *   the request before execute returns), max_batch_size 0, inputs IN (INT32 vector), DELAY (UINT32, IN's shape) and
 *   WAIT (UINT32 [1]); outputs OUT (INT32 [1]) and IDX (UINT32 [1]). One response per element of IN,
 *   the i'th after DELAY[i] ms; the instance takes its next request after WAIT ms, so responses of
 *   several requests may interleave. IN of shape [0] gives only the final flag.
 * - square: decoupled, IN and OUT INT32 [1]: IN = n gives n responses OUT = n, then the final flag.
 * - dyna_sequence: a sequence model's accumulator per correlation id (see dynaSequenceBackend).
 *
 * The load-time checks of identity and repeat keep the texts of Triton's backends, which its tests
 * look for; square's are tsi's own (its C++ source was not at hand).
 */

import type { Backend, BackendInstance, BackendRequest, InstanceSpec } from './backend.js';
import { TsiError } from './errors.js';
import type { ModelConfig, ModelInput } from './config/model-config.js';
import { allocate, elementCount } from './tensor.js';
import type { Parameters, Tensor, TraceStamps } from './types.js';
import { configTypeToDatatype } from './config/model-io.js';
import type { ConfigDataType } from './config/model-config.js';

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());
const invalid = (msg: string) => new TsiError('INVALID_ARG', msg);
const shapeText = (s: readonly number[]) => `[${s.join(',')}]`;
const param = (cfg: ModelConfig, key: string) => cfg.parameters?.[key]?.string_value;
const ioShape = (io: { dims?: number[]; reshape?: { shape?: number[] } }) => io.reshape?.shape ?? io.dims ?? [];

/** A loaded model whose CPU instances keep no state: each only runs `execute`. */
function stateless(execute: (requests: BackendRequest[], spec: InstanceSpec) => Promise<void>) {
  return {
    createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => ({
      spec, device: 'cpu', unload: async () => {}, execute: (requests: BackendRequest[]) => execute(requests, spec),
    }),
    unload: async () => {},
  };
}

/** Copies a tensor's data, so the output never aliases a buffer the request owns. */
function copyData(t: Tensor): Tensor['data'] {
  const d = t.data;
  return Array.isArray(d) ? d.map((e) => e.slice()) : d.slice();
}

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

function identityBackend(): Backend {
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

/** Triton's repeat ValidateModelConfig, with its texts. */
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

function repeatBackend(): Backend {
  return {
    name: 'repeat',
    async loadModel(ctx) {
      checkRepeatConfig(ctx.config);
      const decoupled = ctx.config.model_transaction_policy?.decoupled === true;
      // Responses still being sent after their request was released, so unload can wait for them.
      const inflight = new Set<Promise<void>>();
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
      return {
        createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => ({
          spec,
          device: 'cpu',
          unload: async () => {
            await Promise.all(inflight);
          },
          execute: async (requests) => {
            if (requests.length > 1) throw invalid('repeat backend does not support batched request execution');
            let waitMs = 0;
            const answering: Promise<void>[] = [];
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
              const p = stream(r, (inp.data as Int32Array).slice(), (delay.data as Uint32Array).slice());
              inflight.add(p);
              void p.finally(() => inflight.delete(p));
              // Not decoupled: tsi's backends answer such requests before execute returns.
              if (!decoupled) answering.push(p);
            }
            await Promise.all([sleep(waitMs), ...answering]);
          },
        }),
        unload: async () => {},
      };
    },
  };
}

/**
 * Triton's square test backend (its qa's `square_int32`, L0_decoupled and L0_response_statistics):
 * decoupled, IN and OUT INT32 [1]; a request with IN = n gets n responses OUT = n, then the final
 * flag on its own (n = 0: only the flag). Requests are answered one after another within a batch.
 */
function checkSquareConfig(cfg: ModelConfig): void {
  if ((cfg.max_batch_size ?? 0) !== 0) throw invalid('square backend only supports models with max_batch_size == 0');
  if (cfg.model_transaction_policy?.decoupled !== true) throw invalid('square backend only supports models with decoupled transaction policy');
  const inputs = cfg.input ?? [];
  const outputs = cfg.output ?? [];
  if (inputs.length !== 1 || outputs.length !== 1) throw invalid(`expected 1 input and 1 output, got ${inputs.length} and ${outputs.length}`);
  for (const [io, name] of [[inputs[0]!, 'IN'], [outputs[0]!, 'OUT']] as const) {
    if (io.name !== name) throw invalid(`expected ${name === 'IN' ? 'input' : 'output'} tensor name to be ${name}, got ${io.name ?? ''}`);
    if (io.data_type !== 'TYPE_INT32') throw invalid(`expected ${name} datatype to be INT32, got ${io.data_type ?? ''}`);
    if (shapeText(io.dims ?? []) !== '[1]') throw invalid(`expected ${name} shape to be [1], got ${shapeText(io.dims ?? [])}`);
  }
}

function squareBackend(): Backend {
  return {
    name: 'square',
    async loadModel(ctx) {
      checkSquareConfig(ctx.config);
      return stateless(async (requests) => {
        for (const r of requests) {
          const data = r.inputs.get('IN')?.data as Int32Array | undefined;
          if (!data || data.length !== 1) {
            r.send(invalid('expected IN to hold one INT32 value'), true);
            continue;
          }
          const n = data[0]!;
          for (let i = 0; i < n; i++) r.send({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: Int32Array.of(n) }] }, false);
          r.send({ outputs: [] }, true);
        }
      });
    },
  };
}

/**
 * Triton's dyna_sequence test backend (L0_http's simple_string_dyna_sequence, L0_dyna_sequence_batcher):
 * a sequence model with START, END and READY controls, a CORRID control of TYPE_UINT64 or TYPE_STRING
 * (a string holding an integer, read as C++'s stoi reads it) and an INT32 INPUT of one dimension. One int32
 * accumulator per sequence: when READY, START sets it to the sum of INPUT and later requests add to it;
 * END adds the correlation id (its low 32 bits) and ends the sequence. OUTPUT has INPUT's shape, every
 * element the accumulator. `execute_delay_ms` delays each execution, as in Triton's.
 */
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

function dynaSequenceBackend(): Backend {
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

/** Registers the test backends under Triton's names, unless a runtime registered its own. */
export function registerTestBackends(registry: { has(name: string): boolean; register(name: string, f: () => Backend): void }): void {
  if (!registry.has('identity')) registry.register('identity', identityBackend);
  if (!registry.has('repeat')) registry.register('repeat', repeatBackend);
  if (!registry.has('square')) registry.register('square', squareBackend);
  if (!registry.has('dyna_sequence')) registry.register('dyna_sequence', dynaSequenceBackend);
}
