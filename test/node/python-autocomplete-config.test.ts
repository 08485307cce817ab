/**
 * An auto-completed Python model's config, read back over HTTP and gRPC, has the fields Triton's has
 * for the same model (qa/L0_model_config's python cases): `default_model_filename: "model.py"`,
 * one instance group named after the model (KIND_GPU on every GPU where there is one, else
 * KIND_CPU), pinned-memory optimisation, and the inputs and outputs in the order the script added
 * them (Triton's own test accepts either order of INPUT0 and INPUT1).
 */

import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient } from '../../client/index.js';
import { GrpcClient } from '../../client/grpc.js';
import { gpuCount } from '../../runtime-node/index.js';
import type { TestServer } from '../helpers/server.js';
import { PY_FIXTURES, pythonRepo, startPythonServer } from '../helpers/python-server.js';

let s: TestServer;
let repo: ReturnType<typeof pythonRepo>;

beforeAll(async () => {
  repo = pythonRepo(['autocomplete_py']);
  // Its class imported from another file, as Triton's L0_model_namespacing models import theirs: the
  // text of model.py never says auto_complete_config, and the config still comes from it.
  const dir = join(repo.path, 'autocomplete_imported', '1');
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(PY_FIXTURES, 'autocomplete_py', '1', 'model.py'), join(dir, 'shared_model.py'));
  writeFileSync(join(dir, 'model.py'), 'import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\nfrom shared_model import *\n');
  s = await startPythonServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1' });
}, 60_000);

afterAll(async () => {
  await s?.stop();
  repo?.cleanup();
});

describe('auto-completed Python config, field for field', () => {
  it('matches Triton over HTTP and gRPC', async () => {
    const gpus = gpuCount();
    const group = gpus > 0
      ? { name: 'autocomplete_py', kind: 'KIND_GPU', count: 1, gpus: Array.from({ length: gpus }, (_, i) => i) }
      : { name: 'autocomplete_py', kind: 'KIND_CPU', count: 1 };
    const grpc = new GrpcClient(`127.0.0.1:${s.grpc!.port}`);
    try {
      for (const cfg of [await new HttpClient(s.url).getModelConfig('autocomplete_py'), await grpc.getModelConfig('autocomplete_py')]) {
        expect(cfg).toMatchObject({
          name: 'autocomplete_py', backend: 'python', default_model_filename: 'model.py',
          version_policy: { latest: { num_versions: 1 } },
          optimization: { input_pinned_memory: { enable: true }, output_pinned_memory: { enable: true } },
        });
        expect(cfg.instance_group).toEqual([expect.objectContaining(group)]);
        expect(cfg.input!.map((i) => i.name)).toEqual(['X', 'SCALE']);
        expect(cfg.output!.map((o) => o.name)).toEqual(['Y']);
      }
      const imported = await grpc.getModelConfig('autocomplete_imported');
      expect([imported.input!.map((i) => i.name), imported.output!.map((o) => o.name)]).toEqual([['X', 'SCALE'], ['Y']]);
    } finally {
      await grpc.close();
    }
  });
});
