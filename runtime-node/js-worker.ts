/**
 * One JavaScript model instance, in a worker thread: imports the model file, runs it through core's
 * JsModelHost, and bridges to the main thread with messages. A model's `execute` runs here, so a slow
 * or busy model never blocks the server's event loop, and `instance_group.count` instances run in
 * parallel. BLS calls and file reads are request/reply messages answered by the main thread.
 *
 * Non-decoupled results travel with the `done` message (one message per batch); a decoupled model's
 * responses are posted the moment it sends them. Outputs are copied once (the model may keep its
 * arrays) and those copies are transferred.
 */

import { parentPort, workerData } from 'node:worker_threads';
// Direct module imports, not core/index.js, to keep each instance's start-up short.
import { TsiError, type ErrorCode } from '../core/errors.js';
import { JsModelHost, errorOf, type InitInfo, type TraceSlot, type WireRequest, type WireResponse } from '../core/js-model.js';
import type { InferRequest, InferResponse } from '../core/types.js';
import { movableTensor } from './worker-instance.js';

export interface JsWorkerInit {
  /** file: URL of model.js / model.mjs. */
  url: string;
  info: InitInfo;
}

export type JsToWorker =
  | { kind: 'execute'; id: number; requests: WireRequest[] }
  | { kind: 'bls-reply'; id: number; response?: InferResponse; error?: { code: ErrorCode; message: string }; final: boolean }
  | { kind: 'file-reply'; id: number; data?: Uint8Array; error?: string }
  | 'close';

export type JsFromWorker =
  | { kind: 'ready' }
  | { kind: 'init-error'; message: string }
  | { kind: 'send'; exec: number; index: number; response: WireResponse; final: boolean }
  | { kind: 'done'; id: number; ns: number; responses?: [number, WireResponse][] }
  | { kind: 'bls'; id: number; request: InferRequest; stream: boolean; parent?: TraceSlot }
  | { kind: 'read'; id: number; path: string }
  | { kind: 'log'; level: 'info' | 'warn' | 'error'; msg: string };

const port = parentPort!;
const init = (workerData as { data: JsWorkerInit }).data;
let nextId = 1;
const bls = new Map<number, (m: Extract<JsToWorker, { kind: 'bls-reply' }>) => void>();
const reads = new Map<number, (m: Extract<JsToWorker, { kind: 'file-reply' }>) => void>();

const post = (m: JsFromWorker, transfer?: Set<ArrayBuffer>) => port.postMessage(m, transfer ? [...transfer] : undefined);

function wireOut(r: WireResponse, transfer: Set<ArrayBuffer>): WireResponse {
  return 'error' in r ? r : { ...r, outputs: r.outputs.map((t) => movableTensor(t, transfer, false)) };
}

function blsCall(request: InferRequest, stream: boolean, on: (r: InferResponse | TsiError, final: boolean) => void, parent?: TraceSlot): Promise<void> {
  const id = nextId++;
  const transfer = new Set<ArrayBuffer>();
  const req = { ...request, inputs: request.inputs.map((t) => movableTensor(t, transfer, false)) };
  return new Promise<void>((resolve) => {
    bls.set(id, (m) => {
      on(m.error ? new TsiError(m.error.code, m.error.message) : m.response!, m.final);
      if (m.final) {
        bls.delete(id);
        resolve();
      }
    });
    post({ kind: 'bls', id, request: req, stream, parent }, transfer);
  });
}

const host = new JsModelHost(init.info, {
  infer: (request, parent) => new Promise<InferResponse>((resolve, reject) => {
    void blsCall(request, false, (r) => (r instanceof TsiError ? reject(r) : resolve(r)), parent);
  }),
  inferStream: (request, on, parent) => blsCall(request, true, on, parent),
  readFile: (path) => new Promise<Uint8Array>((resolve, reject) => {
    const id = nextId++;
    reads.set(id, (m) => {
      reads.delete(id);
      if (m.error !== undefined) reject(new Error(m.error));
      else resolve(m.data!);
    });
    post({ kind: 'read', id, path });
  }),
  log: (level, msg) => post({ kind: 'log', level, msg }),
});

/** A response on its way out; one that cannot be posted (odd data) becomes that request's error. */
function postResponse(make: (r: WireResponse, transfer: Set<ArrayBuffer>) => JsFromWorker, r: WireResponse): void {
  try {
    const transfer = new Set<ArrayBuffer>();
    post(make(wireOut(r, transfer), transfer), transfer);
  } catch (err) {
    post(make({ error: errorOf(err) }, new Set()));
  }
}

async function execute(id: number, requests: WireRequest[]): Promise<void> {
  const collected: [number, WireResponse][] = [];
  let done = false;
  const ns = await host.execute(requests, (index, response, final) => {
    if (host.decoupled || done) postResponse((r) => ({ kind: 'send', exec: id, index, response: r, final }), response);
    else collected.push([index, response]);
  });
  done = true;
  try {
    const transfer = new Set<ArrayBuffer>();
    post({ kind: 'done', id, ns, responses: collected.map(([i, r]) => [i, wireOut(r, transfer)]) }, transfer);
  } catch {
    for (const [index, r] of collected) postResponse((w) => ({ kind: 'send', exec: id, index, response: w, final: true }), r);
    post({ kind: 'done', id, ns });
  }
}

port.on('message', (m: JsToWorker) => {
  if (m === 'close') {
    // Exit outright after finalize(): a model's leftover timers must not keep the instance alive.
    void host.finalize().catch((err) => post({ kind: 'log', level: 'error', msg: `finalize() failed: ${errorOf(err).message}` }))
      .finally(() => process.exit(0));
    return;
  }
  switch (m.kind) {
    case 'execute':
      void execute(m.id, m.requests);
      break;
    case 'bls-reply':
      bls.get(m.id)?.(m);
      break;
    case 'file-reply':
      reads.get(m.id)?.(m);
      break;
  }
});

/**
 * Imports the model file. An ES-module `model.js` outside any `"type": "module"` package is found by
 * Node's syntax detection, but not when the server itself runs from TypeScript sources under tsx (its
 * loader takes such a file for CommonJS): then the file is imported again from its text.
 */
async function load(url: string): Promise<Record<string, unknown>> {
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (!url.startsWith('file:') || !url.endsWith('.js') || (code !== 'ERR_REQUIRE_CYCLE_MODULE' && code !== 'ERR_REQUIRE_ESM')) throw err;
    const { readFile } = await import('node:fs/promises');
    const text = await readFile(new URL(url), 'utf8');
    return (await import(`data:text/javascript;base64,${Buffer.from(text).toString('base64')}`)) as Record<string, unknown>;
  }
}

try {
  const ns = await load(init.url);
  await host.initialize(ns, init.url);
  post({ kind: 'ready' });
} catch (err) {
  post({ kind: 'init-error', message: errorOf(err).message });
}
