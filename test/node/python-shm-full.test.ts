/**
 * The python backend when /dev/shm fills up, as in Triton's container (L0_backend_python's
 * test_growth_error runs with a 1 GiB /dev/shm): a request too big for it fails with Triton's "Failed
 * to increase the shared memory pool size" text, and the pages that failed write did fill are given
 * back, so the next request of a normal size still passes. The real CLI serves in a mount namespace
 * of its own whose /dev/shm is a 16 MiB tmpfs (unshare, as an unprivileged user may).
 */

import { afterAll, beforeAll, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { describeWith } from '../helpers/capability.js';
import { ROOT } from '../helpers/server.js';
import { pythonRepo } from '../helpers/python-server.js';
import { started } from '../helpers/serve-child.js';

const BIN = join(ROOT, 'bin', 'tsi-node.js');
const UNSHARE = ['--user', '--map-root-user', '--mount', 'sh', '-c', 'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$0" "$@"'];

function namespaceMissing(): string | undefined {
  const r = spawnSync('unshare', [...UNSHARE, 'true'], { encoding: 'utf8' });
  if (r.error) return r.error.message;
  return r.status === 0 ? undefined : `unshare with a tmpfs /dev/shm failed: ${r.stderr.trim()}`;
}

const pythonMissing = (): string | undefined =>
  spawnSync('python3', ['-c', 'import numpy'], { encoding: 'utf8' }).status === 0 ? undefined : 'python3 with numpy';

const missing = namespaceMissing() ?? pythonMissing();

/** One binary-tensor infer request of `n` FP32 values to big_py; ECHO (a view of the input) comes back first. */
async function inferEcho(port: number, n: number): Promise<{ status: number; text: string; echo?: Float32Array }> {
  const header = Buffer.from(JSON.stringify({
    inputs: [{ name: 'DATA', datatype: 'FP32', shape: [n], parameters: { binary_data_size: n * 4 } }],
    outputs: [{ name: 'ECHO', parameters: { binary_data: true } }, { name: 'DOUBLED', parameters: { binary_data: true } }],
  }));
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = i % 1000;
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/big_py/infer`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.length) },
    body: Buffer.concat([header, Buffer.from(data.buffer)]),
  });
  const body = Buffer.from(await r.arrayBuffer());
  const json = Number(r.headers.get('inference-header-content-length') ?? body.length);
  const text = body.subarray(0, json).toString();
  if (r.status !== 200) return { status: r.status, text };
  const raw = body.subarray(json, json + n * 4);
  return { status: r.status, text, echo: new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength)) };
}

describeWith(!!process.env.CI, 'a mount namespace with its own /dev/shm, and python3 with numpy', missing)('python backend on a full /dev/shm', () => {
  let child: ChildProcess;
  let port = 0;
  let repo: ReturnType<typeof pythonRepo>;

  beforeAll(async () => {
    repo = pythonRepo(['big_py']);
    ({ child, port } = await started(spawn('unshare', [...UNSHARE, process.execPath, BIN, 'serve', '--model-repository', repo.path,
      '--http-address', '127.0.0.1', '--http-port', '0', '--allow-grpc', 'false', '--allow-metrics', 'false'],
    { stdio: ['ignore', 'ignore', 'pipe'] }), 120_000));
  }, 120_000);

  afterAll(() => {
    child?.kill('SIGKILL');
    repo?.cleanup();
  });

  it("a request bigger than /dev/shm fails with Triton's text, and the next normal one passes", async () => {
    const big = await inferEcho(port, 6 * 1024 * 1024); // 24 MiB of inputs on a 16 MiB /dev/shm
    expect(big.status).toBe(503);
    expect(big.text).toContain('Failed to increase the shared memory pool size');
    // 4 MiB in (into pages the failed write may have filled) and 4 MiB of DOUBLED out through the
    // ring, which needs pages a /dev/shm still holding what the failed write filled does not have.
    const n = 1024 * 1024;
    for (let round = 0; round < 2; round++) {
      const ok = await inferEcho(port, n);
      expect(ok.status, ok.text).toBe(200);
      expect(ok.echo!.length).toBe(n);
      expect(ok.echo![n - 1]).toBe((n - 1) % 1000);
    }
  }, 60_000);
});
