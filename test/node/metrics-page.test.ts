/**
 * The whole /metrics page of a server with every kind of family on it, compared line by line (as a
 * set) with the page the server wrote before the metrics registry was one (captured in
 * test/fixtures/metrics/page.txt): statistics-backed nv_* families of ONNX, cached and rate-limited
 * models, residency, CPU and process metrics, a Python model's custom metrics, an llm model's vllm:*
 * families after a few requests, and GPU metrics from a stand-in nvidia-smi. HELP and TYPE lines and
 * every series' name and labels must match; values must match where they do not depend on time or the
 * machine (those read `*`). `TSI_METRICS_CAPTURE=1` rewrites the fixture from the running server.
 */

import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, pythonRepo, startPythonServer } from '../helpers/python-server.js';
import { MODELS, ROOT, postJson, type TestServer } from '../helpers/server.js';

const FIXTURE = join(ROOT, 'test', 'fixtures', 'metrics', 'page.txt');

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;

/** A stand-in nvidia-smi with two GPUs (the second reports no memory use or power), no energy counter. */
function fakeSmi(dir: string): string {
  const path = join(dir, 'nvidia-smi');
  writeFileSync(path, `#!/bin/sh
case "$1" in *total_energy_consumption*) echo 'Field "total_energy_consumption" is not a valid field to query.'; exit 2;; esac
echo "0, GPU-aaaa-1111, NVIDIA Test GPU, 580.1, 81559, 1024, 42, 250.5, 700.00"
echo "1, GPU-bbbb-2222, NVIDIA Test GPU, 580.1, 81559, [N/A], 0, [N/A], 700.00"
`);
  chmodSync(path, 0o755);
  return path;
}

beforeAll(async () => {
  repo = pythonRepo(['metrics_py'], ['simple', 'tiny_gpt']);
  // A second copy of simple with the response cache on, for the nv_cache_* families.
  cpSync(join(MODELS, 'simple'), join(repo.path, 'simple_cached'), { recursive: true });
  const cfg = readFileSync(join(repo.path, 'simple_cached', 'config.pbtxt'), 'utf8').replace('name: "simple"', 'name: "simple_cached"');
  writeFileSync(join(repo.path, 'simple_cached', 'config.pbtxt'), `${cfg}\nresponse_cache { enable: true }\n`);
  mkdirSync(join(repo.path, '.smi'));
  s = await startPythonServer({
    modelRepositories: [repo.path], metricsPort: 0, metricsAddress: '127.0.0.1', responseCacheBytes: 1 << 20,
    rateLimit: 'execution_count', nvidiaSmi: fakeSmi(join(repo.path, '.smi')), metricsIntervalMs: 100,
  });
  const ints = (v: number) => Array.from({ length: 16 }, (_, i) => i + v);
  const simple = (model: string, v: number) => postJson(`${s.url}/v2/models/${model}/infer`, {
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: ints(v) }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ints(1) }],
  });
  for (const v of [1, 2, 3]) expect((await simple('simple', v)).status).toBe(200);
  for (const v of [1, 1, 2]) expect((await simple('simple_cached', v)).status).toBe(200);
  // A failure (wrong shape), counted under reason="OTHER" or "BACKEND" as the server counts it.
  expect((await postJson(`${s.url}/v2/models/simple/infer`, { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 3], data: [1, 2, 3] }] })).status).toBe(400);
  for (const x of [0.5, 5, 50]) {
    expect((await postJson(`${s.url}/v2/models/metrics_py/infer`, { inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [x] }] })).status).toBe(200);
  }
  for (const p of ['the quick brown fox', 'once upon a time']) {
    expect((await postJson(`${s.url}/v2/models/tiny_gpt/generate`, { text_input: p, max_tokens: 6, exclude_input_in_output: true })).status).toBe(200);
  }
  // The GPU metrics appear after the stand-in's first reading.
  expect(await eventually(async () => (await scrape()).text.includes('nv_gpu_utilization'), 10_000)).toBe(true);
}, 120_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

async function scrape(): Promise<{ text: string; contentType: string | null }> {
  const r = await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`);
  return { text: await r.text(), contentType: r.headers.get('content-type') };
}

/** Families whose values depend on time, the machine or the Node version. */
const VARIES = /duration|_us$|_seconds|_secs|throughput|^nv_cpu_|memory|energy|^nodejs_|^process_/;

/**
 * The page as a sorted set of lines: HELP/TYPE as they are; samples with time-dependent values as `*`
 * (a histogram's count stays: it counts requests); of the process and Node families, the samples
 * without labels by name only, since which GC kinds, heap spaces, handle and request types appear
 * depends on the run and the Node version.
 */
function normalise(text: string): string[] {
  const out = new Set<string>();
  let family = '';
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) (\S+)/.exec(line);
    if (meta) {
      family = meta[2]!;
      out.add(line);
      continue;
    }
    const m = /^([^{ ]+)(\{.*\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const [, name, labels = '', value] = m;
    if (/^(nodejs_|process_)/.test(family)) {
      if (labels === '') out.add(`${name} *`);
      continue;
    }
    const keep = !VARIES.test(family) || (name!.endsWith('_count') && !name!.includes('duration'));
    out.add(`${name}${labels} ${keep ? value : '*'}`);
  }
  return [...out].sort();
}

describe('/metrics page', () => {
  it('has the same families, HELP/TYPE lines, series and values as before the registry was one', async () => {
    const page = await scrape();
    expect(page.contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
    const now = normalise(page.text);
    if (process.env.TSI_METRICS_CAPTURE === '1') {
      mkdirSync(join(FIXTURE, '..'), { recursive: true });
      writeFileSync(FIXTURE, now.join('\n') + '\n');
    }
    expect(existsSync(FIXTURE)).toBe(true);
    const before = readFileSync(FIXTURE, 'utf8').split('\n').filter((l) => l !== '');
    expect({ missing: before.filter((l) => !now.includes(l)), added: now.filter((l) => !before.includes(l)) }).toEqual({ missing: [], added: [] });
  });
});
