/**
 * core/ must stay platform-neutral (STYLE.md principle 1): no `node:*` or Node built-in modules, no
 * onnxruntime, no runtime-* imports, no DOM-only globals. This test reads every core file's imports,
 * so a violation fails here instead of in a browser bundle. runtime-browser/ and graph/ (the ONNX
 * builder both runtimes may use) take nothing of Node either.
 */

import { describe, expect, it } from 'vitest';
import { readFileSync, readdirSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { ROOT } from '../helpers/server.js';
import { importsOf as imports } from '../helpers/imports.js';

const CORE = join(ROOT, 'core');
// Recursive: subsystem folders (core/llm/, and any room added later) are core too.
const files = readdirSync(CORE, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
const builtins = new Set(builtinModules);


describe('core purity', () => {
  it('has files to check', () => {
    expect(files.length).toBeGreaterThan(10);
  });
  for (const f of files) {
    it(`${f} imports nothing platform-specific`, () => {
      const src = readFileSync(join(CORE, f), 'utf8');
      for (const spec of imports(src)) {
        expect(spec.startsWith('node:'), `${f} imports ${spec}`).toBe(false);
        expect(builtins.has(spec.split('/')[0]!), `${f} imports Node built-in ${spec}`).toBe(false);
        expect(/onnxruntime|runtime-node|runtime-browser|@grpc|prom-client|@hono\/node-server/.test(spec), `${f} imports ${spec}`).toBe(false);
      }
      expect(/\bprocess\.|\bBuffer\.|\brequire\(|\bdocument\.|\bwindow\./.test(src.replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '')), `${f} uses a platform global`).toBe(false);
    });
  }
});

/** The browser runtime runs in pages and Service Workers: nothing of Node's, nothing of the Node runtime. */
describe('runtime-browser purity', () => {
  const DIR = join(ROOT, 'runtime-browser');
  const browserFiles = readdirSync(DIR, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  for (const f of browserFiles) {
    it(`${f} imports nothing of Node`, () => {
      const src = readFileSync(join(DIR, f), 'utf8');
      for (const spec of imports(src)) {
        expect(spec.startsWith('node:'), `${f} imports ${spec}`).toBe(false);
        expect(builtins.has(spec.split('/')[0]!), `${f} imports Node built-in ${spec}`).toBe(false);
        expect(/onnxruntime-node|runtime-node|@grpc|prom-client|@hono\/node-server|^webgpu$/.test(spec), `${f} imports ${spec}`).toBe(false);
      }
      expect(/\bprocess\.|\bBuffer\.|\brequire\(/.test(src.replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '')), `${f} uses a Node global`).toBe(false);
    });
  }
});

/** graph/ (the ONNX builder) is runtime code of both runtimes (device-kv.ts builds its graphs with it): nothing of Node, no runtime. */
describe('graph purity', () => {
  const DIR = join(ROOT, 'graph');
  const graphFiles = readdirSync(DIR, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  it('has files to check', () => {
    expect(graphFiles.length).toBeGreaterThan(0);
  });
  for (const f of graphFiles) {
    it(`${f} imports nothing of Node or of a runtime`, () => {
      const src = readFileSync(join(DIR, f), 'utf8');
      for (const spec of imports(src)) {
        expect(spec.startsWith('node:'), `${f} imports ${spec}`).toBe(false);
        expect(builtins.has(spec.split('/')[0]!), `${f} imports Node built-in ${spec}`).toBe(false);
        expect(/onnxruntime|runtime-node|runtime-browser|scripts\//.test(spec), `${f} imports ${spec}`).toBe(false);
      }
      expect(/\bprocess\.|\bBuffer\.|\brequire\(/.test(src.replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '')), `${f} uses a Node global`).toBe(false);
    });
  }
});
