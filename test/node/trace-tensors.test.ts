/**
 * Trace level TENSORS in Triton's trace-file mode, on the real server: a traced request's queued
 * inputs and its backend's outputs are written as Triton writes them
 * (`{"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"INPUT0","data":"0,1,...","shape":"1,16","dtype":"INT32"}}`),
 * and TIMESTAMPS alone writes none.
 */

import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODELS, postJson, startTestServer } from '../helpers/server.js';
import type { TraceLevel } from '../../core/index.js';

const input0 = Array.from({ length: 16 }, (_, i) => i);
const body = { inputs: [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: input0 },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: input0.map(() => 1) },
] };

async function recordsWith(level: TraceLevel[]): Promise<Record<string, unknown>[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tsi-trace-tensors-'));
  const file = join(dir, 'trace.json');
  const s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], trace: { level, rate: 1, count: -1, mode: 'triton', file } });
  try {
    expect((await postJson(`${s.url}/v2/models/simple/infer`, body)).status).toBe(200);
    await s.stop();
    return JSON.parse(readFileSync(file, 'utf8'));
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('trace level TENSORS', () => {
  it('writes the queued inputs and the backend\'s outputs as Triton does', async () => {
    const records = await recordsWith(['TIMESTAMPS', 'TENSORS']);
    const id = (records.find((r) => r.model_name === 'simple') as { id: number }).id;
    const tensors = records.filter((r) => 'activity' in r);
    expect(tensors).toEqual([
      { id, activity: 'TENSOR_QUEUE_INPUT', tensor: { name: 'INPUT0', data: input0.join(','), shape: '1,16', dtype: 'INT32' } },
      { id, activity: 'TENSOR_QUEUE_INPUT', tensor: { name: 'INPUT1', data: input0.map(() => 1).join(','), shape: '1,16', dtype: 'INT32' } },
      { id, activity: 'TENSOR_BACKEND_OUTPUT', tensor: { name: 'OUTPUT0', data: input0.map((x) => x + 1).join(','), shape: '1,16', dtype: 'INT32' } },
      { id, activity: 'TENSOR_BACKEND_OUTPUT', tensor: { name: 'OUTPUT1', data: input0.map((x) => x - 1).join(','), shape: '1,16', dtype: 'INT32' } },
    ]);
    // The exact line L0_cmdline_trace greps for.
    expect(JSON.stringify(tensors[0])).toBe(`{"id":${id},"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"INPUT0","data":"${input0.join(',')}","shape":"1,16","dtype":"INT32"}}`);
  });

  it('writes no tensors at TIMESTAMPS alone', async () => {
    expect((await recordsWith(['TIMESTAMPS'])).some((r) => 'activity' in r)).toBe(false);
  });
});
