/**
 * Triton's http_request_many_chunks check, against the real CLI (bin/tsi-node.js, built) in its own
 * process: a raw-binary infer request sent as a million one-byte chunks is refused once it passes
 * 65,536 chunks, and 100 more such requests leave the server's resident memory within 1 MiB of where
 * it settled after the first ones (Triton's bound). tsi used to keep one view object per chunk; they
 * outlived the young generation, and RSS grew by ~50 MiB over the 100 requests.
 *
 * The server is started as a user starts it, with no V8 flags: `serve` re-executes itself in place
 * with V8's young generation at a fixed size (runtime-node/young-generation.ts), which the test sees
 * in the same PID's command line. Without it V8's resizing alone moved RSS by 10-24 MiB either way.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { MODELS, ROOT } from '../helpers/server.js';
import { YOUNG_GENERATION_FLAGS, youngGenerationPlan } from '../../runtime-node/young-generation.js';

const BIN = join(ROOT, 'bin', 'tsi-node.js');
const TOO_MANY = 'Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks.';
const MIB = 1 << 20;
const built = existsSync(join(ROOT, 'dist', 'runtime-node', 'cli.js'));

let child: ChildProcess;
let port = 0;
let err = '';

beforeAll(async () => {
  if (!built) return;
  // As a user (and Triton's L0_http) starts it: no V8 flags of the test's own.
  const env = { ...process.env };
  delete env.TSI_YOUNG_GENERATION;
  delete env.NODE_OPTIONS;
  // Through a link named tritonserver, as the qa harness's shim runs it: `ps | grep tritonserver` must
  // still find the server after it re-executed itself.
  const link = join(mkdtempSync(join(tmpdir(), 'tsi-rss-')), 'tritonserver');
  symlinkSync(process.execPath, link);
  child = spawn(link, [BIN, 'serve', '--model-repository', MODELS, '--http-address', '127.0.0.1', '--http-port', '0',
    '--allow-grpc', 'false', '--allow-metrics', 'false', '--model-control-mode', 'explicit', '--load-model', 'simple',
    // Triton's qa passes its backend folder to every server (L0_http's first one too).
    '--backend-directory', '/opt/tritonserver/backends'],
  { stdio: ['ignore', 'ignore', 'pipe'], env });
  port = await new Promise<number>((resolve, reject) => {
    child.stderr!.on('data', (d) => {
      err += d;
      const m = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (c) => reject(new Error(`tsi-node exited with ${c}: ${err}`)));
  });
}, 120_000);

afterAll(() => {
  child?.kill('SIGKILL');
});

const rss = (): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) * 1024;

/** One request of `chunks` one-byte chunks, written as the client can; resolves with the whole answer. */
function manyChunks(chunks: number, path = '/v2/models/simple/infer'): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let answer = '';
    // As Triton's client does: read until the server closes the connection.
    sock.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    sock.on('error', () => {});
    sock.once('close', () => resolve(answer));
    sock.write(`POST ${path} HTTP/1.1\r\nHost: tsi\r\nInference-Header-Content-Length: 0\r\n`
      + 'Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n');
    const piece = Buffer.from('1\r\nA\r\n'.repeat(10_000));
    let sent = 0;
    const more = (): void => {
      while (sent < chunks && !sock.destroyed) {
        sent += 10_000;
        if (!sock.write(piece)) {
          sock.once('drain', more);
          return;
        }
      }
      if (!sock.destroyed) sock.end('0\r\n\r\n');
    };
    more();
  });
}

async function settledRss(): Promise<number> {
  let prev = rss();
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const now = rss();
    if (Math.abs(now - prev) < MIB / 4) return now;
    prev = now;
  }
  return prev;
}

describe('many one-byte chunks (Triton L0_http http_request_many_chunks)', () => {
  it.skipIf(!built && !process.env.CI)('serve re-executed itself, same PID, with the young generation fixed', () => {
    expect(built, 'dist/ is built (npm run build)').toBe(true);
    const cmdline = readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0');
    expect(cmdline.slice(1, 3)).toEqual(YOUNG_GENERATION_FLAGS);
    expect(cmdline).toContain('serve');
    expect(readFileSync(`/proc/${child.pid}/comm`, 'utf8').trim()).toBe('tritonserver');
    expect(err).toContain("--backend-directory /opt/tritonserver/backends is not read: tsi's backends are built in");
  });

  it.skipIf(!built && !process.env.CI).each([
    // infer's own reader, and a route the app reads as a stream (as SageMaker's /models is read).
    '/v2/models/simple/infer', '/v2/models/simple/generate',
  ])('%s: refuses each request past 65,536 chunks, and 100 of them leave RSS within 1 MiB', async (path) => {
    expect(built, 'dist/ is built (npm run build)').toBe(true);
    // Enough requests first for every page of the young generation to have been used.
    for (let i = 0; i < 30; i++) {
      const answer = await manyChunks(1_000_000, path);
      expect(answer.slice(0, 12)).toBe('HTTP/1.1 400');
      expect(answer).toContain(TOO_MANY);
    }
    const before = await settledRss();
    for (let i = 0; i < 100; i++) expect(await manyChunks(1_000_000, path)).toContain(TOO_MANY);
    const growth = (await settledRss()) - before;
    console.log(`RSS before ${(before / MIB).toFixed(1)} MiB, growth over 100 requests ${(growth / MIB).toFixed(2)} MiB`);
    expect(growth).toBeLessThan(MIB);
  }, 300_000);
});

describe('when serve re-executes itself (youngGenerationPlan)', () => {
  const plan = (execArgv: string[], env: NodeJS.ProcessEnv, platform = 'linux') =>
    youngGenerationPlan('/bin/node', execArgv, ['/bin/node', '/x/bin/tsi-node.js', 'serve', '--http-port', '0'], env, platform);

  it('adds the flags before the rest, and marks the environment so it happens once', () => {
    const p = plan(['--enable-source-maps'], { HOME: '/h' });
    expect(p).toEqual({ action: 'exec', file: '/bin/node', argv: ['/bin/node', ...YOUNG_GENERATION_FLAGS, '--enable-source-maps', '/x/bin/tsi-node.js', 'serve', '--http-port', '0'], env: { HOME: '/h', TSI_YOUNG_GENERATION: 'fixed' } });
    expect(plan([], { TSI_YOUNG_GENERATION: 'fixed' }).action).toBe('keep');
  });

  it('runs the new image through the name it was started by, when that is a path (a link named tritonserver stays tritonserver in ps)', () => {
    const argv = ['/opt/tritonserver/bin/tritonserver', '/x/bin/tsi-node.js', 'serve'];
    const linked = youngGenerationPlan('/bin/node', [], argv, {}, 'linux', '/opt/tritonserver/bin/tritonserver');
    expect(linked.action === 'exec' && [linked.file, linked.argv[0]]).toEqual(['/opt/tritonserver/bin/tritonserver', '/opt/tritonserver/bin/tritonserver']);
    // A bare name (found on PATH by the shell) is not a path execve can take: the node binary then.
    const bare = youngGenerationPlan('/bin/node', [], argv, {}, 'linux', 'node');
    expect(bare.action === 'exec' && bare.file).toBe('/bin/node');
  });

  it("keeps the user's choice: off, semi-space flags of their own (argv or NODE_OPTIONS), a forked child, Windows", () => {
    expect(plan([], { TSI_YOUNG_GENERATION: 'off' })).toEqual({ action: 'keep', why: 'TSI_YOUNG_GENERATION=off' });
    expect(plan(['--max-semi-space-size=64'], {}).action).toBe('keep');
    expect(plan([], { NODE_OPTIONS: '--max-old-space-size=4096 --min_semi_space_size=8' }).action).toBe('keep');
    expect(plan([], { NODE_OPTIONS: '--max-old-space-size=4096' }).action).toBe('exec');
    expect(plan([], { NODE_CHANNEL_FD: '3' }).action).toBe('keep');
    expect(plan([], {}, 'win32').action).toBe('keep');
  });
});
