/**
 * `/v1/rerank`, `/v2/rerank`, `/v1/score`, `/v1/classify` and the `classifier` backend against the real
 * Node server and the default repository's generated cross-encoders: tiny_rerank (BERT-style: WordPiece,
 * token type ids), tiny_rerank_xlmr (XLM-R-style: Unigram, no token type ids) and tiny_classify (three
 * labels, softmax). Every score equals two references on the same files within 1e-5:
 *
 * - raw onnxruntime-node fed the pair as transformers (Python) builds it with `truncation="only_second"`
 *   (the tokenizer reference, @huggingface/tokenizers, for each text; the template and the cut by hand);
 * - transformers.js's AutoModelForSequenceClassification on the same folder in the Optimum layout
 *   (onnx/model.onnx), its tokenizer's ids checked equal to the server's for pairs that fit. For pairs
 *   longer than the limit its tokenizer cuts the whole sequence's tail (dropping the last separator),
 *   which Python's tokenizers do not, so there it runs on the reference's only_second ids.
 *
 * Also: batched equals alone (the dynamic batcher gathers a rerank's documents), `top_n`, sorting and
 * indices, Cohere- and Jina-shaped bodies as their clients send them, OpenAI-style errors, and Triton's
 * infer API on the same models (text as BYTES).
 */

import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForSequenceClassification, AutoTokenizer, Tensor, env, type PreTrainedModel, type PreTrainedTokenizer } from '@huggingface/transformers';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const RERANKERS = ['tiny_rerank', 'tiny_rerank_xlmr'] as const;
type Name = (typeof RERANKERS)[number] | 'tiny_classify';
const MAX = 64;

const QUERY = 'what did the cat sit on?';
const DOCS = [
  'The cat sat on the mat.',
  'Triton serves a model over HTTP and gRPC.',
  'a',
  'Dogs and cats, in the text of a document.',
  `${'the search query embeds the document '.repeat(12)}tail`,
  'A tensor is a vector of vectors.',
  'The mat is where the cat sat',
  '',
];

interface Ref {
  hf: HfTokenizer;
  session: ort.InferenceSession;
  types: boolean;
  tj: { tok: PreTrainedTokenizer; model: PreTrainedModel };
}

let server: TestServer;
let root: string;
const refs = new Map<Name, Ref>();

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tsi-rerank-'));
  // The Optimum layout transformers.js reads: <name>/onnx/model.onnx; the server serves it too.
  await mkdir(join(root, 'repo'));
  for (const name of [...RERANKERS, 'tiny_classify'] as Name[]) {
    const hub = join(root, 'hub', name);
    await mkdir(join(hub, 'onnx'), { recursive: true });
    for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) await cp(join(MODELS, name, '1', f), join(hub, f));
    await cp(join(MODELS, name, '1', 'model.onnx'), join(hub, 'onnx', 'model.onnx'));
    await mkdir(join(root, 'repo', `${name}_hub`));
    await symlink(hub, join(root, 'repo', `${name}_hub`, '1'));
    await writeFile(join(root, 'repo', `${name}_hub`, 'config.pbtxt'), 'backend: "classifier"\nmax_batch_size: 8\n');
  }
  // The same files with the activation overridden by the config: raw logits.
  await mkdir(join(root, 'repo', 'tiny_rerank_raw'));
  await symlink(join(root, 'hub', 'tiny_rerank'), join(root, 'repo', 'tiny_rerank_raw', '1'));
  await writeFile(join(root, 'repo', 'tiny_rerank_raw', 'config.pbtxt'), 'backend: "classifier"\nmax_batch_size: 8\nparameters { key: "activation" value { string_value: "none" } }\n');
  env.localModelPath = join(root, 'hub') + '/';
  env.allowRemoteModels = false;
  for (const name of [...RERANKERS, 'tiny_classify'] as Name[]) {
    const dir = join(MODELS, name, '1');
    const session = await ort.InferenceSession.create(join(dir, 'model.onnx'));
    refs.set(name, {
      hf: new HfTokenizer(JSON.parse(await readFile(join(dir, 'tokenizer.json'), 'utf8')), JSON.parse(await readFile(join(dir, 'tokenizer_config.json'), 'utf8'))),
      session, types: session.inputNames.includes('token_type_ids'),
      tj: { tok: await AutoTokenizer.from_pretrained(name), model: await AutoModelForSequenceClassification.from_pretrained(name, { dtype: 'fp32' }) },
    });
  }
  server = await startTestServer({
    modelRepositories: [MODELS, join(root, 'repo')], modelControlMode: 'explicit',
    loadModels: [...RERANKERS, 'tiny_classify', 'tiny_embed', 'tiny_rerank_hub', 'tiny_rerank_xlmr_hub', 'tiny_rerank_raw'],
  });
}, 120_000);

afterAll(async () => {
  for (const r of refs.values()) {
    await r.session.release();
    await r.tj.model.dispose();
  }
  await server?.stop();
  if (root) await rm(root, { recursive: true, force: true });
});

/** The pair as transformers (Python) builds it: the model's template, the second text cut to fit (only_second). */
function pairIds(name: Name, a: string, b: string): { ids: number[]; types: number[] } {
  const { hf } = refs.get(name)!;
  const ta: number[] = hf.encode(a, { add_special_tokens: false }).ids;
  const tb: number[] = b === '' ? [] : hf.encode(b, { add_special_tokens: false }).ids;
  const id = (t: string) => hf.token_to_id(t)!;
  const bert = name !== 'tiny_rerank_xlmr';
  const [cls, sep] = bert ? [id('[CLS]'), id('[SEP]')] : [id('<s>'), id('</s>')];
  const specials = bert ? 3 : 4;
  const kept = tb.slice(0, Math.max(0, MAX - specials - ta.length));
  const first = [cls, ...ta, sep];
  const second = bert ? [...kept, sep] : [sep, ...kept, sep];
  return { ids: [...first, ...second], types: [...first.map(() => 0), ...second.map(() => (bert ? 1 : 0))] };
}

function singleIds(name: Name, a: string): { ids: number[]; types: number[] } {
  const ids: number[] = refs.get(name)!.hf.encode(a).ids;
  return { ids, types: ids.map(() => 0) };
}

const i64 = (a: number[]) => BigInt64Array.from(a.map(BigInt));

/** The logits of one row run alone through onnxruntime-node. */
async function ortLogits(name: Name, row: { ids: number[]; types: number[] }): Promise<number[]> {
  const r = refs.get(name)!;
  const t = (a: number[]) => new ort.Tensor('int64', i64(a), [1, a.length]);
  const feeds: Record<string, ort.Tensor> = { input_ids: t(row.ids), attention_mask: t(row.ids.map(() => 1)) };
  if (r.types) feeds.token_type_ids = t(row.types);
  return Array.from((await r.session.run(feeds)).logits!.data as Float32Array);
}

/** The logits of one row through transformers.js's model. */
async function tjLogits(name: Name, row: { ids: number[]; types: number[] }): Promise<number[]> {
  const t = (a: number[]) => new Tensor('int64', i64(a), [1, a.length]);
  const out = await refs.get(name)!.tj.model({ input_ids: t(row.ids), attention_mask: t(row.ids.map(() => 1)), token_type_ids: t(row.types) });
  return Array.from(out.logits.data as Float32Array);
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const softmax = (v: number[]) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};
const close = (got: number, want: number, what: string) => expect(Math.abs(got - want), `${what}: ${got} vs ${want}`).toBeLessThan(1e-5);

describe.each(RERANKERS)('%s', (name) => {
  it('tokenizes pairs as transformers.js does when they fit, as only_second cuts them when they do not', async () => {
    const { tok } = refs.get(name)!.tj;
    for (const d of DOCS) {
      const want = pairIds(name, QUERY, d);
      const enc = tok(QUERY, { text_pair: d || null, return_tensor: false }) as unknown as { input_ids: number[] };
      if (enc.input_ids.length <= MAX && d !== '') expect(enc.input_ids, d).toEqual(want.ids);
      else expect(want.ids.length).toBeLessThanOrEqual(MAX);
    }
    expect(pairIds(name, QUERY, DOCS[4]!).ids).toHaveLength(MAX);
  });

  it('scores every pair as onnxruntime and transformers.js do, batched as alone (long pairs included)', async () => {
    const before = (await getJson(`${server.url}/v2/models/${name}/stats`)).body.model_stats[0];
    const r = await postJson(`${server.url}/v1/rerank`, { model: name, query: QUERY, documents: DOCS });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.results).toHaveLength(DOCS.length);
    let tokens = 0;
    for (const res of r.body.results as { index: number; relevance_score: number; document: { text: string } }[]) {
      const row = pairIds(name, QUERY, DOCS[res.index]!);
      tokens += row.ids.length;
      expect(res.document.text).toBe(DOCS[res.index]);
      close(res.relevance_score, sigmoid((await ortLogits(name, row))[0]!), `onnxruntime, document ${res.index}`);
      close(res.relevance_score, sigmoid((await tjLogits(name, row))[0]!), `transformers.js, document ${res.index}`);
      const alone = await postJson(`${server.url}/v1/rerank`, { model: name, query: QUERY, documents: [DOCS[res.index]] });
      close(alone.body.results[0].relevance_score, res.relevance_score, `alone, document ${res.index}`);
    }
    expect(r.body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    const after = (await getJson(`${server.url}/v2/models/${name}/stats`)).body.model_stats[0];
    const rows = Number(after.inference_count) - Number(before.inference_count);
    const runs = Number(after.execution_count) - Number(before.execution_count);
    expect(rows).toBe(2 * DOCS.length);
    // The first call's documents were gathered by the dynamic batcher: fewer runs than rows.
    expect(runs).toBeLessThan(rows);
  }, 60_000);

  it('equals transformers.js end to end (its tokenizer, its model) on pairs that fit', async () => {
    const { tok, model } = refs.get(name)!.tj;
    const docs = DOCS.filter((d, i) => i !== 4 && d !== '');
    const enc = tok(docs.map(() => QUERY), { text_pair: docs, padding: true, truncation: true });
    const logits = Array.from((await model(enc)).logits.data as Float32Array);
    const r = await postJson(`${server.url}/v1/score`, { model: name, text_1: QUERY, text_2: docs });
    expect(r.body.data.map((d: { index: number }) => d.index)).toEqual(docs.map((_, i) => i));
    docs.forEach((d, i) => close(r.body.data[i].score, sigmoid(logits[i]!), d));
  });

  it('sorts by relevance, keeps each document\'s index, cuts at top_n and leaves documents out when asked', async () => {
    const all = (await postJson(`${server.url}/v1/rerank`, { model: name, query: QUERY, documents: DOCS })).body.results as { index: number; relevance_score: number }[];
    const scores = all.map((x) => x.relevance_score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
    expect(all.map((x) => x.index).sort((a, b) => a - b)).toEqual(DOCS.map((_, i) => i));
    const top = await postJson(`${server.url}/v2/rerank`, { model: name, query: QUERY, documents: DOCS, top_n: 3, return_documents: false });
    expect(top.body.results).toEqual(all.slice(0, 3).map(({ index, relevance_score }) => ({ index, relevance_score })));
    expect(top.body.model).toBe(name);
    expect(top.body.id).toMatch(/^rerank-/);
  });
});

describe('bodies as clients send them', () => {
  it('takes Cohere v1 (document objects, return_documents), Cohere v2 (strings, max_tokens_per_doc) and Jina bodies', async () => {
    const docs = DOCS.slice(0, 4);
    const want = (await postJson(`${server.url}/v1/rerank`, { model: 'tiny_rerank', query: QUERY, documents: docs })).body.results;
    // cohere-ai's v1 client: documents may be objects, rank_fields and max_chunks_per_doc ride along.
    const v1 = await postJson(`${server.url}/v1/rerank`, {
      model: 'tiny_rerank', query: QUERY, documents: docs.map((text) => ({ text, title: 'x' })), top_n: 2, return_documents: true, max_chunks_per_doc: 10,
    });
    expect(v1.status).toBe(200);
    expect(v1.body.results).toEqual(want.slice(0, 2));
    // cohere-ai's v2 client: strings only, max_tokens_per_doc, no return_documents; reads index and relevance_score.
    const v2 = await postJson(`${server.url}/v2/rerank`, { model: 'tiny_rerank', query: QUERY, documents: docs, top_n: 4, max_tokens_per_doc: 4096 });
    expect(v2.body.results.map((x: { index: number; relevance_score: number }) => [x.index, x.relevance_score])).toEqual(want.map((x: { index: number; relevance_score: number }) => [x.index, x.relevance_score]));
    // Jina's API body; its clients read results[].document.text and usage.total_tokens.
    const jina = await postJson(`${server.url}/v1/rerank`, { model: 'tiny_rerank', query: QUERY, documents: docs, top_n: 3, return_documents: true });
    expect(jina.body.results).toEqual(want.slice(0, 3));
    expect(jina.body.usage.total_tokens).toBeGreaterThan(0);
  });
});

describe('/v1/score and /v1/classify', () => {
  it('scores one text_1 against many text_2, and lists pairwise', async () => {
    const r = await postJson(`${server.url}/v1/score`, { model: 'tiny_rerank_xlmr', text_1: ['a cat', 'the dog'], text_2: ['the mat', 'a search query'] });
    expect(r.status).toBe(200);
    expect(r.body.object).toBe('list');
    for (const [i, [a, b]] of [['a cat', 'the mat'], ['the dog', 'a search query']].entries()) {
      expect(r.body.data[i]).toMatchObject({ index: i, object: 'score' });
      close(r.body.data[i].score, sigmoid((await ortLogits('tiny_rerank_xlmr', pairIds('tiny_rerank_xlmr', a!, b!)))[0]!), `${a} / ${b}`);
    }
    expect(r.body.usage.completion_tokens).toBe(0);
  });

  it('classifies with labels and softmax probabilities equal to the references', async () => {
    const texts = ['The cat sat on the mat.', 'slow server', 'fast tensor!'];
    const r = await postJson(`${server.url}/v1/classify`, { model: 'tiny_classify', input: texts });
    expect(r.status).toBe(200);
    let tokens = 0;
    for (const [i, t] of texts.entries()) {
      const row = singleIds('tiny_classify', t);
      tokens += row.ids.length;
      const probs = softmax(await ortLogits('tiny_classify', row));
      const tj = softmax(await tjLogits('tiny_classify', row));
      const d = r.body.data[i];
      expect(d.num_classes).toBe(3);
      d.probs.forEach((p: number, j: number) => { close(p, probs[j]!, `${t} ${j}`); close(p, tj[j]!, `${t} ${j} transformers.js`); });
      expect(d.label).toBe(['negative', 'neutral', 'positive'][probs.indexOf(Math.max(...probs))]);
    }
    expect(r.body.usage.prompt_tokens).toBe(tokens);
  });
});

describe('activation', () => {
  it('follows config.json (sigmoid for one label) unless the config parameter says otherwise', async () => {
    const docs = DOCS.slice(0, 3);
    const raw = await postJson(`${server.url}/v1/score`, { model: 'tiny_rerank_raw', text_1: QUERY, text_2: docs });
    const sig = await postJson(`${server.url}/v1/score`, { model: 'tiny_rerank', text_1: QUERY, text_2: docs });
    for (const [i, d] of docs.entries()) {
      const logit = (await ortLogits('tiny_rerank', pairIds('tiny_rerank', QUERY, d)))[0]!;
      close(raw.body.data[i].score, logit, `raw ${i}`);
      close(sig.body.data[i].score, sigmoid(logit), `sigmoid ${i}`);
    }
  });
});

describe('Triton infer API and the Optimum layout', () => {
  it('takes text_input and text_pair as BYTES [n, 1] and returns FP32 scores [n, 1]', async () => {
    const pairs = [[QUERY, DOCS[0]!], [QUERY, DOCS[4]!]];
    for (const name of ['tiny_rerank', 'tiny_rerank_hub', 'tiny_rerank_xlmr_hub']) {
      const ref = name.replace('_hub', '') as Name;
      const r = await postJson(`${server.url}/v2/models/${name}/infer`, {
        inputs: [
          { name: 'text_input', datatype: 'BYTES', shape: [2, 1], data: pairs.map((p) => p[0]) },
          { name: 'text_pair', datatype: 'BYTES', shape: [2, 1], data: pairs.map((p) => p[1]) },
        ],
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const scores = r.body.outputs.find((o: { name: string }) => o.name === 'scores');
      expect(scores.datatype).toBe('FP32');
      expect(scores.shape).toEqual([2, 1]);
      for (const [i, [a, b]] of pairs.entries()) close(scores.data[i], sigmoid((await ortLogits(ref, pairIds(ref, a!, b!)))[0]!), `${name} row ${i}`);
      expect(r.body.outputs.find((o: { name: string }) => o.name === 'num_tokens').data).toEqual(pairs.map(([a, b]) => pairIds(ref, a!, b!).ids.length));
    }
    const cfg = (await getJson(`${server.url}/v2/models/tiny_rerank_hub/config`)).body;
    expect(cfg.input.map((i: { name: string }) => i.name)).toEqual(['text_input', 'text_pair']);
    expect(cfg.output.map((o: { name: string }) => o.name)).toEqual(['scores', 'label', 'num_tokens']);
  });
});

describe('errors', () => {
  it('refuses bad requests the way OpenAI does, and keeps serving', async () => {
    const cases: [string, unknown, number, string | null, RegExp?][] = [
      ['/v1/rerank', { model: 'nope', query: 'q', documents: ['d'] }, 404, null],
      ['/v1/rerank', { model: 'tiny_embed', query: 'q', documents: ['d'] }, 404, null, /not a classifier/],
      ['/v1/rerank', { model: 'tiny_rerank', documents: ['d'] }, 400, 'query'],
      ['/v1/rerank', { model: 'tiny_rerank', query: 'q', documents: [] }, 400, 'documents'],
      ['/v1/rerank', { model: 'tiny_rerank', query: 'q', documents: [{ title: 'x' }] }, 400, 'documents'],
      ['/v1/rerank', { model: 'tiny_rerank', query: 'q', documents: ['d'], top_n: -1 }, 400, 'top_n'],
      ['/v1/rerank', { model: 'tiny_classify', query: 'q', documents: ['d'] }, 400, 'model', /3 labels/],
      ['/v1/rerank', { model: 'tiny_rerank', query: 'word '.repeat(80), documents: ['d'] }, 400, null, /tiny_rerank.*only the second text is truncated/],
      ['/v1/score', { model: 'tiny_rerank', text_1: ['a', 'b'], text_2: ['c', 'd', 'e'] }, 400, 'text_1'],
      ['/v1/score', { model: 'tiny_rerank', text_1: 'a' }, 400, 'text_2'],
      ['/v1/classify', { model: 'tiny_classify', input: [] }, 400, 'input'],
      ['/v1/classify', { model: 'tiny_classify', input: 'word '.repeat(80) }, 400, null, /tiny_classify.*text_input.*64/],
    ];
    for (const [path, body, status, param, message] of cases) {
      const r = await postJson(`${server.url}${path}`, body);
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(status);
      expect(r.body.error.param).toBe(param);
      if (message) expect(r.body.error.message).toMatch(message);
    }
    expect((await postJson(`${server.url}/v1/rerank`, { model: 'tiny_rerank', query: 'q', documents: ['still here'] })).body.results).toHaveLength(1);
    const models = (await getJson(`${server.url}/v1/models`)).body.data.map((m: { id: string }) => m.id);
    expect(models).toEqual(expect.arrayContaining(['tiny_rerank', 'tiny_rerank_xlmr', 'tiny_classify', 'tiny_embed']));
  });
});
