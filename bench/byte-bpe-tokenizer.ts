/**
 * A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the format `tokenizers` writes
 * and transformers.js reads): GPT-2, Llama 3, Qwen2, SmolLM, Phi... Encoding runs the file's pipeline —
 * added (special) tokens split out first, the normalizer (NFC/NFKC/lowercase where given), the
 * pre-tokenizer (GPT-2's regex, or a `Split` regex such as Llama 3's, then the byte-to-unicode map),
 * BPE merges by rank (with `ignore_merges`), and the post-processor's special tokens (BOS for Llama).
 * SentencePiece-style (Metaspace, byte_fallback) files are refused.
 *
 * This was core/llm/tokenizer.ts until @huggingface/tokenizers replaced it; bench/llm.ts keeps its
 * encoder as the baseline the new tokenizer's throughput is printed against.
 */

import { TsiError } from '../core/errors.js';

/** GPT-2's byte → printable character map (the alphabet byte-level vocabularies are written in). */
function byteToUnicode(): string[] {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const out = new Array<string>(256);
  bs.forEach((b, i) => (out[b] = String.fromCharCode(cs[i]!)));
  return out;
}
const BYTE_TO_CHAR = byteToUnicode();

/** GPT-2's pre-tokenizer pattern (what `ByteLevel` with `use_regex: true` splits on). */
const GPT2_PATTERN = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;

/**
 * A tokenizers regex as a JavaScript one: `(?i:...)` groups (Llama 3, Qwen2), which V8 before ES2025
 * lacks, become letter classes; possessive and atomic forms do not occur in these files.
 */
function jsRegex(pattern: string): RegExp {
  const src = pattern.replace(/\(\?i:([^)]*)\)/g, (_m, body: string) =>
    '(?:' + body.replace(/[a-zA-Z]/g, (ch) => `[${ch.toLowerCase()}${ch.toUpperCase()}]`) + ')');
  return new RegExp(src, 'gu');
}

interface AddedToken {
  id: number;
  content: string;
  special: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
}

type Json = Record<string, any>;

/** One pre-tokenizer step: text pieces in, text pieces out. */
type PreStep = (pieces: string[]) => string[];

export interface EncodeOptions {
  /** Add the post-processor's special tokens (BOS...). Default true; chat templates carry their own. */
  addSpecialTokens?: boolean;
}

export class Tokenizer {
  readonly vocabSize: number;
  private readonly vocab = new Map<string, number>();
  private readonly idToToken: string[] = [];
  private readonly ranks = new Map<string, number>();
  private readonly added: AddedToken[];
  private readonly addedById = new Map<number, AddedToken>();
  private readonly addedSplit?: RegExp;
  private readonly normalize: (s: string) => string;
  private readonly preSteps: PreStep[];
  private readonly ignoreMerges: boolean;
  private readonly prefix: number[] = [];
  private readonly suffix: number[] = [];
  private readonly cache = new Map<string, number[]>();

  constructor(json: Json) {
    const model = json.model as Json | undefined;
    if (!model || (model.type !== undefined && model.type !== 'BPE')) {
      throw new TsiError('UNSUPPORTED', `tokenizer.json: model type '${model?.type}' is not supported (byte-level BPE only)`);
    }
    if (model.byte_fallback) {
      throw new TsiError('UNSUPPORTED', 'tokenizer.json: SentencePiece-style BPE (byte_fallback) is not supported; byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2, SmolLM) are');
    }
    for (const [tok, id] of Object.entries(model.vocab as Record<string, number>)) {
      this.vocab.set(tok, id);
      this.idToToken[id] = tok;
    }
    const merges = (model.merges ?? []) as (string | [string, string])[];
    merges.forEach((m, rank) => {
      const [a, b] = typeof m === 'string' ? splitMerge(m) : m;
      this.ranks.set(`${a} ${b}`, rank);
    });
    this.ignoreMerges = model.ignore_merges === true;
    this.added = ((json.added_tokens ?? []) as AddedToken[]).map((t) => ({ ...t }));
    for (const t of this.added) {
      this.addedById.set(t.id, t);
      this.idToToken[t.id] ??= t.content;
    }
    if (this.added.length > 0) {
      // Longest first, so `<|im_start|>` wins over any shorter token it contains.
      const alts = [...this.added].sort((a, b) => b.content.length - a.content.length).map((t) => escapeRegex(t.content));
      this.addedSplit = new RegExp(`(${alts.join('|')})`, 'u');
    }
    this.vocabSize = Math.max(this.idToToken.length, ...this.added.map((t) => t.id + 1));
    this.normalize = normalizer(json.normalizer);
    this.preSteps = preTokenizer(json.pre_tokenizer);
    this.postProcessor(json.post_processor);
    checkDecoder(json.decoder);
  }

  static fromJson(text: string): Tokenizer {
    let json: Json;
    try {
      json = JSON.parse(text) as Json;
    } catch (err) {
      throw new TsiError('INVALID_ARG', `tokenizer.json is not valid JSON: ${(err as Error).message}`);
    }
    return new Tokenizer(json);
  }

  /** The id of a token (added or from the vocabulary), or undefined. */
  tokenId(token: string): number | undefined {
    const a = this.added.find((t) => t.content === token);
    return a ? a.id : this.vocab.get(token);
  }

  /** The token string of an id, as the vocabulary writes it (byte-level alphabet). */
  token(id: number): string | undefined {
    return this.idToToken[id];
  }

  isSpecial(id: number): boolean {
    return this.addedById.get(id)?.special === true;
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addSpecialTokens !== false) ids.push(...this.prefix);
    for (const [piece, added] of this.splitAdded(text)) {
      if (added) {
        ids.push(added.id);
        continue;
      }
      if (piece.length === 0) continue;
      let pieces = [this.normalize(piece)];
      for (const step of this.preSteps) pieces = step(pieces);
      for (const word of pieces) if (word.length > 0) this.bpe(word, ids);
    }
    if (opts.addSpecialTokens !== false) ids.push(...this.suffix);
    return ids;
  }

  /** Splits text around added tokens (each returned with its token), honouring lstrip/rstrip. */
  private splitAdded(text: string): [string, AddedToken | undefined][] {
    if (!this.addedSplit) return [[text, undefined]];
    const parts = text.split(this.addedSplit);
    const out: [string, AddedToken | undefined][] = [];
    for (let i = 0; i < parts.length; i++) {
      let p = parts[i]!;
      if (i % 2 === 1) {
        out.push([p, this.added.find((t) => t.content === p)]);
        continue;
      }
      const prev = i > 0 ? this.added.find((t) => t.content === parts[i - 1]) : undefined;
      const next = i + 1 < parts.length ? this.added.find((t) => t.content === parts[i + 1]) : undefined;
      if (prev?.rstrip) p = p.trimStart();
      if (next?.lstrip) p = p.trimEnd();
      out.push([p, undefined]);
    }
    return out;
  }

  /** BPE of one pre-tokenized word (already in the byte alphabet), appending ids. */
  private bpe(word: string, out: number[]): void {
    const cached = this.cache.get(word);
    if (cached) {
      for (const id of cached) out.push(id);
      return;
    }
    let ids: number[];
    const whole = this.ignoreMerges ? this.vocab.get(word) : undefined;
    if (whole !== undefined) ids = [whole];
    else {
      let syms = [...word];
      for (;;) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i + 1 < syms.length; i++) {
          const r = this.ranks.get(`${syms[i]} ${syms[i + 1]}`);
          if (r !== undefined && r < bestRank) {
            bestRank = r;
            best = i;
          }
        }
        if (best < 0) break;
        const a = syms[best]!;
        const b = syms[best + 1]!;
        // Merge every occurrence of the pair in one pass, left to right, as the reference does.
        const next: string[] = [];
        for (let i = 0; i < syms.length; i++) {
          if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
            next.push(a + b);
            i++;
          } else next.push(syms[i]!);
        }
        syms = next;
      }
      ids = [];
      for (const s of syms) {
        const id = this.vocab.get(s);
        if (id !== undefined) ids.push(id);
        else for (const ch of s) {
          const cid = this.vocab.get(ch);
          if (cid !== undefined) ids.push(cid);
        }
      }
    }
    if (this.cache.size > 50_000) this.cache.clear();
    this.cache.set(word, ids);
    for (const id of ids) out.push(id);
  }

  private postProcessor(pp: Json | null | undefined): void {
    if (!pp) return;
    const steps: Json[] = pp.type === 'Sequence' ? pp.processors ?? [] : [pp];
    for (const step of steps) {
      if (step.type === 'TemplateProcessing') {
        const single = (step.single ?? []) as Json[];
        const seqAt = single.findIndex((x) => x.Sequence);
        single.forEach((x, i) => {
          if (!x.SpecialToken) return;
          const ids = step.special_tokens?.[x.SpecialToken.id]?.ids as number[] | undefined;
          const list = ids ?? [this.tokenId(x.SpecialToken.id)].filter((v): v is number => v !== undefined);
          (i < seqAt ? this.prefix : this.suffix).push(...list);
        });
      } else if (step.type === 'BertProcessing' || step.type === 'RobertaProcessing') {
        this.prefix.push(step.cls[1]);
        this.suffix.push(step.sep[1]);
      }
      // ByteLevel post-processing only trims offsets, which encode() does not report.
    }
  }
}

const UTF8 = new TextEncoder();

function splitMerge(m: string): [string, string] {
  // Merges are "a b"; a token may itself hold no space in byte-level vocabularies.
  const i = m.indexOf(' ', 1);
  return [m.slice(0, i), m.slice(i + 1)];
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function normalizer(n: Json | null | undefined): (s: string) => string {
  if (!n) return (s) => s;
  switch (n.type) {
    case 'NFC': return (s) => s.normalize('NFC');
    case 'NFKC': return (s) => s.normalize('NFKC');
    case 'NFD': return (s) => s.normalize('NFD');
    case 'NFKD': return (s) => s.normalize('NFKD');
    case 'Lowercase': return (s) => s.toLowerCase();
    case 'Sequence': {
      const fs = ((n.normalizers ?? []) as Json[]).map(normalizer);
      return (s) => fs.reduce((acc, f) => f(acc), s);
    }
    case 'Replace': {
      const pattern = n.pattern?.String !== undefined ? new RegExp(escapeRegex(n.pattern.String), 'gu') : jsRegex(n.pattern?.Regex ?? '');
      return (s) => s.replace(pattern, n.content ?? '');
    }
    default:
      throw new TsiError('UNSUPPORTED', `tokenizer.json: normalizer '${n.type}' is not supported`);
  }
}

function regexSplit(re: RegExp, behavior: string, invert: boolean): PreStep {
  if (invert) throw new TsiError('UNSUPPORTED', 'tokenizer.json: inverted Split pre-tokenizers are not supported');
  return (pieces) => {
    const out: string[] = [];
    for (const p of pieces) {
      let last = 0;
      for (const m of p.matchAll(re)) {
        const start = m.index!;
        if (m[0].length === 0) continue;
        if (behavior === 'Removed') {
          if (start > last) out.push(p.slice(last, start));
        } else {
          // Isolated (what byte-level files use): gaps and matches are pieces of their own.
          if (start > last) out.push(p.slice(last, start));
          out.push(m[0]);
        }
        last = start + m[0].length;
      }
      if (last < p.length) out.push(p.slice(last));
    }
    return out;
  };
}

function toByteAlphabet(pieces: string[]): string[] {
  return pieces.map((p) => {
    let s = '';
    for (const b of UTF8.encode(p)) s += BYTE_TO_CHAR[b];
    return s;
  });
}

function preTokenizer(pt: Json | null | undefined): PreStep[] {
  if (!pt) throw new TsiError('UNSUPPORTED', 'tokenizer.json: no pre_tokenizer (a byte-level BPE tokenizer needs ByteLevel)');
  const steps: Json[] = pt.type === 'Sequence' ? pt.pretokenizers ?? [] : [pt];
  const out: PreStep[] = [];
  let byteLevel = false;
  for (const s of steps) {
    switch (s.type) {
      case 'ByteLevel':
        if (s.add_prefix_space) out.push((ps) => ps.map((p, i) => (i === 0 && !p.startsWith(' ') ? ' ' + p : p)));
        if (s.use_regex !== false) out.push(regexSplit(new RegExp(GPT2_PATTERN, 'gu'), 'Isolated', false));
        out.push(toByteAlphabet);
        byteLevel = true;
        break;
      case 'Split': {
        const re = s.pattern?.Regex !== undefined ? jsRegex(s.pattern.Regex) : new RegExp(escapeRegex(s.pattern?.String ?? ''), 'gu');
        out.push(regexSplit(re, s.behavior ?? 'Isolated', s.invert === true));
        break;
      }
      case 'Digits':
        out.push(regexSplit(s.individual_digits ? /\p{N}/gu : /\p{N}+/gu, 'Isolated', false));
        break;
      default:
        throw new TsiError('UNSUPPORTED', `tokenizer.json: pre-tokenizer '${s.type}' is not supported (byte-level BPE only)`);
    }
  }
  if (!byteLevel) throw new TsiError('UNSUPPORTED', 'tokenizer.json: the pre-tokenizer has no ByteLevel step (byte-level BPE only)');
  return out;
}

function checkDecoder(d: Json | null | undefined): void {
  if (!d) return;
  const steps: Json[] = d.type === 'Sequence' ? d.decoders ?? [] : [d];
  for (const s of steps) {
    if (s.type !== 'ByteLevel') throw new TsiError('UNSUPPORTED', `tokenizer.json: decoder '${s.type}' is not supported (byte-level BPE only)`);
  }
}
