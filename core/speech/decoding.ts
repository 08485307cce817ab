/**
 * Whisper's decoding rules, as transformers.js's `WhisperForConditionalGeneration.generate` applies
 * them (the oracle whisper.ts is tested against): what generation_config.json says (`generationOf`),
 * the forced tokens of a request (`initTokens`), the logit rules of one step (`processLogits`:
 * suppressed tokens, begin-suppressed tokens, the timestamp rules) and the choice of a token (`pick`:
 * greedy at temperature 0, else sampled). Pure functions over one row's logits.
 */

import { TsiError } from '../errors.js';
import type { Tokenizer } from '../llm/tokenizer.js';

type Json = Record<string, any>;

/** What a model's generation_config.json and config.json say about decoding. */
export interface WhisperGeneration {
  sot: number;
  eot: number;
  noTimestamps: number;
  timestampBegin: number;
  startOfPrev?: number;
  langToId: Record<string, number>;
  taskToId: Record<string, number>;
  multilingual: boolean;
  maxLength: number;
  suppress: number[];
  beginSuppress: number[];
}

export function generationOf(gen: Json, hf: Json, tok: Tokenizer, model: string): WhisperGeneration {
  const id = (name: string) => tok.tokenId(name);
  const sot = gen.decoder_start_token_id ?? hf.decoder_start_token_id ?? id('<|startoftranscript|>');
  const eosRaw = gen.eos_token_id ?? hf.eos_token_id ?? id('<|endoftext|>');
  const eot = Array.isArray(eosRaw) ? eosRaw[0] : eosRaw;
  const noTimestamps = gen.no_timestamps_token_id ?? id('<|notimestamps|>');
  if (typeof sot !== 'number' || typeof eot !== 'number' || typeof noTimestamps !== 'number') {
    throw new TsiError('INVALID_ARG', `model '${model}': generation_config.json must give decoder_start_token_id, eos_token_id and no_timestamps_token_id (or the tokenizer <|startoftranscript|>, <|endoftext|>, <|notimestamps|>)`);
  }
  return {
    sot, eot, noTimestamps, timestampBegin: noTimestamps + 1,
    startOfPrev: gen.prev_sot_token_id ?? id('<|startofprev|>'),
    langToId: gen.lang_to_id ?? {}, taskToId: gen.task_to_id ?? {},
    multilingual: gen.is_multilingual ?? Object.keys(gen.lang_to_id ?? {}).length > 0,
    maxLength: gen.max_length ?? hf.max_target_positions ?? 448,
    suppress: gen.suppress_tokens ?? [],
    beginSuppress: gen.begin_suppress_tokens ?? [],
  };
}

/** Whisper's language names, for `language` given as a name (`english`) rather than a code. */
const NAMES: Record<string, string> = {
  english: 'en', chinese: 'zh', german: 'de', spanish: 'es', russian: 'ru', korean: 'ko', french: 'fr', japanese: 'ja',
  portuguese: 'pt', turkish: 'tr', polish: 'pl', catalan: 'ca', dutch: 'nl', arabic: 'ar', swedish: 'sv', italian: 'it',
  indonesian: 'id', hindi: 'hi', finnish: 'fi', vietnamese: 'vi', hebrew: 'he', ukrainian: 'uk', greek: 'el', czech: 'cs',
  romanian: 'ro', danish: 'da', hungarian: 'hu', norwegian: 'no', thai: 'th',
};

/** The forced tokens of `job`: start of transcript, language and task (multilingual), no-timestamps. */
export function initTokens(gen: WhisperGeneration, job: { language?: string; task: 'transcribe' | 'translate'; timestamps: boolean }, model: string): number[] {
  const out = [gen.sot];
  if (gen.multilingual) {
    const raw = (job.language ?? 'en').trim().toLowerCase();
    const code = /^<\|.+\|>$/.test(raw) ? raw.slice(2, -2) : NAMES[raw] ?? raw;
    const lang = gen.langToId[`<|${code}|>`];
    if (lang === undefined) {
      const known = Object.keys(gen.langToId).map((k) => k.slice(2, -2));
      throw new TsiError('INVALID_ARG', `model '${model}': 'language' ${JSON.stringify(job.language)} is not one of its languages (${known.slice(0, 12).join(', ')}${known.length > 12 ? `, … ${known.length} in all` : ''})`);
    }
    out.push(lang);
    const task = gen.taskToId[job.task];
    if (task === undefined) throw new TsiError('INVALID_ARG', `model '${model}': task '${job.task}' is not in its generation_config.json task_to_id`);
    out.push(task);
  } else if (job.task === 'translate') {
    throw new TsiError('INVALID_ARG', `model '${model}' is English-only: it cannot translate`);
  }
  if (!job.timestamps) out.push(gen.noTimestamps);
  return out;
}

/**
 * The logit rules of one decoding step, applied in transformers.js's order: suppressed tokens,
 * begin-suppressed tokens at the first step, then (with timestamps) Whisper's timestamp rules.
 * `generated` holds this window's tokens after the forced ones.
 */
export function processLogits(logits: Float32Array, generated: readonly number[], gen: WhisperGeneration, timestamps: boolean): void {
  for (const t of gen.suppress) if (t < logits.length) logits[t] = -Infinity;
  if (generated.length === 0) for (const t of gen.beginSuppress) if (t < logits.length) logits[t] = -Infinity;
  if (!timestamps) return;
  const tb = gen.timestampBegin;
  logits[gen.noTimestamps] = -Infinity;
  if (generated.length === 0) {
    logits.fill(-Infinity, 0, tb);
    return;
  }
  const last = generated[generated.length - 1]! >= tb;
  const penultimate = generated.length < 2 || generated[generated.length - 2]! >= tb;
  if (last) {
    if (penultimate) logits.fill(-Infinity, tb);
    else logits.fill(-Infinity, 0, gen.eot);
  }
  // A timestamp when the timestamps' total probability beats the likeliest text token.
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  const lse = max + Math.log(sum);
  let ts = 0;
  for (let i = tb; i < logits.length; i++) ts += Math.exp(logits[i]! - lse);
  let text = -Infinity;
  for (let i = 0; i < tb; i++) if (logits[i]! - lse > text) text = logits[i]! - lse;
  if (Math.log(ts) > text) logits.fill(-Infinity, 0, tb);
}

export function pick(logits: Float32Array, temperature: number, random: () => number): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  if (temperature <= 0) return best;
  let sum = 0;
  const p = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) sum += (p[i] = Math.exp((logits[i]! - logits[best]!) / temperature));
  let r = random() * sum;
  for (let i = 0; i < p.length; i++) if ((r -= p[i]!) <= 0) return i;
  return best;
}

