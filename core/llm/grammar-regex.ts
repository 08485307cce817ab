/**
 * A regular expression as a grammar (grammar-cfg.ts): the syntax vLLM's `structured_outputs.regex`
 * takes (Python's `re`, which JavaScript's shares for everything here): literals and escapes, classes
 * `[...]` / `[^...]` with ranges and `\d \w \s` (and their negations), `.` (any character but a newline),
 * groups (plain, `(?:...)`, named `(?P<n>...)` / `(?<n>...)`), `|`, and the quantifiers `* + ? {n}
 * {n,} {n,m}` (lazy forms too: the language is the same). The whole output must match, so `^` at the
 * start and `$` at the end are accepted and mean nothing more. What a grammar cannot express, or what
 * changes what matches in ways an automaton over one character at a time cannot follow (backreferences,
 * lookarounds, word boundaries, inline flags, Unicode properties), is refused naming its position.
 */

import { Cfg, alternativesOf, charRange, complement, grammarError, repetitionAt, sequenceOf, unionSets, type CharSet, type Expr } from './grammar-cfg.js';

const DIGIT: CharSet = charRange(0x30, 0x39);
const WORD: CharSet = unionSets(DIGIT, charRange(0x41, 0x5a), charRange(0x61, 0x7a), charRange(0x5f));
const SPACE: CharSet = unionSets(charRange(0x20), charRange(0x09, 0x0d));
const NEWLINE = 0x0a;
const SIMPLE_ESCAPES: Record<string, number> = { n: 0x0a, t: 0x09, r: 0x0d, f: 0x0c, v: 0x0b, '0': 0 };

/** Compiles `source`; errors name `field` and the position (0-based, in characters). */
export function regexGrammar(field: string, source: unknown): Cfg {
  if (typeof source !== 'string') throw grammarError(field, `must be a regular expression in a string, got ${JSON.stringify(source)}`);
  const src = [...source];
  let i = 0;
  const fail = (what: string, at = i): never => {
    throw grammarError(field, `${what} at position ${at} of the regular expression is not supported`);
  };
  const bad = (what: string, at = i): never => {
    throw grammarError(field, `${what} at position ${at} of the regular expression`);
  };
  const peek = (k = 0) => src[i + k];

  const hex = (n: number): number => {
    const digits = src.slice(i, i + n).join('');
    if (digits.length !== n || !/^[0-9a-fA-F]+$/.test(digits)) bad(`a \\x or \\u escape needs ${n} hex digits`);
    i += n;
    return parseInt(digits, 16);
  };

  /** An escape after the backslash (i is past it): a set of characters. */
  const escape = (inClass: boolean): CharSet => {
    const at = i - 1;
    const c = src[i++];
    if (c === undefined) return bad('a trailing backslash', at);
    switch (c) {
      case 'd': return DIGIT;
      case 'D': return complement(DIGIT);
      case 'w': return WORD;
      case 'W': return complement(WORD);
      case 's': return SPACE;
      case 'S': return complement(SPACE);
      case 'x': return charRange(hex(2));
      case 'u':
        if (peek() === '{') {
          const end = src.indexOf('}', i);
          if (end < 0) return bad('an unclosed \\u{...} escape', at);
          const cp = parseInt(src.slice(i + 1, end).join(''), 16);
          if (!Number.isFinite(cp) || cp > 0x10ffff) return bad('a \\u{...} escape that is not a code point', at);
          i = end + 1;
          return charRange(cp);
        }
        return charRange(hex(4));
      case 'b': return inClass ? charRange(0x08) : fail('a word boundary \\b', at);
      case 'B': return fail('a word boundary \\B', at);
      case 'A': case 'Z': case 'z': case 'G': return fail(`the anchor \\${c}`, at);
      case 'p': case 'P': return fail(`a Unicode property \\${c}`, at);
      case 'k': return fail('a backreference \\k', at);
    }
    if (c >= '1' && c <= '9') return fail(`a backreference \\${c}`, at);
    if (SIMPLE_ESCAPES[c] !== undefined) return charRange(SIMPLE_ESCAPES[c]!);
    if (/[A-Za-z]/.test(c)) return fail(`the escape \\${c}`, at);
    return charRange(c.codePointAt(0)!);
  };

  const charClass = (): CharSet => {
    const open = i - 1;
    const negate = peek() === '^';
    if (negate) i++;
    const parts: CharSet[] = [];
    let first = true;
    for (;;) {
      const c = src[i];
      if (c === undefined) return bad(`an unclosed '['`, open);
      if (c === ']' && !first) {
        i++;
        break;
      }
      first = false;
      if (c === '[' && (peek(1) === ':' || peek(1) === '=' || peek(1) === '.')) return fail('a POSIX class', i);
      const lo = one();
      if (peek() === '-' && peek(1) !== undefined && peek(1) !== ']') {
        i++;
        const hi = one();
        if (lo.length !== 2 || lo[0] !== lo[1] || hi.length !== 2 || hi[0] !== hi[1]) return bad('a range between classes');
        if (hi[0]! < lo[0]!) return bad('a range whose end comes before its start');
        parts.push(charRange(lo[0]!, hi[0]!));
      } else parts.push(lo);
    }
    const set = unionSets(...parts);
    return negate ? complement(set) : set;

    function one(): CharSet {
      const c = src[i++]!;
      if (c === '\\') return escape(true);
      return charRange(c.codePointAt(0)!);
    }
  };

  const group = (): Expr => {
    const open = i - 1;
    if (peek() === '?') {
      const kind = src.slice(i + 1, i + 3).join('');
      if (kind.startsWith(':')) i += 2;
      else if (kind === 'P<' || (kind[0] === '<' && kind !== '<=' && kind !== '<!')) {
        const end = src.indexOf('>', i);
        if (end < 0) return bad('an unclosed group name', open);
        i = end + 1;
      } else if (kind.startsWith('=') || kind.startsWith('!') || kind === '<=' || kind === '<!') return fail(`a lookaround '(?${kind[0] === '<' ? kind : kind[0]}'`, open);
      else if (kind === 'P=') return fail('a backreference (?P=', open);
      else return fail(`the group '(?${kind[0] ?? ''}'`, open);
    }
    const inner = alternation();
    if (src[i] !== ')') return bad(`an unclosed '('`, open);
    i++;
    return inner;
  };

  const atom = (): Expr | undefined => {
    const c = src[i];
    if (c === undefined || c === '|' || c === ')') return undefined;
    const at = i;
    i++;
    switch (c) {
      case '(': return group();
      case '[': return { k: 'chars', set: charClass() };
      case '.': return { k: 'chars', set: complement(charRange(NEWLINE)) };
      case '\\': return { k: 'chars', set: escape(false) };
      case '^': return at === 0 ? { k: 'seq', items: [] } : fail(`an anchor '^' (only at the start)`, at);
      case '$': return i === src.length ? { k: 'seq', items: [] } : fail(`an anchor '$' (only at the end)`, at);
      case '*': case '+': case '?': return bad(`nothing to repeat before '${c}'`, at);
      case '{':
        if (/^\d+(,\d*)?\}/.test(src.slice(i).join(''))) return bad(`nothing to repeat before '{'`, at);
    }
    return { k: 'chars', set: charRange(c.codePointAt(0)!) };
  };

  const quantified = (): Expr | undefined => {
    let x = atom();
    if (!x) return undefined;
    for (;;) {
      const at = i;
      // A '{' that starts no repetition is a literal '{'.
      const r = repetitionAt(src.slice(i, i + 40).join(''), false);
      if (!r) break;
      if (r.max < r.min) bad(`the repetition ${src.slice(at, at + r.length).join('')} has its maximum below its minimum`, at);
      i += r.length;
      if (src[i] === '?') i++;
      else if (src[i] === '+') fail('a possessive quantifier', i);
      x = { k: 'repeat', item: x, min: r.min, max: r.max };
    }
    return x;
  };

  const sequence = () => sequenceOf(quantified);

  function alternation(): Expr {
    const options = [sequence()];
    while (src[i] === '|') {
      i++;
      options.push(sequence());
    }
    return alternativesOf(options);
  }

  const root = alternation();
  if (i < src.length) bad(`an unmatched ')'`);
  return new Cfg(new Map([['root', root]]), 'root', field, (at) => `position ${at}`);
}
