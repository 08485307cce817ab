/**
 * tsi for Node: core bound to onnxruntime-node (in worker threads) and to real sockets. `startServer`
 * is what `tsi-node serve` runs and what tests start on port 0; everything protocol-shaped comes from
 * core, so this file only wires backends, repositories and listeners together.
 */

import { availableParallelism } from 'node:os';
import {
  BackendRegistry, DEFAULT_MAX_INPUT_SIZE, InferenceServer, createHttpApp, createLogger,
  type Logger, type ModelControlMode,
} from '../core/index.js';
import { FolderSource } from './fs-source.js';
import { listen, type Listener } from './http.js';
import { createOnnxBackend } from './onnx-backend.js';
import { browserRoutes } from './browser-assets.js';
import { gpuCount } from './eps.js';

export interface NodeServerOptions {
  modelRepositories: string[];
  httpPort?: number;
  httpAddress?: string;
  /** false: no HTTP listener (tritonserver's --allow-http=false). */
  allowHttp?: boolean;
  logVerbose?: number;
  log?: Logger;
  strictReadiness?: boolean;
  modelControlMode?: ModelControlMode;
  loadModels?: string[];
  autoComplete?: boolean;
  defaultMaxBatchSize?: number;
  corsOrigin?: string | string[];
  maxInputSize?: number;
  id?: string;
  /** Also serve the browser demo (/demo), the browser build (/browser/) and the repositories' files (/repository/). */
  browserDemo?: boolean;
}

export interface RunningServer {
  server: InferenceServer;
  http?: Listener;
  log: Logger;
  /** Graceful stop: close listeners, drain in-flight requests (up to timeoutMs), unload models. */
  stop(timeoutMs?: number): Promise<void>;
}

export function stderrLogger(verbose = 0) {
  return createLogger((_level, line) => process.stderr.write(line + '\n'), verbose);
}

export function createNodeBackends(log: Logger): BackendRegistry {
  const backends = new BackendRegistry();
  backends.register('onnxruntime', () => createOnnxBackend({ log, cores: availableParallelism() }));
  return backends;
}

export async function startServer(opts: NodeServerOptions): Promise<RunningServer> {
  const log = opts.log ?? stderrLogger(opts.logVerbose ?? 0);
  const server = new InferenceServer({
    sources: opts.modelRepositories.map((p) => new FolderSource(p)),
    backends: createNodeBackends(log),
    log,
    id: opts.id,
    strictReadiness: opts.strictReadiness,
    modelControlMode: opts.modelControlMode,
    startupModels: opts.loadModels,
    autoComplete: opts.autoComplete,
    defaultMaxBatchSize: opts.defaultMaxBatchSize,
    gpuCount: gpuCount(),
  });
  let http: Listener | undefined;
  if (opts.allowHttp !== false) {
    const app = createHttpApp(server, { maxInputSize: opts.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE, corsOrigin: opts.corsOrigin,
      extend: opts.browserDemo ? browserRoutes(opts.modelRepositories) : undefined });
    // Listen before loading models, as Triton does: liveness answers while models load; readiness waits.
    http = await listen(app.fetch, opts.httpPort ?? 8000, opts.httpAddress ?? '0.0.0.0');
  }
  await server.start();
  return {
    server,
    http,
    log,
    async stop(timeoutMs = 30_000) {
      http?.stopAccepting();
      const left = await server.stop(timeoutMs);
      if (left > 0) log.warn(`${left} request(s) were still running at the shutdown deadline`);
      await http?.close();
    },
  };
}

export { FolderSource, folderFiles } from './fs-source.js';
export { createOnnxBackend } from './onnx-backend.js';
export { providerStatus, gpuCount } from './eps.js';
