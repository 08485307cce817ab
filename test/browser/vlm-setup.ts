/**
 * Global setup of the browser project's vision-chat test (runs in Node): writes the tiny SmolVLM /
 * Idefics3 folder (scripts/vlm-model.ts) and serves it from a real tsi-node server with the browser
 * routes on, so the page reads the very files the Node server serves (whose answers
 * test/node/vlm-chat.test.ts holds to transformers.js's), and its fp16 files beside them
 * (test/node/vlm-fp16.test.ts). Tests get its URL and two PNG images as
 * data URLs by `inject`.
 */

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { createLogger } from '../../core/index.js';
import { startServer } from '../../runtime-node/index.js';
import { writeVlmFolder } from '../../scripts/vlm-model.js';
import { encodePng } from '../helpers/png.js';

declare module 'vitest' {
  export interface ProvidedContext {
    vlmUrl: string;
    vlmImages: string[];
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = mkdtempSync(join(tmpdir(), 'tsi-vlm-page-'));
  const repo = join(root, 'repo');
  await writeVlmFolder(join(repo, 'tiny_vlm', '1'));
  mkdirSync(join(repo, 'tiny_vlm'), { recursive: true });
  const pbtxt = 'backend: "llm"\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "separate_prefill" value { string_value: "false" } }\n';
  writeFileSync(join(repo, 'tiny_vlm', 'config.pbtxt'), pbtxt);
  // The fp16 files (float16 embeds, features and inputs_embeds), served with variant fp16.
  await writeVlmFolder(join(repo, 'tiny_vlm_fp16', '1'), undefined, { variants: ['fp16'] });
  writeFileSync(join(repo, 'tiny_vlm_fp16', 'config.pbtxt'), `${pbtxt}parameters { key: "variant" value { string_value: "fp16" } }\n`);
  const image = (w: number, h: number, seed: number) => {
    const data = new Uint8Array(w * h * 3).map((_, i) => (i * seed + ((i * i) >> 3)) % 256);
    return `data:image/png;base64,${Buffer.from(encodePng(w, h, 3, data)).toString('base64')}`;
  };
  const running = await startServer({
    modelRepositories: [repo], httpPort: 0, httpAddress: '127.0.0.1', corsOrigin: '*', browserDemo: true,
    log: createLogger(() => {}),
  });
  project.provide('vlmUrl', `http://127.0.0.1:${running.http!.port}`);
  project.provide('vlmImages', [image(20, 13, 37), image(27, 35, 61)]);
  return async () => {
    await running.stop(5000);
    rmSync(root, { recursive: true, force: true });
  };
}
