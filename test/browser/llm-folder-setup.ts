/**
 * Global setup of the browser project's downloaded-folder test (runs in Node): writes a tiny Llama
 * (scripts/llm-families.ts, tiny_gpt's tokenizer) in the onnx-community layout — `onnx/model.onnx`
 * with its weights in `model.onnx_data`, and `onnx/model_q4.onnx` — as three model entries over the
 * same files (`variant` fp32, q4, and none), and serves them from a real tsi-node server with the
 * browser routes on, so the page reads the very files the Node server serves. Tests get its URL by
 * `inject('llmFolderUrl')`.
 */

import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { createLogger } from '../../core/index.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { startServer } from '../../runtime-node/index.js';
import { tinySpec, writeFamilyFolder } from '../../scripts/llm-families.js';
import { MODELS } from '../helpers/server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    llmFolderUrl: string;
  }
}

/**
 * One decoding session per model and a small cache: three models load quickly on a small machine. The
 * Node server serves the files as exported, as the page does (not rewritten into the fused layout, whose
 * int4 computes with int8 activations), so both run the same graphs.
 */
const SMALL = 'parameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\nparameters { key: "separate_prefill" value { string_value: "false" } }\n' +
  'parameters { key: "rewrite_plain_layout" value { string_value: "false" } }\n';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = mkdtempSync(join(tmpdir(), 'tsi-llm-folder-'));
  const tokDir = join(MODELS, 'tiny_gpt', '1');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  const t = Tokenizer.fromJson(tok.json, tok.config);
  const download = join(root, 'download');
  await writeFamilyFolder(download, tinySpec('llama', t.vocabSize, t.bosId ?? t.eosId!, t.eosId!), tok, ['model', 'model_q4']);
  const repo = join(root, 'repo');
  for (const [name, variant] of [['llama_fp32', 'model'], ['llama_q4', 'q4'], ['llama', undefined]] as const) {
    // Copies, not links: the repository index lists real files only.
    cpSync(download, join(repo, name, '1'), { recursive: true });
    const v = variant ? `parameters { key: "variant" value { string_value: "${variant}" } }\n` : '';
    writeFileSync(join(repo, name, 'config.pbtxt'), `backend: "llm"\n${v}${SMALL}`);
  }
  const running = await startServer({
    modelRepositories: [repo], httpPort: 0, httpAddress: '127.0.0.1', corsOrigin: '*', browserDemo: true,
    log: createLogger(() => {}),
  });
  project.provide('llmFolderUrl', `http://127.0.0.1:${running.http!.port}`);
  return async () => {
    await running.stop(5000);
    rmSync(root, { recursive: true, force: true });
  };
}
