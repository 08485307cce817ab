/**
 * Structured outputs beyond JSON schema and the sampling fields of issue #52, against the real Node
 * server and the default repository's tiny_gpt (random weights: left free, its text matches nothing,
 * so a match is the grammar's doing). For vLLM's `structured_outputs.regex` / `.choice` / `.grammar`
 * (GBNF) and llama.cpp's top-level `grammar`, 200 samples at temperature 1 (seeded, n = 100 twice)
 * each match, checked by JavaScript's own RegExp or JSON.parse, never by tsi's grammar code; what
 * cannot compile is a 400 naming the field and where. `logit_bias` and `min_p` are checked against
 * raw onnxruntime's logits and the answer's own log-probabilities, `truncate_prompt_tokens` by the
 * usage and the greedy text of the kept tokens; Triton's ORCA header on generate in both formats;
 * `stop_words: ""` (L0_orca's request); the inter-token-latency histogram moving with a stream.
 */

import { join } from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePrometheus } from '../helpers/grpc.js';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { referenceDecoder, type ReferenceDecoder } from './llm-reference.js';

let server: TestServer;
let ref: ReferenceDecoder;

beforeAll(async () => {
  server = await startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['tiny_gpt'], metricsPort: 0 });
  ref = await referenceDecoder(join(MODELS, 'tiny_gpt'));
}, 60_000);

afterAll(async () => {
  await ref?.release();
  await server?.stop();
});

const completions = (body: Record<string, unknown>) => postJson(`${server.url}/v1/completions`, { model: 'tiny_gpt', ...body });
const chat = (body: Record<string, unknown>) => postJson(`${server.url}/v1/chat/completions`, { model: 'tiny_gpt', messages: [{ role: 'user', content: 'Answer me' }], ...body });

/**
 * A text read by a structural tag's rules, apart from tsi's grammar code: free text until a trigger,
 * which must open one of the tags (its begin), whose JSON (up to an end that makes it parse and
 * validate) is followed by its end, then free text again (or nothing, `stopAfterFirst`). The number of
 * tags, or what went wrong where.
 */
function readTags(text: string, triggers: string[], tags: { begin: string; end: string; valid: (v: unknown) => boolean }[], stopAfterFirst = false): number | string {
  let count = 0;
  for (let i = 0; ;) {
    const at = Math.min(...triggers.map((t) => text.indexOf(t, i)).filter((j) => j >= 0));
    if (at === Infinity) return count;
    const tag = tags.find((t) => text.startsWith(t.begin, at));
    if (!tag) return `${JSON.stringify(text)}: a trigger at ${at} opens no tag`;
    const from = at + tag.begin.length;
    let to = -1;
    for (let e = text.indexOf(tag.end, from); e >= 0 && to < 0; e = text.indexOf(tag.end, e + 1)) {
      try {
        if (tag.valid(JSON.parse(text.slice(from, e)))) to = e;
      } catch {
        // Not this end: the JSON goes on.
      }
    }
    if (to < 0) return `${JSON.stringify(text)}: the tag at ${at} holds no valid JSON before its end`;
    count++;
    i = to + tag.end.length;
    if (stopAfterFirst) return i === text.length ? count : `${JSON.stringify(text)}: text after the first tag`;
  }
}

/** 200 sampled texts: two requests of n = 100 at temperature 1 with different seeds. */
async function samples(send: (body: Record<string, unknown>) => ReturnType<typeof postJson>, body: Record<string, unknown>): Promise<string[]> {
  const texts: string[] = [];
  for (const seed of [11, 12]) {
    const r = await send({ ...body, n: 100, temperature: 1, seed });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    for (const c of r.body.choices) texts.push(c.text ?? c.message.content);
  }
  expect(texts).toHaveLength(200);
  return texts;
}

describe('structured_outputs', () => {
  it('regex: every sampled completion matches', async () => {
    const regex = '(yes|no)!|[0-9]{1,3}(-[a-z]{2,5})?|x+y?z';
    const texts = await samples(completions, { prompt: 'Say something', max_tokens: 10, structured_outputs: { regex } });
    const re = new RegExp(`^(?:${regex})$`);
    expect(texts.filter((t) => !re.test(t))).toEqual([]);
    // Sampled, not one greedy answer: many different texts, every branch taken.
    expect(new Set(texts).size).toBeGreaterThan(50);
  }, 120_000);

  it('choice: every sampled chat answer is one of the choices', async () => {
    const choice = ['red', 'green', 'blue', 'a longer choice, with spaces', 'résumé', 're'];
    const texts = await samples(chat, { max_tokens: 12, structured_outputs: { choice } });
    expect(texts.filter((t) => !choice.includes(t))).toEqual([]);
    // The model's own preferences among them (random weights favour a few), sampled: more than one.
    expect(new Set(texts).size).toBeGreaterThanOrEqual(3);
    // 're' is complete but 'red' goes on: the model's end token is allowed there, and it takes it.
    expect(texts).toContain('re');
  }, 120_000);

  it('grammar (GBNF, vLLM\'s field and llama.cpp\'s): every sampled answer parses as the grammar says', async () => {
    const grammar = [
      '# nested lists of digits and short words, as JSON writes them',
      'root  ::= list',
      'list  ::= "[" ( value ( "," value )* )? "]"',
      'value ::= [0-9] | list | "\\"" [a-z]{1,3} "\\""',
    ].join('\n');
    const valid = (v: unknown): boolean => Array.isArray(v) && v.every((x) => (typeof x === 'number' && Number.isInteger(x) && x >= 0 && x <= 9) || (typeof x === 'string' && /^[a-z]{1,3}$/.test(x)) || valid(x));
    const check = (texts: string[]) => {
      const wrong = texts.filter((t) => {
        try {
          const v = JSON.parse(t);
          return !valid(v) || JSON.stringify(v) !== t;
        } catch {
          return true;
        }
      });
      expect(wrong).toEqual([]);
      // Sampled (the model favours `[1]`), and the recursion used: lists inside lists.
      expect(new Set(texts).size).toBeGreaterThanOrEqual(5);
      expect(texts.some((t) => t.startsWith('[['))).toBe(true);
    };
    check(await samples(completions, { prompt: 'A list:', max_tokens: 24, structured_outputs: { grammar } }));
    check(await samples(chat, { max_tokens: 24, grammar }));
  }, 120_000);

  it('structural_tag (vLLM\'s first form): free text, each trigger opening a tag whose JSON validates, free text after it', async () => {
    // A trigger the random model writes often ('e'), so samples hold several tags between free text.
    const schema = { type: 'object', properties: { n: { type: 'integer' }, s: { type: 'string', maxLength: 3 } }, required: ['n'] };
    const spec = { type: 'structural_tag', structures: [{ begin: 'e<', schema, end: '>' }], triggers: ['e'] };
    const validate = new Ajv({ strict: false }).compile(schema);
    const check = (texts: string[]) => {
      const read = texts.map((t) => readTags(t, ['e'], [{ begin: 'e<', end: '>', valid: (v) => validate(v) }]));
      expect(read.filter((r) => typeof r === 'string')).toEqual([]);
      // Tags were opened (most samples: 'e' is common in the model's free text), some twice, and free text followed them.
      const counts = read as number[];
      expect(counts.filter((n) => n >= 1).length).toBeGreaterThan(150);
      expect(counts.filter((n) => n >= 2).length).toBeGreaterThanOrEqual(5);
      expect(texts.filter((t) => /e<[^>]*>./s.test(t)).length).toBeGreaterThan(20);
    };
    check(await samples(completions, { prompt: 'Write:', max_tokens: 32, structured_outputs: { structural_tag: JSON.stringify(spec) } }));
    check(await samples(chat, { max_tokens: 32, response_format: spec }));
  }, 120_000);

  it('structural_tag (xgrammar\'s triggered_tags): at_least_one and stop_after_first give exactly one tag, last', async () => {
    const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 6 } }, required: ['city'] };
    const time = { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'] };
    const tags = [{ begin: '<function=get_weather>', content: { type: 'json_schema', json_schema: weather }, end: '</function>' }, { begin: '<function=get_time>', content: { type: 'json_schema', json_schema: time }, end: '</function>' }];
    const spec = { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<function='], tags, at_least_one: true, stop_after_first: true } };
    const [w, z] = [new Ajv({ strict: false }).compile(weather), new Ajv({ strict: false }).compile(time)];
    const texts = await samples(completions, { prompt: 'Call:', max_tokens: 64, structured_outputs: { structural_tag: spec } });
    const read = texts.map((t) => readTags(t, ['<function='], [{ begin: tags[0]!.begin, end: '</function>', valid: (v) => w(v) }, { begin: tags[1]!.begin, end: '</function>', valid: (v) => z(v) }], true));
    expect(read.filter((r) => r !== 1)).toEqual([]);
    expect(texts.filter((t) => !t.endsWith('</function>'))).toEqual([]);
    // Both tags are taken.
    expect(texts.some((t) => t.includes('get_weather')) && texts.some((t) => t.includes('get_time'))).toBe(true);
  }, 120_000);

  it('streams the same constrained text as the whole answer, and on generate too', async () => {
    const body = { prompt: 'Count', max_tokens: 8, temperature: 1, seed: 3, structured_outputs: { regex: '[0-9]+(\\.[0-9]+)?' } };
    const whole = await completions(body);
    const r = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'tiny_gpt', ...body, stream: true }) });
    const streamed = (await r.text()).split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)).choices[0]?.text ?? '').join('');
    expect(streamed).toBe(whole.body.choices[0].text);
    expect(streamed).toMatch(/^[0-9]+(\.[0-9]+)?$/);
    // Triton's generate: vLLM's older flat names, and structured_outputs as JSON text.
    const g1 = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, { text_input: 'Colour:', max_tokens: 8, temperature: 1, seed: 4, guided_choice: '["cyan", "magenta"]' });
    expect(g1.status, JSON.stringify(g1.body)).toBe(200);
    expect(['cyan', 'magenta']).toContain(g1.body.text_output.slice('Colour:'.length));
    const g2 = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, { text_input: 'x', exclude_input_in_output: true, max_tokens: 6, temperature: 1, seed: 5, structured_outputs: JSON.stringify({ regex: '[a-c]{3}' }) });
    expect(g2.body.text_output).toMatch(/^[a-c]{3}$/);
    // vLLM's older OpenAI extras.
    const older = await completions({ prompt: 'x', max_tokens: 6, temperature: 1, seed: 6, guided_regex: '[xyz]{2,3}' });
    expect(older.body.choices[0].text).toMatch(/^[xyz]{2,3}$/);
  }, 60_000);

  it('answers a 400 naming the field and the place for what it cannot compile, and keeps serving', async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ structured_outputs: { regex: 'ab(?=c)' } }, 'structured_outputs.regex', /lookaround '\(\?=' at position 2/],
      [{ structured_outputs: { regex: '(a)\\1' } }, 'structured_outputs.regex', /backreference \\1 at position 3/],
      [{ structured_outputs: { regex: '[a-' } }, 'structured_outputs.regex', /unclosed '\[' at position 0/],
      [{ structured_outputs: { grammar: 'root ::= item\nitem ::= "a" missing' } }, 'structured_outputs.grammar', /rule 'missing' \(line 2, column 14\) is not defined/],
      [{ structured_outputs: { grammar: 'root ::= root "a" | "b"' } }, 'structured_outputs.grammar', /rule 'root' is left-recursive/],
      [{ grammar: 'item ::= "a"' }, 'grammar', /no rule named 'root'/],
      [{ structured_outputs: { choice: [] } }, 'structured_outputs.choice', /non-empty list of strings/],
      [{ structured_outputs: { regex: 'a', choice: ['b'] } }, 'structured_outputs', /exactly one of .* got regex and choice/],
      [{ structured_outputs: { structural_tag: '{}' } }, 'structured_outputs.structural_tag', /must have 'structures' and 'triggers', or a 'format' of type 'triggered_tags'/],
      [{ structured_outputs: { structural_tag: { structures: [{ begin: '<a>', schema: {}, end: '</a>' }], triggers: ['<', '<a'] } } }, 'structured_outputs.structural_tag', /trigger "<" is part of trigger "<a"/],
      [{ structured_outputs: { structural_tag: { structures: [{ begin: '[a]', schema: {}, end: '' }], triggers: ['<'] } } }, 'structured_outputs.structural_tag', /structures\[0\]\.begin "\[a\]" starts with none of the triggers/],
      [{ structured_outputs: { structural_tag: { structures: [{ begin: '<a', schema: {}, end: '' }, { begin: '<ab', schema: {}, end: '' }], triggers: ['<'] } } }, 'structured_outputs.structural_tag', /tag begin "<a" also starts tag begin "<ab"/],
      [{ structured_outputs: { structural_tag: { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<'], tags: [{ begin: '<a>', content: { type: 'regex', pattern: 'x' }, end: '' }] } } } }, 'structured_outputs.structural_tag', /format\.tags\[0\]\.content type "regex" is not supported/],
      [{ structured_outputs: { structural_tag: { structures: [{ begin: '<a>', schema: { type: 'string', pattern: 'x' }, end: '' }], triggers: ['<'] } } }, 'structured_outputs.structural_tag', /pattern/],
      [{ structured_outputs: { regex: 'a' }, response_format: { type: 'json_object' } }, 'structured_outputs', /only one structured output/],
    ];
    for (const [extra, param, message] of cases) {
      for (const send of [completions, chat]) {
        const r = await send({ prompt: 'x', max_tokens: 4, ...extra });
        expect([r.status, r.body.error?.param], JSON.stringify(r.body)).toEqual([400, param]);
        expect(r.body.error.message).toMatch(message);
        expect(r.body.error.message).toContain(`'${param}'`);
      }
    }
    const g = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, { text_input: 'x', guided_regex: 'a(?<=b)' });
    expect([g.status, g.body.error]).toEqual([400, expect.stringMatching(/'guided_regex': a lookaround '\(\?<=' at position 1/)]);
    expect((await completions({ prompt: 'x', max_tokens: 2 })).status).toBe(200);
  });
});

/** log-softmax of a row, in float64. */
function logSoftmax(row: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) max = Math.max(max, row[i]!);
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! - max);
  const z = max + Math.log(sum);
  return Array.from(row, (v) => v - z);
}

describe('sampling fields', () => {
  it('logit_bias moves the logits before sampling, as computed from raw onnxruntime', async () => {
    const prompt = 'The bias test';
    let first: Float32Array | undefined;
    const greedy = await ref.greedy(prompt, 3, { onToken: (_, logits) => (first ??= Float32Array.from(logits)) });
    // -100 on the greedy token: it never comes first again; +100 on another: it always comes.
    const banned = await completions({ prompt, max_tokens: 1, temperature: 0, logit_bias: { [greedy[0]!]: -100 } });
    expect(banned.body.choices[0].text).not.toBe(ref.tokenizer.decode([greedy[0]!]));
    const forced = await completions({ prompt, max_tokens: 5, n: 4, temperature: 1.5, seed: 1, logit_bias: { 1000: 100 } });
    for (const c of forced.body.choices) expect(c.text).toBe(ref.tokenizer.decode([1000, 1000, 1000, 1000, 1000]));
    // Token `lifted`, far down the model's ranking, biased to just above the top; the top one lowered by 3: the
    // reported log-probabilities are those of the biased softmax, computed here from raw onnxruntime's logits.
    const ranked = logSoftmax(first!).map((v, t) => ({ t, v })).sort((a, b) => b.v - a.v);
    const lifted = ranked[40]!.t;
    const bias = { [lifted]: Number((ranked[0]!.v - ranked[40]!.v + 0.25).toFixed(2)), [ranked[0]!.t]: -3 };
    const r = await completions({ prompt, max_tokens: 1, temperature: 1, seed: 2, logprobs: 5, logit_bias: bias });
    const row = Float32Array.from(first!);
    for (const [t, b] of Object.entries(bias)) row[Number(t)]! += b;
    const lp = logSoftmax(row);
    const top = r.body.choices[0].logprobs.top_logprobs[0] as Record<string, number>;
    const expected = lp.map((v, t) => ({ t, v })).sort((a, b) => b.v - a.v).slice(0, 5);
    expect(expected[0]!.t).toBe(lifted);
    expect(Object.keys(top)).toEqual(expected.map((e) => ref.tokenizer.decode([e.t])));
    expect(Object.values(top).map((v) => Number(v.toFixed(3)))).toEqual(expected.map((e) => Number(e.v.toFixed(3))));
    const outside = await completions({ prompt, max_tokens: 1, logit_bias: { 999999: 1 } });
    expect([outside.status, outside.body.error.message]).toEqual([400, expect.stringMatching(/'logit_bias' names token 999999, outside the vocabulary/)]);
    const range = await completions({ prompt, max_tokens: 1, logit_bias: { 5: 101 } });
    expect([range.status, range.body.error.message]).toEqual([400, expect.stringMatching(/'logit_bias' must be an object mapping token ids to biases in \[-100, 100\]/)]);
  }, 60_000);

  it('min_p: no token less likely than min_p times the likeliest is ever drawn', async () => {
    const minP = 0.3;
    let drawn = 0;
    let nearCut = 0;
    for (const seed of [1, 2]) {
      const r = await chat({ max_tokens: 16, n: 50, temperature: 1.3, seed, min_p: minP, logprobs: true, top_logprobs: 1 });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      for (const c of r.body.choices) {
        for (const t of c.logprobs.content) {
          // The reported log-probabilities are the tempered softmax before truncation: the cut is ln(min_p) below the top.
          expect(t.logprob - t.top_logprobs[0].logprob).toBeGreaterThanOrEqual(Math.log(minP) - 1e-4);
          if (t.logprob - t.top_logprobs[0].logprob < Math.log(0.6)) nearCut++;
          drawn++;
        }
      }
    }
    expect(drawn).toBeGreaterThan(1000);
    // The sampling is not greedy: tokens well below the top were drawn (a min_p of 0.6 would have cut them).
    expect(nearCut).toBeGreaterThan(20);
    const bad = await chat({ max_tokens: 1, min_p: 1.5 });
    expect([bad.status, bad.body.error.message]).toEqual([400, expect.stringMatching(/'min_p' must be a number in \[0, 1\]/)]);
  }, 60_000);

  it('truncate_prompt_tokens keeps the prompt\'s last N tokens', async () => {
    const prompt = 'one two three four five six seven eight nine ten';
    const ids = ref.tokenizer.encode(prompt);
    expect(ids.length).toBeGreaterThan(6);
    const r = await completions({ prompt, max_tokens: 6, temperature: 0, truncate_prompt_tokens: 4 });
    expect(r.body.usage.prompt_tokens).toBe(4);
    const kept = ref.tokenizer.decode(ids.slice(-4));
    expect(r.body.choices[0].text).toBe(ref.tokenizer.decode(await ref.greedy(kept, 6)));
    expect(r.body.choices[0].text).not.toBe(ref.tokenizer.decode(await ref.greedy(prompt, 6)));
    const all = await completions({ prompt, max_tokens: 2, truncate_prompt_tokens: 100 });
    expect(all.body.usage.prompt_tokens).toBe(ids.length);
    // prompt_logprobs are the kept tokens' (the first one's null).
    const scored = await completions({ prompt, prompt_logprobs: 1, max_tokens: 1, truncate_prompt_tokens: 4 });
    expect(scored.body.choices[0].prompt_logprobs.map((e: object | null) => e && Object.keys(e)[0] !== undefined)).toEqual([null, true, true, true]);
  }, 60_000);
});

describe('load signals', () => {
  it('sends Triton\'s ORCA header on generate when asked, in both formats; takes L0_orca\'s stop_words ""', async () => {
    const body = { text_input: 'hello world', max_tokens: 20, bad_words: '', stop_words: '' };
    const stats = (await getJson(`${server.url}/v2/models/tiny_gpt/stats`)).body.model_stats[0].llm_stats;
    const capacity = stats.kv_cache.max_tokens as number;
    expect(capacity).toBeGreaterThan(0);
    const plain = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, body);
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
    expect(plain.headers.get('endpoint-load-metrics')).toBeNull();
    const json = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, body, { 'endpoint-load-metrics-format': 'json' });
    expect(json.status).toBe(200);
    const header = json.headers.get('endpoint-load-metrics')!;
    expect(header).toMatch(/^JSON /);
    // Answered after the request ended: nothing reserved.
    expect(JSON.parse(header.slice(5))).toEqual({ named_metrics: { kv_cache_utilization: 0, max_token_capacity: capacity } });
    // A stream's answer starts while its request holds its KV reservation (prompt + max_tokens).
    const prompt = ref.tokenizer.encode('hello world').length;
    const r = await fetch(`${server.url}/v2/models/tiny_gpt/generate_stream`, { method: 'POST', body: JSON.stringify({ ...body, stream: true }), headers: { 'endpoint-load-metrics-format': 'text' } });
    const text = r.headers.get('endpoint-load-metrics');
    await r.text();
    expect(text).toBe(`TEXT named_metrics.kv_cache_utilization=${((prompt + 20) / capacity).toFixed(6)}, named_metrics.max_token_capacity=${capacity}`);
    const other = await postJson(`${server.url}/v2/models/tiny_gpt/generate`, body, { 'endpoint-load-metrics-format': 'yaml' });
    expect(other.headers.get('endpoint-load-metrics')).toBeNull();
  });

  it('observes each gap between a stream\'s tokens in vllm:inter_token_latency_seconds', async () => {
    const read = async () => {
      const m = parsePrometheus(await (await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`)).text());
      const v = (name: string) => m.samples.find((s) => s.name === name && s.labels.model === 'tiny_gpt')?.value ?? NaN;
      return { itl: v('vllm:inter_token_latency_seconds_count'), tpot: v('vllm:time_per_output_token_seconds_count'), sum: v('vllm:inter_token_latency_seconds_sum') };
    };
    const before = await read();
    const r = await fetch(`${server.url}/v2/models/tiny_gpt/generate_stream`, { method: 'POST', body: JSON.stringify({ text_input: 'tick', max_tokens: 9, ignore_eos: true }) });
    await r.text();
    const after = await read();
    expect(after.itl - before.itl).toBe(8);
    expect(after.tpot - before.tpot).toBe(8);
    expect(after.sum).toBeGreaterThan(before.sum);
  });
});
