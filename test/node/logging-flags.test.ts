/**
 * tritonserver's logging and caching flags on the real `tsi-node serve` (run through tsx): --log-file
 * takes every line off stderr, --log-format and the level switches shape and filter them in Triton's
 * layouts (checked with the regular expressions of Triton's log_format_test), /v2/logging reports and
 * changes them, the deprecated --response-cache-byte-size enables the local cache, and the cache
 * configurations Triton refuses are refused with its texts — also an ensemble with a response cache
 * over a decoupled step, at load.
 */

import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, getJson, postJson, startTestServer, tempRepo } from '../helpers/server.js';
import { parseServeArgs } from '../helpers/cli.js';
import { nodeLogger } from '../../runtime-node/index.js';

// Triton's qa/L0_logging/log_format_test.py record layouts.
const DEFAULT = /^(?<level>[EWI])(?<month>\d{2})(?<day>\d{2}) (?<time>\d{2}:\d{2}:\d{2}\.\d{6}) (?<pid>\d+) (?<file>[\w.]+):(?<line>\d+)\] (?<message>.*)$/;
const ISO8601 = /^(?<stamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?<level>[EWI]) (?<pid>\d+) (?<file>.+):(?<line>\d+)\] (?<message>.*)$/;

const identity = (name: string, extra = '') =>
  `name: "${name}"\nbackend: "identity"\nmax_batch_size: 0\n${extra}\ninput [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]\n`;

/** Runs `tsi-node <args>`; `ready` (when given) decides from the log so far that it is up. */
function serve(args: string[]) {
  const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
  const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  return { child, exited, get stderr() { return stderr; } };
}

async function until<T>(what: string, get: () => T | undefined, ms = 60_000): Promise<T> {
  for (const end = Date.now() + ms; Date.now() < end;) {
    const v = get();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('logging flags', () => {
  it('--log-file, --log-format=ISO8601, --log-warning=false and --response-cache-byte-size on the real server', async () => {
    const repo = tempRepo({
      'identity_cache/config.pbtxt': identity('identity_cache', 'response_cache { enable: true }'), 'identity_cache/1/.keep': '',
      // Logs a warning on every request, so --log-warning=false has a warning to hold back.
      'warner/config.pbtxt': 'name: "warner"\nbackend: "javascript"\ninput [{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }]\noutput [{ name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }]\n',
      'warner/1/model.js': `export default class {
        initialize(args) { this.log = args.log; }
        execute(requests) { this.log.warn('warner: a warning line'); return requests.map((r) => ({ outputs: { Y: r.input('X').data } })); }
      }`,
    });
    const dir = mkdtempSync(join(tmpdir(), 'tsi-logging-'));
    const file = join(dir, 'log_file.log');
    const p = serve([
      'serve', '--model-repository', repo.path, '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc=false', '--allow-metrics=false',
      `--log-file=${file}`, '--log-verbose=1', '--log-format=ISO8601', '--log-warning=false', '--response-cache-byte-size=8192', '--drain-delay-secs', '0',
    ]);
    try {
      const lines = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);
      const port = await until('the HTTP start-up line in the log file', () => {
        if (p.child.exitCode !== null) throw new Error(`exited early: ${p.stderr}`);
        const m = lines().map((l) => /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(l)).find(Boolean);
        return m ? Number(m[1]) : undefined;
      });
      const url = `http://127.0.0.1:${port}`;
      expect((await getJson(`${url}/v2/logging`)).body).toEqual({
        log_file: file, log_info: true, log_warning: false, log_error: true, log_verbose_level: 1, log_format: 'ISO8601',
      });
      // Every line went to the file, in Triton's ISO8601 layout with this server's process id; none to stderr.
      expect(lines().length).toBeGreaterThan(3);
      for (const l of lines()) {
        const m = ISO8601.exec(l);
        expect(m, l).not.toBeNull();
        expect(Number(m!.groups!.pid)).toBe(p.child.pid);
      }
      expect(p.stderr).not.toMatch(/^[IWEV]\d{4}/m);
      expect(p.stderr).toContain("Warning: '--response-cache-byte-size' has been deprecated!");
      expect(p.stderr).toContain("'--cache-config=local,size=8192'");
      // The deprecated flag's cache is there: the second identical request is a hit.
      const body = { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [4], data: [1, 2, 3, 4] }] };
      for (let i = 0; i < 2; i++) expect((await postJson(`${url}/v2/models/identity_cache/infer`, body)).status).toBe(200);
      const stats = (await getJson(`${url}/v2/models/identity_cache/stats`)).body.model_stats[0];
      expect(stats.inference_stats.cache_hit.count).toBe(1);
      // A warning while --log-warning=false is dropped; switched on through /v2/logging, the same one is written.
      const warn = { inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [7] }] };
      const warned = () => lines().filter((l) => l.endsWith('warner: a warning line'));
      expect((await postJson(`${url}/v2/models/warner/infer`, warn)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 300));
      expect(warned()).toEqual([]);
      expect(lines().every((l) => ISO8601.exec(l)!.groups!.level !== 'W')).toBe(true);
      expect((await postJson(`${url}/v2/logging`, { log_warning: true })).body.log_warning).toBe(true);
      expect((await postJson(`${url}/v2/models/warner/infer`, warn)).status).toBe(200);
      const written = await until('the warning line', () => (warned().length > 0 ? warned() : undefined), 10_000);
      expect(written).toHaveLength(1);
      expect(ISO8601.exec(written[0]!)!.groups!.level).toBe('W');
      // Switched to the default layout at run time: the lines from then on (the shutdown's) follow it.
      const before = lines().length;
      expect((await postJson(`${url}/v2/logging`, { log_format: 'default' })).body.log_format).toBe('default');
      p.child.kill('SIGTERM');
      expect(await p.exited).toBe(0);
      const after = lines().slice(before);
      expect(after.length).toBeGreaterThan(0);
      for (const l of after) expect(l, l).toMatch(DEFAULT);
      expect(after.filter((l) => l.endsWith('] Waiting for in-flight requests to complete.'))).toHaveLength(1);
    } finally {
      if (p.child.exitCode === null) p.child.kill('SIGKILL');
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('--log-info, --log-warning (and the --log-warn prefix tritonserver accepts), --log-error switch their lines off', async () => {
    const o = await parseServeArgs(['serve', '--log-info=false', '--log-warn', 'false', '--log-error', 'false', '--log-format', 'ISO8601', '--log-file', '/tmp/x.log']);
    expect(o).toMatchObject({ logInfo: false, logWarn: false, logError: false, logFormat: 'ISO8601', logFile: '/tmp/x.log' });
    expect(await parseServeArgs(['serve'])).toMatchObject({ logInfo: true, logWarning: true, logError: true, logFormat: 'default' });
    await expect(parseServeArgs(['serve', '--log-format', 'fancy'])).rejects.toThrow('invalid argument for --log-format');
    const dir = mkdtempSync(join(tmpdir(), 'tsi-logging-'));
    try {
      const file = join(dir, 'log');
      const log = nodeLogger({ file, info: false, warning: true, error: false });
      log.info('an info line');
      log.warn('a warning line');
      log.error('an error line');
      const written = readFileSync(file, 'utf8').split('\n').filter(Boolean);
      expect(written).toHaveLength(1);
      expect(written[0]).toMatch(DEFAULT);
      expect(DEFAULT.exec(written[0]!)!.groups).toMatchObject({ level: 'W', pid: String(process.pid), message: 'a warning line' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('caching flags', () => {
  it("refuses two cache configurations and both cache flags at once, with tritonserver's texts", async () => {
    const runs = [
      serve(['serve', '--cache-config=local,size=8192', '--cache-config=redis,key=value']),
      serve(['serve', '--response-cache-byte-size=12345', '--cache-config=local,size=67890']),
    ];
    expect(await Promise.all(runs.map((r) => r.exited))).toEqual([1, 1]);
    expect(runs[0]!.stderr).toContain('found multiple cache configurations, but only a single cache is currently supported');
    expect(runs[1]!.stderr).toContain('Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other.');
  }, 120_000);

  it('refuses at load an ensemble with a response cache over a decoupled step, or declared decoupled itself', async () => {
    const step = `name: "decoupled_step"\nbackend: "javascript"\nmodel_transaction_policy { decoupled: true }\ninput [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\n`;
    const ensemble = (name: string, extra: string) => `name: "${name}"\nplatform: "ensemble"\n${extra}\nresponse_cache { enable: true }\n`
      + 'input [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }]\n'
      + 'ensemble_scheduling { step [{ model_name: "decoupled_step" model_version: -1 input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } }] }\n';
    const repo = tempRepo({
      'decoupled_step/config.pbtxt': step,
      'decoupled_step/1/model.js': 'export default class { execute(requests) { for (const r of requests) r.sender.send({ outputs: { Y: r.input("X").data } }, true); } }',
      'ens_composing/config.pbtxt': ensemble('ens_composing', ''),
      'ens_composing/1/.keep': '',
      'ens_itself/config.pbtxt': ensemble('ens_itself', 'model_transaction_policy { decoupled: true }'),
      'ens_itself/1/.keep': '',
    });
    const s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', responseCacheBytes: 10480 });
    try {
      for (const name of ['ens_composing', 'ens_itself']) {
        const r = await postJson(`${s.url}/v2/repository/models/${name}/load`, {});
        expect(r.status, name).toBe(400);
        expect(r.body.error, name).toContain(`Response Cache does not currently support model ${name} with 'decoupled' transaction policy. Please disable the response cache.`);
        expect((await fetch(`${s.url}/v2/models/${name}/ready`)).status).not.toBe(200);
      }
    } finally {
      await s.stop();
      repo.cleanup();
    }
  }, 60_000);
});
