/**
 * TLS for the HTTP and gRPC listeners: the certificate, key and client-CA files named by the
 * `--http-*` and `--grpc-*` SSL flags, checked when the server starts (a file that is not PEM, or a key
 * that does not belong to its certificate, stops the start with a message naming the flag), then
 * reloaded without a restart when the files change or the process gets SIGHUP. Certificates are
 * rotated by tools that write files one at a time (certbot) or swap a symlinked folder (Kubernetes
 * secrets), so the folders holding the files are watched rather than the files, and a reload that
 * fails (a certificate written before its key, a mismatched pair) keeps the credentials in use, logs
 * why, and the next change tries again. New connections get the new certificate; open ones keep theirs.
 *
 * Listeners subscribe with `onChange`: the HTTP server calls `setSecureContext`, grpc-js gets the new
 * options through a ServerCredentials subclass (grpc-js's own hook for credentials that change).
 */

import { X509Certificate } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../core/index.js';

/** The files of one listener, as the flags name them. */
export interface TlsFiles {
  /** PEM certificate (chain) the server presents: `--<proto>-server-cert`. */
  cert: string;
  /** Its PEM private key: `--<proto>-server-key`. */
  key: string;
  /** PEM CA certificate(s) client certificates must chain to: `--<proto>-root-cert` (mutual TLS). */
  ca?: string;
  /** Require a client certificate signed by `ca` (`--<proto>-use-ssl-mutual`). */
  mutual?: boolean;
}

type Pem = { cert: Buffer; key: Buffer; ca?: Buffer };

/** One listener's TLS credentials, reloadable. Not shared between listeners (each has its own watcher). */
export class ReloadableTls {
  private pem: Pem;
  private readonly listeners = new Set<(ctx: SecureContextOptions) => void>();
  private unwatch?: () => void;
  private pending: Promise<boolean> = Promise.resolve(false);

  private constructor(
    readonly files: TlsFiles, private readonly flag: string, private readonly log: Logger | undefined, pem: Pem,
  ) {
    this.pem = pem;
  }

  /**
   * Reads and checks the files. `flag` is the flags' prefix (`--http`, `--grpc`) for messages; throws
   * an Error naming the flag and the file when one is missing or unusable.
   */
  static async load(files: TlsFiles, flag: string, log?: Logger): Promise<ReloadableTls> {
    if (files.mutual && !files.ca) {
      throw new Error(`${flag}-use-ssl-mutual needs ${flag}-root-cert: the CA certificate that client certificates must be signed by`);
    }
    const pem = await readPem(files, flag);
    const tls = new ReloadableTls(files, flag, log, pem);
    log?.info(`${flag.slice(2)} TLS: ${describe(pem.cert)}${files.mutual ? '; client certificates required' : ''}`);
    return tls;
  }

  get mutual(): boolean {
    return this.files.mutual === true;
  }

  /** The secure-context options now in force: certificate and key, and the client CA for mutual TLS. */
  get context(): SecureContextOptions {
    return { cert: this.pem.cert, key: this.pem.key, ...(this.mutual && this.pem.ca ? { ca: this.pem.ca } : {}) };
  }

  /** Calls `fn` with the new options after every successful reload; returns the unsubscribe. */
  onChange(fn: (ctx: SecureContextOptions) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * Reads the files again; if they changed and are usable, switches to them. Resolves true when the
   * credentials changed. Never rejects: a failure keeps the current credentials and is logged.
   * Reloads run one after the other, so a burst of events ends with the files' final state.
   */
  reload(): Promise<boolean> {
    this.pending = this.pending.then(async () => {
      let next: Pem;
      try {
        next = await readPem(this.files, this.flag);
      } catch (err) {
        this.log?.warn(`${this.flag.slice(2)} TLS: keeping the current certificate: ${(err as Error).message}`);
        return false;
      }
      if (same(next, this.pem)) return false;
      this.pem = next;
      const ctx = this.context;
      for (const fn of this.listeners) fn(ctx);
      this.log?.info(`${this.flag.slice(2)} TLS: reloaded, now ${describe(next.cert)}`);
      return true;
    });
    return this.pending;
  }

  /** Reloads when anything changes in the folders holding the files, `debounceMs` after the last event. */
  watch(debounceMs = 200): void {
    this.unwatch ??= watchFiles(
      [this.files.cert, this.files.key, ...(this.files.ca ? [this.files.ca] : [])], debounceMs, () => void this.reload(),
      (msg) => this.log?.warn(`${this.flag.slice(2)} TLS: ${msg}`),
    );
  }

  close(): void {
    this.unwatch?.();
    this.unwatch = undefined;
    this.listeners.clear();
  }
}

/**
 * Calls `onChange` `debounceMs` after the last change to `paths`, watching the folders that hold them (a
 * folder, not the file: a rename or a symlink swap replaces the file a watch would follow). Other files
 * in those folders are ignored, except names starting with `..`: Kubernetes swaps a mounted secret's
 * files by renaming its `..data` link. Returns the stop function. Folders that cannot be watched are
 * reported through `warn`; SIGHUP still reloads them.
 */
export function watchFiles(paths: readonly string[], debounceMs: number, onChange: () => void, warn: (msg: string) => void): () => void {
  let timer: NodeJS.Timeout | undefined;
  const watchers: FSWatcher[] = [];
  const names = new Map<string, Set<string>>();
  for (const p of paths) {
    const dir = dirname(resolve(p));
    names.set(dir, (names.get(dir) ?? new Set()).add(basename(p)));
  }
  for (const [dir, watched] of names) {
    try {
      const w = watch(dir, { persistent: false }, (_event, file) => {
        if (file && !watched.has(String(file)) && !String(file).startsWith('..')) return;
        clearTimeout(timer);
        timer = setTimeout(onChange, debounceMs);
        timer.unref();
      });
      w.on('error', (err) => {
        warn(`stopped watching ${dir} for changes (${err.message}); SIGHUP still reloads`);
        w.close();
      });
      watchers.push(w);
    } catch (err) {
      warn(`cannot watch ${dir} for changes (${(err as Error).message}); SIGHUP still reloads`);
    }
  }
  return () => {
    clearTimeout(timer);
    for (const w of watchers) w.close();
  };
}

async function readPem(files: TlsFiles, flag: string): Promise<Pem> {
  const read = async (path: string, which: string) => {
    try {
      return await readFile(path);
    } catch (err) {
      throw new Error(`cannot read ${flag}-${which} '${path}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const pem: Pem = {
    cert: await read(files.cert, 'server-cert'),
    key: await read(files.key, 'server-key'),
    ca: files.mutual && files.ca ? await read(files.ca, 'root-cert') : undefined,
  };
  try {
    // Parses every file and checks that the key belongs to the certificate, as a listener would.
    createSecureContext({ cert: pem.cert, key: pem.key, ca: pem.ca });
  } catch (err) {
    const why = (err as Error).message;
    const what = /key values mismatch/i.test(why)
      ? `${flag}-server-key '${basename(files.key)}' is not the key of ${flag}-server-cert '${basename(files.cert)}'`
      : `${flag}-server-cert '${files.cert}', ${flag}-server-key '${files.key}'${pem.ca ? ` or ${flag}-root-cert '${files.ca}'` : ''} is not usable PEM`;
    throw new Error(`${what} (${why})`);
  }
  return pem;
}

function same(a: Pem, b: Pem): boolean {
  return a.cert.equals(b.cert) && a.key.equals(b.key) && (a.ca === undefined ? b.ca === undefined : b.ca !== undefined && a.ca.equals(b.ca));
}

/** `subject CN=..., valid until ...`, with a warning when the certificate is not valid now. */
function describe(cert: Buffer): string {
  try {
    const x = new X509Certificate(cert);
    const now = Date.now();
    const note = Date.parse(x.validTo) < now ? ' (EXPIRED)' : Date.parse(x.validFrom) > now ? ' (NOT YET VALID)' : '';
    return `certificate '${x.subject.replace(/\n/g, ', ')}' valid until ${x.validTo}${note}`;
  } catch {
    return 'certificate loaded';
  }
}

/**
 * grpc-js server credentials that follow a ReloadableTls: grpc-js calls setSecureContext on its
 * server for every update (the mechanism behind its certificate providers). Mutual TLS requires and
 * verifies client certificates (Triton's GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY).
 */
export class ReloadingServerCredentials extends grpc.ServerCredentials {
  /** `handshakeTimeoutMs`: a connection whose TLS handshake has not finished by then is dropped. */
  constructor(tls: ReloadableTls, handshakeTimeoutMs?: number) {
    super({ requestCert: tls.mutual, rejectUnauthorized: tls.mutual, ...(handshakeTimeoutMs ? { handshakeTimeout: handshakeTimeoutMs } : {}) }, tls.context);
    tls.onChange((ctx) => this.updateSecureContextOptions(ctx));
  }

  _equals(other: grpc.ServerCredentials): boolean {
    return other === this;
  }
}
