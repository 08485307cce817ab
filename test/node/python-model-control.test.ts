/**
 * pb_utils.load_model / unload_model from a Python model's execute, through the real server: in
 * explicit mode the model unloads add_sub (started, not waited for, as in Triton: it polls
 * is_model_ready until it is gone), loads it again, and add_sub serves clients after; a load of a
 * model the repository does not have raises the load API's error; outside explicit mode both raise
 * Triton's "explicit model load / unload is not allowed" (L0_backend_python's request_rescheduling).
 */

import { afterAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import type { TestServer } from '../helpers/server.js';
import { pythonRepo, startPythonServer } from '../helpers/python-server.js';

const repo = pythonRepo(['control_py', 'add_sub']);
afterAll(() => repo.cleanup());

async function control(s: TestServer): Promise<Record<string, unknown>> {
  const r = await new HttpClient(s.url).infer('control_py', [{ name: 'X', shape: [1], data: Float32Array.of(1) }]);
  return JSON.parse(r.strings('OUT')[0]!) as Record<string, unknown>;
}

describe('pb_utils model control', () => {
  it('explicit mode: unloads and loads another model; a missing model fails with the load error', async () => {
    const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['*'] });
    try {
      const seen = await control(s);
      expect(seen.unload_error).toBeUndefined();
      expect(seen.load_error).toBeUndefined();
      expect(seen.after_unload).toBe(false);
      expect(seen.after_load).toBe(true);
      expect(String(seen.missing)).toMatch(/failed to load 'no_such_model'/);
      // Loaded again from the model's own execute, add_sub serves a client.
      const r = await new HttpClient(s.url).infer('add_sub', [
        { name: 'INPUT0', shape: [1, 4], data: Float32Array.of(1, 2, 3, 4) },
        { name: 'INPUT1', shape: [1, 4], data: Float32Array.of(4, 3, 2, 1) },
      ]);
      expect(Array.from(r.data<Float32Array>('OUTPUT0'))).toEqual([5, 5, 5, 5]);
      expect(s.logs.join('\n')).toMatch(/successfully unloaded 'add_sub'|unloaded 'add_sub'/);
    } finally {
      await s.stop();
    }
  }, 60_000);

  it('outside explicit mode both raise the load API\'s refusal, and add_sub stays loaded', async () => {
    const s = await startPythonServer({ modelRepositories: [repo.path] });
    try {
      const seen = await control(s);
      expect(String(seen.unload_error)).toMatch(/explicit model load \/ unload is not allowed/);
      expect(String(seen.load_error)).toMatch(/explicit model load \/ unload is not allowed/);
      expect(seen.after_unload).toBe(true);
      expect(String(seen.missing)).toMatch(/explicit model load \/ unload is not allowed/);
      expect((await fetch(`${s.url}/v2/models/add_sub/ready`)).status).toBe(200);
    } finally {
      await s.stop();
    }
  }, 60_000);
});
