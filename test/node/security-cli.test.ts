/**
 * `tsi-node serve` with the security flags (issue #22), as an operator starts it: HTTPS with client
 * certificates (`--http-use-ssl-mutual`, `--http-server-cert`, `--http-server-key`, `--http-root-cert`),
 * gRPC over TLS with Triton's flag names, an API key, explicit model control with code upload left
 * off, and the timeouts in seconds. SIGHUP reloads the certificates and leaves the server running (its
 * default would end the process). Runs the TypeScript CLI through tsx, so no build is needed.
 */

import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { addSubModel } from '../../scripts/gen-models.js';
import { HttpClient, GrpcClient, nodeHttpFetch } from '../../client/node.js';
import { ROOT, tempRepo } from '../helpers/server.js';
import { makeCerts } from '../helpers/security-certs.js';

describe('tsi-node serve with TLS, an API key and SIGHUP', () => {
  it('serves only authenticated clients over TLS, refuses code upload, and reloads certificates on SIGHUP', async () => {
    const certs = makeCerts();
    const repo = tempRepo({
      'm/config.pbtxt': 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]\n',
      'm/1/model.onnx': addSubModel('FP32', [4]),
    });
    const live = { cert: join(certs.dir, 'live.pem'), key: join(certs.dir, 'live.key') };
    certs.install(certs.serverA, live);
    const KEY = 'k-cli-test-key';
    const args = [
      'serve', '--model-repository', repo.path, '--http-port', '0', '--grpc-port', '0', '--allow-metrics', 'false',
      '--http-address', '127.0.0.1', '--grpc-address', '127.0.0.1', '--model-control-mode', 'explicit', '--load-model', 'm',
      '--http-use-ssl-mutual', 'true', '--http-server-cert', live.cert, '--http-server-key', live.key, '--http-root-cert', certs.ca,
      '--grpc-use-ssl', 'true', '--grpc-server-cert', live.cert, '--grpc-server-key', live.key,
      '--api-key', KEY, '--http-headers-timeout-secs', '5', '--http-request-timeout-secs', '10',
    ];
    const code = `import(${JSON.stringify(join(ROOT, 'runtime-node', 'cli.ts'))}).then((m) => m.main(['node', 'tsi-node', ...${JSON.stringify(args)}]))`;
    const child = spawn(process.execPath, ['--import', 'tsx', '-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const waitFor = (re: RegExp) => new Promise<RegExpExecArray>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${re} in: ${err}`)), 60_000);
      const check = () => {
        const m = re.exec(err);
        if (!m) return;
        clearTimeout(timer);
        child.stderr.off('data', check);
        resolve(m);
      };
      child.stderr.on('data', check);
      child.once('exit', (c) => reject(new Error(`exited with ${c}: ${err}`)));
      check();
    });
    try {
      const [h, g] = await Promise.all([
        waitFor(/Started HTTPService at 127\.0\.0\.1:(\d+)/), waitFor(/Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/),
      ]);
      const httpPort = Number(h[1]);
      const grpcUrl = `127.0.0.1:${g[1]}`;
      const mtls = nodeHttpFetch({ ca: certs.ca, cert: certs.client.cert, key: certs.client.key });
      const http = new HttpClient({ url: `https://127.0.0.1:${httpPort}`, fetch: mtls, apiKey: KEY });
      const inputs = [
        { name: 'INPUT0', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 2, 3, 4]) },
        { name: 'INPUT1', shape: [1, 4], datatype: 'FP32' as const, data: Float32Array.from([1, 1, 1, 1]) },
      ];
      expect(Array.from((await http.infer('m', inputs)).data<Float32Array>('OUTPUT0'))).toEqual([2, 3, 4, 5]);
      // Without the key, 401; without the client certificate, no connection at all.
      await expect(new HttpClient({ url: `https://127.0.0.1:${httpPort}`, fetch: mtls }).infer('m', inputs)).rejects.toMatchObject({ status: 401 });
      await expect(new HttpClient({ url: `https://127.0.0.1:${httpPort}`, fetch: nodeHttpFetch({ ca: certs.ca }), apiKey: KEY }).isServerLive())
        .rejects.toThrow();
      // Model code upload is off unless asked for.
      const load = await mtls(`https://127.0.0.1:${httpPort}/v2/repository/models/evil/load`, {
        method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ parameters: { config: '{"name":"evil","backend":"javascript"}', 'file:1/model.js': Buffer.from('export default class {}').toString('base64') } }),
      });
      expect(load.status).toBe(403);
      expect(JSON.parse(await load.text()).error).toMatch(/--allow-model-code-upload=true/);
      const grpc = new GrpcClient({ url: grpcUrl, ssl: true, rootCertificates: certs.ca, apiKey: KEY });
      try {
        expect(await grpc.isModelReady('m')).toBe(true);
      } finally {
        await grpc.close();
      }

      certs.install(certs.serverB, live);
      child.kill('SIGHUP');
      await waitFor(/SIGHUP received: reloading TLS certificates and API keys/);
      await waitFor(/http TLS: reloaded, now certificate 'CN=tsi-server-b'/);
      const s = tlsConnect({
        host: '127.0.0.1', port: httpPort, servername: 'localhost', ca: readFileSync(certs.ca),
        cert: readFileSync(certs.client.cert), key: readFileSync(certs.client.key),
      });
      const cn = await new Promise<string>((resolve, reject) => {
        s.once('secureConnect', () => resolve(String(s.getPeerCertificate().subject.CN)));
        s.once('error', reject);
      });
      s.destroy();
      expect(cn).toBe('tsi-server-b');
      expect(child.exitCode).toBeNull();
      expect(await http.isServerReady()).toBe(true);
    } finally {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
      repo.cleanup();
      certs.cleanup();
    }
  }, 90_000);
});
