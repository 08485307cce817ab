/**
 * The Responses API's store (core/protocol/openai-responses.ts): bounded by count and by bytes, least
 * recently used out first, a read counting as a use.
 */

import { describe, expect, it } from 'vitest';
import { ResponseStore } from '../../core/protocol/openai-responses.js';

describe('ResponseStore', () => {
  it('keeps at most N responses, evicting the least recently used (a read is a use)', () => {
    const s = new ResponseStore({ responses: 3, bytes: 1 << 20 });
    for (const id of ['a', 'b', 'c']) s.put(id, { id }, []);
    expect(s.get('a')?.response).toEqual({ id: 'a' });
    s.put('d', { id: 'd' }, []);
    expect(['a', 'b', 'c', 'd'].map((id) => s.get(id) !== undefined)).toEqual([true, false, true, true]);
    expect(s.delete('c')).toBe(true);
    expect(s.delete('c')).toBe(false);
  });

  it('keeps at most M bytes of JSON', () => {
    const big = 'x'.repeat(400);
    const s = new ResponseStore({ responses: 100, bytes: 1000 });
    s.put('a', { id: 'a' }, [{ role: 'user', content: big }]);
    s.put('b', { id: 'b' }, [{ role: 'user', content: big }]);
    s.put('c', { id: 'c' }, [{ role: 'user', content: big }]);
    expect(['a', 'b', 'c'].map((id) => s.get(id) !== undefined)).toEqual([false, true, true]);
    // Putting the same id again replaces it without counting it twice.
    s.put('c', { id: 'c' }, []);
    s.put('d', { id: 'd' }, [{ role: 'user', content: big }]);
    expect(['b', 'c', 'd'].map((id) => s.get(id) !== undefined)).toEqual([true, true, true]);
  });
});
