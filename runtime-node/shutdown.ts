/**
 * Shutdown in phases, so that a replica leaves its load balancers without losing a request. What
 * `tsi-node serve` does on SIGTERM/SIGINT, and what a program that embeds `startServer` gets from
 * `RunningServer.beginDrain()` and `stop({ drainDelayMs, timeoutMs })`:
 *
 *  a. **Not ready.** `/v2/health/ready`, gRPC `ServerReady` and `ModelReady` say false (live stays true)
 *     while every request is still served, for `drainDelayMs`. Balancers and Kubernetes endpoints take
 *     time to notice (health-check intervals, endpoint propagation to every node's kube-proxy); a
 *     replica that closed its listeners at once had connections refused meanwhile.
 *  b. **Stop accepting.** Listeners close. HTTP/1.1 connections with a request under way answer it
 *     with `Connection: close`; idle ones close now, not before (a balancer still sending during (a)
 *     would have met a closed connection). gRPC sessions get GOAWAY: clients open new calls elsewhere
 *     and finish the ones in flight on this connection.
 *  c. **Drain.** In-flight requests, decoupled streams and sequences in progress finish (a sequence's
 *     next request is still taken on a connection or stream that is open) within `timeoutMs`; then the
 *     models are unloaded (their finalize runs) and the rest is released.
 *
 * Each phase is logged with the time since the shutdown began. `progress()` says what is still under
 * way, for a caller that must cut the shutdown short (the CLI's second signal).
 */

import type { InferenceServer, Logger } from '../core/index.js';
import type { GrpcListener } from './grpc/server.js';
import type { Listener } from './http/server.js';

export interface StopOptions {
  /**
   * Phase a: how long to go on serving while reporting not ready, in ms, counted from `beginDrain()`
   * (or from `stop()` without one). Default 0: listeners close at once.
   */
  drainDelayMs?: number;
  /** Phase c: how long in-flight requests and sequences in progress may take, in ms (default 30 000). */
  timeoutMs?: number;
}

export type ShutdownPhase = 'serving' | 'not ready' | 'draining' | 'unloading' | 'stopped';

export interface ShutdownProgress {
  phase: ShutdownPhase;
  /** Since the shutdown began (0 while serving). */
  elapsedMs: number;
  inflightRequests: number;
  sequences: number;
  /** HTTP connections still open. */
  httpConnections: number;
}

export interface ShutdownReport {
  /** Phase a: beginning of the shutdown until the listeners closed. */
  notReadyMs: number;
  /** Phase c until every request and sequence was done (or the timeout). */
  drainMs: number;
  unloadMs: number;
  totalMs: number;
  /** Requests still running at the timeout (0 when everything finished). */
  unfinished: number;
}

export interface ShutdownParts {
  server: InferenceServer;
  log: Logger;
  http?: Listener;
  grpc?: GrpcListener;
  /** More HTTP listeners (SageMaker's, Vertex AI's), stopped and closed with `http`. */
  others?: Listener[];
  /** Background work that should not start anything new once the shutdown began (repository polls). */
  stopBackground(): Promise<void>;
  /** Closes what is left once the models are unloaded (metrics listener, watchers, extensions). */
  release(): Promise<void>;
}

const secs = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;

export class Shutdown {
  private phase: ShutdownPhase = 'serving';
  private t0 = 0;
  private background?: Promise<void>;
  private running?: Promise<ShutdownReport>;
  private wakeDelay?: () => void;

  constructor(private readonly parts: ShutdownParts) {}

  /** Phase a: not ready from now on, everything else still served. Idempotent. */
  beginDrain(): void {
    if (this.phase !== 'serving') return;
    this.t0 = performance.now();
    this.phase = 'not ready';
    this.parts.server.beginDrain();
    this.background = this.parts.stopBackground();
    this.parts.log.info('shutdown (a): not ready from now on (health/ready, ServerReady and ModelReady say false; live stays true); still serving every request');
  }

  /** Phases a, b and c in turn; a second call returns the first one's promise. */
  stop(opts: StopOptions = {}): Promise<ShutdownReport> {
    this.running ??= this.run(opts.drainDelayMs ?? 0, opts.timeoutMs ?? 30_000);
    return this.running;
  }

  /** Ends phase a now (the rest of the shutdown goes on as it would). */
  endDelay(): void {
    this.wakeDelay?.();
  }

  progress(): ShutdownProgress {
    const { server, http } = this.parts;
    return {
      phase: this.phase,
      elapsedMs: this.phase === 'serving' ? 0 : performance.now() - this.t0,
      inflightRequests: server.inflightRequests(),
      sequences: server.liveSequences(),
      httpConnections: http?.openConnections() ?? 0,
    };
  }

  private async run(drainDelayMs: number, timeoutMs: number): Promise<ShutdownReport> {
    const { server, log, http, grpc } = this.parts;
    const fresh = this.phase === 'serving';
    this.beginDrain();
    const since = () => performance.now() - this.t0;
    const wait = drainDelayMs - since();
    if (wait > 0) {
      if (fresh) log.info(`shutdown (a): going on serving for ${secs(wait)} while load balancers move away`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, wait);
        this.wakeDelay = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wakeDelay = undefined;
    }
    const notReadyMs = since();
    http?.stopAccepting();
    grpc?.stopAccepting();
    for (const l of this.parts.others ?? []) l.stopAccepting();
    this.phase = 'draining';
    const busy = http?.openConnections() ?? 0;
    log.info(`shutdown (b) at ${secs(notReadyMs)}: listeners closed; idle HTTP connections closed, ${busy} busy one(s) close after their answer; gRPC sessions sent GOAWAY`);
    const before = { requests: server.inflightRequests(), sequences: server.liveSequences() };
    await this.background;
    const c0 = performance.now();
    let drainMs = 0;
    const unfinished = await server.stop(timeoutMs, () => {
      drainMs = performance.now() - c0;
      this.phase = 'unloading';
    });
    const unloadMs = performance.now() - c0 - drainMs;
    if (unfinished > 0) log.warn(`shutdown (c): ${unfinished} request(s) were still running at the ${secs(timeoutMs)} deadline`);
    log.info(`shutdown (c) at ${secs(since())}: ${before.requests} in-flight request(s) and ${before.sequences} sequence(s) drained in ${secs(drainMs)}, models unloaded in ${secs(unloadMs)}`);
    await Promise.all([http?.close(), grpc?.close(), ...(this.parts.others ?? []).map((l) => l.close())]);
    await this.parts.release();
    this.phase = 'stopped';
    const totalMs = since();
    log.info(`shutdown done in ${secs(totalMs)}`);
    return { notReadyMs, drainMs, unloadMs, totalMs, unfinished };
  }
}

/** What a shutdown cut short leaves undone, in words, for the log line of the CLI's second signal. */
export function describeCutShort(p: ShutdownProgress): string {
  const where = p.phase === 'not ready' ? 'during the drain delay (a)' : p.phase === 'serving' ? 'before it began' : `while ${p.phase} (c)`;
  return `shutdown cut short ${where}, ${secs(p.elapsedMs)} in: ${p.inflightRequests} in-flight request(s), ${p.sequences} sequence(s) in progress and ${p.httpConnections} open HTTP connection(s) dropped; models not unloaded (no finalize)`;
}
