/**
 * Model namespacing, as tritonserver's `--model-namespacing=true` defines it: a model is identified by
 * its repository and its name, so the same name may load from several repositories. Each repository is
 * a ModelRepository of its own (a name appears once in one repository), and NamespacedRepository puts
 * them behind the one Repository surface the server, residency and model control use:
 * - a request by a name resolves to the only repository that holds a model of that name; a name that
 *   several hold is refused with Triton's INVALID_ARG text (`There are N identifiers of model ...`);
 * - an ensemble's step resolves to the model of that name in the ensemble's own repository, else to the
 *   only one anywhere, else the ensemble fails (`... not available or ambiguous`). Ensembles resolve
 *   their steps on every request, so they follow models as they load and unload (POLL included) the way
 *   Triton re-links its dependency graph;
 * - load by name loads the name from every repository that has a folder of it (as Triton polls every
 *   repository for it), unload by name unloads every model of that name, and the index lists each.
 * Without the flag the server uses one ModelRepository over every repository (a name in two is refused).
 */

import { TsiError } from '../errors.js';
import type { ModelVersion } from './model.js';
import {
  ModelRepository, type IndexEntry, type LoadOverrides, type Repository, type RepositoryOptions, type RepositorySource,
} from './repository.js';

/** The server's repository: namespaced under `--model-namespacing`, else one over every source. */
export function createRepository(opts: RepositoryOptions & { namespacing?: boolean }): Repository {
  return opts.namespacing ? new NamespacedRepository(opts) : new ModelRepository(opts);
}

/** Triton's refusal of a name that several loaded models share. */
export function ambiguousModel(name: string, count: number): TsiError {
  return new TsiError('INVALID_ARG', `There are ${count} identifiers of model '${name}' in global map, model namespace must be provided to resolve ambiguity.`);
}

/** Whether an error is `ambiguousModel`'s (an ensemble reports its step as "not available or ambiguous"). */
export function isAmbiguous(err: unknown): boolean {
  return err instanceof TsiError && err.code === 'INVALID_ARG' && /^There are \d+ identifiers of model /.test(err.message);
}

/** The repositories behind a server's repository: each namespace's, or the one. */
export function repositoryParts(repo: Repository): Repository[] {
  return repo instanceof NamespacedRepository ? repo.parts() : [repo];
}

interface Part {
  source: RepositorySource;
  repo: ModelRepository;
  /** Model folders its last scan found. */
  found: ReadonlySet<string>;
}

export class NamespacedRepository implements Repository {
  private readonly list: Part[] = [];
  private readonly byNamespace = new Map<string, Part>();
  /** Answers for a server with no repository at all (every name is unknown). */
  private readonly empty: ModelRepository;

  constructor(private readonly opts: RepositoryOptions) {
    this.empty = new ModelRepository({ ...opts, sources: [] });
    for (const src of opts.sources) this.addSource(src);
  }

  parts(): ModelRepository[] {
    return this.list.map((p) => p.repo);
  }

  addSource(src: RepositorySource): void {
    const part: Part = {
      source: src,
      found: new Set(),
      repo: new ModelRepository({ ...this.opts, sources: [src], namespace: src.location, stepSources: () => this.stepSources(part) }),
    };
    this.list.push(part);
    this.byNamespace.set(src.location, part);
  }

  removeSource(src: RepositorySource): void {
    const i = this.list.findIndex((p) => p.source === src);
    if (i < 0) return;
    this.list.splice(i, 1);
    if (this.byNamespace.get(src.location)?.source === src) this.byNamespace.delete(src.location);
  }

  private async scanParts(): Promise<Part[]> {
    await Promise.all(this.list.map(async (p) => {
      p.found = new Set((await p.repo.scan()).keys());
    }));
    return this.list;
  }

  /** Every model folder, with the first repository that has it (a name in several is no error here). */
  async scan(): Promise<Map<string, RepositorySource | Error>> {
    const out = new Map<string, RepositorySource | Error>();
    for (const p of await this.scanParts()) for (const name of p.found) if (!out.has(name)) out.set(name, p.source);
    return out;
  }

  /**
   * Where an ensemble of `own` finds its steps before they load: its own repository's models, then each
   * name exactly one other repository has (a name several have is ambiguous: the check reports it).
   */
  private async stepSources(own: Part): Promise<Map<string, RepositorySource | Error>> {
    const holders = new Map<string, Part[]>();
    for (const p of await this.scanParts()) for (const name of p.found) holders.set(name, [...(holders.get(name) ?? []), p]);
    const out = new Map<string, RepositorySource | Error>();
    for (const [name, ps] of holders) {
      if (own.found.has(name)) out.set(name, own.source);
      else out.set(name, ps.length === 1 ? ps[0]!.source : ambiguousModel(name, ps.length));
    }
    return out;
  }

  /** The repositories that have a folder of `name` or hold a model of it. */
  private async holdersOf(name: string): Promise<Part[]> {
    return (await this.scanParts()).filter((p) => p.found.has(name) || p.repo.holds(name));
  }

  async loadAll(names?: string[]): Promise<void> {
    const parts = await this.scanParts();
    const wanted = names ?? [...new Set(parts.flatMap((p) => [...p.found]))];
    const todo: [ModelRepository, string][] = [];
    const missing: string[] = [];
    for (const name of wanted) {
      const holders = parts.filter((p) => p.found.has(name));
      if (holders.length === 0) missing.push(name);
      for (const p of holders) todo.push([p.repo, name]);
    }
    for (const p of parts) p.repo.markLoading(todo.filter(([r]) => r === p.repo).map(([, n]) => n));
    // A name no repository has is recorded as such (one failed poll, in the first repository's index).
    if (missing.length > 0) await parts[0]?.repo.loadAll(missing);
    await this.forEachLoad(todo.map((_, i) => String(i)), (i) => {
      const [repo, name] = todo[Number(i)]!;
      return repo.ensureLoaded(name);
    });
  }

  forEachLoad(names: readonly string[], load: (name: string) => Promise<void>): Promise<void> {
    return this.list[0]?.repo.forEachLoad(names, load) ?? Promise.resolve();
  }

  async keepsConfigOverride(name: string): Promise<boolean> {
    const holders = this.list.filter((p) => p.repo.holds(name));
    if (holders.length === 0) return false;
    for (const p of holders) if (!(await p.repo.keepsConfigOverride(name))) return false;
    return true;
  }

  markLoading(names: readonly string[]): void {
    for (const p of this.list) p.repo.markLoading(names.filter((n) => p.found.has(n)));
  }

  async ensureLoaded(name: string): Promise<void> {
    await Promise.all((await this.holdersOf(name)).map((p) => p.repo.ensureLoaded(name)));
  }

  /** Loads the name from every repository that has it (Triton polls each); override files load once. */
  async load(name: string, overrides?: LoadOverrides): Promise<void> {
    const holders = overrides?.files ? [] : (await this.scanParts()).filter((p) => p.found.has(name));
    // None: the first repository loads it, to load override files or to report that no repository has it.
    const parts = holders.length > 0 ? holders : this.list.slice(0, 1);
    const results = await Promise.allSettled(parts.map((p) => p.repo.load(name, overrides)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  park(names: readonly string[], reason?: string): void {
    for (const p of this.list) p.repo.park(names.filter((n) => p.found.has(n)), reason);
  }

  parkedReason(name: string): string | undefined {
    for (const p of this.list) {
      const r = p.repo.parkedReason(name);
      if (r !== undefined) return r;
    }
    return undefined;
  }

  async fingerprint(name: string): Promise<string | undefined> {
    const prints = await Promise.all(this.list.map((p) => p.repo.fingerprint(name)));
    return prints.some((f) => f !== undefined) ? prints.map((f) => f ?? '').join('\n') : undefined;
  }

  async unload(name: string, park?: string): Promise<void> {
    await Promise.all(this.list.map((p) => p.repo.unload(name, park)));
  }

  dependents(name: string): string[] {
    return [...new Set(this.list.flatMap((p) => p.repo.dependents(name)))];
  }

  async unloadAll(): Promise<void> {
    await Promise.all(this.list.map((p) => p.repo.unloadAll()));
  }

  /**
   * The version a request addresses. `near`: the namespace of the ensemble asking for its step, whose
   * own repository's model of that name wins; otherwise the name must be held by one repository.
   */
  get(name: string, version?: string, near?: string): ModelVersion {
    return this.resolve(name, near).get(name, version);
  }

  private resolve(name: string, near?: string): ModelRepository {
    if (near !== undefined) {
      const own = this.byNamespace.get(near)?.repo;
      if (own?.holds(name)) {
        // Until its own repository's model first loads, an ensemble keeps to the one it ran before (Triton
        // re-links it once that model has loaded); a model that failed is its own (and its error).
        if (own.readyVersions(name).length > 0 || !own.index().some((e) => e.name === name && e.state === 'LOADING')) return own;
        const others = this.list.filter((p) => p.repo !== own && p.repo.holds(name));
        return others.length === 1 ? others[0]!.repo : own;
      }
    }
    let found: ModelRepository | undefined;
    let count = 0;
    for (const p of this.list) {
      if (!p.repo.holds(name)) continue;
      found ??= p.repo;
      count++;
    }
    if (count > 1) throw ambiguousModel(name, count);
    // None holds it: the one that knows it (unloaded: UNAVAILABLE) answers, else any (NOT_FOUND).
    return found ?? this.list.find((p) => p.repo.names().includes(name))?.repo ?? this.list[0]?.repo ?? this.empty;
  }

  /** Every READY version of every model of this name (all of them: the server's walks over every model use it). */
  readyVersions(name: string): ModelVersion[] {
    return this.list.flatMap((p) => p.repo.readyVersions(name));
  }

  holds(name: string): boolean {
    return this.list.some((p) => p.repo.holds(name));
  }

  /** Each repository's rows, by name (a name held by several repositories has a row from each, in repository order). */
  index(): IndexEntry[] {
    const rows = this.list.flatMap((p) => p.repo.index());
    return rows.map((r, i) => ({ r, i })).sort((a, b) => a.r.name.localeCompare(b.r.name) || a.i - b.i).map(({ r }) => r);
  }

  allReady(): boolean {
    return this.list.every((p) => p.repo.allReady());
  }

  names(): string[] {
    return [...new Set(this.list.flatMap((p) => p.repo.names()))];
  }

  forget(name: string): void {
    for (const p of this.list) if (!p.found.has(name)) p.repo.forget(name);
  }

  /** Each repository's changes together (the poller polls each repository on its own: see `repositoryParts`). */
  async changes(): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    const all = await Promise.all(this.list.map((p) => p.repo.changes()));
    const union = (k: 'added' | 'removed' | 'modified') => [...new Set(all.flatMap((c) => c[k]))];
    return { added: union('added'), removed: union('removed'), modified: union('modified') };
  }
}
