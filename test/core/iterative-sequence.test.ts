/**
 * Iterative sequences (`sequence_batching { iterative_sequence: true }`) on fake instances: a request
 * without a correlation ID gets one from the batcher, a backend that releases it with RESCHEDULE sees
 * it again in the same slot (START only on the first run, never END), the sequence ends when the
 * request is released for good, and a model without iterative sequences refuses RESCHEDULE with
 * Triton's text.
 */

import { describe, expect, it } from 'vitest';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import type { BackendRequest } from '../../core/backend.js';
import { flush, harness, request, values } from '../helpers/fake-backend.js';

const config = (sb: ModelConfig['sequence_batching'] | undefined): ModelConfig => ({
  name: 'iter', max_batch_size: 2,
  input: [{ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [1] }],
  output: [{ name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [1] }],
  ...(sb ? { sequence_batching: sb } : {}),
});
const iterative = config({
  iterative_sequence: true,
  control_input: [
    { name: 'START', control: [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [0, 1] }] },
    { name: 'CORRID', control: [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_UINT64' }] },
  ],
});
const ask = (x: number) => request({ inputs: { INPUT0: [x] }, batch: 1 });

describe('iterative sequences', () => {
  it('run a rescheduled request again in its sequence, without a client correlation ID', async () => {
    const h = harness(iterative);
    const runs = new Map<BackendRequest, number>();
    // Each request runs INPUT0 times before it is answered.
    h.backend.rescheduleIf = (r) => {
      const n = (runs.get(r) ?? 0) + 1;
      runs.set(r, n);
      return n < (r.inputs.get('INPUT0')!.data as Int32Array)[0]!;
    };
    const a = h.submit(ask(3));
    const b = h.submit(ask(2));
    await Promise.all([a.done, b.done]);
    await flush();
    expect(values(a.result)).toEqual([3]);
    expect(values(b.result)).toEqual([2]);
    expect(a.responses).toHaveLength(1);
    const rows = h.backend.batches.map((x) => ({
      start: Array.from(x.inputs.get('START')!.data as Int32Array), corrid: Array.from(x.inputs.get('CORRID')!.data as BigUint64Array),
    }));
    // The first runs at once alone; its second run shares a batch with the other's first (slot 1).
    expect(rows).toEqual([
      { start: [1], corrid: [1n] }, { start: [0, 1], corrid: [1n, 2n] }, { start: [0, 0], corrid: [1n, 2n] },
    ]);
    expect(h.scheduler.liveSequences!()).toBe(0);
    expect(h.stats.inflight).toBe(0);
    expect(h.scheduler.queued()).toBe(0);
  });

  it('end the sequence of a request answered at once, freeing its slot', async () => {
    const h = harness(iterative);
    for (let i = 0; i < 5; i++) await h.submit(ask(1)).done;
    expect(h.backend.batches.map((x) => Array.from(x.inputs.get('CORRID')!.data as BigUint64Array))).toEqual([[1n], [2n], [3n], [4n], [5n]]);
    expect(h.scheduler.liveSequences!()).toBe(0);
  });

  it("refuse RESCHEDULE with Triton's text where the model has no iterative sequences", async () => {
    for (const sb of [undefined, { control_input: iterative.sequence_batching!.control_input }]) {
      const h = harness(config(sb));
      h.backend.rescheduleIf = () => true;
      const t = h.submit(request({ inputs: { INPUT0: [1] }, batch: 1, ...(sb ? { sequence: { id: 7, start: true, end: true } } : {}) }));
      const r = await t.done;
      expect(r).toBeInstanceOf(TsiError);
      expect([(r as TsiError).code, (r as TsiError).message]).toEqual([
        'INVALID_ARG', 'Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.',
      ]);
      expect(h.backend.batches).toHaveLength(1);
    }
  });
});
