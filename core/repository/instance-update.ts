/**
 * In-place instance updates, as Triton makes them: when a loaded model is loaded again (the load API,
 * with or without a config, or a poll) and only its `instance_group` changed — its files and every
 * other field the same — the loaded versions keep serving and change their instances: the instances
 * the new groups still ask for stay as they are, only the added ones are created (and warmed up),
 * and only the removed ones are finalized, each once its work in flight is over (for the sequence
 * batcher, once the sequences bound to it have ended). Nothing is refused or dropped meanwhile.
 *
 * What an instance is, for this matching, is Triton's instance signature: its group without the
 * group's name and count (kind, GPUs, rate limiter, host policy, passive, profile...) and its device.
 * Renaming groups, splitting or merging them, or listing them in another order creates nothing.
 *
 * A load with nothing changed at all does nothing, as in Triton. Anything else is a full reload
 * (repository.ts), as before.
 */

import type { InstanceSpec } from '../backend.js';
import type { ModelConfig, ModelInstanceGroup } from '../config/model-config.js';
import { configDiff, modelConfigToJson } from '../config/pipeline.js';
import type { Logger } from '../types.js';

/** What a reload asks of a loaded version (model.ts's ModelVersion). */
export interface UpdatableVersion {
  readonly state: string;
  readonly config: ModelConfig;
  readonly filesFingerprint?: string;
  canUpdateInstances(): boolean;
  updateInstances(config: ModelConfig): Promise<void>;
}

/** One instance a config asks for, and the index of its instance_group. */
export interface PlacedSpec {
  spec: InstanceSpec;
  group: number;
}

/** The instances a config's instance_groups ask for, in order: each group's devices, `count` on each. */
export function instanceSpecs(config: ModelConfig, modelName: string): PlacedSpec[] {
  const out: PlacedSpec[] = [];
  for (const [g, group] of (config.instance_group ?? []).entries()) {
    const kind = instanceKind(group);
    for (const deviceId of groupDevices(group)) {
      for (let c = 0; c < (group.count ?? 1); c++) {
        out.push({ spec: { name: `${group.name}_${c}`, kind, deviceId, index: out.length, ...(group.passive ? { passive: true } : {}) }, group: g });
      }
    }
  }
  if (out.length === 0 && config.platform !== 'ensemble') out.push({ spec: { name: `${modelName}_0`, kind: 'KIND_CPU', deviceId: -1, index: 0 }, group: -1 });
  return out;
}

function instanceKind(group: ModelInstanceGroup): InstanceSpec['kind'] {
  return group.kind === 'KIND_GPU' || group.kind === 'KIND_MODEL' ? group.kind : 'KIND_CPU';
}

function groupDevices(group: ModelInstanceGroup): number[] {
  return instanceKind(group) === 'KIND_GPU' && group.gpus && group.gpus.length > 0 ? group.gpus : [-1];
}

/** Triton's instance signature: the group without its name and count, and the device. */
export function instanceSignature(group: ModelInstanceGroup | undefined, deviceId: number): string {
  if (!group) return `default@${deviceId}`;
  const json = modelConfigToJson({ instance_group: [group] }).instance_group as Record<string, unknown>[];
  const { name: _n, count: _c, ...rest } = json[0] ?? {};
  return `${canonical(rest)}@${deviceId}`;
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

export interface InstancePlan<T> {
  /** Instances that stay, with their group index in the new config. */
  keep: { instance: T; group: number }[];
  /** Instances to create, named and numbered so as not to clash with any instance still present. */
  add: PlacedSpec[];
  remove: T[];
}

/**
 * Pure: which current instances the new config keeps (the first ones of each signature), which it
 * removes, and the specs of the ones to add. `current[i].group` is instance i's group in the old
 * config; `taken` holds names still in use elsewhere (instances of an earlier update not yet gone).
 */
export function planInstanceUpdate<T extends { readonly spec: InstanceSpec }>(
  current: readonly { instance: T; group: ModelInstanceGroup | undefined }[], next: ModelConfig, modelName: string, taken: ReadonlySet<string> = new Set(),
): InstancePlan<T> {
  const pools = new Map<string, T[]>();
  for (const { instance, group } of current) {
    const sig = instanceSignature(group, instance.spec.deviceId);
    const list = pools.get(sig) ?? [];
    list.push(instance);
    pools.set(sig, list);
  }
  const groups = next.instance_group ?? [];
  const keep: InstancePlan<T>['keep'] = [];
  const wanted: PlacedSpec[] = [];
  for (const placed of instanceSpecs(next, modelName)) {
    const mine = pools.get(instanceSignature(groups[placed.group], placed.spec.deviceId))?.shift();
    if (mine) keep.push({ instance: mine, group: placed.group });
    else wanted.push(placed);
  }
  const remove = [...pools.values()].flat();
  const names = new Set([...taken, ...current.map((c) => c.instance.spec.name)]);
  let index = Math.max(-1, ...current.map((c) => c.instance.spec.index)) + 1;
  const add = wanted.map(({ spec, group }) => {
    const base = groups[group]?.name ?? modelName;
    let c = 0;
    while (names.has(`${base}_${c}`)) c++;
    const name = `${base}_${c}`;
    names.add(name);
    return { spec: { ...spec, name, index: index++ }, group };
  });
  return { keep, add, remove };
}

export interface InPlaceReload {
  name: string;
  /** The versions serving now. */
  loaded: ReadonlyMap<number, UpdatableVersion>;
  /** Versions of the model that failed to load (then it is a full reload). */
  failed: number;
  /** The versions the new config selects. */
  versions: readonly number[];
  config: ModelConfig;
  /** The model's files (all but its config) as they are now; undefined: not known, so a full reload. */
  filesFingerprint: string | undefined;
  log: Logger;
}

/**
 * Applies a reload in place where Triton would: the same versions, the same files, and a config that
 * differs in `instance_group` at most. Returns false for a full reload. Throws when an update fails
 * (a new instance's initialize, a rate-limiter refusal): the version then serves as before.
 */
export async function reloadInPlace(r: InPlaceReload): Promise<boolean> {
  if (r.loaded.size === 0 || r.failed > 0 || r.filesFingerprint === undefined || r.config.platform === 'ensemble') return false;
  if (r.versions.length !== r.loaded.size || !r.versions.every((v) => r.loaded.get(v)?.state === 'READY')) return false;
  const mvs = [...r.loaded.values()];
  if (mvs.some((mv) => mv.filesFingerprint !== r.filesFingerprint)) return false;
  const diffs = mvs.map((mv) => configDiff(mv.config, r.config));
  if (diffs.includes('full')) return false;
  if (diffs.every((d) => d === 'none')) {
    r.log.info(`model '${r.name}': its config and files are unchanged since it loaded; nothing to reload`);
    return true;
  }
  // Passive instances stay out of the scheduler and rate limiter, which the in-place path would hand them to.
  if (r.config.instance_group?.some((g) => g.passive) || !mvs.every((mv) => mv.canUpdateInstances())) return false;
  for (const mv of mvs) await mv.updateInstances(r.config);
  return true;
}
