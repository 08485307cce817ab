/**
 * Triton's rate limiter (`--rate-limit execution_count`): a model instance may start a batch only when
 * the resources its instance_group's `rate_limiter` lists are free, and among the instances that wait
 * for resources the one with the lowest `exec_count × priority` goes first (priority 2 gets half the
 * turns of priority 1). It spans every loaded model, so models that share a resource take turns.
 *
 * Semantics follow Triton's rate_limiter.cc: resources are per device unless marked `global`; the
 * count available of each is the largest count any loaded instance asks for, unless
 * `--rate-limit-resource name:count[:device]` sets it (a count below what an instance needs fails that
 * model's load, as an instance that could never run would hang its requests); only the head of the
 * waiting order is tried, so a big consumer is not starved by small ones; a priority of 0 counts as 1.
 *
 * Where it sits: the scheduler takes a free instance as before and asks its gate before the backend
 * runs, giving the resources back after, so the time a batch waits here is queue time (Triton's
 * payload waits the same way) and is also recorded apart in the model's statistics
 * (`rate_limiter.wait`). The dynamic batcher asks before it takes requests from its queue and forms
 * the batch at the grant, as Triton's payload keeps taking requests while it waits; other schedulers
 * form the batch first and `runExecution` asks. Single-threaded: every call runs on the one
 * event loop, so the bookkeeping needs no locks; a grant resolves a promise the waiting execution holds.
 */

import { TsiError } from '../errors.js';
import type { ModelInstanceGroup } from '../config/model-config.js';
import type { Duration } from '../stats.js';
import type { Clock, Logger } from '../types.js';

export type RateLimitMode = 'off' | 'execution_count';

/** One `--rate-limit-resource`: `device` absent means every device (and the count of a global resource). */
export interface ResourceLimit {
  name: string;
  count: number;
  device?: number;
}

/** What the gate needs of an instance: where it runs (`-1`: no GPU). */
export interface LimitedInstanceRef {
  readonly spec: { readonly name: string; readonly deviceId: number };
}

/** The resource key of a global resource; per-device resources use the device id. */
const GLOBAL = 'global';

/** Parses `name:count[:device]` (tritonserver's `--rate-limit-resource`). */
export function parseRateLimitResource(text: string): ResourceLimit {
  const parts = text.split(':');
  const bad = (why: string) => new TsiError('INVALID_ARG', `--rate-limit-resource '${text}': ${why}; expected <name>:<count>[:<device>]`);
  if (parts.length < 2 || parts.length > 3 || parts[0] === '') throw bad('wrong number of fields');
  const count = Number(parts[1]);
  if (!/^\d+$/.test(parts[1]!) || !Number.isSafeInteger(count)) throw bad(`count '${parts[1]}' is not a non-negative integer`);
  if (parts.length === 2) return { name: parts[0]!, count };
  const device = Number(parts[2]);
  if (!/^\d+$/.test(parts[2]!) || !Number.isSafeInteger(device)) throw bad(`device '${parts[2]}' is not a device id`);
  return { name: parts[0]!, count, device };
}

/** Resources by resource key (device id or `global`), then name. */
type ResourceMap = Map<string, Map<string, number>>;

interface Entry {
  readonly model: string;
  readonly priority: number;
  readonly needs: ResourceMap;
  execCount: number;
  /** Order of staging, to break priority ties first-come first-served. */
  seq: number;
  stagedNs: number;
  grant?: () => void;
  owner: ModelRateLimit;
}

/**
 * The choice among staged instances, pure: the lowest `execCount × priority`, earliest staged on a
 * tie (Triton's staging priority queue). Returns its index, or -1 for none.
 */
export function nextStaged(staged: readonly { execCount: number; priority: number; seq: number }[]): number {
  let best = -1;
  let bestScore = Infinity;
  for (let i = 0; i < staged.length; i++) {
    const e = staged[i]!;
    const score = e.execCount * Math.max(1, e.priority);
    if (score < bestScore || (score === bestScore && e.seq < staged[best]!.seq)) {
      best = i;
      bestScore = score;
    }
  }
  return best;
}

/** Whether `needs` fits in `limits` beside what is `allocated` (pure). */
export function fits(needs: ResourceMap, allocated: ResourceMap, limits: ResourceMap): boolean {
  for (const [key, byName] of needs) {
    for (const [name, n] of byName) {
      if ((allocated.get(key)?.get(name) ?? 0) + n > (limits.get(key)?.get(name) ?? 0)) return false;
    }
  }
  return true;
}

export class RateLimiter {
  readonly mode: RateLimitMode;
  private readonly explicit: readonly ResourceLimit[];
  private readonly models = new Set<ModelRateLimit>();
  private limits: ResourceMap = new Map();
  private readonly allocated: ResourceMap = new Map();
  private readonly staged: Entry[] = [];
  private seq = 0;
  private readonly clock: Clock;
  private readonly log?: Logger;

  constructor(opts: { mode?: RateLimitMode; resources?: readonly ResourceLimit[]; clock: Clock; log?: Logger }) {
    this.clock = opts.clock;
    this.log = opts.log;
    this.mode = opts.mode ?? 'off';
    this.explicit = opts.resources ?? [];
  }

  /**
   * Registers a loading model version's instances (`groups[i]`: instance i's instance_group, if any)
   * and returns the gate its scheduler asks; undefined when rate limiting is off. Throws INVALID_ARG
   * when a resource is both global and per-device, or `--rate-limit-resource` leaves too few of one.
   */
  register(model: string, version: number, instances: readonly LimitedInstanceRef[], groups: readonly (ModelInstanceGroup | undefined)[]): ModelRateLimit | undefined {
    if (this.mode === 'off') return undefined;
    const gate = new ModelRateLimit(this, `model '${model}' version ${version}`);
    this.models.add(gate);
    try {
      this.addInstances(gate, instances, groups);
    } catch (err) {
      this.models.delete(gate);
      throw err;
    }
    return gate;
  }

  /**
   * @internal Adds instances to a registered gate (a load, or an in-place instance update); on a
   * refusal (see `register`) the gate and the limits are as they were.
   */
  addInstances(gate: ModelRateLimit, instances: readonly LimitedInstanceRef[], groups: readonly (ModelInstanceGroup | undefined)[]): void {
    const label = gate.label;
    const added: LimitedInstanceRef[] = [];
    try {
      instances.forEach((inst, i) => {
        const rl = groups[i]?.rate_limiter;
        const needs: ResourceMap = new Map();
        for (const r of rl?.resources ?? []) {
          if (!r.name) throw new TsiError('INVALID_ARG', `${label}: a rate_limiter resource has no name`);
          const key = r.global ? GLOBAL : String(inst.spec.deviceId);
          const byName = needs.get(key) ?? new Map<string, number>();
          byName.set(r.name, (byName.get(r.name) ?? 0) + Number(r.count ?? 0));
          needs.set(key, byName);
        }
        gate.entries.set(inst, { model: label, priority: Number(rl?.priority ?? 0), needs, execCount: 0, seq: 0, stagedNs: 0, owner: gate });
        added.push(inst);
      });
      this.updateLimits();
    } catch (err) {
      for (const inst of added) gate.entries.delete(inst);
      this.updateLimits();
      throw err;
    }
  }

  /** @internal Drops an instance that runs nothing any more (an in-place update removed it): the limits may shrink. */
  removeInstance(gate: ModelRateLimit, inst: LimitedInstanceRef): void {
    if (!gate.entries.delete(inst)) return;
    this.updateLimits();
    this.attempt();
  }

  /** The counts available now, by device (`global` for global resources), for statistics and tests. */
  resources(): Record<string, Record<string, number>> {
    return Object.fromEntries([...this.limits].map(([k, m]) => [k, Object.fromEntries(m)]));
  }

  /** @internal */
  unregister(gate: ModelRateLimit): void {
    this.models.delete(gate);
    this.updateLimits();
    this.attempt();
  }

  /** @internal Stages an instance; true when it was granted at once. */
  stage(e: Entry): boolean {
    e.seq = this.seq++;
    e.stagedNs = this.clock.nowNs();
    this.staged.push(e);
    this.attempt();
    return !this.staged.includes(e);
  }

  /** @internal Gives an instance's resources back after its execution. */
  release(e: Entry): void {
    add(this.allocated, e.needs, -1);
    this.attempt();
  }

  /** Grants the head of the waiting order while its resources fit (Triton tries only the head). */
  private attempt(): void {
    for (;;) {
      const i = nextStaged(this.staged);
      if (i < 0) return;
      const e = this.staged[i]!;
      if (!fits(e.needs, this.allocated, this.limits)) return;
      this.staged.splice(i, 1);
      add(this.allocated, e.needs, 1);
      e.execCount++;
      e.owner.recordWait(this.clock.nowNs() - e.stagedNs);
      const g = e.grant;
      e.grant = undefined;
      g?.();
    }
  }

  /** Defaults (the largest need of any loaded instance) overridden by `--rate-limit-resource`. */
  private updateLimits(): void {
    const limits: ResourceMap = new Map();
    const globalNames = new Set<string>();
    const deviceNames = new Map<string, string>();
    for (const gate of this.models) {
      for (const e of gate.entries.values()) {
        for (const [key, byName] of e.needs) {
          const m = limits.get(key) ?? new Map<string, number>();
          for (const [name, n] of byName) {
            if (key === GLOBAL) globalNames.add(name);
            else deviceNames.set(name, e.model);
            m.set(name, Math.max(m.get(name) ?? 0, n));
          }
          limits.set(key, m);
        }
      }
    }
    for (const name of globalNames) {
      if (deviceNames.has(name)) {
        throw new TsiError('INVALID_ARG', `Resource "${name}" is present as both global and device-specific resource in the model configuration (${deviceNames.get(name)})`);
      }
    }
    // Explicit counts: a device-less one applies to every device, a device-specific one wins for its
    // device; a resource named only for other devices has none on this one (Triton: "limited to 0").
    const ordered = [...this.explicit].sort((a, b) => Number(a.device !== undefined) - Number(b.device !== undefined));
    const named = new Set(ordered.map((r) => r.name));
    for (const [key, m] of limits) {
      for (const name of named) {
        if (!m.has(name)) continue;
        const applies = ordered.filter((r) => r.name === name && (key === GLOBAL || r.device === undefined || String(r.device) === key));
        const count = applies.at(-1)?.count ?? 0;
        const need = m.get(name)!;
        if (count < need) {
          throw new TsiError('INVALID_ARG', `Resource count for "${name}" is limited to ${count} which will prevent scheduling of one or more model instances, the minimum required count is ${need}`);
        }
        m.set(name, count);
      }
    }
    this.logLimits(limits);
    this.limits = limits;
  }

  /**
   * Triton's verbose account of the counts whenever they change, one line per resource. Its log
   * escapes a message's tabs as the two characters `\t`, and log readers (its qa suites) match that
   * text, so the line carries it the same way.
   */
  private logLimits(limits: ResourceMap): void {
    if (!this.log) return;
    const text = (m: ResourceMap) => [...m].map(([key, byName]) => [...byName].map(([name, n]) => `Device: ${key} Resource: ${name}\\t Count: ${n}`).join('; ')).join('; ');
    const now = text(limits);
    if (now !== text(this.limits)) this.log.verbose(1, `rate limiter: max resource counts now ${now || 'none'}`);
  }
}

/** One model version's handle on the limiter: its instances' needs and the time its batches waited. */
export class ModelRateLimit {
  /** @internal */
  readonly entries = new Map<LimitedInstanceRef, Entry>();
  /** Executions granted and the total time they waited for resources (statistics: `rate_limiter.wait`). */
  readonly wait: Duration = { count: 0, ns: 0 };

  constructor(private readonly limiter: RateLimiter, readonly label: string) {}

  /**
   * Asks to run one batch on `inst` (already taken by the scheduler): true when its resources were
   * free and granted at once, else a promise that resolves when they are.
   */
  acquire(inst: LimitedInstanceRef): true | Promise<void> {
    const e = this.entries.get(inst);
    if (!e) throw new TsiError('INTERNAL', `${this.label}: instance ${inst.spec.name} is not known to the rate limiter`);
    if (this.limiter.stage(e)) return true;
    return new Promise<void>((resolve) => (e.grant = resolve));
  }

  /** Gives back what `acquire` granted, once the batch has executed. */
  release(inst: LimitedInstanceRef): void {
    const e = this.entries.get(inst);
    if (e) this.limiter.release(e);
  }

  /** New instances of an in-place update; throws, changing nothing, when the limiter refuses their needs. */
  add(instances: readonly LimitedInstanceRef[], groups: readonly (ModelInstanceGroup | undefined)[]): void {
    this.limiter.addInstances(this, instances, groups);
  }

  /** An instance an in-place update removed, once it runs nothing. */
  remove(inst: LimitedInstanceRef): void {
    this.limiter.removeInstance(this, inst);
  }

  /** Removes the model's instances once it has unloaded (nothing of it executes any more). */
  unregister(): void {
    this.limiter.unregister(this);
  }

  /** @internal */
  recordWait(ns: number): void {
    this.wait.count++;
    this.wait.ns += Math.max(0, Math.round(ns));
  }

  /** The model's `rate_limiter` statistics section. */
  toJson(): { wait: Duration } {
    return { wait: { ...this.wait } };
  }
}

function add(into: ResourceMap, needs: ResourceMap, sign: 1 | -1): void {
  for (const [key, byName] of needs) {
    let m = into.get(key);
    if (!m) into.set(key, (m = new Map()));
    for (const [name, n] of byName) m.set(name, (m.get(name) ?? 0) + sign * n);
  }
}
