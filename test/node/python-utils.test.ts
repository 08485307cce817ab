/**
 * tsi's `triton_python_backend_utils` with every interpreter at hand (python3 from PATH and Debian's
 * /usr/bin/python3, which between them cover numpy 1.x and 2.x): the module's own checks
 * (fixtures/python/pb_utils_checks.py), then every Triton datatype — BYTES and BF16 included —
 * through shared memory and back via a real server whose python backend runs that interpreter.
 */

import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import type { DataType, TensorData } from '../../core/index.js';
import { STUB_PATH } from '../../runtime-node/python/index.js';
import { describeWith } from '../helpers/capability.js';
import { PY_FIXTURES, pythonRepo, startPythonServer } from '../helpers/python-server.js';

/** The interpreter's own path when it has numpy, else undefined. */
const withNumpy = (python: string) => {
  const r = spawnSync(python, ['-c', 'import sys, numpy; print(sys.executable)'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
};
// python3 from PATH and Debian's, once each (they are the same one on a plain Debian machine).
const interpreters = [...new Map(['python3', '/usr/bin/python3']
  .filter((p, i) => i === 0 || existsSync(p))
  .map((p) => [withNumpy(p), p] as const)
  .filter(([real]) => real !== undefined)).values()];

const withPython = describeWith(!!process.env.CI, 'python3 with numpy',
  interpreters.length > 0 ? undefined : 'neither python3 on PATH nor /usr/bin/python3 imports numpy (apt-get install python3 python3-numpy)');

withPython('triton_python_backend_utils', () => {
  describe.each(interpreters)('with %s', (python) => {
    it('passes the module\'s own checks', () => {
      const out = execFileSync(python, [join(PY_FIXTURES, 'pb_utils_checks.py'), join(STUB_PATH, '..')], { encoding: 'utf8' });
      expect(out).toMatch(/^all \d+ checks passed/);
    });

    it('carries every datatype through shared memory and back', async () => {
      const repo = pythonRepo(['dtypes_py']);
      const s = await startPythonServer({ modelRepositories: [repo.path], python: { executable: python } });
      try {
        const inputs: { name: string; datatype: DataType; shape: number[]; data: TensorData }[] = [
          { name: 'IN_BOOL', datatype: 'BOOL', shape: [3], data: Uint8Array.of(1, 0, 1) },
          { name: 'IN_UINT8', datatype: 'UINT8', shape: [2], data: Uint8Array.of(0, 255) },
          { name: 'IN_UINT16', datatype: 'UINT16', shape: [2], data: Uint16Array.of(1, 65535) },
          { name: 'IN_UINT32', datatype: 'UINT32', shape: [2], data: Uint32Array.of(7, 4294967295) },
          { name: 'IN_UINT64', datatype: 'UINT64', shape: [1], data: BigUint64Array.of(18446744073709551615n) },
          { name: 'IN_INT8', datatype: 'INT8', shape: [2], data: Int8Array.of(-128, 127) },
          { name: 'IN_INT16', datatype: 'INT16', shape: [1], data: Int16Array.of(-32768) },
          { name: 'IN_INT32', datatype: 'INT32', shape: [2], data: Int32Array.of(-5, 2147483647) },
          { name: 'IN_INT64', datatype: 'INT64', shape: [1], data: BigInt64Array.of(-9223372036854775808n) },
          { name: 'IN_FP16', datatype: 'FP16', shape: [2], data: Uint16Array.of(0x3c00, 0xc000) },
          { name: 'IN_FP32', datatype: 'FP32', shape: [2], data: Float32Array.of(1.5, -0) },
          { name: 'IN_FP64', datatype: 'FP64', shape: [1], data: Float64Array.of(Math.PI) },
          { name: 'IN_STRING', datatype: 'BYTES', shape: [2], data: [Uint8Array.of(0, 1, 255), new Uint8Array(0)] },
          { name: 'IN_BF16', datatype: 'BF16', shape: [2], data: Uint16Array.of(0x3f80, 0xc040) },
        ];
        const r = await new HttpClient(s.url).infer('dtypes_py', inputs);
        for (const i of inputs) {
          const out = r.output(`OUT_${i.name.slice(3)}`)!;
          expect(out.datatype, i.name).toBe(i.datatype);
          expect(out.shape, i.name).toEqual(i.shape);
          const norm = (d: TensorData) => (Array.isArray(d) ? d.map((e) => Array.from(e)) : Array.from(d as ArrayLike<number | bigint>));
          expect(norm(out.data), i.name).toEqual(norm(i.data));
        }
        const dtypes = r.strings('DTYPES');
        expect(dtypes).toContain('BOOL:bool');
        expect(dtypes).toContain('FP16:float16');
        expect(dtypes).toContain('STRING:object');
        expect(dtypes.find((d) => d.startsWith('BF16:'))).toMatch(/^BF16:(Tensor dtype is BF16 and cannot be converted to NumPy|as_numpy worked)/);
      } finally {
        await s.stop();
        repo.cleanup();
      }
    });
  });
});
