/**
 * Triton's L0_request_cancellation for the sequence batcher, against the real server over gRPC:
 * cancelling one waiting request of a sequence cancels the whole sequence — each of its waiting
 * requests is answered CANCELLED (two CANCELED failures in the metrics), the sequence ends (a later
 * request without START is refused), and its slot goes to the next sequence — in a direct slot's queue,
 * an oldest slot's queue, and the backlog. The model is a JavaScript echo that blocks its instance
 * until the test opens a gate file, so every step waits for what the server reports, never for time.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient, parsePrometheus, type GrpcTestClient, type Obj } from '../helpers/grpc.js';

/** Blocks until the file named by the request's `gate` parameter exists (after marking `<gate>.started`). */
const GATED = `import { existsSync, writeFileSync } from 'node:fs';
  export default class {
    execute(requests) {
      const gate = requests[0].parameters.gate;
      if (gate) {
        writeFileSync(gate + '.started', '');
        while (!existsSync(gate)) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
      }
      return requests.map((r) => ({ outputs: { OUTPUT0: r.input('INPUT0').data } }));
    }
  }`;

const model = (name: string, strategy: string) => ({
  [`${name}/config.pbtxt`]: `name: "${name}"\nbackend: "javascript"\nmax_batch_size: 1
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]\nsequence_batching { ${strategy} max_sequence_idle_microseconds: 600000000 }\n`,
  [`${name}/1/model.js`]: GATED,
});

describe('cancelling a waiting request of a sequence cancels the sequence', () => {
  const repo = tempRepo({ ...model('sequence_direct', 'direct { }'), ...model('sequence_oldest', 'oldest { max_candidate_sequences: 1 }') });
  const dir = mkdtempSync(join(tmpdir(), 'tsi-seq-gate-'));
  let s: TestServer;
  let c: GrpcTestClient;
  let gates = 0;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', metricsPort: 0 });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const until = async (what: () => boolean | Promise<boolean>) => {
    while (!(await what())) await new Promise((r) => setTimeout(r, 10));
  };
  const metrics = async () => parsePrometheus(await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text());
  const pending = async (m: string) => (await metrics()).get('nv_inference_pending_request_count', { model: m }) ?? 0;
  const cancelled = async (m: string) => (await metrics()).get('nv_inference_request_failure', { model: m, reason: 'CANCELED' }) ?? 0;

  /** One ModelInfer, kept as its call (to cancel) and its answer (once it comes). */
  const send = (m: string, seq: number, start: boolean, gate?: string, end = false) => {
    const answer: { err?: grpc.ServiceError; res?: Obj; done: boolean } = { done: false };
    const call = c.raw.ModelInfer({
      model_name: m,
      parameters: {
        sequence_id: { int64_param: String(seq) }, sequence_start: { bool_param: start }, sequence_end: { bool_param: end },
        ...(gate ? { gate: { string_param: gate } } : {}),
      },
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 8], contents: { fp32_contents: Array(8).fill(1) } }],
    }, (err: grpc.ServiceError | null, res: Obj) => Object.assign(answer, { err: err ?? undefined, res, done: true }));
    return { call: call as grpc.ClientUnaryCall, answer };
  };
  /** Starts `seq` with a request that blocks the model's only instance until the returned gate opens. */
  const occupy = async (m: string, seq: number) => {
    const gate = join(dir, `gate-${gates++}`);
    const first = send(m, seq, true, gate);
    await until(() => existsSync(`${gate}.started`));
    return { first, open: () => writeFileSync(gate, '') };
  };
  const isCancelled = (a: { err?: grpc.ServiceError; done: boolean }) => a.done && a.err?.code === grpc.status.CANCELLED;

  for (const m of ['sequence_direct', 'sequence_oldest']) {
    it(`in the slot's queue (${m})`, async () => {
      const before = await cancelled(m);
      const { first, open } = await occupy(m, 1);
      const queued = [send(m, 1, false), send(m, 1, false)];
      await until(async () => (await pending(m)) === 2);
      expect(queued.map((q) => q.answer.done)).toEqual([false, false]);
      queued[0]!.call.cancel();
      // Both are answered while the sequence's first request still runs.
      await until(() => isCancelled(queued[1]!.answer));
      expect(queued[1]!.answer.err!.details).toMatch(/Request was cancelled/);
      await until(async () => (await cancelled(m)) === before + 2);
      expect(await pending(m)).toBe(0);
      expect(first.answer.done).toBe(false);
      open();
      await until(() => first.answer.done);
      expect(first.answer.err).toBeUndefined();
      // The sequence has ended: a request without START is refused; a new START (and END) is served.
      const late = send(m, 1, false);
      await until(() => late.answer.done);
      expect(late.answer.err?.details).toMatch(/must specify the START flag on the first request of the sequence/);
      const again = send(m, 1, true, undefined, true);
      await until(() => again.answer.done);
      expect(again.answer.err).toBeUndefined();
    });
  }

  it('in the backlog, and the slot serves the next sequence', async () => {
    const m = 'sequence_direct';
    const before = await cancelled(m);
    const { first, open } = await occupy(m, 11);
    const backlog = [send(m, 12, true), send(m, 12, false)];
    const next = send(m, 13, true, undefined, true);
    await until(async () => (await pending(m)) === 3);
    backlog[0]!.call.cancel();
    await until(() => isCancelled(backlog[1]!.answer));
    await until(async () => (await cancelled(m)) === before + 2);
    expect(next.answer.done).toBe(false);
    // Sequence 11 ends; its slot then goes to sequence 13, not to the cancelled 12.
    const last = send(m, 11, false, undefined, true);
    open();
    await until(() => first.answer.done && last.answer.done && next.answer.done);
    expect([first, last, next].map((q) => q.answer.err)).toEqual([undefined, undefined, undefined]);
  });
});
