/**
 * The one thing a runtime must provide to serve language models: a *decoder session*, which runs one
 * step of a decoder-only ONNX model over a batch of sequences and keeps their KV caches between
 * steps. Everything else (scheduling, sampling, text) is core's. A step is either a *prefill* (new
 * sequences with their whole prompts) or a *decode* (the live batch, one new token per sequence); the
 * caches never leave the session: a step sends token ids in and gets one row of logits per sequence
 * back. `layoutOf` reads the export layout (input/output names, KV heads and head size, context) from
 * the model's graph and its Hugging Face `config.json`.
 *
 * Concurrency: a session runs one step at a time; the engine never calls `step` before the previous
 * one resolved — unless the session says `concurrentPrefill`: then one prefill may run beside one
 * decode (or free) step, a prefill carries no `free`, and a sequence is in a decode only after its
 * prefill resolved. Sequence ids are the engine's; a session forgets a sequence once it is in `free`.
 */

import type { InstancePlacement, ModelIoInfo } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ImageInput } from '../vision/image-input.js';
import type { PromptPosition } from './prompt-logprobs.js';
import type { SamplingParams } from './sampling.js';
import type { DeviceUse } from './stats.js';

export type { DeviceUse };

export type StepRequest =
  /**
   * `forks`: sequences that start as copies of the row's cache (a request's other n - 1 choices).
   * `prefixRoom`: prefix caching is on, and its cache may hold this many tokens' worth (prefix-cache.ts).
   * `images`: a vision-language prompt's images, whose tokens are written as ids above the vocabulary
   * (core/vision/: the session's vision kit turns them into image features).
   * `promptLogprobs`: the row wants its prompt's log-probabilities with this many of the likeliest
   * tokens per position (prompt-logprobs.ts): the run keeps every position's logits, and the row is
   * prefilled whole (no prefix-cache hit: the skipped positions would have no logits).
   */
  | { kind: 'prefill'; free: number[]; rows: { seq: number; tokens: number[]; forks?: number[]; images?: readonly ImageInput[]; promptLogprobs?: number }[]; greedy?: boolean; prefixRoom?: number }
  | { kind: 'decode'; free: number[]; rows: { seq: number; token: number }[]; greedy?: boolean; auto?: AutoDecode }
  | { kind: 'free'; free: number[] };

/**
 * A decode the session runs step after step by itself (a session with `autoDecode`): each row
 * leaves after `remaining[k]` more tokens or at one of `endIds[k]`, the rest when steered (`steer`).
 * Rows without `sample[k]` take their argmax; the others are sampled there as the engine would.
 */
export interface AutoDecode {
  remaining: number[];
  endIds: number[][];
  sample?: (AutoSample | null)[];
}

/**
 * A sampled row's state, carried to the loop: its parameters, its PRNG's state, what it has seen
 * (prompt and output: the repetition penalty) and its output counts (presence and frequency), and
 * how many more tokens must not be end tokens (min_tokens). Copies: the loop updates its own.
 */
export interface AutoSample {
  params: SamplingParams;
  random: number;
  seen: number[];
  counts: [number, number][];
  suppressEnd: number;
}

/**
 * One step of an auto decode: the rows that were in it, each one's token, and the step's times;
 * `random`: with sampled rows, each row's PRNG state after its token (so the engine's stays the
 * loop's whenever the loop stops).
 */
export type AutoTokens = (seqs: readonly number[], tokens: Int32Array, step: { inferNs: number; inputNs: number; kvBytes: number; random?: Uint32Array; device?: DeviceUse }) => void;

export interface StepResult {
  /** rows × vocab float32 logits of each row's last position (absent for `free`, and with `tokens`). */
  logits?: Float32Array;
  /**
   * Each row's argmax, from a session that chose the tokens where the logits are (it may when the
   * request is `greedy`: every row's token is its argmax); then no logits come back.
   */
  tokens?: Int32Array;
  vocab: number;
  /** Bytes the session holds in KV caches after this step (padding included). */
  kvBytes: number;
  /** A prefill's rows: prompt tokens whose caches came from the prefix cache (absent when it is off). */
  cached?: number[];
  /** A prefill's rows that asked (`promptLogprobs`): each prompt token's after the first, in order. */
  prompt?: (PromptPosition[] | undefined)[];
  /** Bytes the prefix cache holds after this step (a prefill with prefix caching on). */
  prefixBytes?: number;
  /** Time spent in the model run itself. */
  inferNs: number;
  /** Time spent laying out inputs and caches (re-batching when sequences join or leave). */
  inputNs: number;
  /** A session whose model runs on a device (a GPU): what it holds there and what crossed so far. */
  device?: DeviceUse;
}


/**
 * Rows of a prefill that are done before the rest (a prefill run in parts): their indices in the
 * request, and their logits or tokens in that order.
 */
export type PrefillPart = (rows: readonly number[], result: StepResult) => void;

export interface DecoderSession {
  readonly device: string;
  readonly placement?: InstancePlacement;
  /** Prefills run apart from decoding (their own model session), so they need not wait for a decode step. */
  readonly concurrentPrefill?: boolean;
  /**
   * With `onPart`, a session may report a prefill's rows as their parts finish (each row once, and
   * then every row, before it resolves, with a result that carries no logits or tokens), so a short
   * prompt's first token need not wait for the longer prompts beside it; or it may ignore `onPart`
   * and answer every row at the end.
   */
  step(req: StepRequest, onPart?: PrefillPart, onTokens?: AutoTokens): Promise<StepResult>;
  /**
   * The session runs a decode with `auto` step after step where the model is, reporting each step's
   * tokens through `onTokens` and resolving when every row has left or it was told to stop; the
   * engine steers it meanwhile (rows to drop: a stop string, a cancellation; stop after the step in
   * flight: new rows want to join). Without it, the engine sends every decode step itself.
   */
  readonly autoDecode?: boolean;
  /** During an auto decode: drop these rows, and/or stop after the step in flight. */
  steer?(msg: { free?: number[]; stop?: boolean }): void;
  close(): Promise<void>;
}

/** How to feed one exported decoder. */
export interface DecoderLayout {
  inputIds: string;
  /**
   * A vision-language decoder's `inputs_embeds`: it takes embeddings, not ids. Steps still feed
   * `inputIds`, which the session's vision kit (core/vision/vision-kit.ts) embeds and renames.
   */
  inputsEmbeds?: string;
  attentionMask?: string;
  positionIds?: string;
  /** Optimum's merged decoders: a bool input choosing the with-past branch. */
  useCacheBranch?: string;
  /** `num_logits_to_keep` / `logits_to_keep`: ask for the last position's logits only. */
  logitsToKeep?: string;
  past: { key: string; value: string }[];
  present: { key: string; value: string }[];
  logits: string;
  kvHeads: number;
  headDim: number;
  kvType: 'float32' | 'float16';
  logitsType: 'float32' | 'float16';
  /** Positions the model can attend to (prompt plus generated tokens). */
  maxContext: number;
  /**
   * Where a row's padding goes in its cache and inputs. `left` (Optimum's exports): tokens right-aligned,
   * the mask saying which positions are real. `right` (graphs whose GroupQueryAttention reads each row's
   * length from the mask's sum, as onnxruntime-genai's do): tokens from position 0, padding after them,
   * a step's new key and value written after each row's own tokens.
   */
  padding: 'left' | 'right';
}

type Json = Record<string, any>;

const PAST = /^(?:past_key_values|past)\.(\d+)\.(key|value)$/;
const PRESENT = /^(?:present|present_key_values)\.(\d+)\.(key|value)$/;

/** The context length a decoder is served at: the config parameter's, else the HF config's. */
export function contextOf(hf: Json, maxContext?: number): number | undefined {
  return maxContext ?? hf.max_position_embeddings ?? hf.n_positions ?? hf.n_ctx ?? hf.seq_length;
}

/** Reads the export layout from the graph's inputs and outputs and the HF config (both may be partial). */
export function layoutOf(io: ModelIoInfo, hf: Json = {}, overrides: { maxContext?: number } = {}): DecoderLayout {
  const inputs = new Map(io.inputs.map((i) => [i.name, i]));
  const outputs = new Map(io.outputs.map((o) => [o.name, o]));
  const fail = (what: string) => new TsiError('INVALID_ARG', `the decoder model ${what} (expected the Optimum / onnx-community export layout: input_ids, attention_mask, position_ids, past_key_values.{i}.key/value → logits, present.{i}.key/value)`);
  const embeds = !inputs.has('input_ids') && inputs.has('inputs_embeds') ? 'inputs_embeds' : undefined;
  if (!inputs.has('input_ids') && !embeds) throw fail(`has no 'input_ids' input (inputs: ${[...inputs.keys()].join(', ')})`);
  const logits = outputs.has('logits') ? 'logits' : undefined;
  if (!logits) throw fail(`has no 'logits' output (outputs: ${[...outputs.keys()].join(', ')})`);
  const past: { key: string; value: string }[] = [];
  const present: { key: string; value: string }[] = [];
  for (const name of inputs.keys()) {
    const m = PAST.exec(name);
    if (m) (past[Number(m[1])] ??= { key: '', value: '' })[m[2] as 'key' | 'value'] = name;
  }
  for (const name of outputs.keys()) {
    const m = PRESENT.exec(name);
    if (m) (present[Number(m[1])] ??= { key: '', value: '' })[m[2] as 'key' | 'value'] = name;
  }
  if (past.length === 0) throw fail('has no past_key_values inputs (export it with past, "text-generation-with-past")');
  for (let i = 0; i < past.length; i++) {
    if (!past[i]?.key || !past[i]?.value) throw fail(`lacks past key or value of layer ${i}`);
    if (!present[i]?.key || !present[i]?.value) throw fail(`lacks present key or value of layer ${i}`);
  }
  const k0 = inputs.get(past[0]!.key)!;
  const cfgHeads = hf.num_key_value_heads ?? hf.num_attention_heads ?? hf.n_head;
  const cfgHidden = hf.hidden_size ?? hf.n_embd;
  const kvHeads = typeof k0.shape[1] === 'number' && k0.shape[1] > 0 ? k0.shape[1] : cfgHeads;
  const headDim = typeof k0.shape[3] === 'number' && k0.shape[3] > 0
    ? k0.shape[3]
    : hf.head_dim ?? (cfgHidden && (hf.num_attention_heads ?? hf.n_head) ? cfgHidden / (hf.num_attention_heads ?? hf.n_head) : undefined);
  if (!kvHeads || !headDim) throw fail('does not say its KV heads and head size (neither in the graph nor in config.json)');
  const kvType = k0.datatype === 'float16' ? 'float16' : k0.datatype === 'float32' ? 'float32' : undefined;
  if (!kvType) throw fail(`keeps its KV cache as ${k0.datatype} (float32 and float16 are supported)`);
  const lt = outputs.get(logits)!.datatype;
  if (lt !== 'float32' && lt !== 'float16') throw fail(`returns logits as ${lt}`);
  const maxContext = contextOf(hf, overrides.maxContext);
  if (!maxContext) throw new TsiError('INVALID_ARG', 'the decoder\'s context length is unknown: give config.json (max_position_embeddings) or the config parameter max_context');
  const has = (n: string) => (inputs.has(n) ? n : undefined);
  return {
    inputIds: 'input_ids',
    ...(embeds ? { inputsEmbeds: embeds } : {}),
    attentionMask: has('attention_mask'),
    positionIds: has('position_ids'),
    useCacheBranch: has('use_cache_branch'),
    logitsToKeep: has('num_logits_to_keep') ?? has('logits_to_keep'),
    past, present, logits, kvHeads, headDim, kvType, logitsType: lt, maxContext,
    padding: io.ops?.includes('com.microsoft:GroupQueryAttention') ? 'right' : 'left',
  };
}

/** KV-cache bytes one token of one sequence takes (keys and values of every layer). */
export function kvBytesPerToken(layout: DecoderLayout): number {
  return 2 * layout.past.length * layout.kvHeads * layout.headDim * (layout.kvType === 'float16' ? 2 : 4);
}
