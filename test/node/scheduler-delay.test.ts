/**
 * Triton's scheduler test hook over a real server: with TRITONSERVER_DELAY_SCHEDULER=n in the
 * environment at start-up, a batching scheduler executes nothing until n requests are queued, so n
 * requests sent one by one run as one batch (execution_count, batch_stats); the hold is one-shot, and
 * the default scheduler (no dynamic_batching) is not held. TRITONSERVER_BACKLOG_DELAY_SCHEDULER also
 * holds the direct sequence batcher until that many requests wait in its backlog. Each request is
 * sent only after the previous one is seen queued, so without the hook these tests time out or see
 * smaller batches.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schedulerDelayFromEnv } from '../../runtime-node/index.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const onnx = (m: string) => readFileSync(join(MODELS, m, '1', 'model.onnx'));
const config = (m: string) => readFileSync(join(MODELS, m, 'config.pbtxt'), 'utf8');
const renamed = (from: string, to: string) => config(from).replace(`name: "${from}"`, `name: "${to}"`);

/**
 * A server over `files` for the enclosing describe, started with the hook's variables set only while
 * it starts (they are read once, there). Returns a getter for the running server.
 */
function serverWith(env: Record<string, string>, files: Record<string, string | Uint8Array>): () => TestServer {
  let s: TestServer | undefined;
  let repo: { path: string; cleanup: () => void } | undefined;
  beforeAll(async () => {
    repo = tempRepo(files);
    const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, env);
    try {
      s = await startTestServer({ modelRepositories: [repo.path] });
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });
  return () => s!;
}

async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/**
 * Sends `bodies` to `model` one at a time, each once the one before is queued (held, not executed),
 * and checks that nothing is answered before the last is sent. Resolves to the response bodies.
 */
async function sendOneByOne(s: TestServer, model: string, bodies: unknown[]): Promise<any[]> {
  const stats = s.server.repository.get(model).stats;
  let answered = 0;
  const replies: Promise<any>[] = [];
  for (const [i, body] of bodies.entries()) {
    replies.push(postJson(`${s.url}/v2/models/${model}/infer`, body).then((r) => {
      answered++;
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body;
    }));
    if (i === bodies.length - 1) break;
    await until(() => stats.pending === i + 1 || answered > 0, `request ${i + 1} of ${model} to be held in its queue`);
    expect(answered, `a request of ${model} was answered before ${bodies.length} had arrived`).toBe(0);
  }
  return Promise.all(replies);
}

const statsOf = async (s: TestServer, model: string) => {
  const st = (await getJson(`${s.url}/v2/models/${model}/stats`)).body.model_stats[0];
  return {
    executions: Number(st.execution_count),
    inferences: Number(st.inference_count),
    batches: st.batch_stats.map((b: any) => [Number(b.batch_size), Number(b.compute_infer.count)]),
  };
};

const addSub = (k: number) => ({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, j) => k * 100 + j) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => k) },
  ],
});
const step = (id: number, input: number, flags: { start?: boolean; end?: boolean }) => ({
  parameters: { sequence_id: id, ...(flags.start ? { sequence_start: true } : {}), ...(flags.end ? { sequence_end: true } : {}) },
  inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: [input] }],
});
const output = (body: any) => body.outputs[0].data;

describe('schedulerDelayFromEnv', () => {
  it('reads the counts as Triton does (a leading integer, else 0), and only when the request count is set', () => {
    expect(schedulerDelayFromEnv({})).toBeUndefined();
    expect(schedulerDelayFromEnv({ TRITONSERVER_DELAY_SCHEDULER: '0', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '3' })).toBeUndefined();
    expect(schedulerDelayFromEnv({ TRITONSERVER_DELAY_SCHEDULER: 'x' })).toBeUndefined();
    expect(schedulerDelayFromEnv({ TRITONSERVER_DELAY_SCHEDULER: '-2' })).toBeUndefined();
    expect(schedulerDelayFromEnv({ TRITONSERVER_DELAY_SCHEDULER: ' 12abc' })).toEqual({ requests: 12, backlog: 0 });
    expect(schedulerDelayFromEnv({ TRITONSERVER_DELAY_SCHEDULER: '4', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '2' }))
      .toEqual({ requests: 4, backlog: 2 });
  });
});

describe('TRITONSERVER_DELAY_SCHEDULER=4', () => {
  const server = serverWith({ TRITONSERVER_DELAY_SCHEDULER: '4' }, {
    'held/config.pbtxt': `${renamed('simple', 'held')}\ndynamic_batching {}\n`,
    'held/1/model.onnx': onnx('simple'),
    'unbatched/config.pbtxt': renamed('simple', 'unbatched'),
    'unbatched/1/model.onnx': onnx('simple'),
    'oldest/config.pbtxt': renamed('simple_dyna_sequence', 'oldest'),
    'oldest/1/model.onnx': onnx('simple_dyna_sequence'),
  });

  it('runs 4 requests sent one by one as one batch of 4, then schedules as usual', async () => {
    const s = server();
    const replies = await sendOneByOne(s, 'held', [0, 1, 2, 3].map(addSub));
    replies.forEach((body, k) => {
      expect(body.outputs.find((o: any) => o.name === 'OUTPUT0').data).toEqual(Array.from({ length: 16 }, (_, j) => k * 101 + j));
    });
    expect(await statsOf(s, 'held')).toEqual({ executions: 1, inferences: 4, batches: [[4, 1]] });
    // One-shot: a lone request now runs at once.
    expect((await postJson(`${s.url}/v2/models/held/infer`, addSub(7))).status).toBe(200);
    expect(await statsOf(s, 'held')).toEqual({ executions: 2, inferences: 5, batches: [[1, 1], [4, 1]] });
  });

  it('does not hold the default scheduler (a model without dynamic_batching)', async () => {
    const s = server();
    let answered = false;
    const reply = postJson(`${s.url}/v2/models/unbatched/infer`, addSub(1)).finally(() => (answered = true));
    await until(() => answered, 'a lone request to the default scheduler to be answered (it must not be held)');
    expect((await reply).status).toBe(200);
    expect((await statsOf(s, 'unbatched')).executions).toBe(1);
  });

  it('holds the oldest sequence strategy until 4 sequences wait, then batches them together', async () => {
    const s = server();
    const replies = await sendOneByOne(s, 'oldest', [1, 2, 3, 4].map((id) => step(id, id * 10, { start: true })));
    expect(replies.map(output)).toEqual([[11], [21], [31], [41]]);
    expect(await statsOf(s, 'oldest')).toEqual({ executions: 1, inferences: 4, batches: [[4, 1]] });
    // Ended, so the server's stop need not wait for the idle reaper; the last answer carries the id.
    const ends = await Promise.all([1, 2, 3, 4].map((id) => postJson(`${s.url}/v2/models/oldest/infer`, step(id, 0, { end: true }))));
    expect(ends.map((r) => output(r.body))).toEqual([[1], [2], [3], [4]]);
  });
});

describe('TRITONSERVER_DELAY_SCHEDULER=1 with TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1 (direct sequence batcher)', () => {
  const server = serverWith({ TRITONSERVER_DELAY_SCHEDULER: '1', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '1' }, {
    // Two slots: a third sequence waits in the backlog.
    'direct/config.pbtxt': renamed('simple_sequence', 'direct').replace('max_batch_size: 8', 'max_batch_size: 2'),
    'direct/1/model.onnx': onnx('simple_sequence'),
  });

  it('waits for a backlogged request too, so both slots run in one batch before the backlog gets a slot', async () => {
    const s = server();
    // Without the backlog count the first request alone would release the hold (a batch of 1).
    const replies = await sendOneByOne(s, 'direct', [
      step(1, 10, { start: true, end: true }),
      step(2, 20, { start: true }),
      step(3, 30, { start: true }),
    ]);
    expect(replies.map(output)).toEqual([[11], [21], [31]]);
    // [1, 2] together; sequence 1's end hands its slot to sequence 3, which then runs alone.
    expect(await statsOf(s, 'direct')).toEqual({ executions: 2, inferences: 3, batches: [[1, 1], [2, 1]] });
    const end = await postJson(`${s.url}/v2/models/direct/infer`, step(2, 5, { end: true }));
    expect(output(end.body)).toEqual([5]);
    expect(output((await postJson(`${s.url}/v2/models/direct/infer`, step(3, 6, { end: true }))).body)).toEqual([6]);
    expect((await statsOf(s, 'direct')).executions).toBe(4);
  });
});

describe('TRITONSERVER_DELAY_SCHEDULER=2, direct max_queue_delay_microseconds with minimum_slot_utilization 0 (L0_sequence_batcher test_queue_delay_no_min_util)', () => {
  const server = serverWith({ TRITONSERVER_DELAY_SCHEDULER: '2', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '0' }, {
    'qdelay/config.pbtxt': renamed('simple_sequence', 'qdelay')
      .replace('sequence_batching {', 'sequence_batching {\n  direct { max_queue_delay_microseconds: 3000000, minimum_slot_utilization: 0 }'),
    'qdelay/1/model.onnx': onnx('simple_sequence'),
  });

  it("counts a batch's padding rows in its batch size, as Triton's null requests: two batches of 2, three inferences", async () => {
    const s = server();
    // Sequence 1001 (one request, no END) in slot 0 and 1002's first in slot 1 run together; 1002's
    // second then runs in slot 1 with slot 0 padded: [null, 1002].
    const [, first] = await sendOneByOne(s, 'qdelay', [step(1001, 1, { start: true }), step(1002, 11, { start: true })]);
    expect(output(first)).toEqual([12]);
    expect(output((await postJson(`${s.url}/v2/models/qdelay/infer`, step(1002, 12, {}))).body)).toEqual([12]);
    expect(await statsOf(s, 'qdelay')).toEqual({ executions: 2, inferences: 3, batches: [[2, 2]] });
  });
});

describe('TRITONSERVER_DELAY_SCHEDULER=4 with TRITONSERVER_BACKLOG_DELAY_SCHEDULER=2 (L0_sequence_batcher test_backlog_same_correlation_id)', () => {
  const server = serverWith({ TRITONSERVER_DELAY_SCHEDULER: '4', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '2' }, {
    'samecid/config.pbtxt': renamed('simple_sequence', 'samecid').replace('max_batch_size: 8', 'max_batch_size: 2'),
    'samecid/1/model.onnx': onnx('simple_sequence'),
  });

  it('a START for an ID whose END is queued (not yet run) is a new sequence, backlogged, not queued behind the old one', async () => {
    const s = server();
    // Sequences 1 and 2 fill both slots, their ENDs queued; then 2 again: the backlog (2 requests)
    // releases the hold. It used to join the old sequence 2's slot, the backlog never filled, and
    // the requests waited for ever.
    const replies = await sendOneByOne(s, 'samecid', [
      step(1, 1, { start: true }), step(2, 11, { start: true }), step(1, 3, { end: true }), step(2, 13, { end: true }),
      step(2, 111, { start: true }), step(2, 113, { end: true }),
    ]);
    expect(replies).toHaveLength(6);
    // Two batches of both slots; then the new sequence 2, alone in the first slot freed, twice.
    expect(await statsOf(s, 'samecid')).toEqual({ executions: 4, inferences: 6, batches: [[1, 2], [2, 2]] });
  });
});

describe('TRITONSERVER_DELAY_SCHEDULER=10 with TRITONSERVER_BACKLOG_DELAY_SCHEDULER=3 (L0_sequence_batcher test_backlog_fill_no_end)', () => {
  const server = serverWith({ TRITONSERVER_DELAY_SCHEDULER: '10', TRITONSERVER_BACKLOG_DELAY_SCHEDULER: '3' }, {
    'fill/config.pbtxt': renamed('simple_sequence', 'fill').replace('max_batch_size: 8', 'max_batch_size: 4'),
    'fill/1/model.onnx': onnx('simple_sequence'),
  });

  it('fills the slots the short sequences free from the backlog; the batches keep the slots up to the last busy one', async () => {
    const s = server();
    const replies = await sendOneByOne(s, 'fill', [
      step(1001, 1, { start: true }), step(1001, 2, {}), step(1001, 3, { end: true }),
      step(1002, 11, { start: true }), step(1002, 13, { end: true }),
      step(1003, 111, { start: true }), step(1003, 113, { end: true }),
      step(1004, 1111, { start: true }), step(1004, 1112, {}), step(1004, 1113, { end: true }),
      step(1005, 11111, { start: true, end: true }),
      step(1006, 22222, { start: true }), step(1006, 22223, {}),
    ]);
    expect(replies).toHaveLength(13);
    // 1006's END comes later, alone in its slot (the third) with the two below it padded.
    expect((await postJson(`${s.url}/v2/models/fill/infer`, step(1006, 22224, { end: true }))).status).toBe(200);
    // Triton's expectation: three batches of 4, then two of 3 (1006 took the slot 1003 freed).
    expect(await statsOf(s, 'fill')).toEqual({ executions: 5, inferences: 14, batches: [[3, 2], [4, 3]] });
  });
});
