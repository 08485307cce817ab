/**
 * HttpClient against the real tsi server over real sockets: the shared suite (every tritonclient
 * operation, errors with status and message), then what only HTTP has — JSON and binary tensor
 * encodings and their mixes, gzip/deflate both ways, headers, aborts, and generate / generate_stream.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpClient, InferenceServerError } from '../../client/index.js';
import { nodeHttpFetch } from '../../client/node.js';
import { clientSuite, expectError } from './suite.js';
import { startClientServers, type ClientServers } from './servers.js';

let servers: ClientServers;
let server: ClientServers['main'];

beforeAll(async () => {
  servers = await startClientServers();
  server = servers.main;
});
afterAll(async () => servers?.stop());

clientSuite('http', {
  client: () => new HttpClient(server.url),
  explicitClient: () => new HttpClient(servers.explicit.url),
  deadClient: () => new HttpClient('127.0.0.1:1'),
});

// The same behaviour over the node:http transport that `tsi-node perf` uses.
const nodeFetch = nodeHttpFetch();
clientSuite('http', {
  client: () => new HttpClient({ url: server.url, fetch: nodeFetch }),
  explicitClient: () => new HttpClient({ url: servers.explicit.url, fetch: nodeFetch }),
  deadClient: () => new HttpClient({ url: '127.0.0.1:1', fetch: nodeFetch }),
}, 'http (node:http transport)');

/** A fetch that records what went over the wire. */
function spyFetch() {
  const calls: { url: string; headers: Headers; body?: Uint8Array; resHeaders?: Headers }[] = [];
  const f: typeof fetch = async (input, init) => {
    const body = init?.body instanceof Uint8Array ? init.body : undefined;
    const call: (typeof calls)[number] = { url: String(input), headers: new Headers(init?.headers), body };
    calls.push(call);
    const res = await fetch(input, init);
    call.resHeaders = res.headers;
    return res;
  };
  return { calls, fetch: f };
}

const a = Int32Array.from({ length: 16 }, (_, i) => i * 2);
const b = Int32Array.from({ length: 16 }, () => 1);
const inputs = [{ name: 'INPUT0', shape: [1, 16], data: a }, { name: 'INPUT1', shape: [1, 16], data: b }];

describe('http client: tensor encodings', () => {
  it('sends binary tensors by default and asks for binary outputs', async () => {
    const spy = spyFetch();
    const c = new HttpClient({ url: server.url, fetch: spy.fetch });
    const r = await c.infer('simple', inputs);
    const call = spy.calls[0]!;
    const headerLength = Number(call.headers.get('Inference-Header-Content-Length'));
    const head = JSON.parse(new TextDecoder().decode(call.body!.subarray(0, headerLength)));
    expect(head.inputs[0].parameters).toEqual({ binary_data_size: 64 });
    expect(head.parameters).toEqual({ binary_data_output: true });
    expect(call.body!.byteLength).toBe(headerLength + 128);
    expect(call.resHeaders!.get('Content-Type')).toBe('application/octet-stream');
    expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 1));
  });

  it('speaks plain JSON when asked, with the same answers', async () => {
    const spy = spyFetch();
    const c = new HttpClient({ url: server.url, fetch: spy.fetch, binaryInputs: false, binaryOutputs: false });
    const r = await c.infer('simple', inputs);
    expect(spy.calls[0]!.headers.get('Inference-Header-Content-Length')).toBeNull();
    expect(JSON.parse(new TextDecoder().decode(spy.calls[0]!.body)).inputs[0].data).toEqual(Array.from(a));
    expect(spy.calls[0]!.resHeaders!.get('Content-Type')).toBe('application/json');
    expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 1));
  });

  it('mixes per-output encodings and per-call overrides', async () => {
    const c = new HttpClient(server.url);
    const r = await c.infer('simple', inputs, { binaryInputs: false, outputs: [{ name: 'OUTPUT0', binary: true }, { name: 'OUTPUT1', binary: false }] });
    expect(r.data('OUTPUT0')).toBeInstanceOf(Int32Array);
    expect(r.data('OUTPUT1')).toBeInstanceOf(Int32Array);
    expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 1));
    expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 1));
    const s = await c.infer('simple_string', [
      { name: 'INPUT0', shape: [1, 16], data: Array.from(a, String) },
      { name: 'INPUT1', shape: [1, 16], data: Array.from(b, String) },
    ], { binaryInputs: false, binaryOutputs: false });
    expect(s.strings('OUTPUT0')).toEqual(Array.from(a, (x) => String(x + 1)));
  });

  it('writes 64-bit integers exactly: bigint parameters and INT64 JSON tensors', async () => {
    const spy = spyFetch();
    const c = new HttpClient({ url: server.url, fetch: spy.fetch, binaryInputs: false });
    const id = 2n ** 40n + 1n;
    const r = await c.infer('simple_sequence_state', [{ name: 'INPUT', shape: [1, 1], data: new Int32Array([5]) }], { sequenceId: id, sequenceStart: true, sequenceEnd: true });
    expect(new TextDecoder().decode(spy.calls[0]!.body)).toContain(`"sequence_id":${id}`);
    expect(r.data<Int32Array>('OUTPUT')[0]).toBe(5);
    // Beyond 2^53 the client still writes the exact digits (what the server makes of them is its business).
    await c.infer('simple_sequence_state', [{ name: 'INPUT', shape: [1, 1], data: new Int32Array([5]) }], { sequenceId: 2n ** 63n + 7n, sequenceStart: true, sequenceEnd: true }).catch(() => {});
    expect(new TextDecoder().decode(spy.calls[1]!.body)).toContain(`"sequence_id":${2n ** 63n + 7n}`);
  });
});

describe('http client: compression, headers, aborts', () => {
  it('gzip-compresses requests and asks for gzip responses', async () => {
    const spy = spyFetch();
    const c = new HttpClient({ url: server.url, fetch: spy.fetch, requestCompression: 'gzip', responseCompression: 'gzip' });
    const r = await c.infer('simple', inputs);
    const call = spy.calls[0]!;
    expect(call.headers.get('Content-Encoding')).toBe('gzip');
    expect(Array.from(call.body!.subarray(0, 2))).toEqual([0x1f, 0x8b]);
    expect(call.resHeaders!.get('Content-Encoding')).toBe('gzip');
    expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 1));
  });

  it('deflate works too, and uncompressed is the default (identity, not fetch\'s gzip)', async () => {
    const d = await new HttpClient({ url: server.url, requestCompression: 'deflate', responseCompression: 'deflate' }).infer('simple', inputs);
    expect(Array.from(d.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 1));
    const spy = spyFetch();
    await new HttpClient({ url: server.url, fetch: spy.fetch }).infer('simple', inputs);
    expect(spy.calls[0]!.headers.get('Accept-Encoding')).toBe('identity');
    expect(spy.calls[0]!.resHeaders!.get('Content-Encoding')).toBeNull();
  });

  it('sends client-wide and per-call headers', async () => {
    const spy = spyFetch();
    const c = new HttpClient({ url: server.url, fetch: spy.fetch, headers: { 'X-Team': 'a' } });
    await c.isServerLive({ headers: { 'X-Call': 'b' } });
    expect(spy.calls[0]!.headers.get('X-Team')).toBe('a');
    expect(spy.calls[0]!.headers.get('X-Call')).toBe('b');
  });

  it('aborts on a caller signal', async () => {
    const ac = new AbortController();
    ac.abort();
    await expectError(new HttpClient(server.url).infer('simple', inputs, { signal: ac.signal }), 'http', 0, /failed/);
  });

  it('maps non-JSON and JSON error bodies to the one error type', async () => {
    const c = new HttpClient({ url: server.url, fetch: async () => new Response('upstream down', { status: 502, statusText: 'Bad Gateway' }) });
    const e = await expectError(c.getServerMetadata(), 'http', 502, 'upstream down');
    expect(e.codeName).toBe('502');
    const c2 = new HttpClient({ url: server.url, fetch: async () => new Response(null, { status: 503, statusText: 'Service Unavailable' }) });
    await expectError(c2.getServerMetadata(), 'http', 503, 'HTTP 503 Service Unavailable');
  });
});

describe('http client: node:http transport specifics', () => {
  it('decodes compressed responses like fetch, and aborts', async () => {
    for (const enc of ['gzip', 'deflate'] as const) {
      const c = new HttpClient({ url: server.url, fetch: nodeFetch, requestCompression: enc, responseCompression: enc });
      const r = await c.infer('simple', inputs);
      expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 1));
    }
    const raw = await nodeFetch(`${server.url}/v2/models/simple/infer`, {
      method: 'POST', body: JSON.stringify({ inputs: inputs.map((i) => ({ ...i, datatype: 'INT32', data: Array.from(i.data) })) }),
      headers: { 'Accept-Encoding': 'gzip', 'Content-Type': 'application/json' },
    });
    expect(raw.headers.get('Content-Encoding')).toBeNull();
    expect(((await raw.json()) as any).outputs[0].data).toEqual(Array.from(a, (x) => x + 1));
    const ac = new AbortController();
    const p = new HttpClient({ url: server.url, fetch: nodeFetch }).infer('simple', inputs, { signal: ac.signal });
    ac.abort();
    await expectError(p, 'http', 0, /failed/);
    expect((await nodeFetch(`${server.url}/v2/health/live`)).status).toBe(200);
  });
});

describe('http client: generate extension', () => {
  it('generate answers one JSON object', async () => {
    const c = new HttpClient(server.url);
    const r = await c.generate('simple', { INPUT0: Array.from(a), INPUT1: Array.from(b) });
    expect(r.model_name).toBe('simple');
    expect(r.OUTPUT0).toEqual(Array.from(a, (x) => x + 1));
  });

  it('generate_stream yields server-sent events', async () => {
    const c = new HttpClient(server.url);
    const events: Record<string, unknown>[] = [];
    for await (const ev of c.generateStream('simple', { INPUT0: Array.from(a), INPUT1: Array.from(b) })) events.push(ev);
    expect(events).toHaveLength(1);
    expect(events[0]!.OUTPUT1).toEqual(Array.from(a, (x) => x - 1));
    const stream: unknown[] = [];
    for await (const ev of c.generateStream('repeat', { IN: 4 })) stream.push(ev.OUT);
    expect(stream).toEqual([0, 1, 2, 3]);
    const err = await (async () => {
      for await (const _ of c.generateStream('no_such_model', {})) void _;
    })().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(InferenceServerError);
    expect((err as InferenceServerError).status).toBe(404);
  });
});
