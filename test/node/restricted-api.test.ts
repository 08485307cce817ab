/**
 * Restricted APIs on the real server: `--http-restricted-api` (403 and Triton's body without the header,
 * per category; unrestricted categories and CORS preflights untouched) and `--grpc-restricted-protocol`
 * (Triton's UNAVAILABLE "This protocol is restricted" without the `triton-grpc-protocol-<key>`
 * metadata, for unary calls and streams), and start-up refusing an unknown category.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { grpcClient, int32Raw, streamAll, type GrpcTestClient } from '../helpers/grpc.js';

const simple = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) },
  ],
};

let s: TestServer;
let c: GrpcTestClient;
beforeAll(async () => {
  s = await startTestServer({
    modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1', corsOrigin: 'http://app.example',
    httpRestrictedApi: ['model-repository,shared-memory,logging:Admin-Key=s3cret', 'inference:infer-key=abc'],
    grpcRestrictedProtocol: ['inference,model-repository:infer-key=abc'],
  });
  c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
});
afterAll(async () => {
  c?.close();
  await s?.stop();
});

describe('HTTP', () => {
  it('answers 403 with Triton\'s body without the header, and serves with it', async () => {
    const denied = await postJson(`${s.url}/v2/repository/index`, {});
    expect(denied).toMatchObject({ status: 403, body: { error: "This API is restricted, expecting header 'Admin-Key'" } });
    expect((await postJson(`${s.url}/v2/repository/index`, {}, { 'admin-key': 'wrong' })).status).toBe(403);
    expect((await postJson(`${s.url}/v2/repository/index`, {}, { 'admin-key': 's3cret' })).status).toBe(200);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).status).toBe(403);
    expect((await getJson(`${s.url}/v2/logging`)).status).toBe(403);
    const inf = await postJson(`${s.url}/v2/models/simple/infer`, simple);
    expect(inf).toMatchObject({ status: 403, body: { error: "This API is restricted, expecting header 'infer-key'" } });
    expect((await postJson(`${s.url}/v2/models/simple/versions/1/infer`, simple, { 'infer-key': 'abc' })).status).toBe(200);
  });

  it('leaves other categories and CORS preflights alone', async () => {
    expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(200);
    expect((await getJson(`${s.url}/v2/models/simple`)).status).toBe(200);
    expect((await getJson(`${s.url}/v2/models/simple/config`)).status).toBe(200);
    expect((await getJson(`${s.url}/v2/models/stats`)).status).toBe(200);
    expect((await getJson(`${s.url}/v2/trace/setting`)).status).toBe(200);
    const pre = await fetch(`${s.url}/v2/models/simple/infer`, {
      method: 'OPTIONS', headers: { Origin: 'http://app.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'infer-key' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('http://app.example');
  });
});

describe('gRPC', () => {
  it('answers UNAVAILABLE with Triton\'s text without the metadata, and serves with it', async () => {
    const req = {
      model_name: 'simple', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }],
      raw_input_contents: [int32Raw(Array(16).fill(1)), int32Raw(Array(16).fill(2))],
    };
    await expect(c.call('ModelInfer', req)).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE, details: "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'",
    });
    const ok = await c.call('ModelInfer', req, { 'triton-grpc-protocol-infer-key': 'abc' });
    expect(ok.model_name).toBe('simple');
    await expect(c.call('RepositoryIndex', {})).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect((await c.call('ServerLive', {})).live).toBe(true);
    expect((await c.call('ModelConfig', { name: 'simple' })).config.name).toBe('simple');
    await expect(streamAll(c, [req])).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    const msgs = await streamAll(c, [req], { 'triton-grpc-protocol-infer-key': 'abc' });
    expect(msgs[0]!.error_message).toBe('');
  });
});

it("refuses an unknown category, or one in two groups, at start-up with Triton's texts (L0_http)", async () => {
  await expect(startTestServer({ modelRepositories: [MODELS], httpRestrictedApi: ['model-reposit,health:k1=v1', 'metadata,health:k2=v2'] }))
    .rejects.toThrow(/^unknown restricted api 'model-reposit' \(--http-restricted-api: expected one of/);
  await expect(startTestServer({ modelRepositories: [MODELS], httpRestrictedApi: ['model-repository,health:k1=v1', 'metadata,health:k2=v2'] }))
    .rejects.toThrow("restricted api 'health' can not be specified in multiple config groups");
  await expect(startTestServer({ modelRepositories: [MODELS], grpcRestrictedProtocol: ['inference:a=b', 'inference:c=d'] }))
    .rejects.toThrow("restricted protocol 'inference' can not be specified in multiple config groups");
  await expect(startTestServer({ modelRepositories: [MODELS], grpcRestrictedProtocol: ['inference'] }))
    .rejects.toThrow('--grpc-restricted-protocol expects <category>[,<category>...]:<key>=<value>');
});
