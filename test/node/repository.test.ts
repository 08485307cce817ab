/**
 * Repository behaviour on throw-away repositories of real ONNX models: every datatype round-trips
 * (JSON and binary), version policies pick the right versions, a broken config makes only its model
 * UNAVAILABLE with file/line/column in the reason, several roots combine, and a name in two roots is
 * refused.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSubModel, identityModel, type Datatype } from '../../scripts/gen-models.js';
import { binaryOutputs, bytesOf, getJson, postBinary, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const TYPES: [Datatype, string, ArrayBufferView | null, unknown[] | null][] = [
  ['BOOL', 'TYPE_BOOL', Uint8Array.from([1, 0, 1, 1]), [true, false, true, true]],
  ['UINT8', 'TYPE_UINT8', Uint8Array.from([0, 1, 254, 255]), [0, 1, 254, 255]],
  ['UINT16', 'TYPE_UINT16', Uint16Array.from([0, 1, 65534, 65535]), [0, 1, 65534, 65535]],
  ['UINT32', 'TYPE_UINT32', Uint32Array.from([0, 1, 2 ** 32 - 2, 2 ** 32 - 1]), [0, 1, 2 ** 32 - 2, 2 ** 32 - 1]],
  ['UINT64', 'TYPE_UINT64', BigUint64Array.from([0n, 1n, 2n ** 64n - 2n, 2n ** 53n]), [0, 1, 2 ** 40, 2 ** 53]],
  ['INT8', 'TYPE_INT8', Int8Array.from([-128, -1, 0, 127]), [-128, -1, 0, 127]],
  ['INT16', 'TYPE_INT16', Int16Array.from([-32768, -1, 0, 32767]), [-32768, -1, 0, 32767]],
  ['INT32', 'TYPE_INT32', Int32Array.from([-(2 ** 31), -1, 0, 2 ** 31 - 1]), [-(2 ** 31), -1, 0, 2 ** 31 - 1]],
  ['INT64', 'TYPE_INT64', BigInt64Array.from([-(2n ** 63n), -1n, 0n, 2n ** 63n - 1n]), [-(2 ** 53), -1, 0, 2 ** 53]],
  ['FP16', 'TYPE_FP16', Uint16Array.from([0x3c00, 0xc000, 0x7bff, 0x0001]), null],
  ['FP32', 'TYPE_FP32', Float32Array.from([0.5, -1.25, 3.4e38, 1e-30]), [0.5, -1.25, 1e6, -2.5e-3]],
  ['FP64', 'TYPE_FP64', Float64Array.from([Math.PI, -1e300, 5e-324, 0]), [Math.PI, -1e300, 5e-324, 0]],
];

function identityConfig(name: string, type: string): string {
  return `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: ${type} dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: ${type} dims: [ -1 ] }]\ninstance_group [{ kind: KIND_CPU count: 1 }]\n`;
}

describe('datatypes', () => {
  let s: TestServer;
  let repo: ReturnType<typeof tempRepo>;
  beforeAll(async () => {
    const files: Record<string, string | Uint8Array> = {};
    for (const [dt, type] of TYPES) {
      const name = `id_${dt.toLowerCase()}`;
      files[`${name}/config.pbtxt`] = identityConfig(name, type);
      files[`${name}/1/model.onnx`] = identityModel(dt);
    }
    files['id_bytes/config.pbtxt'] = identityConfig('id_bytes', 'TYPE_STRING');
    files['id_bytes/1/model.onnx'] = identityModel('BYTES');
    repo = tempRepo(files);
    s = await startTestServer({ modelRepositories: [repo.path] });
  });
  afterAll(async () => {
    await s?.stop();
    repo?.cleanup();
  });

  for (const [dt, , binary, json] of TYPES) {
    it(`round-trips ${dt} as binary`, async () => {
      const bytes = bytesOf(binary!);
      const r = await postBinary(`${s.url}/v2/models/id_${dt.toLowerCase()}/infer`, {
        inputs: [{ name: 'INPUT0', datatype: dt, shape: [1, 4], parameters: { binary_data_size: bytes.byteLength } }],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
      }, [bytes]);
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.json.outputs[0]).toMatchObject({ name: 'OUTPUT0', datatype: dt, shape: [1, 4] });
      expect(Buffer.from(binaryOutputs(r.json, r.binary).get('OUTPUT0')!)).toEqual(Buffer.from(bytes));
    });
    if (json) {
      it(`round-trips ${dt} as JSON`, async () => {
        const r = await postJson(`${s.url}/v2/models/id_${dt.toLowerCase()}/infer`, {
          inputs: [{ name: 'INPUT0', datatype: dt, shape: [1, 4], data: json }],
        });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        const expected = dt === 'FP32' ? Array.from(Float32Array.from(json as number[])) : json;
        expect(r.body.outputs[0].data).toEqual(expected);
      });
    }
  }

  it('round-trips BYTES as JSON and as length-prefixed binary', async () => {
    const j = await postJson(`${s.url}/v2/models/id_bytes/infer`, { inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [2, 2], data: [['a', 'bc'], ['', 'déf']] }] });
    expect(j.body.outputs[0]).toMatchObject({ datatype: 'BYTES', shape: [2, 2], data: ['a', 'bc', '', 'déf'] });
  });
});

describe('version policies and multiple roots', () => {
  let s: TestServer;
  const repos: ReturnType<typeof tempRepo>[] = [];
  const model = addSubModel('FP32', [4]);
  const cfg = (name: string, policy: string) =>
    `name: "${name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 2\n${policy}\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n`;
  const versions = (name: string, policy: string) => ({
    [`${name}/config.pbtxt`]: cfg(name, policy),
    [`${name}/1/model.onnx`]: model,
    [`${name}/2/model.onnx`]: model,
    [`${name}/3/model.onnx`]: model,
    [`${name}/03/model.onnx`]: model,
    [`${name}/notes/readme.txt`]: 'not a version',
  });
  beforeAll(async () => {
    repos.push(tempRepo({
      ...versions('latest_default', ''),
      ...versions('latest_two', 'version_policy: { latest: { num_versions: 2 } }'),
      ...versions('all_versions', 'version_policy: { all: {} }'),
      ...versions('specific', 'version_policy: { specific: { versions: [1, 3] } }'),
      'broken/config.pbtxt': 'name: "broken"\nmax_batch_size: 4\ninput [\n  { name: "X" data_type: TYPE_FLOAT32 dims: [1] }\n]\n',
      'broken/1/model.onnx': model,
      'misnamed/config.pbtxt': cfg('othername', ''),
      'misnamed/1/model.onnx': model,
      'dup/config.pbtxt': cfg('dup', ''),
      'dup/1/model.onnx': model,
    }));
    repos.push(tempRepo({
      ...versions('second_root', ''),
      'dup/config.pbtxt': cfg('dup', ''),
      'dup/1/model.onnx': model,
    }));
    s = await startTestServer({ modelRepositories: repos.map((r) => r.path) });
  });
  afterAll(async () => {
    await s?.stop();
    for (const r of repos) r.cleanup();
  });

  const versionsOf = async (m: string) => (await getJson(`${s.url}/v2/models/${m}`)).body.versions;

  it('serves the versions each policy selects', async () => {
    expect(await versionsOf('latest_default')).toEqual(['3']);
    expect(await versionsOf('latest_two')).toEqual(['3', '2']);
    expect(await versionsOf('all_versions')).toEqual(['3', '2', '1']);
    expect(await versionsOf('specific')).toEqual(['3', '1']);
    expect(await versionsOf('second_root')).toEqual(['3']);
    expect((await getJson(`${s.url}/v2/models/specific/versions/2`)).status).toBe(404);
    const body = {
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] },
        { name: 'INPUT1', datatype: 'FP32', shape: [1, 4], data: [1, 1, 1, 1] },
      ],
    };
    const r = await postJson(`${s.url}/v2/models/specific/versions/1/infer`, body);
    expect(r.body.model_version).toBe('1');
    expect(r.body.outputs[0].data).toEqual([2, 3, 4, 5]);
    const latest = await postJson(`${s.url}/v2/models/specific/infer`, body);
    expect(latest.body.model_version).toBe('3');
  });

  it('marks only the broken models UNAVAILABLE, with file, line, column and a suggestion', async () => {
    const index = (await postJson(`${s.url}/v2/repository/index`, {})).body as any[];
    const broken = index.find((e) => e.name === 'broken');
    expect(broken.state).toBe('UNAVAILABLE');
    expect(broken.reason).toMatch(/broken\/config\.pbtxt:4:26/);
    expect(broken.reason).toMatch(/TYPE_FLOAT32/);
    expect(broken.reason).toMatch(/did you mean 'TYPE_FP32'/);
    const misnamed = index.find((e) => e.name === 'misnamed');
    expect(misnamed.reason).toMatch(/unexpected directory name 'misnamed' for model 'othername'/);
    const dup = index.find((e) => e.name === 'dup');
    expect(dup.state).toBe('UNAVAILABLE');
    expect(dup.reason).toMatch(/multiple repositories/);
    expect((await getJson(`${s.url}/v2/models/broken/ready`)).status).toBe(503);
    expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(400);
    expect((await fetch(`${s.url}/v2/health/live`)).status).toBe(200);
    const ready = (await postJson(`${s.url}/v2/repository/index`, { ready: true })).body as any[];
    expect(ready.every((e) => e.state === 'READY')).toBe(true);
    expect(ready.map((e) => e.name)).toContain('latest_two');
    const bad = await postJson(`${s.url}/v2/repository/index`, { ready: 'yes' });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe("Invalid value for 'ready': expected a boolean");
  });
});
