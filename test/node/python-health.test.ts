/**
 * A Python model's health as Triton reports it, through the real HTTP and gRPC servers: a model whose
 * process dies is not ready (`Stub process '<instance>' is not healthy.` in the log and in answers
 * to requests) from that moment until the next request has started a new process and that one is
 * ready, and the log says each; a model that
 * defines `is_ready()` is ready only when it answers true (false, an exception, a non-boolean or an
 * answer slower than 5 s each give a not-ready model with Triton's texts), and inference is unaffected.
 * States are waited on (a file holds the restarted process in initialize), never slept on.
 */

import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcClient, type GrpcTestClient } from '../helpers/grpc.js';
import { postJson, type TestServer } from '../helpers/server.js';
import { eventually, PY_FIXTURES, pythonRepo, startPythonServer, stubProcesses } from '../helpers/python-server.js';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;
let rpc: GrpcTestClient;
let hold: string;

/** A copy of health_py named `name`, with the given config parameters. */
function variant(name: string, params: Record<string, string>): void {
  const dir = join(repo.path, name);
  if (name !== 'health_py') cpSync(join(PY_FIXTURES, 'health_py'), dir, { recursive: true });
  const cfg = join(dir, 'config.pbtxt');
  const extra = Object.entries(params).map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }`).join('\n');
  writeFileSync(cfg, `${readFileSync(cfg, 'utf8').replace('name: "health_py"', `name: "${name}"`)}\n${extra}\n`);
}

const VARIANTS: Record<string, Record<string, string>> = {
  ready_true: { READY: 'true' }, ready_false: { READY: 'false' }, ready_exception: { READY: 'exception' },
  ready_non_boolean: { READY: 'non_boolean' }, ready_coroutine: { READY: 'coroutine' }, ready_slow: { READY: 'true', READY_DELAY_SECS: '6' },
};

beforeAll(async () => {
  repo = pythonRepo(['health_py']);
  hold = join(repo.path, 'hold');
  variant('health_py', { HOLD_FILE: hold });
  for (const [name, params] of Object.entries(VARIANTS)) variant(name, params);
  s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
  rpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
}, 120_000);

afterAll(async () => {
  rmSync(hold, { force: true });
  rpc?.close();
  await s?.stop();
  repo?.cleanup();
});

const httpReady = async (model: string) => (await fetch(`${s.url}/v2/models/${model}/ready`)).status === 200;
const grpcReady = async (model: string) => (await rpc.call('ModelReady', { name: model })).ready as boolean;
const infer = (model: string) => postJson(`${s.url}/v2/models/${model}/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2], data: [1, 2] }] });
const logged = (text: string) => s.logs.some((l) => l.includes(text));

describe('a model whose process dies', () => {
  // Triton's L0_backend_python model_readiness (SIGSEGV, then SIGKILL) and restart: not ready from the
  // death on, each readiness check logging Triton's line once; the next request fails with Triton's
  // text and starts a new process; once that one is ready, so is the model, and inference works.
  for (const signal of ['SIGSEGV', 'SIGKILL'] as const) {
    it(`killed by ${signal}: not ready until a request restarts it, with Triton's texts`, async () => {
      expect(await httpReady('health_py')).toBe(true);
      expect(await grpcReady('health_py')).toBe(true);
      const [stub] = stubProcesses().filter((p) => p.cmdline.endsWith('health_py health_py_0_0'));
      expect(stub).toBeDefined();
      const notReady = "Model 'health_py' version 1 is not ready: Stub process 'health_py_0_0' is not healthy.";
      const before = s.logs.filter((l) => l.includes(notReady)).length;
      writeFileSync(hold, 'the restarted process waits in initialize while this file exists');
      process.kill(stub!.pid, signal);
      expect(await eventually(() => logged(`Stub process 'health_py_0_0' is not healthy. The Python process (pid ${stub!.pid}) was killed by signal ${signal}`))).toBe(true);

      // Nothing restarts it on its own: one HTTP and one gRPC check, each not ready, each logged once.
      expect(await httpReady('health_py')).toBe(false);
      expect(await grpcReady('health_py')).toBe(false);
      expect(s.logs.filter((l) => l.includes(notReady)).length - before).toBe(2);
      expect(stubProcesses().filter((p) => p.cmdline.endsWith('health_py health_py_0_0'))).toEqual([]);

      const r = await infer('health_py');
      expect(r.status).toBe(500);
      expect(r.body.error).toMatch(/^Failed to process the request\(s\) for model instance 'health_py_0_0', message: Stub process 'health_py_0_0' is not healthy\./);
      expect(logged('Stub process is unhealthy and it will be restarted.')).toBe(true);
      // The next request waits for the new process (Triton's restart test: the second request works).
      const waiting = infer('health_py');
      expect(await eventually(() => s.server.model('health_py').stats.inflight === 1)).toBe(true);
      rmSync(hold);
      expect((await waiting).body.outputs[0].data).toEqual([1, 2]);
      expect(await eventually(() => httpReady('health_py'), 30_000)).toBe(true);
      expect(await grpcReady('health_py')).toBe(true);
      expect(logged("Stub process 'health_py_0_0' is healthy again")).toBe(true);
      const ok = await infer('health_py');
      expect(ok.body.outputs[0].data).toEqual([1, 2]);
    }, 60_000);
  }
});

describe('a model\'s own is_ready()', () => {
  const both = async (model: string) => [await httpReady(model), await grpcReady(model)];

  it('true (also from a coroutine): ready; inference unaffected', async () => {
    for (const m of ['ready_true', 'ready_coroutine']) {
      for (let i = 0; i < 3; i++) expect(await both(m)).toEqual([true, true]);
      expect((await infer(m)).body.outputs[0].data).toEqual([1, 2]);
    }
  });

  it('false, an exception or a non-boolean: not ready, with Triton\'s texts in the log; inference unaffected', async () => {
    for (const m of ['ready_false', 'ready_exception', 'ready_non_boolean']) {
      expect(await both(m)).toEqual([false, false]);
      expect((await infer(m)).body.outputs[0].data).toEqual([1, 2]);
    }
    expect(logged("Model 'ready_false' version 1 is not ready: Model 'ready_false_0_0' is not ready (user-defined check failed).")).toBe(true);
    expect(logged("Model 'ready_exception' version 1 is not ready: ValueError: is_ready failed on purpose")).toBe(true);
    expect(logged("Model 'ready_non_boolean' version 1 is not ready: is_ready() must return a boolean value")).toBe(true);
    expect(await both('ready_true')).toEqual([true, true]);
  });

  it('slower than 5 s: not ready for the asker that timed out; the next one shares the check in flight', async () => {
    expect(await httpReady('ready_slow')).toBe(false);
    expect(logged("Model 'ready_slow' version 1 is not ready: Timed out waiting for user-defined is_ready() response")).toBe(true);
    expect((await infer('ready_slow')).body.outputs[0].data).toEqual([1, 2]);
    expect(await grpcReady('ready_slow')).toBe(true);
  }, 30_000);
});

