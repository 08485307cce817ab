/**
 * System shared memory on the real server, with regions the test creates itself in /dev/shm as a
 * client's shm_open would: register, status and unregister over HTTP and gRPC, inputs read from and
 * outputs written into regions by both transports, the errors for bad keys, offsets, sizes and unknown
 * regions, CUDA shared memory's UNSUPPORTED answers, and registration refused unless
 * --allow-client-shm. Skipped (with the reason printed) where /dev/shm does not exist.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { describeWith } from '../helpers/capability.js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { grpcClient, type GrpcTestClient } from '../helpers/grpc.js';

const withShm = describeWith(!!process.env.CI, '/dev/shm', process.platform === 'linux' && existsSync('/dev/shm') ? undefined : `no /dev/shm on ${process.platform}`);

const tag = `tsi-test-${process.pid}`;
const IN = `/${tag}-in`;
const OUT = `/${tag}-out`;
const file = (key: string) => `/dev/shm${key}`;
const i32 = (v: number[]) => Buffer.from(Int32Array.from(v).buffer);
const readI32 = (key: string, offset: number, n: number) => {
  const b = readFileSync(file(key));
  return Array.from(new Int32Array(b.buffer.slice(b.byteOffset + offset, b.byteOffset + offset + 4 * n)));
};
const a = Array.from({ length: 16 }, (_, i) => i);
const b = Array.from({ length: 16 }, (_, i) => 100 + i);

withShm('system shared memory', () => {
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    // The client's side of shm_open + ftruncate + mmap + memcpy: a 128-byte input region, a 256-byte output one.
    writeFileSync(file(IN), Buffer.concat([i32(a), i32(b)]));
    writeFileSync(file(OUT), Buffer.alloc(256));
    s = await startTestServer({ modelRepositories: [MODELS], allowClientShm: true, grpcPort: 0, grpcAddress: '127.0.0.1' });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    rmSync(file(IN), { force: true });
    rmSync(file(OUT), { force: true });
  });

  it('registers regions over HTTP and reports their status', async () => {
    expect((await postJson(`${s.url}/v2/systemsharedmemory/region/input/register`, { key: IN, offset: 0, byte_size: 128 })).status).toBe(200);
    expect((await postJson(`${s.url}/v2/systemsharedmemory/region/output/register`, { key: OUT, offset: 64, byte_size: 192 })).status).toBe(200);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).body).toEqual([
      { name: 'input', key: IN, offset: 0, byte_size: 128 },
      { name: 'output', key: OUT, offset: 64, byte_size: 192 },
    ]);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/region/input/status`)).body).toEqual([{ name: 'input', key: IN, offset: 0, byte_size: 128 }]);
    expect(await getJson(`${s.url}/v2/systemsharedmemory/region/nope/status`)).toMatchObject({
      status: 404, body: { error: "Unable to find system shared memory region: 'nope'" },
    });
    expect(await postJson(`${s.url}/v2/systemsharedmemory/region/input/register`, { key: IN, offset: 0, byte_size: 128 })).toMatchObject({
      status: 400, body: { error: "shared memory region 'input' already in manager" },
    });
  });

  it('reads inputs from and writes outputs into regions over HTTP', async () => {
    const r = await postJson(`${s.url}/v2/models/simple/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: 'input', shared_memory_byte_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: 'input', shared_memory_offset: 64, shared_memory_byte_size: 64 } },
      ],
      outputs: [
        { name: 'OUTPUT0', parameters: { shared_memory_region: 'output', shared_memory_byte_size: 64 } },
        { name: 'OUTPUT1' },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0]).toEqual({ name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16] });
    expect(r.body.outputs[1].data).toEqual(a.map((x, i) => x - b[i]!));
    // The region starts at offset 64 of the object.
    expect(readI32(OUT, 64, 16)).toEqual(a.map((x, i) => x + b[i]!));
  });

  it('does the same over gRPC, with an empty raw entry for the output in shared memory', async () => {
    await c.call('SystemSharedMemoryRegister', { name: 'g_out', key: OUT, offset: 0, byte_size: 256 });
    const st = await c.call('SystemSharedMemoryStatus', { name: 'g_out' });
    expect(st.regions.g_out).toEqual({ name: 'g_out', key: OUT, offset: '0', byte_size: '256' });
    const shm = (region: string, byteSize: number, offset = 0) => ({
      shared_memory_region: { string_param: region },
      shared_memory_byte_size: { int64_param: String(byteSize) },
      ...(offset ? { shared_memory_offset: { int64_param: String(offset) } } : {}),
    });
    const r = await c.call('ModelInfer', {
      model_name: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: shm('input', 64) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: shm('input', 64, 64) },
      ],
      outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT1', parameters: shm('g_out', 64, 128) }],
    });
    expect(r.raw_output_contents.map((x: Buffer) => x.byteLength)).toEqual([64, 0]);
    expect(readI32(OUT, 128, 16)).toEqual(a.map((x, i) => x - b[i]!));
    await c.call('SystemSharedMemoryUnregister', { name: 'g_out' });
    expect(Object.keys((await c.call('SystemSharedMemoryStatus', { name: '' })).regions).sort()).toEqual(['input', 'output']);
  });

  it('refuses bad keys, offsets, sizes and unknown regions with clear errors', async () => {
    const reg = (name: string, body: unknown) => postJson(`${s.url}/v2/systemsharedmemory/region/${name}/register`, body);
    const nosuch = await reg('x', { key: `/${tag}-missing`, offset: 0, byte_size: 8 });
    expect(nosuch).toMatchObject({ status: 400, body: { error: `Unable to open shared memory region: '/${tag}-missing': ENOENT` } });
    for (const key of ['/a/b', '../etc/passwd', '/..', '', 'x\\y']) {
      const r = await reg('x', { key, offset: 0, byte_size: 8 });
      expect(r.status, key).toBe(400);
      expect(r.body.error, key).toMatch(/^Unable to open shared memory region/);
    }
    expect((await reg('x', { key: IN, offset: 100, byte_size: 100 })).body.error).toBe(
      `shared memory region '${IN}' is 128 bytes, too small for offset 100 + byte_size 100`);
    expect((await reg('x', { key: IN, offset: -1, byte_size: 8 })).status).toBe(400);
    expect((await reg('x', { key: IN })).status).toBe(400);

    const infer = (inParams: object, outParams?: object) => postJson(`${s.url}/v2/models/simple/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: inParams },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
      ...(outParams ? { outputs: [{ name: 'OUTPUT0', parameters: outParams }] } : {}),
    });
    expect((await infer({ shared_memory_region: 'nope', shared_memory_byte_size: 64 })).body.error)
      .toBe("Unable to find shared memory region: 'nope' (input 'INPUT0')");
    expect((await infer({ shared_memory_region: 'input', shared_memory_offset: 96, shared_memory_byte_size: 64 })).body.error)
      .toMatch(/^Invalid offset \+ byte size for shared memory region: 'input'/);
    expect((await infer({ shared_memory_region: 'input', shared_memory_byte_size: 60 })).body.error)
      .toBe("input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60");
    const small = await infer({ shared_memory_region: 'input', shared_memory_byte_size: 64 }, { shared_memory_region: 'output', shared_memory_byte_size: 32 });
    expect(small).toMatchObject({
      status: 500, body: { error: "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results" },
    });
    await expect(c.call('ModelInfer', {
      model_name: 'simple', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: { string_param: 'input' } } }],
    })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'",
    });
  });

  it('unregisters one region or all of them', async () => {
    expect((await postJson(`${s.url}/v2/systemsharedmemory/region/input/unregister`, '')).status).toBe(200);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).body.map((r: any) => r.name)).toEqual(['output']);
    expect((await postJson(`${s.url}/v2/systemsharedmemory/region/never/unregister`, '')).status).toBe(200);
    expect((await postJson(`${s.url}/v2/systemsharedmemory/unregister`, '')).status).toBe(200);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).body).toEqual([]);
  });
});

describe('shared memory refusals', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS] });
  });
  afterAll(async () => s?.stop());

  it('refuses registration unless --allow-client-shm, and has no CUDA shared memory', async () => {
    const r = await postJson(`${s.url}/v2/systemsharedmemory/region/r/register`, { key: '/whatever', offset: 0, byte_size: 8 });
    expect(r.status).toBe(501);
    expect(r.body.error).toMatch(/--allow-client-shm=true/);
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).body).toEqual([]);
    const infer = await postJson(`${s.url}/v2/models/simple/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: 'r', shared_memory_byte_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    expect(infer).toMatchObject({ status: 400, body: { error: "Unable to find shared memory region: 'r' (input 'INPUT0')" } });
    const cuda = await postJson(`${s.url}/v2/cudasharedmemory/region/g/register`, { raw_handle: { b64: 'AAAA' }, device_id: 0, byte_size: 8 });
    expect(cuda).toMatchObject({ status: 501, body: { error: "failed to register CUDA shared memory region 'g': GPUs not supported" } });
    expect((await getJson(`${s.url}/v2/cudasharedmemory/status`)).body).toEqual([]);
    expect((await getJson(`${s.url}/v2/cudasharedmemory/region/g/status`)).status).toBe(404);
    expect((await postJson(`${s.url}/v2/cudasharedmemory/unregister`, '')).status).toBe(200);
  });
});
