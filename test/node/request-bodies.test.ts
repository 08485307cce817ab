/**
 * Bodies bounded on every HTTP route: 8 clients at once each start sending 1 GB to a route — with a
 * Content-Length, chunked, or as a gzip/deflate "bomb" that expands without end — and each must be
 * refused with Triton's size error once the server has seen --http-max-input-size bytes (4 MiB here),
 * without the server holding more than a few of those at a time (its peak RSS stays under twice its
 * idle RSS), and the server must go on answering. The bodies are generated as they are sent; nothing
 * here ever holds 1 GB either. How long the refusals take is printed, not asserted (a shared machine's
 * timings are not a test's to judge).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { constants, deflateRawSync } from 'node:zlib';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

const LIMIT = 1 << 20;
const GB = 1 << 30;
const CONCURRENT = 8;
const PIECE = 1 << 16;

const ROUTES = [
  '/v2/models/simple/infer',
  '/v2/models/simple/generate',
  '/v2/models/simple/generate_stream',
  '/v1/completions',
  '/v1/chat/completions',
  '/v2/repository/index',
  '/v2/repository/models/simple/load',
  '/v2/systemsharedmemory/region/r/register',
  '/v2/logging',
  '/v2/trace/setting',
];

type Kind = 'plain' | 'chunked' | 'gzip' | 'deflate';

/**
 * 1 MiB of zeros as one raw deflate block ending in a full flush: the block is self-contained, so
 * repeating it is a valid compressed stream of as many MiB as there are copies (about 1 KB each).
 */
const ZEROS_BLOCK = deflateRawSync(Buffer.alloc(1 << 20), { finishFlush: constants.Z_FULL_FLUSH });
const GZIP_HEADER = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
const ZLIB_HEADER = Buffer.from([0x78, 0x9c]);

interface Outcome {
  status: number;
  error: string;
  /** Body bytes written before the answer came. */
  sent: number;
  ms: number;
}

/** One request whose body would be 1 GB (decoded, for the bombs); stops sending once answered. */
function send(port: number, path: string, kind: Kind): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const sock = connect(port, '127.0.0.1');
    let answer = Buffer.alloc(0);
    let sent = 0;
    let done = false;
    const finish = () => {
      const text = answer.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      const len = Number(/content-length:\s*(\d+)/i.exec(text.slice(0, end))?.[1] ?? NaN);
      if (end < 0 || !(answer.length >= end + 4 + len)) return false;
      done = true;
      sock.destroy();
      const body = text.slice(end + 4, end + 4 + len);
      let error = body;
      try {
        // Triton's `{"error": "..."}`, or the OpenAI API's `{"error": {"message": "..."}}`.
        const e = JSON.parse(body).error;
        error = typeof e === 'string' ? e : e?.message ?? body;
      } catch {
        // not JSON: kept as text for the assertion message
      }
      resolve({ status: Number(text.slice(9, 12)), error: String(error), sent, ms: performance.now() - t0 });
      return true;
    };
    sock.on('data', (d: Buffer) => {
      answer = Buffer.concat([answer, d]);
      finish();
    });
    sock.on('error', (err) => {
      if (!done) reject(new Error(`${kind} to ${path}: ${err.message} after ${sent} bytes, answer so far ${JSON.stringify(answer.toString('latin1').slice(0, 200))}`));
    });
    sock.on('close', () => {
      if (!done && !finish()) reject(new Error(`${kind} to ${path}: closed without an answer after ${sent} bytes`));
    });
    const headers = kind === 'plain' ? `Content-Length: ${GB}` : `Transfer-Encoding: chunked${kind === 'chunked' ? '' : `\r\nContent-Encoding: ${kind}`}`;
    sock.write(`POST ${path} HTTP/1.1\r\nHost: tsi\r\nContent-Type: application/json\r\n${headers}\r\n\r\n`);
    const pieces = function* (): Generator<Buffer> {
      if (kind === 'plain' || kind === 'chunked') {
        const spaces = Buffer.alloc(PIECE, 0x20);
        for (let n = 0; n < GB; n += PIECE) yield spaces;
        return;
      }
      yield kind === 'gzip' ? GZIP_HEADER : ZLIB_HEADER;
      for (let n = 0; n < GB; n += 1 << 20) yield ZEROS_BLOCK;
    };
    const it = pieces();
    const pump = () => {
      while (!done && !sock.destroyed) {
        const next = it.next();
        if (next.done) {
          if (kind !== 'plain') sock.write('0\r\n\r\n');
          return;
        }
        const b = next.value;
        sent += b.length;
        const ok = kind === 'plain' ? sock.write(b) : sock.write(Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]));
        if (!ok) {
          sock.once('drain', pump);
          return;
        }
      }
    };
    sock.once('connect', pump);
  });
}

/** Resident set size now and at its peak since the last reset, in bytes (Linux /proc). */
function rss(): { now: number; peak: number } {
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { now: kb('VmRSS'), peak: kb('VmHWM') };
}

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], maxInputSize: LIMIT });
});
afterAll(async () => s?.stop(2000));

describe(`request bodies over --http-max-input-size (${LIMIT >> 20} MiB) on every route`, () => {
  it(`refuses ${CONCURRENT} concurrent 1 GB bodies per route and kind with Triton's text, in bounded memory, and goes on serving`, async () => {
    const port = s.http!.port;
    globalThis.gc?.();
    const idle = rss().now;
    // Reset the peak (VmHWM) so it covers only what follows.
    writeFileSync('/proc/self/clear_refs', '5');
    const times: number[] = [];
    for (const path of ROUTES) {
      // generate refuses a Content-Encoding with Triton's own text before reading (its endpoint decodes none).
      const kinds: Kind[] = path.includes('/generate') ? ['plain', 'chunked'] : ['plain', 'chunked', 'gzip', 'deflate'];
      for (const kind of kinds) {
        const outcomes = await Promise.all(Array.from({ length: CONCURRENT }, () => send(port, path, kind)));
        for (const o of outcomes) {
          const what = `${kind} body to ${path}: ${o.status} ${o.error.slice(0, 200)}`;
          expect(o.status, what).toBe(400);
          // A compressed body is bounded as it is decoded, with Triton's DataCompressor text.
          expect(o.error, what).toMatch(kind === 'gzip' || kind === 'deflate'
            ? new RegExp(`^Decompressed data size exceeds the maximum allowed value of ${LIMIT} bytes`)
            : new RegExp(`request JSON size of \\d+ bytes exceeds the maximum allowed input size of ${LIMIT} bytes`));
          // Refused near the limit: what was sent before the answer is the limit plus what the
          // sockets' buffers held meanwhile, nowhere near 1 GB.
          expect(o.sent, what).toBeLessThan(kind === 'plain' ? 64 << 20 : LIMIT + (64 << 20));
          times.push(o.ms);
        }
      }
      for (const kind of path.includes('/generate') ? ['gzip', 'deflate'] : []) {
        const [o] = await Promise.all([send(port, path, kind as Kind)]);
        expect([o!.status, o!.error]).toEqual([400, `Unsupported content-encoding, only 'identity' is supported.`]);
      }
    }
    const { peak } = rss();
    times.sort((a, b) => a - b);
    console.log(`request-bodies: ${times.length} refusals, median ${times[times.length >> 1]!.toFixed(0)} ms, max ${times.at(-1)!.toFixed(0)} ms; RSS idle ${(idle / 2 ** 20).toFixed(0)} MiB, peak ${(peak / 2 ** 20).toFixed(0)} MiB (loaded machine: timings indicative only)`);
    expect(peak, `peak RSS ${peak} vs idle ${idle}`).toBeLessThan(2 * idle);
    // Still serving.
    const r = await fetch(`${s.url}/v2/models/simple/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
      ] }),
    });
    expect(r.status).toBe(200);
    expect((await r.json()).outputs[0].data).toEqual(Array(16).fill(3));
  }, 600_000);

  it('bounds a generate body as JSON even when it names a binary header length (L0_http test_json_dtype_size_expansion_exceeds_limit_error)', async () => {
    // Triton's generate endpoint takes no binary tensor data: the whole body is JSON, and over the limit
    // it is refused, whatever Inference-Header-Content-Length says.
    const body = `{"text_input": "${'a'.repeat(LIMIT)}"}`;
    const r = await fetch(`${s.url}/v2/models/simple/generate`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'Inference-Header-Content-Length': String(LIMIT) }, body,
    });
    expect(r.status).toBe(400);
    expect((await r.json()).error).toBe(`request JSON size of ${body.length} bytes exceeds the maximum allowed input size of ${LIMIT} bytes. Use --http-max-input-size to increase the limit.`);
  });

  it('refuses a chunked body of more than 65,536 non-empty chunks with Triton\'s text, and closes the connection', async () => {
    const sock = connect(s.http!.port, '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    let answer = '';
    sock.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    const closed = new Promise((r) => sock.once('close', r));
    sock.on('error', () => {});
    sock.write('POST /v2/logging HTTP/1.1\r\nHost: tsi\r\nTransfer-Encoding: chunked\r\n\r\n');
    // One-byte chunks, 65,537 of them: 393 KB on the wire, far under the size limit.
    sock.write(Buffer.from('1\r\n \r\n'.repeat(65_537)));
    await closed;
    expect(answer.slice(0, 12)).toBe('HTTP/1.1 400');
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).error).toBe('Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks.');
  });
});
