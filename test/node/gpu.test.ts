/**
 * KIND_GPU for real: every default-repository ONNX model is served twice by one server, as configured
 * (KIND_CPU) and as a KIND_GPU copy with two instances and dynamic batching, and both must give the
 * same answers (integers and strings exact, floats within 1e-5 + 1e-4 relative) to the same requests
 * sent concurrently over HTTP and gRPC. The GPU is onnxruntime-node's WebGPU provider on whatever
 * adapter Dawn finds: a real GPU, or in CI Mesa's lavapipe (a software Vulkan device). Without an
 * adapter these tests are skipped with the reason, except under CI, where they fail.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpClient, type InferInputSpec } from '../../client/index.js';
import { GrpcClient } from '../../client/grpc.js';
import { copyModel, doctorJson, gpuVariant, inputsFor, onnxModels, outputMismatch, webgpuProbe } from '../helpers/gpu.js';
import { describeWith } from '../helpers/capability.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const { probe, missing } = await webgpuProbe();
const SEQUENCE = new Set(['simple_sequence', 'simple_dyna_sequence', 'simple_sequence_state']);

describeWith(!!process.env.CI, 'WebGPU adapter (Dawn)', missing)('KIND_GPU on WebGPU', () => {
  let server: TestServer;
  let repo: string;
  let http: HttpClient;
  let grpc: GrpcClient;
  const models = onnxModels();

  beforeAll(async () => {
    repo = mkdtempSync(join(tmpdir(), 'tsi-gpu-'));
    for (const m of models) {
      copyModel(repo, m, m, (c) => c);
      copyModel(repo, m, `${m}_gpu`, gpuVariant(2));
    }
    server = await startTestServer({ modelRepositories: [repo], grpcPort: 0, grpcAddress: '127.0.0.1' });
    http = new HttpClient(server.url.replace('http://', ''));
    grpc = new GrpcClient(`127.0.0.1:${server.grpc!.port}`);
  }, 180_000);

  afterAll(async () => {
    grpc?.close();
    await server?.stop();
    rmSync(repo, { recursive: true, force: true });
  });

  it('a WebGPU adapter exists (CI installs Mesa lavapipe)', () => {
    expect(probe.adapters.length, probe.reason).toBeGreaterThan(0);
  });

  it('loads every model and its KIND_GPU copy', () => {
    const index = server.server.repositoryIndex();
    for (const m of models) {
      for (const name of [m, `${m}_gpu`]) {
        const e = index.find((x) => x.name === name);
        expect(e?.state, `${name}: ${e?.reason}`).toBe('READY');
      }
    }
  });

  it('places float and int32 models on the WebGPU provider, two instances each, and says which adapter', async () => {
    for (const m of ['add_sub', 'image_classifier', 'mlp_batch', 'simple']) {
      const mv = server.server.model(`${m}_gpu`);
      expect(mv.instances).toHaveLength(2);
      for (const inst of mv.instances) {
        expect(inst.placement?.provider, `${m}: ${inst.placement?.notes?.join('; ')}`).toBe('webgpu');
        expect(inst.placement?.kind).toBe('KIND_GPU');
        expect(inst.placement?.adapter).toContain(probe.adapters[0]!.description);
      }
      // The KIND_CPU original stays on the CPU.
      expect(server.server.model(m).instances.every((i) => i.placement?.provider === 'cpu')).toBe(true);
      const cfg = (await (await fetch(`${server.url}/v2/models/${m}_gpu/config`)).json()) as { instance_group: { kind: string; count: number }[] };
      expect(cfg.instance_group).toMatchObject([{ kind: 'KIND_GPU', count: 2 }]);
    }
    expect(server.logs.some((l) => /add_sub_gpu .*runs on execution provider 'webgpu' on /.test(l))).toBe(true);
  });

  for (const protocol of ['http', 'grpc'] as const) {
    it(`gives the KIND_CPU answers over ${protocol}, 12 concurrent clients per model`, async () => {
      const client = protocol === 'http' ? http : grpc;
      const failures: string[] = [];
      for (const m of models.filter((x) => !SEQUENCE.has(x))) {
        const meta = (await http.getModelMetadata(m)) as unknown as { inputs: { name: string; datatype: string; shape: number[] }[] };
        const batching = meta.inputs[0]!.shape[0] === -1;
        const requests: InferInputSpec[][] = Array.from({ length: 12 }, (_, i) => inputsFor(meta, batching, 1 + (i % 3), 1000 + i));
        const [cpu, gpu] = await Promise.all([
          Promise.all(requests.map((r) => client.infer(m, r))),
          Promise.all(requests.map((r) => client.infer(`${m}_gpu`, r))),
        ]);
        for (let i = 0; i < requests.length; i++) {
          for (const o of cpu[i]!.outputs) {
            const g = gpu[i]!.output(o.name);
            const why = g ? outputMismatch(g, o) : `${o.name} missing`;
            if (why) failures.push(`${m} request ${i}: ${why}`);
          }
        }
      }
      expect(failures).toEqual([]);
      // Batching took place on the GPU copies (several requests per execution somewhere).
      const stats = server.server.statistics('mlp_batch_gpu').model_stats[0] as { inference_count: number; execution_count: number };
      expect(stats.inference_count).toBeGreaterThan(stats.execution_count);
    }, 120_000);
  }

  it('doctor names the adapter and says KIND_GPU instances get WebGPU here', async () => {
    const report = await doctorJson();
    expect(report.webgpu.adapters[0]).toMatchObject({ vendor: probe.adapters[0]!.vendor, description: probe.adapters[0]!.description });
    expect(report.webgpu.adapters[0]!.maxStorageBufferBindingSize).toBeGreaterThan(0);
    expect(report.kindGpu.provider).toBe('webgpu');
    expect(report.kindGpu.adapter).toContain(probe.adapters[0]!.description);
  });

  it('runs model_warmup on every WebGPU instance before READY (zero, random and file data)', async () => {
    const r2 = mkdtempSync(join(tmpdir(), 'tsi-gpu-warm-'));
    const image = new Float32Array(3 * 16 * 16).fill(0.25);
    copyModel(r2, 'image_classifier', 'classifier_warm', (c) => ({
      ...gpuVariant(2)(c),
      model_warmup: [
        { name: 'zeros', batch_size: 4, inputs: { image: { data_type: 'TYPE_FP32', dims: [3, 16, 16], zero_data: true } } },
        { name: 'random', batch_size: 1, count: 3, inputs: { image: { data_type: 'TYPE_FP32', dims: [3, 16, 16], random_data: true } } },
        { name: 'file', batch_size: 2, inputs: { image: { data_type: 'TYPE_FP32', dims: [3, 16, 16], input_data_file: 'image.bin' } } },
      ],
    }));
    mkdirSync(join(r2, 'classifier_warm', 'warmup'));
    writeFileSync(join(r2, 'classifier_warm', 'warmup', 'image.bin'), new Uint8Array(image.buffer));
    const s2 = await startTestServer({ modelRepositories: [r2] });
    try {
      const mv = s2.server.model('classifier_warm');
      expect(mv.instances.map((i) => i.placement?.provider)).toEqual(['webgpu', 'webgpu']);
      for (const inst of ['classifier_warm_0_0', 'classifier_warm_0_1']) {
        for (const sample of ['zeros', 'random', 'file']) {
          expect(s2.logs.some((l) => l.includes(`instance ${inst} is running warmup sample '${sample}'`)), `${inst} ${sample}`).toBe(true);
        }
      }
      const r = await new HttpClient(s2.url.replace('http://', '')).infer('classifier_warm', [{ name: 'image', shape: [1, 3, 16, 16], data: image }]);
      expect(r.output('scores')!.shape).toEqual([1, 10]);
    } finally {
      await s2.stop();
      rmSync(r2, { recursive: true, force: true });
    }
  }, 60_000);

  it('runs sequences the same on KIND_GPU (implicit state, both strategies)', async () => {
    const failures: string[] = [];
    for (const m of models.filter((x) => SEQUENCE.has(x))) {
      for (const [k, client] of [http, grpc].entries()) {
        const values = [5, -3, 11, 2];
        const run1 = async (name: string, id: number) => {
          const outs = [];
          for (const [i, v] of values.entries()) {
            const r = await client.infer(name, [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(v) }], {
              sequenceId: id, sequenceStart: i === 0, sequenceEnd: i === values.length - 1,
            });
            outs.push(r.output('OUTPUT')!);
          }
          return outs;
        };
        const [cpu, gpu] = await Promise.all([run1(m, 7100 + k), run1(`${m}_gpu`, 7100 + k)]);
        cpu.forEach((o, i) => {
          const why = outputMismatch(gpu[i]!, o);
          if (why) failures.push(`${m} step ${i}: ${why}`);
        });
      }
    }
    expect(failures).toEqual([]);
  }, 60_000);
});
