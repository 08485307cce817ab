/**
 * The state behind Triton's protocol extensions beyond inference — shared memory regions, trace and log
 * settings, explicit model control — gathered in one object that every transport of a server shares, so
 * a region registered over HTTP is usable over gRPC and a verbose level set over gRPC shows over HTTP.
 * Also the restricted-API table (`--http-restricted-api`, `--grpc-restricted-protocol`): Triton's
 * category names and which endpoints each covers, parsed once for both transports.
 */

import { TsiError } from './errors.js';
import { controllableLogger, LogSettings } from './settings.js';
import { ModelControl, memoryStager, type ModelFileStager } from './model-control.js';
import type { InferenceServer } from './server.js';
import { SharedMemoryManager, type SystemShmProvider } from './shared-memory.js';
import { TraceManager, type TraceSetting, type TraceWriter } from './trace.js';

export interface ExtensionOptions {
  /** --allow-client-shm (default false). */
  allowClientShm?: boolean;
  shmProvider?: SystemShmProvider;
  shmUnavailableReason?: string;
  trace?: Partial<TraceSetting>;
  traceWriter?: TraceWriter;
  /** How `file:` overrides of an explicit load become a model folder (default: in memory). */
  stageModelFiles?: ModelFileStager;
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
    this.traces = new TraceManager(opts.trace ?? {}, server.clock, opts.traceWriter, server.log);
    this.logging = new LogSettings(controllableLogger(server.log).settings, opts.logFile ?? '');
    this.modelControl = new ModelControl(server, opts.stageModelFiles ?? memoryStager);
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
    for (const raw of m[1]!.split(',')) {
      const cat = raw.trim() as ApiCategory;
      if (!API_CATEGORIES.includes(cat)) {
        throw new TsiError('INVALID_ARG', `${flag}: unknown API category '${raw.trim()}'; expected one of ${API_CATEGORIES.join(', ')}`);
      }
      if (out.has(cat)) throw new TsiError('INVALID_ARG', `${flag}: category '${cat}' is restricted more than once`);
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
