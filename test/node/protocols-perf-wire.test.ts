/**
 * `tsi-node perf`'s lean load path (runtime-node/perf/wire.ts) against a real server: pre-encoded
 * requests over raw HTTP/1.1 keep-alive sockets and over node:http2 gRPC streams are answered and
 * counted by the server, a server-side failure comes back as the server's own error text on both
 * protocols, and the load loop drives several requests in flight through it.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferenceServerError } from '../../client/errors.js';
import type { InferInputSpec } from '../../client/types.js';
import { LoadRunner } from '../../runtime-node/perf/load.js';
import { createClient } from '../../runtime-node/perf/measure.js';
import { wireSender } from '../../runtime-node/perf/wire.js';
import { MODELS, getJson, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
const inputs: InferInputSpec[] = [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(2) },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(1) },
];

beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], grpcPort: 0, grpcAddress: '127.0.0.1' });
}, 60_000);
afterAll(async () => {
  await s?.stop();
});

const successes = async () => Number((await getJson(`http://127.0.0.1:${s.http!.port}/v2/models/simple/stats`)).body.model_stats[0].inference_stats.success.count);

describe.each(['http', 'grpc'] as const)('the wire load path over %s', (protocol) => {
  const url = () => `127.0.0.1:${protocol === 'http' ? s.http!.port : s.grpc!.port}`;

  it('sends pre-encoded requests the server answers and counts', async () => {
    const w = wireSender({ protocol, url: url(), model: 'simple', headers: {}, inputSets: [inputs], callOptions: { binaryOutputs: true } })!;
    const before = await successes();
    try {
      const timings = await Promise.all(Array.from({ length: 5 }, () => w.send(0)));
      for (const t of timings) expect(t.recvNs).toBeGreaterThanOrEqual(0);
      // The same connection carries requests one after another.
      await w.send(0);
    } finally {
      w.close();
    }
    expect(await successes() - before).toBe(6);
  });

  it('reports a failed request with the server text', async () => {
    const w = wireSender({ protocol, url: url(), model: 'no_such_model', headers: {}, inputSets: [inputs], callOptions: {} })!;
    try {
      const err = await w.send(0).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(InferenceServerError);
      expect((err as Error).message).toMatch(/no_such_model/);
    } finally {
      w.close();
    }
  });

  it('carries the load loop with several requests in flight', async () => {
    const client = createClient({ url: url(), protocol, headers: {}, binaryInputs: true, binaryOutputs: true });
    const wire = wireSender({ protocol, url: url(), model: 'simple', headers: {}, inputSets: [inputs], callOptions: {} })!;
    const runner = new LoadRunner({ client, model: 'simple', inputSets: [inputs], callOptions: {}, wire });
    const before = await successes();
    runner.startConcurrency(4);
    await new Promise((r) => setTimeout(r, 300));
    await runner.stop();
    wire.close();
    await client.close();
    expect(runner.error).toBeUndefined();
    expect(runner.records.length).toBeGreaterThan(10);
    expect(await successes() - before).toBe(runner.sent);
  });
});
