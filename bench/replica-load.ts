/**
 * The load of bench/replicas.ts: closed loops over HTTP/1.1 keep-alive (raw sockets, so a connection
 * HAProxy closes is seen as such) and gRPC, each request `simple` or `mlp_batch` with fresh inputs and
 * every answer checked against what the inputs imply, failures counted by kind.
 */

import { connect, type Socket } from 'node:net';
import { GrpcClient } from '../client/grpc.js';
import type { Haproxy } from './replica-fleet.js';

export interface LoadStats {
  requests: number;
  ok: number;
  /** Failed requests by kind: `http 503`, `closed without response`, `grpc UNAVAILABLE: ...`, `mismatch`. */
  failures: Record<string, number>;
  seconds: number;
}

const fail = (s: LoadStats, kind: string) => (s.failures[kind] = (s.failures[kind] ?? 0) + 1);

/** A request and how to check its answer (undefined = right; else what was wrong). */
export interface Probe {
  body: Buffer;
  headers: Record<string, string>;
  check(status: number, body: Buffer, headers: string): string | undefined;
}

/** `simple` with fresh random inputs, JSON in and out. */
export function simpleProbe(): Probe {
  const a = Array.from({ length: 16 }, () => (Math.random() * 2 ** 31) | 0);
  const b = Array.from({ length: 16 }, () => (Math.random() * 2 ** 31) | 0);
  const body = Buffer.from(JSON.stringify({ inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b }] }));
  return {
    body, headers: { 'Content-Type': 'application/json' },
    check(status, res) {
      // Whose refusal it was: HAProxy answers in HTML, tsi with {"error": ...}.
      if (status !== 200) return `http ${status}: ${res.toString().replace(/\s+/g, ' ').slice(0, 70)}`;
      const out = JSON.parse(res.toString()).outputs as { name: string; data: number[] }[];
      const o0 = out.find((o) => o.name === 'OUTPUT0')?.data;
      const o1 = out.find((o) => o.name === 'OUTPUT1')?.data;
      const right = a.every((x, i) => o0?.[i] === ((x + b[i]!) | 0) && o1?.[i] === ((x - b[i]!) | 0));
      return right ? undefined : 'mismatch';
    },
  };
}

/**
 * `mlp_batch` rows for the scale-out load: a pool of distinct rows whose answers were taken once from
 * one replica; each request sends one of them (binary in and out) and its answer must be that row's
 * (within float tolerance: batched GEMMs may round differently).
 */
export async function mlpProbes(port: number, count = 8): Promise<() => Probe> {
  const pool: { body: Buffer; headers: Record<string, string>; expected: Float32Array }[] = [];
  for (let k = 0; k < count; k++) {
    const row = Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i * (k + 1) * 0.37));
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1024], parameters: { binary_data_size: 4096 } }],
      outputs: [{ name: 'OUTPUT', parameters: { binary_data: true } }] }));
    const body = Buffer.concat([header, Buffer.from(row.buffer)]);
    const headers = { 'Inference-Header-Content-Length': String(header.length), 'Content-Type': 'application/octet-stream' };
    const r = await fetch(`http://127.0.0.1:${port}/v2/models/mlp_batch/infer`, { method: 'POST', body, headers });
    const buf = Buffer.from(await r.arrayBuffer());
    if (r.status !== 200) throw new Error(`mlp_batch reference: ${r.status} ${buf.toString()}`);
    const hl = Number(r.headers.get('inference-header-content-length'));
    pool.push({ body, headers, expected: new Float32Array(buf.buffer.slice(buf.byteOffset + hl, buf.byteOffset + hl + 4096)) });
  }
  return () => {
    const p = pool[(Math.random() * pool.length) | 0]!;
    return {
      body: p.body, headers: p.headers,
      check(status, res, head) {
        if (status !== 200) return `http ${status}`;
        const hl = Number(/inference-header-content-length:\s*(\d+)/i.exec(head)?.[1]);
        const out = new Float32Array(res.buffer.slice(res.byteOffset + hl, res.byteOffset + hl + 4096));
        if (out.length !== 1024) return 'mismatch';
        for (let i = 0; i < 1024; i++) if (Math.abs(out[i]! - p.expected[i]!) > 1e-4 * (1 + Math.abs(p.expected[i]!))) return 'mismatch';
        return undefined;
      },
    };
  };
}

/** The status, headers and body of a complete response at the front of `buf`, or undefined. */
function takeResponse(buf: Buffer): { status: number; head: string; body: Buffer; rest: Buffer } | undefined {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const head = buf.subarray(0, end).toString('latin1');
  const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (!cl) throw new Error(`response without Content-Length: ${head.split('\r\n')[0]}`);
  const total = end + 4 + Number(cl[1]);
  if (buf.length < total) return undefined;
  return { status: Number(head.slice(9, 12)), head, body: buf.subarray(end + 4, total), rest: buf.subarray(total) };
}

/**
 * One HTTP/1.1 keep-alive client in a closed loop until `stop()` says so. A connection that closes
 * with a request outstanding fails that request ("closed without response"); the loop reconnects,
 * as a client pool would, and does not retry.
 */
async function httpLoop(port: number, path: string, next: () => Probe, stats: LoadStats, stop: () => boolean): Promise<void> {
  while (!stop()) {
    await new Promise<void>((resolve) => {
      const sock: Socket = connect({ port, host: '127.0.0.1', noDelay: true });
      let buf: Buffer = Buffer.alloc(0);
      let current: Probe | undefined;
      const send = () => {
        if (stop()) {
          sock.end();
          return;
        }
        current = next();
        const head = [`POST ${path} HTTP/1.1`, 'Host: tsi', `Content-Length: ${current.body.length}`,
          ...Object.entries(current.headers).map(([k, v]) => `${k}: ${v}`)].join('\r\n');
        sock.write(Buffer.concat([Buffer.from(head + '\r\n\r\n'), current.body]));
        stats.requests++;
      };
      sock.on('connect', send);
      sock.on('data', (d: Buffer) => {
        buf = buf.length ? Buffer.concat([buf, d]) : d;
        const r = takeResponse(buf);
        if (!r) return;
        buf = r.rest;
        const wrong = current!.check(r.status, r.body, r.head);
        current = undefined;
        if (wrong) fail(stats, wrong);
        else stats.ok++;
        if (/\r\nconnection:\s*close/i.test(r.head)) sock.end();
        else send();
      });
      sock.on('error', () => {});
      sock.on('close', () => {
        if (current) fail(stats, 'closed without response');
        resolve();
      });
    });
  }
}

/** One gRPC client (its own HTTP/2 connection) running `loops` concurrent closed loops of `simple`. */
async function grpcLoops(port: number, loops: number, stats: LoadStats, stop: () => boolean): Promise<void> {
  const client = new GrpcClient(`127.0.0.1:${port}`);
  await Promise.all(Array.from({ length: loops }, async () => {
    while (!stop()) {
      const a = Int32Array.from({ length: 16 }, () => (Math.random() * 2 ** 31) | 0);
      const b = Int32Array.from({ length: 16 }, () => (Math.random() * 2 ** 31) | 0);
      stats.requests++;
      try {
        const r = await client.infer('simple', [{ name: 'INPUT0', shape: [1, 16], data: a }, { name: 'INPUT1', shape: [1, 16], data: b }], { timeoutMs: 30_000 });
        const o0 = r.data<Int32Array>('OUTPUT0');
        const o1 = r.data<Int32Array>('OUTPUT1');
        if (a.every((x, i) => o0[i] === ((x + b[i]!) | 0) && o1[i] === ((x - b[i]!) | 0))) stats.ok++;
        else fail(stats, 'mismatch');
      } catch (err) {
        fail(stats, `grpc ${(err as { status?: number }).status}: ${String((err as Error).message).slice(0, 80)}`);
      }
    }
  }));
  await client.close();
}

export interface LoadRun {
  http: LoadStats;
  grpc: LoadStats;
  /** Ends the load (after the requests in flight complete) and resolves with the stats. */
  finish(): Promise<{ http: LoadStats; grpc: LoadStats }>;
}

/** Starts HTTP and gRPC clients against HAProxy; `finish()` stops them. */
export function startLoad(h: Haproxy, opts: { httpClients: number; grpcClients: number; model?: 'simple' | 'mlp_batch'; probe?: () => Probe }): LoadRun {
  const empty = (): LoadStats => ({ requests: 0, ok: 0, failures: {}, seconds: 0 });
  const http = empty();
  const grpc = empty();
  let stopping = false;
  const t0 = performance.now();
  const model = opts.model ?? 'simple';
  const probe = opts.probe ?? simpleProbe;
  const running = [
    ...Array.from({ length: opts.httpClients }, () => httpLoop(h.httpPort, `/v2/models/${model}/infer`, probe, http, () => stopping)),
    // gRPC clients of 4 concurrent calls each, on their own connection.
    ...Array.from({ length: Math.ceil(opts.grpcClients / 4) }, (_, i) =>
      grpcLoops(h.grpcPort, Math.min(4, opts.grpcClients - 4 * i), grpc, () => stopping)),
  ];
  return {
    http, grpc,
    async finish() {
      stopping = true;
      await Promise.all(running);
      http.seconds = grpc.seconds = (performance.now() - t0) / 1000;
      return { http, grpc };
    },
  };
}
