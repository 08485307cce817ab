/**
 * The python backend's everyday path, through the real HTTP and gRPC servers and tsi's own clients
 * (tritonclient-shaped calls): Triton's add_sub model.py on FP32 and INT32, with dynamic batching
 * where every concurrent client gets exactly its rows back; initialize's args; requested-output
 * pruning; BYTES with NUL and non-UTF-8 bytes; and auto_complete_config loading a model that has no
 * config.pbtxt (and failing one whose script contradicts its config.pbtxt, with Triton's message).
 */

import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { GrpcClient } from '../../client/grpc.js';
import { getJson, postJson, type TestServer } from '../helpers/server.js';
import { expectComputeOverlap } from '../helpers/overlap.js';
import { pythonRepo, startPythonServer } from '../helpers/python-server.js';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;
let http: HttpClient;
let grpc: GrpcClient;

beforeAll(async () => {
  repo = pythonRepo(['add_sub', 'add_sub_int32', 'bytes_echo', 'autocomplete_py', 'autocomplete_conflict', 'sequence_py', 'sleep_py']);
  s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', trace: { file: join(repo.path, 'trace.json') } });
  http = new HttpClient(s.url);
  grpc = new GrpcClient(`127.0.0.1:${s.grpc!.port}`);
}, 60_000);

afterAll(async () => {
  await grpc?.close();
  await s?.stop();
  repo?.cleanup();
});

const f32 = (...v: number[]) => Float32Array.from(v);

describe('add_sub (Triton\'s example model.py)', () => {
  it('adds and subtracts FP32 over HTTP (binary) and gRPC with tsi\'s clients', async () => {
    for (const client of [http, grpc]) {
      const r = await client.infer('add_sub', [
        { name: 'INPUT0', shape: [1, 4], data: f32(1, 2, 3, 4) },
        { name: 'INPUT1', shape: [1, 4], data: f32(0.5, 0.5, 0.5, 0.5) },
      ]);
      expect(Array.from(r.data<Float32Array>('OUTPUT0'))).toEqual([1.5, 2.5, 3.5, 4.5]);
      expect(Array.from(r.data<Float32Array>('OUTPUT1'))).toEqual([0.5, 1.5, 2.5, 3.5]);
      expect(r.output('OUTPUT0')).toMatchObject({ datatype: 'FP32', shape: [1, 4] });
    }
  });

  it('passes initialize Triton\'s args, and the request its id, parameters and requested outputs', async () => {
    const r = await postJson(`${s.url}/v2/models/add_sub/infer`, {
      id: 'req-7', parameters: { show_args: true },
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
      ],
      outputs: [{ name: 'OUTPUT1' }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs.map((o: { name: string }) => o.name)).toEqual(['OUTPUT1']);
    expect(r.body.outputs[0].data).toEqual([0, 1, 2, 3]);
    expect(JSON.parse(r.body.parameters.args)).toEqual({
      model_instance_kind: 'CPU', model_instance_name: 'add_sub_0_0', model_instance_device_id: '0',
      model_repository: join(repo.path, 'add_sub'), model_version: '1', model_name: 'add_sub',
    });
    expect(r.body.parameters).toMatchObject({ config_name: 'add_sub', requested: 'OUTPUT1', request_id: 'req-7' });
  });

  it('batches concurrent INT32 requests and gives each client exactly its rows', async () => {
    const clients = 12;
    const results = await Promise.all(Array.from({ length: clients }, async (_, c) => {
      const rows = 1 + (c % 3);
      const a = Int32Array.from({ length: rows * 4 }, (_, i) => c * 1000 + i);
      const b = Int32Array.from({ length: rows * 4 }, (_, i) => i * 3);
      const r = await http.infer('add_sub_int32', [
        { name: 'INPUT0', shape: [rows, 4], data: a }, { name: 'INPUT1', shape: [rows, 4], data: b },
      ], { parameters: { client: c } });
      return { a, b, rows, r };
    }));
    let batched = 0;
    for (const { a, b, rows, r } of results) {
      expect(r.output('OUTPUT0')!.shape).toEqual([rows, 4]);
      expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x, i) => x + b[i]!));
      expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x, i) => x - b[i]!));
      if (Number(r.parameters?.batch_requests) > 1) batched++;
    }
    // Triton's Python backend hands execute() the requests of a dynamic batch as one list.
    expect(batched).toBeGreaterThan(0);
    const stats = await getJson(`${s.url}/v2/models/add_sub_int32/stats`);
    const st = stats.body.model_stats[0];
    expect(Number(st.inference_count)).toBe(results.reduce((n, x) => n + x.rows, 0));
    expect(Number(st.execution_count)).toBeLessThan(clients);
  });

  it('runs each instance in a process of its own, in parallel', async () => {
    let pids: number[] = [];
    await expectComputeOverlap(s.url, join(repo.path, 'trace.json'), 'sleep_py', 2, async () => {
      pids = await Promise.all([1, 2].map(async () => {
        const r = await http.infer('sleep_py', [{ name: 'MS', shape: [1], data: Int32Array.of(400) }]);
        return Number(r.data<BigInt64Array>('PID')[0]);
      }));
    });
    expect(new Set(pids).size).toBe(2);
    const devices = s.logs.find((l) => l.includes("loaded 'sleep_py' version 1 on"))!;
    for (const pid of pids) expect(devices).toContain(`python (pid ${pid})`);
  });

  it('logs what the model logs and prints, tagged with model and instance', () => {
    expect(s.logs.some((l) => /add_sub \(add_sub_0_0\) model\.py:\d+: add_sub initialized as add_sub_0_0/.test(l))).toBe(true);
  });
});

describe('what a request carries', () => {
  it('gives sequences\' correlation ids and START/END flags, parameters, the model folder and readiness', async () => {
    const step = (x: number, sequence: Record<string, unknown>) => postJson(`${s.url}/v2/models/sequence_py/infer`, {
      // `['__proto__']` is a key of its own (a plain `__proto__:` would set the literal's prototype).
      parameters: { ...sequence, note: 'hi', n: 3, timeout: 5_000_000, ['__proto__']: 'p', toString: 't' },
      inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [x] }], outputs: [{ name: 'SUM' }, { name: 'INFO' }],
    });
    // One sequence slot (max_batch_size 0): one sequence at a time.
    const a = await step(5, { sequence_id: 42, sequence_start: true });
    const b = await step(7, { sequence_id: 42 });
    const d = await step(10, { sequence_id: 42, sequence_end: true });
    const c = await step(1, { sequence_id: 'text-id', sequence_start: true, sequence_end: true });
    for (const r of [a, b, c, d]) expect(r.status, JSON.stringify(r.body)).toBe(200);
    const sum = (r: typeof a) => r.body.outputs.find((o: { name: string }) => o.name === 'SUM').data[0];
    const info = (r: typeof a) => JSON.parse(r.body.outputs.find((o: { name: string }) => o.name === 'INFO').data[0]);
    expect([sum(a), sum(b), sum(d), sum(c)]).toEqual([5, 12, 22, 1]);
    expect([a, b, d, c].map((r) => [info(r).correlation_id, info(r).flags])).toEqual([[42, 1], [42, 0], [42, 2], ['text-id', 3]]);
    expect(info(d)).toMatchObject({
      open: 0, timeout: 5_000_000, parameters: { note: 'hi', n: 3 }, requested: ['INFO', 'SUM'], requested_type: 'set',
      model_dir: join(repo.path, 'sequence_py', '1'), add_sub_ready: true, nope_ready: false,
    });
    expect(Object.entries(info(d).parameters)).toEqual(expect.arrayContaining([['__proto__', 'p'], ['toString', 't']]));
    expect(a.body.parameters).toEqual({ as_int: 7, as_bool: true, as_str: 's' });
    expect(s.logs.some((l) => /^W.*sequence_py \(sequence_py_0\) model\.py:\d+: sequence 42: flags 1$/.test(l))).toBe(true);
    expect(s.logs.some((l) => /^E.*sequence_py \(sequence_py_0\) model\.py:\d+: explicit error level$/.test(l))).toBe(true);
    expect(s.logs.some((l) => /^I.*verbose line$/.test(l))).toBe(true);
  });
});

describe('a correlation id past 2^53', () => {
  it('reaches the model exact (the stub channel carries it as a decimal, not a double)', async () => {
    const r = await fetch(`${s.url}/v2/models/sequence_py/infer`, {
      method: 'POST',
      body: '{"parameters":{"sequence_id":18446744073709551615,"sequence_start":true,"sequence_end":true},'
        + '"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[4]}],"outputs":[{"name":"INFO"}]}',
    });
    const text = await r.text();
    expect(r.status, text).toBe(200);
    // INFO is Python's json.dumps of what the model saw: the id as an exact integer literal.
    expect(text).toContain('\\"correlation_id\\": 18446744073709551615,');
  });
});

describe('BYTES tensors', () => {
  it('round-trip elements with NUL and non-UTF-8 bytes exactly (HTTP binary and gRPC)', async () => {
    const elements = [
      new Uint8Array([0x61, 0x00, 0x62]), new Uint8Array([0xff, 0xfe, 0x00, 0x80]), new Uint8Array(0), new TextEncoder().encode('héllo wörld'),
    ];
    for (const client of [http, grpc]) {
      const r = await client.infer('bytes_echo', [{ name: 'TEXT', datatype: 'BYTES', shape: [4], data: elements }]);
      expect(r.data<Uint8Array[]>('ECHO').map((e) => Array.from(e))).toEqual(elements.map((e) => Array.from(e)));
      expect(r.data<Uint8Array[]>('REVERSED').map((e) => Array.from(e))).toEqual(elements.map((e) => Array.from(e).reverse()));
      expect(Array.from(r.data<Int32Array>('LENGTHS'))).toEqual([3, 4, 0, 13]);
    }
  });

  it('keeps strings as strings over JSON', async () => {
    const r = await postJson(`${s.url}/v2/models/bytes_echo/infer`, { inputs: [{ name: 'TEXT', datatype: 'BYTES', shape: [2], data: ['abc', 'xyz'] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs.find((o: { name: string }) => o.name === 'REVERSED').data).toEqual(['cba', 'zyx']);
  });

  it('refuses, naming the output, a BYTES output that is not UTF-8 when asked for as JSON (bytes of "ünï" reversed)', async () => {
    const r = await postJson(`${s.url}/v2/models/bytes_echo/infer`, { inputs: [{ name: 'TEXT', datatype: 'BYTES', shape: [2], data: ['abc', 'ünï'] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error).toContain("element 1 of output 'REVERSED'");
  });
});

describe('auto_complete_config', () => {
  it('loads a model with no config.pbtxt, and GET config shows what the script set', async () => {
    const cfg = await http.getModelConfig('autocomplete_py');
    expect(cfg).toMatchObject({
      name: 'autocomplete_py', backend: 'python', max_batch_size: 4,
      input: [
        expect.objectContaining({ name: 'X', data_type: 'TYPE_FP32', dims: [2], optional: false }),
        expect.objectContaining({ name: 'SCALE', data_type: 'TYPE_FP32', dims: [1], optional: true }),
      ],
      output: [expect.objectContaining({ name: 'Y', data_type: 'TYPE_FP32', dims: [2] })],
    });
    expect(cfg.dynamic_batching).toBeDefined();
    const plain = await http.infer('autocomplete_py', [{ name: 'X', shape: [2, 2], data: f32(1, 2, 3, 4) }]);
    expect(Array.from(plain.data<Float32Array>('Y'))).toEqual([2, 4, 6, 8]);
    const scaled = await http.infer('autocomplete_py', [{ name: 'X', shape: [1, 2], data: f32(1, 2) }, { name: 'SCALE', shape: [1, 1], data: f32(10) }]);
    expect(Array.from(scaled.data<Float32Array>('Y'))).toEqual([10, 20]);
  });

  it('fails a model whose script contradicts its config.pbtxt, with Triton\'s message', async () => {
    const index = await http.getModelRepositoryIndex();
    const row = index.find((e) => e.name === 'autocomplete_conflict');
    expect(row?.state).toBe('UNAVAILABLE');
    expect(row?.reason).toContain("unable to load model 'autocomplete_conflict', configuration expects datatype TYPE_INT32 for input 'X', model provides TYPE_FP32");
  });
});

describe('large tensors', () => {
  it('grow both shared-memory files while requests overlap', async () => {
    const big = pythonRepo(['big_py']);
    const server = await startPythonServer({
      modelRepositories: [big.path], python: { 'shm-default-byte-size': '65536', 'shm-growth-byte-size': '65536' },
    });
    try {
      const client = new HttpClient(server.url);
      const sizes = [3_000_000, 17, 250_000, 1, 1_000_000, 64_000, 0, 500_000];
      for (let round = 0; round < 3; round++) {
        await Promise.all(sizes.map(async (n, k) => {
          const data = Float32Array.from({ length: n }, (_, i) => (i % 1000) + k + round);
          const r = await client.infer('big_py', [{ name: 'DATA', shape: [n], data }]);
          const doubled = r.data<Float32Array>('DOUBLED');
          const echo = r.data<Float32Array>('ECHO');
          expect(doubled.length).toBe(n);
          expect(echo.length).toBe(n);
          for (let i = 0; i < n; i += 997) {
            expect(echo[i]).toBe(data[i]);
            expect(doubled[i]).toBe(data[i]! * 2);
          }
          if (n > 0) expect([echo[n - 1], doubled[n - 1]]).toEqual([data[n - 1], data[n - 1]! * 2]);
        }));
      }
    } finally {
      await server.stop();
      big.cleanup();
    }
  }, 60_000);
});

