/**
 * How the python backend fails, through the real server: an error response fails only its request;
 * an exception in execute fails its whole batch and the server keeps serving; a Python process that
 * exits, is killed or segfaults fails its in-flight requests with an error naming the model, how it
 * ended and its last stderr lines, and the next request runs on a restarted process; initialize
 * raising, a missing interpreter and a missing numpy leave the model UNAVAILABLE with a reason that
 * says what to do; and unload, server stop and even a killed server leave no Python process behind.
 */

import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { executionEnvPath } from '../../runtime-node/python/interpreter.js';
import { postJson, ROOT, type TestServer } from '../helpers/server.js';
import { eventually, leftoverShm, PY_FIXTURES, pythonRepo, startPythonServer, stubProcesses } from '../helpers/python-server.js';

const x = (v: number) => ({ inputs: [{ name: 'X', datatype: 'INT32', shape: [1, 1], data: [v] }] });

describe('errors while serving', () => {
  let s: TestServer;
  let repo: ReturnType<typeof pythonRepo>;
  const infer = (v: number) => postJson(`${s.url}/v2/models/errors_py/infer`, x(v));
  /** Until a new process is ready the model is not, and requests get Triton's "not healthy" text. */
  const ready = async () => expect(await eventually(async () => (await fetch(`${s.url}/v2/models/errors_py/ready`)).status === 200, 30_000)).toBe(true);

  beforeAll(async () => {
    repo = pythonRepo(['errors_py']);
    s = await startPythonServer({ modelRepositories: [repo.path] });
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  it('fails only the request whose response carries an error', async () => {
    const [a, b, c] = await Promise.all([infer(1), infer(-2), infer(3)]);
    expect([a.status, b.status, c.status]).toEqual([200, 400, 200]);
    expect(b.body.error).toBe('negative input -2');
    expect(a.body.outputs[0].data).toEqual([2]);
    expect(c.body.outputs[0].data).toEqual([6]);
  });

  it('fails every request of a batch whose execute raised, naming the model and the exception', async () => {
    const [a, b] = await Promise.all([infer(1), infer(666)]);
    for (const r of [a, b]) {
      expect(r.status).toBe(500);
      expect(r.body.error).toMatch(/^Failed to process the request\(s\) for model 'errors_py_0', message: ValueError: the number of the beast/);
      expect(r.body.error).toMatch(/errors_py\/1\/model\.py\(\d+\): execute/);
    }
    expect((await infer(5)).body.outputs[0].data).toEqual([10]);
    expect(s.logs.some((l) => l.includes('Traceback (most recent call last)'))).toBe(true);
  });

  it('fails a batch whose execute returns the wrong thing, with Triton\'s messages', async () => {
    const none = await infer(555);
    expect(none.body.error).toBe("Failed to process the request(s) for model 'errors_py_0', message: TritonModelException: "
      + 'Number of InferenceResponse objects do not match the number of InferenceRequest objects. InferenceRequest(s) size is:1, '
      + 'and InferenceResponse(s) size is:0\n');
    const tensors = await infer(554);
    expect(tensors.body.error).toMatch(/Expected an 'InferenceResponse' object in the execute function return list, found type '<class '[a-z_]+\.Tensor'>'\./);
  });

  it('fails a request whose process exits with Triton\'s text, and serves on a new process once it is ready', async () => {
    const before = stubProcesses().map((p) => p.pid);
    const r = await infer(777);
    expect(r.status).toBe(500);
    expect(r.body.error).toMatch(/^Failed to process the request\(s\) for model instance 'errors_py_0', message: Stub process 'errors_py_0' is not healthy\. The Python process \(pid \d+\) exited with code 1/);
    await ready();
    const next = await infer(4);
    expect(next.status, JSON.stringify(next.body)).toBe(200);
    expect(next.body.outputs[0].data).toEqual([8]);
    const after = stubProcesses().map((p) => p.pid);
    expect(after).toHaveLength(1);
    expect(before).not.toContain(after[0]);
  });

  it('quotes the Python stack of a segfault, and recovers', async () => {
    const r = await infer(779);
    expect(r.status).toBe(500);
    expect(r.body.error).toMatch(/The Python process \(pid \d+\) was killed by signal SIGSEGV; its last stderr lines: Fatal Python error: Segmentation fault \| .*errors_py\/1\/model\.py", line \d+ in execute/);
    await ready();
    expect((await infer(6)).body.outputs[0].data).toEqual([12]);
  });

  it('ends a process that writes garbage on its control socket, and keeps serving', async () => {
    const r = await infer(553);
    expect(r.body.error).toMatch(/was killed by signal SIGKILL; its last stderr lines: .*tsi: broken control message: /);
    expect(s.logs.some((l) => l.includes('broken control channel'))).toBe(true);
    await ready();
    expect((await infer(9)).body.outputs[0].data).toEqual([18]);
  });

  it('fails every in-flight request of a killed process; once the new one is ready, requests are served', async () => {
    const doomed = await Promise.all([infer(778), infer(2)]);
    for (const r of doomed) expect(r.body.error).toMatch(/was killed by signal SIGKILL/);
    await ready();
    const [a, b] = await Promise.all([infer(7), infer(8)]);
    expect([a.body.outputs[0].data, b.body.outputs[0].data]).toEqual([[14], [16]]);
    expect(leftoverShm()).toEqual([]);
  });
});

describe('models that cannot start', () => {
  let work: string;
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'tsi-pyfail-'));
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  async function reasonFor(model: string, python: Record<string, string> = {}): Promise<string> {
    const repo = pythonRepo([model]);
    const s = await startPythonServer({ modelRepositories: [repo.path], python });
    try {
      const index = await new HttpClient(s.url).getModelRepositoryIndex();
      const row = index.find((e) => e.name === model)!;
      expect(row.state).toBe('UNAVAILABLE');
      const r = await postJson(`${s.url}/v2/models/${model}/infer`, x(1));
      expect(r.status).toBe(503);
      return row.reason ?? '';
    } finally {
      await s.stop();
      repo.cleanup();
    }
  }

  it("names with a shell metacharacter: Triton's 'Invalid stub name' (L0_backend_python model_control); plain names load", async () => {
    mkdirSync(join(work, 'empty'), { recursive: true });
    const s = await startPythonServer({ modelRepositories: [join(work, 'empty')], modelControlMode: 'explicit', allowModelCodeUpload: true });
    const code = 'import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n    def execute(self, requests):\n'
      + '        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]\n';
    const load = (name: string) => postJson(`${s.url}/v2/repository/models/${encodeURIComponent(name)}/load`, { parameters: {
      config: JSON.stringify({ name, backend: 'python', max_batch_size: 4,
        input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [-1] }], output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [-1] }] }),
      // Triton's test names the file with a leading slash: the model folder's root.
      'file:/1/model.py': Buffer.from(code).toString('base64'),
    } });
    try {
      for (const name of ['model;test', 'model|test', 'model&test', 'model$test', 'model`test`', 'model<test>', 'model(test)', 'model"test"', "model'test'", 'model*test', 'model~test', 'model!test']) {
        const r = await load(name);
        expect(r.status, name).toBe(400);
        expect(r.body.error, name).toContain('Invalid stub name: contains invalid characters');
        expect((await fetch(`${s.url}/v2/models/${encodeURIComponent(name)}/ready`)).status, name).not.toBe(200);
      }
      for (const name of ['TestModel123', 'model-with-hyphens']) {
        const r = await load(name);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        expect((await fetch(`${s.url}/v2/models/${name}/ready`)).status).toBe(200);
      }
    } finally {
      await s.stop();
    }
  }, 60_000);

  it('initialize raising: UNAVAILABLE with the traceback\'s last lines', async () => {
    const reason = await reasonFor('init_fail_py');
    expect(reason).toMatch(/^failed to initialize model 'init_fail_py' instance init_fail_py_0 with python3 \(Python 3\.\d+\.\d+, numpy [\d.]+\): /);
    expect(reason).toContain('FileNotFoundError: cannot load weights from /nowhere/weights.bin');
    expect(reason).toContain('in load_weights');
  });

  it('a missing model.py, a process that exits in initialize: Triton\'s texts in the reason and the log', async () => {
    const root = join(work, 'texts');
    const io = 'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
      + 'instance_group [ { kind: KIND_CPU } ]\n';
    for (const m of ['no_file', 'init_exit']) {
      mkdirSync(join(root, m, '1'), { recursive: true });
      writeFileSync(join(root, m, 'config.pbtxt'), `name: "${m}"\nbackend: "python"\n${io}`);
    }
    writeFileSync(join(root, 'init_exit', '1', 'model.py'),
      'import os\n\nclass TritonPythonModel:\n    def initialize(self, args):\n        os._exit(1)\n\n    def execute(self, requests):\n        return []\n');
    const s = await startPythonServer({ modelRepositories: [root] });
    try {
      const index = await new HttpClient(s.url).getModelRepositoryIndex();
      const reason = (m: string) => index.find((e) => e.name === m)!.reason ?? '';
      const missing = `Failed to preinitialize Python stub: Python model file not found in '${join(root, 'no_file', '1', 'model.py')}'`;
      expect(reason('no_file')).toContain(missing);
      expect(reason('init_exit')).toContain("Stub process 'init_exit_0_0' is not healthy. The Python process exited with code 1");
      expect(s.logs.some((l) => l.includes(missing))).toBe(true);
      expect(s.logs.some((l) => l.includes("Stub process 'init_exit_0_0' is not healthy."))).toBe(true);
    } finally {
      await s.stop();
    }
  });

  it('no interpreter: UNAVAILABLE saying what to install or configure', async () => {
    const reason = await reasonFor('add_sub', { executable: join(work, 'no-such-python3') });
    expect(reason).toContain(`${join(work, 'no-such-python3')} not found (from --backend-config python,executable)`);
    expect(reason).toContain('install python3 and python3-numpy (apt-get install python3 python3-numpy)');
    expect(reason).toContain('EXECUTION_ENV_PATH');
  });

  it('no numpy: UNAVAILABLE naming numpy and how to install it', async () => {
    // A real Python 3 that cannot see site-packages, hence no numpy.
    const fake = join(work, 'python3-without-numpy');
    writeFileSync(fake, '#!/bin/sh\nexec python3 -S "$@"\n');
    chmodSync(fake, 0o755);
    const reason = await reasonFor('add_sub', { executable: fake });
    expect(reason).toMatch(/python3-without-numpy \(Python 3\.\d+\.\d+, from --backend-config python,executable\) has no numpy/);
    expect(reason).toContain('apt-get install python3-numpy');
    expect(reason).toContain('-m pip install numpy');
  });

  it('a bad backend setting: UNAVAILABLE naming the setting', async () => {
    expect(await reasonFor('add_sub', { 'stub-timeout-seconds': '0' }))
      .toContain("--backend-config python,stub-timeout-seconds=0: can't be smaller than or equal to zero");
  });

  it('EXECUTION_ENV_PATH: an environment folder\'s bin/python3 runs the model; a path leaving the model folder is refused', async () => {
    const env = join(work, 'env');
    const bin = join(env, 'bin');
    mkdirSync(bin, { recursive: true });
    const real = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
    writeFileSync(join(bin, 'python3'), `#!/bin/sh\necho "from the execution environment" >&2\nexec ${real} "$@"\n`);
    chmodSync(join(bin, 'python3'), 0o755);
    const repo = pythonRepo(['add_sub']);
    const cfg = join(repo.path, 'add_sub', 'config.pbtxt');
    const text = readFileSync(cfg, 'utf8');
    writeFileSync(cfg, `${text}\nparameters { key: "EXECUTION_ENV_PATH" value { string_value: "${env}" } }\n`);
    const s = await startPythonServer({ modelRepositories: [repo.path] });
    try {
      const r = await new HttpClient(s.url).infer('add_sub', [
        { name: 'INPUT0', shape: [1, 4], data: Float32Array.of(1, 1, 1, 1) }, { name: 'INPUT1', shape: [1, 4], data: Float32Array.of(1, 1, 1, 1) },
      ]);
      expect(Array.from(r.data<Float32Array>('OUTPUT0'))).toEqual([2, 2, 2, 2]);
      expect(s.logs.some((l) => l.includes('from the execution environment'))).toBe(true);
    } finally {
      await s.stop();
      repo.cleanup();
    }
    expect(executionEnvPath('$$TRITON_MODEL_DIRECTORY/env.tar.gz', '/models/m')).toBe('/models/m/env.tar.gz');
    expect(() => executionEnvPath('$$TRITON_MODEL_DIRECTORY/../other', '/models/m')).toThrow(/leaves the model folder/);
  });
});

describe('no Python process outlives its model', () => {
  it('unload calls finalize and ends the process; stop ends the rest', async () => {
    const repo = pythonRepo(['add_sub', 'add_sub_int32']);
    const s = await startPythonServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', loadModels: ['add_sub', 'add_sub_int32'] });
    try {
      const procs = stubProcesses();
      expect(procs.map((p) => p.cmdline.split(' ').slice(-2).join(' ')).sort()).toEqual(['add_sub add_sub_0_0', 'add_sub_int32 add_sub_int32_0_0']);
      await new HttpClient(s.url).unloadModel('add_sub');
      expect(s.logs.some((l) => /add_sub \(add_sub_0_0, pid \d+\): add_sub finalize called/.test(l))).toBe(true);
      expect(await eventually(() => stubProcesses().length === 1)).toBe(true);
      expect(stubProcesses()[0]!.cmdline).toContain('add_sub_int32');
    } finally {
      await s.stop();
      repo.cleanup();
    }
    expect(stubProcesses()).toEqual([]);
    expect(leftoverShm()).toEqual([]);
  });

  it('a killed server leaves no Python process: the stub exits when its channel closes', async () => {
    const script = join(tmpdir(), `tsi-py-orphan-${process.pid}.mts`);
    writeFileSync(script, `
      import { startPythonServer } from ${JSON.stringify(join(ROOT, 'test/helpers/python-server.ts'))};
      const s = await startPythonServer({ modelRepositories: [${JSON.stringify(join(PY_FIXTURES))}], modelControlMode: 'explicit', loadModels: ['add_sub'] });
      const { stubProcesses } = await import(${JSON.stringify(join(ROOT, 'test/helpers/python-server.ts'))});
      process.stdout.write(JSON.stringify(stubProcesses().map((p) => p.pid)) + '\\n');
      setInterval(() => {}, 1000);
    `);
    const child = spawn(process.execPath, ['--import', 'tsx', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const pids = await new Promise<number[]>((resolve, reject) => {
        let out = '';
        child.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as number[]);
        });
        child.once('exit', (code) => reject(new Error(`server script exited with ${code}`)));
      });
      expect(pids).toHaveLength(1);
      child.kill('SIGKILL');
      const gone = (pid: number) => {
        try {
          process.kill(pid, 0);
        } catch {
          return true;
        }
        let stat = '';
        try {
          stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        } catch {
          // gone
        }
        return stat === '' || stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
      };
      expect(await eventually(() => pids.every(gone), 5000)).toBe(true);
    } finally {
      child.kill('SIGKILL');
      rmSync(script, { force: true });
    }
  }, 60_000);
});
