/**
 * tritonserver's older trace flags (`--trace-file`, `--trace-level` with its MIN/MAX, `--trace-rate`,
 * `--trace-count`, `--trace-log-frequency`) on the real command, as L0_cmdline_trace starts it: each
 * warns once that it is deprecated and acts as the `--trace-config` setting it stands for, which wins
 * where both are given.
 */

import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODELS, postJson } from '../helpers/server.js';
import { serveChild } from '../helpers/serve-child.js';
import { legacyTraceSpecs, parseTraceConfig } from '../../core/index.js';

const body = { inputs: [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
] };

describe('--trace-file, --trace-level, --trace-rate, --trace-count, --trace-log-frequency', () => {
  it('trace as --trace-config would, with tritonserver\'s deprecation warnings', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tsi-trace-legacy-'));
    const file = join(dir, 'trace.json');
    const { child, port, stderr } = await serveChild(['serve', '--model-repository', MODELS, '--model-control-mode', 'explicit', '--load-model', 'simple',
      '--http-port', '0', '--http-address', '127.0.0.1', '--allow-grpc', 'false', '--allow-metrics', 'false', '--drain-delay-secs', '0', '--http-thread-count=1',
      `--trace-file=${file}`, '--trace-level=MIN', '--trace-rate=3', '--trace-count=100', '--trace-log-frequency=0']);
    try {
      for (let i = 0; i < 9; i++) expect((await postJson(`http://127.0.0.1:${port}/v2/models/simple/infer`, body)).status).toBe(200);
      const setting = (await (await fetch(`http://127.0.0.1:${port}/v2/trace/setting`)).json()) as Record<string, unknown>;
      expect(setting).toMatchObject({ trace_level: ['TIMESTAMPS'], trace_rate: '3', trace_file: file, log_frequency: '0' });
      for (const flag of ['--trace-file', '--trace-level', '--trace-rate', '--trace-count', '--trace-log-frequency']) {
        expect(stderr().split(`Warning: '${flag}' has been deprecated`).length - 1, flag).toBe(1);
      }
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      // Every third request traced: 3 of 9.
      const traces = JSON.parse(readFileSync(file, 'utf8')) as { model_name?: string }[];
      expect(traces.filter((t) => t.model_name === 'simple')).toHaveLength(3);
    } finally {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('--trace-config wins over the older flag, saying so; bad levels are Triton\'s error', () => {
    const r = legacyTraceSpecs({ traceRate: '5', traceLevel: ['TIMESTAMPS', 'TENSORS'] }, ['rate=7']);
    expect(r.warnings).toContain("Warning: Overriding deprecated '--trace-rate' in favor of provided rate value in --trace-config!");
    const setting = parseTraceConfig([...r.specs, 'rate=7']);
    expect(setting).toMatchObject({ rate: 7, level: ['TIMESTAMPS', 'TENSORS'] });
    expect(parseTraceConfig(legacyTraceSpecs({ traceLevel: ['TIMESTAMPS', 'OFF', 'MAX'] }, []).specs).level).toEqual([]);
    expect(() => legacyTraceSpecs({ traceLevel: ['LOUD'] }, [])).toThrow('invalid value for trace level option: loud');
  });
});
