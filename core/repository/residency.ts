/**
 * On-demand loading within a budget (beyond Triton, like KServe's ModelMesh and llama.cpp's router):
 * with `--max-loaded-models N` and/or `--model-memory-budget <bytes>`, models found in the repository
 * are registered without loading (the index lists them UNAVAILABLE, "not loaded: budget") and loaded
 * by their first request, which waits for the load. To make room, the least recently used idle model
 * is unloaded first: never one with requests in flight, an open sequence or a load under way, and
 * never one pinned by its config (`parameters { key: "tsi_pinned" value { string_value: "true" } }`).
 * An unloaded model is registered again, so its next request loads it anew.
 *
 * Memory is what the backends measure for their instances (`BackendInstance.memoryBytes`: for
 * onnxruntime the process's resident growth while the session was created); a model's last measure
 * is its estimate before its next load. A load that fails is remembered with the repository's
 * fingerprint of the model's folder: every request gets that error until the folder changes.
 *
 * Concurrency: one event loop. Loads of different models run at once; room is made one load at a
 * time (a chain), so two loads never evict for each other's count.
 */

import { TsiError, asTsiError } from '../errors.js';
import type { ModelVersion } from './model.js';
import { NOT_LOADED_BUDGET, type Repository } from './repository.js';
import type { Clock, Logger } from '../types.js';

export interface ResidencyOptions {
  /** At most this many models loaded at once. */
  maxLoadedModels?: number;
  /** Models' measured memory, all together, stays within this (a model bigger than it still loads alone). */
  memoryBudgetBytes?: number;
}

export const PIN_PARAMETER = 'tsi_pinned';

export type LoadReason = 'startup' | 'explicit' | 'on_demand' | 'poll';
export type UnloadReason = 'explicit' | 'budget' | 'removed' | 'shutdown';

/** What residency counts per model (exported by statistics and metrics). */
export interface ResidencyCounts {
  loads: Partial<Record<LoadReason, number>>;
  unloads: Partial<Record<UnloadReason, number>>;
  /** Loads a request waited for: count and total nanoseconds. */
  onDemand: { count: number; ns: number };
  /** Bytes measured at the last load (kept while unloaded: the next load's estimate). */
  memoryBytes: number;
}

/**
 * `--model-memory-budget`: bytes, with an optional binary suffix (`512M`, `4GiB`), or a percentage
 * of `totalBytes` (the machine's memory, which the runtime knows and core does not).
 */
export function parseMemoryBudget(text: string, totalBytes: number): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(%|[kmgt]i?b?|b)?\s*$/i.exec(text);
  if (!m) throw new TsiError('INVALID_ARG', `--model-memory-budget expects bytes (e.g. 2G) or a percentage of memory (e.g. 50%), got '${text}'`);
  const n = Number(m[1]);
  const unit = (m[2] ?? '').toLowerCase();
  if (unit === '%') {
    if (n <= 0 || n > 100) throw new TsiError('INVALID_ARG', `--model-memory-budget percentage must be within (0, 100], got '${text}'`);
    return Math.floor((totalBytes * n) / 100);
  }
  const power = { '': 0, b: 0, k: 1, m: 2, g: 3, t: 4 }[unit[0] ?? ''] ?? 0;
  return Math.floor(n * 1024 ** power);
}

export function isPinned(mv: ModelVersion): boolean {
  const v = mv.config.parameters?.[PIN_PARAMETER]?.string_value;
  return v === 'true' || v === '1';
}

/** A loaded version's measured memory: what its instances' backends report. */
export function versionMemory(mv: ModelVersion): number {
  return mv.instances.reduce((n, i) => n + (i.memoryBytes ?? 0), 0);
}

export class Residency {
  private readonly counts = new Map<string, ResidencyCounts>();
  private readonly lastUsed = new Map<string, number>();
  private useTick = 0;
  private readonly loads = new Map<string, Promise<void>>();
  private readonly failed = new Map<string, { fingerprint?: string; error: TsiError }>();
  private room: Promise<void> = Promise.resolve();

  constructor(
    private readonly repo: Repository, readonly opts: ResidencyOptions, private readonly clock: Clock, private readonly log: Logger,
  ) {}

  countsOf(name: string): ResidencyCounts {
    let c = this.counts.get(name);
    if (!c) this.counts.set(name, (c = { loads: {}, unloads: {}, onDemand: { count: 0, ns: 0 }, memoryBytes: 0 }));
    return c;
  }

  /** Every model with counts, for metrics. */
  allCounts(): ReadonlyMap<string, ResidencyCounts> {
    return this.counts;
  }

  /** A request for `name` arrived: it becomes the most recently used. */
  touch(name: string): void {
    this.lastUsed.set(name, ++this.useTick);
  }

  /** Whether `name` must be loaded before a request can be admitted. */
  needsLoad(name: string): boolean {
    return this.repo.parkedReason(name) !== undefined || this.loads.has(name) || this.failed.has(name);
  }

  /**
   * Loads a registered model for a request (which waits), making room first; concurrent requests
   * share one load. Rejects with the load's error, and with the same error until the folder changes.
   */
  async ensure(name: string): Promise<void> {
    this.touch(name);
    const failure = this.failed.get(name);
    if (failure) {
      if ((await this.repo.fingerprint(name)) === failure.fingerprint) throw failure.error;
      this.failed.delete(name);
      this.repo.park([name]);
    }
    let load = this.loads.get(name);
    if (!load) {
      if (this.repo.parkedReason(name) === undefined) return;
      load = this.loadOnDemand(name).finally(() => this.loads.delete(name));
      this.loads.set(name, load);
    }
    await load;
  }

  private async loadOnDemand(name: string): Promise<void> {
    const t0 = this.clock.nowNs();
    await this.makeRoom(name);
    try {
      await this.repo.load(name);
    } catch (err) {
      const error = new TsiError('UNAVAILABLE', `model '${name}' could not be loaded on demand: ${asTsiError(err).message}`);
      this.failed.set(name, { fingerprint: await this.repo.fingerprint(name).catch(() => undefined), error });
      throw error;
    }
    const c = this.countsOf(name);
    c.onDemand.count++;
    c.onDemand.ns += this.clock.nowNs() - t0;
    this.loaded(name, 'on_demand');
    this.log.info(`model '${name}' loaded on demand in ${((this.clock.nowNs() - t0) / 1e6).toFixed(0)} ms`);
    // Memory is known only now: a model bigger than its estimate may have pushed the total over.
    await this.makeRoom(undefined, name);
  }

  /**
   * Records a finished load (any reason): counts and the measured memory, which the model's
   * statistics show in Triton's `memory_usage`, beside the time requests waited for it to load.
   */
  loaded(name: string, reason: LoadReason): void {
    const c = this.countsOf(name);
    c.loads[reason] = (c.loads[reason] ?? 0) + 1;
    const versions = this.repo.readyVersions(name);
    const bytes = versions.reduce((n, mv) => n + versionMemory(mv), 0);
    if (bytes > 0) c.memoryBytes = bytes;
    for (const mv of versions) {
      mv.stats.sections.set('memory_usage', () => [{ type: 'CPU', id: 0, byte_size: versionMemory(mv) }]);
      mv.stats.sections.set('on_demand_load', () => ({ ...c.onDemand }));
    }
    this.touch(name);
  }

  unloaded(name: string, reason: UnloadReason): void {
    const c = this.countsOf(name);
    c.unloads[reason] = (c.unloads[reason] ?? 0) + 1;
  }

  /**
   * Unloads least recently used idle models until `incoming` (a model about to load, at its last
   * measure) fits; `keep` is never chosen. Serialised: each call sees the previous one's result.
   */
  makeRoom(incoming?: string, keep = incoming): Promise<void> {
    const run = this.room.then(() => this.evictUntilFits(incoming, keep));
    this.room = run.catch(() => {});
    return run;
  }

  private async evictUntilFits(incoming: string | undefined, keep: string | undefined): Promise<void> {
    const { maxLoadedModels, memoryBudgetBytes } = this.opts;
    for (;;) {
      const loaded = this.repo.names().filter((n) => n !== incoming && this.repo.readyVersions(n).length > 0);
      const bytes = loaded.reduce((n, m) => n + this.countsOf(m).memoryBytes, 0) + (incoming ? this.countsOf(incoming).memoryBytes : 0);
      const count = loaded.length + (incoming ? 1 : 0);
      const over = (maxLoadedModels !== undefined && count > maxLoadedModels) || (memoryBudgetBytes !== undefined && bytes > memoryBudgetBytes);
      if (!over) return;
      const victim = loaded
        .filter((n) => n !== keep && !this.loads.has(n) && this.idle(n))
        .sort((a, b) => (this.lastUsed.get(a) ?? 0) - (this.lastUsed.get(b) ?? 0))[0];
      if (!victim) {
        // Everything loaded is busy or pinned: load anyway rather than fail the request; the next load evicts.
        this.log.verbose(1, `model budget exceeded: no idle model to unload (${count} loaded, ${bytes} bytes)`);
        return;
      }
      this.log.info(`unloading least recently used model '${victim}' to stay within the model budget`);
      await this.repo.unload(victim, NOT_LOADED_BUDGET);
      this.unloaded(victim, 'budget');
    }
  }

  /** No request in flight, no open sequence, not pinned. */
  private idle(name: string): boolean {
    return this.repo.readyVersions(name).every((mv) => mv.inflight === 0 && mv.liveSequences() === 0 && !isPinned(mv));
  }
}
