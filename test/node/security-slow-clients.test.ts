/**
 * Slow clients against the whole server over HTTPS (issue #22), with the timeouts set small through
 * startServer's options (`--http-headers-timeout-secs`, `--http-request-timeout-secs`): a connection
 * that never starts its TLS handshake, a request head and a request body trickled a byte at a time
 * (the connection never goes quiet, so an idle timeout would not catch them) are all cut off, the
 * trickled ones with a 408 and a JSON error; and a crowd of such connections does not starve a real
 * client, whose inferences are answered while the crowd is still connected. Each trickle would take
 * far longer than the test if the server let it run: its end is what shows the cut-off. Over gRPC
 * (`--grpc-handshake-timeout-secs`, TLS and plaintext): a connection that never starts its TLS
 * handshake, or never sends the HTTP/2 preface, is closed, and a client's connection that outlives
 * the window is kept.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { addSubModel } from '../../scripts/gen-models.js';
import { GrpcClient, HttpClient, nodeHttpFetch } from '../../client/node.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { makeCerts, type TestCerts } from '../helpers/security-certs.js';

const HEADERS_MS = 1000;
const REQUEST_MS = 2000;
const BYTE_EVERY_MS = 50;

let certs: TestCerts;
let repo: ReturnType<typeof tempRepo>;
let s: TestServer;

beforeAll(async () => {
  certs = makeCerts();
  repo = tempRepo({
    'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n',
    'm/1/model.onnx': addSubModel('FP32', [4]),
  });
  s = await startTestServer({
    modelRepositories: [repo.path], httpTls: { ...certs.serverA }, credentialsWatchMs: 0,
    httpHeadersTimeoutMs: HEADERS_MS, httpRequestTimeoutMs: REQUEST_MS,
    grpcPort: 0, grpcAddress: '127.0.0.1', grpcTls: { ...certs.serverA }, grpcHandshakeTimeoutMs: HEADERS_MS,
  });
});
afterAll(async () => {
  await s?.stop(1000);
  repo?.cleanup();
  certs?.cleanup();
});

interface Slow {
  /** Everything the server sent. */
  data(): string;
  closed: Promise<void>;
  isClosed(): boolean;
}

/** Watches a socket until it closes. */
function watchSocket(sock: Socket): Slow {
  const chunks: Buffer[] = [];
  let done = false;
  sock.on('data', (d: Buffer) => chunks.push(d));
  sock.on('error', () => {});
  const closed = new Promise<void>((resolve) => sock.once('close', () => {
    done = true;
    resolve();
  }));
  return { data: () => Buffer.concat(chunks).toString('latin1'), closed, isClosed: () => done };
}

/** A TLS connection that sends `at once`, then `text` one byte every BYTE_EVERY_MS until the server closes it. */
async function trickle(text: string, atOnce = ''): Promise<Slow> {
  const sock = tlsConnect({ host: '127.0.0.1', port: s.http!.port, ca: readFileSync(certs.ca), servername: 'localhost' });
  await new Promise<void>((resolve, reject) => {
    sock.once('secureConnect', resolve);
    sock.once('error', reject);
  });
  const slow = watchSocket(sock);
  if (atOnce) sock.write(atOnce);
  void (async () => {
    for (let i = 0; i < text.length && !slow.isClosed(); i++) {
      sock.write(text[i]!);
      await new Promise((r) => setTimeout(r, BYTE_EVERY_MS));
    }
  })();
  return slow;
}

/** The 408 a cut-off request gets: its status line and JSON error. */
function refusal(slow: Slow): { status: number; error: string } {
  const text = slow.data();
  return { status: Number(text.split(' ')[1]), error: JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)).error };
}

/** 10 s of head, at one byte per BYTE_EVERY_MS. */
const slowHead = 'POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\nX-Slow: ' + 'x'.repeat(200);
/** A complete head, to be sent at once, then 10 s of body. */
const fullHead = 'POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n';
const slowBody = ' '.repeat(200);

describe('slow clients over HTTPS', () => {
  it('closes a connection that never starts its TLS handshake', async () => {
    const idle = watchSocket(tcpConnect(s.http!.port, '127.0.0.1'));
    await idle.closed;
    expect(idle.data()).toBe('');
  });

  it('answers 408 to a head trickled a byte at a time', async () => {
    const slow = await trickle(slowHead);
    await slow.closed;
    expect(refusal(slow)).toEqual({ status: 408, error: `the request head did not arrive within ${HEADERS_MS} ms` });
  });

  it('answers 408 to a body trickled a byte at a time', async () => {
    const slow = await trickle(slowBody, fullHead);
    await slow.closed;
    expect(refusal(slow)).toEqual({ status: 408, error: `the request body did not arrive within ${REQUEST_MS} ms` });
  });

  it('answers a real client while a crowd of slow ones is connected, then cuts the crowd off', async () => {
    const crowd: Slow[] = [];
    for (let i = 0; i < 40; i++) crowd.push(watchSocket(tcpConnect(s.http!.port, '127.0.0.1')));
    crowd.push(...await Promise.all(Array.from({ length: 40 }, () => trickle(slowHead))));
    crowd.push(...await Promise.all(Array.from({ length: 40 }, () => trickle(slowBody, fullHead))));
    const client = new HttpClient({ url: `https://127.0.0.1:${s.http!.port}`, fetch: nodeHttpFetch({ ca: certs.ca }) });
    const inputs = [
      { name: 'INPUT0', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 2, 3, 4]) },
      { name: 'INPUT1', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 1, 1, 1]) },
    ];
    for (let i = 0; i < 20; i++) {
      expect(Array.from((await client.infer('m', inputs)).data<Float32Array>('OUTPUT0'))).toEqual([2, 3, 4, 5]);
    }
    // The trickling part of the crowd was still connected while the client was served.
    expect(crowd.slice(40).filter((c) => !c.isClosed()).length).toBeGreaterThan(0);
    await Promise.all(crowd.map((c) => c.closed));
    expect(crowd.slice(40).map((c) => refusal(c).status)).toEqual(Array(80).fill(408));
  }, 30_000);
});

describe('slow clients over gRPC', () => {
  const silentFor = (port: number) => {
    const t0 = Date.now();
    const sock = watchSocket(tcpConnect(port, '127.0.0.1'));
    return sock.closed.then(() => ({ ms: Date.now() - t0, data: sock.data() }));
  };

  it('closes a TLS connection that never starts its handshake, and one that never sends the HTTP/2 preface', async () => {
    const noTls = silentFor(s.grpc!.port);
    const tls = tlsConnect({ host: '127.0.0.1', port: s.grpc!.port, ca: readFileSync(certs.ca), servername: 'localhost', ALPNProtocols: ['h2'] });
    await new Promise<void>((resolve, reject) => {
      tls.once('secureConnect', resolve);
      tls.once('error', reject);
    });
    const noPreface = watchSocket(tls);
    const t0 = Date.now();
    expect((await noTls).ms).toBeGreaterThanOrEqual(HEADERS_MS - 50);
    await noPreface.closed;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(HEADERS_MS - 50);
  });

  it('keeps a client\'s connection past the handshake window', async () => {
    const g = new GrpcClient({ url: `127.0.0.1:${s.grpc!.port}`, ssl: true, rootCertificates: readFileSync(certs.ca, 'utf8') });
    try {
      expect(await g.isServerLive()).toBe(true);
      const channel = (g as unknown as { stub: grpc.Client }).stub.getChannel();
      await new Promise((r) => setTimeout(r, HEADERS_MS * 2));
      expect(channel.getConnectivityState(false)).toBe(grpc.connectivityState.READY);
      expect(await g.isServerLive()).toBe(true);
    } finally {
      await g.close();
    }
  });

  it('closes a plaintext connection that never sends the preface, or sends half of it', async () => {
    const plain = await startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', grpcHandshakeTimeoutMs: HEADERS_MS });
    try {
      const silent = silentFor(plain.grpc!.port);
      const halfSock = tcpConnect(plain.grpc!.port, '127.0.0.1');
      const half = watchSocket(halfSock);
      halfSock.write('PRI * HTTP/2.0\r\n');
      const client = new GrpcClient({ url: `127.0.0.1:${plain.grpc!.port}` });
      try {
        expect(await client.isServerLive()).toBe(true);
        expect((await silent).ms).toBeGreaterThanOrEqual(HEADERS_MS - 50);
        await half.closed;
        expect(await client.isServerLive()).toBe(true);
      } finally {
        await client.close();
      }
    } finally {
      await plain.stop(1000);
    }
  });
});
