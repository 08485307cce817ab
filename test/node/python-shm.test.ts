/**
 * The Node half of the python backend's shared memory (runtime-node/python/shm.ts) on real files:
 * the input region's first-fit blocks (reuse, merging of neighbours, growth of the file), tensors
 * written in Triton's layout (BYTES with length prefixes), and tensors read back from the ring and
 * from the input region by their channel descriptions. The Python half's ring is checked in
 * fixtures/python/pb_utils_checks.py (python-utils.test.ts); its free and used bytes, as Triton's
 * `c_python_backend_utils.shared_memory` gives them to models, through a real server here.
 */

import { closeSync, fstatSync, openSync, readSync, writeSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InputRegion, OutputRing, createShmFile, type OutDesc } from '../../runtime-node/python/shm.js';
import { pythonRepo, startPythonServer } from '../helpers/python-server.js';
import { postJson } from '../helpers/server.js';

describe('InputRegion', () => {
  it('hands out 64-byte aligned blocks first-fit, merges freed neighbours and grows the file', () => {
    const fd = createShmFile(1024, 'test');
    try {
      const r = new InputRegion(fd, 1024, 512);
      const a = r.alloc(100);
      const b = r.alloc(64);
      const c = r.alloc(1);
      expect([a, b, c]).toEqual([0, 128, 192]);
      r.freeBlock(b);
      expect(r.alloc(40)).toBe(128); // the hole is reused
      r.freeBlock(128);
      r.freeBlock(a);
      expect(r.alloc(190)).toBe(0); // a and b's space merged into one block
      const big = r.alloc(2000); // more than is left: the file grows
      expect(big).toBeGreaterThanOrEqual(256);
      expect(fstatSync(fd).size).toBe(r.size);
      expect(r.size).toBeGreaterThanOrEqual(big + 2000);
      r.freeBlock(big);
      r.freeBlock(big); // a second free of the same block is ignored
      expect(r.usedBytes).toBe(256);
    } finally {
      closeSync(fd);
    }
  });

  it('writes tensors in Triton\'s layout, each at an aligned offset', () => {
    const fd = createShmFile(4096, 'test');
    try {
      const r = new InputRegion(fd, 4096, 4096);
      const { block, descs } = r.writeTensors([
        { name: 'A', datatype: 'INT32', shape: [2], data: Int32Array.of(7, -1) },
        { name: 'S', datatype: 'BYTES', shape: [2], data: [Uint8Array.of(0, 255), new Uint8Array(0)] },
      ]);
      expect(descs).toEqual([['A', 'INT32', [2], block[0], 8], ['S', 'BYTES', [2], block[0] + 64, 10]]);
      const raw = new Uint8Array(128);
      readSync(fd, raw, 0, 128, block[0]);
      expect(Array.from(new Int32Array(raw.buffer, 0, 2))).toEqual([7, -1]);
      expect(Array.from(raw.subarray(64, 74))).toEqual([2, 0, 0, 0, 0, 255, 0, 0, 0, 0]);
    } finally {
      closeSync(fd);
    }
  });
});

describe('OutputRing', () => {
  it('reads tensors by their descriptions from the ring and from the input region, and stores what it consumed', () => {
    const inFd = createShmFile(4096, 'test');
    const ringFd = createShmFile(4096, 'test');
    try {
      const input = new InputRegion(inFd, 4096, 4096);
      const ring = new OutputRing(ringFd, input);
      writeSync(ringFd, Buffer.from(Float32Array.of(1.5, -2).buffer), 0, 8, 128);
      writeSync(ringFd, Buffer.from([3, 0, 0, 0, 97, 0, 98]), 0, 7, 192);
      writeSync(inFd, Buffer.from(Uint16Array.of(0x3f80).buffer), 0, 2, 512);
      const descs: OutDesc[] = [['F', 'FP32', [2], 128, 8, 0], ['S', 'BYTES', [1], 192, 7, 0], ['H', 'BF16', [1], 512, 2, 1], ['E', 'INT8', [0], 64, 0, 0]];
      const [f, s, h, e] = ring.readTensors(descs);
      expect(Array.from(f!.data as Float32Array)).toEqual([1.5, -2]);
      expect((s!.data as Uint8Array[]).map((x) => Array.from(x))).toEqual([[97, 0, 98]]);
      expect(Array.from(h!.data as Uint16Array)).toEqual([0x3f80]);
      expect(e).toMatchObject({ name: 'E', datatype: 'INT8', shape: [0] });
      ring.consume(5);
      ring.consume(3);
      ring.flush();
      const head = Buffer.alloc(8);
      readSync(ringFd, head, 0, 8, 0);
      expect(head.readBigUInt64LE(0)).toBe(5n);
    } finally {
      closeSync(inFd);
      closeSync(ringFd);
    }
  });
});

describe("the stub's pool as Triton's c_python_backend_utils.shared_memory shows it", () => {
  it('free + used is the pool; what a response took is free again once tsi has read it (no leak)', async () => {
    const repo = pythonRepo(['shm_pool_py']);
    const s = await startPythonServer({ modelRepositories: [repo.path] });
    try {
      const pool = async (n: number) => {
        const r = await postJson(`${s.url}/v2/models/shm_pool_py/infer`, { inputs: [{ name: 'N', datatype: 'INT64', shape: [1], data: [n] }] });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        return r.body.outputs.find((o: any) => o.name === 'POOL').data as [number, number];
      };
      const [free, used] = await pool(1);
      expect(used).toBeGreaterThanOrEqual(64); // the ring's header at least
      expect(free).toBeGreaterThan(0);
      // A large response fills the ring; tsi reads it, and the next execute finds the space free again.
      await pool(100_000);
      const [free2, used2] = await pool(1);
      expect(free2 + used2).toBeGreaterThanOrEqual(free + used);
      expect(used2).toBe(used);
      expect((await pool(1))[0]).toBe(free2);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  }, 60_000);
});

describe('a pool that cannot grow', () => {
  it("says so in Triton's words (L0_backend_python test_growth_error), and the region stays usable", () => {
    // /dev/full answers every write with ENOSPC, as a full /dev/shm does when pages are touched.
    const fd = openSync('/dev/full', 'r+');
    try {
      const r = new InputRegion(fd, 4096, 4096);
      const t = { name: 'A', datatype: 'UINT8' as const, shape: [100], data: new Uint8Array(100) };
      expect(() => r.writeTensors([t])).toThrow(/^Failed to increase the shared memory pool size to 4096 bytes\. If you are running tsi inside docker, use '--shm-size' flag/);
      expect(r.usedBytes).toBe(0); // the block was given back
    } finally {
      closeSync(fd);
    }
  });
});
