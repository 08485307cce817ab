/**
 * The end of a Python stub process as the server sees it: a stub that writes its answer and exits at
 * once (auto_complete_config's does, with its config or its error) must have that answer read, even
 * when the server's thread was busy meanwhile and the process's exit and its last message arrive
 * together. Before, the exit closed the control socket first and the load failed with "the Python
 * process exited with code 0" (seen once in CI under load; here the busy thread makes it happen).
 */

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseModelConfig, silentLogger, type AutoCompleteContext, type ModelConfig } from '../../core/index.js';
import { autoCompletePython } from '../../runtime-node/python/autocomplete.js';
import { Channel } from '../../runtime-node/python/channel.js';
import { Interpreters } from '../../runtime-node/python/interpreter.js';
import { PY_FIXTURES } from '../helpers/python-server.js';

const interpreters = new Interpreters(undefined, silentLogger);

function context(dir: string): AutoCompleteContext {
  return {
    version: 1, log: silentLogger,
    files: {
      exists: async (rel: string) => readFile(join(dir, rel)).then(() => true, () => false),
      read: async (rel: string) => new Uint8Array(await readFile(join(dir, rel))),
      localPath: (rel: string) => join(dir, rel),
    },
  } as AutoCompleteContext;
}

/** Keeps the thread busy for `ms` after each auto-complete request goes out: the stub answers and exits meanwhile. */
function busyAfterRequest(ms: number): void {
  const send = Channel.prototype.send;
  vi.spyOn(Channel.prototype, 'send').mockImplementation(function (this: Channel, m) {
    send.call(this, m);
    if (m.k !== 'ac') return;
    const until = Date.now() + ms;
    while (Date.now() < until) { /* busy */ }
  });
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('a stub that answers and exits at once', () => {
  it('has its answer read: the completed config, and the script\'s error', async () => {
    busyAfterRequest(400);
    const okDir = join(PY_FIXTURES, 'autocomplete_py');
    const done = await Promise.all(Array.from({ length: 4 }, () =>
      autoCompletePython({ name: 'autocomplete_py', backend: 'python' } as ModelConfig, context(okDir), { interpreters, startTimeoutMs: 30_000 })));
    for (const c of done) expect(c.input?.length).toBeGreaterThan(0);

    const badDir = join(PY_FIXTURES, 'autocomplete_conflict');
    const config = parseModelConfig(readFileSync(join(badDir, 'config.pbtxt'), 'utf8'), 'autocomplete_conflict/config.pbtxt');
    const failures = await Promise.all(Array.from({ length: 4 }, () =>
      autoCompletePython(config, context(badDir), { interpreters, startTimeoutMs: 30_000 }).then(() => 'loaded', (e: Error) => e.message)));
    for (const m of failures) expect(m).toContain("configuration expects datatype TYPE_INT32 for input 'X', model provides TYPE_FP32");
  }, 60_000);
});
