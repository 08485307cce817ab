/**
 * A grpc-js client over our own proto/ for the gRPC tests, loaded with the same proto-loader options
 * as the server (and as Triton clients effectively see the messages): promise-returning unary calls
 * that reject with the ServiceError, a bidirectional stream helper, a bare HTTP/2 call for tests that
 * look at the wire (a grpc-js client hides framing, headers and trailers), and a minimal Prometheus
 * text parser for the metrics tests (prom-client writes the format but does not read it).
 */

import { connect, constants, type IncomingHttpHeaders } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS, protoDir } from '../../runtime-node/grpc/server.js';

export type Obj = Record<string, any>;

const pkg = protoLoader.loadSync(['grpc_service.proto', 'health.proto'], { ...PROTO_LOADER_OPTIONS, includeDirs: [protoDir()] });
const defs = grpc.loadPackageDefinition(pkg) as any;

/** A gRPC message with its 5-byte prefix (uncompressed). */
export function grpcFrame(message: Uint8Array): Buffer {
  const f = Buffer.alloc(5 + message.byteLength);
  f.writeUInt32BE(message.byteLength, 1);
  f.set(message, 5);
  return f;
}

export interface RawGrpcAnswer { headers: IncomingHttpHeaders; body: Buffer; trailers: IncomingHttpHeaders }

/** One call over a bare HTTP/2 stream: `body` as its DATA, what came back as it came. */
export async function rawGrpcCall(port: number, path: string, body: Buffer, extra: Record<string, string> = {}): Promise<RawGrpcAnswer> {
  const session = connect(`http://127.0.0.1:${port}`);
  try {
    const stream = session.request({
      [constants.HTTP2_HEADER_METHOD]: 'POST', [constants.HTTP2_HEADER_PATH]: path, 'content-type': 'application/grpc', te: 'trailers', ...extra,
    });
    const headers = new Promise<IncomingHttpHeaders>((resolve) => stream.once('response', resolve));
    let trailers: IncomingHttpHeaders = {};
    stream.once('trailers', (t) => (trailers = t));
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.end(body);
    await new Promise<void>((resolve, reject) => {
      stream.once('close', resolve);
      stream.once('error', reject);
    });
    return { headers: await headers, body: Buffer.concat(chunks), trailers };
  } finally {
    session.close();
  }
}

export interface GrpcTestClient {
  raw: grpc.Client & Obj;
  call(method: string, request: Obj, metadata?: Record<string, string>): Promise<Obj>;
  health(service?: string): Promise<string>;
  stream(metadata?: Record<string, string>): grpc.ClientDuplexStream<Obj, Obj>;
  close(): void;
}

export function grpcClient(address: string, options: grpc.ChannelOptions = {}): GrpcTestClient {
  const opts = { 'grpc.max_receive_message_length': 2 ** 31 - 1, 'grpc.max_send_message_length': 2 ** 31 - 1, ...options };
  const raw = new defs.inference.GRPCInferenceService(address, grpc.credentials.createInsecure(), opts);
  const health = new defs.grpc.health.v1.Health(address, grpc.credentials.createInsecure());
  const md = (m?: Record<string, string>) => {
    const out = new grpc.Metadata();
    for (const [k, v] of Object.entries(m ?? {})) out.set(k, v);
    return out;
  };
  return {
    raw,
    call: (method, request, metadata) => new Promise((resolve, reject) => {
      raw[method](request, md(metadata), (err: grpc.ServiceError | null, res: Obj) => (err ? reject(err) : resolve(res)));
    }),
    health: (service = '') => new Promise((resolve, reject) => {
      health.Check({ service }, (err: grpc.ServiceError | null, res: Obj) => (err ? reject(err) : resolve(res.status)));
    }),
    stream: (metadata) => raw.ModelStreamInfer(md(metadata)),
    close: () => {
      raw.close();
      health.close();
    },
  };
}

/** Sends `requests` on one stream, half-closes, and collects every message until the server ends it. */
export async function streamAll(client: GrpcTestClient, requests: Obj[], metadata?: Record<string, string>): Promise<Obj[]> {
  const s = client.stream(metadata);
  const out: Obj[] = [];
  const done = new Promise<void>((resolve, reject) => {
    s.on('data', (m: Obj) => out.push(m));
    s.on('end', () => resolve());
    s.on('error', reject);
  });
  for (const r of requests) s.write(r);
  s.end();
  await done;
  return out;
}

export const int32Raw = (values: number[]) => Buffer.from(Int32Array.from(values).buffer);
export const fromRaw = (b: Buffer, ctor: { new (buf: ArrayBuffer): ArrayLike<number | bigint> }) => {
  const copy = new Uint8Array(b.byteLength);
  copy.set(b);
  return Array.from(new ctor(copy.buffer) as ArrayLike<number>);
};

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface ParsedMetrics {
  help: Map<string, string>;
  type: Map<string, string>;
  samples: Sample[];
  /** The value of `name` whose labels include `labels` (undefined if absent). */
  get(name: string, labels?: Record<string, string>): number | undefined;
}

/** Parses the Prometheus text exposition format (HELP/TYPE comments and samples with labels). */
export function parsePrometheus(text: string): ParsedMetrics {
  const help = new Map<string, string>();
  const type = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    let m = /^# HELP (\S+) (.*)$/.exec(line);
    if (m) {
      help.set(m[1]!, m[2]!.replace(/\\n/g, '\n').replace(/\\\\/g, '\\'));
      continue;
    }
    m = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (m) {
      type.set(m[1]!, m[2]!);
      continue;
    }
    if (line.startsWith('#')) continue;
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/g;
    for (let l = re.exec(m[2] ?? ''); l; l = re.exec(m[2] ?? '')) labels[l[1]!] = l[2]!.replace(/\\"/g, '"').replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
    const v = m[3]!;
    samples.push({ name: m[1]!, labels, value: v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v) });
  }
  return {
    help, type, samples,
    get(name, want = {}) {
      return samples.find((s) => s.name === name && Object.entries(want).every(([k, v]) => s.labels[k] === v))?.value;
    },
  };
}
