/**
 * A model repository folder on disk as a core RepositorySource. Paths handed in are always resolved
 * inside the model's folder: a relative path that climbs out (`../`) is refused, so neither a config's
 * label_filename nor a load request can read files elsewhere.
 */

import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { readFile, readdir, stat } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { TsiError, type ModelFiles, type RepositorySource } from '../core/index.js';

function inside(root: string, rel: string): string {
  const p = resolve(root, rel);
  const r = relative(root, p);
  if (r.startsWith('..') || isAbsolute(r)) throw new TsiError('INVALID_ARG', `path '${rel}' leaves the model folder`);
  return p;
}

export function folderFiles(root: string): ModelFiles {
  return {
    read: async (rel) => {
      try {
        return new Uint8Array(await readFile(inside(root, rel)));
      } catch (err) {
        if (err instanceof TsiError) throw err;
        throw new TsiError('INVALID_ARG', `unable to read '${join(root, rel)}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
    },
    exists: async (rel) => existsSync(inside(root, rel)),
    list: async (rel) => {
      const entries = await readdir(inside(root, rel || '.'), { withFileTypes: true });
      return entries.map((e) => ({ name: e.name, isDir: e.isDirectory() || (e.isSymbolicLink() && statSync(join(root, rel, e.name)).isDirectory()) }));
    },
    localPath: (rel) => inside(root, rel),
  };
}

async function walk(dir: string, base: string, out: { rel: string; line: string }[]): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await walk(p, base, out);
    else {
      const s = await stat(p);
      const rel = relative(base, p);
      out.push({ rel, line: `${rel}:${s.size}:${s.mtimeMs}` });
    }
  }
}

export class FolderSource implements RepositorySource {
  readonly location: string;
  constructor(path: string) {
    this.location = resolve(path);
    if (!existsSync(this.location) || !statSync(this.location).isDirectory()) {
      throw new TsiError('INVALID_ARG', `failed to stat file ${this.location}: the model repository folder does not exist`);
    }
  }

  async listModels(): Promise<string[]> {
    const entries = await readdir(this.location, { withFileTypes: true });
    return entries.filter((e) => (e.isDirectory() || e.isSymbolicLink()) && !e.name.startsWith('.')).map((e) => e.name).sort();
  }

  files(model: string): ModelFiles {
    return folderFiles(inside(this.location, model));
  }

  async fingerprint(model: string): Promise<string> {
    return this.hashFolder(model, () => true);
  }

  /** The folder but its config files (config.pbtxt, config.json, configs/): a change there alone may be an in-place update. */
  async filesFingerprint(model: string): Promise<string> {
    return this.hashFolder(model, (rel) => rel !== 'config.pbtxt' && rel !== 'config.json' && !/^configs[\\/]/.test(rel));
  }

  private async hashFolder(model: string, keep: (rel: string) => boolean): Promise<string> {
    const files: { rel: string; line: string }[] = [];
    const dir = inside(this.location, model);
    if (existsSync(dir)) await walk(dir, dir, files);
    return createHash('sha1').update(files.filter((f) => keep(f.rel)).map((f) => f.line).sort().join('\n')).digest('hex');
  }
}

/**
 * The repository folders as sources, each once: a path given twice (even spelled differently) is one
 * repository, as tritonserver keeps its --model-repository paths in a set. A folder that does not
 * exist stops the start; with `exitOnError: false` it is instead the reason the server failed to
 * initialise (Triton then serves on, not live and not ready, without models).
 */
export function repositorySources(paths: readonly string[], exitOnError = true): { sources: FolderSource[]; initError?: string } {
  const sources: FolderSource[] = [];
  for (const path of new Set(paths.map((p) => resolve(p)))) {
    try {
      sources.push(new FolderSource(path));
    } catch (err) {
      if (exitOnError) throw err;
      return { sources: [], initError: (err as Error).message };
    }
  }
  return { sources };
}
