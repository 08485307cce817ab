/**
 * KV caches kept on the GPU (runtime-node/llm/device-kv.ts): tiny_gpt served as shipped (KIND_CPU)
 * and as KIND_GPU copies on onnxruntime-node's WebGPU provider (in CI Mesa's lavapipe; the copies'
 * placement is checked, and each run's token ids are seen coming down from the device). Greedy tokens
 * must be the CPU's at 1 stream, and at 4 and 16 while requests join (the statistics' joined_sequences
 * grows) and leave the running batch, with
 * stop strings, a cancelled stream, n = 3 (forked caches), a prefix-cache hit, a json_schema
 * grammar (logits read on the host) and prompt_logprobs (every position's logits of that prefill read on the host); the server's bytes-moved counter must show no KV cache crossing
 * between host and device; and requests cut off by their clients must leave no device tensor held.
 * Without an adapter the suite is skipped with the reason, except under CI.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyModel, gpuVariant, webgpuProbe } from '../helpers/gpu.js';
import { describeWith } from '../helpers/capability.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const { missing } = await webgpuProbe();

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 5 + seed * 3) % WORDS.length]).join(' ');
/** Over two prefix-cache blocks of tokens shared by the prefix requests. */
const SHARED = promptOf(40, 7);

type Req = { text_input: string; max_tokens: number; stop?: string };

describeWith(!!process.env.CI, 'WebGPU adapter (Dawn)', missing)('llm KIND_GPU with KV caches on the device', () => {
  let server: TestServer;
  let repo: string;

  beforeAll(async () => {
    repo = mkdtempSync(join(tmpdir(), 'tsi-llm-gpu-kv-'));
    copyModel(repo, 'tiny_gpt', 'tiny_gpt', (c) => c);
    copyModel(repo, 'tiny_gpt', 'gpu', gpuVariant(1));
    copyModel(repo, 'tiny_gpt', 'gpu_nocache', (c) => ({
      ...gpuVariant(1)(c), parameters: { ...c.parameters, enable_prefix_caching: { string_value: 'false' } },
    }));
    // The old way, caches on the host: the counter the next tests read must see them cross.
    copyModel(repo, 'tiny_gpt', 'gpu_host_kv', (c) => ({
      ...gpuVariant(1)(c), parameters: { ...c.parameters, kv_cache_location: { string_value: 'host' } },
    }));
    server = await startTestServer({ modelRepositories: [repo], metricsPort: 0 });
  }, 180_000);

  afterAll(async () => {
    await server?.stop();
    rmSync(repo, { recursive: true, force: true });
  });

  const generate = (model: string, r: Req) => postJson(`${server.url}/v2/models/${model}/generate`, { ...r, exclude_input_in_output: true });
  const metrics = async () => (await (await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`)).text()).split('\n');
  /** `tsi_llm_device_bytes_total` of a model: direction:data → bytes. */
  const moved = async (model: string) => {
    const out: Record<string, number> = {};
    for (const l of await metrics()) {
      const m = /^tsi_llm_device_bytes_total\{(.*)\} (\S+)$/.exec(l);
      if (!m || !m[1]!.includes(`model="${model}"`)) continue;
      const dir = /direction="(\w+)"/.exec(m[1]!)![1]!;
      const data = /data="(\w+)"/.exec(m[1]!)![1]!;
      out[`${dir}:${data}`] = Number(m[2]);
    }
    return out;
  };
  const llmStats = async (model: string) => (await getJson(`${server.url}/v2/models/${model}/stats`)).body.model_stats[0].llm_stats;

  it('runs the KIND_GPU copies on the WebGPU provider', () => {
    for (const model of ['gpu', 'gpu_nocache', 'gpu_host_kv']) {
      const placement = server.server.model(model).instances[0]!.placement;
      expect(placement?.provider, `${model}: ${placement?.notes?.join('; ')}`).toBe('webgpu');
    }
    expect(server.server.model('tiny_gpt').instances[0]!.placement?.provider).toBe('cpu');
  });

  for (const streams of [1, 4, 16]) {
    const how = streams === 1 ? 'alone' : 'rows joining and leaving';
    it(`gives the KIND_CPU greedy tokens at ${streams} stream(s), ${how}, with stop strings`, async () => {
      // Half start at once; the rest join the running batch as the first of those ends, while the
      // first request (48 tokens where there are others) is still decoding.
      const reqs: Req[] = Array.from({ length: streams }, (_, i) => ({ text_input: promptOf(2 + ((i * 7) % 13), i + streams), max_tokens: i === 0 && streams > 1 ? 48 : 3 + ((i * 5) % 9) }));
      const plain = await Promise.all(reqs.map((r) => generate('tiny_gpt', r)));
      // A stop string from the CPU's own text, so it is met part-way on both.
      reqs.forEach((r, i) => {
        const text: string = plain[i]!.body.text_output;
        if (i % 3 === 1 && text.length > 4) r.stop = text.slice(2, 4);
      });
      const run = async (model: string) => {
        const first = Math.max(1, streams >> 1);
        const out: Promise<Awaited<ReturnType<typeof generate>>>[] = reqs.slice(0, first).map((r) => generate(model, r));
        // The rest go once one of the first has ended (the 48-token one is decoding still).
        if (streams > 1) await Promise.race(out.slice(1));
        out.push(...reqs.slice(first).map((r) => generate(model, r)));
        return Promise.all(out);
      };
      const cpu = await run('tiny_gpt');
      const [joinedBefore, idsBefore] = [(await llmStats('gpu')).joined_sequences as number, (await moved('gpu'))['to_host:ids'] ?? 0];
      const gpu = await run('gpu');
      // The device ran these steps (its chosen token ids came down from it), and with several streams rows joined
      // sequences already decoding there, as the title says.
      expect((await moved('gpu'))['to_host:ids'] ?? 0).toBeGreaterThan(idsBefore);
      const joined = (await llmStats('gpu')).joined_sequences - joinedBefore;
      if (streams > 1) expect(joined).toBeGreaterThanOrEqual(1);
      for (let i = 0; i < streams; i++) {
        expect(gpu[i]!.status, JSON.stringify(gpu[i]!.body)).toBe(200);
        expect(cpu[i]!.status).toBe(200);
        expect({ i, text: gpu[i]!.body.text_output }).toEqual({ i, text: cpu[i]!.body.text_output });
      }
    }, 300_000);
  }

  it('gives the KIND_CPU tokens with n = 3, a prefix-cache hit and a json_schema grammar', async () => {
    const completions = (model: string, prompt: string, extra: Record<string, unknown> = {}) =>
      postJson(`${server.url}/v1/completions`, { model, prompt, max_tokens: 6, temperature: 0, ...extra });
    const ask = async (model: string) => {
      const n3 = await completions(model, promptOf(9, 3), { n: 3 });
      const warm = await completions(model, `${SHARED} and the fox`);
      const hit = await completions(model, `${SHARED} but the dog`);
      const json = await postJson(`${server.url}/v1/chat/completions`, {
        model, messages: [{ role: 'user', content: 'a name' }], max_tokens: 24, temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } },
      });
      return { n3, warm, hit, json };
    };
    const [cpu, gpu] = [await ask('tiny_gpt'), await ask('gpu')];
    for (const k of ['n3', 'warm', 'hit', 'json'] as const) expect(gpu[k].status, JSON.stringify(gpu[k].body)).toBe(200);
    expect(gpu.n3.body.choices.map((c: any) => c.text)).toEqual(cpu.n3.body.choices.map((c: any) => c.text));
    expect(gpu.n3.body.choices).toHaveLength(3);
    expect(gpu.warm.body.choices[0].text).toBe(cpu.warm.body.choices[0].text);
    expect(gpu.hit.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(32);
    expect(gpu.hit.body.choices[0].text).toBe(cpu.hit.body.choices[0].text);
    expect(gpu.json.body.choices[0].message.content).toBe(cpu.json.body.choices[0].message.content);
    // prompt_logprobs: that prefill's every-position logits come down whole (device-kv.ts readLogits `all`).
    const scored = await Promise.all(['tiny_gpt', 'gpu'].map((model) => completions(model, promptOf(11, 4), { max_tokens: 2, prompt_logprobs: 3 })));
    const [want, got] = scored.map((r) => r.body.choices[0].prompt_logprobs as (Record<string, any> | null)[]);
    expect(scored[1]!.status, JSON.stringify(scored[1]!.body)).toBe(200);
    expect(got!.map((e) => e && Object.keys(e))).toEqual(want!.map((e) => e && Object.keys(e)));
    got!.forEach((e, p) => {
      for (const [id, x] of Object.entries(e ?? {})) {
        expect({ p, id, rank: x.rank }).toEqual({ p, id, rank: want![p]![id].rank });
        expect(Math.abs(x.logprob - want![p]![id].logprob)).toBeLessThan(1e-3);
      }
    });
    expect(scored[1]!.body.choices[0].text).toBe(scored[0]!.body.choices[0].text);
  }, 300_000);

  it('moves no KV cache between host and device: ids and inputs go up, ids (and logits for a grammar) come down', async () => {
    // Greedy rows joining a running batch (their caches composed on the device), then the counters.
    await Promise.all([3, 9, 14].map((n, i) => generate('gpu', { text_input: promptOf(n, i), max_tokens: 4 + i })));
    const bytes = await moved('gpu');
    expect(bytes['to_host:kv'] ?? 0, JSON.stringify(bytes)).toBe(0);
    expect(bytes['to_device:kv'] ?? 0, JSON.stringify(bytes)).toBe(0);
    expect(bytes['to_host:ids'], JSON.stringify(bytes)).toBeGreaterThan(0);
    expect(bytes['to_device:inputs'], JSON.stringify(bytes)).toBeGreaterThan(0);
    // The json_schema request's steps read logits; greedy steps only ids: far fewer bytes than logits.
    // The counter sees caches that do cross: the same requests with the caches on the host.
    await Promise.all([3, 9, 14].map((n, i) => generate('gpu_host_kv', { text_input: promptOf(n, i), max_tokens: 4 + i })));
    const host = await moved('gpu_host_kv');
    expect(host['to_host:kv'], JSON.stringify(host)).toBeGreaterThan(0);
    expect(host['to_device:kv'], JSON.stringify(host)).toBeGreaterThan(0);
    const stats = await llmStats('gpu');
    expect(stats.device.bytes_to_host).toEqual({ ids: bytes['to_host:ids'], ...(bytes['to_host:logits'] ? { logits: bytes['to_host:logits'] } : {}) });
  });

  it('holds no device tensor once requests, half of them cut off by their clients, are done', async () => {
    const N = 500;
    await Promise.all(Array.from({ length: N }, async (_, i) => {
      const ac = new AbortController();
      const r = await fetch(`${server.url}/v2/models/gpu_nocache/generate_stream`, {
        method: 'POST', signal: ac.signal,
        body: JSON.stringify({ text_input: promptOf(3 + (i % 11), i), max_tokens: i % 2 ? 40 : 4, stream: true, ignore_eos: true }),
      });
      const reader = r.body!.getReader();
      if (i % 2) {
        await reader.read();
        ac.abort();
        return;
      }
      while (!(await reader.read()).done);
    }));
    // One more request after them: the frees of the cut-off ones ride with its steps at the latest,
    // and the step that ends it frees its own cache (the gauge is the worker's count after a step).
    expect((await generate('gpu_nocache', { text_input: 'the fox', max_tokens: 2 })).status).toBe(200);
    let s = await llmStats('gpu_nocache');
    for (let i = 0; i < 200 && (s.running_sequences > 0 || s.device.tensors > 0); i++) {
      await new Promise((res) => setTimeout(res, 20));
      s = await llmStats('gpu_nocache');
    }
    expect(s.running_sequences).toBe(0);
    expect(s.device.tensors).toBe(0);
    expect((await metrics()).some((l) => /^tsi_llm_device_tensors\{.*model="gpu_nocache".*\} 0$/.test(l))).toBe(true);
    expect(s.device.bytes_to_host.kv ?? 0).toBe(0);
  }, 300_000);
});
