/**
 * The filesystem side of the protocol extensions in Node: an explicit load's `file:` overrides are
 * written into a fresh temporary model folder (mkdtemp) that then serves as the model directory, and
 * trace files are written where `--trace-config triton,file=...` says. Core has already refused any
 * override name that could leave the folder; every path is resolved and checked again here before a
 * byte is written, so a bug upstream still cannot write elsewhere.
 */

import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { TsiError, type ModelFileStager, type TraceWriter } from '../core/index.js';
import { folderFiles } from './fs-source.js';

function inside(root: string, rel: string, key: string): string {
  const p = resolve(root, rel);
  const r = relative(root, p);
  if (r === '' || r.startsWith('..') || isAbsolute(r)) {
    throw new TsiError('INVALID_ARG', `Invalid file parameter 'file:${key}' with normalized path '${p}' must stay within model directory.`);
  }
  return p;
}

/** Stages override files in `<tmp>/tsi-model-<model>-XXXXXX/`; dispose removes the folder. */
export function tempFolderStager(base = tmpdir()): ModelFileStager {
  return async (model, files) => {
    const root = await mkdtemp(join(base, `tsi-model-${model.replace(/[^A-Za-z0-9_.-]/g, '_')}-`));
    try {
      for (const [rel, bytes] of files) {
        const p = inside(root, rel, rel);
        await mkdir(dirname(p), { recursive: true });
        await writeFile(p, bytes, { flag: 'wx' });
      }
    } catch (err) {
      await rm(root, { recursive: true, force: true });
      if (err instanceof TsiError) throw err;
      throw new TsiError('INVALID_ARG', `failed to write the model files of the load request: ${(err as Error).message}`);
    }
    return { files: folderFiles(root), dispose: () => rm(root, { recursive: true, force: true }) };
  };
}

export const fileTraceWriter: TraceWriter = {
  async write(path, text) {
    await mkdir(dirname(resolve(path)), { recursive: true });
    await writeFile(path, text);
  },
};
