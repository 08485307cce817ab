/**
 * How the generate endpoint reads its flat JSON body, where Triton's L0_http generate tests look
 * (generate_endpoint_test.py): a key given twice is refused with Triton's "already exists" text rather
 * than JSON.parse keeping the last silently; a wrong JSON type for a BYTES input gets Triton's JSON
 * reader text; a nested object as a parameter is refused; `id` names the request and comes back on the
 * response. The real server on port 0 and the generated `simple` and `simple_string` models.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firstRepeatedKey } from '../../core/protocol/generate.js';
import { MODELS, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple', 'simple_string'] });
});
afterAll(async () => {
  await s?.stop();
});

const ints = Array.from({ length: 16 }, (_, i) => i);
const post = async (path: string, text: string) => {
  const r = await fetch(`${s.url}${path}`, { method: 'POST', body: text, headers: { 'Content-Type': 'application/json' } });
  return { status: r.status, type: r.headers.get('content-type'), body: await r.json() as Record<string, any> };
};

describe('the generate endpoint reads its body as Triton does', () => {
  it('refuses a key given twice, naming the first repeated one, on generate and generate_stream', async () => {
    for (const route of ['generate', 'generate_stream']) {
      const twice = `{"INPUT0": ${JSON.stringify(ints)}, "INPUT1": ${JSON.stringify(ints)}, "INPUT0": ${JSON.stringify(ints)}}`;
      const a = await post(`/v2/models/simple/${route}`, twice);
      expect([a.status, a.type, a.body.error]).toEqual([400, 'application/json', "input 'INPUT0' already exists in request"]);
      const param = `{"INPUT0": ${JSON.stringify(ints)}, "INPUT1": ${JSON.stringify(ints)}, "note": "a", "note": "b"}`;
      expect((await post(`/v2/models/simple/${route}`, param)).body.error).toBe("parameter 'note' already exists in request");
    }
    // The server goes on answering.
    const ok = await post('/v2/models/simple/generate', JSON.stringify({ INPUT0: ints, INPUT1: ints }));
    expect(ok.body.OUTPUT0).toEqual(ints.map((v) => 2 * v));
  });

  it('finds repeated keys at the top level only, past escaped quotes and nested objects', () => {
    expect(firstRepeatedKey('{"a": 1, "b": {"a": 2}, "c": ["a", "a"]}')).toBeUndefined();
    expect(firstRepeatedKey('{"a\\"b": "x\\\\", "q": "\\"a\\"b\\"", "a\\"b": 1}')).toBe('a"b');
    expect(firstRepeatedKey('{"x": 1, "y": 2, "y": 3, "x": 4}')).toBe('y');
  });

  it("gives Triton's JSON reader text for a number where a BYTES input wants strings", async () => {
    const a = await post('/v2/models/simple_string/generate', JSON.stringify({ INPUT0: ints, INPUT1: ints.map(String) }));
    expect([a.status, a.body.error]).toEqual([400, "unable to parse input 'INPUT0': attempt to access JSON non-string as string"]);
  });

  it('refuses a nested object as a parameter, and answers with the request id it was given', async () => {
    const nested = await post('/v2/models/simple/generate', JSON.stringify({ INPUT0: ints, INPUT1: ints, PARAMS: { a: 1 } }));
    expect([nested.status, nested.body.error]).toEqual([400, "parameter 'PARAMS' has invalid type. The generate request takes a string, number or boolean."]);
    const inner = await post('/v2/models/simple/generate', JSON.stringify({ INPUT0: ints, INPUT1: ints, parameters: { nested: { twice: 1 } } }));
    expect(inner.body.error).toBe("Converting keyword: 'parameters': parameter 'nested' has invalid type. The generate request takes a string, number or boolean.");
    const named = await post('/v2/models/simple/generate', JSON.stringify({ INPUT0: ints, INPUT1: ints, id: '42' }));
    expect([named.status, named.body.id, named.body.OUTPUT1]).toEqual([200, '42', ints.map(() => 0)]);
  });
});
