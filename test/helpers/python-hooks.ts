/**
 * Vitest hooks for Python backend test files (apart from python-server.ts, which plain scripts also
 * import): one real server over copies of fixture models, with HTTP and gRPC, per test file.
 */

import { afterAll, beforeAll } from 'vitest';
import { grpcClient, type GrpcTestClient } from './grpc.js';
import { pythonRepo, startPythonServer } from './python-server.js';
import type { TestServer } from './server.js';

/**
 * Registers beforeAll/afterAll hooks that serve copies of `fixtures` over HTTP and gRPC for a test
 * file; the returned object's fields are set once the hooks have run.
 */
export function usePythonServer(fixtures: string[]): { s: TestServer; rpc: GrpcTestClient } {
  const ctx = {} as { s: TestServer; rpc: GrpcTestClient };
  let repo: ReturnType<typeof pythonRepo> | undefined;
  beforeAll(async () => {
    repo = pythonRepo(fixtures);
    ctx.s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
    ctx.rpc = grpcClient(`127.0.0.1:${ctx.s.grpc!.port}`);
  }, 60_000);
  afterAll(async () => {
    ctx.rpc?.close();
    await ctx.s?.stop();
    repo?.cleanup();
  });
  return ctx;
}
