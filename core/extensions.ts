/**
 * The state behind Triton's protocol extensions beyond inference — shared memory regions, trace and log
 * settings, explicit model control — gathered in one object that every transport of a server shares, so
 * a region registered over HTTP is usable over gRPC and a verbose level set over gRPC shows over HTTP.
 * Also the restricted-API table (`--http-restricted-api`, `--grpc-restricted-protocol`): Triton's
 * category names and which endpoints each covers, parsed once for both transports; and API keys
 * (`--api-key`, `--api-key-file`), scoped by the same categories. Comparing a presented key with the
 * configured ones is the runtime's (in constant time, which needs its crypto): core parses the specs
 * and decides what a request may do once the runtime says which scope, if any, its key has.
 */

import { TsiError } from './errors.js';
import { controllableLogger, LogSettings } from './settings.js';
import { ModelControl, memoryStager, type ModelCodePolicy, type ModelFileStager } from './repository/model-control.js';
import type { InferenceServer } from './server.js';
import { SharedMemoryManager, type SystemShmProvider } from './shared-memory.js';
import { TraceManager, type TraceExporter, type TraceSetting, type TraceWriter } from './trace.js';

export interface ExtensionOptions {
  /** --allow-client-shm (default false). */
  allowClientShm?: boolean;
  shmProvider?: SystemShmProvider;
  shmUnavailableReason?: string;
  trace?: Partial<TraceSetting>;
  traceWriter?: TraceWriter;
  /** Where traces go in "opentelemetry" mode (the Node runtime's otel/ room). */
  traceExporter?: TraceExporter;
  /** How `file:` overrides of an explicit load become a model folder (default: in memory). */
  stageModelFiles?: ModelFileStager;
  /** What a load request may bring besides weights and configs (default: no code, see model-control.ts). */
  modelCode?: ModelCodePolicy;
  /** The log file path to report in `/v2/logging` ('' = console). */
  logFile?: string;
}

export class ServerExtensions {
  readonly sharedMemory: SharedMemoryManager;
  readonly traces: TraceManager;
  readonly logging: LogSettings;
  readonly modelControl: ModelControl;

  constructor(readonly server: InferenceServer, opts: ExtensionOptions = {}) {
    this.sharedMemory = new SharedMemoryManager({
      allowClientShm: opts.allowClientShm ?? false, provider: opts.shmProvider, unavailableReason: opts.shmUnavailableReason,
    });
    this.traces = new TraceManager(opts.trace ?? {}, server.clock, opts.traceWriter, server.log, opts.traceExporter);
    this.logging = new LogSettings(controllableLogger(server.log).settings, opts.logFile ?? '');
    this.modelControl = new ModelControl(server, opts.stageModelFiles ?? memoryStager, opts.modelCode);
    server.modelControl = this.modelControl;
  }

  /** Writes pending traces, unregisters regions and discards staged model folders. */
  async close(): Promise<void> {
    await this.traces.flush();
    await this.sharedMemory.close();
    await this.modelControl.close();
  }
}

export const API_CATEGORIES = [
  'health', 'metadata', 'inference', 'shared-memory', 'model-config', 'model-repository', 'statistics', 'trace', 'logging',
] as const;
export type ApiCategory = (typeof API_CATEGORIES)[number];

/** Category → the header (HTTP) or metadata key (gRPC) and the value it must carry. */
export type Restrictions = Map<ApiCategory, { key: string; value: string }>;

/**
 * Parses `<category>[,<category>...]:<key>=<value>` specs. A category may appear in one spec only.
 * `keyPrefix` is prepended to the key (gRPC uses Triton's `triton-grpc-protocol-`). Keys keep their
 * case for messages; HTTP headers and gRPC metadata compare them case-insensitively.
 */
export function parseRestrictions(specs: readonly string[], flag: string, keyPrefix = ''): Restrictions {
  const out: Restrictions = new Map();
  for (const spec of specs) {
    const m = /^([^:]+):([^=]+)=(.*)$/.exec(spec);
    if (!m) throw new TsiError('INVALID_ARG', `${flag} expects <category>[,<category>...]:<key>=<value>, got '${spec}'`);
    const key = keyPrefix + m[2]!.trim();
    // Triton's words (command_line_parser.cc): an HTTP category is an "api", a gRPC one a "protocol".
    const kind = flag.includes('grpc') ? 'protocol' : 'api';
    for (const raw of m[1]!.split(',')) {
      const cat = raw.trim() as ApiCategory;
      if (!API_CATEGORIES.includes(cat)) {
        throw new TsiError('INVALID_ARG', `unknown restricted ${kind} '${raw.trim()}' (${flag}: expected one of ${API_CATEGORIES.join(', ')})`);
      }
      if (out.has(cat)) throw new TsiError('INVALID_ARG', `restricted ${kind} '${cat}' can not be specified in multiple config groups (${flag})`);
      out.set(cat, { key, value: m[3]! });
    }
  }
  return out;
}

/** The category of a v2 HTTP path, as Triton's handlers assign them; undefined for unknown paths. */
export function httpCategory(path: string): ApiCategory | undefined {
  if (path === '/v2' || path === '/v2/') return 'metadata';
  if (path.startsWith('/v2/health/')) return 'health';
  if (path === '/v2/logging') return 'logging';
  if (path.startsWith('/v2/trace/')) return 'trace';
  if (path.startsWith('/v2/repository')) return 'model-repository';
  if (path.startsWith('/v2/systemsharedmemory') || path.startsWith('/v2/cudasharedmemory')) return 'shared-memory';
  if (path === '/v2/models/stats') return 'statistics';
  // tsi's dashboard (runtime-node/dashboard) shows what the statistics API does.
  if (path === '/dashboard' || path.startsWith('/dashboard/')) return 'statistics';
  if (path.startsWith('/v2/models/')) {
    const m = /^\/v2\/models\/[^/]+(?:\/versions\/[^/]+)?(?:\/(.*))?$/.exec(path);
    const tail = m?.[1] ?? '';
    if (tail === '') return 'metadata';
    if (tail === 'ready') return 'health';
    if (tail === 'infer' || tail === 'generate' || tail === 'generate_stream') return 'inference';
    if (tail === 'config') return 'model-config';
    if (tail === 'stats') return 'statistics';
    if (tail === 'trace/setting') return 'trace';
  }
  return undefined;
}

/** The category of a gRPC method of inference.GRPCInferenceService. */
export function grpcCategory(method: string): ApiCategory | undefined {
  switch (method) {
    case 'ServerLive': case 'ServerReady': case 'ModelReady': return 'health';
    case 'ServerMetadata': case 'ModelMetadata': return 'metadata';
    case 'ModelInfer': case 'ModelStreamInfer': return 'inference';
    case 'ModelConfig': return 'model-config';
    case 'ModelStatistics': return 'statistics';
    case 'RepositoryIndex': case 'RepositoryModelLoad': case 'RepositoryModelUnload': return 'model-repository';
    case 'TraceSetting': return 'trace';
    case 'LogSettings': return 'logging';
    default:
      return method.includes('SharedMemory') ? 'shared-memory' : undefined;
  }
}

/** The API categories a key opens: some, or all of them. */
export type ApiKeyScope = ReadonlySet<ApiCategory> | 'all';

export interface ApiKeyRule {
  key: string;
  scope: ApiKeyScope;
}

/**
 * Parses `[<category>[,<category>...]:]<key>` (`--api-key`, or a line of `--api-key-file`): without
 * categories, or with `*`, the key opens every API. Health is never behind a key (probes and load
 * balancers must reach it), so naming it is an error rather than a silent no-op. `source` names the
 * flag or file line in errors, which never repeat the key.
 */
export function parseApiKey(spec: string, source: string): ApiKeyRule {
  const colon = spec.indexOf(':');
  const key = colon < 0 ? spec.trim() : spec.slice(colon + 1).trim();
  let scope: ApiKeyScope = 'all';
  if (colon >= 0) {
    const names = spec.slice(0, colon).split(',').map((n) => n.trim());
    if (!(names.length === 1 && names[0] === '*')) {
      const set = new Set<ApiCategory>();
      for (const n of names) {
        if (n === 'health') throw new TsiError('INVALID_ARG', `${source}: health endpoints never need an API key (probes must reach them); leave 'health' out`);
        if (!API_CATEGORIES.includes(n as ApiCategory)) {
          throw new TsiError('INVALID_ARG', `${source}: unknown API category '${n}'; expected [<category>[,<category>...]:]<key> with categories among ${API_CATEGORIES.filter((c) => c !== 'health').join(', ')} (or * for all)`);
        }
        set.add(n as ApiCategory);
      }
      scope = set;
    }
  }
  // It travels in an HTTP header and gRPC metadata: visible ASCII only.
  if (!/^[\x21-\x7e]+$/.test(key)) throw new TsiError('INVALID_ARG', `${source}: an API key must be one or more visible ASCII characters, without spaces`);
  return { key, scope };
}

/** An API key file: one `[<categories>:]<key>` a line; blank lines and `#` comments are skipped. */
export function parseApiKeyFile(text: string, file: string): ApiKeyRule[] {
  const out: ApiKeyRule[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    const t = line.trim();
    if (t !== '' && !t.startsWith('#')) out.push(parseApiKey(t, `${file}:${i + 1}`));
  });
  return out;
}

/** The key of an `Authorization: Bearer <key>` value (scheme case-insensitive, RFC 6750). */
export function bearerKey(authorization: string | undefined): string | undefined {
  const m = authorization === undefined ? null : /^\s*Bearer +(\S+)\s*$/i.exec(authorization);
  return m ? m[1] : undefined;
}

/** Why a request may not go on: no or an unknown key (HTTP 401, gRPC UNAUTHENTICATED), or a key without this API (403, PERMISSION_DENIED). */
export interface AuthRefusal {
  status: 'unauthenticated' | 'forbidden';
  message: string;
}

/**
 * Whether a request may reach `category` with its Authorization value. `category` undefined is a path
 * outside Triton's categories (an unknown path, a route a runtime added): only a key for every API
 * opens it. `match` returns the scope of a configured key equal to the presented one, or undefined.
 */
export function checkApiKey(
  category: ApiCategory | undefined, authorization: string | undefined, match: (key: string) => ApiKeyScope | undefined,
): AuthRefusal | undefined {
  if (category === 'health') return undefined;
  const key = bearerKey(authorization);
  if (key === undefined) {
    return {
      status: 'unauthenticated',
      message: authorization === undefined
        ? `this API needs an API key: send it as 'Authorization: Bearer <key>'`
        : `the Authorization value must be 'Bearer <key>'`,
    };
  }
  const scope = match(key);
  if (scope === undefined) return { status: 'unauthenticated', message: 'the API key is not valid' };
  if (scope === 'all' || (category !== undefined && scope.has(category))) return undefined;
  return {
    status: 'forbidden',
    message: category !== undefined
      ? `the API key does not give access to the '${category}' API`
      : 'this path is outside the API categories, and the API key only gives access to some of them',
  };
}
