/**
 * The pure half of in-place instance updates: which instances a new instance_group keeps, adds and
 * removes, by Triton's instance signature (the group without name and count, and the device).
 */

import { describe, expect, it } from 'vitest';
import { normalizeModelConfig, parsePbtxt } from '../../core/config/pipeline.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import { instanceSpecs, planInstanceUpdate } from '../../core/repository/instance-update.js';
import { flush, harness, request } from '../helpers/fake-backend.js';

const config = (groups: string): ModelConfig => normalizeModelConfig(parsePbtxt(`name: "m" backend: "python"\n${groups}`, 'config.pbtxt'), { modelName: 'm', gpuCount: 0 });

/** The loaded instances of `groups`, as the plan sees them. */
function loaded(groups: string) {
  const c = config(groups);
  return instanceSpecs(c, 'm').map((p) => ({ instance: { spec: p.spec }, group: c.instance_group![p.group] }));
}

const names = (list: readonly { spec: { name: string } }[]) => list.map((i) => i.spec.name);

describe('planInstanceUpdate', () => {
  it('keeps the first instances of a count, adds or removes the rest', () => {
    const now = loaded('instance_group [ { count: 3 kind: KIND_CPU } ]');
    const up = planInstanceUpdate(now, config('instance_group [ { count: 5 kind: KIND_CPU } ]'), 'm');
    expect(names(up.keep.map((k) => k.instance))).toEqual(['m_0_0', 'm_0_1', 'm_0_2']);
    expect(up.add.map((a) => a.spec)).toEqual([
      { name: 'm_0_3', kind: 'KIND_CPU', deviceId: -1, index: 3 }, { name: 'm_0_4', kind: 'KIND_CPU', deviceId: -1, index: 4 },
    ]);
    expect(up.remove).toEqual([]);
    const down = planInstanceUpdate(now, config('instance_group [ { count: 1 kind: KIND_CPU } ]'), 'm');
    expect(names(down.keep.map((k) => k.instance))).toEqual(['m_0_0']);
    expect(names(down.remove)).toEqual(['m_0_1', 'm_0_2']);
  });

  it('matches by signature: renamed, split and reordered groups change nothing', () => {
    const now = loaded('instance_group [ { name: "GPU_group" count: 2 kind: KIND_GPU }, { name: "CPU_group" count: 3 kind: KIND_CPU } ]');
    const plan = planInstanceUpdate(now, config(
      'instance_group [ { name: "CPU_1" count: 1 kind: KIND_CPU }, { name: "CPU_2_3" count: 2 kind: KIND_CPU }, { name: "GPU_1" count: 1 kind: KIND_GPU }, { name: "GPU_2" count: 1 kind: KIND_GPU } ]',
    ), 'm');
    expect(plan.add).toEqual([]);
    expect(plan.remove).toEqual([]);
    expect(plan.keep.map((k) => [k.instance.spec.name, k.group])).toEqual([
      ['CPU_group_0', 0], ['CPU_group_1', 1], ['CPU_group_2', 1], ['GPU_group_0', 2], ['GPU_group_1', 3],
    ]);
  });

  it('replaces an instance whose rate_limiter or kind changed, with a name no instance still holds', () => {
    const now = loaded('instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 4 } ] } } ]');
    const plan = planInstanceUpdate(now, config('instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 3 } ] } } ]'), 'm', new Set(['m_0_1']));
    expect(plan.keep).toEqual([]);
    expect(names(plan.remove)).toEqual(['m_0_0']);
    expect(plan.add.map((a) => a.spec.name)).toEqual(['m_0_2']);
    const kind = planInstanceUpdate(now, config('instance_group [ { count: 1 kind: KIND_GPU } ]'), 'm');
    expect([kind.keep.length, kind.add.length, kind.remove.length]).toEqual([0, 1, 1]);
  });
});

/** Whether a promise has settled, after the microtasks now queued ran. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await flush();
  return done;
}

const seqModel = (): ModelConfig => ({
  name: 's', max_batch_size: 0, input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [1] }],
  output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [1] }], sequence_batching: { max_sequence_idle_microseconds: 60_000_000 },
});
const step = (id: number, flags: { start?: boolean; end?: boolean } = {}) => request({ inputs: { INPUT0: [id] }, sequence: { id, ...flags } });

describe('schedulers taking instances in and out', () => {
  it('the dynamic batcher lets a removed instance go only once its batch is over, and feeds an added one', async () => {
    const h = harness({ name: 'd', max_batch_size: 0, input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [1] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [1] }] }, 2);
    h.backend.hold = true;
    h.submit(request({ inputs: { INPUT0: [1] } }));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0]);
    const busy = h.scheduler.retireInstance!(h.ctx.instances[0]!);
    const idle = h.scheduler.retireInstance!(h.ctx.instances[1]!);
    expect(busy.lingers).toBe(false);
    expect(await settled(idle.done)).toBe(true);
    expect(await settled(busy.done)).toBe(false);
    h.scheduler.addInstances!(h.backend.instances(3).slice(2));
    const t = h.submit(request({ inputs: { INPUT0: [2] } }));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0, 2]);
    h.backend.release(0);
    expect(await settled(busy.done)).toBe(true);
    h.backend.release(2);
    await t.done;
  });

  it('the sequence batcher keeps a removed instance for its sequence, through the batch that ends it', async () => {
    const h = harness(seqModel(), 2);
    h.backend.hold = true;
    h.submit(step(1, { start: true }));
    h.submit(step(2, { start: true }));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0, 1]);
    h.backend.release(0);
    h.backend.release(1);
    await flush();
    const out = h.scheduler.retireInstance!(h.ctx.instances[1]!);
    expect(out.lingers).toBe(true);
    // A new sequence waits for instance 0 rather than take the removed one's slot.
    h.submit(step(3, { start: true }));
    h.submit(step(2));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0, 1, 1]);
    h.backend.release(1);
    h.submit(step(2, { end: true }));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0, 1, 1, 1]);
    // The END batch is still running: the instance must not go yet.
    expect(await settled(out.done)).toBe(false);
    h.backend.release(1);
    expect(await settled(out.done)).toBe(true);
    // An added instance takes the backlogged sequence 3 at once.
    h.scheduler.addInstances!(h.backend.instances(3).slice(2));
    await flush();
    expect(h.backend.batches.map((b) => b.instance)).toEqual([0, 1, 1, 1, 2]);
    h.backend.release(2);
  });
});
