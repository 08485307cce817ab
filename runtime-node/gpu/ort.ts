/**
 * Which onnxruntime-node this process runs on. Normally the package tsi depends on; when `tsi-node
 * serve` has re-executed itself for CUDA (cuda-env.ts) it is the onnxruntime-node whose core matches
 * the installed CUDA provider, kept in tsi's cache (cuda-install.ts), named by TSI_ORT_DIR. onnxruntime's
 * provider bridge checks no versions, so a process must load exactly one core, and the one the provider
 * was built with: every thread that loads onnxruntime (the backend's and the llm decoder's workers, and
 * the provider listing on the main thread) goes through here, and the workers inherit the variable.
 */

import { createRequire } from 'node:module';
import type * as Ort from 'onnxruntime-node';

const require = createRequire(import.meta.url);

/** The environment variable naming an onnxruntime-node package folder to load instead of the dependency. */
export const ORT_DIR_ENV = 'TSI_ORT_DIR';

/** onnxruntime-node, from TSI_ORT_DIR when set (a CUDA-matched core), else tsi's own dependency. */
export function loadOrt(): typeof Ort {
  const dir = process.env[ORT_DIR_ENV];
  return require(dir && dir.length > 0 ? dir : 'onnxruntime-node') as typeof Ort;
}

/** The version of the onnxruntime-node that loadOrt() loads. */
export function ortVersion(): string {
  const dir = process.env[ORT_DIR_ENV];
  try {
    return (require(dir && dir.length > 0 ? `${dir}/package.json` : 'onnxruntime-node/package.json') as { version: string }).version;
  } catch {
    return 'not installed';
  }
}
