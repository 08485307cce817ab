/**
 * `tsi-node/client` must load in browsers: everything reachable from client/index.ts (its own files and
 * the core files it borrows) imports no Node built-in, no grpc-js, and touches no Node global. The gRPC
 * client is Node-only by design and lives outside that graph; this test fails the day it leaks in.
 */

import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { ROOT } from '../helpers/server.js';
import { importsOf as imports } from '../helpers/imports.js';

const builtins = new Set(builtinModules);


/** Files reachable from `entry` through relative imports (`.js` specifiers name `.ts` sources). */
function graph(entry: string): Map<string, string[]> {
  const seen = new Map<string, string[]>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    const specs = imports(readFileSync(file, 'utf8'));
    seen.set(file, specs);
    for (const s of specs) if (s.startsWith('.')) visit(resolve(dirname(file), s.replace(/\.js$/, '.ts')));
  };
  visit(entry);
  return seen;
}

describe('client purity', () => {
  const files = graph(join(ROOT, 'client', 'index.ts'));

  it('reaches the HTTP client but not the gRPC one', () => {
    const names = [...files.keys()].map((f) => relative(ROOT, f));
    expect(names).toContain(join('client', 'http.ts'));
    expect(names.filter((n) => /grpc/.test(n))).toEqual([]);
  });

  for (const [file, specs] of files) {
    const name = relative(ROOT, file);
    it(`${name} is browser-safe`, () => {
      for (const spec of specs) {
        expect(spec.startsWith('node:') || builtins.has(spec.split('/')[0]!), `${name} imports ${spec}`).toBe(false);
        expect(/@grpc|onnxruntime|runtime-node|@hono\/node-server|prom-client/.test(spec), `${name} imports ${spec}`).toBe(false);
      }
      const code = readFileSync(file, 'utf8').replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '');
      expect(/\bprocess\.|\bBuffer\b|\brequire\(|__dirname/.test(code), `${name} uses a Node global`).toBe(false);
    });
  }
});
