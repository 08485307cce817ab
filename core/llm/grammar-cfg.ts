/**
 * Grammars beyond JSON: a context-free grammar over Unicode characters, which a regular expression
 * (grammar-regex.ts), a GBNF grammar (grammar-gbnf.ts, as llama.cpp writes them) and a list of choices
 * all compile to, and the automaton grammar.ts steps through it character by character.
 *
 * A parse is a set of stacks (llama.cpp's approach): each stack is a chain of positions in rules'
 * alternatives, its top always at a character class (or empty: the text may end). A character moves
 * every stack whose top accepts it, and expands rule references until each top is a class again.
 * Positions and sets are interned, so equal parses are one object: stepping a set by a character is
 * computed once and kept on the set, and the set's id is what the mask cache keys on. A position at the
 * end of its alternative is never pushed (the caller's continuation is pushed instead), which keeps
 * right recursion (repetitions) from growing the stacks; a reference reached twice with the same
 * continuation in one step expands once. Left recursion would still expand forever, so it is refused
 * when the grammar compiles, as is a rule that can never end. Each position knows the fewest characters
 * that finish it, which is what keeps an answer closable within max_tokens (grammar.ts).
 */

import { TsiError } from '../errors.js';

/** A set of code points: sorted, disjoint, inclusive [lo, hi] pairs, flat. */
export type CharSet = number[];

export const MAX_CODE_POINT = 0x10ffff;

export function charRange(lo: number, hi = lo): CharSet {
  return [lo, hi];
}

/** The union of sets (sorted and merged). */
export function unionSets(...sets: CharSet[]): CharSet {
  const pairs: [number, number][] = [];
  for (const s of sets) for (let i = 0; i < s.length; i += 2) pairs.push([s[i]!, s[i + 1]!]);
  pairs.sort((a, b) => a[0] - b[0]);
  const out: CharSet = [];
  for (const [lo, hi] of pairs) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1]! + 1) out[n - 1] = Math.max(out[n - 1]!, hi);
    else out.push(lo, hi);
  }
  return out;
}

/** Every code point the set leaves out. */
export function complement(set: CharSet): CharSet {
  const s = unionSets(set);
  const out: CharSet = [];
  let from = 0;
  for (let i = 0; i < s.length; i += 2) {
    if (s[i]! > from) out.push(from, s[i]! - 1);
    from = s[i + 1]! + 1;
  }
  if (from <= MAX_CODE_POINT) out.push(from, MAX_CODE_POINT);
  return out;
}

function inSet(set: CharSet, cp: number): boolean {
  for (let i = 0; i < set.length; i += 2) {
    if (cp < set[i]!) return false;
    if (cp <= set[i + 1]!) return true;
  }
  return false;
}

/** What the parsers produce: an expression per rule; `at` is where a reference was written (for errors). */
export type Expr =
  | { k: 'chars'; set: CharSet }
  | { k: 'seq'; items: Expr[] }
  | { k: 'alt'; options: Expr[] }
  | { k: 'ref'; name: string; at: number }
  | { k: 'repeat'; item: Expr; min: number; max: number };

/** Items read one after another until `next` finds none. */
export function sequenceOf(next: () => Expr | undefined): Expr {
  const items: Expr[] = [];
  for (let x = next(); x; x = next()) items.push(x);
  return { k: 'seq', items };
}

/**
 * The repetition written at the start of `text` (`*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; GBNF allows
 * spaces inside the braces): its bounds and how many characters it takes, or undefined.
 */
export function repetitionAt(text: string, spaces: boolean): { min: number; max: number; length: number } | undefined {
  const c = text[0];
  if (c === '*') return { min: 0, max: Infinity, length: 1 };
  if (c === '+') return { min: 1, max: Infinity, length: 1 };
  if (c === '?') return { min: 0, max: 1, length: 1 };
  const m = (spaces ? /^\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}/ : /^\{(\d+)(,(\d*))?\}/).exec(text);
  if (!m) return undefined;
  const min = Number(m[1]);
  return { min, max: m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]), length: m[0].length };
}

export const alternativesOf = (options: Expr[]): Expr => (options.length === 1 ? options[0]! : { k: 'alt', options });

export const literal = (text: string): Expr => ({ k: 'seq', items: [...text].map((c) => ({ k: 'chars', set: charRange(c.codePointAt(0)!) })) });

type Elem = { k: 'chars'; set: CharSet } | { k: 'ref'; rule: number };

/** One alternative of a rule, and the fewest characters from each of its positions to its end. */
interface Alt {
  id: number;
  elems: Elem[];
  min: number[];
}

/** A position in an alternative, on top of the position to go on with when it ends (interned). */
interface Pos {
  id: number;
  alt: Alt;
  at: number;
  next: Pos | null;
  /** Fewest characters that finish this position and everything under it. */
  min: number;
}

/** A set of parses (interned): the stacks, whether the text may end here, and its moves, as found. */
export interface CfgState {
  readonly id: number;
  readonly stacks: readonly (Pos | null)[];
  readonly accepts: boolean;
  /** Fewest characters to an end (0 when it accepts). */
  readonly min: number;
  /** Only the empty stack: nothing more can be written. */
  readonly finished: boolean;
  readonly moves: Map<number, CfgState | null>;
}

/** A compile error naming the request's field (`param`, as OpenAI's error body carries it). */
export function grammarError(field: string, message: string): TsiError {
  return Object.assign(new TsiError('INVALID_ARG', `'${field}': ${message}`), { param: field });
}

/** Most elements a grammar may lower to (a bounded repetition is written out). */
const MAX_ELEMS = 200_000;
/** Interned positions kept before the tables start over (parses stay correct; sharing restarts). */
const MAX_INTERNED = 500_000;

export class Cfg {
  private readonly rules: Alt[][] = [];
  private readonly names: string[] = [];
  private positions = new Map<string, Pos>();
  private states = new Map<string, CfgState>();
  private nextId = 1;
  /** The state before any character. */
  readonly start: CfgState;

  /**
   * `rules` by name (`root` the start), `where(at)` says where a reference was written; every error
   * is an INVALID_ARG naming `field`.
   */
  constructor(rules: Map<string, Expr>, root: string, readonly field: string, where: (at: number) => string) {
    const ids = new Map<string, number>();
    for (const name of rules.keys()) {
      ids.set(name, this.rules.length);
      this.rules.push([]);
      this.names.push(name);
    }
    if (!ids.has(root)) throw grammarError(field, `there is no rule named '${root}' to start from`);
    let elems = 0;
    let altId = 1;
    const alt = (e: Elem[]): Alt => {
      elems += e.length;
      if (elems > MAX_ELEMS) throw grammarError(field, `the grammar is too large once its repetitions are written out (more than ${MAX_ELEMS} elements)`);
      return { id: altId++, elems: e, min: [] };
    };
    const anon = (owner: number, alts: Elem[][]): number => {
      this.rules.push(alts.map(alt));
      this.names.push(`${this.names[owner]} (a part of it)`);
      return this.rules.length - 1;
    };
    const seq = (x: Expr, owner: number, out: Elem[]): void => {
      switch (x.k) {
        case 'chars': out.push(x); return;
        case 'seq': for (const i of x.items) seq(i, owner, out); return;
        case 'alt':
          if (x.options.length === 1) seq(x.options[0]!, owner, out);
          else out.push({ k: 'ref', rule: anon(owner, x.options.flatMap((o) => lower(o, owner))) });
          return;
        case 'ref': {
          const r = ids.get(x.name);
          if (r === undefined) throw grammarError(field, `rule '${x.name}' (${where(x.at)}) is not defined`);
          out.push({ k: 'ref', rule: r });
          return;
        }
        case 'repeat': {
          if (x.max < x.min) throw grammarError(field, `a repetition {${x.min},${x.max}} has its maximum below its minimum`);
          const one = lower(x.item, owner);
          const unit: Elem[] = one.length === 1 ? one[0]! : [{ k: 'ref', rule: anon(owner, one) }];
          if (unit.length * Math.max(x.min, x.max === Infinity ? 1 : x.max) > MAX_ELEMS) {
            throw grammarError(field, `a repetition of ${x.max === Infinity ? x.min : x.max} is too large to compile`);
          }
          for (let i = 0; i < x.min; i++) out.push(...unit);
          if (x.max === Infinity) {
            // star ::= unit star | (nothing)
            const star = anon(owner, []);
            this.rules[star] = [alt([...unit, { k: 'ref', rule: star }]), alt([])];
            out.push({ k: 'ref', rule: star });
          } else if (x.max > x.min) {
            // Nested optionals: opt_k ::= unit opt_(k-1) | (nothing), so a count is one parse only.
            let opt = -1;
            for (let i = x.min; i < x.max; i++) opt = anon(owner, [[...unit, ...(opt >= 0 ? [{ k: 'ref' as const, rule: opt }] : [])], []]);
            out.push({ k: 'ref', rule: opt });
          }
        }
      }
    };
    const lower = (x: Expr, owner: number): Elem[][] => {
      if (x.k === 'alt') return x.options.map((o) => lower(o, owner)).flat();
      const out: Elem[] = [];
      seq(x, owner, out);
      return [out];
    };
    for (const [name, x] of rules) {
      const r = ids.get(name)!;
      this.rules[r] = lower(x, r).map(alt);
    }
    this.analyse();
    this.start = this.closure(this.rules[ids.get(root)!]!.map((a) => this.push(a, 0, null)));
  }

  /** Fewest characters per rule and per position; refuses rules that never end and left recursion. */
  private analyse(): void {
    const ruleMin = this.rules.map(() => Infinity);
    const elemMin = (e: Elem) => (e.k === 'chars' ? 1 : ruleMin[e.rule]!);
    for (let changed = true; changed;) {
      changed = false;
      this.rules.forEach((alts, r) => {
        let best = Infinity;
        for (const a of alts) best = Math.min(best, a.elems.reduce((n, e) => n + elemMin(e), 0));
        if (best < ruleMin[r]!) {
          ruleMin[r] = best;
          changed = true;
        }
      });
    }
    const never = ruleMin.findIndex((m) => m === Infinity);
    if (never >= 0) throw grammarError(this.field, `rule '${this.names[never]}' can never end (every alternative refers back to it)`);
    for (const alts of this.rules) for (const a of alts) {
      a.min = new Array<number>(a.elems.length + 1).fill(0);
      for (let i = a.elems.length - 1; i >= 0; i--) a.min[i] = a.min[i + 1]! + elemMin(a.elems[i]!);
    }
    // References a rule can reach before any character, and whether each is the last of its alternative.
    const edges = this.rules.map(() => [] as { to: number; tail: boolean }[]);
    this.rules.forEach((alts, r) => {
      for (const a of alts) {
        for (let i = 0; i < a.elems.length; i++) {
          const e = a.elems[i]!;
          if (e.k === 'chars') break;
          edges[r]!.push({ to: e.rule, tail: i === a.elems.length - 1 });
          if (ruleMin[e.rule]! > 0) break;
        }
      }
    });
    const reaches = (from: number, to: number): boolean => {
      const seen = new Set<number>([from]);
      const todo = [from];
      while (todo.length > 0) {
        const r = todo.pop()!;
        if (r === to) return true;
        for (const e of edges[r]!) if (!seen.has(e.to)) {
          seen.add(e.to);
          todo.push(e.to);
        }
      }
      return false;
    };
    // A cycle through a reference with something after it grows the stack without end; one made only
    // of last references is expanded once per step.
    this.rules.forEach((_, r) => {
      for (const e of edges[r]!) if (!e.tail && reaches(e.to, r)) {
        throw grammarError(this.field, `rule '${this.names[r]}' is left-recursive (it can reach itself before any character)`);
      }
    });
  }

  private push(alt: Alt, at: number, next: Pos | null): Pos | null {
    if (at >= alt.elems.length) return next;
    const key = `${alt.id}.${at}.${next?.id ?? 0}`;
    let p = this.positions.get(key);
    if (!p) {
      if (this.positions.size >= MAX_INTERNED) {
        this.positions = new Map();
        this.states = new Map();
      }
      p = { id: this.nextId++, alt, at, next, min: alt.min[at]! + (next?.min ?? 0) };
      this.positions.set(key, p);
    }
    return p;
  }

  /** The state of these stacks once every top is a character class (or the stack is empty). */
  private closure(from: (Pos | null)[]): CfgState {
    const out = new Map<number, Pos | null>();
    const seen = new Set<string>();
    const expand = (s: Pos | null): void => {
      if (s === null) {
        out.set(0, null);
        return;
      }
      const e = s.alt.elems[s.at]!;
      if (e.k === 'chars') {
        out.set(s.id, s);
        return;
      }
      const cont = this.push(s.alt, s.at + 1, s.next);
      const key = `${e.rule}:${cont?.id ?? 0}`;
      if (seen.has(key)) return;
      seen.add(key);
      for (const a of this.rules[e.rule]!) expand(this.push(a, 0, cont));
    };
    for (const s of from) expand(s);
    const ids = [...out.keys()].sort((a, b) => a - b);
    const key = ids.join(',');
    let st = this.states.get(key);
    if (!st) {
      const stacks = ids.map((id) => out.get(id)!);
      let min = Infinity;
      for (const s of stacks) min = Math.min(min, s ? s.min : 0);
      st = { id: this.nextId++, stacks, accepts: out.has(0), min, finished: stacks.length === 1 && stacks[0] === null, moves: new Map() };
      this.states.set(key, st);
    }
    return st;
  }

  /** The state after one more character (a code point), or null when no parse takes it. */
  step(st: CfgState, cp: number): CfgState | null {
    const hit = st.moves.get(cp);
    if (hit !== undefined) return hit;
    const moved: (Pos | null)[] = [];
    for (const s of st.stacks) {
      if (s === null) continue;
      const e = s.alt.elems[s.at] as Extract<Elem, { k: 'chars' }>;
      if (inSet(e.set, cp)) moved.push(this.push(s.alt, s.at + 1, s.next));
    }
    const next = moved.length > 0 ? this.closure(moved) : null;
    st.moves.set(cp, next);
    return next;
  }
}

/** A list of choices as a grammar: exactly one of the strings. */
export function choiceGrammar(field: string, choices: unknown): Cfg {
  if (!Array.isArray(choices) || choices.length === 0 || !choices.every((c) => typeof c === 'string')) {
    throw grammarError(field, `must be a non-empty list of strings, got ${JSON.stringify(choices)}`);
  }
  return new Cfg(new Map([['root', { k: 'alt', options: (choices as string[]).map(literal) }]]), 'root', field, () => '');
}
