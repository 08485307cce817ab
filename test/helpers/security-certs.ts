/**
 * Certificates for the TLS tests, made with openssl at test time in a temporary folder (no key is ever
 * committed): a CA, two server certificates it signs for 127.0.0.1 and localhost (`a` and `b`, to see a
 * reload switch from one to the other), a client certificate it signs, and a second, unrelated CA with
 * a client certificate of its own. The commands are the ones docs/security.md shows (EC P-256 keys).
 */

import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface CertFiles {
  cert: string;
  key: string;
}

export interface TestCerts {
  dir: string;
  /** The CA that signs the servers and `client`. */
  ca: string;
  serverA: CertFiles;
  serverB: CertFiles;
  client: CertFiles;
  /** A CA nobody here trusts, and a client certificate it signed. */
  otherCa: string;
  otherClient: CertFiles;
  /** Copies `from` over the files `to` names (a certificate rotation). */
  install(from: CertFiles, to: CertFiles): void;
  cleanup(): void;
}

const KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export function makeCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'tsi-certs-'));
  const p = (name: string) => join(dir, name);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ca = (name: string, cn: string) => {
    ssl('req', '-x509', ...KEY, '-keyout', p(`${name}.key`), '-out', p(`${name}.pem`), '-days', '2', '-subj', `/CN=${cn}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
    return p(`${name}.pem`);
  };
  const leaf = (name: string, cn: string, signer: string, ext: string): CertFiles => {
    writeFileSync(p(`${name}.ext`), ext);
    ssl('req', ...KEY, '-keyout', p(`${name}.key`), '-out', p(`${name}.csr`), '-subj', `/CN=${cn}`);
    ssl('x509', '-req', '-in', p(`${name}.csr`), '-CA', p(`${signer}.pem`), '-CAkey', p(`${signer}.key`), '-CAcreateserial',
      '-days', '2', '-extfile', p(`${name}.ext`), '-out', p(`${name}.pem`));
    return { cert: p(`${name}.pem`), key: p(`${name}.key`) };
  };
  const server = 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n';
  const client = 'extendedKeyUsage=clientAuth\n';
  const caFile = ca('ca', 'tsi test CA');
  const otherCa = ca('other-ca', 'unrelated CA');
  return {
    dir,
    ca: caFile,
    serverA: leaf('server-a', 'tsi-server-a', 'ca', server),
    serverB: leaf('server-b', 'tsi-server-b', 'ca', server),
    client: leaf('client', 'tsi-client', 'ca', client),
    otherCa,
    otherClient: leaf('other-client', 'intruder', 'other-ca', client),
    install(from, to) {
      copyFileSync(from.key, to.key);
      copyFileSync(from.cert, to.cert);
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
