/**
 * `tsi-node tune` for real: mlp_batch of the default repository on a real server in explicit
 * model-control mode, every configuration loaded through the load API with a config override and
 * measured by perf's engine, on a small budget. The run must end with a verdict that matches its own
 * measurements (the best beats the shipped config on the objective, or the shipped one is named the
 * best), write a best config.pbtxt that parses, and leave the model on its repository config.
 */

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePbtxt } from '../../core/config/pipeline.js';
import { knobsOf, runTune, type TuneResult } from '../../runtime-node/tune/index.js';
import { MODELS, getJson, startTestServer, type TestServer } from '../helpers/server.js';

describe('tsi-node tune on mlp_batch', () => {
  let s: TestServer;
  let out: string;
  let r: TuneResult;
  const lines: string[] = [];
  beforeAll(async () => {
    s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['mlp_batch'] });
    out = mkdtempSync(join(tmpdir(), 'tsi-tune-'));
    r = await runTune({
      model: 'mlp_batch', url: s.url.replace('http://', ''), repositories: [MODELS], objective: { latencyBudgetMs: 250 },
      maxMinutes: 0.4, maxInstances: 2, maxBatchLimit: 32, maxConcurrency: 8, measurementIntervalMs: 250, outputDir: out,
    }, (line) => lines.push(line));
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it('measures the shipped config first and names a best that its own numbers support', () => {
    const { trials, best, shipped } = r.result;
    expect(trials[0]).toBe(shipped);
    expect(trials.length).toBeGreaterThanOrEqual(2);
    for (const t of trials) expect(t.error, JSON.stringify(t.knobs)).toBeUndefined();
    expect(best.score).toBeGreaterThanOrEqual(shipped.score);
    const verdict = readFileSync(r.files.table, 'utf8');
    if (best === shipped) expect(verdict).toMatch(/the shipped config is already the best found/);
    else expect(verdict).toMatch(new RegExp(`tuned config #${best.id} beats the shipped one`));
    expect(lines.some((l) => /^\[2\] /.test(l))).toBe(true);
  });

  it('writes the best config.pbtxt with what was measured, and the report', () => {
    const text = readFileSync(r.files.config, 'utf8');
    expect(text).toMatch(/^# Tuned by tsi-node tune on .* against tsi at 127\.0\.0\.1:\d+\.\n# Objective: maximise throughput, p99 ≤ 250 ms\.\n# Measured: /);
    const cfg = parsePbtxt(text);
    expect(cfg.name).toBe('mlp_batch');
    expect(cfg.input?.[0]?.dims).toEqual([1024]);
    expect(knobsOf(cfg)).toEqual(r.result.best.knobs);
    expect(readFileSync(r.files.report, 'utf8')).toMatch(/<svg/);
    expect(JSON.parse(readFileSync(r.files.json, 'utf8')).trials).toHaveLength(r.result.trials.length);
  });

  it('leaves the model on its repository config', async () => {
    const cfg = (await getJson(`${s.url}/v2/models/mlp_batch/config`)).body;
    expect(cfg.max_batch_size).toBe(32);
    expect(cfg.instance_group.map((g: { count: number }) => g.count)).toEqual([1]);
    expect(cfg.dynamic_batching.max_queue_delay_microseconds ?? 0).toBe(0);
    expect((await getJson(`${s.url}/v2/models/mlp_batch/ready`)).status).toBe(200);
  });
});
