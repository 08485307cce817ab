/**
 * The model's tokenizer, read from its Hugging Face `tokenizer.json` and `tokenizer_config.json` by
 * `@huggingface/tokenizers` — the pure-JavaScript tokenizers transformers.js runs, so every model
 * type that library reads loads here: byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek, GPT-4o's
 * inverted `Split`), SentencePiece-style BPE with `byte_fallback` and Metaspace (Llama 2, Mistral,
 * TinyLlama, Phi-3, Gemma), Unigram and WordPiece. Ids and text are exactly the reference's; this file
 * adds what serving needs around it:
 *
 * - `tokenizer_config.json`'s `add_bos_token` / `add_eos_token` decide the special tokens a prompt gets
 *   (as transformers' Python tokenizers rebuild their post-processor from them), and its
 *   `clean_up_tokenization_spaces` applies to decoding (the library's default when absent: on).
 * - `TextStream` detokenizes one sequence incrementally: each token's text comes out once it can no
 *   longer change, so a character whose UTF-8 bytes span several tokens (byte-level pieces, or
 *   SentencePiece's `<0xE4>` byte tokens) is never split, and the streamed text equals the whole decode.
 *
 * The hand-written byte-level BPE this replaces encoded 3-4× faster on the byte-level files it could
 * read (bench/llm.ts prints both: 0.23× on Llama 3's, 0.30× on tiny_gpt's, a loaded 2-core machine),
 * but refused half the families people serve, and a second encoder beside the reference one would be
 * a second thing to keep exact; at ~50-70k tokens/s a 1000-token prompt costs ~15-20 ms of the main
 * thread. It lives on in bench/ as that baseline.
 *
 * Platform-neutral: the library is plain JavaScript with no dependencies.
 */

import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { TsiError } from '../errors.js';

type Json = Record<string, any>;

export interface EncodeOptions {
  /** Add the model's special tokens (BOS...). Default true; chat templates carry their own. */
  addSpecialTokens?: boolean;
}

/** A special token in tokenizer_config.json: a string or an AddedToken object. */
export function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content;
  return undefined;
}

const UTF8 = new TextEncoder();
/** SentencePiece's word-start mark, which stands for a space. */
const METASPACE = '\u2581';
const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;
/** The model types @huggingface/tokenizers reads (a file without a type is BPE or guessed from its fields). */
const MODEL_TYPES = ['BPE', 'WordPiece', 'Unigram'];

export class Tokenizer {
  readonly vocabSize: number;
  readonly bosId?: number;
  readonly eosId?: number;
  /** Whether decoding removes spaces before punctuation (tokenizer_config.json; the library's default is on). */
  readonly cleanUpSpaces: boolean;
  private readonly hf: HfTokenizer;
  private readonly special = new Set<number>();
  private readonly addBos?: boolean;
  private readonly addEos?: boolean;
  private readonly byteLevel: boolean;
  private charToByte?: Map<string, number>;

  constructor(json: Json, config: Json = {}) {
    if (!json || typeof json !== 'object' || !json.model) throw new TsiError('INVALID_ARG', 'tokenizer.json has no "model" section');
    const type = json.model.type as unknown;
    if (type !== undefined && !MODEL_TYPES.includes(type as string)) {
      throw new TsiError('UNSUPPORTED', `tokenizer.json: model type '${String(type)}' is not supported (${MODEL_TYPES.join(', ')} are)`);
    }
    try {
      // Files written by hand or old tools may leave out the empty stages the library expects.
      this.hf = new HfTokenizer({ normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, added_tokens: [], ...json }, config);
    } catch (err) {
      throw new TsiError('UNSUPPORTED', `tokenizer.json (model type '${json.model.type ?? 'BPE'}') cannot be read: ${(err as Error).message}`);
    }
    for (const [id, t] of this.hf.get_added_tokens_decoder()) if (t.special) this.special.add(id);
    for (const t of (config.additional_special_tokens ?? []) as unknown[]) {
      const id = this.tokenId(tokenText(t) ?? '');
      if (id !== undefined) this.special.add(id);
    }
    let max = 0;
    for (const id of this.hf.get_vocab(true).values()) if (id > max) max = id;
    this.vocabSize = max + 1;
    const bos = tokenText(config.bos_token);
    const eos = tokenText(config.eos_token);
    this.bosId = bos !== undefined ? this.tokenId(bos) : undefined;
    this.eosId = eos !== undefined ? this.tokenId(eos) : undefined;
    if (typeof config.add_bos_token === 'boolean') this.addBos = config.add_bos_token;
    if (typeof config.add_eos_token === 'boolean') this.addEos = config.add_eos_token;
    this.cleanUpSpaces = config.clean_up_tokenization_spaces ?? true;
    this.byteLevel = JSON.stringify(json.decoder ?? null).includes('"ByteLevel"');
  }

  static fromJson(text: string, configText?: string): Tokenizer {
    const parse = (name: string, s: string): Json => {
      try {
        return JSON.parse(s) as Json;
      } catch (err) {
        throw new TsiError('INVALID_ARG', `${name} is not valid JSON: ${(err as Error).message}`);
      }
    };
    return new Tokenizer(parse('tokenizer.json', text), configText === undefined ? {} : parse('tokenizer_config.json', configText));
  }

  /** The id of a token (added or from the vocabulary), or undefined. */
  tokenId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  /** The token string of an id, as the vocabulary writes it. */
  token(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  isSpecial(id: number): boolean {
    return this.special.has(id);
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const add = opts.addSpecialTokens !== false;
    const ids = this.hf.encode(text, { add_special_tokens: add }).ids;
    if (!add) return ids;
    // tokenizer_config.json overrides the post-processor, as transformers' tokenizers do.
    if (this.bosId !== undefined && this.addBos !== undefined) {
      const has = ids[0] === this.bosId;
      if (this.addBos && !has) ids.unshift(this.bosId);
      else if (!this.addBos && has) ids.shift();
    }
    if (this.eosId !== undefined && this.addEos !== undefined) {
      const has = ids.length > 0 && ids[ids.length - 1] === this.eosId;
      if (this.addEos && !has) ids.push(this.eosId);
      else if (!this.addEos && has) ids.pop();
    }
    return ids;
  }

  /**
   * A pair as a cross-encoder reads it (the post-processor's pair template: `[CLS] a [SEP] b [SEP]`,
   * `<s> a </s></s> b </s>`...) with its token type ids, cut to `maxLength` as transformers'
   * `truncation="only_second"` cuts it: tokens come off the end of `b`, the special tokens stay.
   * Refused when `a` with the special tokens alone is longer than `maxLength`.
   */
  encodePair(a: string, b: string, maxLength: number): { ids: number[]; typeIds: number[] } {
    // The library encodes an empty second text as no pair at all; transformers keeps the pair's
    // template around it. So an empty one is encoded as a placeholder whose tokens are then cut.
    const pair = b === '' ? 'a' : b;
    const full = this.hf.encode(a, { text_pair: pair, return_token_type_ids: true });
    const ids: number[] = full.ids;
    const typeIds: number[] = full.token_type_ids ?? new Array<number>(ids.length).fill(0);
    if (b !== '' && ids.length <= maxLength) return { ids, typeIds };
    const second: number[] = this.hf.encode(pair, { add_special_tokens: false }).ids;
    const over = b === '' ? second.length : ids.length - maxLength;
    if (ids.length - second.length > maxLength) {
      throw new TsiError('INVALID_ARG', `the first text is ${ids.length - second.length} tokens with the special tokens, more than the model's ${maxLength}; only the second text is truncated`);
    }
    // The second text is the template's last sequence, followed only by special tokens.
    const L = ids.length;
    const n = second.length;
    let tail = 0;
    while (tail <= L - n && !second.every((id, i) => ids[L - tail - n + i] === id)) tail++;
    const end = L - tail;
    const keep = end - Math.max(over, 0);
    return { ids: [...ids.slice(0, keep), ...ids.slice(end)], typeIds: [...typeIds.slice(0, keep), ...typeIds.slice(end)] };
  }

  decode(ids: readonly number[], opts: { skipSpecialTokens?: boolean; cleanUpSpaces?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.hf.decode(ids as number[], {
      skip_special_tokens: opts.skipSpecialTokens ?? true,
      clean_up_tokenization_spaces: opts.cleanUpSpaces ?? this.cleanUpSpaces,
    });
  }

  /**
   * The bytes one token stands for on its own (for logprobs' `bytes`): a byte-level token's bytes, a
   * SentencePiece byte token's one byte, otherwise the UTF-8 of its text with `▁` as a space.
   */
  tokenBytes(id: number, skipSpecial = true): Uint8Array {
    const tok = this.hf.id_to_token(id);
    if (tok === undefined || (skipSpecial && this.special.has(id))) return new Uint8Array(0);
    if (this.special.has(id)) return UTF8.encode(tok);
    const m = BYTE_TOKEN.exec(tok);
    if (m) return Uint8Array.of(parseInt(m[1]!, 16));
    if (!this.byteLevel) return UTF8.encode(tok.replaceAll(METASPACE, ' '));
    const map = (this.charToByte ??= byteLevelAlphabet());
    const out: number[] = [];
    for (const ch of tok) {
      const b = map.get(ch);
      if (b !== undefined) out.push(b);
      else for (const x of UTF8.encode(ch)) out.push(x);
    }
    return Uint8Array.from(out);
  }
}

/** GPT-2's printable character → byte map (the alphabet byte-level vocabularies are written in). */
function byteLevelAlphabet(): Map<string, number> {
  const map = new Map<string, number>();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map.set(String.fromCharCode(printable ? b : 256 + n++), b);
  }
  return map;
}

/** What `clean_up_tokenization_spaces` rewrites (transformers' list); all start with a space. */
const CLEANUPS: [string, string][] = [
  [' .', '.'], [' ?', '?'], [' !', '!'], [' ,', ','], [" ' ", "'"], [" n't", "n't"], [" 'm", "'m"], [" 's", "'s"], [" 've", "'ve"], [" 're", "'re"],
];

function cleanUp(s: string): string {
  for (const [from, to] of CLEANUPS) s = s.replaceAll(from, to);
  return s;
}

/** How many characters at the end of `s` could begin a clean-up pattern (and so must wait). */
function cleanUpHold(s: string): number {
  let best = 0;
  for (const [from] of CLEANUPS) {
    for (let k = Math.min(from.length - 1, s.length); k > best; k--) {
      if (s.endsWith(from.slice(0, k))) {
        best = k;
        break;
      }
    }
  }
  return best;
}

/**
 * Incremental detokenization of one sequence: `push(id)` returns the text that is now final. It
 * decodes a short window of recent tokens twice (without and with the new one) and emits the
 * difference, as the reference servers do, so decoders that look at neighbours (SentencePiece's
 * leading-space strip, byte-fallback runs, byte-level pieces) give the same text as a whole decode;
 * a window ending in an incomplete UTF-8 character (U+FFFD) waits for the next token. Clean-up of
 * tokenization spaces runs on the emitted text, holding back a tail that could begin a pattern.
 */
export class TextStream {
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  /** Emitted by the window decode but not yet cleaned up and sent. */
  private pending = '';

  constructor(private readonly tokenizer: Tokenizer, private readonly skipSpecial = true) {}

  push(id: number): string {
    this.ids.push(id);
    const opts = { skipSpecialTokens: this.skipSpecial, cleanUpSpaces: false };
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), opts);
    const text = this.tokenizer.decode(this.ids.slice(this.prefixOffset), opts);
    if (text.length <= prefix.length || text.endsWith('\uFFFD')) return '';
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    return this.emit(text.slice(prefix.length), false);
  }

  flush(): string {
    const opts = { skipSpecialTokens: this.skipSpecial, cleanUpSpaces: false };
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), opts);
    const text = this.tokenizer.decode(this.ids.slice(this.prefixOffset), opts);
    this.prefixOffset = this.readOffset = this.ids.length;
    return this.emit(text.slice(prefix.length), true);
  }

  private emit(delta: string, last: boolean): string {
    if (!this.tokenizer.cleanUpSpaces) return delta;
    const s = this.pending + delta;
    const keep = last ? 0 : cleanUpHold(s);
    this.pending = s.slice(s.length - keep);
    return cleanUp(s.slice(0, s.length - keep));
  }
}
