/**
 * System shared memory mapped into the server (runtime-node/shm.ts over shm-map.ts), against a
 * client in a process of its own that maps the same /dev/shm object as Triton's clients do: a
 * region is mapped once at registration (seen in /proc/self/maps), inputs are views of the client's
 * pages and outputs land in them, a region at an offset that is not page-aligned, the ranges refused
 * (outside the object, an object shrunk under its mapping), a request in flight that keeps reading a
 * region unregistered and unlinked under it (an unmapped view would crash the test process), the
 * mapping released once nothing reaches it, the pread/pwrite fallback forced by option and by
 * TSI_SHM_IO, and an onnxruntime model fed from a mapped region by address (its worker views the
 * client's pages) or, on the fallback, by a copy. Linux only, as the provider.
 */

import { execFileSync } from 'node:child_process';
import { existsSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLogger, TsiError } from '../../core/index.js';
import { nodeShmProvider, type ShmIo } from '../../runtime-node/shm.js';
import { mapShared, mmapBinding } from '../../runtime-node/shm-map.js';
import { identityModel } from '../../scripts/gen-models.js';
import { describeWith } from '../helpers/capability.js';
import { MODELS, postJson, startTestServer, tempRepo } from '../helpers/server.js';

const withShm = describeWith(!!process.env.CI, '/dev/shm', process.platform === 'linux' && existsSync('/dev/shm') ? undefined : `no /dev/shm on ${process.platform}`);

const tag = `tsi-mmap-${process.pid}`;
const made: string[] = [];
/** A fresh /dev/shm object of `size` bytes (0, 1, 2, ... mod 251), as a client's shm_open + ftruncate + memcpy. */
function object(name: string, size: number): { key: string; path: string } {
  const key = `/${tag}-${name}`;
  const path = `/dev/shm${key}`;
  writeFileSync(path, Uint8Array.from({ length: size }, (_, i) => i % 251));
  made.push(path);
  return { key, path };
}

// The client: another process mapping the whole object shared, as tritonclient's shared_memory does.
const KOFFI = createRequire(import.meta.url).resolve('koffi');
const CLIENT = `
const koffi = require(${JSON.stringify(KOFFI)}); const fs = require('node:fs');
const [op, path, off, arg] = process.argv.slice(1);
const self = koffi.load(null);
const mmap = self.func('void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset)');
const munmap = self.func('int munmap(void *addr, size_t length)');
const fd = fs.openSync(path, 'r+'); const size = fs.fstatSync(fd).size;
const p = mmap(null, size, 3, 1, fd, 0); const u = new Uint8Array(koffi.view(p, size));
if (op === 'write') u.set(Buffer.from(arg, 'hex'), Number(off));
else process.stdout.write(Buffer.from(u.subarray(Number(off), Number(off) + Number(arg))).toString('hex'));
munmap(p, size);`;
const clientWrite = (path: string, offset: number, bytes: number[]) =>
  execFileSync(process.execPath, ['-e', CLIENT, 'write', path, String(offset), Buffer.from(bytes).toString('hex')]);
const clientRead = (path: string, offset: number, n: number) =>
  [...Buffer.from(execFileSync(process.execPath, ['-e', CLIENT, 'read', path, String(offset), String(n)]).toString(), 'hex')];

const mapped = (path: string) => readFileSync('/proc/self/maps', 'utf8').includes(path);

// A real collection, so a released mapping's finaliser can run (vitest does not start node with --expose-gc).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function provider(io?: ShmIo) {
  const logs: string[] = [];
  const p = nodeShmProvider({ io, log: createLogger((_l, line) => logs.push(line), 1) })!;
  return { p, logs };
}

withShm('system shared memory mapped into the server', () => {
  afterEach(() => {
    delete process.env.TSI_SHM_IO;
  });
  afterAll(() => {
    for (const p of made) rmSync(p, { force: true });
  });

  it('maps a region once at registration; inputs are views of the client\'s pages and outputs land in them', async () => {
    const { key, path } = object('views', 3 * 4096 + 200);
    const { p, logs } = provider();
    expect(p.io).toBeUndefined();
    const base = 4096 + 100; // not page-aligned: the mapping starts at the page below
    const h = await p.open(key, base, 1000, 'r');
    expect(p.io).toBe('mmap');
    expect(mapped(path)).toBe(true);
    expect(logs.filter((l) => l.includes('system shared memory'))).toEqual([expect.stringContaining('mapped into the server (mmap through koffi)')]);

    clientWrite(path, base + 8, [1, 2, 3, 4]);
    const view = await h.read(8, 4);
    expect([...view]).toEqual([1, 2, 3, 4]);
    // The same view, not read again, sees the client's next write: no copy was made.
    clientWrite(path, base + 8, [9, 8, 7, 6]);
    expect([...view]).toEqual([9, 8, 7, 6]);
    expect([...(await h.read(999, 1))]).toEqual([(base + 999) % 251]);

    await h.write(16, Uint8Array.of(5, 6, 7));
    expect(clientRead(path, base + 15, 5)).toEqual([(base + 15) % 251, 5, 6, 7, (base + 19) % 251]);

    // The choice is made and logged once.
    const h2 = await p.open(key, 0, 4096, 'r');
    expect(logs.filter((l) => l.includes('system shared memory'))).toHaveLength(1);
    await h.close();
    await h2.close();
    await expect(h.read(0, 4)).rejects.toThrow(`shared memory region '${key}' was unregistered`);
    await expect(h.write(0, Uint8Array.of(1))).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });

  it('keeps a mapping a request still views after unregistration, and unmaps it once nothing reaches it', async () => {
    const { key, path } = object('held', 8192);
    const { p } = provider('mmap');
    const h = await p.open(key, 0, 8192, 'r');
    let view: Uint8Array | undefined = await h.read(4096, 4096);
    await h.close();
    rmSync(path); // the client unlinks the object too
    expect(mapped(path)).toBe(true);
    // Reading unmapped pages would kill this process here.
    expect(view[0]).toBe(4096 % 251);
    expect(view.reduce((s, x) => s + x, 0)).toBeGreaterThan(0);
    view = undefined;
    for (let i = 0; i < 50 && mapped(path); i++) {
      gc();
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(mapped(path)).toBe(false);
  });

  it('refuses ranges outside the object and an object shrunk under its mapping', async () => {
    const { key, path } = object('bounds', 4096);
    const { p } = provider('mmap');
    await expect(p.open(key, 4000, 200, 'r')).rejects.toThrow(
      `failed to register shared memory region 'r': invalid args (the object '${key}' is 4096 bytes, too small for offset 4000 + byte_size 200)`);
    await expect(p.open('/../etc/passwd', 0, 4, 'r')).rejects.toMatchObject({ code: 'INVALID_ARG' });
    await expect(p.open(`/${tag}-missing`, 0, 4, 'r')).rejects.toThrow(`Unable to open shared memory region: '/${tag}-missing': ENOENT`);
    const empty = await p.open(key, 4096, 0, 'r');
    expect((await empty.read(0, 0)).byteLength).toBe(0);
    await empty.close();

    const h = await p.open(key, 100, 3000, 'r');
    truncateSync(path, 1000);
    const err = await h.read(2000, 8).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TsiError);
    expect(err).toMatchObject({ code: 'INVALID_ARG', message: `shared memory region '${key}' shrank to 1000 bytes, too small for offset 2100 + 8 bytes` });
    await expect(h.write(2000, Uint8Array.of(1))).rejects.toThrow('shrank to 1000 bytes');
    expect([...(await h.read(0, 2))]).toEqual([100, 101]); // what is still there stays readable
    await h.close();
    // mmap's own refusal (a descriptor opened read-only, mapped for writing) names the errno.
    const lib = mmapBinding();
    if (typeof lib === 'string') throw new Error(lib);
    expect(() => mapShared(lib, openSync(path, 'r'), 0, 100)).toThrow('mmap failed: EACCES');
  });

  it('falls back to pread/pwrite when told to, by option or TSI_SHM_IO', async () => {
    const { key, path } = object('pread', 4096);
    for (const how of ['option', 'env'] as const) {
      if (how === 'env') process.env.TSI_SHM_IO = 'pread';
      const { p, logs } = provider(how === 'option' ? 'pread' : undefined);
      const h = await p.open(key, 64, 1024, 'r');
      expect(p.io).toBe('pread');
      expect(logs).toEqual([expect.stringContaining('read and written with pread/pwrite (TSI_SHM_IO=pread)')]);
      expect(mapped(path)).toBe(false);
      const copy = await h.read(0, 4);
      clientWrite(path, 64, [0, 0, 0, 0]);
      expect([...copy]).toEqual([64, 65, 66, 67]); // a copy, not a view
      await h.write(4, Uint8Array.of(42));
      expect(clientRead(path, 68, 1)).toEqual([42]);
      await h.close();
      clientWrite(path, 64, [64, 65, 66, 67]);
    }
    process.env.TSI_SHM_IO = 'mapped';
    await expect(provider().p.open(key, 0, 4, 'r')).rejects.toThrow("TSI_SHM_IO must be 'mmap' or 'pread', not 'mapped'");
  });

  it('serves a request in flight from a region unregistered and unlinked under it', async () => {
    const N = 4096; // INT32s: 16 KiB, four pages
    const { key, path } = object('inflight', 4 * N);
    const values = Array.from({ length: N }, (_, i) => i * 7 - 1000);
    writeFileSync(path, new Uint8Array(Int32Array.from(values).buffer));
    // The identity backend with a delay: one instance, so the second request waits holding its input.
    const config = readFileSync(join(MODELS, 'custom_identity_int32', 'config.pbtxt'), 'utf8')
      .replace('name: "custom_identity_int32"', 'name: "slow_identity"')
      + '\nparameters { key: "execute_delay_ms" value { string_value: "400" } }\n';
    const repo = tempRepo({
      'slow_identity/config.pbtxt': config,
      'slow_identity/1/model.js': readFileSync(join(MODELS, 'custom_identity_int32', '1', 'model.js')),
    });
    const s = await startTestServer({ modelRepositories: [repo.path], allowClientShm: true, metricsPort: 0, metricsAddress: '127.0.0.1' });
    try {
      expect((await postJson(`${s.url}/v2/systemsharedmemory/region/in/register`, { key, offset: 0, byte_size: 4 * N })).status).toBe(200);
      expect(s.logs.some((l) => l.includes('mapped into the server (mmap through koffi)'))).toBe(true);
      expect(mapped(path)).toBe(true);
      const url = `${s.url}/v2/models/slow_identity/infer`;
      const first = postJson(url, { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 1], data: [5] }] });
      const second = postJson(url, {
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, N], parameters: { shared_memory_region: 'in', shared_memory_byte_size: 4 * N } }],
      });
      // Pending means accepted and queued, so its input view has been taken.
      const pending = async () => {
        const text = await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text();
        return Number(/nv_inference_pending_request_count\{model="slow_identity",version="1"\} (\d+)/.exec(text)?.[1] ?? -1);
      };
      await expect.poll(pending, { interval: 10, timeout: 5000 }).toBe(1);
      expect((await postJson(`${s.url}/v2/systemsharedmemory/region/in/unregister`, {})).status).toBe(200);
      rmSync(path);
      expect((await first).status).toBe(200);
      const r = await second;
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.outputs[0].data).toEqual(values);
      // A request naming the region now fails cleanly.
      const late = await postJson(url, {
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, N], parameters: { shared_memory_region: 'in', shared_memory_byte_size: 4 * N } }],
      });
      expect(late).toMatchObject({ status: 400, body: { error: "Unable to find shared memory region: 'in' (input 'INPUT0')" } });
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });

  it('feeds an onnxruntime model from a mapped region by address, and by a copy on the pread fallback', async () => {
    const N = 1 << 18; // FP32s: 1 MiB, past the worker channel's slots, so the input crosses by postMessage
    const base = 4096 + 64; // the tensor starts inside the mapping's second page
    const values = Float32Array.from({ length: N }, (_, i) => i * 0.25 - 3000);
    const bytes = new Uint8Array(values.buffer);
    const config = 'name: "big_identity"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
      + 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\noutput [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n';
    const repo = tempRepo({ 'big_identity/config.pbtxt': config, 'big_identity/1/model.onnx': identityModel('FP32', { batch: false }) });
    const byAddress = 'shared-memory inputs cross to its worker by address';
    try {
      for (const io of ['mmap', 'pread'] as const) {
        if (io === 'pread') process.env.TSI_SHM_IO = 'pread';
        const input = object(`ort-in-${io}`, base + 4 * N);
        const whole = new Uint8Array(base + 4 * N);
        whole.set(bytes, base);
        writeFileSync(input.path, whole);
        const output = object(`ort-out-${io}`, 4 * N);
        const s = await startTestServer({ modelRepositories: [repo.path], allowClientShm: true });
        try {
          for (const [name, o, size] of [['in', input, base + 4 * N], ['out', output, 4 * N]] as const) {
            const r = await postJson(`${s.url}/v2/systemsharedmemory/region/${name}/register`, { key: o.key, offset: 0, byte_size: size });
            expect(r.status, JSON.stringify(r.body)).toBe(200);
          }
          const r = await postJson(`${s.url}/v2/models/big_identity/infer`, {
            inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [N], parameters: { shared_memory_region: 'in', shared_memory_offset: base, shared_memory_byte_size: 4 * N } }],
            outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: 'out', shared_memory_byte_size: 4 * N } }],
          });
          expect(r.status, JSON.stringify(r.body)).toBe(200);
          expect(Buffer.compare(readFileSync(output.path), Buffer.from(bytes))).toBe(0);
          expect(s.logs.some((l) => l.includes(io === 'mmap' ? 'mapped into the server (mmap through koffi)' : 'with pread/pwrite'))).toBe(true);
          // Only the mapped path hands the worker an address; a copy would have been sent without this line.
          expect(s.logs.some((l) => l.includes(byAddress)), s.logs.join('\n')).toBe(io === 'mmap');
        } finally {
          await s.stop();
        }
      }
    } finally {
      repo.cleanup();
    }
  });
});
