/**
 * TLS and mutual TLS on the HTTP and gRPC ports (issue #22), with certificates openssl makes at test
 * time: tsi's own clients connect with the CA (and, for mutual TLS, a client certificate); a client
 * that trusts another CA, a client without a certificate, one whose certificate another CA signed and a
 * plaintext client are all refused; a certificate rotated on disk is served to new connections without
 * a restart (file watch), or on reloadCredentials() (what SIGHUP does) when watching is off; an unusable
 * rotation keeps the certificate in force; and a certificate flag that names an unusable file stops the
 * start with a message naming the flag.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import { connect as tcpConnect } from 'node:net';
import { addSubModel } from '../../scripts/gen-models.js';
import { HttpClient, GrpcClient, nodeHttpFetch } from '../../client/node.js';
import { startTestServer, tempRepo, type TestServer } from '../helpers/server.js';
import { makeCerts, type CertFiles, type TestCerts } from '../helpers/security-certs.js';

const a = Float32Array.from([1, 2, 3, 4]);
const inputs = [{ name: 'INPUT0', shape: [1, 4], datatype: 'FP32' as const, data: a }, { name: 'INPUT1', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 1, 1, 1]) }];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let certs: TestCerts;
let repo: ReturnType<typeof tempRepo>;

beforeAll(() => {
  certs = makeCerts();
  repo = tempRepo({
    'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n',
    'm/1/model.onnx': addSubModel('FP32', [4]),
  });
});
afterAll(() => {
  repo?.cleanup();
  certs?.cleanup();
});

/** A server certificate under its own names, so a test can rotate it without touching the originals. */
function liveCopy(name: string): CertFiles {
  const live = { cert: join(certs.dir, `${name}.pem`), key: join(certs.dir, `${name}.key`) };
  certs.install(certs.serverA, live);
  return live;
}

/** The CN of the certificate a new TLS connection to `port` is shown (h2 for gRPC, as its clients ask). */
async function servedCN(port: number, extra: ConnectionOptions = {}): Promise<string> {
  const s = tlsConnect({ host: '127.0.0.1', port, ca: readFileSync(certs.ca), servername: 'localhost', ...extra });
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('secureConnect', resolve);
      s.once('error', reject);
    });
    return String(s.getPeerCertificate().subject.CN);
  } finally {
    s.destroy();
  }
}

async function eventually(what: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await what())) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await sleep(50);
  }
}

const grpcUrl = (s: TestServer) => `127.0.0.1:${s.grpc!.port}`;
const httpsUrl = (s: TestServer) => `https://127.0.0.1:${s.http!.port}`;

describe('TLS on HTTP and gRPC (--http-use-ssl, --grpc-use-ssl)', () => {
  let s: TestServer;
  let live: CertFiles;
  beforeAll(async () => {
    live = liveCopy('live-tls');
    s = await startTestServer({
      modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', credentialsWatchMs: 50,
      httpTls: { ...live }, grpcTls: { ...live },
    });
  });
  afterAll(async () => {
    await s?.stop(1000);
  });

  it("serves tsi's clients that trust the CA, over HTTPS and gRPC", async () => {
    const http = new HttpClient({ url: httpsUrl(s), fetch: nodeHttpFetch({ ca: certs.ca }) });
    expect(Array.from((await http.infer('m', inputs)).data<Float32Array>('OUTPUT0'))).toEqual([2, 3, 4, 5]);
    const g = new GrpcClient({ url: grpcUrl(s), ssl: true, rootCertificates: readFileSync(certs.ca, 'utf8') });
    try {
      expect(Array.from((await g.infer('m', inputs)).data<Float32Array>('OUTPUT1'))).toEqual([0, 1, 2, 3]);
    } finally {
      await g.close();
    }
  });

  it('refuses the handshake of a client that trusts another CA, and plaintext clients', async () => {
    const http = new HttpClient({ url: httpsUrl(s), fetch: nodeHttpFetch({ ca: certs.otherCa }) });
    await expect(http.isServerLive()).rejects.toThrow(/unable to verify the first certificate/);
    const g = new GrpcClient({ url: grpcUrl(s), ssl: true, rootCertificates: certs.otherCa });
    try {
      await expect(g.isServerLive()).rejects.toMatchObject({ status: grpc.status.UNAVAILABLE });
    } finally {
      await g.close();
    }
    const plainGrpc = new GrpcClient({ url: grpcUrl(s) });
    try {
      await expect(plainGrpc.isServerLive()).rejects.toMatchObject({ status: grpc.status.UNAVAILABLE });
    } finally {
      await plainGrpc.close();
    }
    // Plain HTTP to the HTTPS port: no HTTP answer, the connection just ends.
    const sock = tcpConnect(s.http!.port, '127.0.0.1');
    const got: Buffer[] = [];
    sock.on('data', (d) => got.push(d));
    sock.on('error', () => {});
    sock.write('GET /v2/health/live HTTP/1.1\r\nHost: a\r\n\r\n');
    await new Promise((r) => sock.once('close', r));
    expect(Buffer.concat(got).toString('latin1')).not.toMatch(/^HTTP\//);
    expect(s.logs.some((l) => /HTTPS: TLS handshake with .* failed/.test(l))).toBe(true);
  });

  it('serves a certificate rotated on disk to new connections, and keeps it when a rotation is unusable', async () => {
    expect(await servedCN(s.http!.port)).toBe('tsi-server-a');
    expect(await servedCN(s.grpc!.port, { ALPNProtocols: ['h2'] })).toBe('tsi-server-a');
    certs.install(certs.serverB, live);
    await eventually(async () => (await servedCN(s.http!.port)) === 'tsi-server-b');
    await eventually(async () => (await servedCN(s.grpc!.port, { ALPNProtocols: ['h2'] })) === 'tsi-server-b');
    // The clients go on working across the change.
    const http = new HttpClient({ url: httpsUrl(s), fetch: nodeHttpFetch({ ca: certs.ca }) });
    expect(await http.isServerReady()).toBe(true);
    // A key written before its certificate (a mismatched pair) is not taken up.
    writeFileSync(live.key, readFileSync(certs.serverA.key));
    await eventually(async () => s.logs.some((l) => /http TLS: keeping the current certificate: .*--http-server-key '.*' is not the key of --http-server-cert/.test(l)));
    expect(await servedCN(s.http!.port)).toBe('tsi-server-b');
    expect(await servedCN(s.grpc!.port, { ALPNProtocols: ['h2'] })).toBe('tsi-server-b');
    // Once the pair matches again, it is.
    writeFileSync(live.cert, readFileSync(certs.serverA.cert));
    await eventually(async () => (await servedCN(s.http!.port)) === 'tsi-server-a');
  });
});

describe('mutual TLS (--http-use-ssl-mutual, --grpc-use-ssl-mutual)', () => {
  let s: TestServer;
  let live: CertFiles;
  beforeAll(async () => {
    live = liveCopy('live-mtls');
    const files = { ...live, ca: certs.ca, mutual: true };
    // Watching off: only reloadCredentials() (SIGHUP) reloads.
    s = await startTestServer({
      modelRepositories: [repo.path], grpcPort: 0, grpcAddress: '127.0.0.1', credentialsWatchMs: 0, httpTls: files, grpcTls: files,
    });
  });
  afterAll(async () => {
    await s?.stop(1000);
  });

  it('refuses clients without a certificate, or with one another CA signed', async () => {
    for (const client of [{}, { cert: certs.otherClient.cert, key: certs.otherClient.key }]) {
      const http = new HttpClient({ url: httpsUrl(s), fetch: nodeHttpFetch({ ca: certs.ca, ...client }) });
      await expect(http.isServerLive()).rejects.toThrow(/certificate|socket hang up|ECONNRESET/i);
      const g = new GrpcClient({
        url: grpcUrl(s), ssl: true, rootCertificates: certs.ca,
        ...('cert' in client ? { privateKey: client.key, certificateChain: client.cert } : {}),
      });
      try {
        await expect(g.isServerLive()).rejects.toMatchObject({ status: grpc.status.UNAVAILABLE });
      } finally {
        await g.close();
      }
    }
  });

  it('serves clients whose certificate the root CA signed', async () => {
    const http = new HttpClient({ url: httpsUrl(s), fetch: nodeHttpFetch({ ca: certs.ca, cert: certs.client.cert, key: certs.client.key }) });
    expect(Array.from((await http.infer('m', inputs)).data<Float32Array>('OUTPUT0'))).toEqual([2, 3, 4, 5]);
    const g = new GrpcClient({ url: grpcUrl(s), ssl: true, rootCertificates: certs.ca, privateKey: certs.client.key, certificateChain: certs.client.cert });
    try {
      expect(Array.from((await g.infer('m', inputs)).data<Float32Array>('OUTPUT0'))).toEqual([2, 3, 4, 5]);
    } finally {
      await g.close();
    }
  });

  it('takes a rotated certificate on reloadCredentials() (SIGHUP), not before', async () => {
    const withCert = { cert: readFileSync(certs.client.cert), key: readFileSync(certs.client.key) };
    // This server watches no file (it says so at start): the new files wait for the reload.
    expect(s.logs.some((l) => l.includes('credentials: TLS and API key files are not watched'))).toBe(true);
    certs.install(certs.serverB, live);
    expect(await servedCN(s.http!.port, withCert)).toBe('tsi-server-a');
    await s.reloadCredentials();
    expect(await servedCN(s.http!.port, withCert)).toBe('tsi-server-b');
    expect(await servedCN(s.grpc!.port, { ...withCert, ALPNProtocols: ['h2'] })).toBe('tsi-server-b');
    expect(s.logs.some((l) => /grpc TLS: reloaded, now certificate 'CN=tsi-server-b'/.test(l))).toBe(true);
  });
});

describe('unusable TLS settings stop the start', () => {
  it('names the flag and the file', async () => {
    const mismatched = { cert: certs.serverA.cert, key: certs.serverB.key };
    await expect(startTestServer({ modelRepositories: [repo.path], httpTls: mismatched }))
      .rejects.toThrow(/--http-server-key 'server-b\.key' is not the key of --http-server-cert 'server-a\.pem'/);
    await expect(startTestServer({ modelRepositories: [repo.path], grpcPort: 0, grpcTls: { ...certs.serverA, mutual: true } }))
      .rejects.toThrow('--grpc-use-ssl-mutual needs --grpc-root-cert');
    await expect(startTestServer({ modelRepositories: [repo.path], httpTls: { ...certs.serverA, cert: join(certs.dir, 'missing.pem') } }))
      .rejects.toThrow(/cannot read --http-server-cert '.*missing\.pem': ENOENT/);
  });
});
