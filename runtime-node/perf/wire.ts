/**
 * The lean load path of `tsi-node perf`: each input set is encoded once, before the run, into the
 * exact bytes of its request (an HTTP/1.1 POST, or a length-prefixed gRPC ModelInferRequest), and the
 * load loop only writes those bytes and reads the answer's framing — the status line and
 * Content-Length over raw keep-alive sockets (one per request in flight, as wrk does), or HTTP/2
 * streams of one node:http2 session with `grpc-status` from the trailers (as h2load does). Answers
 * are checked for success, not decoded: the full clients (client/http.ts, client/grpc.ts) spend more
 * CPU per request than the server does on a small model, so perf measured itself (0.44× of wrk on
 * `simple` at concurrency 8). Sequences (flags change per request), TLS and compressed gRPC keep the
 * client path; `wireSender` says undefined for them.
 */

import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { connect, type Socket } from 'node:net';
import * as protoLoader from '@grpc/proto-loader';
import { encodeInferRequest } from '../../client/http.js';
import { GRPC_CLIENT_WINDOW, defaultProtoDir } from '../../client/grpc.js';
import { buildInferRequest } from '../../client/grpc-codec.js';
import { normalizeInput } from '../../client/tensor.js';
import { InferenceServerError } from '../../client/errors.js';
import type { InferInputSpec, InferOptions } from '../../client/types.js';

/** Client-side time of one request: writing it, and reading its answer once the first byte came. */
export interface WireTiming {
  sendNs: number;
  recvNs: number;
}

export interface WireSender {
  /** Sends input set `set` and resolves when its answer is complete; rejects with InferenceServerError. */
  send(set: number): Promise<WireTiming>;
  close(): void;
}

export interface WireOptions {
  protocol: 'http' | 'grpc';
  url: string;
  model: string;
  version?: string;
  headers: Record<string, string>;
  inputSets: InferInputSpec[][];
  callOptions: InferOptions;
  grpcCompression?: string;
}

const nowNs = () => performance.now() * 1e6;

/** A wire sender for these options, or undefined where only the full client can send them. */
export function wireSender(o: WireOptions): WireSender | undefined {
  if (/^https:/i.test(o.url) || o.grpcCompression) return undefined;
  const hostPort = o.url.replace(/^https?:\/\//i, '').replace(/\/.*$/, '');
  const i = hostPort.lastIndexOf(':');
  const host = (i > 0 ? hostPort.slice(0, i) : hostPort).replace(/^\[|\]$/g, '');
  const port = i > 0 ? Number(hostPort.slice(i + 1)) : o.protocol === 'grpc' ? 8001 : 8000;
  return o.protocol === 'grpc' ? new GrpcWire(o, host, port) : new HttpWire(o, host, port);
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1
// ---------------------------------------------------------------------------------------------

const CRLF2 = Buffer.from('\r\n\r\n');

/** One keep-alive connection with at most one request in flight. */
class Conn {
  buf: Buffer = Buffer.alloc(0);
  firstNs = 0;
  done?: (err: Error | undefined, status: number, body: Buffer) => void;
  constructor(readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => this.onData(d));
    const fail = (err?: Error) => {
      const cb = this.done;
      this.done = undefined;
      cb?.(err ?? new Error('the server closed the connection'), 0, Buffer.alloc(0));
    };
    socket.on('error', fail);
    socket.on('close', () => fail());
  }

  private onData(d: Buffer): void {
    if (this.buf.byteLength === 0) this.firstNs = nowNs();
    this.buf = this.buf.byteLength === 0 ? d : Buffer.concat([this.buf, d]);
    const head = this.buf.indexOf(CRLF2);
    if (head < 0) return;
    const headers = this.buf.toString('latin1', 0, head);
    const status = Number(headers.slice(9, 12));
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(headers);
    if (!m) {
      this.done?.(new Error(`an answer without Content-Length (${headers.split('\r\n')[0]})`), status, Buffer.alloc(0));
      this.done = undefined;
      return;
    }
    const total = head + 4 + Number(m[1]);
    if (this.buf.byteLength < total) return;
    const body = this.buf.subarray(head + 4, total);
    this.buf = this.buf.subarray(total);
    const cb = this.done;
    this.done = undefined;
    cb?.(undefined, status, body);
  }
}

class HttpWire implements WireSender {
  private readonly requests: Buffer[];
  private readonly idle: Conn[] = [];
  private readonly all = new Set<Conn>();

  constructor(o: WireOptions, private readonly host: string, private readonly port: number) {
    const path = `/v2/models/${encodeURIComponent(o.model)}${o.version ? `/versions/${o.version}` : ''}/infer`;
    this.requests = o.inputSets.map((set) => {
      const { body, headerLength } = encodeInferRequest(set.map(normalizeInput), o.callOptions);
      const headers: Record<string, string> = {
        Host: `${host}:${port}`, 'Content-Length': String(body.byteLength), 'Accept-Encoding': 'identity',
        'Content-Type': headerLength !== undefined ? 'application/octet-stream' : 'application/json',
        ...(headerLength !== undefined ? { 'Inference-Header-Content-Length': String(headerLength) } : {}),
        ...o.headers,
      };
      const head = `POST ${path} HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
      return Buffer.concat([Buffer.from(head, 'latin1'), body]);
    });
  }

  private conn(): Promise<Conn> {
    const c = this.idle.pop();
    if (c) return Promise.resolve(c);
    return new Promise((resolve, reject) => {
      const s = connect(this.port, this.host, () => {
        s.off('error', reject);
        const conn = new Conn(s);
        this.all.add(conn);
        resolve(conn);
      });
      s.once('error', reject);
    });
  }

  async send(set: number): Promise<WireTiming> {
    let c: Conn;
    try {
      c = await this.conn();
    } catch (err) {
      throw new InferenceServerError({ source: 'http', status: 0, message: `cannot connect to ${this.host}:${this.port}: ${(err as Error).message}` });
    }
    const t0 = nowNs();
    return new Promise<WireTiming>((resolve, reject) => {
      c.done = (err, status, body) => {
        const t1 = nowNs();
        if (err) {
          this.all.delete(c);
          c.socket.destroy();
          return reject(new InferenceServerError({ source: 'http', status, message: err.message }));
        }
        this.idle.push(c);
        if (status !== 200) {
          let message = body.toString('utf8');
          try {
            message = JSON.parse(message).error ?? message;
          } catch { /* not JSON: the text as it came */ }
          return reject(new InferenceServerError({ source: 'http', status, message }));
        }
        resolve({ sendNs: sent - t0, recvNs: t1 - c.firstNs });
      };
      c.socket.write(this.requests[set]!);
      const sent = nowNs();
    });
  }

  close(): void {
    for (const c of this.all) c.socket.destroy();
    this.all.clear();
    this.idle.length = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// gRPC over node:http2
// ---------------------------------------------------------------------------------------------

class GrpcWire implements WireSender {
  private readonly frames: Buffer[];
  private readonly headers: Record<string, string>;
  private session?: ClientHttp2Session;

  constructor(o: WireOptions, private readonly host: string, private readonly port: number) {
    const pkg = protoLoader.loadSync(['grpc_service.proto'], {
      keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [defaultProtoDir()],
    });
    const svc = pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition;
    this.frames = o.inputSets.map((set) => {
      const msg = svc.ModelInfer!.requestSerialize({ ...buildInferRequest(o.model, set, o.callOptions), model_version: o.version ?? '' }) as Buffer;
      const frame = Buffer.allocUnsafe(5 + msg.byteLength);
      frame[0] = 0;
      frame.writeUInt32BE(msg.byteLength, 1);
      msg.copy(frame, 5);
      return frame;
    });
    const custom = Object.fromEntries(Object.entries(o.headers).map(([k, v]) => [k.toLowerCase(), v]));
    this.headers = {
      ...custom, ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer', 'content-type': 'application/grpc', te: 'trailers',
    };
  }

  private open(): ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    // The windows and frame size tsi's gRPC client opens (client/grpc.ts), so that large answers are
    // measured as the server sends them, not as Node's 64 KiB defaults throttle them.
    const s = h2connect(`http://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`, {
      settings: { initialWindowSize: GRPC_CLIENT_WINDOW, maxFrameSize: 2 ** 20 },
    });
    // The connection's window can only be set once the session has its socket.
    s.once('connect', () => s.setLocalWindowSize(GRPC_CLIENT_WINDOW));
    s.on('error', () => {});
    this.session = s;
    return s;
  }

  send(set: number): Promise<WireTiming> {
    const t0 = nowNs();
    return new Promise<WireTiming>((resolve, reject) => {
      const req = this.open().request(this.headers);
      let firstNs = 0;
      let status: string | undefined;
      let message = '';
      const fail = (msg: string, code = 0) => reject(new InferenceServerError({ source: 'grpc', status: code, message: msg }));
      // A trailers-only answer (an error before any message) puts grpc-status in the headers.
      req.on('response', (h) => {
        firstNs = nowNs();
        if (h['grpc-status'] !== undefined) {
          status = String(h['grpc-status']);
          message = decodeURIComponent(String(h['grpc-message'] ?? ''));
        }
      });
      req.on('data', () => {});
      req.on('trailers', (h) => {
        status = String(h['grpc-status']);
        message = decodeURIComponent(String(h['grpc-message'] ?? ''));
      });
      req.on('error', (err) => fail(err.message));
      req.on('end', () => {
        const t1 = nowNs();
        if (status === '0') resolve({ sendNs: sent - t0, recvNs: t1 - firstNs });
        else fail(status === undefined ? 'the stream ended without a grpc-status' : message || `grpc-status ${status}`, Number(status ?? 0));
      });
      req.end(this.frames[set]);
      const sent = nowNs();
    });
  }

  close(): void {
    this.session?.destroy();
    this.session = undefined;
  }
}
