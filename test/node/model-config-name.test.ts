/**
 * `--model-config-name=<name>` (tritonserver's flag) on the real server: each model's config comes from
 * `configs/<name>.pbtxt` in its folder where that file exists, from its `config.pbtxt` otherwise, as
 * L0_custom_model_config checks through `GET /v2/models/<m>/config`.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSubModel } from '../../scripts/gen-models.js';
import { getJson, startTestServer, tempRepo } from '../helpers/server.js';

const onnx = addSubModel('FP32', [4]);
const config = (versions: number[]) => `name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4
version_policy: { specific: { versions: [${versions.join(', ')}] } }
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_CPU count: 1 }]\n`;

describe('--model-config-name', () => {
  let repo: ReturnType<typeof tempRepo>;
  beforeAll(() => {
    repo = tempRepo({
      'm/config.pbtxt': config([1, 3]),
      'm/configs/h100.pbtxt': config([1]),
      'm/configs/config.pbtxt': config([3]),
      'm/1/model.onnx': onnx, 'm/2/model.onnx': onnx, 'm/3/model.onnx': onnx,
    });
  });
  afterAll(() => repo.cleanup());

  for (const [name, versions] of [[undefined, [1, 3]], ['h100', [1]], ['config', [3]], ['h200', [1, 3]]] as const) {
    it(`${name ?? '(unset)'}: serves versions ${versions.join(', ')}`, async () => {
      const s = await startTestServer({ modelRepositories: [repo.path], modelConfigName: name });
      try {
        const r = await getJson(`${s.url}/v2/models/m/config`);
        expect(r.status).toBe(200);
        expect(r.body.version_policy).toEqual({ specific: { versions: [...versions] } });
        expect(s.server.repositoryIndex(true).map((e) => e.version).sort()).toEqual(versions.map(String));
      } finally {
        await s.stop();
      }
    });
  }
});
