/**
 * The model load API is not a way to run code on the server (issue #22), tried as an attacker on the
 * network would: a JavaScript or Python model uploaded with `file:` parameters, a native library or a
 * Python file slipped in beside ONNX weights, a backend the files would auto-detect, a config override
 * that points the Python interpreter (EXECUTION_ENV_PATH) or a TensorRT engine cache at a path of the
 * client's choosing — all refused with 403 / PERMISSION_DENIED naming --allow-model-code-upload, over
 * HTTP and gRPC, before anything reaches the disk. ONNX weights and configs still upload. The
 * defences that were already there stay: traversal in model names, file names and shared-memory keys,
 * and log or trace file paths set over the network. With the flag, the upload runs (which is what the
 * flag is for, and proves the refused payloads would have run).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addSubModel } from '../../scripts/gen-models.js';
import { getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { grpcClient } from '../helpers/grpc.js';

const FLAG = /--allow-model-code-upload=true/;
const addSub = addSubModel('FP32', [4]);
const b64 = (b: Uint8Array | string) => Buffer.from(b).toString('base64');
const staged = (model: string) => readdirSync(tmpdir()).filter((n) => n.startsWith(`tsi-model-${model}-`));
const io = {
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [4] }, { name: 'INPUT1', data_type: 'TYPE_FP32', dims: [4] }],
  output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [4] }, { name: 'OUTPUT1', data_type: 'TYPE_FP32', dims: [4] }],
};
const onnxConfig = (name: string, extra: object = {}) => JSON.stringify({ name, backend: 'onnxruntime', max_batch_size: 4, ...io, ...extra });
const body = { inputs: [
  { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
  { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
] };

/** A JavaScript model whose import writes `canary`: what an attacker's upload would do. */
const evilJs = (canary: string) => `import { writeFileSync } from 'node:fs';
writeFileSync(${JSON.stringify(canary)}, 'ran');
export default class Evil {
  execute(requests) {
    return requests.map(() => ({ outputs: { OUT: { data: new Int32Array([7]), shape: [1] } } }));
  }
}
`;
const jsConfig = (name: string) => JSON.stringify({
  name, backend: 'javascript', max_batch_size: 0,
  input: [{ name: 'IN', data_type: 'TYPE_INT32', dims: [1] }], output: [{ name: 'OUT', data_type: 'TYPE_INT32', dims: [1] }],
});
const pyConfig = (name: string, envPath?: string) => JSON.stringify({
  name, backend: 'python', max_batch_size: 0,
  input: [{ name: 'IN', data_type: 'TYPE_INT32', dims: [1] }], output: [{ name: 'OUT', data_type: 'TYPE_INT32', dims: [1] }],
  ...(envPath !== undefined ? { parameters: { EXECUTION_ENV_PATH: { string_value: envPath } } } : {}),
});
/** A Python model whose import writes `canary`. */
const evilPy = (canary: string) => `open(${JSON.stringify(canary)}, "w").write("ran")\nclass TritonPythonModel:\n    def execute(self, requests):\n        return []\n`;
const REPO_ENV = '/nonexistent/tsi-security-env.tar.gz';

let repo: ReturnType<typeof tempRepo>;
let canaryDir: string;

beforeAll(() => {
  canaryDir = mkdtempSync(join(tmpdir(), 'tsi-canary-'));
  repo = tempRepo({
    // A Python model whose own config names an interpreter environment (which does not exist here).
    'py_env/config.pbtxt': `name: "py_env"\nbackend: "python"\nmax_batch_size: 0\nparameters { key: "EXECUTION_ENV_PATH" value: { string_value: "${REPO_ENV}" } }\ninput [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]\noutput [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]\n`,
    'py_env/1/model.py': 'class TritonPythonModel:\n    def execute(self, requests):\n        return []\n',
    'onnx_m/config.pbtxt': `name: "onnx_m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n`,
    'onnx_m/1/model.onnx': addSub,
  });
});
afterAll(() => {
  repo?.cleanup();
  rmSync(canaryDir, { recursive: true, force: true });
});

describe('model code upload, off by default', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({
      modelRepositories: [repo.path], modelControlMode: 'explicit', grpcPort: 0, grpcAddress: '127.0.0.1', allowClientShm: true,
    });
  });
  afterAll(async () => {
    await s?.stop(1000);
  });

  const load = (model: string, parameters: Record<string, string>) => postJson(`${s.url}/v2/repository/models/${model}/load`, { parameters });

  it('refuses a JavaScript model upload with 403 naming the flag, writing and running nothing', async () => {
    const canary = join(canaryDir, 'js');
    const r = await load('evil_js', { config: jsConfig('evil_js'), 'file:1/model.js': b64(evilJs(canary)) });
    expect(r.status).toBe(403);
    expect(r.body.error).toMatch(/^failed to load 'evil_js', its files would be run by the 'javascript' backend/);
    expect(r.body.error).toMatch(FLAG);
    expect(existsSync(canary)).toBe(false);
    expect(staged('evil_js')).toEqual([]);
    expect((await getJson(`${s.url}/v2/models/evil_js`)).status).toBe(404);
  });

  it('refuses Python code, code files beside weights, detected and unknown backends', async () => {
    const canary = join(canaryDir, 'py');
    const PY = evilPy(canary);
    const attempts: [string, Record<string, string>, RegExp][] = [
      ['evil_py', { config: pyConfig('evil_py'), 'file:1/model.py': b64(PY) }, /'python' backend/],
      // Code under a name no pattern knows is still code to the backend that runs it.
      ['evil_name', { config: JSON.stringify({ ...JSON.parse(jsConfig('evil_name')), default_model_filename: 'weights.bin' }), 'file:1/weights.bin': b64(evilJs(canary)) }, /'javascript' backend/],
      // No backend named: the repository would detect python from the file name.
      ['evil_detect', { config: JSON.stringify({ name: 'evil_detect' }), 'file:1/model.py': b64(PY) }, /'file:1\/model\.py' is a file that backends import or execute/],
      ['evil_mjs', { config: JSON.stringify({ name: 'evil_mjs' }), 'file:1/model.mjs': b64('export default class {}') }, /'file:1\/model\.mjs'/],
      ['evil_side', { config: onnxConfig('evil_side'), 'file:1/model.onnx': b64(addSub), 'file:1/helper.py': b64(PY) }, /'file:1\/helper\.py'/],
      ['evil_so', { config: onnxConfig('evil_so'), 'file:1/model.onnx': b64(addSub), 'file:1/libops.so.1': b64('\x7fELF') }, /'file:1\/libops\.so\.1'/],
      ['evil_plat', { config: JSON.stringify({ name: 'evil_plat', platform: 'pytorch_libtorch' }), 'file:1/model.pt': b64('x') }, /'pytorch_libtorch' backend/],
      // The config may be pbtxt text too: it is parsed as the repository would.
      ['evil_pbtxt', { config: 'name: "evil_pbtxt"\nbackend: "javascript"\n', 'file:1/model.js': b64('export default class {}') }, /'javascript' backend/],
    ];
    for (const [model, params, why] of attempts) {
      const r = await load(model, params);
      expect(r.status, model).toBe(403);
      expect(r.body.error, model).toMatch(why);
      expect(r.body.error, model).toMatch(FLAG);
      expect(staged(model), model).toEqual([]);
    }
    expect(existsSync(canary)).toBe(false);
  });

  it('refuses code uploads over gRPC with PERMISSION_DENIED', async () => {
    const c = grpcClient(`127.0.0.1:${s.grpc!.port}`);
    const canary = join(canaryDir, 'grpc');
    try {
      await expect(c.call('RepositoryModelLoad', {
        model_name: 'evil_grpc',
        parameters: { config: { string_param: jsConfig('evil_grpc') }, 'file:1/model.js': { bytes_param: Buffer.from(evilJs(canary)) } },
      })).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED, details: expect.stringMatching(FLAG) });
      await expect(c.call('RepositoryModelLoad', {
        model_name: 'py_env', parameters: { config: { string_param: pyConfig('py_env', '/tmp/attacker-env') } },
      })).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED, details: expect.stringMatching(/EXECUTION_ENV_PATH/) });
    } finally {
      c.close();
    }
    expect(existsSync(canary)).toBe(false);
  });

  it('still loads uploaded ONNX weights and configs', async () => {
    const r = await load('weights', { config: onnxConfig('weights'), 'file:1/model.onnx': b64(addSub) });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((await postJson(`${s.url}/v2/models/weights/infer`, body)).body.outputs[0].data).toEqual([2, 3, 4, 5]);
    // A config override alone, on the repository's own files.
    expect((await load('onnx_m', { config: onnxConfig('onnx_m', { max_batch_size: 2 }) })).status).toBe(200);
    expect((await getJson(`${s.url}/v2/models/onnx_m/config`)).body.max_batch_size).toBe(2);
  });

  it('loads an uploaded llm model: decoder weights, tokenizer and chat template are data too', async () => {
    const dir = join(import.meta.dirname, '../../models/tiny_gpt/1');
    const files = Object.fromEntries(readdirSync(dir).map((f) => [`file:1/${f}`, b64(readFileSync(join(dir, f)))]));
    const config = JSON.stringify({
      name: 'chat', backend: 'llm', max_batch_size: 0, model_transaction_policy: { decoupled: true },
      input: [{ name: 'text_input', data_type: 'TYPE_STRING', dims: [1] }],
      output: [{ name: 'text_output', data_type: 'TYPE_STRING', dims: [-1] }],
    });
    const r = await load('chat', { config, ...files });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const g = await postJson(`${s.url}/v2/models/chat/generate`, { text_input: 'Hello', max_tokens: 4 });
    expect(g.status, JSON.stringify(g.body)).toBe(200);
    expect(typeof g.body.text_output).toBe('string');
  });

  it('refuses a config override that points the interpreter or an engine cache where the repository does not', async () => {
    const refused = await load('py_env', { config: pyConfig('py_env', '/tmp/attacker-env') });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatch(/sets parameters\.EXECUTION_ENV_PATH to '\/tmp\/attacker-env', which the repository's config does not/);
    expect(refused.body.error).toMatch(FLAG);
    // An environment uploaded with the request is code too, wherever the config points.
    const uploaded = await load('py_env', { config: pyConfig('py_env', '$$TRITON_MODEL_DIRECTORY/env.tar.gz'), 'file:1/model.py': b64(evilPy(join(canaryDir, 'env'))), 'file:env.tar.gz': b64('x') });
    expect(uploaded.status).toBe(403);
    const trt = await load('onnx_m', {
      config: onnxConfig('onnx_m', { optimization: { execution_accelerators: { gpu_execution_accelerator: [{ name: 'tensorrt', parameters: { trt_engine_cache_path: '/tmp/engines' } }] } } }),
    });
    expect(trt.status).toBe(403);
    expect(trt.body.error).toMatch(/trt_engine_cache_path/);
    // The repository's own value, or a path inside the repository's model folder, pass this check
    // (and fail later, for the environment does not exist here: not a 403).
    for (const env of [REPO_ENV, '$$TRITON_MODEL_DIRECTORY/env']) {
      const r = await load('py_env', { config: pyConfig('py_env', env) });
      expect(r.status, env).toBe(400);
      expect(r.body.error, env).toMatch(/EXECUTION_ENV_PATH '.*' does not exist/);
    }
  });

  it('keeps refusing traversal in names, files and shared-memory keys, and file paths set over the network', async () => {
    const name = await load('%20..', { config: onnxConfig(' ..') });
    expect(name).toMatchObject({ status: 400, body: { error: expect.stringMatching(/must not contain path traversal characters/) } });
    for (const key of ['file:../evil.onnx', 'file:1/../../evil.onnx', 'file:/../etc/evil.onnx']) {
      const r = await load('trav', { config: onnxConfig('trav'), 'file:1/model.onnx': b64(addSub), [key]: b64(addSub) });
      expect(r.status, key).toBe(400);
      expect(r.body.error, key).toMatch(/^failed to load 'trav', failed to poll from model repository: Invalid file parameter/);
    }
    expect(existsSync(join(tmpdir(), 'evil.onnx'))).toBe(false);
    for (const key of ['/../../etc/passwd', '../x', '/a/b']) {
      const r = await postJson(`${s.url}/v2/systemsharedmemory/region/r/register`, { key, offset: 0, byte_size: 8 });
      expect(r.status, key).toBe(400);
      expect(r.body.error, key).toMatch(/a key must be a single name/);
    }
    const logFile = await postJson(`${s.url}/v2/logging`, { log_file: join(canaryDir, 'log') });
    expect(logFile.body.error).toBe('log file location can not be updated through network protocol');
    const traceFile = await postJson(`${s.url}/v2/trace/setting`, { trace_file: join(canaryDir, 'trace') });
    expect(traceFile.body.error).toBe('trace file location can not be updated through network protocol');
    expect(readdirSync(canaryDir).filter((n) => n === 'log' || n === 'trace')).toEqual([]);
  });
});

describe('--allow-model-code-upload=true', () => {
  it('loads and runs uploaded model code, as the operator asked', async () => {
    const s = await startTestServer({ modelRepositories: [repo.path], modelControlMode: 'explicit', allowModelCodeUpload: true });
    const canary = join(canaryDir, 'allowed');
    try {
      const r = await postJson(`${s.url}/v2/repository/models/uploaded_js/load`, {
        parameters: { config: jsConfig('uploaded_js'), 'file:1/model.js': b64(evilJs(canary)) },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(existsSync(canary)).toBe(true);
      const inf = await postJson(`${s.url}/v2/models/uploaded_js/infer`, { inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [1] }] });
      expect(inf.body.outputs[0].data).toEqual([7]);
      expect(s.logs.some((l) => /--allow-model-code-upload: any client of the model load API can run code/.test(l))).toBe(true);
    } finally {
      await s.stop(1000);
    }
  });
});
