/**
 * The shared-memory hand-off between the main thread and the onnxruntime workers
 * (runtime-node/onnx/channel.ts). Through the real server: many concurrent requests with distinct
 * inputs, small ones through channel slots and ones larger than a slot by postMessage, mixed on the
 * same instances, each get back exactly their own tensor (a mix-up of slots, of the two ways or of
 * their order would show as another request's values). The channel alone: a request that finds every
 * slot taken or does not fit is refused (the caller posts it), replies are matched by id whatever
 * their order, and outputs come back in buffers of their own, not views of the slot; the worker is
 * notified only when parked, and no request is lost while it goes to sleep.
 */

import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { addSubModel, identityModel } from '../../scripts/gen-models.js';
import { ChannelMain, ChannelWorker, SLOT_DATA_BYTES, channelBuffer, type ChannelOutput, type SlotRequest } from '../../runtime-node/onnx/channel.js';
import { binaryOutputs, bytesOf, postBinary, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

let s: TestServer;
let repo: ReturnType<typeof tempRepo>;

beforeAll(async () => {
  repo = tempRepo({
    'ident/config.pbtxt': `name: "ident"\nbackend: "onnxruntime"\nmax_batch_size: 0\n`
      + `input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]\n`
      + `instance_group [{ count: 2 kind: KIND_CPU }]\nparameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`,
    'ident/1/model.onnx': identityModel('FP32', { batch: false }),
    'addsub/config.pbtxt': `name: "addsub"\nbackend: "onnxruntime"\nmax_batch_size: 8\n`
      + `input [{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT64 dims: [ 16 ] }]\n`
      + `output [{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT64 dims: [ 16 ] }]\n`
      + `instance_group [{ count: 3 kind: KIND_CPU }]\ndynamic_batching { max_queue_delay_microseconds: 500 }\n`,
    'addsub/1/model.onnx': addSubModel('INT64'),
  });
  s = await startTestServer({ modelRepositories: [repo.path] });
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

describe('the worker hand-off through the real server', () => {
  it('gives every one of many concurrent requests its own tensor, slot-sized and larger mixed on two instances', async () => {
    const big = SLOT_DATA_BYTES / 4 + 1000; // one slot's data area cannot hold it: postMessage
    const sizes = Array.from({ length: 60 }, (_, i) => (i % 4 === 0 ? big + i : 16 + i * 7));
    const inputs = sizes.map((n, i) => Float32Array.from({ length: n }, (_, k) => i + (k % 1000) * 64));
    // The witness that the server hands batches through the channel at all (every answer would be as
    // right with everything posted): each slot-sized request went into a slot, each larger one did not.
    const submit = vi.spyOn(ChannelMain.prototype, 'submit');
    const answers = await Promise.all(inputs.map((data) => postBinary(`${s.url}/v2/models/ident/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length], parameters: { binary_data_size: data.byteLength } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }, [bytesOf(data)])));
    answers.forEach((a, i) => {
      expect(a.status, JSON.stringify(a.json)).toBe(200);
      expect(a.json.outputs[0].shape).toEqual([sizes[i]]);
      const got = binaryOutputs(a.json, a.binary).get('OUTPUT0')!;
      expect(Buffer.from(got).equals(Buffer.from(bytesOf(inputs[i]!))), `request ${i} (${sizes[i]} elements)`).toBe(true);
    });
    const taken = submit.mock.results.filter((r) => r.type === 'return' && r.value === true).length;
    submit.mockRestore();
    expect(taken).toBe(sizes.filter((n) => n < big).length);
  }, 60_000);

  it('splits batched INT64 answers back to the right requests on three instances', async () => {
    const answers = await Promise.all(Array.from({ length: 150 }, async (_, i) => {
      const a = BigInt64Array.from({ length: 16 }, (_, k) => BigInt(i * 1000 + k) * 3_000_000_000n);
      const b = BigInt64Array.from({ length: 16 }, (_, k) => BigInt(k - i));
      const r = await postBinary(`${s.url}/v2/models/addsub/infer`, {
        inputs: [
          { name: 'INPUT0', datatype: 'INT64', shape: [1, 16], parameters: { binary_data_size: 128 } },
          { name: 'INPUT1', datatype: 'INT64', shape: [1, 16], parameters: { binary_data_size: 128 } },
        ],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1', parameters: { binary_data: true } }],
      }, [bytesOf(a), bytesOf(b)]);
      return { r, a, b };
    }));
    for (const { r, a, b } of answers) {
      expect(r.status).toBe(200);
      const outs = binaryOutputs(r.json, r.binary);
      const sum = new BigInt64Array(outs.get('OUTPUT0')!.slice().buffer);
      const diff = new BigInt64Array(outs.get('OUTPUT1')!.slice().buffer);
      expect([...sum]).toEqual([...a].map((x, k) => x + b[k]!));
      expect([...diff]).toEqual([...a].map((x, k) => x - b[k]!));
    }
  }, 60_000);
});

describe('the channel alone', () => {
  const tensor = (n: number, fill: number) => ({ type: 'float32', dims: [n], data: new Float32Array(n).fill(fill) });

  it('refuses what does not fit, matches replies by id in any order, and copies outputs out of the slot', async () => {
    const sab = channelBuffer();
    const got = new Map<number, ChannelOutput[]>();
    const main = new ChannelMain(sab, (id, _times, outs) => got.set(id, outs));
    const worker = new ChannelWorker(sab);
    const taken: SlotRequest[] = [];
    void worker.serve((r) => taken.push(r));

    expect(main.submit(1, 101, 0, [[0, tensor(SLOT_DATA_BYTES / 4 + 1, 1)]], [0])).toBe(false);
    expect(main.submit(1, 101, 0, [[0, { type: 'string', dims: [1], data: new Uint8Array(1) }]], [0])).toBe(false);
    for (let i = 0; i < 4; i++) expect(main.submit(i + 1, 100 + i, 0, [[0, tensor(8, i)]], [0])).toBe(true);
    expect(main.submit(5, 104, 0, [[0, tensor(8, 4)]], [0])).toBe(false); // every slot taken
    await new Promise((r) => setTimeout(r, 20));
    expect(taken.map((r) => [r.seq, r.id])).toEqual([[1, 100], [2, 101], [3, 102], [4, 103]]);
    expect(taken.map((r) => [...(r.inputs()[0]!.data as Float32Array)][0])).toEqual([0, 1, 2, 3]);

    const times = { waitNs: 0, inputNs: 0, inferNs: 0, outputNs: 0 };
    for (const r of [taken[2]!, taken[0]!]) {
      const x = r.inputs()[0]!.data as Float32Array;
      expect(worker.reply(r.slot, times, [[0, { type: 'float32', dims: [8], data: x.map((v) => v * 10) }]])).toBe(true);
    }
    await new Promise((r) => setTimeout(r, 20));
    expect([...got.keys()].sort()).toEqual([100, 102]);
    const out = got.get(102)![0]!;
    expect([...(out.data as Float32Array)]).toEqual(new Array(8).fill(20));
    expect(out.data.buffer).toBeInstanceOf(ArrayBuffer);
    // Two slots are free again: the next requests fit.
    expect(main.submit(5, 104, 0, [[0, tensor(8, 4)]], [0])).toBe(true);
    expect(main.submit(6, 105, 0, [[0, tensor(8, 5)]], [0])).toBe(true);
    expect(main.submit(7, 106, 0, [[0, tensor(8, 6)]], [0])).toBe(false);
    worker.stop();
    main.close();
  });

  it('notifies the worker only when it is parked, and it still takes what came while it was busy', async () => {
    const sab = channelBuffer();
    const got: number[] = [];
    const main = new ChannelMain(sab, (id) => got.push(id));
    const worker = new ChannelWorker(sab);
    const taken: SlotRequest[] = [];
    let release!: () => void;
    let running = Promise.resolve();
    void worker.serve((r) => {
      taken.push(r);
      running = new Promise<void>((res) => (release = res)).then(() => {
        worker.reply(r.slot, { waitNs: 0, inputNs: 0, inferNs: 0, outputNs: 0 }, []);
      });
    }, () => running);
    await new Promise((r) => setTimeout(r, 10));
    const notify = vi.spyOn(Atomics, 'notify');
    // Notifies of this channel's request counter (word 0), whatever else in the process notifies.
    const wakes = () => notify.mock.calls.filter((c) => c[0].buffer === sab && c[1] === 0);
    try {
      expect(main.submit(1, 1, 0, [[0, tensor(4, 1)]], [0])).toBe(true); // parked: notified
      expect(wakes()).toHaveLength(1);
      await vi.waitFor(() => expect(taken).toHaveLength(1));
      expect(main.submit(2, 2, 0, [[0, tensor(4, 2)]], [0])).toBe(true); // busy with 1: not notified
      expect(wakes()).toHaveLength(1);
      release();
      await vi.waitFor(() => expect(taken).toHaveLength(2)); // taken without a notify, once 1 was done
      release();
      await vi.waitFor(() => expect(got).toEqual([1, 2]));
      await new Promise((r) => setTimeout(r, 10));
      expect(main.submit(3, 3, 0, [[0, tensor(4, 3)]], [0])).toBe(true); // parked again: notified
      expect(wakes()).toHaveLength(2);
      await vi.waitFor(() => expect(taken).toHaveLength(3));
      release();
      await vi.waitFor(() => expect(got).toEqual([1, 2, 3]));
    } finally {
      notify.mockRestore();
      worker.stop();
      main.close();
    }
  });

  it('loses no request written while the worker goes to sleep: a worker thread, random timing on both sides', async () => {
    const sab = channelBuffer();
    const N = 5000;
    const echo = new Worker(new URL('../../runtime-node/dev-worker.mjs', import.meta.url), {
      workerData: { entry: new URL('../helpers/channel-echo-worker.ts', import.meta.url).href, data: { sab } },
    });
    const got = new Set<number>();
    const gaps = [() => undefined, () => Promise.resolve(), () => new Promise((r) => setImmediate(r)), () => new Promise((r) => setTimeout(r, 0))];
    let sent = 0;
    let done!: () => void;
    const all = new Promise<void>((r) => (done = r));
    const send = async (): Promise<void> => {
      await gaps[Math.floor(Math.random() * gaps.length)]!();
      if (sent >= N) return;
      sent++;
      expect(main.submit(sent, sent, 0, [[0, tensor(4, sent)]], [0])).toBe(true);
    };
    const main = new ChannelMain(sab, (id, _t, outs) => {
      expect((outs[0]!.data as Float32Array)[0]).toBe(id);
      got.add(id);
      if (got.size === N) done();
      else void send();
    });
    try {
      for (let i = 0; i < 3; i++) void send(); // three outstanding, as the scheduler pipelines
      // A lost wake-up leaves a request in its slot and the worker asleep: the wait below times out.
      await all;
      expect(got.size).toBe(N);
    } finally {
      main.close();
      await echo.terminate();
    }
  }, 60_000);
});
