/**
 * Triton's identity backend with `enable_custom_tracing`: a traced request's timestamps (Triton's
 * trace file, as L0_trace reads it through trace_summary.py) carry the backend's own activities,
 * CUSTOM_ACTIVITY_START, CUSTOM_ACTIVITY_END (100 ms apart) and CUSTOM_SINGLE_ACTIVITY after its
 * execute delay, as Triton's identity reports them, inside COMPUTE_START..COMPUTE_END; without the
 * parameter there are none. (Their spans in OpenTelemetry mode: opentelemetry.test.ts.)
 */

import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { postJson, startTestServer, tempRepo } from '../helpers/server.js';

const config = (name: string, extra: string) => `name: "${name}"\nbackend: "identity"\nmax_batch_size: 1024
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
instance_group [{ kind: KIND_CPU }]\nparameters [{ key: "execute_delay_ms" value: { string_value: "50" } }${extra}]\n`;

describe('identity backend: enable_custom_tracing', () => {
  it('adds its activities to a traced request\'s timestamps, after its delay', async () => {
    const repo = tempRepo({
      'traced/config.pbtxt': config('traced', ', { key: "enable_custom_tracing" value: { string_value: "true" } }'),
      'traced/1/.keep': '',
      'plain/config.pbtxt': config('plain', ''),
      'plain/1/.keep': '',
    });
    const file = join(repo.path, 'trace.json');
    const s = await startTestServer({ modelRepositories: [repo.path], trace: { level: ['TIMESTAMPS'], rate: 1, count: -1, mode: 'triton', file } });
    try {
      for (const m of ['traced', 'plain']) {
        const r = await postJson(`${s.url}/v2/models/${m}/infer`, { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 1], data: [4] }] });
        expect(r.status).toBe(200);
      }
      await s.stop();
      const records = JSON.parse(readFileSync(file, 'utf8')) as { id: number; model_name?: string; timestamps?: { name: string; ns: number }[] }[];
      const stamps = (model: string) => {
        const id = records.find((r) => r.model_name === model)!.id;
        return new Map(records.find((r) => r.id === id && r.timestamps)!.timestamps!.map((t) => [t.name, t.ns]));
      };
      const t = stamps('traced');
      for (const n of ['CUSTOM_ACTIVITY_START', 'CUSTOM_SINGLE_ACTIVITY', 'CUSTOM_ACTIVITY_END']) expect(t.has(n), n).toBe(true);
      expect(t.get('CUSTOM_ACTIVITY_START')! - t.get('COMPUTE_START')!).toBeGreaterThanOrEqual(45e6);
      expect(t.get('CUSTOM_ACTIVITY_END')! - t.get('CUSTOM_ACTIVITY_START')!).toBeGreaterThanOrEqual(90e6);
      expect(t.get('CUSTOM_SINGLE_ACTIVITY')!).toBeGreaterThanOrEqual(t.get('CUSTOM_ACTIVITY_END')!);
      expect(t.get('CUSTOM_ACTIVITY_END')!).toBeLessThanOrEqual(t.get('COMPUTE_END')!);
      expect([...stamps('plain').keys()].some((n) => n.startsWith('CUSTOM_'))).toBe(false);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });
});
