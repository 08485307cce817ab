/**
 * Where a browser server gets its models, and what plugs into it, in real Chromium: in-memory files
 * (a dropped repository folder, Blobs), a URL with an explicit model list instead of an index, a
 * missing index reported with the fix, explicit model control, and a non-ONNX backend registered by
 * name — the way JavaScript-backend and ensemble models plug in — batched by core like any other.
 */

import { describe, expect, inject, it } from 'vitest';
import {
  concatBatch, createLogger, splitBatch,
  type Backend, type BackendInstance, type BackendRequest, type Tensor,
} from '../../core/index.js';
import { createServer, type MemoryFile, type RepositoryIndexFile } from '../../runtime-browser/index.js';

const NODE = inject('nodeUrl');
const REPO = `${NODE}/repository/`;
const log = createLogger(() => {});

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms))]);
}

async function nodeJson(path: string): Promise<any> {
  return (await fetch(`${NODE}${path}`)).json();
}

/** The files of some models, as a user's dropped `models/` folder would give them. */
async function droppedFolder(models: string[]): Promise<Map<string, MemoryFile>> {
  const index = (await nodeJson('/repository/tsi-index.json')) as RepositoryIndexFile;
  const files = new Map<string, MemoryFile>();
  for (const m of models) {
    for (const f of index.models[m]!.files) {
      const bytes = await (await fetch(`${REPO}${m}/${f}`)).arrayBuffer();
      // Mix the kinds of values a caller may hold: Blobs, bytes, text.
      files.set(`models/${m}/${f}`, f.endsWith('.onnx') ? new Blob([bytes]) : f.endsWith('.pbtxt') ? new TextDecoder().decode(bytes) : new Uint8Array(bytes));
    }
  }
  return files;
}

describe('repositories', () => {
  it('serves in-memory files, with auto-complete and label files, configs equal to the Node server\'s', async () => {
    const s = await within(60_000, createServer({ repository: await droppedFolder(['simple', 'autocomplete_add', 'image_classifier']), log }), 'createServer');
    expect(s.index().map((e) => [e.name, e.state])).toEqual([['autocomplete_add', 'READY'], ['image_classifier', 'READY'], ['simple', 'READY']]);
    for (const m of ['autocomplete_add', 'image_classifier', 'simple']) {
      expect(s.config(m), m).toEqual(await nodeJson(`/v2/models/${m}/config`));
      expect(s.metadata(m), m).toEqual(await nodeJson(`/v2/models/${m}`));
    }
    const img = new Float32Array(768);
    for (let c = 0; c < 3; c++) for (let y = 0; y < 4; y++) for (let x = 12; x < 16; x++) img[c * 256 + y * 16 + x] = 1; // block 3 = cat
    const out = await s.infer({ model: 'image_classifier', inputs: { image: img }, outputs: [{ name: 'scores', classification: 1 }] });
    expect((out.scores as string[])[0]).toMatch(/:3:cat$/);
    await s.stop();
  });

  it('reads a URL repository from an explicit model list when there is no index', async () => {
    const s = await within(60_000, createServer({ repository: REPO, models: ['simple', 'autocomplete_add'], log }), 'createServer');
    expect(s.index().map((e) => [e.name, e.state])).toEqual([['autocomplete_add', 'READY'], ['simple', 'READY']]);
    // simple's config.pbtxt was found by probing (HEAD), not replaced by auto-complete.
    expect(s.config('simple')).toEqual(await nodeJson('/v2/models/simple/config'));
    const out = await s.infer({ model: 'autocomplete_add', inputs: { A: Float32Array.of(1, 2, 3, 4), B: Float32Array.of(10, 20, 30, 40) } });
    expect(Array.from(out.SUM as Float32Array)).toEqual([11, 22, 33, 44]);
    await s.stop();
  });

  it('says how to fix a URL repository without an index', async () => {
    const err = await createServer({ repository: `${NODE}/nowhere/`, log }).catch((e) => e);
    expect(err.message).toMatch(/tsi-index\.json: HTTP 404 \(write it with `tsi-node index <repository>`, or pass an explicit model list\)/);
  });

  it('loads and unloads on request in explicit model control mode', async () => {
    const s = await createServer({ repository: REPO, modelControlMode: 'explicit', loadModels: [], log });
    expect(s.index().filter((e) => e.state === 'READY')).toEqual([]);
    expect(s.ready('simple')).toBe(false);
    await within(30_000, s.load('simple'), 'load');
    expect(s.ready('simple')).toBe(true);
    await s.unload('simple');
    expect(s.ready('simple')).toBe(false);
    const r = await s.fetch('/v2/repository/index', { method: 'POST', body: '{}' });
    expect((await r.json()).find((e: { name: string }) => e.name === 'simple')).toEqual({ name: 'simple', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
    await s.stop();
  });
});

/** A stand-in JavaScript backend: OUTPUT = 2 × INPUT, executing whole batches. */
function doublingBackend(executions: number[]): Backend {
  return {
    name: 'javascript',
    async loadModel() {
      return {
        async createInstance(spec): Promise<BackendInstance> {
          return {
            spec,
            device: 'js',
            async execute(requests: BackendRequest[]) {
              executions.push(requests.length);
              const x = concatBatch(requests.map((r) => r.inputs.get('INPUT')!));
              const y: Tensor = { name: 'OUTPUT', datatype: 'FP32', shape: x.shape, data: (x.data as Float32Array).map((v) => v * 2) };
              splitBatch(y, requests.map((r) => r.batchSize)).forEach((t, i) => requests[i]!.send({ outputs: [t] }, true));
            },
            async unload() {},
          };
        },
        async unload() {},
      };
    },
  };
}

describe('other backends plug in by name', () => {
  it('runs a registered JavaScript backend, with core\'s dynamic batching', async () => {
    const executions: number[] = [];
    const config = `name: "double"
backend: "javascript"
max_batch_size: 16
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
`;
    const s = await createServer({
      repository: { 'double/config.pbtxt': config, 'double/1/model.mjs': 'export default {}' },
      backends: { javascript: () => doublingBackend(executions) },
      log,
    });
    expect(s.instances('double')).toEqual([{ name: 'double_0', kind: 'KIND_CPU', device: 'js' }]);
    const outs = await Promise.all(Array.from({ length: 8 }, (_, i) => s.infer({ model: 'double', inputs: { INPUT: Float32Array.of(i, -i) } })));
    outs.forEach((o, i) => expect(Array.from(o.OUTPUT as Float32Array)).toEqual([2 * i, -2 * i]));
    expect(executions.length).toBeLessThan(8);
    const stats = s.stats('double').model_stats[0] as { inference_count: number; execution_count: number };
    expect(stats).toMatchObject({ inference_count: 8, execution_count: executions.length });
    await s.stop();
  });
});
