/**
 * The `llm` backend on a GPU: tiny_gpt served twice by one server, as shipped (KIND_CPU) and as a
 * KIND_GPU copy, whose decoder (and prefill) sessions run on onnxruntime-node's WebGPU provider on
 * whatever adapter Dawn finds (a real GPU, or in CI Mesa's lavapipe). Greedy decoding must give the
 * same tokens on both, alone and with requests batched in flight, over Triton's generate and the
 * OpenAI route. Without an adapter these tests are skipped with the reason, except under CI.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyModel, gpuVariant, webgpuProbe } from '../helpers/gpu.js';
import { describeWith } from '../helpers/capability.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';

const { probe, missing } = await webgpuProbe();

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 5 + seed * 3) % WORDS.length]).join(' ');

describeWith(!!process.env.CI, 'WebGPU adapter (Dawn)', missing)('llm KIND_GPU on WebGPU', () => {
  let server: TestServer;
  let repo: string;

  beforeAll(async () => {
    repo = mkdtempSync(join(tmpdir(), 'tsi-llm-gpu-'));
    copyModel(repo, 'tiny_gpt', 'tiny_gpt', (c) => c);
    copyModel(repo, 'tiny_gpt', 'tiny_gpt_gpu', gpuVariant(1));
    server = await startTestServer({ modelRepositories: [repo] });
  }, 180_000);

  afterAll(async () => {
    await server?.stop();
    rmSync(repo, { recursive: true, force: true });
  });

  it('a WebGPU adapter exists (CI installs Mesa lavapipe)', () => {
    expect(probe.adapters.length, probe.reason).toBeGreaterThan(0);
  });

  it('puts the KIND_GPU copy on the WebGPU provider and says which adapter', () => {
    const gpu = server.server.model('tiny_gpt_gpu').instances;
    expect(gpu).toHaveLength(1);
    expect(gpu[0]!.placement?.provider, gpu[0]!.placement?.notes?.join('; ')).toBe('webgpu');
    expect(gpu[0]!.placement?.kind).toBe('KIND_GPU');
    expect(gpu[0]!.placement?.adapter).toContain(probe.adapters[0]!.description);
    expect(server.server.model('tiny_gpt').instances[0]!.placement?.provider).toBe('cpu');
    expect(server.logs.some((l) => /tiny_gpt_gpu .*decoder runs on execution provider 'webgpu' on /.test(l))).toBe(true);
  });

  for (const concurrency of [1, 4]) {
    it(`gives the KIND_CPU greedy tokens to ${concurrency} concurrent request(s)`, async () => {
      const reqs = Array.from({ length: concurrency }, (_, i) => ({ text_input: promptOf(2 + ((i * 7) % 13), i + concurrency), max_tokens: 4 + ((i * 5) % 5), exclude_input_in_output: true }));
      const ask = (model: string) => Promise.all(reqs.map((r) => postJson(`${server.url}/v2/models/${model}/generate`, r)));
      const [cpu, gpu] = [await ask('tiny_gpt'), await ask('tiny_gpt_gpu')];
      for (let i = 0; i < reqs.length; i++) {
        expect(cpu[i]!.status).toBe(200);
        expect(gpu[i]!.status, JSON.stringify(gpu[i]!.body)).toBe(200);
        expect({ i, text: gpu[i]!.body.text_output, n: gpu[i]!.body.num_output_tokens }).toEqual({ i, text: cpu[i]!.body.text_output, n: cpu[i]!.body.num_output_tokens });
      }
    });
  }

  it('answers the OpenAI chat route the same on both', async () => {
    const ask = (model: string) => postJson(`${server.url}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hex the sphinx' }], max_tokens: 8, temperature: 0 });
    const [cpu, gpu] = [await ask('tiny_gpt'), await ask('tiny_gpt_gpu')];
    expect(gpu.status).toBe(200);
    expect(gpu.body.choices[0].message.content).toBe(cpu.body.choices[0].message.content);
  });
});
