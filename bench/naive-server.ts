/**
 * Baseline (a) of the batching bench: the "model.predict() behind a web endpoint" server that Triton's
 * users move away from. hono on @hono/node-server, one `session.run` per request on the main thread,
 * no queue, no batching. It speaks the same v2 binary-extension request and response as tsi so both
 * servers receive and return identical bytes. Run as a child process by bench/batching.ts:
 *   node --import tsx bench/naive-server.ts <model.onnx> <intra_op_threads>  → prints "PORT <n>"
 */

import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import * as ort from 'onnxruntime-node';

const [modelPath, intra = '1'] = process.argv.slice(2);
const session = await ort.InferenceSession.create(modelPath!, {
  intraOpNumThreads: Number(intra), interOpNumThreads: 1, graphOptimizationLevel: 'all',
});
const enc = new TextEncoder();

const app = new Hono();
app.post('/v2/models/:model/infer', async (c) => {
  const body = new Uint8Array(await c.req.arrayBuffer());
  const headerLength = Number(c.req.header('Inference-Header-Content-Length'));
  const header = JSON.parse(new TextDecoder().decode(body.subarray(0, headerLength)));
  const input = header.inputs[0];
  const x = new Float32Array(body.slice(headerLength).buffer);
  const result = await session.run({ [input.name]: new ort.Tensor('float32', x, input.shape) });
  const out = result[session.outputNames[0]!]!;
  const bytes = new Uint8Array((out.data as Float32Array).buffer, (out.data as Float32Array).byteOffset, (out.data as Float32Array).byteLength);
  const json = enc.encode(JSON.stringify({
    model_name: c.req.param('model'), model_version: '1',
    outputs: [{ name: session.outputNames[0], datatype: 'FP32', shape: out.dims, parameters: { binary_data_size: bytes.byteLength } }],
  }));
  const res = new Uint8Array(json.byteLength + bytes.byteLength);
  res.set(json);
  res.set(bytes, json.byteLength);
  return c.body(res, 200, { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(json.byteLength) });
});

serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => process.stdout.write(`PORT ${info.port}\n`));
process.on('SIGTERM', () => process.exit(0));
