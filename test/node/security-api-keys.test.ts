/**
 * API keys (`--api-key`, `--api-key-file`, issue #22): every API but health needs
 * `Authorization: Bearer <key>` (HTTP) or `authorization` metadata (gRPC); a missing, malformed or
 * unknown key is 401 with a JSON error and `WWW-Authenticate: Bearer` (gRPC UNAUTHENTICATED), a key
 * scoped to other categories 403 (PERMISSION_DENIED); health stays open for probes, also behind a
 * `..` that would dress another API up as health; the key file is re-read when it changes, and a file
 * that no longer parses keeps the keys in force; tsi's clients send the key. The comparison's
 * structure is checked rather than its timing: every presented key, whatever its length or likeness,
 * costs one timingSafeEqual over two 32-byte digests per configured key, with no early exit.
 */

import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { timingSafeEqual } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addSubModel } from '../../scripts/gen-models.js';
import { HttpClient, GrpcClient } from '../../client/node.js';
import { ApiKeyring } from '../../runtime-node/http/api-keys.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient } from '../helpers/grpc.js';

// The real timingSafeEqual, watched: the structure test counts its calls and their arguments.
vi.mock('node:crypto', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:crypto')>();
  return { ...real, timingSafeEqual: vi.fn(real.timingSafeEqual) };
});

const ALL = 'k-all-0123456789';
const INFER = 'k-infer-abcdef';
const STATS = 'k-stats-from-file';
const body = { inputs: [
  { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
  { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
] };
const bearer = (key: string) => ({ Authorization: `Bearer ${key}` });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function get(url: string, headers: Record<string, string> = {}) {
  const r = await fetch(url, { headers });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined, headers: r.headers };
}

/** One raw request (fetch would resolve the `..` before sending it), answered on a closed connection. */
async function raw(port: number, target: string, headers = ''): Promise<{ status: number; body: string }> {
  const sock = connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  sock.on('data', (d) => chunks.push(d));
  sock.write(`GET ${target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n${headers}\r\n`);
  await new Promise((r) => sock.once('close', r));
  const text = Buffer.concat(chunks).toString('latin1');
  return { status: Number(text.split(' ')[1]), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
}

let repo: ReturnType<typeof tempRepo>;
let keyFile: string;
let s: TestServer;

beforeAll(async () => {
  repo = tempRepo({
    'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n',
    'm/1/model.onnx': addSubModel('FP32', [4]),
  });
  keyFile = join(tmpdir(), `tsi-keys-${process.pid}-${Date.now()}`);
  writeFileSync(keyFile, `# statistics readers\nstatistics:${STATS}\n`);
  s = await startTestServer({
    modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', modelControlMode: 'explicit', loadModels: ['m'],
    apiKeys: [ALL, `inference,metadata:${INFER}`], apiKeyFile: keyFile, credentialsWatchMs: 50,
  });
});
afterAll(async () => {
  await s?.stop(1000);
  repo?.cleanup();
  rmSync(keyFile, { force: true });
});

describe('API keys over HTTP', () => {
  it('answers 401 with a JSON error and WWW-Authenticate to a missing, malformed or unknown key', async () => {
    const cases: [Record<string, string>, string][] = [
      [{}, "this API needs an API key: send it as 'Authorization: Bearer <key>'"],
      [{ Authorization: `Basic ${Buffer.from(`u:${ALL}`).toString('base64')}` }, "the Authorization value must be 'Bearer <key>'"],
      [bearer(`${ALL}x`), 'the API key is not valid'],
      [bearer(ALL.slice(0, -1)), 'the API key is not valid'],
    ];
    for (const [headers, error] of cases) {
      const r = await postJson(`${s.url}/v2/models/m/infer`, body, headers);
      expect(r.status, error).toBe(401);
      expect(r.body).toEqual({ error });
      expect(r.headers.get('www-authenticate')).toBe('Bearer realm="tsi"');
      expect((await get(`${s.url}/v2/models/m`, headers)).status).toBe(401);
    }
    // The error never repeats the key it was given.
    expect(JSON.stringify((await postJson(`${s.url}/v2/models/m/infer`, body, bearer('secret-guess'))).body)).not.toContain('secret-guess');
  });

  it('keeps health open without a key, but not another API dressed up as health', async () => {
    for (const path of ['/v2/health/live', '/v2/health/ready', '/v2/models/m/ready', '/v2/models/m/versions/1/ready']) {
      expect((await get(`${s.url}${path}`)).status, path).toBe(200);
    }
    for (const target of ['/v2/health/../repository/index', '/v2/health/%2e%2e/models/m/config', '/v2/models/m/ready/../config']) {
      const r = await raw(s.http!.port, target);
      expect(r.status, target).toBe(401);
      expect(JSON.parse(r.body).error, target).toMatch(/needs an API key/);
    }
  });

  it('opens only the categories a key names', async () => {
    const infer = bearer(INFER);
    expect((await postJson(`${s.url}/v2/models/m/infer`, body, infer)).body.outputs[0].data).toEqual([2, 3, 4, 5]);
    expect((await get(`${s.url}/v2/models/m`, infer)).status).toBe(200);
    expect((await get(`${s.url}/v2`, infer)).status).toBe(200);
    const repo = await postJson(`${s.url}/v2/repository/index`, {}, infer);
    expect(repo).toMatchObject({ status: 403, body: { error: "the API key does not give access to the 'model-repository' API" } });
    expect(repo.headers.get('www-authenticate')).toBeNull();
    expect((await get(`${s.url}/v2/models/m/stats`, infer)).status).toBe(403);
    expect((await get(`${s.url}/v2/models/m/config`, infer)).status).toBe(403);
    // A path outside every category needs a key for all of them.
    expect((await get(`${s.url}/v2/nowhere`, infer)).body.error).toMatch(/outside the API categories/);
    expect((await get(`${s.url}/v2/nowhere`, bearer(ALL))).status).toBe(404);
    // The file's key: statistics only.
    expect((await get(`${s.url}/v2/models/m/stats`, bearer(STATS))).status).toBe(200);
    expect((await postJson(`${s.url}/v2/models/m/infer`, body, bearer(STATS))).status).toBe(403);
    // A key for everything opens model control too.
    expect((await postJson(`${s.url}/v2/repository/index`, {}, bearer(ALL))).status).toBe(200);
  });

  it("is sent by tsi's HTTP client", async () => {
    const c = new HttpClient({ url: s.url, apiKey: INFER });
    expect(Array.from((await c.infer('m', [{ name: 'INPUT0', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 2, 3, 4]) }, { name: 'INPUT1', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([0, 0, 0, 0]) }])).data<Float32Array>('OUTPUT0'))).toEqual([1, 2, 3, 4]);
    await expect(new HttpClient({ url: s.url }).getModelMetadata('m')).rejects.toMatchObject({ status: 401 });
  });
});

describe('API keys over gRPC', () => {
  it('answers UNAUTHENTICATED and PERMISSION_DENIED, and keeps both health services open', async () => {
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      expect(await c.call('ServerLive', {})).toEqual({ live: true });
      expect(await c.call('ModelReady', { name: 'm' })).toEqual({ ready: true });
      expect(await c.health()).toBe('SERVING');
      await expect(c.call('ModelMetadata', { name: 'm' })).rejects.toMatchObject({
        code: grpc.status.UNAUTHENTICATED, details: "this API needs an API key: send it as 'Authorization: Bearer <key>'",
      });
      await expect(c.call('ModelMetadata', { name: 'm' }, { authorization: 'Bearer nope' })).rejects.toMatchObject({
        code: grpc.status.UNAUTHENTICATED, details: 'the API key is not valid',
      });
      expect((await c.call('ModelMetadata', { name: 'm' }, { authorization: `Bearer ${INFER}` })).name).toBe('m');
      await expect(c.call('ModelInfer', { model_name: 'm' })).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
      await expect(c.call('RepositoryIndex', {}, { authorization: `Bearer ${INFER}` })).rejects.toMatchObject({
        code: grpc.status.PERMISSION_DENIED, details: "the API key does not give access to the 'model-repository' API",
      });
      // A stream is refused before its first message.
      const stream = c.stream();
      const err = new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
      stream.write({ model_name: 'm' });
      expect((await err).code).toBe(grpc.status.UNAUTHENTICATED);
    } finally {
      c.close();
    }
  });

  it("is sent by tsi's gRPC client", async () => {
    const c = new GrpcClient({ url: `127.0.0.1:${s.grpc!.port}`, apiKey: STATS });
    const inferring = new GrpcClient({ url: `127.0.0.1:${s.grpc!.port}`, apiKey: INFER });
    try {
      const inputs = [
        { name: 'INPUT0', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 2, 3, 4]) },
        { name: 'INPUT1', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 1, 1, 1]) },
      ];
      expect(Array.from((await inferring.infer('m', inputs)).data<Float32Array>('OUTPUT1'))).toEqual([0, 1, 2, 3]);
      await expect(c.infer('m', inputs)).rejects.toMatchObject({ status: grpc.status.PERMISSION_DENIED });
      expect((await c.getInferenceStatistics('m'))[0]!.name).toBe('m');
      await expect(c.getModelMetadata('m')).rejects.toMatchObject({ status: grpc.status.PERMISSION_DENIED });
    } finally {
      await c.close();
      await inferring.close();
    }
  });
});

describe('the key file', () => {
  it('is re-read when it changes; a file that no longer parses keeps the keys in force', async () => {
    const NEW = 'k-rotated-stats';
    const stats = (key: string) => get(`${s.url}/v2/models/m/stats`, bearer(key)).then((r) => r.status);
    const reads = () => s.logs.filter((l) => /API keys: read \d+ key/.test(l)).length;
    const readsAgain = s.logs.filter((l) => /API keys: .* read again, the same keys/.test(l)).length;
    const again = () => s.logs.filter((l) => /API keys: .* read again, the same keys/.test(l)).length - readsAgain;
    // Other files in the key file's folder are none of its business: writing and removing one makes
    // no read (the server would say "read again"), where a watcher without the file-name filter reads
    // once per change. Each wait is ten debounce periods, for the read that must not come.
    const neighbour = `${keyFile}-neighbour`;
    writeFileSync(neighbour, 'x');
    await sleep(500);
    expect(again()).toBe(0);
    // Rewriting the same keys is read and changes nothing, which the server reports.
    writeFileSync(keyFile, `# statistics readers\nstatistics:${STATS}\n`);
    for (let i = 0; i < 200 && again() === 0; i++) await sleep(25);
    expect(again()).toBe(1);
    rmSync(neighbour);
    await sleep(500);
    expect(again()).toBe(1);
    expect(reads()).toBe(0);
    writeFileSync(keyFile, `statistics:${NEW}\n`);
    for (let i = 0; i < 100 && (await stats(NEW)) !== 200; i++) await sleep(50);
    expect(await stats(NEW)).toBe(200);
    expect(await stats(STATS)).toBe(401);
    expect(reads()).toBe(1);
    // Keys given as flags do not depend on the file.
    expect(await stats(ALL)).toBe(200);
    writeFileSync(keyFile, `health:${STATS}\n`);
    for (let i = 0; i < 100 && !s.logs.some((l) => /API keys: keeping the keys in force/.test(l)); i++) await sleep(50);
    expect(s.logs.find((l) => /API keys: keeping the keys in force/.test(l))).toMatch(/health endpoints never need an API key/);
    expect(await stats(NEW)).toBe(200);
  });

  it('and the flags stop the start when unusable, naming the flag or line but not the key', async () => {
    await expect(startTestServer({ modelRepositories: [repo.path], apiKeys: ['health:k-secret-1'] }))
      .rejects.toThrow("--api-key: health endpoints never need an API key (probes must reach them); leave 'health' out");
    await expect(startTestServer({ modelRepositories: [repo.path], apiKeys: ['infer:k-secret-2'] }))
      .rejects.toThrow(/--api-key: unknown API category 'infer'/);
    await expect(startTestServer({ modelRepositories: [repo.path], apiKeys: ['k secret 3'] }))
      .rejects.toThrow(/^--api-key: an API key must be one or more visible ASCII characters/);
    const empty = join(tmpdir(), `tsi-keys-empty-${process.pid}`);
    writeFileSync(empty, '# nothing yet\n\n');
    try {
      await expect(startTestServer({ modelRepositories: [repo.path], apiKeyFile: empty })).rejects.toThrow(/--api-key-file '.*' holds no key/);
    } finally {
      rmSync(empty, { force: true });
    }
  });
});

describe('the comparison of a presented key', () => {
  it('costs one timingSafeEqual over two 32-byte digests per configured key, whatever the key presented', async () => {
    const long = 'c-'.padEnd(280, 'c');
    const configured = ['a', 'inference:' + 'b'.repeat(40), `statistics,metadata:${long}`];
    const ring = await ApiKeyring.create({ keys: configured });
    const spy = vi.mocked(timingSafeEqual);
    const presented = ['', 'a', 'b', 'b'.repeat(40), 'b'.repeat(39), long, 'x'.repeat(100_000)];
    const scopes: unknown[] = [];
    for (const key of presented) {
      spy.mockClear();
      const scope = ring.match(key);
      scopes.push(scope === undefined || scope === 'all' ? scope : [...scope].sort());
      // Not fewer when the first key matches, not more for a long key: the same calls every time.
      expect(spy.mock.calls.length, key.slice(0, 10)).toBe(configured.length);
      for (const [x, y] of spy.mock.calls) {
        expect([(x as Buffer).byteLength, (y as Buffer).byteLength]).toEqual([32, 32]);
      }
    }
    expect(scopes).toEqual([undefined, 'all', undefined, ['inference'], undefined, ['metadata', 'statistics'], undefined]);
  });
});
