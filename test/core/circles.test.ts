/**
 * No import circles, type-only ones included: a circle means two files each need the other's idea,
 * so neither can be read (or loaded, for value imports) first. Every .ts file of the source folders is
 * read as text, its relative imports resolved (`.js` specifiers name `.ts` sources), and Tarjan's
 * strongly connected components found; a component of more than one file, or a file importing
 * itself, fails with the files named. The Python stub's modules are checked the same way.
 */

import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { ROOT } from '../helpers/server.js';
import { importsOf } from '../helpers/imports.js';

const FOLDERS = ['core', 'client', 'runtime-node', 'runtime-browser', 'scripts'];

function walk(dir: string, ext: RegExp, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, ext, out);
    else if (ext.test(name) && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** A relative specifier as the file it names, or undefined for a package or a missing file. */
function target(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  for (const c of [base.replace(/\.(m?)js$/, '.$1ts'), base, `${base}.ts`, join(base, 'index.ts')]) {
    if (existsSync(c) && statSync(c).isFile()) return c;
  }
  return undefined;
}

/** Strongly connected components of more than one node, or with a self-edge (Tarjan). */
export function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

function tsGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const folder of FOLDERS) {
    for (const file of walk(join(ROOT, folder), /\.(m?ts)$/)) {
      const deps = importsOf(readFileSync(file, 'utf8')).map((s) => target(file, s)).filter((t): t is string => !!t);
      graph.set(relative(ROOT, file), deps.map((d) => relative(ROOT, d)));
    }
  }
  return graph;
}

/** The Python stub's modules: `import x` / `from x import ...` of a sibling module, anywhere in the file. */
function pythonGraph(): Map<string, string[]> {
  const dir = join(ROOT, 'runtime-node', 'python', 'stub');
  const files = readdirSync(dir).filter((f) => f.endsWith('.py'));
  const names = new Set(files.map((f) => f.slice(0, -3)));
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const src = readFileSync(join(dir, f), 'utf8');
    const deps = new Set<string>();
    for (const m of src.matchAll(/^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w., ]+))/gm)) {
      for (const mod of (m[1] ?? m[2]!).split(',').map((s) => s.trim().split(/\s+/)[0]!)) if (names.has(mod)) deps.add(`${mod}.py`);
    }
    graph.set(f, [...deps]);
  }
  return graph;
}

describe('import circles', () => {
  it('finds one in a graph that has one (the check can fail)', () => {
    expect(circles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]))).toEqual([['a', 'b', 'c']]);
    expect(circles(new Map([['a', ['b']], ['b', []]]))).toEqual([]);
  });

  it('TypeScript sources have none', () => {
    const graph = tsGraph();
    expect(graph.size).toBeGreaterThan(100);
    expect(circles(graph).map((c) => c.join(' <-> '))).toEqual([]);
  });

  it('the Python stub has none', () => {
    const graph = pythonGraph();
    expect(graph.size).toBeGreaterThan(2);
    expect(circles(graph).map((c) => c.join(' <-> '))).toEqual([]);
  });
});
