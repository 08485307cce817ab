/**
 * The soak: N clients for T seconds against one server, mixing models, batch sizes and protocols (HTTP
 * JSON, HTTP binary, gRPC unary, gRPC streams), every response checked against its own request's
 * inputs, so a response sent to the wrong client, a row from another request or a corrupted tensor
 * counts as a mismatch, not as a success. Prints requests, errors, mismatches and the server's RSS at
 * start, after warm-up and at the end (the growth that matters is the one after warm-up); exits 1 if
 * anything went wrong or RSS grew by 5 % or more after warm-up.
 *
 *   npx tsx bench/soak.ts [--clients 64] [--seconds 600] [--warmup 30] [--models simple,add_sub,...]
 *                         [--protocols http-json,http-binary,grpc,grpc-stream]
 *   npm run bench:soak -- --seconds 60
 *
 * The server runs as a child process (this file with --serve, from the sources under tsx) over
 * models/, so its RSS is its own; the answers are checked by rule (simple: a+b and a−b; simple_string:
 * the same on decimal strings; simple_identity: the same bytes; image_classifier: the class of the
 * patch drawn in the image) or, for mlp_batch, against each row's answer computed alone at start-up.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { fork, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { loadProtos } from '../runtime-node/grpc/server.js';

type Obj = Record<string, any>;
const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..');

// ---------------------------------------------------------------------------------------------------
// The server, as a child process that reports its ports and, when asked, its RSS.
// ---------------------------------------------------------------------------------------------------

export interface ServerChild {
  child: ChildProcess;
  http: string;
  grpc: string;
  rss(): Promise<number>;
  stop(): Promise<void>;
}

/** Starts tsi from the sources (this file with --serve) over `repo`; resolves once it serves. */
export function spawnServer(repo = join(ROOT, 'models'), extra: Record<string, unknown> = {}): Promise<ServerChild> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', repo, JSON.stringify(extra)], {
    execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], cwd: ROOT,
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the server exited with code ${code} before serving`)));
    child.once('message', (m: Obj) => {
      let asked = 0;
      const waiting = new Map<number, (rss: number) => void>();
      child.on('message', (r: Obj) => {
        if (r.rss !== undefined) waiting.get(r.id)?.(r.rss);
      });
      resolve({
        child, http: `http://127.0.0.1:${m.http}`, grpc: `127.0.0.1:${m.grpc}`,
        rss: () => new Promise((res) => {
          const id = ++asked;
          waiting.set(id, res);
          child.send({ rss: id });
        }),
        stop: () => new Promise((res) => {
          child.removeAllListeners('exit');
          child.once('exit', () => res());
          child.send({ stop: true });
        }),
      });
    });
  });
}

async function serve(repo: string, extra: Record<string, unknown>): Promise<void> {
  const { startServer } = await import('../runtime-node/index.js');
  const { createLogger } = await import('../core/index.js');
  // Warnings and errors only: loading and unloading twenty models is not news here.
  const log = createLogger((level, line) => {
    if (level === 'W' || level === 'E') process.stderr.write(`${line}\n`);
  }, 0);
  const running = await startServer({
    modelRepositories: [repo], httpPort: 0, httpAddress: '127.0.0.1', grpcPort: 0, grpcAddress: '127.0.0.1', log, ...extra,
  });
  // The bench that started this server is gone (killed, crashed): so is the server.
  process.on('disconnect', () => process.exit(1));
  process.on('message', (m: Obj) => {
    if (m.rss !== undefined) process.send!({ id: m.rss, rss: process.memoryUsage().rss });
    if (m.stop) void running.stop(5000).then(() => process.exit(0));
  });
  process.send!({ http: running.http!.port, grpc: running.grpc!.port });
}

// ---------------------------------------------------------------------------------------------------
// Tensors: built, put on each wire, read back.
// ---------------------------------------------------------------------------------------------------

type Dt = 'INT32' | 'FP32' | 'BYTES';
interface T {
  name: string;
  datatype: Dt;
  shape: number[];
  values: (number | string)[];
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder();

function toBytes(t: Pick<T, 'datatype' | 'values'>): Buffer {
  if (t.datatype === 'INT32') return Buffer.from(Int32Array.from(t.values as number[]).buffer);
  if (t.datatype === 'FP32') return Buffer.from(Float32Array.from(t.values as number[]).buffer);
  const parts = (t.values as string[]).map((s) => utf8.encode(s));
  const out = Buffer.alloc(parts.reduce((n, p) => n + 4 + p.byteLength, 0));
  let off = 0;
  for (const p of parts) {
    out.writeUInt32LE(p.byteLength, off);
    out.set(p, off + 4);
    off += 4 + p.byteLength;
  }
  return out;
}

function fromBytes(dt: string, b: Uint8Array): (number | string)[] {
  const copy = new Uint8Array(b);
  if (dt === 'INT32') return Array.from(new Int32Array(copy.buffer));
  if (dt === 'FP32') return Array.from(new Float32Array(copy.buffer));
  const out: string[] = [];
  const view = new DataView(copy.buffer);
  for (let off = 0; off < copy.byteLength;) {
    const n = view.getUint32(off, true);
    out.push(utf8d.decode(copy.subarray(off + 4, off + 4 + n)));
    off += 4 + n;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The cases: a model, random inputs, and the rule its answer must follow.
// ---------------------------------------------------------------------------------------------------

interface Case {
  model: string;
  inputs: T[];
  /** undefined when the outputs are right, else what is wrong. */
  check(out: Map<string, { shape: number[]; values: (number | string)[] }>): string | undefined;
}

const rnd = (n: number) => Math.floor(Math.random() * n);
const same = (a: unknown[], b: unknown[]) => a.length === b.length && a.every((x, i) => x === b[i]);

function expectOutputs(out: Map<string, { shape: number[]; values: (number | string)[] }>, want: Record<string, (number | string)[]>): string | undefined {
  for (const [name, values] of Object.entries(want)) {
    const got = out.get(name);
    if (!got) return `no ${name}`;
    if (!same(got.values, values)) return `${name} differs (first: ${got.values.slice(0, 4).join(',')} vs ${values.slice(0, 4).join(',')})`;
  }
  return undefined;
}

const MLP_ROWS = 8;
/** Each mlp_batch reference row and its answer computed alone, filled in at start-up. */
const mlpRows: { input: number[]; output: Float32Array }[] = [];

const builders: Record<string, () => Case> = {
  simple: () => {
    const b = 1 + rnd(4);
    const a = Array.from({ length: b * 16 }, () => rnd(2 ** 31) - 2 ** 30);
    const c = Array.from({ length: b * 16 }, () => rnd(2 ** 31) - 2 ** 30);
    return {
      model: 'simple',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [b, 16], values: a }, { name: 'INPUT1', datatype: 'INT32', shape: [b, 16], values: c }],
      check: (out) => expectOutputs(out, { OUTPUT0: a.map((x, i) => (x + c[i]!) | 0), OUTPUT1: a.map((x, i) => (x - c[i]!) | 0) }),
    };
  },
  add_sub: () => {
    const b = 1 + rnd(4);
    const a = Array.from({ length: b * 16 }, () => Math.fround(Math.random() * 200 - 100));
    const c = Array.from({ length: b * 16 }, () => Math.fround(Math.random() * 200 - 100));
    return {
      model: 'add_sub',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [b, 16], values: a }, { name: 'INPUT1', datatype: 'FP32', shape: [b, 16], values: c }],
      check: (out) => expectOutputs(out, { OUTPUT0: a.map((x, i) => Math.fround(x + c[i]!)), OUTPUT1: a.map((x, i) => Math.fround(x - c[i]!)) }),
    };
  },
  simple_string: () => {
    const b = 1 + rnd(3);
    const a = Array.from({ length: b * 16 }, () => rnd(20000) - 10000);
    const c = Array.from({ length: b * 16 }, () => rnd(20000) - 10000);
    return {
      model: 'simple_string',
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [b, 16], values: a.map(String) },
        { name: 'INPUT1', datatype: 'BYTES', shape: [b, 16], values: c.map(String) },
      ],
      check: (out) => expectOutputs(out, { OUTPUT0: a.map((x, i) => String(x + c[i]!)), OUTPUT1: a.map((x, i) => String(x - c[i]!)) }),
    };
  },
  simple_identity: () => {
    const b = 1 + rnd(3);
    const w = 1 + rnd(6);
    const s = Array.from({ length: b * w }, () => `soak-${rnd(1e9)}-${'é✓'.repeat(rnd(3))}`);
    return {
      model: 'simple_identity',
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [b, w], values: s }],
      check: (out) => expectOutputs(out, { OUTPUT0: s }),
    };
  },
  image_classifier: () => {
    const b = 1 + rnd(4);
    const classes = Array.from({ length: b }, () => rnd(10));
    const img = new Array<number>(b * 768).fill(0);
    classes.forEach((k, r) => {
      const by = Math.floor(k / 4) * 4;
      const bx = (k % 4) * 4;
      for (let ch = 0; ch < 3; ch++) for (let y = by; y < by + 4; y++) for (let x = bx; x < bx + 4; x++) img[r * 768 + ch * 256 + y * 16 + x] = 1;
    });
    return {
      model: 'image_classifier',
      inputs: [{ name: 'image', datatype: 'FP32', shape: [b, 3, 16, 16], values: img }],
      check: (out) => {
        const scores = out.get('scores')?.values as number[] | undefined;
        if (!scores || scores.length !== b * 10) return 'no scores';
        for (let r = 0; r < b; r++) {
          const row = scores.slice(r * 10, r * 10 + 10);
          const top = row.indexOf(Math.max(...row));
          if (top !== classes[r]) return `row ${r}: class ${top}, expected ${classes[r]}`;
        }
        return undefined;
      },
    };
  },
  mlp_batch: () => {
    const b = 1 + rnd(4);
    const rows = Array.from({ length: b }, () => rnd(MLP_ROWS));
    return {
      model: 'mlp_batch',
      inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [b, 1024], values: rows.flatMap((r) => mlpRows[r]!.input) }],
      check: (out) => {
        const got = out.get('OUTPUT')?.values as number[] | undefined;
        if (!got || got.length !== b * 1024) return 'no OUTPUT';
        for (let i = 0; i < b; i++) {
          const want = mlpRows[rows[i]!]!.output;
          for (let j = 0; j < 1024; j++) {
            const x = got[i * 1024 + j]!;
            if (Math.abs(x - want[j]!) > 1e-4 * Math.max(1, Math.abs(want[j]!))) return `row ${i} (reference ${rows[i]}) element ${j}: ${x} vs ${want[j]}`;
          }
        }
        return undefined;
      },
    };
  },
};

// ---------------------------------------------------------------------------------------------------
// The protocols.
// ---------------------------------------------------------------------------------------------------

type Outputs = Map<string, { shape: number[]; values: (number | string)[] }>;

/** One keep-alive HTTP/1.1 connection, one request at a time, framed by Content-Length. */
class HttpConn {
  private sock?: Socket;
  private buf: Buffer = Buffer.alloc(0);
  private waiter?: { resolve: (r: { status: number; headers: string; body: Buffer }) => void; reject: (e: Error) => void };
  constructor(private readonly port: number) {}

  private open(): Socket {
    const sock = connect(this.port, '127.0.0.1');
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0 || !this.waiter) return;
      const head = this.buf.subarray(0, end).toString('latin1');
      const len = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (this.buf.length < end + 4 + len) return;
      const body = this.buf.subarray(end + 4, end + 4 + len);
      this.buf = this.buf.subarray(end + 4 + len);
      const w = this.waiter;
      this.waiter = undefined;
      w.resolve({ status: Number(head.slice(9, 12)), headers: head, body });
    });
    const fail = (e: Error) => {
      this.sock = undefined;
      this.buf = Buffer.alloc(0);
      this.waiter?.reject(e);
      this.waiter = undefined;
    };
    sock.on('error', fail);
    sock.on('close', () => fail(new Error('connection closed')));
    return sock;
  }

  post(path: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; headers: string; body: Buffer }> {
    this.sock ??= this.open();
    const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.byteLength}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.sock!.write(Buffer.concat([Buffer.from(head, 'latin1'), body]));
    });
  }

  close(): void {
    this.sock?.destroy();
  }
}

async function httpJson(conn: HttpConn, c: Case): Promise<Outputs> {
  const body = Buffer.from(JSON.stringify({ inputs: c.inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape, data: t.values })) }));
  const r = await conn.post(`/v2/models/${c.model}/infer`, { 'Content-Type': 'application/json' }, body);
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.body.toString().slice(0, 200)}`);
  const j = JSON.parse(r.body.toString());
  return new Map(j.outputs.map((o: Obj) => [o.name, { shape: o.shape, values: o.data }]));
}

async function httpBinary(conn: HttpConn, c: Case): Promise<Outputs> {
  const bytes = c.inputs.map(toBytes);
  const header = Buffer.from(JSON.stringify({
    parameters: { binary_data_output: true },
    inputs: c.inputs.map((t, i) => ({ name: t.name, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: bytes[i]!.byteLength } })),
  }));
  const r = await conn.post(`/v2/models/${c.model}/infer`, { 'Inference-Header-Content-Length': String(header.byteLength) }, Buffer.concat([header, ...bytes]));
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.body.toString().slice(0, 200)}`);
  const hl = Number(/\r\ninference-header-content-length: *(\d+)/i.exec(r.headers)?.[1] ?? r.body.byteLength);
  const j = JSON.parse(r.body.subarray(0, hl).toString());
  let off = hl;
  const out: Outputs = new Map();
  for (const o of j.outputs) {
    const n = o.parameters.binary_data_size as number;
    out.set(o.name, { shape: o.shape, values: fromBytes(o.datatype, r.body.subarray(off, off + n)) });
    off += n;
  }
  return out;
}

const grpcMessage = (c: Case, id: string) => ({
  model_name: c.model, id,
  inputs: c.inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(String) })),
  raw_input_contents: c.inputs.map(toBytes),
});

const grpcOutputs = (r: Obj): Outputs =>
  new Map(r.outputs.map((o: Obj, i: number) => [o.name, { shape: o.shape.map(Number), values: fromBytes(o.datatype, r.raw_output_contents[i]) }]));

/** One gRPC stream that many requests share, matched to their answers by id. */
class GrpcStream {
  private stream: grpc.ClientDuplexStream<Obj, Obj>;
  private waiting = new Map<string, { resolve: (r: Obj) => void; reject: (e: Error) => void }>();
  private next = 0;
  constructor(client: Obj) {
    this.stream = client.ModelStreamInfer();
    this.stream.on('data', (m: Obj) => {
      const w = this.waiting.get(m.infer_response.id);
      if (!w) return;
      this.waiting.delete(m.infer_response.id);
      if (m.error_message) w.reject(new Error(`stream: ${m.error_message}`));
      else w.resolve(m.infer_response);
    });
    this.stream.on('error', (e) => {
      for (const w of this.waiting.values()) w.reject(e);
      this.waiting.clear();
    });
  }

  infer(c: Case): Promise<Obj> {
    const id = `s${this.next++}`;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.stream.write(grpcMessage(c, id));
    });
  }

  end(): void {
    this.stream.end();
  }
}

// ---------------------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------------------

export const PROTOCOLS = ['http-json', 'http-binary', 'grpc', 'grpc-stream'] as const;
type Protocol = (typeof PROTOCOLS)[number];

export interface SoakOptions {
  clients: number;
  seconds: number;
  warmupSeconds: number;
  models: string[];
  protocols: Protocol[];
  log?: (line: string) => void;
}

export interface SoakReport {
  requests: number;
  errors: number;
  mismatches: number;
  byModel: Record<string, number>;
  byProtocol: Record<string, number>;
  firstProblems: string[];
  rssStartMb: number;
  rssWarmMb: number;
  rssEndMb: number;
  /** RSS growth from the end of warm-up to the end, in percent. */
  growthPct: number;
  rps: number;
}

export async function runSoak(server: ServerChild, opts: SoakOptions): Promise<SoakReport> {
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const defs = loadProtos().inference;
  const Client = grpc.makeGenericClientConstructor(defs as unknown as grpc.ServiceDefinition, 'GRPCInferenceService');
  const port = Number(new URL(server.http).port);
  const mb = (n: number) => Math.round((n / 1048576) * 10) / 10;

  // mlp_batch's reference rows, each computed alone.
  if (opts.models.includes('mlp_batch') && mlpRows.length === 0) {
    const conn = new HttpConn(port);
    for (let r = 0; r < MLP_ROWS; r++) {
      const input = Array.from({ length: 1024 }, () => Math.fround(Math.random() * 2 - 1));
      const out = await httpBinary(conn, { model: 'mlp_batch', inputs: [{ name: 'INPUT', datatype: 'FP32', shape: [1, 1024], values: input }], check: () => undefined });
      mlpRows.push({ input, output: Float32Array.from(out.get('OUTPUT')!.values as number[]) });
    }
    conn.close();
  }

  const rssStart = await server.rss();
  let requests = 0;
  let errors = 0;
  let mismatches = 0;
  const byModel: Record<string, number> = {};
  const byProtocol: Record<string, number> = {};
  const firstProblems: string[] = [];
  const problem = (p: string) => {
    if (firstProblems.length < 20) firstProblems.push(p);
  };
  const start = Date.now();
  const end = start + opts.seconds * 1000;
  let rssWarm = 0;
  let warmRequests = 0;
  const warmAt = start + opts.warmupSeconds * 1000;

  const client = async (index: number) => {
    const conn = new HttpConn(port);
    const g = new Client(server.grpc, grpc.credentials.createInsecure()) as unknown as Obj;
    const stream = opts.protocols.includes('grpc-stream') ? new GrpcStream(g) : undefined;
    const unary = (m: Obj) => new Promise<Obj>((resolve, reject) => g.ModelInfer(m, (e: Error | null, r: Obj) => (e ? reject(e) : resolve(r))));
    try {
      for (let i = 0; Date.now() < end; i++) {
        const model = opts.models[(index + i) % opts.models.length]!;
        const protocol = opts.protocols[(index * 7 + i) % opts.protocols.length]!;
        const c = builders[model]!();
        let out: Outputs;
        try {
          switch (protocol) {
            case 'http-json': out = await httpJson(conn, c); break;
            case 'http-binary': out = await httpBinary(conn, c); break;
            case 'grpc': out = grpcOutputs(await unary(grpcMessage(c, `u${index}-${i}`))); break;
            default: out = grpcOutputs(await stream!.infer(c));
          }
        } catch (err) {
          errors++;
          problem(`${model} over ${protocol}: ${(err as Error).message}`);
          continue;
        } finally {
          requests++;
          byModel[model] = (byModel[model] ?? 0) + 1;
          byProtocol[protocol] = (byProtocol[protocol] ?? 0) + 1;
        }
        const wrong = c.check(out);
        if (wrong) {
          mismatches++;
          problem(`${model} over ${protocol}: ${wrong}`);
        }
      }
    } finally {
      stream?.end();
      conn.close();
      (g as unknown as grpc.Client).close();
    }
  };

  const ticker = setInterval(() => {
    const s = Math.round((Date.now() - start) / 1000);
    void server.rss().then((rss) => log(`  ${s}s: ${requests} requests, ${errors} errors, ${mismatches} mismatches, server RSS ${mb(rss)} MiB`));
  }, 10_000);
  const warm = setTimeout(() => {
    warmRequests = requests;
    void server.rss().then((rss) => (rssWarm = rss));
  }, opts.warmupSeconds * 1000);
  try {
    await Promise.all(Array.from({ length: opts.clients }, (_, i) => client(i)));
  } finally {
    clearInterval(ticker);
    clearTimeout(warm);
  }
  const rssEnd = await server.rss();
  if (rssWarm === 0) rssWarm = rssEnd;
  const seconds = (Date.now() - Math.min(warmAt, Date.now())) / 1000;
  return {
    requests, errors, mismatches, byModel, byProtocol, firstProblems,
    rssStartMb: mb(rssStart), rssWarmMb: mb(rssWarm), rssEndMb: mb(rssEnd),
    growthPct: Math.round(((rssEnd - rssWarm) / rssWarm) * 1000) / 10,
    rps: Math.round((requests - warmRequests) / Math.max(seconds, 1)),
  };
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      clients: { type: 'string', default: '64' },
      seconds: { type: 'string', default: '600' },
      warmup: { type: 'string' },
      models: { type: 'string', default: 'simple,add_sub,simple_string,simple_identity,image_classifier,mlp_batch' },
      protocols: { type: 'string', default: PROTOCOLS.join(',') },
    },
  });
  const seconds = Number(a.seconds);
  const opts: SoakOptions = {
    clients: Number(a.clients), seconds, warmupSeconds: a.warmup ? Number(a.warmup) : Math.min(30, Math.max(2, seconds / 10)),
    models: a.models!.split(','), protocols: a.protocols!.split(',') as Protocol[],
  };
  for (const m of opts.models) if (!builders[m]) throw new Error(`no soak case for model '${m}' (known: ${Object.keys(builders).join(', ')})`);
  for (const p of opts.protocols) if (!PROTOCOLS.includes(p)) throw new Error(`unknown protocol '${p}' (known: ${PROTOCOLS.join(', ')})`);
  const server = await spawnServer();
  console.log(`soak: ${opts.clients} clients for ${seconds} s (warm-up ${opts.warmupSeconds} s), models ${opts.models.join(', ')}, protocols ${opts.protocols.join(', ')}`);
  let report: SoakReport;
  try {
    report = await runSoak(server, opts);
  } finally {
    await server.stop();
  }
  console.log(`requests ${report.requests} (${report.rps}/s after warm-up), errors ${report.errors}, mismatches ${report.mismatches}`);
  console.log(`by model: ${JSON.stringify(report.byModel)}`);
  console.log(`by protocol: ${JSON.stringify(report.byProtocol)}`);
  console.log(`server RSS: start ${report.rssStartMb} MiB, after warm-up ${report.rssWarmMb} MiB, end ${report.rssEndMb} MiB (${report.growthPct >= 0 ? '+' : ''}${report.growthPct} % after warm-up)`);
  for (const p of report.firstProblems) console.log(`  ${p}`);
  process.exitCode = report.errors > 0 || report.mismatches > 0 || report.growthPct >= 5 ? 1 : 0;
}

if (process.argv[2] === '--serve') await serve(process.argv[3]!, JSON.parse(process.argv[4] ?? '{}'));
else if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
