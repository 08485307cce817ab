/**
 * The `llm` backend's decoder threads follow the work (issue 50): with no thread parameter a
 * decoding session takes every inference core (the tokens are chosen in the decoding worker, so the
 * server's thread no longer needs a core kept back for sampling), and where that is every core of
 * the machine its threads sleep when idle instead of spinning. Witnessed in the process, not by a
 * timing: the server runs in this process, and onnxruntime's intra-op pool threads are threads of it
 * (/proc/self/task), so a model with no thread parameter must add, over a twin pinned to one thread
 * per session, one thread per core beyond the first for each of its two sessions (decoding, prefill);
 * and the load log says the count and whether the threads spin.
 */

import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import type { ModelConfig } from '../../core/index.js';
import { Tokenizer } from '../../core/llm/tokenizer.js';
import { decodeSpinning } from '../../runtime-node/llm/index.js';
import { tinySpec, writeFamilyFolder } from '../../scripts/llm-families.js';
import { requireCapability } from '../helpers/capability.js';
import { MODELS, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CORES = availableParallelism();
/** docs/many-models.md's inference cores: all up to 3, one fewer from 4, two fewer from 8 (written out, not asked of the code). */
const WIDE = CORES >= 8 ? CORES - 2 : CORES >= 4 ? CORES - 1 : CORES;
const threads = () => readdirSync('/proc/self/task').length;
const HAS_PROC = existsSync('/proc/self/task');
const root = join(tmpdir(), `tsi-llm-threads-${process.pid}`);
let server: TestServer;

beforeAll(async () => {
  const tokDir = join(MODELS, 'tiny_gpt', '1');
  const tok = { json: readFileSync(join(tokDir, 'tokenizer.json'), 'utf8'), config: readFileSync(join(tokDir, 'tokenizer_config.json'), 'utf8') };
  const t = Tokenizer.fromJson(tok.json, tok.config);
  const spec = { ...tinySpec('llama', t.vocabSize, t.bosId ?? t.eosId!, t.eosId!), layout: 'gqa' as const };
  const params = { rule: '', pinned: 'parameters { key: "decode_thread_count" value { string_value: "1" } }\nparameters { key: "prefill_thread_count" value { string_value: "1" } }\n' };
  for (const [name, extra] of Object.entries(params)) {
    mkdirSync(join(root, name), { recursive: true });
    writeFileSync(join(root, name, 'config.pbtxt'), `backend: "llm"\nparameters { key: "variant" value { string_value: "model" } }\nparameters { key: "kv_cache_bytes" value { string_value: "16777216" } }\n${extra}`);
    await writeFamilyFolder(join(root, name, '1'), spec, tok, ['model']);
  }
  server = await startTestServer({ modelRepositories: [root], modelControlMode: 'explicit' });
}, 120_000);

afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const load = async (name: string) => expect((await postJson(`${server.url}/v2/repository/models/${name}/load`, {})).status).toBe(200);
const generate = async (name: string) => {
  const r = await postJson(`${server.url}/v2/models/${name}/generate`, { text_input: 'the quick brown fox', max_tokens: 4, ignore_eos: true });
  expect({ status: r.status, tokens: r.body.num_output_tokens }).toEqual({ status: 200, tokens: 4 });
};

describe('decoder threads follow the work', () => {
  it('a model with no thread parameter decodes and prefills on every inference core, its threads counted in the process', async (ctx: TestContext) => {
    requireCapability(ctx, !!process.env.CI, '/proc/self/task', HAS_PROC ? undefined : 'no /proc/self/task to count threads in');
    // Once first, so whatever Node starts lazily on a first load (libuv's pool) is running before counting.
    await load('pinned');
    await postJson(`${server.url}/v2/repository/models/pinned/unload`, {});
    const t0 = threads();
    await load('pinned');
    await generate('pinned');
    const t1 = threads();
    await load('rule');
    await generate('rule');
    const t2 = threads();
    // Each session's pool holds its threads less the calling one: WIDE - 1 each, for two sessions.
    expect({ pinned: t1 - t0, rule: t2 - t1, extra: (t2 - t1) - (t1 - t0) }).toEqual({ pinned: t1 - t0, rule: t2 - t1, extra: 2 * (WIDE - 1) });
    const sleeps = WIDE >= CORES ? ' \\(sleeping when idle, not spinning\\)' : '';
    expect(server.logs.some((l) => new RegExp(`rule \\(rule_0\\): decoder session ${WIDE} intra-op thread\\(s\\)${sleeps}, prefill session ${WIDE}$`).test(l)), server.logs.filter((l) => /decoder session/.test(l)).join('\n')).toBe(true);
    expect(server.logs.some((l) => /pinned \(pinned_0\): decoder session 1 intra-op thread\(s\), prefill session 1$/.test(l))).toBe(true);
  }, 120_000);

  it('spins only while the decoders leave a core free, unless decode_spinning says', () => {
    const config = (v?: string): ModelConfig => ({ name: 'm', parameters: v === undefined ? {} : { decode_spinning: { string_value: v } } });
    expect(decodeSpinning(config(), 2, 2)).toBe(false);
    expect(decodeSpinning(config(), 13, 16)).toBe(true);
    expect(decodeSpinning(config('true'), 2, 2)).toBe(true);
    expect(decodeSpinning(config('false'), 1, 16)).toBe(false);
    expect(() => decodeSpinning(config('often'), 1, 2)).toThrow(/m.*decode_spinning must be true or false, not 'often'/);
  });
});
