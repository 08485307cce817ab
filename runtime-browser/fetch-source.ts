/**
 * Model repositories for the browser, as core RepositorySources:
 * - `UrlSource`: a Triton repository laid out under a base URL. HTTP cannot list folders, so the
 *   models and their files come from an index file (`tsi-index.json`, written by `tsi-node index
 *   <repo>` and served on the fly by `tsi-node serve --browser-demo`) or from an explicit list.
 * - `MemorySource`: files held in memory — a `Map`/record of paths to bytes, text or Blobs, or the
 *   Files a user dropped or picked (folder uploads keep their relative paths).
 * Both answer `list()` from their file list, so core's version-folder scan and backend detection work
 * unchanged; both refuse paths that climb out of the model folder.
 */

import { TsiError, type ModelFiles, type RepositorySource } from '../core/index.js';

/** The index file's format: every model folder and the files in it, relative to the model folder. */
export interface RepositoryIndexFile {
  tsi_repository_index: 1;
  models: Record<string, { files: string[]; fingerprint?: string }>;
}

export const INDEX_FILE = 'tsi-index.json';

/** A model list without an index: names (conventional layout, version 1) or names with their files. */
export type ModelList = string[] | Record<string, string[]>;

function clean(rel: string): string {
  const parts: string[] = [];
  for (const p of rel.split('/')) {
    if (p === '' || p === '.') continue;
    if (p === '..') throw new TsiError('INVALID_ARG', `path '${rel}' leaves the model folder`);
    parts.push(p);
  }
  return parts.join('/');
}

/** Folder listing answered from a flat list of file paths. */
function listFrom(paths: Iterable<string>, relDir: string): { name: string; isDir: boolean }[] {
  const dir = clean(relDir);
  const prefix = dir ? `${dir}/` : '';
  const out = new Map<string, boolean>();
  for (const p of paths) {
    if (!p.startsWith(prefix)) continue;
    const rest = p.slice(prefix.length);
    const slash = rest.indexOf('/');
    if (slash < 0) out.set(rest, out.get(rest) ?? false);
    else out.set(rest.slice(0, slash), true);
  }
  return [...out].map(([name, isDir]) => ({ name, isDir }));
}

/** The version folder a bare model name is assumed to have; its config is probed with HEAD. */
const CONVENTIONAL = ['1/model.onnx'];

export interface UrlSourceOptions {
  /** Models and files; default: read `<base>/tsi-index.json`. */
  models?: ModelList;
  /** Index file URL, relative to the base; default `tsi-index.json`. */
  index?: string;
  fetch?: typeof fetch;
  /** Extra `fetch` init (credentials, headers, cache mode). */
  init?: RequestInit;
}

export class UrlSource implements RepositorySource {
  readonly location: string;
  private listing?: Promise<Map<string, { files: string[]; fingerprint?: string }>>;
  private readonly fetchFn: typeof fetch;

  constructor(base: string | URL, private readonly opts: UrlSourceOptions = {}) {
    const href = new URL(String(base), globalThis.location?.href).href;
    this.location = href.endsWith('/') ? href : `${href}/`;
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  private async get(url: string, what: string): Promise<Response> {
    let r: Response;
    try {
      r = await this.fetchFn(url, this.opts.init);
    } catch (err) {
      throw new TsiError('UNAVAILABLE', `failed to fetch ${what} ${url}: ${(err as Error).message}`);
    }
    if (!r.ok) throw new TsiError(r.status === 404 ? 'NOT_FOUND' : 'UNAVAILABLE', `failed to fetch ${what} ${url}: HTTP ${r.status}`);
    return r;
  }

  private load(): Promise<Map<string, { files: string[]; fingerprint?: string }>> {
    this.listing ??= (async () => {
      const m = this.opts.models;
      if (Array.isArray(m)) return new Map(m.map((n) => [n, { files: CONVENTIONAL }]));
      if (m) return new Map(Object.entries(m).map(([n, files]) => [n, { files: files.map(clean) }]));
      const url = new URL(this.opts.index ?? INDEX_FILE, this.location).href;
      let idx: RepositoryIndexFile;
      try {
        idx = (await (await this.get(url, 'the repository index')).json()) as RepositoryIndexFile;
      } catch (err) {
        if (err instanceof TsiError) {
          throw new TsiError('INVALID_ARG', `${err.message} (write it with \`tsi-node index <repository>\`, or pass an explicit model list)`);
        }
        throw new TsiError('INVALID_ARG', `the repository index ${url} is not valid JSON: ${(err as Error).message}`);
      }
      if (idx?.tsi_repository_index !== 1 || typeof idx.models !== 'object') {
        throw new TsiError('INVALID_ARG', `${url} is not a tsi repository index (expected {"tsi_repository_index": 1, "models": {...}})`);
      }
      return new Map(Object.entries(idx.models).map(([n, e]) => [n, { files: e.files.map(clean), fingerprint: e.fingerprint }]));
    })();
    this.listing.catch(() => (this.listing = undefined));
    return this.listing;
  }

  async listModels(): Promise<string[]> {
    return [...(await this.load()).keys()].sort();
  }

  files(model: string): ModelFiles {
    const base = new URL(`${encodeURIComponent(model)}/`, this.location);
    const known = async () => (await this.load()).get(model)?.files ?? [];
    const url = (rel: string) => new URL(clean(rel).split('/').map(encodeURIComponent).join('/'), base).href;
    return {
      read: async (rel) => new Uint8Array(await (await this.get(url(rel), 'model file')).arrayBuffer()),
      exists: async (rel) => {
        const files = await known();
        if (files.includes(clean(rel))) return true;
        // Without an index a file the list does not name may still exist (labels, other versions).
        if (this.opts.models === undefined) return false;
        const r = await this.fetchFn(url(rel), { ...this.opts.init, method: 'HEAD' }).catch(() => undefined);
        return r?.ok === true;
      },
      list: async (rel) => listFrom(await known(), rel),
      // Beyond ModelFiles: where a file lives, so JavaScript models import from their own URL.
      url,
    } as ModelFiles;
  }

  async fingerprint(model: string): Promise<string> {
    this.listing = undefined;
    const e = (await this.load()).get(model);
    return e?.fingerprint ?? JSON.stringify(e?.files ?? []);
  }
}

export type MemoryFile = Uint8Array | ArrayBuffer | string | Blob;

/**
 * Files in memory, keyed `<model>/<path in the model folder>`. A single shared top folder (a dropped
 * repository folder such as `models/simple/config.pbtxt`) is recognised and stripped.
 */
export class MemorySource implements RepositorySource {
  readonly location: string;
  private readonly byModel = new Map<string, Map<string, MemoryFile>>();

  constructor(files: Map<string, MemoryFile> | Record<string, MemoryFile>, location = 'memory') {
    this.location = location;
    const entries = (files instanceof Map ? [...files] : Object.entries(files)).map(([p, f]) => [clean(p), f] as const);
    const strip = sharedTopFolder(entries.map(([p]) => p));
    for (const [p, f] of entries) {
      const rel = strip ? p.slice(strip.length + 1) : p;
      const slash = rel.indexOf('/');
      if (slash < 0) continue; // files beside the model folders (an index, a README)
      const model = rel.slice(0, slash);
      let m = this.byModel.get(model);
      if (!m) this.byModel.set(model, (m = new Map()));
      m.set(rel.slice(slash + 1), f);
    }
  }

  async listModels(): Promise<string[]> {
    return [...this.byModel.keys()].filter((n) => !n.startsWith('.')).sort();
  }

  files(model: string): ModelFiles {
    const m = this.byModel.get(model) ?? new Map<string, MemoryFile>();
    return {
      read: async (rel) => {
        const f = m.get(clean(rel));
        if (f === undefined) throw new TsiError('INVALID_ARG', `unable to read '${model}/${rel}': no such file`);
        return toBytes(f);
      },
      exists: async (rel) => m.has(clean(rel)),
      list: async (rel) => listFrom(m.keys(), rel),
    };
  }

  async fingerprint(model: string): Promise<string> {
    const m = this.byModel.get(model);
    if (!m) return '';
    return [...m].map(([p, f]) => `${p}:${sizeOf(f)}`).sort().join('\n');
  }
}

/** A top folder every path shares and that is not itself a model folder (no config, no version dirs). */
function sharedTopFolder(paths: string[]): string | undefined {
  if (paths.length === 0) return undefined;
  const top = paths[0]!.split('/')[0]!;
  if (!paths.every((p) => p.startsWith(`${top}/`) && p.split('/').length >= 3)) return undefined;
  const isModel = paths.some((p) => {
    const rest = p.slice(top.length + 1);
    return rest === 'config.pbtxt' || rest === 'config.json' || /^[1-9][0-9]*\//.test(rest);
  });
  return isModel ? undefined : top;
}

async function toBytes(f: MemoryFile): Promise<Uint8Array> {
  if (typeof f === 'string') return new TextEncoder().encode(f);
  if (f instanceof Uint8Array) return f;
  if (f instanceof ArrayBuffer) return new Uint8Array(f);
  return new Uint8Array(await f.arrayBuffer());
}

function sizeOf(f: MemoryFile): number {
  if (typeof f === 'string') return f.length;
  if (f instanceof Blob) return f.size;
  return f.byteLength;
}

/**
 * Files from an `<input type=file webkitdirectory>` or a drop, keyed by their relative path (the
 * folder the user picked is its first segment).
 */
export function filesFromFileList(list: Iterable<File> | ArrayLike<File>): Map<string, MemoryFile> {
  const out = new Map<string, MemoryFile>();
  for (const f of Array.from(list as ArrayLike<File>)) {
    const rel = (f as File & { webkitRelativePath?: string }).webkitRelativePath || f.name;
    out.set(rel, f);
  }
  return out;
}
