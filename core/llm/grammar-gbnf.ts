/**
 * A GBNF grammar (llama.cpp's notation, which vLLM's `structured_outputs.grammar` and llama.cpp's
 * `grammar` field take) as a grammar (grammar-cfg.ts): rules `name ::= alternatives`, starting at
 * `root`; literals `"..."` with `\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH` escapes; classes `[...]` /
 * `[^...]` with ranges; `.` (any character); groups `(...)`; `|`; the repetitions `* + ? {m} {m,} {m,n}`;
 * `#` comments. A rule ends where the next `name ::=` begins. Token references (`<[1234]>`, `<think>`)
 * are refused, as is a rule that is used but not defined, defined twice, left-recursive or never ends,
 * each naming its line and column.
 */

import { Cfg, alternativesOf, charRange, complement, grammarError, repetitionAt, sequenceOf, unionSets, type CharSet, type Expr } from './grammar-cfg.js';

const NAME = /[A-Za-z0-9_-]/;
const ESCAPES: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, '\\': 0x5c, '"': 0x22, '[': 0x5b, ']': 0x5d, '-': 0x2d, '^': 0x5e };

/** Compiles `source`; errors name `field` and the line and column. */
export function gbnfGrammar(field: string, source: unknown): Cfg {
  if (typeof source !== 'string') throw grammarError(field, `must be a GBNF grammar in a string, got ${JSON.stringify(source)}`);
  const src = source;
  let i = 0;
  const where = (at: number): string => {
    const before = src.slice(0, at);
    const line = before.split('\n').length;
    return `line ${line}, column ${at - before.lastIndexOf('\n')}`;
  };
  const bad = (what: string, at = i): never => {
    throw grammarError(field, `${what} at ${where(at)} of the grammar`);
  };

  /** Skips spaces, newlines and comments. */
  const space = () => {
    for (;;) {
      while (i < src.length && /\s/.test(src[i]!)) i++;
      if (src[i] !== '#') return;
      while (i < src.length && src[i] !== '\n') i++;
    }
  };
  const name = (): string => {
    const at = i;
    while (i < src.length && NAME.test(src[i]!)) i++;
    return src.slice(at, i);
  };
  /** Whether a rule definition (`name ::=`) starts here. */
  const ruleStart = (): boolean => {
    const m = /^[A-Za-z0-9_-]+\s*::=/.exec(src.slice(i, i + 200));
    return m !== null;
  };

  const codePoint = (): number => {
    const c = src.codePointAt(i)!;
    i += c > 0xffff ? 2 : 1;
    if (c !== 0x5c) return c;
    const at = i - 1;
    const e = src[i++];
    if (e === undefined) return bad('a trailing backslash', at);
    const hex = (n: number) => {
      const digits = src.slice(i, i + n);
      if (digits.length !== n || !/^[0-9a-fA-F]+$/.test(digits)) bad(`the escape \\${e} needs ${n} hex digits`, at);
      i += n;
      return parseInt(digits, 16);
    };
    if (e === 'x') return hex(2);
    if (e === 'u') return hex(4);
    if (e === 'U') return hex(8);
    if (ESCAPES[e] !== undefined) return ESCAPES[e]!;
    return bad(`the escape \\${e}`, at);
  };

  const charClass = (): CharSet => {
    const open = i - 1;
    const negate = src[i] === '^';
    if (negate) i++;
    const parts: CharSet[] = [];
    while (src[i] !== ']') {
      if (i >= src.length) return bad(`an unclosed '['`, open);
      const lo = codePoint();
      if (src[i] === '-' && src[i + 1] !== ']' && i + 1 < src.length) {
        i++;
        const hi = codePoint();
        if (hi < lo) bad('a range whose end comes before its start');
        parts.push(charRange(lo, hi));
      } else parts.push(charRange(lo));
    }
    i++;
    const set = unionSets(...parts);
    return negate ? complement(set) : set;
  };

  const atom = (): Expr | undefined => {
    space();
    const c = src[i];
    if (c === undefined || c === '|' || c === ')' || ruleStart()) return undefined;
    const at = i;
    if (c === '"') {
      i++;
      const items: Expr[] = [];
      while (src[i] !== '"') {
        if (i >= src.length) return bad('an unclosed string', at);
        items.push({ k: 'chars', set: charRange(codePoint()) });
      }
      i++;
      return { k: 'seq', items };
    }
    if (c === '[') {
      i++;
      return { k: 'chars', set: charClass() };
    }
    if (c === '.') {
      i++;
      return { k: 'chars', set: complement([]) };
    }
    if (c === '(') {
      i++;
      const inner = alternates();
      space();
      if (src[i] !== ')') return bad(`an unclosed '('`, at);
      i++;
      return inner;
    }
    if (c === '<') return bad('a token reference (<...>) is not supported', at);
    if (NAME.test(c)) return { k: 'ref', name: name(), at };
    return bad(`an unexpected '${c}'`, at);
  };

  const repeated = (): Expr | undefined => {
    let x = atom();
    if (!x) return undefined;
    for (;;) {
      const at = i;
      if (!'*+?{'.includes(src[i] ?? '.')) return x;
      const r = repetitionAt(src.slice(i, i + 40), true);
      if (!r) return bad(`a repetition '{' that is not {m}, {m,} or {m,n}`, at);
      if (r.max < r.min) bad(`the repetition ${src.slice(at, at + r.length)} has its maximum below its minimum`, at);
      x = { k: 'repeat', item: x, min: r.min, max: r.max };
      i += r.length;
    }
  };

  const sequence = () => sequenceOf(repeated);

  function alternates(): Expr {
    const options = [sequence()];
    space();
    while (src[i] === '|') {
      i++;
      options.push(sequence());
      space();
    }
    return alternativesOf(options);
  }

  const rules = new Map<string, Expr>();
  space();
  while (i < src.length) {
    const at = i;
    const n = name();
    if (!n) bad(`a rule name was expected (found '${src[i]}')`);
    space();
    if (!src.startsWith('::=', i)) bad(`'::=' was expected after the rule name '${n}'`);
    i += 3;
    if (rules.has(n)) bad(`rule '${n}' is defined twice`, at);
    rules.set(n, alternates());
    space();
    if (src[i] === ')') bad(`an unmatched ')'`);
  }
  if (rules.size === 0) throw grammarError(field, 'the grammar has no rules');
  return new Cfg(rules, 'root', field, where);
}
