/**
 * API keys on the Node listeners (`--api-key`, `--api-key-file`): which key opens which API categories
 * is core's (extensions.ts `parseApiKey`, `checkApiKey`); matching a presented key against the
 * configured ones is here, because it needs node:crypto. Keys are kept only as SHA-256 digests and a
 * presented key is hashed too, so every comparison is crypto.timingSafeEqual over two 32-byte
 * digests: neither its time nor its path depends on the presented key's length or on how much of it
 * matches, and every configured key is compared (no early exit), so the time does not say which one
 * matched either.
 *
 * The key file is read again on SIGHUP and when it changes, so keys rotate without a restart; a file
 * that no longer parses (or is gone) keeps the keys in force and logs why. Keys given on the command
 * line stay whatever the file does.
 *
 * Anthropic's clients send the key as `x-api-key` rather than `Authorization: Bearer`; either is read,
 * and the Messages routes' refusals are in Anthropic's error shape.
 *
 * HTTP asks before a request reaches the app or the infer shortcut: a missing or unknown key is 401
 * with `WWW-Authenticate: Bearer`, a key without the request's category 403; gRPC answers
 * UNAUTHENTICATED / PERMISSION_DENIED from a server interceptor. Health endpoints (and the standard
 * gRPC health service) stay open for probes; CORS preflights carry no credentials and pass.
 */

import { createHash, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import {
  anthropicErrorBody, checkApiKey, grpcCategory, httpCategory, parseApiKey, parseApiKeyFile,
  type ApiCategory, type ApiKeyRule, type ApiKeyScope, type AuthRefusal, type HttpReply, type Logger,
} from '../../core/index.js';
import { watchFiles } from './tls.js';

interface Entry {
  digest: Buffer;
  scope: ApiKeyScope;
}

const digest = (key: string) => createHash('sha256').update(key, 'utf8').digest();
const toEntries = (rules: readonly ApiKeyRule[]): Entry[] => rules.map((r) => ({ digest: digest(r.key), scope: r.scope }));

export interface ApiKeyOptions {
  /** `--api-key` values, `[<categories>:]<key>`. */
  keys?: readonly string[];
  /** `--api-key-file`: one `[<categories>:]<key>` a line, `#` comments. */
  file?: string;
  log?: Logger;
}

export class ApiKeyring {
  private fileEntries: Entry[];
  /** The key file's text now in force, so a reload of an unchanged file changes and logs nothing. */
  private fileText: string;
  private unwatch?: () => void;

  private constructor(private readonly flagEntries: Entry[], file: { entries: Entry[]; text: string }, private readonly opts: ApiKeyOptions) {
    this.fileEntries = file.entries;
    this.fileText = file.text;
  }

  /** Parses the flags and reads the file; throws a message naming the flag or file line (never the key). */
  static async create(opts: ApiKeyOptions): Promise<ApiKeyring> {
    const flags = toEntries((opts.keys ?? []).map((k) => parseApiKey(k, '--api-key')));
    const file = opts.file !== undefined ? await readKeyFile(opts.file) : { rules: [], text: '' };
    if (opts.file !== undefined && file.rules.length === 0) throw new Error(`--api-key-file '${opts.file}' holds no key`);
    return new ApiKeyring(flags, { entries: toEntries(file.rules), text: file.text }, opts);
  }

  get size(): number {
    return this.flagEntries.length + this.fileEntries.length;
  }

  /** The scope of the configured key equal to `presented` (the union, if several are), or undefined. */
  readonly match = (presented: string): ApiKeyScope | undefined => {
    const d = digest(presented);
    let all = false;
    let some: Set<ApiCategory> | undefined;
    for (const e of this.flagEntries.concat(this.fileEntries)) {
      if (!timingSafeEqual(d, e.digest)) continue;
      if (e.scope === 'all') all = true;
      else for (const c of e.scope) (some ??= new Set()).add(c);
    }
    return all ? 'all' : some;
  };

  /** Re-reads the key file (no-op without one). Never rejects: a bad file keeps the keys in force. */
  async reload(): Promise<boolean> {
    const file = this.opts.file;
    if (file === undefined) return false;
    try {
      const { rules, text } = await readKeyFile(file);
      if (text === this.fileText) {
        this.opts.log?.verbose(1, `API keys: ${file} read again, the same keys`);
        return false;
      }
      if (rules.length === 0) throw new Error('it holds no key');
      this.fileEntries = toEntries(rules);
      this.fileText = text;
      this.opts.log?.info(`API keys: read ${rules.length} key(s) from ${file}`);
      return true;
    } catch (err) {
      this.opts.log?.warn(`API keys: keeping the keys in force; --api-key-file '${file}': ${(err as Error).message}`);
      return false;
    }
  }

  /** Reloads the key file when it changes. */
  watch(debounceMs = 200): void {
    if (this.opts.file === undefined || this.unwatch) return;
    this.unwatch = watchFiles([this.opts.file], debounceMs, () => void this.reload(), (m) => this.opts.log?.warn(`API keys: ${m}`));
  }

  close(): void {
    this.unwatch?.();
    this.unwatch = undefined;
  }
}

async function readKeyFile(file: string): Promise<{ rules: ApiKeyRule[]; text: string }> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read --api-key-file '${file}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return { rules: parseApiKeyFile(text, file), text };
}

/**
 * The path a request's target reaches in the app: dot segments resolved (also `%2e%2e`, as the URL
 * parser does for the app's Request) and %-escapes decoded as the router decodes them, so that
 * `/v2/health/../repository/...` is judged as the repository API it reaches, not as health.
 */
function routedPath(target: string): string {
  let path: string;
  try {
    path = new URL(target, 'http://localhost').pathname;
  } catch {
    return target;
  }
  try {
    return decodeURI(path);
  } catch {
    return path;
  }
}

function refusalReply(r: AuthRefusal, path: string): HttpReply {
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (r.status === 'unauthenticated') headers['WWW-Authenticate'] = 'Bearer realm="tsi"';
  const status = r.status === 'unauthenticated' ? 401 : 403;
  // Anthropic's clients read their own error shape.
  const body = path === '/v1/messages' || path.startsWith('/v1/messages/') ? anthropicErrorBody(status, r.message) : { error: r.message };
  return { status, headers, body: JSON.stringify(body) };
}

/** The HTTP listener's check: undefined lets the request on, a reply refuses it. */
export function httpAuthorizer(ring: ApiKeyring): (method: string, target: string, header: (name: string) => string | undefined) => HttpReply | undefined {
  return (method, target, header) => {
    // A CORS preflight cannot carry credentials; the request it announces is checked.
    if (method === 'OPTIONS' && header('access-control-request-method') !== undefined) return undefined;
    const path = routedPath(target);
    // Anthropic's clients send the key as `x-api-key`; it is the same key.
    const xKey = header('x-api-key');
    const authorization = header('authorization') ?? (xKey !== undefined ? `Bearer ${xKey}` : undefined);
    const refusal = checkApiKey(httpCategory(path), authorization, ring.match);
    return refusal && refusalReply(refusal, path);
  };
}

const INFERENCE_SERVICE = '/inference.GRPCInferenceService/';
const HEALTH_SERVICE = '/grpc.health.v1.Health/';

/** The gRPC check by method path (`/<service>/<method>`) and `authorization` metadata. */
export function grpcAuthorizer(ring: ApiKeyring): (path: string, authorization: string | undefined) => AuthRefusal | undefined {
  return (path, authorization) => {
    const category: ApiCategory | undefined = path.startsWith(HEALTH_SERVICE)
      ? 'health'
      : path.startsWith(INFERENCE_SERVICE) ? grpcCategory(path.slice(INFERENCE_SERVICE.length)) : undefined;
    return checkApiKey(category, authorization, ring.match);
  };
}
