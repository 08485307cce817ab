/**
 * A large binary request against the real CLI (bin/tsi-node.js, built) in its own process, as Triton's
 * L0_large_payload sends one: --http-max-input-size (64 MiB by default) bounds the JSON header, not the
 * binary tensor data after it (Triton's EVBufferToJson gets the header length), so a 256 MiB tensor
 * passes; and the server's peak resident memory grows by the body once (read into one buffer of its
 * Content-Length and moved whole to the onnxruntime worker) and the model's output twice (onnxruntime's
 * own buffer, and the copy onnxruntime-node makes of it for JavaScript): ~3x, measured 3.06x. tsi used
 * to hold the body as socket pieces, join them, then copy the tensor out for the worker (5x: a 1.9 GiB
 * request took it to 9.6 GiB).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GraphBuilder } from '../../graph/onnx-builder.js';
import { ROOT, tempRepo } from '../helpers/server.js';

const BIN = join(ROOT, 'bin', 'tsi-node.js');
const MIB = 1 << 20;
const SIZE = 256 * MIB;
const built = existsSync(join(ROOT, 'dist', 'runtime-node', 'cli.js'));

function identityModel(): Uint8Array {
  const g = new GraphBuilder('identity');
  const x = g.input('INPUT0', 'FLOAT', ['n']);
  g.output(g.op('Identity', [x], undefined, 'OUTPUT0'), 'FLOAT', ['n']);
  return g.encode();
}

const repo = tempRepo({
  'identity_fp32/1/model.onnx': identityModel(),
  'identity_fp32/config.pbtxt': `backend: "onnxruntime"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }]
instance_group [{ count: 1 kind: KIND_CPU }]`,
  // Each input of one body to its own step: neither step may move the body, which the other still reads.
  'split/1/.keep': '',
  'split/config.pbtxt': `platform: "ensemble"
max_batch_size: 0
input [{ name: "A" data_type: TYPE_FP32 dims: [-1] }, { name: "B" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "OA" data_type: TYPE_FP32 dims: [-1] }, { name: "OB" data_type: TYPE_FP32 dims: [-1] }]
ensemble_scheduling { step [
  { model_name: "identity_fp32" model_version: -1 input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "OA" } },
  { model_name: "identity_fp32" model_version: -1 input_map { key: "INPUT0" value: "B" } output_map { key: "OUTPUT0" value: "OB" } }
] }`,
});

let child: ChildProcess;
let url = '';

beforeAll(async () => {
  if (!built) return;
  child = spawn(process.execPath, [BIN, 'serve', '--model-repository', repo.path, '--http-address', '127.0.0.1', '--http-port', '0',
    '--allow-grpc', 'false', '--allow-metrics', 'false'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const port = await new Promise<number>((resolve, reject) => {
    child.stderr!.on('data', (d) => {
      err += d;
      const m = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (c) => reject(new Error(`tsi-node exited with ${c}: ${err}`)));
  });
  url = `http://127.0.0.1:${port}/v2/models/identity_fp32/infer`;
}, 120_000);

afterAll(() => {
  child?.kill('SIGKILL');
  repo.cleanup();
});

/** Peak resident memory (VmHWM) or current (VmRSS) of the server, in bytes. */
const status = (field: 'VmHWM' | 'VmRSS'): number =>
  Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) * 1024;

function binaryRequest(data: Float32Array): { body: Uint8Array<ArrayBuffer>; headers: Record<string, string> } {
  const header = Buffer.from(JSON.stringify({
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length], parameters: { binary_data_size: data.byteLength } }],
    outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
  }));
  const body = new Uint8Array(header.byteLength + data.byteLength);
  body.set(header);
  body.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), header.byteLength);
  return { body, headers: { 'Inference-Header-Content-Length': String(header.byteLength), 'Content-Type': 'application/octet-stream' } };
}

describe('a large binary request (Triton L0_large_payload)', () => {
  it.skipIf(!built && !process.env.CI)('passes a 256 MiB tensor over the 64 MiB JSON limit and costs about 3x its size in memory, not 5x', async () => {
    expect(built, 'dist/ is built (npm run build)').toBe(true);
    // A small request first, so the model's worker and its session are warm before the baseline.
    const small = binaryRequest(new Float32Array([1, 2, 3]));
    expect((await fetch(url, { method: 'POST', body: small.body, headers: small.headers })).status).toBe(200);
    const data = new Float32Array(SIZE / 4);
    for (let i = 0; i < data.length; i += 4099) data[i] = i % 65536;
    const { body, headers } = binaryRequest(data);
    const base = status('VmRSS');
    const r = await fetch(url, { method: 'POST', body, headers });
    const answer = new Uint8Array(await r.arrayBuffer());
    expect(r.status, new TextDecoder().decode(answer.subarray(0, 300))).toBe(200);
    const headerLength = Number(r.headers.get('inference-header-content-length'));
    const out = new Float32Array(answer.buffer.slice(answer.byteOffset + headerLength, answer.byteOffset + answer.byteLength));
    expect(out.length).toBe(data.length);
    for (let i = 0; i < data.length; i += 4099) expect(out[i]).toBe(i % 65536);
    const growth = status('VmHWM') - base;
    console.log(`peak RSS growth for a ${SIZE / MIB} MiB binary request: ${(growth / MIB).toFixed(0)} MiB (${(growth / SIZE).toFixed(2)}x)`);
    expect(growth).toBeLessThan(3.5 * SIZE);
  }, 180_000);

  it.skipIf(!built && !process.env.CI)('copies rather than moves a body whose inputs go to different steps of an ensemble', async () => {
    const n = 1 << 18;
    const a = new Float32Array(n).fill(1);
    const b = new Float32Array(n).fill(2);
    const header = Buffer.from(JSON.stringify({
      inputs: [
        { name: 'A', datatype: 'FP32', shape: [n], parameters: { binary_data_size: a.byteLength } },
        { name: 'B', datatype: 'FP32', shape: [n], parameters: { binary_data_size: b.byteLength } },
      ],
    }));
    const body = Buffer.concat([header, Buffer.from(a.buffer), Buffer.from(b.buffer)]);
    const r = await fetch(url.replace('identity_fp32', 'split'), {
      method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(header.byteLength) },
    });
    const json = await r.json();
    expect(r.status, JSON.stringify(json).slice(0, 300)).toBe(200);
    const out = Object.fromEntries(json.outputs.map((o: { name: string; data: number[] }) => [o.name, o.data]));
    expect(out.OA.length).toBe(n);
    expect(out.OB.length).toBe(n);
    expect(out.OA.every((v: number) => v === 1)).toBe(true);
    expect(out.OB.every((v: number) => v === 2)).toBe(true);
  }, 60_000);

  it.skipIf(!built && !process.env.CI)('still bounds the JSON header by --http-max-input-size, with Triton\'s text', async () => {
    // Refused by its Content-Length before it is read (a header longer than the body would be the
    // decoder's range error instead, as in Triton).
    const r = await fetch(url, {
      method: 'POST', body: new Uint8Array(65 * MIB + 16),
      headers: { 'Inference-Header-Content-Length': String(65 * MIB), 'Content-Type': 'application/octet-stream' },
    });
    expect(r.status).toBe(400);
    expect((await r.json()).error).toBe(
      `request JSON size of ${65 * MIB} bytes exceeds the maximum allowed input size of ${64 * MIB} bytes. Use --http-max-input-size to increase the limit.`,
    );
  });
});
