/**
 * Triton's gRPC test hook TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC, which L0_client_timeout sets to
 * test clients' timeouts on the RPCs that are not inference: read from the environment at start-up,
 * it makes every such RPC answer that many seconds late, so a call with a shorter deadline fails
 * with DEADLINE_EXCEEDED, and one with a longer deadline succeeds; inference is not delayed. The
 * identity backend's `execute_delay_ms` (the suite's other half) is tested with the test backends.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcClient } from '../../client/grpc.js';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
let client: GrpcClient;
beforeAll(async () => {
  process.env.TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC = '1';
  try {
    s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], grpcPort: 0, grpcAddress: '127.0.0.1' });
  } finally {
    delete process.env.TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC;
  }
  client = new GrpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  await client?.close();
  await s?.stop();
});

describe('TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC (Triton L0_client_timeout)', () => {
  it('answers every RPC but inference that many seconds late', async () => {
    expect(s.logs.some((l) => l.includes('every RPC but inference answers 1 s late'))).toBe(true);
    await expect(client.isServerLive({ timeoutMs: 300 })).rejects.toThrow(/Deadline exceeded|DEADLINE_EXCEEDED/i);
    await expect(client.getModelMetadata('simple', undefined, { timeoutMs: 300 })).rejects.toThrow(/Deadline exceeded|DEADLINE_EXCEEDED/i);
    const t0 = performance.now();
    expect(await client.isServerLive({ timeoutMs: 5000 })).toBe(true);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(950);
  });

  it('does not delay inference', async () => {
    const row = new Int32Array(16).fill(1);
    const r = await client.infer('simple', [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: row },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: row },
    ], { timeoutMs: 800 });
    expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array(16).fill(2));
  });
});
