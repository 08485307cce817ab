/**
 * `tsi-node pull` against a local stand-in for the Hugging Face Hub (test/helpers/fake-hub.ts, the
 * routes and headers `@huggingface/hub` reads): a tiny generated Llama in the onnx-community layout is
 * pulled with one variant's files only, through HF_ENDPOINT and HF_TOKEN; a download cut half-way
 * continues with a Range request from where it stopped; the pulled folder serves and gives the same
 * greedy answer as the original; folders tsi cannot serve are refused before any weights are asked for.
 */

import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, existsSync, readdirSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildCli } from '../../runtime-node/cli.js';
import { pullModel } from '../../runtime-node/llm/pull.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { VARIANT_RULES } from '../../core/llm/model-folder.js';
import { tinySpec, writeFamilyFolder } from '../../scripts/llm-families.js';
import { startFakeHub, type FakeHub } from '../helpers/fake-hub.js';
import { MODELS, postJson, startTestServer } from '../helpers/server.js';
import { encodeWav } from '../../core/speech/audio.js';
import { chirp } from '../helpers/audio.js';

const root = join(tmpdir(), `tsi-pull-${process.pid}`);
const source = join(root, 'hub', 'llama');
const TOKEN = 'hf_pulltesttoken';
let hub: FakeHub;

beforeAll(async () => {
  const tokDir = join(MODELS, 'tiny_gpt', '1');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  const t = Tokenizer.fromJson(tok.json, tok.config);
  await writeFamilyFolder(source, tinySpec('llama', t.vocabSize, t.bosId ?? t.eosId!, t.eosId!), tok, ['model', 'model_q4']);
  writeFileSync(join(source, 'README.md'), '# a model card the pull leaves on the Hub\n');
  hub = await startFakeHub();
  hub.add('onnx-community/Tiny-Llama-Test', source, TOKEN);

  // Folders tsi cannot serve, each with weights that must never be asked for.
  const variantOf = (id: string, edit: (dir: string) => void) => {
    const dir = join(root, 'hub', id.replace('/', '_'));
    cpSync(source, dir, { recursive: true });
    edit(dir);
    hub.add(id, dir);
  };
  variantOf('acme/t5-small', (d) => writeFileSync(join(d, 'config.json'), JSON.stringify({ architectures: ['T5ForConditionalGeneration'], model_type: 't5', is_encoder_decoder: true })));
  variantOf('acme/no-onnx', (d) => { rmSync(join(d, 'onnx'), { recursive: true }); writeFileSync(join(d, 'model.safetensors'), 'weights'); });
  // Three precisions, for the choice without --variant.
  const three = join(root, 'hub', 'three');
  await writeFamilyFolder(three, tinySpec('llama', t.vocabSize, t.bosId ?? t.eosId!, t.eosId!), tok, ['model', 'model_fp16', 'model_q4']);
  hub.add('onnx-community/Tiny-Llama-Three', three);
  variantOf('acme/odd-tokenizer', (d) => writeFileSync(join(d, 'tokenizer.json'), JSON.stringify({ model: { type: 'CharacterLevel', vocab: {} } })));
}, 120_000);

afterAll(async () => {
  await hub?.close();
  rmSync(root, { recursive: true, force: true });
});

const weightRequests = () => hub.log.filter((r) => r.path.startsWith('/cdn/') || r.path.includes('.onnx'));

describe('tsi-node pull', () => {
  it('pulls one variant\'s files, resumes a cut download with a Range request, and the folder serves', async () => {
    const repository = join(root, 'repo');
    const data = 'onnx/model.onnx_data';
    const whole = readFileSync(join(source, data));
    hub.cutOnce = data;
    hub.log.length = 0;
    await expect(pullModel({ repo: 'onnx-community/Tiny-Llama-Test', variant: 'fp32', repository, hubUrl: hub.url, accessToken: TOKEN }))
      .rejects.toThrow(/terminated|stopped at|aborted|socket/i);
    const dir = join(repository, 'tiny-llama-test', '1');
    const part = readdirSync(join(dir, 'onnx')).find((f) => f.endsWith('.part'));
    expect(part).toBeDefined();
    const partial = readFileSync(join(dir, 'onnx', part!)).length;
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(whole.length);
    expect(existsSync(join(repository, 'tiny-llama-test', 'config.pbtxt'))).toBe(false);

    // Again through the CLI, the Hub's address and token from the environment, as a user runs it.
    hub.log.length = 0;
    const lines: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s) => (lines.push(String(s)), true));
    process.env.HF_ENDPOINT = hub.url;
    process.env.HF_TOKEN = TOKEN;
    try {
      await buildCli().parseAsync(['node', 'tsi-node', 'pull', 'onnx-community/Tiny-Llama-Test', '--variant', 'fp32', '--repository', repository]);
    } finally {
      spy.mockRestore();
      delete process.env.HF_ENDPOINT;
      delete process.env.HF_TOKEN;
    }
    expect(process.exitCode ?? 0).toBe(0);
    const resumed = hub.log.filter((r) => r.path.startsWith('/cdn/') && r.range && r.range !== 'bytes=0-0');
    expect(resumed.map((r) => r.range)).toContain(`bytes=${partial}-${whole.length - 1}`);
    expect(Buffer.compare(readFileSync(join(dir, data)), whole)).toBe(0);
    expect(readdirSync(join(dir, 'onnx')).sort()).toEqual(['model.onnx', 'model.onnx_data']);
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'onnx/model.onnx']) {
      expect(Buffer.compare(readFileSync(join(dir, f)), readFileSync(join(source, f))), f).toBe(0);
    }
    expect(existsSync(join(dir, 'README.md'))).toBe(false);
    // Finished files are not fetched again: only the rest of the cut one came down.
    expect(weightRequests().some((r) => r.path.endsWith('onnx/model.onnx'))).toBe(false);
    const text = lines.join('');
    expect(text).toMatch(/variant model \(asked for; present: model, model_q4\), 6 files, [\d.]+ (KiB|MiB)/);
    expect(text).toMatch(/onnx\/model\.onnx_data {2}[\d.]+ (KiB|MiB) \/ [\d.]+ (KiB|MiB) {2}total [\d.]+ (KiB|MiB) \/ [\d.]+ (KiB|MiB) \(100%\)/);
    expect(readFileSync(join(repository, 'tiny-llama-test', 'config.pbtxt'), 'utf8')).toContain('string_value: "model"');

    // The pulled folder serves, and answers as the original does.
    const original = join(root, 'original');
    mkdirSync(join(original, 'orig'), { recursive: true });
    symlinkSync(source, join(original, 'orig', '1'));
    writeFileSync(join(original, 'orig', 'config.pbtxt'), 'backend: "llm"\nparameters { key: "variant" value { string_value: "model" } }\n');
    const server = await startTestServer({ modelRepositories: [repository, original] });
    try {
      const ask = (m: string) => postJson(`${server.url}/v2/models/${m}/generate`, { text_input: 'the quick brown fox', max_tokens: 8, exclude_input_in_output: true });
      const [a, b] = [await ask('tiny-llama-test'), await ask('orig')];
      expect(a.status).toBe(200);
      expect(a.body.num_output_tokens).toBeGreaterThan(0);
      expect(a.body.text_output).toBe(b.body.text_output);
    } finally {
      await server.stop();
    }
  }, 180_000);

  it('refuses what tsi cannot serve before asking for any weights, saying why', async () => {
    const repository = join(root, 'refused');
    const pull = (repo: string, variant?: string) => pullModel({ repo, variant, repository, hubUrl: hub.url });
    hub.log.length = 0;
    await expect(pull('acme/t5-small')).rejects.toThrow('acme/t5-small cannot be served by tsi: architecture T5ForConditionalGeneration is neither a decoder-only causal LM');
    await expect(pull('acme/no-onnx')).rejects.toThrow('acme/no-onnx cannot be served by tsi: it has no ONNX export under onnx/');
    await expect(pull('acme/odd-tokenizer')).rejects.toThrow("acme/odd-tokenizer cannot be served by tsi: tokenizer.json: model type 'CharacterLevel' is not supported");
    expect(weightRequests()).toEqual([]);
    await expect(pull('onnx-community/Tiny-Llama-Test', 'fp16')).rejects.toThrow(/Repository not found/);
    await expect(pullModel({ repo: 'onnx-community/Tiny-Llama-Test', variant: 'fp16', repository, hubUrl: hub.url, accessToken: TOKEN }))
      .rejects.toThrow("variant 'model_fp16' is not in onnx/ (present: model, model_q4)");
  }, 60_000);

  it('without --variant takes the best present for --device: fp32 on the CPU, fp16 (and KIND_GPU) on a GPU', async () => {
    const repository = join(root, 'devices');
    const lines: string[] = [];
    const pull = (device: 'cpu' | 'gpu', name: string) => pullModel({ repo: 'onnx-community/Tiny-Llama-Three', device, name, repository, hubUrl: hub.url, progress: (l) => lines.push(l) });
    const cpu = await pull('cpu', 'on_cpu');
    expect(cpu).toMatchObject({ variant: 'model', reason: `the best present for the CPU: ${VARIANT_RULES.cpu.why}` });
    expect(readFileSync(join(repository, 'on_cpu', 'config.pbtxt'), 'utf8')).not.toContain('KIND_GPU');
    const gpu = await pull('gpu', 'on_gpu');
    expect(gpu).toMatchObject({ variant: 'model_fp16', reason: `the best present for KIND_GPU (a GPU provider): ${VARIANT_RULES.gpu.why}` });
    expect(readdirSync(join(repository, 'on_gpu', '1', 'onnx'))).toEqual(['model_fp16.onnx']);
    expect(readFileSync(join(repository, 'on_gpu', 'config.pbtxt'), 'utf8')).toBe('backend: "llm"\nparameters { key: "variant" value { string_value: "model_fp16" } }\ninstance_group [{ kind: KIND_GPU }]\n');
    expect(lines.join('\n')).toContain('variant model_fp16 (the best present for KIND_GPU (a GPU provider): fp16 first (with its fp16 KV cache), then fp32');
  }, 60_000);

  it('pulls a reranker (a *ForSequenceClassification export) with a classifier config that serves it', async () => {
    // tiny_rerank in the onnx-community layout: onnx/model.onnx and onnx/model_quantized.onnx.
    const folder = join(root, 'hub', 'rerank');
    mkdirSync(join(folder, 'onnx'), { recursive: true });
    for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) cpSync(join(MODELS, 'tiny_rerank', '1', f), join(folder, f));
    for (const v of ['model', 'model_quantized']) cpSync(join(MODELS, 'tiny_rerank', '1', 'model.onnx'), join(folder, 'onnx', `${v}.onnx`));
    hub.add('onnx-community/tiny-rerank-ONNX', folder);
    const repository = join(root, 'rerankers');
    const r = await pullModel({ repo: 'onnx-community/tiny-rerank-ONNX', repository, hubUrl: hub.url });
    expect(r).toMatchObject({ name: 'tiny-rerank-onnx', kind: 'classifier', variant: 'model' });
    expect(readdirSync(join(repository, 'tiny-rerank-onnx', '1', 'onnx'))).toEqual(['model.onnx']);
    expect(readFileSync(join(repository, 'tiny-rerank-onnx', 'config.pbtxt'), 'utf8'))
      .toBe('backend: "classifier"\nmax_batch_size: 64\ndynamic_batching {}\nparameters { key: "variant" value { string_value: "model" } }\n');
    const server = await startTestServer({ modelRepositories: [repository, MODELS], modelControlMode: 'explicit', loadModels: ['tiny-rerank-onnx', 'tiny_rerank'] });
    try {
      const ask = (model: string) => postJson(`${server.url}/v1/rerank`, { model, query: 'the cat', documents: ['a cat sat on the mat', 'triton server', 'dog'] });
      const [a, b] = [await ask('tiny-rerank-onnx'), await ask('tiny_rerank')];
      expect(a.status).toBe(200);
      expect(a.body.results).toHaveLength(3);
      expect(a.body.results).toEqual(b.body.results);
    } finally {
      await server.stop();
    }
  }, 60_000);

  it('pulls a Whisper repo (encoder and merged decoder of one precision) with a whisper config that serves it', async () => {
    // The default repository's tiny Whisper, with a second precision's pair that must not come down.
    const folder = join(root, 'hub', 'whisper');
    cpSync(join(MODELS, 'whisper', '1'), folder, { recursive: true });
    for (const part of ['encoder_model', 'decoder_model_merged']) cpSync(join(folder, 'onnx', `${part}.onnx`), join(folder, 'onnx', `${part}_fp16.onnx`));
    hub.add('onnx-community/whisper-tiny-test', folder);
    const repository = join(root, 'speech');
    const r = await pullModel({ repo: 'onnx-community/whisper-tiny-test', repository, hubUrl: hub.url });
    expect(r).toMatchObject({ name: 'whisper-tiny-test', kind: 'whisper', variant: 'model' });
    expect(readdirSync(join(repository, 'whisper-tiny-test', '1', 'onnx')).sort()).toEqual(['decoder_model_merged.onnx', 'encoder_model.onnx']);
    expect(existsSync(join(repository, 'whisper-tiny-test', '1', 'preprocessor_config.json'))).toBe(true);
    expect(readFileSync(join(repository, 'whisper-tiny-test', 'config.pbtxt'), 'utf8'))
      .toBe('backend: "whisper"\nmax_batch_size: 16\ndynamic_batching {}\nparameters { key: "variant" value { string_value: "model" } }\n');
    const server = await startTestServer({ modelRepositories: [repository, MODELS], modelControlMode: 'explicit', loadModels: ['whisper-tiny-test', 'whisper'] });
    try {
      const wav = encodeWav(chirp(2.5, 9));
      const ask = async (model: string) => {
        const form = new FormData();
        form.set('model', model);
        form.set('file', new Blob([wav as BlobPart]), 'a.wav');
        const res = await fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
        expect(res.status).toBe(200);
        return res.json();
      };
      expect(await ask('whisper-tiny-test')).toEqual(await ask('whisper'));
    } finally {
      await server.stop();
    }
  }, 60_000);

  it('has --help', () => {
    const help = buildCli().commands.find((c) => c.name() === 'pull')!.helpInformation();
    expect(help).toContain('--variant <variant>');
    expect(help).toContain('--device <device>');
    expect(help).toContain('HF_TOKEN');
  });
});
