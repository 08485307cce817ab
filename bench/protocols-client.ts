/**
 * The client side of bench/protocols-served.ts, run as a process of its own so its CPU is not the
 * server's: `--clients` closed loops, each with one request in flight, for a warm-up and then
 * `--seconds` measured, sending pre-encoded request bytes and reading every answer to its end.
 *   fetch — Node's global fetch (undici) with its default headers (so `Accept-Encoding: gzip, deflate`,
 *           as every browser and fetch client sends), reading the body with arrayBuffer();
 *   grpc  — @grpc/grpc-js unary ModelInfer calls with the message pre-serialized and the answer taken
 *           as bytes (grpc-js still frames, parses HTTP/2 and checks the status, as a real client does).
 * Prints one JSON line: { requests, rps, p50Ms, p90Ms }.
 *
 *   node --import tsx bench/protocols-client.ts --mode fetch --url <infer url> --body <file> [--header-length N]
 *   node --import tsx bench/protocols-client.ts --mode grpc --target host:port --body <message file>
 *     [--clients 1] [--seconds 4] [--warmup 1]
 */

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { GRPC_CLIENT_WINDOW } from '../client/grpc.js';

const { values: a } = parseArgs({
  options: {
    mode: { type: 'string' }, url: { type: 'string' }, target: { type: 'string' }, body: { type: 'string' },
    'header-length': { type: 'string' }, clients: { type: 'string', default: '1' }, seconds: { type: 'string', default: '4' },
    warmup: { type: 'string', default: '1' },
  },
});
const body = readFileSync(a.body!);
const clients = Number(a.clients);

/** One request, resolving when its answer has been read whole; throws on a failed answer. */
let once: () => Promise<void>;
if (a.mode === 'fetch') {
  const headers: Record<string, string> = a['header-length']
    ? { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': a['header-length'] }
    : { 'Content-Type': 'application/json' };
  once = async () => {
    const r = await fetch(a.url!, { method: 'POST', body, headers });
    const bytes = await r.arrayBuffer();
    if (!r.ok) throw new Error(`${r.status}: ${Buffer.from(bytes).toString('utf8', 0, 300)}`);
  };
} else if (a.mode === 'grpc') {
  // The receive window tsi's own GrpcClient opens (grpc-js's default is Node's 64 KiB).
  const client = new grpc.Client(a.target!, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1, 'grpc-node.flow_control_window': GRPC_CLIENT_WINDOW,
  });
  const id = (b: Buffer) => b;
  once = () => new Promise((resolve, reject) => {
    client.makeUnaryRequest('/inference.GRPCInferenceService/ModelInfer', id, id, body, (err) => (err ? reject(err) : resolve()));
  });
} else {
  throw new Error(`--mode must be fetch or grpc, not '${a.mode}'`);
}

const latencies: number[] = [];
let measuring = false;
let stop = false;
async function loop(): Promise<void> {
  while (!stop) {
    const t = performance.now();
    await once();
    if (measuring && !stop) latencies.push(performance.now() - t);
  }
}
const loops = Array.from({ length: clients }, loop);
await new Promise((r) => setTimeout(r, Number(a.warmup) * 1000));
measuring = true;
const t0 = performance.now();
await new Promise((r) => setTimeout(r, Number(a.seconds) * 1000));
stop = true;
const seconds = (performance.now() - t0) / 1000;
await Promise.all(loops);
latencies.sort((x, y) => x - y);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
process.stdout.write(`${JSON.stringify({ requests: latencies.length, rps: latencies.length / seconds, p50Ms: pct(0.5), p90Ms: pct(0.9) })}\n`);
process.exit(0);
