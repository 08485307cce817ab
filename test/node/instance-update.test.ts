/**
 * In-place instance updates through the real server and real Python instances (one process each, so
 * a process's pid is the instance: a kept instance keeps its pid, an added one brings a new pid, a
 * removed one's process is gone). Loads with more and fewer instances, by a changed config.pbtxt and
 * by the load API's config, while clients keep sending: no request fails, only the difference starts
 * or stops, the statistics count every request once. A sequence model keeps a removed instance until
 * the sequence bound to it ends (its running sum proves the sequence stayed on its instance).
 */

import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { eventually, PY_FIXTURES, pythonRepo, startPythonServer, stubProcesses } from '../helpers/python-server.js';

/** Pids of the live Python processes of `model`'s instances, by instance name. */
function instancePids(model: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const p of stubProcesses()) {
    const args = p.cmdline.split(' ');
    const at = args.indexOf(model);
    if (at >= 0 && args[at + 1]) out.set(args[at + 1]!, p.pid);
  }
  return out;
}

/** A repository holding one copy of a Python fixture under another name; `cfg` is its config renamed. */
function fixtureCopy(fixture: string, name: string): { repo: ReturnType<typeof pythonRepo>; dir: string; cfgPath: string; cfg: string } {
  const repo = pythonRepo([]);
  const dir = join(repo.path, name);
  cpSync(join(PY_FIXTURES, fixture), dir, { recursive: true });
  const cfgPath = join(dir, 'config.pbtxt');
  const cfg = readFileSync(cfgPath, 'utf8').replace(`name: "${fixture}"`, `name: "${name}"`);
  writeFileSync(cfgPath, cfg);
  return { repo, dir, cfgPath, cfg };
}

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined };
}

it('adds and removes only the difference, under load, with no request failing', async () => {
  const { repo, dir, cfgPath, cfg } = fixtureCopy('sleep_py', 'grow_py');
  const withCount = (n: number) => cfg.replace('count: 2', `count: ${n}`);
  writeFileSync(cfgPath, withCount(2));
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['grow_py'] });
  const load = (body: unknown = {}) => post(`${s.url}/v2/repository/models/grow_py/load`, body);
  let stop = false;
  let ok = 0;
  const failures: string[] = [];
  const servedBy = new Set<number>();
  const client = async () => {
    while (!stop) {
      const r = await post(`${s.url}/v2/models/grow_py/infer`, { inputs: [{ name: 'MS', datatype: 'INT32', shape: [1], data: [15] }] });
      if (r.status === 200) {
        ok++;
        servedBy.add(r.body.outputs[0].data[0]);
      } else failures.push(JSON.stringify(r.body));
    }
  };
  try {
    const first = instancePids('grow_py');
    expect([...first.keys()].sort()).toEqual(['grow_py_0_0', 'grow_py_0_1']);
    const clients = Array.from({ length: 4 }, client);
    await new Promise((r) => setTimeout(r, 300));

    // 2 -> 4 by config.pbtxt: both processes stay, two more start, and the new ones serve.
    writeFileSync(cfgPath, withCount(4));
    expect((await load()).status).toBe(200);
    const grown = instancePids('grow_py');
    expect(grown.size).toBe(4);
    for (const [name, pid] of first) expect(grown.get(name)).toBe(pid);
    servedBy.clear();
    expect(await eventually(() => servedBy.size === 4, 10_000)).toBe(true);
    expect(s.logs.some((l) => l.includes("model 'grow_py' version 1: instances 2 -> 4, 2 added, 2 kept, 0 removed"))).toBe(true);

    // 4 -> 3 through the load API's config: one process ends (finalized before the load answers), the others stay.
    const current = (await (await fetch(`${s.url}/v2/models/grow_py/config`)).json()) as { instance_group: { count: number }[] };
    current.instance_group[0]!.count = 3;
    expect((await load({ parameters: { config: JSON.stringify(current) } })).status).toBe(200);
    const shrunk = instancePids('grow_py');
    expect(shrunk.size).toBe(3);
    for (const [name, pid] of shrunk) expect(grown.get(name)).toBe(pid);

    // The same config again: nothing starts or stops.
    expect((await load({ parameters: { config: JSON.stringify(current) } })).status).toBe(200);
    expect(instancePids('grow_py')).toEqual(shrunk);

    // A changed model file is a full reload: every instance is new.
    const py = join(dir, '1', 'model.py');
    writeFileSync(py, `${readFileSync(py, 'utf8')}\n# changed\n`);
    writeFileSync(cfgPath, withCount(3));
    expect((await load()).status).toBe(200);
    expect(await eventually(() => [...instancePids('grow_py').values()].every((pid) => ![...shrunk.values()].includes(pid)) && instancePids('grow_py').size === 3, 20_000)).toBe(true);

    stop = true;
    await Promise.all(clients);
    expect(failures).toEqual([]);
    expect(ok).toBeGreaterThan(0);
    const stats = (await (await fetch(`${s.url}/v2/models/grow_py/stats`)).json()) as { model_stats: { inference_stats: { success: { count: number }; fail: { count: number } } }[] };
    // Not one request failed through two in-place updates and a full reload.
    expect(stats.model_stats[0]!.inference_stats.fail.count).toBe(0);
  } finally {
    stop = true;
    await s.stop();
    repo.cleanup();
  }
}, 120_000);

it('counts every request of the updated version once in its statistics and metrics, per-instance series following the instances', async () => {
  const { repo, cfgPath, cfg } = fixtureCopy('sleep_py', 'count_py');
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['count_py'], metricsPort: 0, metricsAddress: '127.0.0.1' });
  const metrics = async () => (await (await fetch(`http://127.0.0.1:${s.metrics!.port}/metrics`)).text()).split('\n');
  /** The instances the per-instance series list, and the model's success counter. */
  const series = async () => {
    const lines = await metrics();
    const instances = lines.filter((l) => l.startsWith('tsi_model_instance_memory_bytes{') && l.includes('model="count_py"')).map((l) => /instance="([^"]+)"/.exec(l)![1]).sort();
    const success = lines.find((l) => l.startsWith('nv_inference_request_success{') && l.includes('model="count_py"'));
    return { instances, success: Number(success?.split(' ').at(-1)) };
  };
  try {
    let sent = 0;
    const infer = async () => {
      const r = await post(`${s.url}/v2/models/count_py/infer`, { inputs: [{ name: 'MS', datatype: 'INT32', shape: [1], data: [5] }] });
      expect(r.status).toBe(200);
      sent++;
    };
    const burst = () => Promise.all(Array.from({ length: 12 }, infer));
    await burst();
    writeFileSync(cfgPath, cfg.replace('count: 2', 'count: 3'));
    const [loaded] = await Promise.all([post(`${s.url}/v2/repository/models/count_py/load`, {}), burst()]);
    expect(loaded.status).toBe(200);
    expect((await series()).instances).toEqual(['count_py_0_0', 'count_py_0_1', 'count_py_0_2']);
    writeFileSync(cfgPath, cfg.replace('count: 2', 'count: 1'));
    const [shrunk] = await Promise.all([post(`${s.url}/v2/repository/models/count_py/load`, {}), burst()]);
    expect(shrunk.status).toBe(200);
    await burst();
    expect(await series()).toEqual({ instances: ['count_py_0_0'], success: sent });
    const stats = (await (await fetch(`${s.url}/v2/models/count_py/stats`)).json()) as { model_stats: { inference_count: number; inference_stats: { success: { count: number }; fail: { count: number } } }[] };
    expect(stats.model_stats[0]!.inference_stats.success.count).toBe(sent);
    expect(stats.model_stats[0]!.inference_count).toBe(sent);
    expect(stats.model_stats[0]!.inference_stats.fail.count).toBe(0);
  } finally {
    await s.stop();
    repo.cleanup();
  }
}, 120_000);

it('keeps a removed sequence instance until its sequence ends, and the sequence stays on it', async () => {
  const copy = fixtureCopy('sequence_py', 'seq_py');
  const { repo, cfgPath } = copy;
  const cfg = copy.cfg.replace('5000000', '60000000');
  writeFileSync(cfgPath, `${cfg}\ninstance_group [ { kind: KIND_CPU count: 2 } ]\n`);
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['seq_py'] });
  const step = async (id: number, x: number, flags: { sequence_start?: boolean; sequence_end?: boolean } = {}) => {
    const r = await post(`${s.url}/v2/models/seq_py/infer`, {
      parameters: { sequence_id: id, ...flags }, inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [x] }], outputs: [{ name: 'SUM' }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body.outputs[0].data[0] as number;
  };
  try {
    const first = instancePids('seq_py');
    expect(first.size).toBe(2);
    // One slot per instance: sequence 1 on the first instance, sequence 2 on the second.
    expect(await step(1, 1, { sequence_start: true })).toBe(1);
    expect(await step(2, 10, { sequence_start: true })).toBe(10);

    writeFileSync(cfgPath, `${cfg}\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n`);
    expect((await post(`${s.url}/v2/repository/models/seq_py/load`, {})).status).toBe(200);
    expect(s.logs.some((l) => l.includes("model 'seq_py' version 1: instances 2 -> 1, 0 added, 1 kept, 1 removed (1 of them once the sequences they hold end)"))).toBe(true);
    // The removed instance lives on for sequence 2, whose sum goes on where it was.
    expect(instancePids('seq_py')).toEqual(first);
    expect(await step(2, 5)).toBe(15);
    expect(await step(1, 2, { sequence_end: true })).toBe(3);
    expect(instancePids('seq_py')).toEqual(first);
    expect(await step(2, 1, { sequence_end: true })).toBe(16);
    // Its sequence over, the removed instance goes; the kept one stays and serves a new sequence.
    expect(await eventually(() => instancePids('seq_py').size === 1, 20_000)).toBe(true);
    expect(instancePids('seq_py').get('seq_py_0_0')).toBe(first.get('seq_py_0_0'));
    expect(await step(3, 7, { sequence_start: true, sequence_end: true })).toBe(7);
  } finally {
    await s.stop();
    repo.cleanup();
  }
}, 120_000);

it('a poll that finds only instance_group changed updates in place too', async () => {
  const { repo, cfgPath, cfg } = fixtureCopy('sleep_py', 'poll_py');
  const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'poll', repositoryPollSecs: 0.2 });
  try {
    const first = instancePids('poll_py');
    expect(first.size).toBe(2);
    writeFileSync(cfgPath, cfg.replace('count: 2', 'count: 3'));
    const updated = () => s.logs.some((l) => l.includes("model 'poll_py' version 1: instances 2 -> 3, 1 added, 2 kept, 0 removed"));
    expect(await eventually(updated, 20_000)).toBe(true);
    expect(instancePids('poll_py').size).toBe(3);
    for (const [name, pid] of first) expect(instancePids('poll_py').get(name)).toBe(pid);
  } finally {
    await s.stop();
    repo.cleanup();
  }
}, 60_000);
