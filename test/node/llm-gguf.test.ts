/**
 * The GGUF conversion bench/llm-llamacpp.ts runs llama.cpp on (bench/gguf.ts), checked the way the
 * bench relies on it: a Llama (Llama 2's SentencePiece vocabulary, q/k rows permuted for llama.cpp's
 * RoPE) and a Qwen2 (q/k/v biases, byte-level BPE, no permutation) written by tsi's builder with
 * scaled init, each served by the real tsi server (fp32 and int4), and the same weights as GGUF
 * (F32, and Q4_0 from the very same int4 codes and fp16 scales) run by llama.cpp (node-llama-cpp's
 * prebuilt CPU build). Fed tsi's greedy tokens (teacher forcing), llama.cpp must pick tsi's next
 * token at ≥ 85 % of the steps — it computes in its own kernels (Q4_0 with int8 activations), so a
 * near-tie may go the other way, but a wrong permutation, nibble order or tensor layout drops the
 * agreement to chance.
 */

import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { writeFamilyFolder, type FamilySpec } from '../../scripts/llm-families.js';
import { folderToGguf } from '../../bench/gguf.js';
import { describeWith } from '../helpers/capability.js';
import { MODELS, ROOT, postJson, startTestServer, type TestServer } from '../helpers/server.js';

type Llama = Awaited<ReturnType<typeof import('node-llama-cpp').getLlama>>;

const root = join(tmpdir(), `tsi-llm-gguf-${process.pid}`);
let llama: Llama | undefined;
let missing: string | undefined;
try {
  const { getLlama } = await import('node-llama-cpp');
  // The prebuilt CPU binary only: never a download or a build.
  llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, progressLogs: false, logLevel: 'error' as never });
} catch (e) {
  missing = `node-llama-cpp's prebuilt CPU binary does not load: ${(e as Error).message}`;
}

const TOKENIZERS = {
  llama: join(ROOT, 'node_modules', '@lenml', 'tokenizer-llama2', 'models'),
  qwen2: join(MODELS, 'tiny_gpt', '1'),
};
const PROMPTS = ['the quick brown fox jumps over', 'seven wizards quietly hex every jovial sphinx', 'a lazy dog', 'once upon a time there was'];
const TOKENS = 24;
let server: TestServer;
const tokenizers = new Map<string, Tokenizer>();

describeWith(!!process.env.CI, 'node-llama-cpp', missing)('GGUF from the builder\'s folder, run by llama.cpp', () => {
  beforeAll(async () => {
    for (const family of ['llama', 'qwen2'] as const) {
      const dir = TOKENIZERS[family];
      const tok = { json: readFileSync(join(dir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(dir, 'tokenizer_config.json'), 'utf8') };
      const t = Tokenizer.fromJson(tok.json, tok.config);
      tokenizers.set(family, t);
      const spec: FamilySpec = {
        family, vocab: t.vocabSize, dModel: 256, heads: 4, kvHeads: 2, headDim: 64, layers: 4, ffn: 512, context: 256,
        seed: family === 'llama' ? 21 : 23, bos: t.bosId ?? t.eosId!, eos: t.eosId!, scaledInit: true,
      };
      const folder = join(root, 'downloads', family);
      await writeFamilyFolder(folder, spec, tok, ['model', 'model_q4']);
      for (const variant of ['model', 'model_q4'] as const) {
        folderToGguf(folder, variant, join(root, `${family}_${variant}.gguf`));
        const entry = join(root, 'repo', `${family}_${variant}`);
        mkdirSync(entry, { recursive: true });
        symlinkSync(folder, join(entry, '1'));
        writeFileSync(join(entry, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "${variant}" } }\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n`);
      }
    }
    server = await startTestServer({ modelRepositories: [join(root, 'repo')] });
  }, 300_000);

  afterAll(async () => {
    await server?.stop();
    await llama?.dispose();
    rmSync(root, { recursive: true, force: true });
  });

  /** tsi's greedy token ids for `prompt` (generate with logprobs, which names each token's id). */
  async function tsiTokens(model: string, prompt: string): Promise<number[]> {
    const r = await postJson(`${server.url}/v2/models/${model}/generate`, { text_input: prompt, max_tokens: TOKENS, ignore_eos: true, logprobs: 0, exclude_input_in_output: true });
    expect(r.status).toBe(200);
    const logprobs = (typeof r.body.logprobs === 'string' ? JSON.parse(r.body.logprobs) : r.body.logprobs) as { token_id: number }[];
    return logprobs.map((l) => l.token_id);
  }

  it.each([['llama', 'model'], ['llama', 'model_q4'], ['qwen2', 'model'], ['qwen2', 'model_q4']] as const)(
    '%s %s: llama.cpp picks tsi\'s greedy token at 85 percent of teacher-forced steps or more',
    async (family, variant) => {
      const model = await llama!.loadModel({ modelPath: join(root, `${family}_${variant}.gguf`) });
      const context = await model.createContext({ contextSize: 256, threads: 1 });
      try {
        let agree = 0, steps = 0, freeRunExact = 0;
        for (const prompt of PROMPTS) {
          const ids = tokenizers.get(family)!.encode(prompt);
          const tsi = await tsiTokens(`${family}_${variant}`, prompt);
          expect(tsi).toHaveLength(TOKENS);
          const seq = context.getSequence();
          // Each position from the prompt's last on asks for llama.cpp's greedy next token.
          const input = [...ids, ...tsi.slice(0, -1)].map((t, i) => (i >= ids.length - 1 ? [t, { generateNext: { token: true, options: { temperature: 0 } } }] as const : t));
          const out = await seq.controlledEvaluate(input as never);
          const picks = tsi.map((_, k) => out[ids.length - 1 + k]?.next.token);
          picks.forEach((p, k) => { agree += p === tsi[k] ? 1 : 0; steps++; });
          if (picks.every((p, k) => p === tsi[k])) freeRunExact++;
          seq.dispose();
        }
        const rate = agree / steps;
        console.log(`${family} ${variant}: llama.cpp agrees at ${agree}/${steps} teacher-forced steps (${(rate * 100).toFixed(1)} %), ${freeRunExact}/${PROMPTS.length} prompts on every step`);
        expect(rate).toBeGreaterThanOrEqual(0.85);
        // fp32 on both sides: the greedy margins of the scaled init are clear, so llama.cpp's free run
        // (each step agreeing) is tsi's on most prompts.
        if (variant === 'model') expect(freeRunExact).toBeGreaterThanOrEqual(PROMPTS.length - 1);
      } finally {
        await context.dispose();
        await model.dispose();
      }
    },
    120_000,
  );
});
