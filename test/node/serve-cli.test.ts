/**
 * `tsi-node serve` wires the gRPC, metrics and management flags through to the running server: the
 * start-up lines name the three services with their ports, gRPC health answers, the metrics listener
 * serves Triton's families, `--trace-config` and `--http-restricted-api` take effect, and SIGTERM still
 * stops everything cleanly. Runs the TypeScript CLI through tsx, so no build is needed.
 */

import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, getJson, postJson, tempRepo } from '../helpers/server.js';
import { grpcClient, parsePrometheus } from '../helpers/grpc.js';
import { addSubModel } from '../../scripts/gen-models.js';

describe('tsi-node serve with gRPC, metrics and management flags', () => {
  it('starts every service the flags ask for and applies the settings', async () => {
    const repo = tempRepo({
      'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 2\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n',
      'm/1/model.onnx': addSubModel('FP32', [4]),
    });
    const dir = mkdtempSync(join(tmpdir(), 'tsi-cli-'));
    const args = [
      'serve', '--model-repository', repo.path, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0',
      '--http-address', '127.0.0.1', '--grpc-address', '127.0.0.1', '--model-control-mode', 'poll', '--repository-poll-secs', '1',
      '--trace-config', `triton,file=${join(dir, 'trace.json')}`, '--trace-config', 'level=TIMESTAMPS', '--trace-config', 'rate=1',
      '--http-restricted-api', 'model-repository:admin=yes', '--allow-client-shm', 'true', '--drain-delay-secs', '0',
    ];
    const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
    const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    try {
      const ports = await new Promise<{ grpc: number; http: number; metrics: number }>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no start-up lines; stderr: ${err}`)), 60_000);
        child.stderr.on('data', (d) => {
          err += d;
          const g = /Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/.exec(err);
          const h = /Started HTTPService at 127\.0\.0\.1:(\d+)/.exec(err);
          const m = /Started Metrics Service at 127\.0\.0\.1:(\d+)/.exec(err);
          if (g && h && m) {
            clearTimeout(timer);
            resolve({ grpc: Number(g[1]), http: Number(h[1]), metrics: Number(m[1]) });
          }
        });
        child.on('exit', (c) => reject(new Error(`exited early with ${c}: ${err}`)));
      });
      const url = `http://127.0.0.1:${ports.http}`;
      const c = grpcClient(`127.0.0.1:${ports.grpc}`);
      try {
        expect(await c.health()).toBe('SERVING');
      } finally {
        c.close();
      }
      const trace = (await getJson(`${url}/v2/trace/setting`)).body;
      expect(trace).toMatchObject({ trace_level: ['TIMESTAMPS'], trace_rate: '1', trace_file: join(dir, 'trace.json') });
      expect((await postJson(`${url}/v2/repository/index`, {})).status).toBe(403);
      expect((await postJson(`${url}/v2/repository/index`, {}, { admin: 'yes' })).body).toEqual([{ name: 'm', version: '1', state: 'READY', reason: '' }]);
      const body = { inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
      ] };
      expect((await postJson(`${url}/v2/models/m/infer`, body)).status).toBe(200);
      const metrics = parsePrometheus(await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text());
      expect(metrics.get('nv_inference_request_success', { model: 'm', version: '1' })).toBe(1);
      const exit = await new Promise<number | null>((resolve) => {
        child.once('exit', (c) => resolve(c));
        child.kill('SIGTERM');
      });
      expect(exit).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
