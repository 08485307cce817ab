/**
 * Structured output: a JSON grammar (any JSON object, or one JSON schema), or a regular expression,
 * GBNF grammar or list of choices (grammar-cfg.ts, one frame here), matched character by character, and the per-step token mask it gives the sampler, so that whatever the weights the
 * answer parses and matches. The matcher is a pushdown automaton over immutable frames (stepping a
 * character shares the rest of the stack), and the mask walks a trie of the vocabulary's texts from
 * the current state, so a prefix that cannot follow prunes every token that starts with it.
 *
 * The answer must also *end*: a random-weight model (or a real one in a long string) would otherwise
 * write until max_tokens and leave the JSON open. Each state knows the fewest characters that close
 * it, and a token is allowed only when what it leaves can still be closed in the tokens that remain
 * (one character a token at worst: byte-level vocabularies hold every ASCII character). Output is
 * compact (no whitespace between tokens), properties in the schema's order, strings without `\u`
 * escapes: all valid JSON. Why not xgrammar (@mlc-ai/web-xgrammar): see docs/llm.md.
 */

import {
  FREE_KEY_MAX, INT_DIGITS_MAX, firstChars, hasRequired, keyCandidates, minLen, requiredLen, type GNode, type Prop,
} from './grammar-schema.js';
import type { CfgState } from './grammar-cfg.js';
import type { Tokenizer } from './tokenizer.js';

/** One frame of the automaton's stack; frames are never changed, only replaced. */
type Frame =
  | { t: 'V'; node: GNode; next: Stack }
  | { t: 'LIT'; opts: string[]; pos: number; keys?: number[]; alts?: Extract<GNode, { k: 'choice' }>; next: Stack }
  | { t: 'STR'; len: number; min: number; max: number; esc: boolean; next: Stack }
  | { t: 'NUM'; phase: 'sign' | 'zero' | 'int' | 'dot' | 'frac' | 'e' | 'esign' | 'exp'; digits: number; integer: boolean; next: Stack }
  | { t: 'OBJ'; props: Prop[]; i: number; state: 'open' | 'comma' | 'key' | 'done'; next: Stack }
  | { t: 'AOBJ'; state: 'open' | 'comma' | 'colon' | 'done'; next: Stack }
  | { t: 'ARR'; items: GNode; min: number; max: number; count: number; state: 'open' | 'comma' | 'done'; next: Stack }
  | { t: 'CFG'; node: Extract<GNode, { k: 'cfg' }>; st: CfgState; next: Stack }
  /** Structural tags' free text: `held`, its end that may still become a trigger; `count`, tags written. */
  | { t: 'TAGS'; node: Extract<GNode, { k: 'tags' }>; held: string; count: number; next: Stack };

/** null: nothing left to write. */
export type Stack = Frame | null;

/** What a character that fits nowhere gets. */
const REJECT = undefined;
type Step = Stack | typeof REJECT;

const DIGIT = (c: string) => c >= '0' && c <= '9';

function lit(opts: string[], pos: number, next: Stack, keys?: number[], alts?: Extract<GNode, { k: 'choice' }>): Step {
  if (opts.length === 0) return REJECT;
  // Done when one option is complete and none goes on (a key's closing ':' always decides).
  if (opts.every((o) => o.length === pos)) {
    if (alts) {
      const o = alts.options[keys![0]!]!;
      return { t: 'V', node: o.node, next: o.tail ? { t: 'LIT', opts: [o.tail], pos: 0, next } : next };
    }
    if (!keys) return next;
    const parent = next as Extract<Frame, { t: 'OBJ' }>;
    const j = keys[0]!;
    return { t: 'V', node: parent.props[j]!.node, next: { ...parent, i: j + 1, state: 'done' } };
  }
  return { t: 'LIT', opts, pos, keys, alts, next };
}

/** A grammar's frame after a character moved it to `st`: gone once nothing more can be written. */
function cfgFrame(node: Extract<GNode, { k: 'cfg' }>, st: CfgState, next: Stack): Step {
  return st.finished ? next : { t: 'CFG', node, st, next };
}

/** A grammar's state stepped by `c`; where no parse takes it but the text may end, `c` belongs to what follows. */
function cfgStep(node: Extract<GNode, { k: 'cfg' }>, st: CfgState, next: Stack, c: string): Step {
  const moved = node.cfg.step(st, c.codePointAt(0)!);
  if (moved) return cfgFrame(node, moved, next);
  return st.accepts ? step(next, c) : REJECT;
}

function startValue(n: GNode, next: Stack, c: string): Step {
  switch (n.k) {
    case 'cfg': return cfgStep(n, n.cfg.start, next, c);
    case 'tags': return step({ t: 'TAGS', node: n, held: '', count: 0, next }, c);
    case 'any':
      if (c === '{') return { t: 'AOBJ', state: 'open', next };
      if (c === '[') return { t: 'ARR', items: n, min: 0, max: Infinity, count: 0, state: 'open', next };
      if (c === '"') return { t: 'STR', len: 0, min: 0, max: Infinity, esc: false, next };
      if (c === '-' || DIGIT(c)) return startValue({ k: 'number', integer: false }, next, c);
      return lit(['true', 'false', 'null'].filter((o) => o[0] === c), 1, next);
    case 'anyobject': return c === '{' ? { t: 'AOBJ', state: 'open', next } : REJECT;
    case 'object': return c === '{' ? { t: 'OBJ', props: n.props, i: 0, state: 'open', next } : REJECT;
    case 'array': return c === '[' ? { t: 'ARR', items: n.items, min: n.min, max: n.max, count: 0, state: 'open', next } : REJECT;
    case 'string': return c === '"' ? { t: 'STR', len: 0, min: n.min, max: n.max, esc: false, next } : REJECT;
    case 'number':
      if (c === '-') return { t: 'NUM', phase: 'sign', digits: 0, integer: n.integer, next };
      if (c === '0') return { t: 'NUM', phase: 'zero', digits: 1, integer: n.integer, next };
      if (DIGIT(c)) return { t: 'NUM', phase: 'int', digits: 1, integer: n.integer, next };
      return REJECT;
    case 'literal': {
      return lit(n.options.filter((o) => o[0] === c), 1, next);
    }
    case 'union': {
      const o = n.options.find((x) => firstChars(x).includes(c));
      return o ? startValue(o, next, c) : REJECT;
    }
    case 'choice': {
      const keys = n.options.map((_, k) => k).filter((k) => n.options[k]!.lit[0] === c);
      return lit(keys.map((k) => n.options[k]!.lit), 1, next, keys, n);
    }
  }
}

const ESCAPES = '"\\/bfnrt';

/** The stack after one more character, or REJECT. */
export function step(s: Stack, c: string): Step {
  if (s === null) return REJECT;
  switch (s.t) {
    case 'V': return startValue(s.node, s.next, c);
    case 'CFG': return cfgStep(s.node, s.st, s.next, c);
    case 'TAGS': {
      const text = s.held + c;
      // Triggers never contain one another, so at most one ends here, and it ends within held + c.
      const open = s.node.open.find((o) => text.endsWith(o.trigger));
      if (open) {
        const after: Stack = s.node.stopAfterFirst ? s.next : { ...s, held: '', count: s.count + 1 };
        const keys = open.tags.options.map((_, k) => k);
        return lit(open.tags.options.map((o) => o.lit), 0, after, keys, open.tags);
      }
      // Free text: any character; what is kept is the longest end that some trigger starts with.
      let held = text;
      while (held !== '' && !s.node.open.some((o) => o.trigger.startsWith(held))) held = held.slice(1);
      return { ...s, held };
    }
    case 'LIT': {
      const opts = s.opts.filter((o) => o.length > s.pos && o[s.pos] === c);
      if (opts.length === 0) return s.opts.some((o) => o.length === s.pos) ? step(s.next, c) : REJECT;
      const keys = s.keys ? opts.map((o) => s.keys![s.opts.indexOf(o)]!) : undefined;
      return lit(opts, s.pos + 1, s.next, keys, s.alts);
    }
    case 'STR':
      if (s.esc) return ESCAPES.includes(c) ? { ...s, esc: false, len: s.len + 1 } : REJECT;
      if (c === '"') return s.len >= s.min ? s.next : REJECT;
      if (s.len >= s.max || c < ' ') return REJECT;
      if (c === '\\') return { ...s, esc: true };
      return { ...s, len: s.len + 1 };
    case 'NUM': {
      const go = (phase: typeof s.phase, digits = s.digits): Frame => ({ ...s, phase, digits });
      switch (s.phase) {
        case 'sign': if (c === '0') return go('zero', 1); if (DIGIT(c)) return go('int', 1); return REJECT;
        case 'zero': case 'int':
          if (s.phase === 'int' && DIGIT(c) && s.digits < INT_DIGITS_MAX) return go('int', s.digits + 1);
          if (!s.integer && c === '.') return go('dot');
          if (!s.integer && (c === 'e' || c === 'E')) return go('e');
          break;
        case 'dot': return DIGIT(c) ? go('frac', 1) : REJECT;
        case 'frac':
          if (DIGIT(c) && s.digits < INT_DIGITS_MAX) return go('frac', s.digits + 1);
          if (c === 'e' || c === 'E') return go('e');
          break;
        case 'e': if (c === '+' || c === '-') return go('esign'); return DIGIT(c) ? go('exp', 1) : REJECT;
        case 'esign': return DIGIT(c) ? go('exp', 1) : REJECT;
        case 'exp': if (DIGIT(c) && s.digits < 2) return go('exp', s.digits + 1); break;
      }
      // A character a complete number cannot take belongs to what holds the number.
      return step(s.next, c);
    }
    case 'OBJ':
      if (s.state === 'done') {
        if (c === ',' && s.i < s.props.length) return { ...s, state: 'comma' };
        if (c === '}' && !hasRequired(s.props, s.i)) return s.next;
        return REJECT;
      }
      if (c === '}' && s.state === 'open' && !hasRequired(s.props, s.i)) return s.next;
      if (c !== '"' || s.state === 'key') return REJECT;
      {
        const keys = keyCandidates(s.props, s.i);
        return lit(keys.map((j) => s.props[j]!.lit), 1, { ...s, state: 'key' }, keys);
      }
    case 'AOBJ':
      switch (s.state) {
        case 'open': case 'comma':
          if (c === '}' && s.state === 'open') return s.next;
          return c === '"' ? { t: 'STR', len: 0, min: 0, max: FREE_KEY_MAX, esc: false, next: { ...s, state: 'colon' } } : REJECT;
        case 'colon': return c === ':' ? { t: 'V', node: { k: 'any' }, next: { ...s, state: 'done' } } : REJECT;
        case 'done': if (c === ',') return { ...s, state: 'comma' }; return c === '}' ? s.next : REJECT;
      }
      return REJECT;
    case 'ARR':
      if (s.state === 'done') {
        if (c === ',' && s.count < s.max) return { ...s, state: 'comma' };
        if (c === ']' && s.count >= s.min) return s.next;
        return REJECT;
      }
      if (s.state === 'open' && c === ']' && s.min === 0) return s.next;
      if (s.count >= s.max) return REJECT;
      return startValue(s.items, { ...s, state: 'done', count: s.count + 1 }, c);
  }
}

/** Whether the text may end here (an empty stack, or a complete number or literal on top of one). */
export function complete(s: Stack): boolean {
  if (s === null) return true;
  if (s.t === 'NUM') return (s.phase === 'zero' || s.phase === 'int' || s.phase === 'frac' || s.phase === 'exp') && complete(s.next);
  if (s.t === 'LIT') return s.opts.some((o) => o.length === s.pos) && complete(s.next);
  if (s.t === 'CFG') return s.st.accepts && complete(s.next);
  if (s.t === 'TAGS') return (s.count > 0 || !s.node.atLeastOne) && complete(s.next);
  if (s.t === 'V' && s.node.k === 'cfg') return s.node.cfg.start.accepts && complete(s.next);
  // Structural tags' free text may be empty (unless at_least_one).
  if (s.t === 'V' && s.node.k === 'tags') return !s.node.atLeastOne && complete(s.next);
  return false;
}

/** The fewest characters that close every frame. */
export function minRemaining(s: Stack): number {
  let n = 0;
  for (let f = s; f !== null; f = f.next) n += frameMin(f);
  return n;
}

function frameMin(f: Frame): number {
  switch (f.t) {
    case 'CFG': return f.st.min;
    // Before its first tag, at_least_one's text needs one: the rest of a trigger begun, or a whole one.
    case 'TAGS': return f.count === 0 && f.node.atLeastOne ? Math.min(...f.node.open.map((o) => o.trigger.length - (o.trigger.startsWith(f.held) ? f.held.length : 0) + minLen(o.tags))) : 0;
    case 'V': return minLen(f.node);
    case 'LIT': {
      if (f.alts) return Math.min(...f.opts.map((o, k) => o.length - f.pos + minLen(f.alts!.options[f.keys![k]!]!.node) + f.alts!.options[f.keys![k]!]!.tail.length));
      if (!f.keys) return Math.min(...f.opts.map((o) => o.length - f.pos));
      // A key: its rest, its value and what must follow it in the object (the OBJ frame counts 0).
      const props = (f.next as Extract<Frame, { t: 'OBJ' }>).props;
      return Math.min(...f.opts.map((o, k) => {
        const j = f.keys![k]!;
        return o.length - f.pos + minLen(props[j]!.node) + (hasRequired(props, j + 1) ? 1 + requiredLen(props, j + 1) : 1);
      }));
    }
    case 'STR': return (f.esc ? 1 : 0) + Math.max(0, f.min - f.len) + 1;
    case 'NUM': return f.phase === 'sign' || f.phase === 'dot' || f.phase === 'e' || f.phase === 'esign' ? 1 : 0;
    case 'OBJ': {
      const req = hasRequired(f.props, f.i);
      switch (f.state) {
        case 'done': return req ? 1 + requiredLen(f.props, f.i) : 1;
        case 'open': return req ? requiredLen(f.props, f.i) : 1;
        // After a comma a property must follow.
        case 'comma': return req ? requiredLen(f.props, f.i) : Math.min(...f.props.slice(f.i).map((p) => p.lit.length + minLen(p.node))) + 1;
        // A key is being written: its LIT frame counts the rest.
        case 'key': return 0;
      }
      return 1;
    }
    case 'AOBJ': return f.state === 'open' || f.state === 'done' ? 1 : f.state === 'comma' ? 5 : 3;
    case 'ARR': {
      const m = minLen(f.items);
      if (f.state === 'open') return f.min === 0 ? 1 : f.min * m + f.min;
      if (f.state === 'comma') {
        const k = Math.max(f.min - f.count, 1);
        return k * m + k;
      }
      return Math.max(f.min - f.count, 0) * (m + 1) + 1;
    }
  }
}

/** The vocabulary's texts as a trie (tokens that are special or not whole UTF-8 text are left out). */
interface TrieNode {
  ids: number[];
  children: Map<string, TrieNode>;
}

const tries = new WeakMap<Tokenizer, { root: TrieNode; texts: (string | undefined)[] }>();

export function vocabTrie(tok: Tokenizer): { root: TrieNode; texts: (string | undefined)[] } {
  const hit = tries.get(tok);
  if (hit) return hit;
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  const root: TrieNode = { ids: [], children: new Map() };
  const texts: (string | undefined)[] = [];
  for (let id = 0; id < tok.vocabSize; id++) {
    if (tok.isSpecial(id)) continue;
    let text: string;
    try {
      text = utf8.decode(tok.tokenBytes(id, false));
    } catch {
      continue;
    }
    if (text.length === 0) continue;
    texts[id] = text;
    let node = root;
    for (const c of text) {
      let next = node.children.get(c);
      if (!next) node.children.set(c, (next = { ids: [], children: new Map() }));
      node = next;
    }
    node.ids.push(id);
  }
  const out = { root, texts };
  tries.set(tok, out);
  return out;
}

/** One sequence's place in its grammar. */
export class GrammarMatcher {
  private stack: Stack;
  private readonly trie: { root: TrieNode; texts: (string | undefined)[] };

  constructor(private readonly root: GNode, tokenizer: Tokenizer, prefix = '', suffix = '') {
    this.trie = vocabTrie(tokenizer);
    let s: Stack = suffix ? { t: 'LIT', opts: [suffix], pos: 0, next: null } : null;
    s = { t: 'V', node: root, next: s };
    if (prefix) s = { t: 'LIT', opts: [prefix], pos: 0, next: s };
    this.stack = s;
  }

  get done(): boolean {
    return this.stack === null;
  }

  /** Advances over a chosen token's text; false when it does not fit (never, for a token the mask allowed). */
  accept(token: number): boolean {
    const text = this.trie.texts[token];
    if (text === undefined) return false;
    let s: Step = this.stack;
    for (const c of text) {
      s = step(s ?? null, c);
      if (s === REJECT) return false;
    }
    this.stack = s ?? null;
    return true;
  }

  /** Whether the text so far is a whole answer. */
  get complete(): boolean {
    return complete(this.stack);
  }

  /**
   * Sets every logit the grammar forbids to -Infinity: tokens whose text does not fit, or would leave
   * more to close than `left` further tokens can write (`left`: tokens after this one).
   */
  mask(logits: Float32Array, left: number): void {
    const need = this.needs();
    let any = false;
    for (let i = 0; i < need.length; i++) if (need[i]! >= 0 && need[i]! <= left) any = true;
    // Past saving (max_tokens below what any answer takes): the answer is cut, but stays on the grammar.
    const limit = any ? left : Infinity;
    for (let i = 0; i < logits.length; i++) if (!(i < need.length && need[i]! >= 0 && need[i]! <= limit)) logits[i] = -Infinity;
  }

  /**
   * Per token: -1 when its text does not fit here, else the characters that would be left to close
   * after it (0: complete). Walked once per state (states repeat: the same place in the same schema)
   * and kept per grammar, so most steps only read it.
   */
  private needs(): Int32Array {
    const key = stackKey(this.stack);
    let cache = needCache.get(this.root);
    if (!cache) needCache.set(this.root, (cache = new Map()));
    const hit = cache.get(key);
    if (hit) return hit;
    const need = new Int32Array(this.trie.texts.length).fill(-1);
    const walk = (node: TrieNode, s: Stack) => {
      for (const [c, child] of node.children) {
        const n = step(s, c);
        if (n === REJECT) continue;
        if (child.ids.length > 0) {
          const rest = complete(n) ? 0 : minRemaining(n);
          for (const id of child.ids) need[id] = rest;
        }
        walk(child, n);
      }
    };
    walk(this.trie.root, this.stack);
    if (cache.size * need.length >= NEED_CACHE_TOKENS) cache.clear();
    cache.set(key, need);
    return need;
  }
}

/** Tokens' needs kept per grammar (across the sequences and requests that share a compiled grammar). */
const needCache = new WeakMap<GNode, Map<string, Int32Array>>();
const NEED_CACHE_TOKENS = 8 << 20;

const ids = new WeakMap<object, number>();
let nextId = 1;
const idOf = (o: object) => {
  let id = ids.get(o);
  if (id === undefined) ids.set(o, (id = nextId++));
  return id;
};

/** What decides a stack's future: equal keys, equal masks (lengths only as far as the limits see them). */
function stackKey(s: Stack): string {
  let key = '';
  for (let f = s; f !== null; f = f.next) {
    switch (f.t) {
      case 'V': key += `V${idOf(f.node)}`; break;
      case 'LIT': key += `L${f.opts.join('\u0001')}@${f.pos}${f.keys ? `k${f.keys.join(',')}` : ''}${f.alts ? `a${idOf(f.alts)}` : ''}`; break;
      case 'STR': key += `S${Math.max(0, f.min - f.len)}:${f.max === Infinity ? 'i' : f.max - f.len}:${f.esc ? 1 : 0}`; break;
      case 'NUM': key += `N${f.phase}${f.digits}${f.integer ? 'i' : ''}`; break;
      case 'OBJ': key += `O${idOf(f.props)}:${f.i}:${f.state}`; break;
      case 'AOBJ': key += `A${f.state}`; break;
      case 'ARR': key += `R${idOf(f.items)}:${Math.max(0, f.min - f.count)}:${f.max === Infinity ? 'i' : f.max - f.count}:${f.state}`; break;
      case 'CFG': key += `G${idOf(f.st)}`; break;
      case 'TAGS': key += `T${idOf(f.node)}:${JSON.stringify(f.held)}:${f.count > 0 ? 1 : 0}`; break;
    }
    key += '|';
  }
  return key;
}
