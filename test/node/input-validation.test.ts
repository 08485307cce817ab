/**
 * Triton's L0_input_validation, against the real server over HTTP and gRPC: its texts for a request
 * missing required inputs (the exact count, or the range when some inputs are optional), for BYTES
 * inputs holding fewer or more strings than their shape, and its model-name checks on load (blank
 * names refused with its text, `..` refused, `...` and `a..b` plain names).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { MODELS, lengthPrefixed, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient, type GrpcTestClient } from '../helpers/grpc.js';

/** An identity model with INPUT0..INPUT<n-1>, the last `optional` of them optional. */
const identity = (name: string, n: number, optional: number) => {
  const io = (kind: string, i: number, opt: boolean) =>
    `{ name: "${kind}${i}" data_type: TYPE_FP32 dims: [ -1 ]${opt ? ' optional: true' : ''} }`;
  const idx = Array.from({ length: n }, (_, i) => i);
  return `name: "${name}"\nbackend: "identity"\n`
    + `input [ ${idx.map((i) => io('INPUT', i, i >= n - optional)).join(', ')} ]\n`
    + `output [ ${idx.map((i) => io('OUTPUT', i, false)).join(', ')} ]\n`;
};

describe("Triton's input validation texts", () => {
  const repo = tempRepo({
    'input_all_required/config.pbtxt': identity('input_all_required', 3, 0),
    'input_all_required/1/.keep': '',
    'input_optional/config.pbtxt': identity('input_optional', 4, 1),
    'input_optional/1/.keep': '',
  });
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [repo.path, MODELS], grpcPort: 0, grpcAddress: '127.0.0.1' });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
  });

  const fp32 = (name: string) => ({ name, datatype: 'FP32', shape: [2], data: [1, 2] });
  const viaHttp = async (model: string, names: string[]) => {
    const r = await postJson(`${s.url}/v2/models/${model}/infer`, { inputs: names.map(fp32) });
    expect(r.status).toBe(400);
    return r.body.error as string;
  };
  const viaGrpc = async (model: string, names: string[]) => {
    const err = await c.call('ModelInfer', {
      model_name: model, inputs: names.map((name) => ({ name, datatype: 'FP32', shape: [2], contents: { fp32_contents: [1, 2] } })),
    }).then(() => undefined, (e) => e);
    expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
    return err.details as string;
  };

  for (const [protocol, send] of [['http', viaHttp], ['grpc', viaGrpc]] as const) {
    it(`names the inputs given and missing, the count exact or a range (${protocol})`, async () => {
      expect(await send('input_all_required', [])).toContain(
        "expected 3 inputs but got 0 inputs for model 'input_all_required'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1','INPUT2']. Please provide all required input(s).");
      expect(await send('input_all_required', ['INPUT0'])).toContain(
        "expected 3 inputs but got 1 inputs for model 'input_all_required'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. Please provide all required input(s).");
      expect(await send('input_optional', [])).toContain(
        "expected number of inputs between 3 and 4 but got 0 inputs for model 'input_optional'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1','INPUT2']. Please provide all required input(s).");
      expect(await send('input_optional', ['INPUT0'])).toContain(
        "expected number of inputs between 3 and 4 but got 1 inputs for model 'input_optional'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. Please provide all required input(s).");
    });
  }

  it('counts BYTES elements against the shape with Triton\'s texts (gRPC raw contents, HTTP JSON)', async () => {
    const strings = (n: number) => Array.from({ length: n }, (_, i) => String(i));
    // Triton's test: both inputs claim [1, 16] but carry 14 (then 18) strings; Triton names INPUT1.
    const raw = (n: number) => c.call('ModelInfer', {
      model_name: 'simple_string',
      inputs: ['INPUT0', 'INPUT1'].map((name) => ({ name, datatype: 'BYTES', shape: [1, 16] })),
      raw_input_contents: [Buffer.from(lengthPrefixed(strings(n))), Buffer.from(lengthPrefixed(strings(n)))],
    });
    await expect(raw(14)).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: "[request id: <id_unknown>] expected 16 string elements for inference input 'INPUT1' for model 'simple_string', got 14",
    });
    await expect(raw(18)).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: "[request id: <id_unknown>] unexpected number of string elements 17 for inference input 'INPUT1' for model 'simple_string', expecting 16",
    });
    const json = await postJson(`${s.url}/v2/models/simple_string/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: strings(15) },
        { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: strings(16) },
      ],
    });
    expect(json).toMatchObject({
      status: 400, body: { error: "[request id: <id_unknown>] expected 16 string elements for inference input 'INPUT0' for model 'simple_string', got 15" },
    });
  });
});

describe("Triton's model name checks on load", () => {
  const repo = tempRepo({ 'input_all_required/config.pbtxt': identity('input_all_required', 3, 0), 'input_all_required/1/.keep': '' });
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', grpcPort: 0, grpcAddress: '127.0.0.1' });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
  });
  const load = (name: string) => c.call('RepositoryModelLoad', { model_name: name }).then(() => undefined, (e) => e as grpc.ServiceError);

  it('refuses an empty or blank name with Triton\'s text', async () => {
    for (const name of ['', ' ', '   ', '\t', '\n', '\r', '\f', '\v', ' \t \n ']) {
      expect(await load(name), JSON.stringify(name)).toMatchObject({
        code: grpc.status.INVALID_ARGUMENT, details: 'Model name cannot be empty. Please enter a valid name to deploy.',
      });
    }
    const http = await postJson(`${s.url}/v2/repository/models/%20%20/load`, {});
    expect(http).toMatchObject({ status: 400, body: { error: 'Model name cannot be empty. Please enter a valid name to deploy.' } });
  });

  it('refuses traversal, and takes names that only contain dots as plain names', async () => {
    for (const name of ['..', 'model/subdir', 'model/', ' ..', '.. ']) {
      expect((await load(name))?.details, JSON.stringify(name)).toMatch(/model name must not contain path traversal characters/);
    }
    for (const name of ['model123', 'model.version1', '...', '..my_model', 'model..1', 'model....1']) {
      const err = await load(name);
      expect(err?.details, name).not.toMatch(/path traversal/);
      expect(err?.details, name).toMatch(/failed to poll from model repository/);
    }
    expect(await load('input_all_required')).toBeUndefined();
  });
});
