/**
 * Where SageMaker's multi-model loads find their models on disk (core/protocol/cloud-endpoints.ts
 * asks): a load's `url` must be `<root>/<hash>/model[/<subdir>]` under the models root (SageMaker's
 * /opt/ml/models; `--sagemaker-models-root` elsewhere), never under /dev, /proc or /sys. As in Triton:
 * when `model/` holds a config.pbtxt, `<root>/<hash>` is the repository and its `model` folder is the
 * model; otherwise `model/` is the repository and the folder in it holding an ensemble (else its
 * folder) is the model, its steps beside it. That folder is served under the load's name, whatever
 * its config calls it.
 */

import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { TsiError, type RepositorySource, type SagemakerModelStore } from '../../core/index.js';
import { FolderSource } from '../fs-source.js';

export const DEFAULT_SAGEMAKER_MODELS_ROOT = '/opt/ml/models';

const SEGMENT = /^[0-9A-Za-z._]+$/;
const ENSEMBLE = /platform:\s*"ensemble"/;

/** A repository folder whose folder `folder` serves as model `name`; its other folders keep their names. */
class MappedFolderSource implements RepositorySource {
  readonly location: string;
  readonly namesModels: ReadonlySet<string>;
  private readonly inner: FolderSource;

  constructor(path: string, private readonly folder: string, private readonly name: string) {
    this.inner = new FolderSource(path);
    this.location = this.inner.location;
    this.namesModels = new Set([name]);
  }

  private folderOf(model: string): string {
    return model === this.name ? this.folder : model;
  }

  async listModels(): Promise<string[]> {
    return (await this.inner.listModels()).map((f) => (f === this.folder ? this.name : f));
  }

  files(model: string) {
    return this.inner.files(this.folderOf(model));
  }

  fingerprint(model: string): Promise<string> {
    return this.inner.fingerprint(this.folderOf(model));
  }
}

function subfolders(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory() || (e.isSymbolicLink() && statSync(join(dir, e.name)).isDirectory())).map((e) => e.name).sort();
  } catch {
    return [];
  }
}

export function sagemakerModelStore(root = DEFAULT_SAGEMAKER_MODELS_ROOT): SagemakerModelStore {
  const base = resolve(root);
  return {
    async open(url, model) {
      const path = resolve(url);
      if (/^\/(dev|proc|sys)\//.test(path + '/')) {
        throw new TsiError('INVALID_ARG', `Invalid URL: ${url}. "url" property value cannot start with /dev/, /proc/, or /sys/.`);
      }
      const form = () => new TsiError('INVALID_ARG', `Invalid "url" '${url}': expected a path of the form ${base}/<hash>/model[/<subdir>]`);
      if (!path.startsWith(base + sep)) throw form();
      const parts = path.slice(base.length + 1).split(sep);
      if (parts.length < 2 || parts.length > 3 || !SEGMENT.test(parts[0]!) || parts[1] !== 'model' || (parts[2] !== undefined && !SEGMENT.test(parts[2]))) throw form();
      if (!existsSync(path) || !statSync(path).isDirectory()) throw new TsiError('INVALID_ARG', `failed to register '${path}': the folder does not exist`);
      if (existsSync(join(path, 'config.pbtxt'))) {
        const repository = join(base, parts[0]!);
        return { repository, source: new MappedFolderSource(repository, 'model', model) };
      }
      const folders = subfolders(path);
      const ensemble = folders.find((f) => {
        try {
          return ENSEMBLE.test(readFileSync(join(path, f, 'config.pbtxt'), 'utf8'));
        } catch {
          return false;
        }
      });
      const folder = ensemble ?? folders[folders.length - 1];
      if (folder === undefined) throw new TsiError('INVALID_ARG', `failed to register '${path}': it holds no model folder`);
      return { repository: path, source: new MappedFolderSource(path, folder, model) };
    },
  };
}
