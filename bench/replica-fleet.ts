/**
 * The fleet of bench/replicas.ts: `tsi-node serve` processes (the compiled CLI, as the image runs it)
 * on fixed ports, each stopped with SIGTERM and started again, and Debian's HAProxy in front of them
 * with an HTTP/1.1 and a gRPC (h2) frontend, servers health-checked on GET /v2/health/ready and read
 * back through its stats socket; a rolling restart takes each replica out and back in turn, timing
 * each phase. test/node/deploy-replicas.test.ts drives these pieces directly.
 */

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
export async function counts(r: Replica, model: string): Promise<{ rows: number; batches: number }> {
  const j = await (await fetch(`http://127.0.0.1:${r.httpPort}/v2/models/${model}/stats`)).json() as { model_stats: { inference_count: number; execution_count: number }[] };
  const s = j.model_stats.reduce((a, m) => ({ rows: a.rows + m.inference_count, batches: a.batches + m.execution_count }), { rows: 0, batches: 0 });
  return s;
}
