/**
 * Config errors reported as Triton reports them, at start-up (the log line and the index) and,
 * identically, by the load API of a server in explicit mode, over one repository:
 * - ensembles checked from their configs alone, over steps of Triton's `identity` and `repeat` test
 *   backends, each bad one logged as `E... Invalid argument: <Triton's text>`; a valid ensemble of
 *   identity steps loads and answers over HTTP;
 * - Triton's order: config errors before the folder-name check, instance groups before the search
 *   for the model file, and Triton's text for a model with no platform, no backend and no file.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { gpuCount } from '../../runtime-node/index.js';

type Io = [name: string, type: string, dims: number[]];
const io = ([name, type, dims]: Io) => `{ name: "${name}" data_type: ${type} dims: [ ${dims.join(', ')} ] }`;

/** An identity model (INPUT<i> -> OUTPUT<i>) with one empty version folder, as Triton's tests have them. */
function identity(name: string, type: string, dims: number[], extra = ''): Record<string, string> {
  return {
    [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "identity"\nmax_batch_size: 4\n${extra}\ninput [ ${io(['INPUT0', type, dims])} ]\noutput [ ${io(['OUTPUT0', type, dims])} ]\n`,
    [`${name}/1/.keep`]: '',
  };
}

interface Step { model: string; version?: number; inputs: Record<string, string>; outputs: Record<string, string> }

function ensemble(name: string, inputs: Io[], outputs: Io[], steps: Step[], mbs = 4): Record<string, string> {
  const map = (m: Record<string, string>, kind: string) => Object.entries(m).map(([k, v]) => `${kind} { key: "${k}" value: "${v}" }`).join(' ');
  const stepText = steps.map((s) => `{ model_name: "${s.model}" model_version: ${s.version ?? -1} ${map(s.inputs, 'input_map')} ${map(s.outputs, 'output_map')} }`);
  return {
    [`${name}/config.pbtxt`]: `name: "${name}"\nplatform: "ensemble"\nmax_batch_size: ${mbs}\ninput [ ${inputs.map(io).join(', ')} ]\noutput [ ${outputs.map(io).join(', ')} ]\nensemble_scheduling { step [ ${stepText.join(', ')} ] }\n`,
    [`${name}/1/.keep`]: '',
  };
}

const F = 'TYPE_FP32';
const I = 'TYPE_INT32';
const U = 'TYPE_UINT32';
const repeatModel = (name: string): Record<string, string> => ({
  [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "repeat"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n`
    + `input [ ${io(['IN', I, [-1]])}, ${io(['DELAY', U, [-1]])}, ${io(['WAIT', U, [1]])} ]\noutput [ ${io(['OUT', I, [1]])}, ${io(['IDX', U, [1]])} ]\n`,
  [`${name}/1/.keep`]: '',
});

/** An ensemble of one step running `model` (default int32_dim1_batch4: INPUT0 from data, OUTPUT0 to prob). */
function single(name: string, step: Partial<Step> = {}, opts: { inType?: string; mbs?: number; dims?: number[] } = {}): Record<string, string> {
  const s: Step = { model: 'int32_dim1_batch4', inputs: { INPUT0: 'data' }, outputs: { OUTPUT0: 'prob' }, ...step };
  return ensemble(name, [['data', opts.inType ?? I, opts.dims ?? [1]]], [['prob', I, [1]]], [s], opts.mbs);
}

/** Each bad ensemble with Triton's text for it. */
const BAD: [string, Record<string, string>, string][] = [
  ['inconsistent_data_type', single('inconsistent_data_type', {}, { inType: F }),
    'in ensemble inconsistent_data_type, ensemble tensor data: inconsistent data type: TYPE_FP32 is inferred from model inconsistent_data_type while TYPE_INT32 is inferred from model int32_dim1_batch4'],
  ['inconsistent_shape', single('inconsistent_shape', {}, { dims: [2] }),
    'in ensemble inconsistent_shape, ensemble tensor data: inconsistent shape: [-1,2] is inferred from model inconsistent_shape while [-1,1] is inferred from model int32_dim1_batch4'],
  ['non_existing_input', single('non_existing_input', { inputs: { INPUT0: 'data', INPUT9: 'data' } }),
    'in ensemble non_existing_input, ensemble tensor data is mapping to non-existing input INPUT9 in model int32_dim1_batch4'],
  ['non_existing_output', single('non_existing_output', { outputs: { OUTPUT9: 'prob' } }),
    'in ensemble non_existing_output, ensemble tensor prob is mapped from non-existing output OUTPUT9 in model int32_dim1_batch4'],
  ['unmapped_input', single('unmapped_input', { model: 'two_inputs' }),
    'in ensemble unmapped_input, input INPUT1 in model two_inputs is not mapped to any ensemble tensors'],
  ['batch_too_big', single('batch_too_big', {}, { mbs: 8 }),
    'ensemble batch_too_big allows maximum batch size 8, but it contains model int32_dim1_batch4 which only allows maximum batch size to be 4'],
  ['two_decoupled', ensemble('two_decoupled', [['in', I, [-1]], ['delay', U, [-1]], ['wait', U, [1]]], [['out', I, [1]], ['other', I, [1]], ['idx', U, [1]]], [
    { model: 'repeat_a', inputs: { IN: 'in', DELAY: 'delay', WAIT: 'wait' }, outputs: { OUT: 'a', IDX: 'idx' } },
    { model: 'repeat_b', inputs: { IN: 'in', DELAY: 'delay', WAIT: 'wait' }, outputs: { OUT: 'b' } },
    { model: 'two_inputs_nb', inputs: { INPUT0: 'a', INPUT1: 'b' }, outputs: { OUTPUT0: 'out', OUTPUT1: 'other' } },
  ], 0), "in ensemble two_decoupled, step of model 'two_inputs_nb' receives inputs originated from different decoupled models"],
  ['missing_version', single('missing_version', { version: 3 }),
    "ensemble 'missing_version' depends on 'int32_dim1_batch4' whose required version 3 is not loaded."],
  ['missing_model', single('missing_model', { model: 'ghost' }), 'ensemble missing_model contains models that are not available or ambiguous: ghost'],
  ['cycle_a', single('cycle_a', { model: 'cycle_b', inputs: { data: 'data' }, outputs: { prob: 'prob' } }),
    'circular dependency between ensembles: cycle_a -> ... -> cycle_b -> cycle_a'],
  // The step's own load fails (the identity backend refuses its outputs); the ensemble still gets
  // the mistake in its own config, and the step its own error.
  ['bad_step_type', single('bad_step_type', { model: 'unloadable' }, { inType: F }),
    'in ensemble bad_step_type, ensemble tensor data: inconsistent data type: TYPE_FP32 is inferred from model bad_step_type while TYPE_INT32 is inferred from model unloadable'],
];

function twoInputs(name: string, mbs: number): Record<string, string> {
  const ins = [io(['INPUT0', I, [1]]), io(['INPUT1', I, [1]])].join(', ');
  const outs = [io(['OUTPUT0', I, [1]]), io(['OUTPUT1', I, [1]])].join(', ');
  return { [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "identity"\nmax_batch_size: ${mbs}\ninput [ ${ins} ]\noutput [ ${outs} ]\n`, [`${name}/1/.keep`]: '' };
}

const STEP_MODELS: Record<string, string> = {
  ...identity('int32_dim1_batch4', I, [1]),
  ...twoInputs('two_inputs', 4),
  ...twoInputs('two_inputs_nb', 0),
  ...repeatModel('repeat_a'),
  ...repeatModel('repeat_b'),
  ...single('cycle_b', { model: 'cycle_a', inputs: { data: 'data' }, outputs: { prob: 'prob' } }),
  [`unloadable/config.pbtxt`]: `name: "unloadable"\nbackend: "identity"\nmax_batch_size: 4\ninput [ ${io(['INPUT0', I, [1]])} ]\noutput [ ${io(['OUTPUT0', I, [1]])}, ${io(['OUTPUT1', I, [1]])} ]\n`,
  [`unloadable/1/.keep`]: '',
};

/** The GPUs this machine has, as Triton's invalid-gpu text lists them (none on most test machines). */
const GPUS = Array.from({ length: gpuCount() }, (_, k) => k).join(', ');
const ioText = 'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]\n';
const step = 'ensemble_scheduling { step [{ model_name: "x" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }] }\n';

/** Folder name -> config.pbtxt, and the text Triton reports first for it. */
const CASES: [folder: string, config: string, text: string][] = [
  ['ens_folder_a', `name: "ens_named_a"\nplatform: "ensemble"\n${ioText}`,
    'ensemble scheduling must be set for ensemble ens_named_a whose platform is ensemble'],
  ['ens_folder_b', `name: "ens_named_b"\nplatform: "ensemble"\n${ioText}${step}model_warmup [{ name: "w" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }]\n`,
    "model_warmup can not be specified for ensemble 'ens_named_b'"],
  ['cpu_with_gpus', `name: "cpu_with_gpus"\nbackend: "onnxruntime"\n${ioText}instance_group [{ name: "g" kind: KIND_CPU gpus: [ 0 ] }]\n`,
    'instance group g of model cpu_with_gpus has kind KIND_CPU but specifies one or more GPUs'],
  ['negative_gpu', `name: "negative_gpu"\nbackend: "onnxruntime"\n${ioText}instance_group [{ name: "g" kind: KIND_GPU gpus: [ -1 ] }]\n`,
    `instance group g of model negative_gpu specifies invalid or unsupported gpu id -1. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: ${GPUS}`],
  // L0_model_config noautofill_platform/negative_gpu and invalid_gpu: the group naming a GPU that is
  // not there is refused, on a machine without GPUs too (a KIND_AUTO group naming device 0 is fine).
  ['negative_gpu_2', `name: "negative_gpu_2"\nbackend: "onnxruntime"\n${ioText}instance_group [{ gpus: [ 0 ] }]\ninstance_group [{ kind: KIND_GPU gpus: [ -1 ] }]\n`,
    `instance group negative_gpu_2_1 of model negative_gpu_2 specifies invalid or unsupported gpu id -1. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: ${GPUS}`],
  ['invalid_gpu', `name: "invalid_gpu"\nbackend: "onnxruntime"\n${ioText}instance_group [{ kind: KIND_GPU gpus: [ 42 ] }]\n`,
    `instance group invalid_gpu_0 of model invalid_gpu specifies invalid or unsupported gpu id 42. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: ${GPUS}`],
  ['no_backend', `name: "no_backend"\n${ioText}`,
    "Invalid model name: Could not determine backend for model 'no_backend' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'."],
];

const GOOD = {
  ...ensemble('chain', [['data', I, [1]]], [['prob', I, [1]]], [
    { model: 'int32_dim1_batch4', inputs: { INPUT0: 'data' }, outputs: { OUTPUT0: 'mid' } },
    { model: 'int32_dim1_batch4', inputs: { INPUT0: 'mid' }, outputs: { OUTPUT0: 'prob' } },
  ]),
};

describe("Triton's config checks, order and texts", () => {
  let repo: ReturnType<typeof tempRepo>;
  let atStart: TestServer;
  let explicit: TestServer;
  beforeAll(async () => {
    // Every model has a version folder but no model file: the file search must not come first.
    const ordered = Object.fromEntries(CASES.flatMap(([folder, config]) => [[`${folder}/config.pbtxt`, config], [`${folder}/1/.keep`, '']]));
    repo = tempRepo({ ...STEP_MODELS, ...GOOD, ...ordered, ...Object.assign({}, ...BAD.map(([, files]) => files)) });
    atStart = await startTestServer({ modelRepositories: [repo.path] });
    explicit = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit' });
  }, 60_000);
  afterAll(async () => {
    await atStart?.stop();
    await explicit?.stop();
    repo?.cleanup();
  });

  it('a valid ensemble of identity steps loads and answers over HTTP', async () => {
    const r = await postJson(`${atStart.url}/v2/models/chain/infer`, { inputs: [{ name: 'data', datatype: 'INT32', shape: [2, 1], data: [7, -3] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs).toEqual([{ name: 'prob', datatype: 'INT32', shape: [2, 1], data: [7, -3] }]);
  });

  for (const [name, , text] of BAD) {
    it(`${name}: Triton's text at start-up and from the load API`, async () => {
      expect(atStart.logs.filter((l) => l.startsWith('E') && l.endsWith(`Invalid argument: ${text}`))).toHaveLength(1);
      const index = (await postJson(`${atStart.url}/v2/repository/index`, {})).body as { name: string; reason?: string }[];
      expect(index.find((e) => e.name === name)?.reason).toBe(text);
      const load = await postJson(`${explicit.url}/v2/repository/models/${name}/load`, {});
      expect(load.status).toBe(400);
      expect(load.body.error).toBe(`failed to load '${name}', ${text}`);
    });
  }

  it("a step that cannot load keeps its own error beside the ensemble's", async () => {
    const index = (await postJson(`${atStart.url}/v2/repository/index`, {})).body as { name: string; reason?: string }[];
    expect(index.find((e) => e.name === 'unloadable')?.reason).toBe('model configuration must have equal input/output pairs');
  });

  for (const [folder, , text] of CASES) {
    it(`${folder}: ${text}`, async () => {
      const lines = atStart.logs.filter((l) => l.startsWith('E') && l.includes(`failed to load '${folder}'`));
      expect(lines).toHaveLength(1);
      expect(lines[0]!.endsWith(text)).toBe(true);
      const index = (await postJson(`${atStart.url}/v2/repository/index`, {})).body as { name: string; reason?: string }[];
      const reason = index.find((e) => e.name === folder)?.reason ?? '';
      expect(reason.endsWith(text), reason).toBe(true);
      const load = await postJson(`${explicit.url}/v2/repository/models/${folder}/load`, {});
      expect(load.status).toBe(400);
      expect(load.body.error).toBe(`failed to load '${folder}', ${reason}`);
    });
  }
});
