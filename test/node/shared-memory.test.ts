/**
 * System shared memory on the real server, with regions the test creates itself in /dev/shm as a
 * client's shm_open would: register, status and unregister over HTTP and gRPC, inputs read from and
 * outputs written into regions by both transports, the errors for bad keys, offsets, sizes and unknown
 * regions, CUDA shared memory's UNSUPPORTED answers, and registration refused unless
 * --allow-client-shm. Skipped (with the reason printed) where /dev/shm does not exist.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeWith } from '../helpers/capability.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
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
    // Triton answers a key it cannot open with INTERNAL (500; INTERNAL over gRPC too).
    const nosuch = await reg('x', { key: `/${tag}-missing`, offset: 0, byte_size: 8 });
    expect(nosuch).toMatchObject({ status: 500, body: { error: `Unable to open shared memory region: '/${tag}-missing': ENOENT` } });
    await expect(c.call('SystemSharedMemoryRegister', { name: 'x', key: `/${tag}-missing`, offset: 0, byte_size: 8 }))
      .rejects.toMatchObject({ code: grpc.status.INTERNAL, details: `Unable to open shared memory region: '/${tag}-missing': ENOENT` });
    for (const key of ['/a/b', '../etc/passwd', '/..', '', 'x\\y']) {
      // tsi's own check of the key's shape (Triton passes it to shm_open): a client error.
      const r = await reg('x', { key, offset: 0, byte_size: 8 });
      expect(r.status, key).toBe(400);
      expect(r.body.error, key).toMatch(/^Unable to open shared memory region/);
    }
    // Triton's key checks come first, with its texts: all slashes, and the Python backend's own prefix.
    for (const key of ['/', '///']) {
      expect(await reg('my_test_shm_name', { key, byte_size: 10000 }), key).toMatchObject({
        status: 400, body: { error: `cannot register shared memory region 'my_test_shm_name' - invalid shm key '${key}'` },
      });
    }
    const reserved = 'triton_python_backend_shm_region_';
    for (const key of [`${reserved}_k`, `/${reserved}_k`, `///${reserved}_k`]) {
      expect(await reg('my_test_shm_name', { key, byte_size: 10000 }), key).toMatchObject({
        status: 400,
        body: { error: `cannot register shared memory region 'my_test_shm_name' with key '${key}' as the key contains the reserved prefix '${reserved}'` },
      });
      await expect(c.call('SystemSharedMemoryRegister', { name: 'my_test_shm_name', key, offset: 0, byte_size: 10000 }))
        .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    }
    // A registered range past the object's end: Triton's "invalid args", for each edge of L0_shared_memory.
    for (const [offset, byte_size] of [[0, 129], [1, 128], [128, 1], [129, 0], [100, 100]]) {
      expect(await reg('x', { key: IN, offset, byte_size }), `${offset}+${byte_size}`).toMatchObject({
        status: 400, body: { error: expect.stringMatching(/^failed to register shared memory region 'x': invalid args \(/) },
      });
    }
    await expect(c.call('SystemSharedMemoryRegister', { name: 'x', key: IN, offset: 1, byte_size: 128 }))
      .rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/^failed to register shared memory region 'x': invalid args/) });
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
    // Triton's order: an offset outside the region, then a sum past 2^64 - 1, then a range past the end.
    expect((await infer({ shared_memory_region: 'input', shared_memory_offset: 128, shared_memory_byte_size: 0 })).body.error)
      .toMatch(/^Invalid offset for shared memory region: 'input'/);
    const huge = '18446744073709551584'; // 2^64 - 32, as Triton's test writes it: JSON numbers are read as doubles
    const hugeOffset = await postJson(`${s.url}/v2/models/simple/infer`, `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"parameters":{"shared_memory_region":"input","shared_memory_offset":${huge},"shared_memory_byte_size":64}},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[${b}]}]}`);
    expect(hugeOffset.body.error).toMatch(/^Invalid offset for shared memory region: 'input'/);
    const overflow = await postJson(`${s.url}/v2/models/simple/infer`, `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"parameters":{"shared_memory_region":"input","shared_memory_offset":32,"shared_memory_byte_size":${huge}}},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[${b}]}]}`);
    expect(overflow).toMatchObject({ status: 400, body: { error: expect.stringMatching(/^Integer overflow detected: byte_size \(\d+\) \+ offset \(32\) exceeds maximum value \(18446744073709551615\) for region 'input'$/) } });
    await expect(c.call('ModelInfer', {
      model_name: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: { string_param: 'input' }, shared_memory_offset: { int64_param: '128' }, shared_memory_byte_size: { int64_param: '64' } } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], contents: { int_contents: b } },
      ],
    })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/^Invalid offset for shared memory region: 'input'/) });
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
    // No CUDA here: registration says so; unregistering (nothing) is fine.
    const cuda = await postJson(`${s.url}/v2/cudasharedmemory/region/g/register`, { raw_handle: { b64: 'AAAA' }, device_id: 0, byte_size: 8 });
    expect(cuda).toMatchObject({ status: 501, body: { error: "failed to register CUDA shared memory region 'g': GPUs not supported" } });
    expect((await postJson(`${s.url}/v2/cudasharedmemory/unregister`, '')).status).toBe(200);
    expect(await c.call('CudaSharedMemoryUnregister', { name: '' })).toEqual({});
  });
});

/**
 * model.js of an INT32 echo that, once executing, writes `<gate>.started` and waits until `<gate>`
 * exists: the test knows the request is in flight, and decides when it ends, without timing guesses.
 */
const gatedEcho = (gate: string) => `import { existsSync, writeFileSync } from 'node:fs';
  export default class {
    execute(requests) {
      writeFileSync(${JSON.stringify(gate)} + '.started', '');
      while (!existsSync(${JSON.stringify(gate)})) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
      return requests.map((r) => ({ outputs: { Y: r.input('X').data } }));
    }
  }`;

withShm('a region unregistered while a request uses it', () => {
  const KEY = `/${tag}-held`;
  const dir = mkdtempSync(join(tmpdir(), 'tsi-gate-'));
  const repo = tempRepo({
    'gated/config.pbtxt': `name: "gated"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_INT32 dims: [ 16 ] }]\noutput [{ name: "Y" data_type: TYPE_INT32 dims: [ 16 ] }]\n`,
    'gated/1/model.js': gatedEcho(join(dir, 'gate')),
  });
  let s: TestServer;
  let c: GrpcTestClient;
  beforeAll(async () => {
    writeFileSync(file(KEY), Buffer.concat([i32(a), Buffer.alloc(64)]));
    s = await startTestServer({ modelRepositories: [repo.path], allowClientShm: true, grpcPort: 0, grpcAddress: '127.0.0.1' });
    c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
    rmSync(file(KEY), { force: true });
  });
  const names = async () => (await getJson(`${s.url}/v2/systemsharedmemory/status`)).body.map((r: any) => r.name).sort();
  const started = async (gate: string) => {
    while (!existsSync(`${gate}.started`)) await new Promise((r) => setTimeout(r, 10));
  };

  for (const protocol of ['http', 'grpc'] as const) {
    it(`stays listed until the request is done (${protocol}), as in Triton`, async () => {
      const gate = join(dir, 'gate');
      rmSync(gate, { force: true });
      rmSync(`${gate}.started`, { force: true });
      for (const name of ['in', 'out', 'idle']) {
        expect((await postJson(`${s.url}/v2/systemsharedmemory/region/${name}/register`, { key: KEY, byte_size: 128 })).status).toBe(200);
      }
      const answer = protocol === 'http'
        ? postJson(`${s.url}/v2/models/gated/infer`, {
          inputs: [{ name: 'X', datatype: 'INT32', shape: [16], parameters: { shared_memory_region: 'in', shared_memory_byte_size: 64 } }],
          outputs: [{ name: 'Y', parameters: { shared_memory_region: 'out', shared_memory_offset: 64, shared_memory_byte_size: 64 } }],
        }).then((r) => r.status)
        : c.call('ModelInfer', {
          model_name: 'gated',
          inputs: [{ name: 'X', datatype: 'INT32', shape: [16], parameters: { shared_memory_region: { string_param: 'in' }, shared_memory_byte_size: { int64_param: '64' } } }],
          outputs: [{ name: 'Y', parameters: { shared_memory_region: { string_param: 'out' }, shared_memory_offset: { int64_param: '64' }, shared_memory_byte_size: { int64_param: '64' } } }],
        }).then(() => 200);
      await started(gate);
      expect(await postJson(`${s.url}/v2/systemsharedmemory/unregister`, '')).toMatchObject({ status: 200 });
      // The idle region went at once; the two the request uses wait for it (Triton's test sees them all).
      expect(await names()).toEqual(['in', 'out']);
      expect(await postJson(`${s.url}/v2/systemsharedmemory/region/in/register`, { key: KEY, byte_size: 128 })).toMatchObject({ status: 400 });
      writeFileSync(gate, '');
      expect(await answer).toBe(200);
      expect(readI32(KEY, 64, 16)).toEqual(a);
      expect(await names()).toEqual([]);
    });
  }
});

describe('shared memory refusals', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1' });
  });
  afterAll(async () => s?.stop());

  it('refuses registration unless --allow-client-shm, and has no CUDA shared memory', async () => {
    const disabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
    const r = await postJson(`${s.url}/v2/systemsharedmemory/region/r/register`, { key: '/whatever', offset: 0, byte_size: 8 });
    expect(r).toMatchObject({ status: 501, body: { error: disabled } });
    // Unregistering is refused too, as in Triton; only the status can be read.
    expect(await postJson(`${s.url}/v2/systemsharedmemory/region/r/unregister`, '')).toMatchObject({ status: 501, body: { error: disabled } });
    expect(await postJson(`${s.url}/v2/systemsharedmemory/unregister`, '')).toMatchObject({ status: 501, body: { error: disabled } });
    const g = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      await expect(g.call('SystemSharedMemoryRegister', { name: 'r', key: '/whatever', offset: 0, byte_size: 8 }))
        .rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: disabled });
      await expect(g.call('SystemSharedMemoryUnregister', { name: 'r' })).rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: disabled });
      expect((await g.call('SystemSharedMemoryStatus', { name: '' })).regions).toEqual({});
    } finally {
      g.close();
    }
    expect((await getJson(`${s.url}/v2/systemsharedmemory/status`)).body).toEqual([]);
    const infer = await postJson(`${s.url}/v2/models/simple/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: 'r', shared_memory_byte_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    expect(infer).toMatchObject({ status: 400, body: { error: "Unable to find shared memory region: 'r' (input 'INPUT0')" } });
    // CUDA shared memory: refused as client shared memory first, as in Triton.
    const cuda = await postJson(`${s.url}/v2/cudasharedmemory/region/g/register`, { raw_handle: { b64: 'AAAA' }, device_id: 0, byte_size: 8 });
    expect(cuda).toMatchObject({ status: 501, body: { error: disabled } });
    expect((await getJson(`${s.url}/v2/cudasharedmemory/status`)).body).toEqual([]);
    expect((await getJson(`${s.url}/v2/cudasharedmemory/region/g/status`)).status).toBe(404);
    expect(await postJson(`${s.url}/v2/cudasharedmemory/unregister`, '')).toMatchObject({ status: 501, body: { error: disabled } });
  });
});
