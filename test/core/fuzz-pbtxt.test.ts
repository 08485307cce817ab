/**
 * Property tests of the config.pbtxt parser (fast-check): whatever the text — random characters,
 * a real config cut, spliced or with a token changed, nesting deeper than any recursion could follow —
 * parsing (and the config pipeline after it) either yields a config or throws a ConfigError naming the
 * file, line and column, never another exception.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError, normalizeModelConfig, parsePbtxt, validateModelConfig } from '../../core/config/pipeline.js';

const NUM_RUNS = Number(process.env.FUZZ_RUNS ?? 300);

const REAL = `name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1", data_type: TYPE_INT32, dims: [ 2, 8 ], reshape: { shape: [ 16 ] } }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt" } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
  priority_queue_policy { key: 1 value { timeout_action: REJECT default_timeout_microseconds: 10 } } }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
# a comment
version_policy: { specific: { versions: [ 1, 3 ] } }
optimization { graph { level: 1 } }
`;

/** Parses; 'ok' or the ConfigError; anything else fails the property. */
function attempt(text: string): 'ok' | ConfigError {
  try {
    const cfg = parsePbtxt(text, 'fuzz/config.pbtxt');
    validateModelConfig(normalizeModelConfig(cfg, { modelName: 'simple', gpuCount: 0 }), { modelName: 'simple' });
    return 'ok';
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw new Error(`not a ConfigError: ${(err as Error)?.stack ?? String(err)}`);
  }
}

function parseOnly(text: string): 'ok' | ConfigError {
  try {
    parsePbtxt(text, 'fuzz/config.pbtxt');
    return 'ok';
  } catch (err) {
    if (!(err instanceof ConfigError)) throw new Error(`not a ConfigError: ${(err as Error)?.stack ?? String(err)}`);
    expect(err.message).toMatch(/^fuzz\/config\.pbtxt:\d+:\d+: /);
    return err;
  }
}

const tokens = fc.constantFrom(
  '{', '}', '[', ']', ':', ',', ';', '<', '>', '"', "'", '\\', '#', '\n', ' ', '-', '0x', '1e99', '-9223372036854775809', 'nan', 'inf',
  'name', 'input', 'dims', 'max_batch_size', 'data_type', 'TYPE_FP32', 'TYPE_NOPE', 'true', 'key', 'value', 'string_value', '"\\x', '"\\u12', '"a\nb"',
);

describe('the pbtxt parser never fails but with a ConfigError', () => {
  it('for random text', () => {
    fc.assert(fc.property(fc.string({ maxLength: 200, unit: 'binary' }), (text) => {
      parseOnly(text);
    }), { numRuns: NUM_RUNS });
  });

  it('for streams of pbtxt tokens', () => {
    fc.assert(fc.property(fc.array(tokens, { maxLength: 60 }), (parts) => {
      parseOnly(parts.join(' '));
    }), { numRuns: NUM_RUNS });
  });

  it('for a real config cut, spliced, or with a token inserted anywhere', () => {
    fc.assert(fc.property(fc.nat(REAL.length), fc.nat(REAL.length), tokens, fc.constantFrom('cut', 'splice', 'insert', 'delete'), (a, b, tok, how) => {
      const [i, j] = a <= b ? [a, b] : [b, a];
      const text = how === 'cut' ? REAL.slice(0, i)
        : how === 'splice' ? REAL.slice(0, i) + REAL.slice(j)
          : how === 'insert' ? REAL.slice(0, i) + tok + REAL.slice(i)
            : REAL.slice(0, i) + REAL.slice(i + 1);
      attempt(text);
    }), { numRuns: NUM_RUNS });
  });

  it('for nesting far deeper than any config has', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 20_000 }), fc.constantFrom('optimization {', 'dynamic_batching {', 'x {', 'dims: [', 'parameters { value {', '['), (depth, open) => {
      const close = open.endsWith('[') ? ']' : '}';
      parseOnly(`${open.repeat(depth)}${close.repeat(depth)}`);
    }), { numRuns: Math.min(NUM_RUNS, 100) });
  });

  it('reads the real config as it is', () => {
    expect(attempt(REAL)).toBe('ok');
  });
});
