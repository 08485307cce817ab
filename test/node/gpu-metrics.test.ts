/**
 * Triton's GPU metrics on /metrics, read through nvidia-smi. No NVIDIA GPU here, so the server is
 * pointed at stand-in nvidia-smi scripts that answer the query as the real one does (CSV, no units,
 * "[N/A]" for what a GPU does not report, and an error for a field an older driver does not know):
 * names, HELP texts, types and the gpu_uuid label as Triton's; energy counted from the server's start
 * (the driver's counter when it has one, power integrated over the polls when not); nothing at all
 * with --allow-gpu-metrics=false or without nvidia-smi.
 */

import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parsePrometheus } from '../helpers/grpc.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const dir = mkdtempSync(join(tmpdir(), 'tsi-smi-'));

/** A stand-in nvidia-smi: `energy` true: knows total_energy_consumption (mJ, growing by 5000 per call). */
function fakeSmi(name: string, energy: boolean): string {
  const path = join(dir, name);
  const counter = join(dir, `${name}.count`);
  writeFileSync(path, `#!/bin/sh
case "$1" in *total_energy_consumption*)
  ${energy ? '' : 'echo \'Field "total_energy_consumption" is not a valid field to query.\'; exit 2'}
  n=$(cat ${counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${counter}
  echo "0, GPU-aaaa-1111, NVIDIA Test GPU, 580.1, 81559, 1024, 42, 250.5, 700.00, $((1000000 + n*5000))"
  echo "1, GPU-bbbb-2222, NVIDIA Test GPU, 580.1, 81559, [N/A], 0, [N/A], 700.00, $((2000000 + n*5000))"
  exit 0;;
esac
echo "0, GPU-aaaa-1111, NVIDIA Test GPU, 580.1, 81559, 1024, 42, 250.5, 700.00"
echo "1, GPU-bbbb-2222, NVIDIA Test GPU, 580.1, 81559, [N/A], 0, [N/A], 700.00"
`);
  chmodSync(path, 0o755);
  return path;
}

async function scrape(s: TestServer) {
  return parsePrometheus(await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text());
}

describe('GPU metrics (nv_gpu_*)', () => {
  let server: TestServer | undefined;
  const repo = tempRepo({});

  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it("exports Triton's families per GPU uuid, with the driver's energy counter since start", async () => {
    server = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, nvidiaSmi: fakeSmi('smi-energy', true), metricsIntervalMs: 100 });
    await new Promise((r) => setTimeout(r, 600));
    const m = await scrape(server);
    const a = { gpu_uuid: 'GPU-aaaa-1111' };
    const b = { gpu_uuid: 'GPU-bbbb-2222' };
    expect(m.get('nv_gpu_utilization', a)).toBeCloseTo(0.42);
    expect(m.get('nv_gpu_memory_total_bytes', a)).toBe(81559 * 1024 * 1024);
    expect(m.get('nv_gpu_memory_used_bytes', a)).toBe(1024 * 1024 * 1024);
    expect(m.get('nv_gpu_power_usage', a)).toBe(250.5);
    expect(m.get('nv_gpu_power_limit', a)).toBe(700);
    // What a GPU does not report is left out, not made up.
    expect(m.get('nv_gpu_memory_used_bytes', b)).toBeUndefined();
    expect(m.get('nv_gpu_power_usage', b)).toBeUndefined();
    expect(m.get('nv_gpu_power_limit', b)).toBe(700);
    expect(m.help.get('nv_gpu_utilization')).toBe('GPU utilization rate [0.0 - 1.0)');
    expect(m.help.get('nv_energy_consumption')).toBe('GPU energy consumption in joules since the Triton Server started');
    expect(m.type.get('nv_gpu_memory_used_bytes')).toBe('gauge');
    expect(m.type.get('nv_energy_consumption')).toBe('counter');
    // 5 J per poll, counted from the first reading, not since the driver loaded (1000 J).
    const e1 = m.get('nv_energy_consumption', a)!;
    expect(e1 % 5).toBe(0);
    expect(e1).toBeGreaterThan(0);
    expect(e1).toBeLessThan(1000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await scrape(server)).get('nv_energy_consumption', a)).toBeGreaterThan(e1);
  });

  it('integrates power over the polls when the driver has no energy counter', async () => {
    server = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, nvidiaSmi: fakeSmi('smi-old', false), metricsIntervalMs: 100 });
    await new Promise((r) => setTimeout(r, 700));
    const m = await scrape(server);
    const joules = m.get('nv_energy_consumption', { gpu_uuid: 'GPU-aaaa-1111' })!;
    // 250.5 W over the ~0.6 s between the first and the last poll.
    expect(joules).toBeGreaterThan(250.5 * 0.2);
    expect(joules).toBeLessThan(250.5 * 1.5);
    expect(m.get('nv_gpu_utilization', { gpu_uuid: 'GPU-aaaa-1111' })).toBeCloseTo(0.42);
  });

  it('exports none with --allow-gpu-metrics=false, or where there is no nvidia-smi', async () => {
    server = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, nvidiaSmi: fakeSmi('smi-off', true), gpuMetrics: false, metricsIntervalMs: 100 });
    await new Promise((r) => setTimeout(r, 300));
    let m = await scrape(server);
    expect(m.samples.some((s) => s.name.startsWith('nv_gpu_') || s.name === 'nv_energy_consumption')).toBe(false);
    expect(m.samples.some((s) => s.name === 'nv_cpu_utilization')).toBe(true);
    await server.stop();
    server = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, nvidiaSmi: join(dir, 'no-such-nvidia-smi'), metricsIntervalMs: 100 });
    await new Promise((r) => setTimeout(r, 300));
    m = await scrape(server);
    expect(m.samples.some((s) => s.name.startsWith('nv_gpu_'))).toBe(false);
  });

  afterAll(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });
});
