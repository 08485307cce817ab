/**
 * Batch inputs (model_config's `batch_input`) through the real HTTP server on onnxruntime-node, as
 * Triton's L0_batch_input uses them: a ragged input whose requests reach the model end to end, and the
 * tensors the server builds from the gathered requests' shapes (BATCH_ELEMENT_COUNT, the accumulated
 * counts with and without a leading zero, BATCH_MAX_ELEMENT_COUNT_AS_SHAPE, BATCH_ITEM_SHAPE and its
 * flat form). The model broadcasts each batch input to every request's row, so each answer shows the
 * tensor the model was fed for the whole batch.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GraphBuilder, type Dim, type ElemTypeName } from '../../graph/onnx-builder.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

/** The feeds, named as the config's targets; each OUT_<name> is its feed repeated once per request. */
const BROADCAST: [string, ElemTypeName][] = [['COUNT', 'FLOAT'], ['ACC', 'INT32'], ['ACCZ', 'FLOAT'], ['MAXS', 'FLOAT'], ['FLAT', 'FLOAT'], ['RAGGED', 'FLOAT']];

function batchInputModel(raggedShape: Dim[] = ['r']): Uint8Array {
  const g = new GraphBuilder('batch_input_echo');
  for (const [name, type] of BROADCAST) g.input(name, type, name === 'RAGGED' ? raggedShape : [`${name.toLowerCase()}_len`]);
  g.input('ITEM', 'FLOAT', ['items', 2]);
  // COUNT has one element per request: its shape is the batch's request count.
  const requests = g.op('Shape', ['COUNT']);
  const axis0 = g.initializer('axis0', 'INT64', [1], new BigInt64Array([0n]));
  for (const [name, type] of BROADCAST) {
    const target = g.op('Concat', [requests, g.op('Shape', [name])], { axis: 0 });
    g.op('Expand', [g.op('Unsqueeze', [name, axis0]), target], undefined, `OUT_${name}`);
    g.output(`OUT_${name}`, type, ['n', `out_${name.toLowerCase()}`]);
  }
  // Declared fully symbolic: the server must see, as onnxruntime does, that Identity keeps ITEM's 2.
  g.op('Identity', ['ITEM'], undefined, 'OUT_ITEM');
  g.output('OUT_ITEM', 'FLOAT', ['out_items', 'out_item_dims']);
  return g.encode();
}

const out = (name: string, type = 'TYPE_FP32', dims = '[ -1 ]') => `{ name: "${name}" data_type: ${type} dims: ${dims} }`;
const batchInput = (kind: string, target: string, type = 'TYPE_FP32') =>
  `{ kind: ${kind} target_name: "${target}" data_type: ${type} source_input: "RAGGED" }`;
const config = (name: string) => `name: "${name}"
backend: "onnxruntime"
max_batch_size: 2
input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true } ]
output [ ${out('OUT_COUNT')}, ${out('OUT_ACC', 'TYPE_INT32')}, ${out('OUT_ACCZ')}, ${out('OUT_MAXS')}, ${out('OUT_FLAT')}, ${out('OUT_RAGGED')}, ${out('OUT_ITEM', 'TYPE_FP32', '[ 2 ]')} ]
batch_input [
  ${batchInput('BATCH_ELEMENT_COUNT', 'COUNT')},
  ${batchInput('BATCH_ACCUMULATED_ELEMENT_COUNT', 'ACC', 'TYPE_INT32')},
  ${batchInput('BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO', 'ACCZ')},
  ${batchInput('BATCH_MAX_ELEMENT_COUNT_AS_SHAPE', 'MAXS')},
  ${batchInput('BATCH_ITEM_SHAPE_FLATTEN', 'FLAT')},
  ${batchInput('BATCH_ITEM_SHAPE', 'ITEM')}
]
dynamic_batching { preferred_batch_size: [ 2 ], max_queue_delay_microseconds: 10000000 }
`;

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'bi/config.pbtxt': config('bi'),
    'bi/1/model.onnx': batchInputModel(),
    // The same config over a model whose ragged input is not [-1]: Triton's ORT backend refuses it.
    'bi_bad/config.pbtxt': config('bi_bad'),
    'bi_bad/1/model.onnx': batchInputModel(['r', 3]),
  });
  s = await startTestServer({ modelRepositories: [repo.path], exitOnError: false });
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

const send = (shape: number[], first: number) => postJson(`${s.url}/v2/models/bi/infer`, {
  inputs: [{ name: 'RAGGED', datatype: 'FP32', shape, data: Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => first + i) }],
});
const outputs = (body: any) => Object.fromEntries(body.outputs.map((o: any) => [o.name, { shape: o.shape, data: o.data }]));

describe('batch inputs built from a gathered batch (L0_batch_input)', () => {
  it('feeds every kind from the shapes of two batched requests of different sizes', async () => {
    // [1,2,3] (6 elements) and [1,4,1] (4): one execution of both (preferred batch of 2).
    const [a, b] = await Promise.all([send([1, 2, 3], 10), send([1, 4, 1], 20)]);
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(b.status, JSON.stringify(b.body)).toBe(200);
    const shared = {
      OUT_COUNT: { shape: [1, 2], data: [6, 4] },
      OUT_ACC: { shape: [1, 2], data: [6, 10] },
      OUT_ACCZ: { shape: [1, 3], data: [0, 6, 10] },
      OUT_MAXS: { shape: [1, 6], data: [0, 0, 0, 0, 0, 0] },
      OUT_FLAT: { shape: [1, 4], data: [2, 3, 4, 1] },
      // The ragged input is both requests' elements end to end.
      OUT_RAGGED: { shape: [1, 10], data: [10, 11, 12, 13, 14, 15, 20, 21, 22, 23] },
    };
    expect(outputs(a.body)).toEqual({ ...shared, OUT_ITEM: { shape: [1, 2], data: [2, 3] } });
    expect(outputs(b.body)).toEqual({ ...shared, OUT_ITEM: { shape: [1, 2], data: [4, 1] } });
    const st = (await getJson(`${s.url}/v2/models/bi/stats`)).body.model_stats[0];
    expect(st.batch_stats.map((x: any) => x.batch_size)).toEqual([2]);
  }, 60_000);

  it('refuses a ragged input the model does not take as [-1], naming model, input and shape', async () => {
    const r = await getJson(`${s.url}/v2/models/bi_bad/ready`);
    expect(r.status).toBe(503);
    const index = await postJson(`${s.url}/v2/repository/index`, {});
    const bad = index.body.find((m: any) => m.name === 'bi_bad');
    expect(bad.reason).toContain("unable to load model 'bi_bad', configuration expects model provides input with shape [-1] for ragged input 'RAGGED', model provides [-1,3]");
  });
});
