/**
 * The `llm` backend's two ways of running an instance in Node: by default a prefill worker beside
 * the decoding one (llm-serving.test.ts runs everything that way), and with `separate_prefill:
 * false` one worker for both, which must give the same tokens. A bad value is a load error that
 * names the parameter. And how a prefill of prompts of different lengths is split into runs.
 */

import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { prefillParts } from '../../core/llm/kv-batch.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

let server: TestServer;
let ref: ReferenceDecoder;
let repo: string;

/** tiny_gpt under another name, with `separate_prefill` set to `value`. */
function variant(name: string, value: string): void {
  const dir = join(repo, name);
  mkdirSync(dir);
  const config = readFileSync(join(MODELS, 'tiny_gpt', 'config.pbtxt'), 'utf8')
    .replace('name: "tiny_gpt"', `name: "${name}"`)
    .replace('parameters [', `parameters [\n  { key: "separate_prefill" value: { string_value: "${value}" } },`);
  writeFileSync(join(dir, 'config.pbtxt'), config);
  symlinkSync(join(MODELS, 'tiny_gpt', '1'), join(dir, '1'));
}

beforeAll(async () => {
  repo = mkdtempSync(join(tmpdir(), 'tsi-llm-prefill-'));
  variant('tiny_one_worker', 'false');
  variant('tiny_bad', 'sometimes');
  server = await startTestServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['tiny_one_worker'] });
  ref = await referenceDecoder(join(MODELS, 'tiny_gpt'));
}, 60_000);

afterAll(async () => {
  await ref?.release();
  await server?.stop();
  rmSync(repo, { recursive: true, force: true });
});

it('gives concurrent requests the tokens they get alone with one worker doing prefill and decode', async () => {
  const words = 'a lazy dog while seven wizards quietly hex every jovial sphinx'.split(' ');
  const reqs = Array.from({ length: 6 }, (_, i) => ({ prompt: words.slice(0, 2 + ((i * 3) % 9)).join(' '), maxTokens: 3 + ((i * 7) % 17) }));
  const answers = await Promise.all(reqs.map((r) => postJson(`${server.url}/v2/models/tiny_one_worker/generate`, { text_input: r.prompt, max_tokens: r.maxTokens, exclude_input_in_output: true })));
  for (let i = 0; i < reqs.length; i++) {
    const expected = await ref.greedy(reqs[i]!.prompt, reqs[i]!.maxTokens);
    expect(answers[i]!.status).toBe(200);
    expect({ i, text: answers[i]!.body.text_output, tokens: answers[i]!.body.num_output_tokens }).toEqual({ i, text: ref.tokenizer.decode(expected), tokens: expected.length });
  }
}, 60_000);

it('refuses to load a model whose separate_prefill is not a boolean', async () => {
  const r = await postJson(`${server.url}/v2/repository/models/tiny_bad/load`, {});
  expect(r.status).toBe(400);
  expect(JSON.stringify(r.body)).toMatch(/separate_prefill must be true or false, not 'sometimes'/);
});

it('prefills prompts of about one length together and pads little', () => {
  expect(prefillParts([30, 30, 30])).toEqual([[0, 1, 2]]);
  const lengths = [40, 6, 38, 5, 20, 21, 39];
  const parts = prefillParts(lengths);
  expect(parts.flat().sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6]);
  expect(parts).toEqual([[0, 6, 2, 5], [4], [1, 3]]);
  for (const p of parts) {
    const ls = p.map((i) => lengths[i]!);
    expect(p.length * Math.max(...ls)).toBeLessThanOrEqual(1.25 * ls.reduce((a, b) => a + b, 0));
  }
});
