/**
 * The response sender misused by a non-decoupled Python model, with Triton's outcomes (its
 * response_sender tests) over the gRPC stream and HTTP: the final flag before any response fails the
 * request with Triton's text; a second response raises in the model, and the first one stands; a
 * response returned after one was sent is dropped. (A send from a thread racing execute's return is
 * left out: which one wins depends on the threads, under Triton too.)
 */

import { describe, expect, it } from 'vitest';
import { usePythonServer } from '../helpers/python-hooks.js';
import { streamAll, type Obj } from '../helpers/grpc.js';
import { postJson } from '../helpers/server.js';

const ctx = usePythonServer(['sender_py']);

type Steps = { before?: number; final_before?: boolean; returned?: boolean; after?: number; final_after?: boolean };

/** [INDEX or error text] of every answer, over the gRPC stream and over HTTP. */
async function answers(steps: Steps): Promise<{ grpc: (number | string)[]; http: number | string }> {
  const parameters: Obj = {};
  for (const [k, v] of Object.entries(steps)) parameters[k] = typeof v === 'boolean' ? { bool_param: v } : { int64_param: v };
  const msgs = await streamAll(ctx.rpc, [{
    model_name: 'sender_py', inputs: [{ name: 'X', datatype: 'INT32', shape: [1] }], raw_input_contents: [Buffer.from(Int32Array.of(1).buffer)], parameters,
  }]);
  const grpc = msgs.map((m) => m.error_message || Buffer.from(m.infer_response.raw_output_contents[0]).readInt32LE(0));
  const r = await postJson(`${ctx.s.url}/v2/models/sender_py/infer`, { inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [1] }], parameters: steps });
  return { grpc, http: r.status === 200 ? r.body.outputs[0].data[0] : r.body.error };
}

describe('a non-decoupled model\'s response sender', () => {
  it('used as meant: one response and the final flag, before or after execute returns, or a returned response', async () => {
    expect(await answers({ before: 1, final_before: true })).toEqual({ grpc: [1000], http: 1000 });
    expect(await answers({ after: 1, final_after: true })).toEqual({ grpc: [2000], http: 2000 });
    expect(await answers({ returned: true })).toEqual({ grpc: [0], http: 0 });
  });

  it('the final flag before any response: the request fails with Triton\'s text', async () => {
    const { grpc, http } = await answers({ final_before: true });
    const text = 'Unable to send response. Non-decoupled model cannot send complete final before sending a response.';
    expect(grpc).toHaveLength(1);
    expect(grpc[0]).toContain(text);
    expect(http).toContain(text);
  });

  it('two responses before returning: the second raises, the first stands', async () => {
    expect(await answers({ before: 2, final_before: true })).toEqual({ grpc: [1000], http: 1000 });
  });

  it('a response sent, then one returned: the returned one is dropped', async () => {
    expect(await answers({ before: 1, final_before: true, returned: true })).toEqual({ grpc: [1000], http: 1000 });
  });
});
