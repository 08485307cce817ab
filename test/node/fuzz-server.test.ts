/**
 * The hostile-client fuzz of bench/fuzz.ts, short: a few hundred generated requests over HTTP/1.1
 * and gRPC at a real server over the default models, every answer judged (no 5xx but Triton's 501, no
 * INTERNAL/UNKNOWN, JSON error bodies with a message, correct inferences between them). The long run
 * is `npm run bench:fuzz`; FUZZ_REQUESTS and FUZZ_SEED change this one.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runFuzz } from '../../bench/fuzz.js';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1' });
});
afterAll(async () => s?.stop());

describe('hostile requests over both protocols', () => {
  it('get Triton\'s 4xx (or 501) and INVALID_ARGUMENT-like codes with messages, and the server keeps answering right', async () => {
    const requests = Number(process.env.FUZZ_REQUESTS ?? 400);
    const seed = Number(process.env.FUZZ_SEED ?? 20_260_501);
    const report = await runFuzz(s.url, `127.0.0.1:${s.grpc!.port}`, { requests, seed, probeEvery: 100 });
    expect(report.bad, JSON.stringify(report.bad.slice(0, 10), null, 1)).toEqual([]);
    expect(report.probes).toBeGreaterThanOrEqual(Math.floor(requests / 100));
    expect(Object.values(report.sent).reduce((a, b) => a + b, 0)).toBe(requests);
  }, 180_000);
});
