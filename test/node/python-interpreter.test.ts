/**
 * What model code sees of its interpreter is what Triton's embedded one shows: `sys.argv == ['']`
 * (so `unittest.main("model", exit=False)` inside execute, as Triton's argument-validation and
 * custom-metrics test models do, runs the file's own tests instead of looking for a test named
 * after tsi's arguments) and a `__main__` module without the stub's globals. Over HTTP and gRPC.
 */

import { expect, it } from 'vitest';
import { postJson } from '../helpers/server.js';
import { usePythonServer } from '../helpers/python-hooks.js';

const ctx = usePythonServer(['argv_py']);

const EXPECTED = { argv: [''], main_extra: [], main_file: null, run: 1, failures: 0, errors: 0 };

it('sys.argv is [\'\'] and __main__ is bare: unittest.main("model") runs the model file\'s tests (HTTP)', async () => {
  const r = await postJson(`${ctx.s.url}/v2/models/argv_py/infer`, { inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [1] }] });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(JSON.parse(r.body.outputs[0].data[0])).toEqual(EXPECTED);
});

it('the same over gRPC', async () => {
  const r = await ctx.rpc.call('ModelInfer', {
    model_name: 'argv_py', inputs: [{ name: 'X', datatype: 'INT32', shape: [1] }], raw_input_contents: [Buffer.from(Int32Array.of(1).buffer)],
  });
  const raw = Buffer.from(r.raw_output_contents[0]);
  expect(JSON.parse(raw.subarray(4, 4 + raw.readUInt32LE(0)).toString())).toEqual(EXPECTED);
});
