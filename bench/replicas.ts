/**
 * Replicas behind a real load balancer (issues 15 and 19): N `tsi-node serve` processes behind
 * Debian's HAProxy, an HTTP/1.1 frontend and a gRPC (h2) frontend, servers health-checked on
 * GET /v2/health/ready. Two measurements:
 *  - rolling restarts under load: HTTP and gRPC clients send `simple` through HAProxy, every answer
 *    checked against its own random inputs (OUTPUT0 = a + b, OUTPUT1 = a − b), while each replica in
 *    turn gets SIGTERM, drains in phases (not ready for --drain-delay-secs, listeners closed, in-flight
 *    work drained), exits and is started again, as a Kubernetes rolling update does; with HAProxy
 *    not retrying anything (`retries 0`, no retry-on, no redispatch, like kube-proxy) and retrying,
 *    at each client count; printed: requests, failures by kind, each replica's phases and start-up;
 *  - scale-out: the same closed-loop load on `mlp_batch` with 1, 2 and 3 replicas enabled in
 *    HAProxy, in interleaved rounds. On a 2-core machine this shows the mechanism (requests spread,
 *    every replica batching), not linear scaling: one replica's model instance already takes a core.
 * The drain delay must outlast the balancer's detection (here 250 ms checks, one failure marks a
 * server down); --drain-delay-secs 0 shows what is lost without phase a (listeners closing at SIGTERM).
 *
 * Run:   npm run bench:replicas                            (needs `apt-get install haproxy` and a build: npm run build)
 * Flags: --replicas 3  --clients 16,64 (each count: half HTTP/1.1 keep-alive clients, half gRPC calls)
 *        --restarts 3 (full rolling restarts per mode and client count)  --modes no-retries,retries
 *        --drain-delay-secs 1  --exit-timeout-secs 30
 *        --scale-clients 64  --scale-duration 3 (s)  --rounds 3  --skip-rolling  --skip-scale  --json <file>
 * test/node/deploy-replicas.test.ts runs a short rolling restart with these functions.
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { GrpcClient } from '../client/grpc.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function hasHaproxy(): boolean {
  return spawnSync('haproxy', ['-v']).status === 0;
}

/** A repository with copies of the given default models (their .onnx must have been generated). */
export function makeRepository(models: string[]): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), 'tsi-replicas-'));
  for (const m of models) {
    mkdirSync(join(path, m, '1'), { recursive: true });
    copyFileSync(join(ROOT, 'models', m, 'config.pbtxt'), join(path, m, 'config.pbtxt'));
    copyFileSync(join(ROOT, 'models', m, '1', 'model.onnx'), join(path, m, '1', 'model.onnx'));
  }
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

async function isReady(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/v2/health/ready`, { signal: AbortSignal.timeout(1000) })).status === 200;
  } catch {
    return false;
  }
}

/** One `tsi-node serve` process (the compiled CLI, as the image runs it) on fixed ports, restartable. */
export class Replica {
  child?: ChildProcess;
  private log: string[] = [];
  constructor(readonly name: string, readonly httpPort: number, readonly grpcPort: number, readonly metricsPort: number,
    private readonly repo: string, private readonly shutdown: ShutdownFlags) {}

  /** Starts the process; resolves with the ms from spawn until /v2/health/ready answers 200. */
  async start(): Promise<number> {
    const cli = join(ROOT, 'bin', 'tsi-node.js');
    if (!existsSync(join(ROOT, 'dist', 'runtime-node', 'cli.js'))) throw new Error('dist/ is missing: run `npm run build` first');
    const t0 = performance.now();
    const child = spawn(process.execPath, [cli, 'serve', `--model-repository=${this.repo}`,
      '--http-address=127.0.0.1', `--http-port=${this.httpPort}`, '--grpc-address=127.0.0.1', `--grpc-port=${this.grpcPort}`,
      `--metrics-port=${this.metricsPort}`, '--allow-gpu-metrics=false', `--exit-timeout-secs=${this.shutdown.exitTimeoutSecs}`,
      `--drain-delay-secs=${this.shutdown.drainDelaySecs}`],
    { stdio: ['ignore', 'ignore', 'pipe'], cwd: ROOT });
    this.child = child;
    this.log = [];
    child.stderr!.on('data', (d: Buffer) => this.log.push(d.toString()));
    let exited: number | null | undefined;
    child.once('exit', (code) => (exited = code));
    for (;;) {
      if (exited !== undefined) throw new Error(`${this.name} exited with ${exited} during start-up:\n${this.log.join('').slice(-2000)}`);
      if (await isReady(this.httpPort)) return performance.now() - t0;
      await sleep(20);
    }
  }

  /**
   * SIGTERM; resolves with the ms until the process exited, its exit code, and the phases its log
   * reported: not ready until the listeners closed, in-flight work drained, models unloaded.
   */
  async stop(): Promise<{ drainMs: number; code: number | null; phases?: { notReadyMs: number; drainedMs: number; unloadMs: number } }> {
    const child = this.child!;
    const t0 = performance.now();
    const code = await new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      child.once('exit', (c) => resolve(c));
      child.kill('SIGTERM');
    });
    const log = this.log.join('');
    const b = /shutdown \(b\) at ([\d.]+) s/.exec(log);
    const c = /drained in ([\d.]+) s, models unloaded in ([\d.]+) s/.exec(log);
    const phases = b && c ? { notReadyMs: 1000 * Number(b[1]), drainedMs: 1000 * Number(c[1]), unloadMs: 1000 * Number(c[2]) } : undefined;
    return { drainMs: performance.now() - t0, code, phases };
  }

  kill(): void {
    if (this.child && this.child.exitCode === null) this.child.kill('SIGKILL');
  }

  recentLog(): string {
    return this.log.join('').slice(-2000);
  }
}

/** `tsi-node serve`'s shutdown flags for the replicas. */
export interface ShutdownFlags {
  drainDelaySecs: number;
  exitTimeoutSecs: number;
}

export async function startReplicas(n: number, repo: string, shutdown: ShutdownFlags): Promise<{ replicas: Replica[]; startupMs: number[] }> {
  const replicas: Replica[] = [];
  for (let i = 0; i < n; i++) replicas.push(new Replica(`r${i}`, await freePort(), await freePort(), await freePort(), repo, shutdown));
  const startupMs = await Promise.all(replicas.map((r) => r.start()));
  return { replicas, startupMs };
}

/**
 * The HAProxy configuration: round robin, health checks on GET /v2/health/ready every 250 ms (one
 * failure marks a server down, one success brings it back), gRPC servers checked on their HTTP port.
 * With `retries`, requests that met a refused connection, a connection closed without an answer, or a
 * 503 go to another server; without, nothing is retried (`retries 0`, no retry-on, no redispatch):
 * what a client behind kube-proxy gets, and what tsi's drain phases must make lossless by themselves.
 */
export function haproxyConfig(replicas: Replica[], ports: { http: number; grpc: number }, socket: string, retries: boolean): string {
  const retry = retries
    ? ['  retries 3', '  option redispatch 1', '  retry-on conn-failure empty-response response-timeout 503']
    : ['  retries 0', '  no option redispatch'];
  // A check times out after 2 s, not after its 250 ms interval (HAProxy's default): on a loaded machine
  // a slow answer would otherwise take healthy replicas out too, all at once; not ready (400) or a
  // refused connection still takes one out at the first check.
  const check = ['  option httpchk', '  http-check send meth GET uri /v2/health/ready', '  http-check expect status 200',
    '  timeout check 2s', '  default-server inter 250ms fastinter 250ms downinter 250ms fall 1 rise 1'];
  return [
    'global',
    `  stats socket ${socket} level admin`,
    '  nbthread 1',
    '  maxconn 4096',
    'defaults',
    '  mode http',
    '  timeout connect 1s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  timeout http-keep-alive 60s',
    ...retry,
    'frontend http_in',
    `  bind 127.0.0.1:${ports.http}`,
    '  default_backend tsi_http',
    'frontend grpc_in',
    `  bind 127.0.0.1:${ports.grpc} proto h2`,
    '  default_backend tsi_grpc',
    'backend tsi_http',
    '  balance roundrobin',
    ...check,
    ...replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.httpPort} check`),
    'backend tsi_grpc',
    '  balance roundrobin',
    ...check,
    ...replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.grpcPort} proto h2 check port ${r.httpPort} check-proto h1`),
    '',
  ].join('\n');
}

export class Haproxy {
  private constructor(readonly child: ChildProcess, readonly httpPort: number, readonly grpcPort: number,
    private readonly socket: string, private readonly work: string, private readonly log: string[]) {}

  static async start(replicas: Replica[], opts: { retries: boolean }): Promise<Haproxy> {
    const work = mkdtempSync(join(tmpdir(), 'tsi-haproxy-'));
    const ports = { http: await freePort(), grpc: await freePort() };
    const socket = join(work, 'admin.sock');
    const cfg = join(work, 'haproxy.cfg');
    writeFileSync(cfg, haproxyConfig(replicas, ports, socket, opts.retries));
    const log: string[] = [];
    const child = spawn('haproxy', ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => log.push(d.toString()));
    child.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
    const h = new Haproxy(child, ports.http, ports.grpc, socket, work, log);
    const t0 = Date.now();
    while (!(await h.allUp(replicas.map((r) => r.name)).catch(() => false))) {
      if (child.exitCode !== null || Date.now() - t0 > 10_000) throw new Error(`HAProxy did not come up:\n${log.join('')}`);
      await sleep(50);
    }
    return h;
  }

  /** Times HAProxy took a server out, by reason (its own log lines). */
  downReasons(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const m of this.log.join('').matchAll(/Server (\S+) is DOWN, reason: ([^,]+)/g)) {
      const k = m[2]!.trim();
      out[k] = (out[k] ?? 0) + 1;
    }
    return out;
  }

  /** One command on the admin socket. */
  command(cmd: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = connect(this.socket);
      let out = '';
      s.on('data', (d) => (out += d));
      s.on('end', () => resolve(out));
      s.on('error', reject);
      s.end(`${cmd}\n`);
    });
  }

  /** Server status by backend/server, from `show stat` (UP, DOWN, MAINT, ...). */
  async status(): Promise<Map<string, string>> {
    const csv = (await this.command('show stat')).trim().split('\n');
    const cols = csv[0]!.replace(/^# /, '').split(',');
    const [px, sv, st] = ['pxname', 'svname', 'status'].map((c) => cols.indexOf(c));
    return new Map(csv.slice(1).map((l) => l.split(',')).filter((f) => !['FRONTEND', 'BACKEND'].includes(f[sv!]!))
      .map((f) => [`${f[px!]}/${f[sv!]}`, f[st!]!.split(' ')[0]!]));
  }

  async allUp(names: string[]): Promise<boolean> {
    const s = await this.status();
    return names.every((n) => s.get(`tsi_http/${n}`) === 'UP' && s.get(`tsi_grpc/${n}`) === 'UP');
  }

  /** Only the first `n` servers get traffic (the others in maintenance). */
  async enableFirst(replicas: Replica[], n: number): Promise<void> {
    for (const [i, r] of replicas.entries()) {
      for (const be of ['tsi_http', 'tsi_grpc']) await this.command(`${i < n ? 'enable' : 'disable'} server ${be}/${r.name}`);
    }
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGTERM');
      await exited;
    }
    rmSync(this.work, { recursive: true, force: true });
  }
}

// ---- load: closed loops over HTTP/1.1 keep-alive and gRPC, every answer checked ----

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

export interface RestartTiming {
  replica: string;
  /** SIGTERM until the process exited. */
  drainMs: number;
  /** SIGTERM until HAProxy had it out of both backends (undefined: not before it exited). */
  outOfRotationMs?: number;
  /** As the replica logged them: not ready (phase a), in-flight work drained (c), models unloaded. */
  phases?: { notReadyMs: number; drainedMs: number; unloadMs: number };
  exitCode: number | null;
  /** Spawn until /v2/health/ready answered 200. */
  startupMs: number;
  /** Ready until HAProxy had it UP again in both backends. */
  backInRotationMs: number;
}

/** Each replica in turn: SIGTERM ⇒ exit ⇒ started again ⇒ ready ⇒ back in HAProxy; then the next. */
export async function rollingRestart(replicas: Replica[], h: Haproxy): Promise<RestartTiming[]> {
  const out: RestartTiming[] = [];
  for (const r of replicas) {
    const t1 = performance.now();
    const stopping = r.stop();
    // How long HAProxy took to take it out of both backends: the drain delay has to be longer.
    let outOfRotationMs: number | undefined;
    void (async () => {
      for (let settled = false; !settled;) {
        const st = await h.status().catch(() => undefined);
        if (st && st.get(`tsi_http/${r.name}`) !== 'UP' && st.get(`tsi_grpc/${r.name}`) !== 'UP') outOfRotationMs = performance.now() - t1;
        settled = outOfRotationMs !== undefined || r.child?.exitCode !== null;
        await sleep(10);
      }
    })();
    const { drainMs, code, phases } = await stopping;
    const startupMs = await r.start();
    const t0 = performance.now();
    while (!(await h.allUp([r.name]))) await sleep(25);
    out.push({ replica: r.name, drainMs, phases, outOfRotationMs, exitCode: code, startupMs, backInRotationMs: performance.now() - t0 });
  }
  return out;
}

/** A replica's inference (rows) and execution (batches) counts for one model, from its statistics. */
async function counts(r: Replica, model: string): Promise<{ rows: number; batches: number }> {
  const j = await (await fetch(`http://127.0.0.1:${r.httpPort}/v2/models/${model}/stats`)).json() as { model_stats: { inference_count: number; execution_count: number }[] };
  const s = j.model_stats.reduce((a, m) => ({ rows: a.rows + m.inference_count, batches: a.batches + m.execution_count }), { rows: 0, batches: 0 });
  return s;
}

// ---- the bench ----

const fmt = (s: LoadStats) => `${s.requests} requests, ${s.ok} right, ${s.requests - s.ok} failed${Object.keys(s.failures).length ? ` ${JSON.stringify(s.failures)}` : ''}`;

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      replicas: { type: 'string', default: '3' }, clients: { type: 'string', default: '16,64' },
      restarts: { type: 'string', default: '3' }, modes: { type: 'string', default: 'no-retries,retries' },
      'drain-delay-secs': { type: 'string', default: '1' }, 'exit-timeout-secs': { type: 'string', default: '30' },
      'scale-clients': { type: 'string', default: '64' }, 'scale-duration': { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' },
      'skip-rolling': { type: 'boolean', default: false }, 'skip-scale': { type: 'boolean', default: false }, json: { type: 'string' },
    },
  });
  if (!hasHaproxy()) throw new Error('haproxy is not installed (apt-get install haproxy)');
  const n = Number(a.replicas);
  const shutdown = { drainDelaySecs: Number(a['drain-delay-secs']), exitTimeoutSecs: Number(a['exit-timeout-secs']) };
  const repo = makeRepository(['simple', 'mlp_batch']);
  const { replicas, startupMs } = await startReplicas(n, repo.path, shutdown);
  const results: Record<string, unknown> = { replicas: n, shutdown, startupMs };
  process.stdout.write(`${n} replicas up (start-up ${startupMs.map((x) => x.toFixed(0)).join(', ')} ms), HAProxy ${spawnSync('haproxy', ['-v']).stdout.toString().split('\n')[0]}, ` +
    `--drain-delay-secs=${shutdown.drainDelaySecs} --exit-timeout-secs=${shutdown.exitTimeoutSecs}\n`);
  let h: Haproxy | undefined;
  try {
    if (!a['skip-rolling']) {
      const rolling: Record<string, unknown>[] = [];
      process.stdout.write(`\nrolling restarts: ${a.restarts} full rolling restarts of ${n} replicas per row; each count of clients is half HTTP/1.1 keep-alive clients, half concurrent gRPC calls (4 per h2 connection)\n`);
      process.stdout.write('  HAProxy     clients  seconds  HTTP requests  gRPC requests  failed  mismatched  failures by kind\n');
      const allTimings: RestartTiming[] = [];
      for (const mode of a.modes!.split(',')) {
        h = await Haproxy.start(replicas, { retries: mode === 'retries' });
        for (const clients of a.clients!.split(',').map(Number)) {
          const load = startLoad(h, { httpClients: Math.ceil(clients / 2), grpcClients: Math.floor(clients / 2) });
          await sleep(1000);
          for (let k = 0; k < Number(a.restarts); k++) allTimings.push(...await rollingRestart(replicas, h));
          await sleep(1000);
          const { http, grpc } = await load.finish();
          const failures: Record<string, number> = {};
          for (const [p, st] of [['http', http], ['grpc', grpc]] as const) {
            for (const [kind, c] of Object.entries(st.failures)) failures[`${p}: ${kind}`] = c;
          }
          const failed = http.requests - http.ok + grpc.requests - grpc.ok;
          const mismatched = (http.failures.mismatch ?? 0) + (grpc.failures.mismatch ?? 0);
          process.stdout.write(`  ${mode.padEnd(10)}  ${String(clients).padStart(7)}  ${http.seconds.toFixed(1).padStart(7)}  ${String(http.requests).padStart(13)}  ${String(grpc.requests).padStart(13)}  ${String(failed).padStart(6)}  ${String(mismatched).padStart(10)}  ${Object.keys(failures).length ? JSON.stringify(failures) : '-'}\n`);
          rolling.push({ mode, clients, http, grpc, failed, mismatched });
        }
        process.stdout.write(`  ${mode}: HAProxy took servers out ${JSON.stringify(h.downReasons())}\n`);
        await h.stop();
        h = undefined;
      }
      const exits = [...new Set(allTimings.map((t) => t.exitCode))];
      const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? NaN;
      const range = (xs: number[]) => `${med(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`;
      const ph = allTimings.filter((t) => t.phases).map((t) => t.phases!);
      process.stdout.write(`\n  ${allTimings.length} replica restarts, exit codes ${exits.join(', ')}; median (min-max) ms:\n`);
      process.stdout.write(`    SIGTERM to exit ${range(allTimings.map((t) => t.drainMs))}: not ready while serving ${range(ph.map((p) => p.notReadyMs))}, ` +
        `in-flight drained ${range(ph.map((p) => p.drainedMs))}, models unloaded ${range(ph.map((p) => p.unloadMs))}\n`);
      const outs = allTimings.map((t) => t.outOfRotationMs);
      process.stdout.write(`    SIGTERM to out of rotation in HAProxy ${range(outs.filter((x) => x !== undefined) as number[])}${outs.includes(undefined) ? `, ${outs.filter((x) => x === undefined).length} not before exit` : ''}\n`);
      process.stdout.write(`    start-up to ready ${range(allTimings.map((t) => t.startupMs))}, then UP in HAProxy ${range(allTimings.map((t) => t.backInRotationMs))}\n`);
      for (const r of replicas) {
        const ts = allTimings.filter((t) => t.replica === r.name);
        process.stdout.write(`    ${r.name}: SIGTERM to exit ${ts.map((t) => t.drainMs.toFixed(0)).join(', ')}; start-up ${ts.map((t) => t.startupMs.toFixed(0)).join(', ')}\n`);
      }
      results.rolling = { rows: rolling, timings: allTimings };
    }
    h = await Haproxy.start(replicas, { retries: true });
    if (!a['skip-scale']) {
      const probe = await mlpProbes(replicas[0]!.httpPort);
      const perN: Record<number, number[]> = {};
      const batch: Record<number, number[]> = {};
      const share: Record<number, number[][]> = {};
      const failures: Record<string, number> = {};
      for (let round = 0; round < Number(a.rounds); round++) {
        for (let k = 1; k <= n; k++) {
          await h.enableFirst(replicas, k);
          await sleep(300);
          const load = startLoad(h, { httpClients: Number(a['scale-clients']), grpcClients: 0, model: 'mlp_batch', probe });
          await sleep(500);
          const before = load.http.ok;
          const c0 = await Promise.all(replicas.slice(0, k).map((r) => counts(r, 'mlp_batch')));
          const t0 = performance.now();
          await sleep(Number(a['scale-duration']) * 1000);
          const rps = (load.http.ok - before) / ((performance.now() - t0) / 1000);
          const c1 = await Promise.all(replicas.slice(0, k).map((r) => counts(r, 'mlp_batch')));
          const rows = c1.map((c, i) => c.rows - c0[i]!.rows);
          const total = rows.reduce((x, y) => x + y, 0);
          (batch[k] ??= []).push(total / c1.reduce((x, c, i) => x + c.batches - c0[i]!.batches, 0));
          (share[k] ??= []).push(rows.map((x) => x / total));
          const { http } = await load.finish();
          for (const [kind, c] of Object.entries(http.failures)) failures[kind] = (failures[kind] ?? 0) + c;
          (perN[k] ??= []).push(rps);
        }
      }
      await h.enableFirst(replicas, n);
      const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
      process.stdout.write(`\nscale-out on mlp_batch, ${a['scale-clients']} HTTP clients through HAProxy, ${a.rounds} interleaved rounds of ${a['scale-duration']} s (medians)\n`);
      process.stdout.write('  replicas  req/s  vs 1  mean batch  share of rows per replica  rounds (req/s)\n');
      for (let k = 1; k <= n; k++) {
        const sh = share[k]!.at(-1)!.map((x) => `${(100 * x).toFixed(0)}%`).join('/');
        process.stdout.write(`  ${String(k).padStart(8)}  ${median(perN[k]!).toFixed(0).padStart(5)}  ${(median(perN[k]!) / median(perN[1]!)).toFixed(2)}×  ${median(batch[k]!).toFixed(1).padStart(10)}  ${sh.padStart(25)}  ${perN[k]!.map((x) => x.toFixed(0)).join(', ')}\n`);
      }
      process.stdout.write(`  failed: ${JSON.stringify(failures)}; cores here: ${(await import('node:os')).availableParallelism()}\n`);
      results.scale = { perN, batch, share, failures };
    }
  } finally {
    await h?.stop();
    await Promise.all(replicas.map((r) => r.child && r.child.exitCode === null ? r.stop() : undefined));
    repo.cleanup();
  }
  if (a.json) writeFileSync(a.json, JSON.stringify(results, null, 2));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    process.stderr.write(`${(err as Error).stack}\n`);
    process.exit(1);
  });
}
