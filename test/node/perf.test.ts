/**
 * `tsi-node perf` end to end: the real CLI (bin/tsi-node.js) measuring the real server in short
 * windows, over HTTP in concurrency mode and over gRPC in request-rate mode with a sequence model. The
 * CSV is read back column by column and the plot's SVG markers are matched to the CSV rows, so the
 * test checks content, not just that files exist. The pure parts (stability rule, percentiles, input
 * building) are checked on their own.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODELS, ROOT, startTestServer, type TestServer } from '../helpers/server.js';
import { isStable, percentileOf } from '../../runtime-node/perf/measure.js';
import { buildInputSets, type ModelInfo } from '../../runtime-node/perf/data.js';

const BIN = join(ROOT, 'bin', 'tsi-node.js');
const CSV_HEADER = 'Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait';

let server: TestServer;
let dir: string;
beforeAll(async () => {
  server = await startTestServer({ modelRepositories: [MODELS], grpcPort: 0, grpcAddress: '127.0.0.1' });
  dir = mkdtempSync(join(tmpdir(), 'tsi-perf-'));
});
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function perf(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'perf', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function readCsv(file: string): { header: string; rows: Record<string, number>[] } {
  const [header, ...lines] = readFileSync(file, 'utf8').trimEnd().split('\n');
  const cols = header!.split(',');
  return { header: header!, rows: lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [cols[i]!, Number(v)]))) };
}

/** The plot's markers: one <circle> per load point and series, carrying its numbers as data attributes. */
function plotPoints(file: string) {
  const html = readFileSync(file, 'utf8');
  expect(html).toMatch(/^<!doctype html>/);
  expect(html).toContain('<svg');
  // Self-contained: nothing to run, nothing to fetch.
  expect(html).not.toMatch(/<script|\b(?:src|href)=/);
  return [...html.matchAll(/<circle class="point"[^>]*data-load="([\d.]+)" data-throughput="([\d.]+)" data-latency-ms="([\d.]+)"/g)]
    .map((m) => ({ load: Number(m[1]), throughput: Number(m[2]), latencyMs: Number(m[3]) }));
}

describe('tsi-node perf against the real server', () => {
  it('measures concurrency points over HTTP and writes the CSV, plot and table', async () => {
    const csv = join(dir, 'http.csv');
    const html = join(dir, 'http.html');
    const r = await perf(['-m', 'simple', '-u', server.url, '--concurrency-range', '1:3:2', '-p', '300', '-r', '4', '-s', '50',
      '--warmup-request-count', '20', '-f', csv, '--plot', html]);
    expect(r.stderr).toContain('Request concurrency: 1');
    expect(r.stderr).toMatch(/Pass \[1\] throughput: [\d.]+ infer\/sec\. Avg latency: \d+ usec/);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Concurrency: 1, throughput: [\d.]+ infer\/sec, latency \d+ usec/);
    expect(r.stdout).toMatch(/Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec \+ compute input/);
    expect(r.stdout).toMatch(/\| Concurrency \| +Infer\/sec \|/);
    expect(r.stdout).toMatch(/Client CPU: \d+% of one core/);

    const { header, rows } = readCsv(csv);
    expect(header).toBe(`Concurrency,${CSV_HEADER}`);
    expect(rows.map((x) => x.Concurrency).sort()).toEqual([1, 3]);
    for (const row of rows) {
      for (const [k, v] of Object.entries(row)) expect(Number.isFinite(v), `${k} = ${v}`).toBe(true);
      expect(row['Inferences/Second']).toBeGreaterThan(0);
      expect(row['Server Compute Infer']).toBeGreaterThan(0);
      expect(row['p50 latency']).toBeGreaterThan(0);
      expect(row['p50 latency']).toBeLessThanOrEqual(row['p90 latency']!);
      expect(row['p90 latency']).toBeLessThanOrEqual(row['p95 latency']!);
      expect(row['p95 latency']).toBeLessThanOrEqual(row['p99 latency']!);
      expect(row['Avg latency']).toBeGreaterThan(0);
      // The server's part of a request cannot exceed what the client waited for it.
      const server = row['Server Queue']! + row['Server Compute Input']! + row['Server Compute Infer']! + row['Server Compute Output']!;
      expect(server).toBeLessThanOrEqual(row['response wait']! + 1);
    }
    // perf_analyzer sorts rows by throughput.
    expect(rows.map((x) => x['Inferences/Second'])).toEqual([...rows.map((x) => x['Inferences/Second']!)].sort((p, q) => p - q));

    const pts = plotPoints(html);
    expect(pts).toHaveLength(4);
    for (const row of rows) {
      const mine = pts.filter((p) => p.load === row.Concurrency);
      expect(mine).toHaveLength(2);
      for (const p of mine) expect(p.throughput).toBeCloseTo(row['Inferences/Second']!, 1);
      expect(Math.min(...mine.map((p) => p.latencyMs)) * 1000).toBeCloseTo(row['Avg latency']!, -1);
    }
  });

  it('measures request rates over gRPC for a sequence model, in count windows', async () => {
    const csv = join(dir, 'grpc.csv');
    const html = join(dir, 'grpc.html');
    const r = await perf(['-m', 'simple_sequence', '-i', 'grpc', '-u', `127.0.0.1:${server.grpc!.port}`, '--request-rate-range', '40:80:40',
      '--request-distribution', 'poisson', '--measurement-mode', 'count_windows', '--measurement-request-count', '25', '-r', '5', '-s', '80',
      '--sequence-length', '4', '--num-of-sequences', '3', '-f', csv, '--plot', html]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('Service Kind: GRPC');
    expect(r.stdout).toMatch(/Request Rate: 40, throughput: [\d.]+ infer\/sec/);
    const { header, rows } = readCsv(csv);
    expect(header).toBe(`Request Rate,${CSV_HEADER}`);
    expect(rows.map((x) => x['Request Rate']).sort((p, q) => p! - q!)).toEqual([40, 80]);
    for (const row of rows) {
      // An open loop at a modest rate delivers about that rate (generous bounds: shared CI machines).
      expect(row['Inferences/Second']).toBeGreaterThan(row['Request Rate']! * 0.4);
      expect(row['Inferences/Second']).toBeLessThan(row['Request Rate']! * 1.8);
      expect(row['Server Compute Infer']).toBeGreaterThan(0);
    }
    expect(plotPoints(html)).toHaveLength(4);
    // Every sequence was closed: the sequence batcher holds no slots afterwards.
    const stats = await (await fetch(`${server.url}/v2/models/simple_sequence/stats`)).json() as any;
    expect(Number(stats.model_stats[0].inference_stats.success.count)).toBeGreaterThan(40);
  });

  it('fills variable dimensions from --shape and values from a JSON file, and fails clearly without them', async () => {
    const noShape = await perf(['-m', 'simple_identity', '-u', server.url, '-p', '200']);
    expect(noShape.code).toBe(1);
    expect(noShape.stderr).toContain("input 'INPUT0' has variable dimensions [-1]: give them with --shape INPUT0:N");
    const data = join(dir, 'data.json');
    writeFileSync(data, JSON.stringify({ data: [{ INPUT0: ['a', 'b', 'c'] }, { INPUT0: { content: ['d', 'e', 'f'], shape: [3] } }] }));
    const ok = await perf(['-m', 'simple_identity', '-u', server.url, '--shape', 'INPUT0:3', '-b', '2', '--input-data', data, '-p', '200', '-r', '3', '-s', '90']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/Concurrency: 1, throughput: [\d.]+ infer\/sec/);
    const unknown = await perf(['-m', 'no_such_model', '-u', server.url, '-p', '200']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("error: model 'no_such_model' is not ready");
  });
});

describe('tsi-node perf options', () => {
  it('grows the concurrency until -l is crossed, stabilising on --percentile', async () => {
    const csv = join(dir, 'threshold.csv');
    const r = await perf(['-m', 'simple', '-u', server.url, '--concurrency-range', '1:0:1', '-l', '0.001', '--percentile', '90', '--sync',
      '-p', '200', '-r', '3', '-s', '90', '-f', csv]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('above the 0.001 ms threshold; stopping');
    expect(r.stdout).toContain('Stabilizing using p90 latency');
    expect(r.stdout).toContain('Inferences/Second vs. p90 Batch Latency');
    expect(readCsv(csv).rows.map((x) => x.Concurrency)).toEqual([1]);
    const bad = await perf(['-m', 'simple', '-u', server.url, '--concurrency-range', '1:0']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('needs -l/--latency-threshold');
  });
});

describe('perf building blocks', () => {
  it("applies perf_analyzer's stability rule to the last three windows", () => {
    const w = (throughput: number, latency: number) => ({ throughput, latency });
    expect(isStable([w(100, 10), w(105, 10)], 10)).toBe(false);
    expect(isStable([w(50, 30), w(100, 10), w(105, 10.5), w(109, 10.9)], 10)).toBe(true);
    expect(isStable([w(100, 10), w(105, 10), w(111, 10)], 10)).toBe(false);
    expect(isStable([w(100, 10), w(100, 10), w(100, 11.5)], 10)).toBe(false);
    expect(isStable([w(0, 10), w(0, 10), w(0, 10)], 10)).toBe(false);
  });

  it('computes nearest-rank percentiles', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect([50, 90, 95, 99].map((p) => percentileOf(xs, p))).toEqual([50, 90, 95, 99]);
    expect(percentileOf([7], 99)).toBe(7);
    expect(percentileOf([], 50)).toBe(0);
  });

  it('builds batched inputs from zero, random and perf_analyzer JSON data', () => {
    const info: ModelInfo = {
      name: 'm', maxBatchSize: 8, batching: true, sequence: false, decoupled: false, fromConfig: true,
      inputs: [{ name: 'X', datatype: 'INT32', dims: [2] }, { name: 'S', datatype: 'BYTES', dims: [1] }],
    };
    const [zero] = buildInputSets(info, { batchSize: 3, source: 'zero', stringLength: 4 });
    expect(zero!.map((i) => i.shape)).toEqual([[3, 2], [3, 1]]);
    expect(Array.from(zero![0]!.data as Int32Array)).toEqual([0, 0, 0, 0, 0, 0]);
    const [rnd] = buildInputSets(info, { batchSize: 1, source: 'random', stringLength: 5 });
    expect((rnd![1]!.data as string[])[0]).toMatch(/^[A-Za-z0-9]{5}$/);
    const file = join(dir, 'in.json');
    writeFileSync(file, JSON.stringify({ data: [{ X: [1, 2], S: ['a'] }, { X: [3, 4], S: ['b'] }, { X: [5, 6], S: ['c'] }] }));
    const sets = buildInputSets(info, { batchSize: 2, source: file, stringLength: 4 });
    expect(sets).toHaveLength(2);
    expect(sets[0]![0]!.data).toEqual([1, 2, 3, 4]);
    expect(sets[1]![0]!.data).toEqual([5, 6, 1, 2]);
    expect(sets[1]![1]!.data).toEqual(['c', 'a']);
    expect(() => buildInputSets(info, { batchSize: 9, source: 'zero', stringLength: 1 })).toThrow('-b 9 exceeds the max_batch_size 8');
    expect(() => buildInputSets({ ...info, batching: false, maxBatchSize: 0 }, { batchSize: 2, source: 'zero', stringLength: 1 })).toThrow('does not support batching');
  });
});
