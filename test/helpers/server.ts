/**
 * Test helpers for the Node runtime: start the real server on port 0 over one or more repository
 * folders, make throw-away repositories from generated ONNX models, and speak the v2 protocol the way
 * clients do (JSON and binary bodies).
 */

import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, type NodeServerOptions, type RunningServer } from '../../runtime-node/index.js';
import { createLogger } from '../../core/index.js';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const MODELS = join(ROOT, 'models');

export interface TestServer extends RunningServer {
  url: string;
  logs: string[];
}

export async function startTestServer(opts: Partial<NodeServerOptions> & { modelRepositories: string[] }): Promise<TestServer> {
  const logs: string[] = [];
  const log = createLogger((_l, line) => logs.push(line), opts.logVerbose ?? 1);
  const running = await startServer({ httpPort: 0, httpAddress: '127.0.0.1', log, ...opts });
  return Object.assign(running, { url: `http://127.0.0.1:${running.http!.port}`, logs });
}

/**
 * model.js of a JavaScript model that echoes X as Y after blocking its instance's thread for the
 * request's `ms` parameter (else `defaultMs`): requests behind it wait in the scheduler's queue.
 */
export const blockingJsModel = (defaultMs: number) => `
  export default class {
    execute(requests) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(requests[0].parameters.ms ?? ${defaultMs}));
      return requests.map((r) => ({ outputs: { Y: r.input('X').data } }));
    }
  }`;

/** A temporary repository: `{ 'm/config.pbtxt': text, 'm/1/model.onnx': bytes, ... }`. */
export function tempRepo(files: Record<string, string | Uint8Array>): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), 'tsi-repo-'));
  for (const [rel, content] of Object.entries(files)) {
    const p = join(path, rel);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, content);
  }
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

export async function getJson(url: string): Promise<{ status: number; body: any; headers: Headers }> {
  const r = await fetch(url);
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined, headers: r.headers };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const r = await fetch(url, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'Content-Type': 'application/json', ...headers } });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* keep text */
  }
  return { status: r.status, body: parsed, headers: r.headers };
}

/** Builds a binary-extension body: JSON header followed by the tensors' bytes. */
export function binaryBody(header: unknown, chunks: Uint8Array[]): { body: Uint8Array; headerLength: number } {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const total = json.byteLength + chunks.reduce((n, c) => n + c.byteLength, 0);
  const body = new Uint8Array(total);
  body.set(json, 0);
  let off = json.byteLength;
  for (const c of chunks) {
    body.set(c, off);
    off += c.byteLength;
  }
  return { body, headerLength: json.byteLength };
}

export async function postBinary(url: string, header: unknown, chunks: Uint8Array[], extra: Record<string, string> = {}) {
  const { body, headerLength } = binaryBody(header, chunks);
  const r = await fetch(url, {
    method: 'POST', body: body as BodyInit, headers: { 'Inference-Header-Content-Length': String(headerLength), 'Content-Type': 'application/octet-stream', ...extra },
  });
  const buf = new Uint8Array(await r.arrayBuffer());
  const hl = r.headers.get('Inference-Header-Content-Length');
  const jsonLen = hl ? Number(hl) : buf.byteLength;
  const json = JSON.parse(new TextDecoder().decode(buf.subarray(0, jsonLen)));
  return { status: r.status, json, binary: buf.subarray(jsonLen), headers: r.headers };
}

export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Splits binary output data by each output's binary_data_size. */
export function binaryOutputs(json: any, binary: Uint8Array): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  let off = 0;
  for (const o of json.outputs) {
    const n = o.parameters?.binary_data_size;
    if (n === undefined) continue;
    out.set(o.name, binary.slice(off, off + n));
    off += n;
  }
  return out;
}

export function lengthPrefixed(strings: string[]): Uint8Array {
  return lengthPrefixedBytes(strings.map((s) => new TextEncoder().encode(s)));
}

/** BYTES elements on the wire: each as a 4-byte little-endian length and its bytes (tritonclient's serialize_byte_tensor). */
export function lengthPrefixedBytes(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + 4 + p.byteLength, 0));
  const dv = new DataView(out.buffer);
  let off = 0;
  for (const p of parts) {
    dv.setUint32(off, p.byteLength, true);
    out.set(p, off + 4);
    off += 4 + p.byteLength;
  }
  return out;
}
