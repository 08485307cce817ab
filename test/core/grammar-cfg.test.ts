/**
 * The grammars beyond JSON (core/llm/grammar-cfg.ts, grammar-regex.ts, grammar-gbnf.ts) against
 * JavaScript's own RegExp: for each expression, every string over a small alphabet up to a length
 * (and random longer ones) is accepted by tsi's automaton exactly when RegExp matches it whole, and a
 * prefix is alive exactly when some accepted string extends it; the fewest characters to an end are
 * those of the shortest accepted continuation. GBNF grammars are checked against an equivalent RegExp
 * (or, for the recursive one, a counter). What cannot compile names the place.
 */

import { describe, expect, it } from 'vitest';
import { choiceGrammar, type Cfg, type CfgState } from '../../core/llm/grammar-cfg.js';
import { gbnfGrammar } from '../../core/llm/grammar-gbnf.js';
import { regexGrammar } from '../../core/llm/grammar-regex.js';

/** The state after `text`, or null once no parse takes it. */
function walk(g: Cfg, text: string): CfgState | null {
  let st: CfgState | null = g.start;
  for (const c of text) {
    st = g.step(st, c.codePointAt(0)!);
    if (!st) return null;
  }
  return st;
}

/** Every string over `alphabet` of length 0..n. */
function* strings(alphabet: string[], n: number): Generator<string> {
  yield '';
  let layer = [''];
  for (let k = 1; k <= n; k++) {
    const next: string[] = [];
    for (const s of layer) for (const c of alphabet) next.push(s + c);
    yield* next;
    layer = next;
  }
}

function expectSameLanguage(g: Cfg, re: RegExp, alphabet: string[], n: number): void {
  const wrong: string[] = [];
  const all = [...strings(alphabet, n)];
  const accepted = all.filter((s) => re.test(s));
  for (const s of all) {
    const st = walk(g, s);
    if ((st?.accepts ?? false) !== re.test(s)) wrong.push(`${JSON.stringify(s)}: tsi ${st?.accepts ?? false}, RegExp ${re.test(s)}`);
    // Alive exactly when an accepted string (within the enumerated ones) extends it; min = the shortest extension.
    const ext = accepted.filter((a) => a.startsWith(s)).map((a) => a.length - s.length);
    if (s.length <= n - 3 && ext.length > 0 && st === null) wrong.push(`${JSON.stringify(s)}: tsi dead, RegExp can go on`);
    if (s.length <= n - 3 && st && ext.length > 0 && st.min !== Math.min(...ext)) wrong.push(`${JSON.stringify(s)}: min ${st.min}, shortest ${Math.min(...ext)}`);
  }
  expect(wrong.slice(0, 10)).toEqual([]);
  expect(accepted.length).toBeGreaterThan(0);
}

describe('regular expressions', () => {
  const cases: [string, string[], number][] = [
    ['(ab|a)*b?', ['a', 'b'], 8],
    ['a{2,4}(b|c{0,2})', ['a', 'b', 'c'], 7],
    ['[^a]x*|a+?\\.', ['a', 'x', '.', 'q'], 6],
    ['(a?)*b', ['a', 'b'], 7],
    ['\\d{1,3}(,\\d{3})*', ['1', ',', 'x'], 9],
    ['(?:x|y)(?P<n>z|)\\w\\s?', ['x', 'y', 'z', ' ', '_', '-'], 5],
    ['^((a|b)(c|d))+$', ['a', 'b', 'c', 'd'], 6],
    ['[a-c-]{2}\\u00e9?', ['a', 'c', '-', 'é', 'd'], 4],
  ];
  for (const [source, alphabet, n] of cases) {
    it(`accepts what RegExp matches whole: ${source}`, () => {
      // JavaScript writes Python's named group (?P<n>...) as (?<n>...).
      expectSameLanguage(regexGrammar('r', source), new RegExp(`^(?:${source.replace('(?P<', '(?<')})$`, 'u'), alphabet, n);
    });
  }

  it('refuses what an automaton cannot follow, naming the position', () => {
    const cases: [string, RegExp][] = [
      ['ab(?=c)', /'f': a lookaround '\(\?=' at position 2 /],
      ['a(?<!b)', /lookaround '\(\?<!' at position 1/],
      ['(a)b\\1', /backreference \\1 at position 4/],
      ['\\bword', /word boundary \\b at position 0/],
      ['(?i)abc', /the group '\(\?i' at position 0/],
      ['a^b', /anchor '\^' \(only at the start\) at position 1/],
      ['ab)', /unmatched '\)' at position 2/],
      ['(ab', /unclosed '\(' at position 0/],
      ['a{3,1}', /maximum below its minimum at position 1/],
      ['*a', /nothing to repeat before '\*' at position 0/],
      ['\\p{L}', /Unicode property \\p at position 0/],
      ['a++', /possessive quantifier at position 2/],
    ];
    for (const [source, message] of cases) expect(() => regexGrammar('f', source), source).toThrow(message);
  });
});

describe('GBNF', () => {
  it('compiles rules, literals with escapes, classes, groups and repetitions to the language a RegExp states', () => {
    const g = gbnfGrammar('g', [
      'root ::= greeting ("," ws name){1,2} "\\n"?  # a comment',
      'greeting ::= "hi" | "yo\\x21"',
      'name ::= [A-Z] [a-z]*',
      'ws ::= [ \\t]?',
    ].join('\n'));
    expectSameLanguage(g, /^(?:hi|yo!)(?:,[ \t]?[A-Z][a-z]*){1,2}\n?$/, ['h', 'i', 'y', 'o', '!', ',', ' ', 'A', '\n'], 6);
  });

  it('follows recursion: balanced brackets, checked by a counter', () => {
    const g = gbnfGrammar('g', 'root ::= pair*\npair ::= "(" root ")" | "[" root "]"');
    const balanced = (s: string) => {
      const stack: string[] = [];
      for (const c of s) {
        if (c === '(' || c === '[') stack.push(c);
        else if (stack.pop() !== (c === ')' ? '(' : '[')) return false;
      }
      return stack.length === 0;
    };
    for (const s of strings(['(', ')', '[', ']'], 7)) {
      const st = walk(g, s);
      expect(st?.accepts ?? false, s).toBe(balanced(s));
      // The fewest characters to close is the number of open brackets.
      if (st) expect(st.min, s).toBe([...s].reduce((n, c) => n + ('(['.includes(c) ? 1 : -1), 0));
    }
  });

  it('refuses what it cannot compile, naming the rule and its line and column', () => {
    const cases: [string, RegExp][] = [
      ['root ::= a\na ::= "x" b', /rule 'b' \(line 2, column 11\) is not defined/],
      ['root ::= "x"\nroot ::= "y"', /rule 'root' is defined twice at line 2, column 1/],
      ['start ::= "x"', /there is no rule named 'root'/],
      ['root ::= a "x"\na ::= root "y" | "z"', /rule 'root' is left-recursive/],
      ['root ::= "x" root', /rule 'root' can never end/],
      ['root ::= "abc', /unclosed string at line 1, column 10/],
      ['root ::= [a-', /unclosed '\[' at line 1, column 10/],
      ['root ::= <think> "x"', /token reference \(<...>\) is not supported at line 1, column 10/],
      ['root ::= ("a"', /unclosed '\(' at line 1, column 10/],
      ['root = "a"', /'::=' was expected after the rule name 'root'/],
    ];
    for (const [source, message] of cases) expect(() => gbnfGrammar('grammar', source), source).toThrow(message);
  });
});

describe('choices', () => {
  it('accepts exactly the choices, prefixes of one another included', () => {
    const g = choiceGrammar('c', ['re', 'red', 'résumé', '']);
    for (const s of ['', 're', 'red', 'résumé']) expect(walk(g, s)?.accepts, s).toBe(true);
    for (const s of ['r', 'rédx', 'redd', 'b']) expect(walk(g, s)?.accepts ?? false, s).toBe(false);
    expect(walk(g, 'ré')!.min).toBe(4);
    expect(walk(g, 'red')!.finished).toBe(true);
  });
});
