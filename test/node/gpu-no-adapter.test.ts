/**
 * A KIND_GPU model on a machine where no GPU provider can be used keeps loading, on the CPU, with a
 * warning that says why (here: the Vulkan driver is hidden, as on a machine without one), and the
 * config as loaded says KIND_CPU. `tsi-node doctor` says the same and what to install. This file hides
 * the driver for its whole process (Dawn reads the variable once), so it stands apart from gpu.test.ts.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { copyModel, doctorJson, gpuVariant } from '../helpers/gpu.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';

const HIDDEN = { VK_DRIVER_FILES: '/nonexistent/icd.json', VK_ICD_FILENAMES: '/nonexistent/icd.json' };
Object.assign(process.env, HIDDEN);

describe('KIND_GPU without a usable GPU', () => {
  let server: TestServer;
  let repo: string;

  beforeAll(async () => {
    repo = mkdtempSync(join(tmpdir(), 'tsi-nogpu-'));
    copyModel(repo, 'add_sub', 'add_sub_gpu', gpuVariant(1));
    server = await startTestServer({ modelRepositories: [repo] });
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
    rmSync(repo, { recursive: true, force: true });
  });

  it('loads on the CPU with a warning naming every provider it skipped and why', async () => {
    const inst = server.server.model('add_sub_gpu').instances[0]!;
    expect(inst.placement).toMatchObject({ kind: 'KIND_CPU', provider: 'cpu' });
    const warning = server.logs.find((l) => l.includes('add_sub_gpu') && l.includes('KIND_GPU instance runs on the CPU'));
    expect(warning).toBeDefined();
    expect(warning).toMatch(/webgpu: Failed to get a WebGPU adapter/);
    expect(warning).toMatch(/VK_DRIVER_FILES/);
    expect(warning).toMatch(/cuda not available/);
    const r = await postJson(`${server.url}/v2/models/add_sub_gpu/infer`, {
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: Array(16).fill(2) },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 16], data: Array(16).fill(0.5) },
      ],
    });
    expect(r.body.outputs[0].data).toEqual(Array(16).fill(2.5));
  });

  it('reports the group as loaded: KIND_CPU', async () => {
    const cfg = (await (await fetch(`${server.url}/v2/models/add_sub_gpu/config`)).json()) as { instance_group: { kind: string; gpus: number[] }[] };
    expect(cfg.instance_group[0]).toMatchObject({ kind: 'KIND_CPU', gpus: [] });
  });

  it('doctor lists no adapter, says what is wrong, and that KIND_GPU runs on the CPU', async () => {
    const report = await doctorJson(HIDDEN);
    expect(report.webgpu.adapters).toEqual([]);
    expect(report.webgpu.reason).toMatch(/VK_DRIVER_FILES/);
    expect(report.kindGpu.provider).toBe('cpu');
    expect(report.kindGpu.skipped.some((s) => s.startsWith('webgpu:'))).toBe(true);
  });
});
