/**
 * A downloaded onnx-community folder served by KIND_GPU instances without a `variant` parameter:
 * the backend takes the GPU's order (core/llm/model-folder.ts VARIANT_RULES.gpu), so of a tiny Llama
 * folder holding fp32, fp16 and int4 it serves `model_fp16` (fp16 weights and KV cache) on
 * onnxruntime-node's WebGPU provider and says why in the log; the same folder under KIND_CPU serves
 * fp32. On the adapter Dawn finds (Mesa's lavapipe in CI) the fp16 decoder gives the greedy tokens
 * the CPU gives for the same fp16 file, alone and batched, and so do the int4 files (model_q4,
 * model_q4f16: MatMulNBits on WebGPU) asked for by `variant`, up to the first step where the CPU's two
 * likeliest tokens are within 0.01 nats (the providers round differently there; a mismatched file
 * fails at the first token). Without an adapter: a named skip locally,
 * a failure under CI.
 */

import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { VARIANT_RULES } from '../../core/llm/model-folder.js';
import { tinySpec, writeFamilyFolder } from '../../scripts/llm-families.js';
import { describeWith } from '../helpers/capability.js';
import { webgpuProbe } from '../helpers/gpu.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const { probe, missing } = await webgpuProbe();

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 5 + seed * 3) % WORDS.length]).join(' ');
const SMALL = 'parameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "separate_prefill" value { string_value: "false" } }\n';

describeWith(!!process.env.CI, 'WebGPU adapter (Dawn)', missing)('an onnx-community folder on KIND_GPU', () => {
  const root = join(tmpdir(), `tsi-llm-families-gpu-${process.pid}`);
  let server: TestServer;

  beforeAll(async () => {
    const tokDir = join(MODELS, 'tiny_gpt', '1');
    const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
    const t = Tokenizer.fromJson(tok.json, tok.config);
    const folder = join(root, 'downloads', 'llama');
    await writeFamilyFolder(folder, tinySpec('llama', t.vocabSize, t.bosId ?? t.eosId!, t.eosId!), tok, ['model', 'model_fp16', 'model_q4', 'model_q4f16']);
    const entry = (name: string, pbtxt: string) => {
      mkdirSync(join(root, 'repo', name), { recursive: true });
      symlinkSync(folder, join(root, 'repo', name, '1'));
      writeFileSync(join(root, 'repo', name, 'config.pbtxt'), `backend: "llm"\n${pbtxt}${SMALL}`);
    };
    entry('llama_gpu', 'instance_group [{ kind: KIND_GPU }]\n');
    // The CPU serves the files as exported (not rewritten into the fused layout, as KIND_GPU never is), so both run one graph.
    const asExported = 'parameters { key: "rewrite_plain_layout" value { string_value: "false" } }\n';
    entry('llama_cpu', `instance_group [{ kind: KIND_CPU }]\n${asExported}`);
    for (const v of ['fp16', 'q4', 'q4f16']) {
      entry(`llama_cpu_${v}`, `instance_group [{ kind: KIND_CPU }]\nparameters { key: "variant" value { string_value: "${v}" } }\n${asExported}`);
      if (v !== 'fp16') entry(`llama_gpu_${v}`, `instance_group [{ kind: KIND_GPU }]\nparameters { key: "variant" value { string_value: "${v}" } }\n`);
    }
    server = await startTestServer({ modelRepositories: [join(root, 'repo')] });
  }, 180_000);

  afterAll(async () => {
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('serves model_fp16 on the GPU and model on the CPU, saying why', () => {
    const line = (m: string) => server.logs.find((l) => l.includes(`model '${m}': serving`));
    expect(line('llama_gpu')).toContain(`serving 1/onnx/model_fp16.onnx (variant 'model_fp16', the best present for KIND_GPU (a GPU provider): ${VARIANT_RULES.gpu.why}; present: model, model_fp16, model_q4, model_q4f16)`);
    expect(line('llama_cpu')).toContain(`serving 1/onnx/model.onnx (variant 'model', the best present for the CPU: ${VARIANT_RULES.cpu.why}`);
    expect(server.logs.find((l) => l.includes("model 'llama_gpu': decoder with"))).toContain('float16 cache');
    const gpu = server.server.model('llama_gpu').instances[0]!;
    expect(gpu.placement?.provider, gpu.placement?.notes?.join('; ')).toBe('webgpu');
    expect(gpu.placement?.adapter).toContain(probe.adapters[0]!.description);
  });

  // int4 runs on the GPU too: MatMulNBits has WebGPU kernels for float and fp16 scales. The two
  // providers round differently (fp16 activations most of all), so where the CPU's two likeliest
  // tokens are within NEAR_TIE nats of each other greedy decoding may part there honestly: tokens are
  // compared up to the first such step, and most of the answers' tokens must be clear of one.
  const NEAR_TIE = 0.01;
  for (const [gpuModel, cpuModel, concurrencies] of [['llama_gpu', 'llama_cpu_fp16', [1, 4]], ['llama_gpu_q4', 'llama_cpu_q4', [4]], ['llama_gpu_q4f16', 'llama_cpu_q4f16', [4]]] as const) {
    for (const concurrency of concurrencies) {
      it(`${gpuModel} gives the CPU's greedy tokens of the same file (${cpuModel}) to ${concurrency} concurrent request(s)`, async () => {
        const gpuInstance = server.server.model(gpuModel).instances[0]!;
        expect(gpuInstance.placement?.provider, gpuInstance.placement?.notes?.join('; ')).toBe('webgpu');
        const reqs = Array.from({ length: concurrency }, (_, i) => ({ prompt: promptOf(2 + ((i * 7) % 11), i + concurrency), max_tokens: 8, temperature: 0, logprobs: 2 }));
        const ask = (model: string) => Promise.all(reqs.map((r) => postJson(`${server.url}/v1/completions`, { model, ...r })));
        const [cpu, gpu] = [await ask(cpuModel), await ask(gpuModel)];
        let compared = 0;
        for (let i = 0; i < reqs.length; i++) {
          expect(gpu[i]!.status, JSON.stringify(gpu[i]!.body)).toBe(200);
          expect(cpu[i]!.status, JSON.stringify(cpu[i]!.body)).toBe(200);
          const c = cpu[i]!.body.choices[0].logprobs as { tokens: string[]; top_logprobs: Record<string, number>[] };
          const g = gpu[i]!.body.choices[0].logprobs as { tokens: string[] };
          expect(g.tokens.length).toBeGreaterThan(0);
          // The steps before the first near tie on the CPU.
          let clear = 0;
          for (; clear < c.tokens.length; clear++) {
            const [a, b] = Object.values(c.top_logprobs[clear]!).sort((x, y) => y - x);
            if (b !== undefined && a! - b < NEAR_TIE) break;
          }
          compared += clear;
          expect({ i, tokens: g.tokens.slice(0, clear) }).toEqual({ i, tokens: c.tokens.slice(0, clear) });
        }
        expect(compared, 'tokens compared before a near tie').toBeGreaterThanOrEqual(reqs.length * 4);
      }, 120_000);
    }
  }
});
