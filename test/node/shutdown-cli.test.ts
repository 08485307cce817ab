/**
 * `tsi-node serve` on SIGTERM, in a child process as an orchestrator runs it: (a) for the drain delay
 * it says not ready while inference is still answered on new and kept-alive connections, and idle
 * keep-alive connections stay open; (b) then new connections are refused, idle ones are closed, and a
 * request in flight gets its answer with `Connection: close`; (c) it drains, unloads and exits 0,
 * logging each phase. A second signal exits at once (128 + signal) and says what was cut short.
 */

import { afterEach, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { PY_FIXTURES } from '../helpers/python-server.js';
import { ROOT, tempRepo } from '../helpers/server.js';

// Answers X after sleeping X milliseconds: each request says how long it stays in flight, and the
// model logs when it starts one (the test's sign that the request is running).
const files = {
  'nap/config.pbtxt': 'name: "nap"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\ninstance_group [{ count: 4 kind: KIND_CPU }]\n',
  'nap/1/model.js': `export default class {
    initialize(args) {
      this.log = args.log;
    }
    async execute(requests) {
      const ms = Math.max(...requests.map((r) => r.input('X').data[0]));
      this.log.info('nap: running for ' + ms + ' ms');
      await new Promise((r) => setTimeout(r, ms));
      return requests.map((r) => ({ outputs: { Y: r.input('X').data } }));
    }
  }`,
};

interface Served {
  child: ChildProcess;
  port: number;
  log: () => string;
  /** Resolves once the log matches. */
  until(re: RegExp): Promise<void>;
  exit: Promise<number | null>;
}

const children: ChildProcess[] = [];
let repo: ReturnType<typeof tempRepo> | undefined;

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
  repo?.cleanup();
});

async function serve(extra: string[], opts: { files?: Record<string, string>; detached?: boolean } = {}): Promise<Served> {
  repo = tempRepo({ ...files, ...opts.files });
  const args = ['serve', '--model-repository', repo.path, '--http-port', '0', '--http-address', '127.0.0.1', '--grpc-port', '0',
    '--grpc-address', '127.0.0.1', '--allow-metrics', 'false', ...extra];
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
  // detached: a process group of its own, as systemd or a shell job gives it.
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'], detached: opts.detached });
  children.push(child);
  let err = '';
  const waiters: (() => void)[] = [];
  child.stderr!.on('data', (d) => {
    err += d;
    for (const w of waiters.splice(0)) w();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (c, sig) => resolve(c ?? (sig ? -1 : null))));
  const until = async (re: RegExp) => {
    while (!re.test(err)) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`exited (${child.exitCode ?? child.signalCode}) before ${re}: ${err}`);
      await Promise.race([new Promise<void>((r) => waiters.push(r)), exit]);
    }
  };
  await until(/Started HTTPService at 127\.0\.0\.1:(\d+)/);
  const port = Number(/Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err)![1]);
  return { child, port, log: () => err, until, exit };
}

/** A keep-alive HTTP/1.1 connection sending one request at a time. */
class Conn {
  private buf = Buffer.alloc(0);
  private waiting?: () => void;
  closed = false;
  readonly opened: Promise<void>;
  private constructor(private readonly socket: Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.waiting?.();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      this.closed = true;
      this.waiting?.();
    });
    this.opened = new Promise((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
  }

  static open(port: number): Conn {
    return new Conn(connect({ port, host: '127.0.0.1' }));
  }

  /** Resolves when the connection is closed. */
  async closedNow(): Promise<void> {
    while (!this.closed) await new Promise<void>((r) => (this.waiting = r));
  }

  async request(method: string, path: string, body?: unknown): Promise<{ status: number; head: string; body: string } | 'closed'> {
    const data = body === undefined ? '' : JSON.stringify(body);
    this.socket.write(`${method} ${path} HTTP/1.1\r\nHost: tsi\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(data)}\r\n\r\n${data}`);
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = this.buf.subarray(0, end).toString('latin1');
        const len = Number(/content-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (this.buf.length >= end + 4 + len) {
          const out = { status: Number(head.slice(9, 12)), head, body: this.buf.subarray(end + 4, end + 4 + len).toString() };
          this.buf = this.buf.subarray(end + 4 + len);
          return out;
        }
      }
      if (this.closed) return 'closed';
      await new Promise<void>((r) => (this.waiting = r));
    }
  }
}

const nap = (ms: number) => ({ inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [ms] }] });

describe('tsi-node serve on SIGTERM', () => {
  it('is not ready but serves for the drain delay, then refuses new connections, answers what is in flight with Connection: close, and exits 0', async () => {
    const s = await serve(['--drain-delay-secs', '2', '--exit-timeout-secs', '10']);
    const idle = Conn.open(s.port);
    expect((await idle.request('GET', '/v2/health/ready')) as object).toMatchObject({ status: 200 });
    s.child.kill('SIGTERM');
    await s.until(/shutdown \(a\)/);
    const t0 = performance.now();
    // Phase a: not ready, live, and inference answered on a new connection and on the kept-alive one.
    const fresh = Conn.open(s.port);
    expect((await fresh.request('GET', '/v2/health/ready')) as object).toMatchObject({ status: 400 });
    expect((await fresh.request('GET', '/v2/health/live')) as object).toMatchObject({ status: 200 });
    const a = await fresh.request('POST', '/v2/models/nap/infer', nap(1));
    expect(a).toMatchObject({ status: 200 });
    expect((a as { head: string }).head).toMatch(/connection: keep-alive/i);
    const b = await idle.request('POST', '/v2/models/nap/infer', nap(2));
    expect(b).toMatchObject({ status: 200 });
    expect(JSON.parse((b as { body: string }).body).outputs[0].data).toEqual([2]);
    expect(idle.closed).toBe(false);
    // A request still running when the delay ends (at 2 s): it outlives phase b.
    const busy = Conn.open(s.port);
    await busy.opened;
    const inFlight = busy.request('POST', '/v2/models/nap/infer', nap(2000 - (performance.now() - t0) + 800));
    await s.until(/shutdown \(b\)/);
    // By the server's clock, phase b began when the drain delay ended.
    expect(Number(/shutdown \(b\) at ([\d.]+) s/.exec(s.log())![1])).toBeGreaterThanOrEqual(2);
    // Phase b: idle connections closed, new ones refused, the one in flight answered and then closed.
    await idle.closedNow();
    await fresh.closedNow();
    await expect(Conn.open(s.port).opened).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    const answer = await inFlight;
    expect(answer).toMatchObject({ status: 200 });
    expect((answer as { head: string }).head).toMatch(/connection: close/i);
    await busy.closedNow();
    expect(await s.exit).toBe(0);
    const log = s.log();
    expect(log).toMatch(/SIGTERM received: shutting down in phases \(drain delay 2 s/);
    expect(log).toMatch(/shutdown \(c\) at [\d.]+ s: 1 in-flight request\(s\) and 0 sequence\(s\) drained in/);
    expect(log).toMatch(/shutdown done in/);
    expect(log).toMatch(/all models unloaded; exiting/);
  }, 60_000);

  it('exits at once on a second signal, saying what was cut short', async () => {
    const s = await serve([]);
    s.child.kill('SIGTERM');
    await s.until(/shutdown \(a\)/);
    const c = Conn.open(s.port);
    // A request that would run for a minute: the server exits long before it ends.
    const pending = c.request('POST', '/v2/models/nap/infer', nap(60_000));
    await s.until(/nap: running for 60000 ms/);
    s.child.kill('SIGINT');
    expect(await s.exit).toBe(130);
    expect(await pending).toBe('closed');
    expect(s.log()).toMatch(/SIGINT received again: exiting now; shutdown cut short during the drain delay \(a\), [\d.]+ s in: 1 in-flight request\(s\), 0 sequence\(s\) in progress and 1 open HTTP connection\(s\) dropped/);
  }, 60_000);
});

describe('tsi-node serve stopped by a signal to its whole process group (systemd, `kill -- -PID`, Ctrl-C)', () => {
  // Two Python processes; each request sleeps MS ms and answers the pid that ran it.
  const sleepPy = {
    'sleep_py/config.pbtxt': readFileSync(join(PY_FIXTURES, 'sleep_py', 'config.pbtxt'), 'utf8'),
    'sleep_py/1/model.py': readFileSync(join(PY_FIXTURES, 'sleep_py', '1', 'model.py'), 'utf8'),
  };
  const sleep = (ms: number) => ({ inputs: [{ name: 'MS', datatype: 'INT32', shape: [1], data: [ms] }] });
  const pidOf = (r: Awaited<ReturnType<Conn['request']>>) => {
    expect(r).toMatchObject({ status: 200 });
    return Number(JSON.parse((r as { body: string }).body).outputs[0].data[0]);
  };

  it('keeps its Python models serving through the drain (the stubs ignore the signal, as Triton\'s do) and exits 0', async () => {
    const s = await serve(['--drain-delay-secs', '1', '--exit-timeout-secs', '10'], { files: sleepPy, detached: true });
    const c = Conn.open(s.port);
    const before = new Set([pidOf(await c.request('POST', '/v2/models/sleep_py/infer', sleep(1)))]);
    process.kill(-s.child.pid!, 'SIGTERM');
    await s.until(/shutdown \(a\)/);
    // The stubs got the SIGTERM too: still the processes that answered before it (two instances).
    const during = await Promise.all([1, 2].map(() => Conn.open(s.port).request('POST', '/v2/models/sleep_py/infer', sleep(200))));
    const pids = new Set(during.map(pidOf));
    expect(pids.size).toBe(2);
    expect([...before].every((p) => pids.has(p))).toBe(true);
    expect(await s.exit).toBe(0);
    expect(s.log()).not.toMatch(/starting a new one|killed by signal SIGTERM/);
  }, 60_000);

  it('does not restart a Python process that exits while the server is stopping, and logs that it stopped', async () => {
    const s = await serve(['--drain-delay-secs', '2', '--exit-timeout-secs', '10'], { files: sleepPy, detached: true });
    const c = Conn.open(s.port);
    const pid = pidOf(await c.request('POST', '/v2/models/sleep_py/infer', sleep(1)));
    process.kill(-s.child.pid!, 'SIGTERM');
    await s.until(/shutdown \(a\)/);
    process.kill(pid, 'SIGKILL');
    await s.until(new RegExp(`the Python process \\(pid ${pid}\\) was killed by signal SIGKILL while the server is stopping; it is not restarted`));
    expect(await s.exit).toBe(0);
    expect(s.log()).not.toMatch(/starting a new one/);
  }, 60_000);
});

