/**
 * Clients that give up: a request whose HTTP connection closes, or whose gRPC call is cancelled, while
 * it waits in a model's queue is never computed; it is answered CANCELLED and counted as a failure
 * with reason CANCELED (statistics and nv_inference_request_failure), and the server goes on serving.
 * A backend that is already running the request sees it through BackendRequest.onCancel (the Python
 * backend's is_cancelled() is tested with that backend).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcClient, parsePrometheus } from '../helpers/grpc.js';
import { blockingJsModel, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const busy = blockingJsModel(400);

describe('cancelled requests', () => {
  let server: TestServer;
  const repo = tempRepo({
    'slow/config.pbtxt': `name: "slow"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`,
    'slow/1/model.js': busy,
  });
  const body = (ms: number) => ({ parameters: { ms }, inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [1, 2] }] });
  const stats = async () => (await (await fetch(`${server.url}/v2/models/slow/stats`)).json()).model_stats[0];

  beforeAll(async () => {
    server = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', metricsPort: 0 });
  });

  afterAll(async () => {
    await server?.stop();
    repo.cleanup();
  });

  /** Resolves once the server's own counts for `slow` satisfy `check` (never a fixed sleep). */
  const until = (check: (st: { inflight: number; pending: number }) => boolean) =>
    expect.poll(() => check(server.server.model('slow').stats), { timeout: 20_000, interval: 2 }).toBe(true);

  it('drops a queued HTTP request whose client hung up, and still answers the one before it', async () => {
    const before = await stats();
    const first = postJson(`${server.url}/v2/models/slow/infer`, body(400));
    await until((st) => st.inflight === 1 && st.pending === 0); // the first is executing
    const ac = new AbortController();
    const second = fetch(`${server.url}/v2/models/slow/infer`, { method: 'POST', body: JSON.stringify(body(400)), signal: ac.signal });
    await until((st) => st.pending === 1); // the second waits behind it
    ac.abort();
    await expect(second).rejects.toThrow();
    expect((await first).status).toBe(200);
    // The cancelled request is answered without an execution: had it stayed queued, it would run before this one.
    expect((await postJson(`${server.url}/v2/models/slow/infer`, body(0))).status).toBe(200);
    const s = await stats();
    expect(s.execution_count - before.execution_count).toBe(2);
    expect(s.inference_stats.fail.count - before.inference_stats.fail.count).toBe(1);
    const m = parsePrometheus(await (await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`)).text());
    expect(m.get('nv_inference_request_failure', { model: 'slow', reason: 'CANCELED' })).toBe(1);
  });

  it('drops a queued gRPC request whose call was cancelled', async () => {
    const client = grpcClient(`127.0.0.1:${server.grpc!.port}`);
    try {
      const before = (await stats()).execution_count as number;
      const msg = (ms: number) => ({
        model_name: 'slow', parameters: { ms: { int64_param: ms } },
        inputs: [{ name: 'X', datatype: 'FP32', shape: [2], contents: { fp32_contents: [1, 2] } }],
      });
      const first = client.call('ModelInfer', msg(400));
      await until((st) => st.inflight === 1 && st.pending === 0);
      const call = client.raw.ModelInfer(msg(400), () => {});
      await until((st) => st.pending === 1);
      call.cancel();
      await first;
      // Still serving; had the cancelled call stayed queued, it would have run before this one.
      expect((await client.call('ModelInfer', msg(1))).outputs[0].name).toBe('Y');
      const s = await stats();
      expect(s.execution_count).toBe(before + 2);
      expect(s.inference_stats.fail.count).toBe(2);
    } finally {
      client.close();
    }
  });
});
