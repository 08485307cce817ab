/**
 * The sequence batcher on fake instances and a fake clock: slot routing across instances, control
 * inputs of every data type (padding rows READY=0), the backlog, idle reaping, Triton's rejection
 * texts, implicit state across steps (an accumulator whose state only the scheduler carries), and the
 * oldest strategy's batching over candidate sequences.
 */

import { describe, expect, it } from 'vitest';
import { TsiError } from '../../core/errors.js';
import type { ModelConfig, SequenceControl } from '../../core/config/model-config.js';
import { SequenceBatcher, sequenceInternalInputs } from '../../core/scheduling/sequence.js';
import type { Tensor } from '../../core/types.js';
import { flush, harness, request, values, type ExecutedBatch } from '../helpers/fake-backend.js';

const ctl = (name: string, c: SequenceControl) => ({ name, control: [c] });
const int32 = (kind: SequenceControl['kind']) => ({ kind, int32_false_true: [0, 1] });

/** An accumulator with implicit state: OUTPUT_STATE = READY ? (START ? INPUT : STATE + INPUT) : STATE. */
function accumulator(over: Partial<ModelConfig> = {}, sb: ModelConfig['sequence_batching'] = {}): ModelConfig {
  return {
    name: 'acc', max_batch_size: 4,
    input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [1] }],
    output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [1] }],
    sequence_batching: {
      max_sequence_idle_microseconds: 1000,
      control_input: [
        ctl('START', int32('CONTROL_SEQUENCE_START')), ctl('END', int32('CONTROL_SEQUENCE_END')),
        ctl('READY', int32('CONTROL_SEQUENCE_READY')), ctl('CORRID', { kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_UINT64' }),
      ],
      state: [{ input_name: 'STATE_IN', output_name: 'STATE_OUT', data_type: 'TYPE_FP32', dims: [-1] }],
      ...sb,
    },
    ...over,
  };
}

const accumulate = (inputs: Map<string, Tensor>) => {
  const x = inputs.get('INPUT0')!.data as Float32Array;
  const start = inputs.get('START')!.data as Int32Array;
  const ready = inputs.get('READY')!.data as Int32Array;
  const state = inputs.get('STATE_IN')!.data as Float32Array;
  const next = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) next[i] = ready[i] ? (start[i] ? x[i]! : state[i]! + x[i]!) : state[i]!;
  return new Map<string, Tensor>([
    ['OUTPUT0', { name: 'OUTPUT0', datatype: 'FP32', shape: [x.length, 1], data: next }],
    ['STATE_OUT', { name: 'STATE_OUT', datatype: 'FP32', shape: [x.length, 1], data: next.slice() }],
  ]);
};

const step = (id: bigint | string | number, x: number, flags: { start?: boolean; end?: boolean } = {}, rid = '') =>
  request({ id: rid, inputs: { INPUT0: [x] }, batch: 1, sequence: { id, ...flags } });
const col = (b: ExecutedBatch, name: string) => Array.from(b.inputs.get(name)!.data as ArrayLike<number | bigint>, (v) => (typeof v === 'bigint' ? v : Number(v)));

describe('SequenceBatcher (direct)', () => {
  it('binds sequences to slots (slot 0 of every instance first) and keeps them there', async () => {
    const h = harness(accumulator(), 2);
    h.backend.compute = accumulate;
    h.backend.hold = true;
    h.submit(step(1, 1, { start: true }));
    h.submit(step(2, 10, { start: true }));
    h.submit(step(3, 100, { start: true }));
    await flush();
    expect(h.backend.batches.map((b) => [b.instance, col(b, 'CORRID')])).toEqual([[0, [1n]], [1, [2n]]]);
    // Sequence 3 got instance 0, slot 1: it waits for instance 0 and rides with a padding row 0.
    h.submit(step(1, 2));
    h.backend.release(0);
    await flush();
    const b = h.backend.batches[2]!;
    expect(b.instance).toBe(0);
    expect(col(b, 'CORRID')).toEqual([1n, 3n]);
    expect(col(b, 'READY')).toEqual([1, 1]);
    expect(col(b, 'START')).toEqual([0, 1]);
    h.submit(step(3, 5, { end: true }));
    h.backend.release(0);
    await flush();
    const pad = h.backend.batches[3]!;
    expect(pad.rows).toBe(2);
    expect(col(pad, 'READY')).toEqual([0, 1]);
    expect(col(pad, 'END')).toEqual([0, 1]);
    expect(col(pad, 'CORRID')).toEqual([0n, 3n]);
    h.backend.hold = false;
    h.backend.release(0);
    h.backend.release(1);
    await flush();
    expect(h.stats.inferenceCount).toBe(5);
    expect(h.stats.executionCount).toBe(4);
  });

  it('carries implicit state across steps per sequence, starting from zeros, and strips it from responses', async () => {
    const controls = accumulator().sequence_batching!.control_input!.slice(0, 3);
    const h = harness(accumulator({}, { control_input: controls }));
    h.backend.compute = accumulate;
    const a1 = h.submit(step(7n, 1, { start: true }));
    const b1 = h.submit(step('seq-b', 10, { start: true }));
    await flush();
    expect(values(await a1.done)).toEqual([1]);
    expect(values(await b1.done)).toEqual([10]);
    expect((await a1.done as { outputs: Tensor[] }).outputs.map((o) => o.name)).toEqual(['OUTPUT0']);
    expect(h.backend.batches[0]!.inputs.get('STATE_IN')!.shape).toEqual([1, 1]);
    const a2 = h.submit(step(7n, 2));
    const b2 = h.submit(step('seq-b', 20));
    const a3 = h.submit(step(7n, 3, { end: true }));
    expect(values(await a2.done)).toEqual([3]);
    expect(values(await b2.done)).toEqual([30]);
    expect(values(await a3.done)).toEqual([6]);
    // A sequence asking for its state output gets it.
    const c = h.submit(request({ inputs: { INPUT0: [4] }, batch: 1, sequence: { id: 9, start: true }, outputs: ['OUTPUT0', 'STATE_OUT'] }));
    expect(values(await c.done, 'STATE_OUT')).toEqual([4]);
    expect(h.backend.batches.every((b) => b.requests.every((r) => r.stateOutputs?.[0] === 'STATE_OUT'))).toBe(true);
  });

  it('starts from initial_state zero_data with its dims, and refuses data_file clearly', () => {
    const zero = accumulator({}, { state: [{ input_name: 'S', output_name: 'SO', data_type: 'TYPE_INT32', dims: [-1], initial_state: [{ data_type: 'TYPE_INT32', dims: [3], zero_data: true, name: 'z' }] }] });
    expect(() => harness(zero)).not.toThrow();
    const file = accumulator({}, { state: [{ input_name: 'S', output_name: 'SO', data_type: 'TYPE_INT32', dims: [1], initial_state: [{ data_type: 'TYPE_INT32', dims: [1], data_file: 'init.bin', name: 'f' }] }] });
    expect(() => harness(file)).toThrow(/data_file is not supported/);
    expect(sequenceInternalInputs(zero)).toEqual(new Set(['START', 'END', 'READY', 'CORRID', 'S']));
  });

  it('delivers control values in each configured data type', async () => {
    const cases: [SequenceControl, unknown[]][] = [
      [{ kind: 'CONTROL_SEQUENCE_START', fp32_false_true: [0.5, 2.5] }, [2.5]],
      [{ kind: 'CONTROL_SEQUENCE_START', bool_false_true: [false, true] }, [1]],
      [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [7, 9] }, [9]],
      [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_UINT64' }, [12345678901234n]],
      [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_INT64' }, [12345678901234n]],
      [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_UINT32' }, [Number(12345678901234n & 0xffffffffn)]],
      [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_INT32' }, [Number(BigInt.asIntN(32, 12345678901234n))]],
    ];
    const dtypes = ['FP32', 'BOOL', 'INT32', 'UINT64', 'INT64', 'UINT32', 'INT32'];
    for (const [i, [c, want]] of cases.entries()) {
      const h = harness(accumulator({}, { control_input: [ctl('C', c)], state: [] }));
      await h.submit(step(12345678901234n, 1, { start: true })).done;
      const t = h.backend.batches[0]!.inputs.get('C')!;
      expect(t.datatype).toBe(dtypes[i]);
      expect(t.shape).toEqual([1, 1]);
      expect(col(h.backend.batches[0]!, 'C')).toEqual(want);
    }
    const h = harness(accumulator({ max_batch_size: 0 }, { control_input: [ctl('C', { kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_STRING' })], state: [] }));
    await h.submit(step('abc', 1, { start: true })).done;
    const t = h.backend.batches[0]!.inputs.get('C')!;
    expect([t.datatype, t.shape, new TextDecoder().decode((t.data as Uint8Array[])[0])]).toEqual(['BYTES', [1], 'abc']);
  });

  it('rejects with Triton\'s texts: no START, batch size > 1, no correlation id, string id on a numeric CORRID', async () => {
    const h = harness(accumulator());
    const noStart = h.submit(step(42, 1, {}, 'r1'));
    expect((noStart.result as TsiError).message).toBe(
      "inference request for sequence 42 to model 'acc' must specify the START flag on the first request of the sequence",
    );
    expect((noStart.result as TsiError).code).toBe('INVALID_ARG');
    const big = h.submit(request({ id: 'r2', inputs: { INPUT0: [1, 2] }, batch: 2, sequence: { id: 1, start: true } }));
    expect((big.result as TsiError).message).toBe(
      "inference request to model 'acc' must specify batch-size 1 due to requirements of sequence batcher",
    );
    const none = h.submit(request({ inputs: { INPUT0: [1] }, batch: 1 }));
    expect((none.result as TsiError).message).toMatch(/must specify a non-zero or non-empty correlation ID/);
    const str = h.submit(step('s', 1, { start: true }));
    expect((str.result as TsiError).message).toMatch(/sequence batching control 'CORRID' data-type is 'BYTES', but model '[a-z_]+' expects 'UINT64'/);
    expect(h.backend.batches).toHaveLength(0);
  });

  it('backlogs sequences when every slot is taken and hands a freed slot to the oldest', async () => {
    const h = harness(accumulator({ max_batch_size: 1 }));
    h.backend.compute = accumulate;
    await h.submit(step(1, 1, { start: true })).done;
    const b1 = h.submit(step(2, 10, { start: true }));
    const b2 = h.submit(step(2, 20));
    const c1 = h.submit(step(3, 100, { start: true, end: true }));
    await flush();
    expect(b1.result).toBeUndefined();
    expect(h.scheduler.queued()).toBe(3);
    const a2 = h.submit(step(1, 2, { end: true }));
    expect(values(await a2.done)).toEqual([3]);
    expect(values(await b2.done)).toEqual([30]);
    expect(c1.result).toBeUndefined();
    expect(values(await h.submit(step(2, 1, { end: true })).done)).toEqual([31]);
    expect(values(await c1.done)).toEqual([100]);
    expect(h.backend.batches.map((b) => col(b, 'CORRID')[0])).toEqual([1n, 1n, 2n, 2n, 2n, 3n]);
  });

  it('pads a slot whose head has another shape, up to the highest slot with a request (L0_sequence_batcher test_ragged_batch)', async () => {
    const h = harness(accumulator({
      input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [-1] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [-1] }],
    }));
    h.backend.hold = true;
    const shaped = (id: number, n: number) => request({ inputs: { INPUT0: Array(n).fill(id) }, batch: 1, sequence: { id, start: true, end: true } });
    h.submit(shaped(1, 1)); // slot 0, runs at once (held); its END frees the slot
    await flush();
    h.submit(shaped(2, 2)); // slot 0
    h.submit(shaped(3, 3)); // slot 1: another shape, so not in slot 0's batch
    h.backend.release(0);
    await flush();
    h.backend.hold = false;
    h.backend.release(0);
    await flush();
    // Slot 0's batch pads slot 1 (left out for its shape, so not dropped from the batch); then slot 1's
    // pads slot 0.
    expect(h.backend.batches.map((b) => [b.rows, col(b, 'READY')])).toEqual([[1, [1]], [2, [1, 0]], [2, [0, 1]]]);
    expect(h.stats.inferenceCount).toBe(3);
  });

  it("refuses a backlogged sequence whose requests' timeout runs out before it gets a slot, and forgets its ID (SequenceBatcherRequestTimeoutTest)", async () => {
    const h = harness(accumulator({ max_batch_size: 1 }, { max_sequence_idle_microseconds: 10_000_000 }));
    h.backend.compute = accumulate;
    await h.submit(step(1, 1, { start: true })).done;
    const timed = (x: number, flags: { start?: boolean; end?: boolean } = {}) =>
      request({ inputs: { INPUT0: [x] }, batch: 1, sequence: { id: 2, ...flags }, timeoutUs: 500 });
    const b1 = h.submit(timed(10, { start: true }));
    const b2 = h.submit(timed(20));
    await h.clock.advanceUs(499);
    expect(b1.result).toBeUndefined();
    await h.clock.advanceUs(1);
    for (const b of [b1, b2]) expect((await b.done as TsiError).message).toBe('timeout of the corresponding sequence has been expired');
    expect(h.scheduler.queued()).toBe(0);
    expect((h.submit(timed(30, { end: true })).result as TsiError).message).toMatch(/sequence 2 to model 'acc' must specify the START flag/);
    // The sequence in the slot never noticed.
    expect(values(await h.submit(step(1, 2, { end: true })).done)).toEqual([3]);
  });

  it('reaps a sequence idle past max_sequence_idle_microseconds and frees its slot', async () => {
    const h = harness(accumulator({ max_batch_size: 1 }));
    h.backend.compute = accumulate;
    await h.submit(step(1, 1, { start: true })).done;
    const waiting = h.submit(step(2, 5, { start: true }));
    await h.clock.advanceUs(999);
    expect(waiting.result).toBeUndefined();
    await h.clock.advanceUs(1);
    expect(values(await waiting.done)).toEqual([5]);
    const again = h.submit(step(1, 1));
    expect((again.result as TsiError).message).toMatch(/sequence 1 to model 'acc' must specify the START flag/);
  });

  it('warns on a START for a sequence still running and restarts its state in the same slot', async () => {
    const h = harness(accumulator());
    h.backend.compute = accumulate;
    await h.submit(step(5, 3, { start: true })).done;
    expect(values(await h.submit(step(5, 4, { start: true })).done)).toEqual([4]);
    expect(h.log.warnings[0]).toMatch(/sequence 5 for model 'acc' has a conflict/);
  });

  it('is picked by createScheduler and drains on stop, refusing the backlog', async () => {
    const h = harness(accumulator({ max_batch_size: 1 }));
    expect(h.scheduler).toBeInstanceOf(SequenceBatcher);
    h.backend.compute = accumulate;
    h.backend.hold = true;
    const a = h.submit(step(1, 1, { start: true }));
    const b = h.submit(step(2, 1, { start: true }));
    await flush();
    const stopped = h.scheduler.stop();
    expect((b.result as TsiError).message).toMatch(/stopped accepting/);
    h.backend.release();
    await stopped;
    expect(values(a.result)).toEqual([1]);
  });
});

describe('SequenceBatcher (oldest)', () => {
  const oldest = () => accumulator({ max_batch_size: 4 }, {
    oldest: { max_candidate_sequences: 3, preferred_batch_size: [2], max_queue_delay_microseconds: 100 },
  });

  it('batches the heads of candidate sequences oldest first, one request per sequence', async () => {
    const h = harness(oldest());
    h.backend.compute = accumulate;
    const s1 = h.submit(step(1, 1, { start: true }));
    await flush();
    // One candidate, preferred size 2: it waits for the delay.
    expect(h.backend.batches).toHaveLength(0);
    await h.clock.advanceUs(100);
    expect(values(await s1.done)).toEqual([1]);
    h.backend.hold = true;
    h.submit(step(1, 2));
    h.submit(step(1, 3));
    h.submit(step(2, 10, { start: true }));
    await flush();
    const b = h.backend.batches[1]!;
    expect(col(b, 'CORRID')).toEqual([1n, 2n]);
    expect(col(b, 'READY')).toEqual([1, 1]);
    h.backend.hold = false;
    h.backend.release();
    await h.clock.advanceUs(100);
    expect(col(h.backend.batches[2]!, 'CORRID')).toEqual([1n]);
    expect(col(h.backend.batches[2]!, 'STATE_IN')).toEqual([3]);
  });

  it('uses max_candidate_sequences slots per instance and backlogs the rest', async () => {
    const h = harness(oldest());
    h.backend.hold = true;
    for (let id = 1; id <= 4; id++) h.submit(step(id, id, { start: true }));
    await flush();
    expect(h.backend.batches.map((b) => col(b, 'CORRID'))).toEqual([[1n, 2n]]);
    expect(h.scheduler.queued()).toBe(2);
  });
});
