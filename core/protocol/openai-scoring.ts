/**
 * The scoring routes of `classifier` models (core/encoders/classifier.ts), in the shapes the RAG
 * ecosystem's clients send and read (vLLM serves the same set):
 *
 * - `POST /v1/rerank`, `POST /v2/rerank`: `query`, `documents` (strings, or objects with `text` as
 *   Cohere's v1 and Jina's clients may send them), `top_n` (0 or absent: all), `return_documents`
 *   (default true); `results` sorted by `relevance_score`, highest first, each with its document's
 *   `index` in the request. Cohere's `max_tokens_per_doc` and `rank_fields` are not read.
 * - `POST /v1/score`: `text_1` against one or many `text_2` (one first text is paired with every
 *   second; otherwise the lists pair up by position), `data[i].score` in the order given.
 * - `POST /v1/classify`: `input` a text or a list; each gets its `label`, `probs` and `num_classes`.
 *
 * Rerank and score want a one-label model (a cross-encoder's relevance); classify takes any. The pairs
 * or texts go to the model as infer requests of up to its max_batch_size rows, which its dynamic
 * batcher gathers with other clients' into the batches its instances run. Usage counts the prompt
 * tokens the model read.
 */

import { TsiError } from '../errors.js';
import type { InferenceServer } from '../server.js';
import { decodeString, encodeString } from '../tensor.js';
import type { InferResponse } from '../types.js';
import { bad, openAiError, readOpenAiBody } from './openai-answer.js';

type Json = Record<string, any>;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** Whether a loaded model is a `classifier` model. */
export function isClassifierModel(server: InferenceServer, name: string): boolean {
  try {
    return server.model(name).config.backend === 'classifier';
  } catch {
    return false;
  }
}

interface Scored {
  scores: Float32Array;
  label: string;
  tokens: number;
}

/** The classifier model a body names. */
function modelOf(server: InferenceServer, body: Json): string {
  const name = body.model;
  if (typeof name !== 'string' || name === '') throw bad(`'model' is required: the name of a model (GET /v1/models lists them)`, 'model');
  if (!isClassifierModel(server, name)) {
    throw new TsiError('NOT_FOUND', `The model '${name}' does not exist or is not a classifier / reranker model (GET /v1/models lists those served)`);
  }
  return name;
}

/**
 * Scores `[text, pair?]` items (all with a pair, or none), in requests of up to the model's
 * max_batch_size rows each: a rerank of 100 documents is two requests, not 100, and the dynamic
 * batcher still gathers them with other clients'.
 */
async function scoreAll(server: InferenceServer, name: string, items: [string, string | undefined][]): Promise<Scored[]> {
  const maxBatch = server.model(name).config.max_batch_size ?? 0;
  const size = maxBatch > 0 ? maxBatch : 1;
  const chunks: [string, string | undefined][][] = [];
  for (let i = 0; i < items.length; i += size) chunks.push(items.slice(i, i + size));
  const answers = await Promise.all(chunks.map(async (chunk) => {
    const shape = maxBatch > 0 ? [chunk.length, 1] : [1];
    const r: InferResponse = await server.infer({
      model_name: name,
      inputs: [
        { name: 'text_input', datatype: 'BYTES', shape, data: chunk.map(([t]) => encodeString(t)) },
        ...(chunk[0]![1] === undefined ? [] : [{ name: 'text_pair', datatype: 'BYTES' as const, shape, data: chunk.map(([, p]) => encodeString(p!)) }]),
      ],
      outputs: [{ name: 'scores' }, { name: 'label' }, { name: 'num_tokens' }],
    });
    const out = (n: string) => r.outputs.find((o) => o.name === n)!;
    const scores = out('scores');
    const labels = scores.shape[scores.shape.length - 1]!;
    const data = scores.data as Float32Array;
    return chunk.map((_, k): Scored => ({
      scores: data.slice(k * labels, (k + 1) * labels),
      label: decodeString((out('label').data as Uint8Array[])[k]!),
      tokens: Number((out('num_tokens').data as Int32Array)[k]),
    }));
  }));
  return answers.flat();
}

/** The one score of a one-label model (rerank, score), refused for a model with several labels. */
function relevance(name: string, s: Scored): number {
  if (s.scores.length !== 1) {
    throw bad(`model '${name}' has ${s.scores.length} labels; reranking and scoring need a one-label model (a cross-encoder); use /v1/classify`, 'model');
  }
  return s.scores[0]!;
}

function texts(v: unknown, field: string, what: string): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v) && v.length > 0 && v.every((s) => typeof s === 'string')) return v as string[];
  throw bad(`'${field}' must be ${what}`, field);
}

/** Rerank's documents: strings, or objects whose `text` is the document (Cohere v1, Jina). */
function documentsOf(v: unknown): string[] {
  if (!Array.isArray(v) || v.length === 0) throw bad(`'documents' must be a non-empty list of strings or of objects with a 'text' string`, 'documents');
  return v.map((d, i) => {
    if (typeof d === 'string') return d;
    if (d && typeof d === 'object' && typeof (d as Json).text === 'string') return (d as Json).text as string;
    throw bad(`'documents[${i}]' must be a string or an object with a 'text' string`, 'documents');
  });
}

const usage = (scored: Scored[]) => {
  const tokens = scored.reduce((s, x) => s + x.tokens, 0);
  return { prompt_tokens: tokens, total_tokens: tokens };
};

const json = (body: Json) => new Response(JSON.stringify(body), { headers: JSON_HEADERS });

/** The body's answer, or OpenAI's error body for whatever goes wrong. */
async function answer(server: InferenceServer, req: Request, maxInput: number, build: (body: Json) => Promise<Json>): Promise<Response> {
  try {
    return json(await build(await readOpenAiBody(req, maxInput)));
  } catch (err) {
    return openAiError(err);
  }
}

/** `POST /v1/rerank` and `/v2/rerank`. */
export function rerank(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  return answer(server, req, maxInput, async (body) => {
    const name = modelOf(server, body);
    if (typeof body.query !== 'string') throw bad(`'query' must be a string`, 'query');
    const docs = documentsOf(body.documents);
    const topN = body.top_n ?? 0;
    if (typeof topN !== 'number' || !Number.isInteger(topN) || topN < 0) throw bad(`'top_n' must be a non-negative integer, got ${JSON.stringify(topN)}`, 'top_n');
    const withDocs = body.return_documents ?? true;
    if (typeof withDocs !== 'boolean') throw bad(`'return_documents' must be a boolean`, 'return_documents');
    const scored = await scoreAll(server, name, docs.map((d) => [body.query as string, d]));
    const results = scored.map((s, index) => ({ index, ...(withDocs ? { document: { text: docs[index]! } } : {}), relevance_score: relevance(name, s) }))
      // Stable: equal scores keep the documents' order.
      .sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
    return { id: `rerank-${crypto.randomUUID().replace(/-/g, '')}`, model: name, usage: usage(scored), results: topN > 0 ? results.slice(0, topN) : results };
  });
}

/** `POST /v1/score`. */
export function score(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  return answer(server, req, maxInput, async (body) => {
    const name = modelOf(server, body);
    const first = texts(body.text_1, 'text_1', 'a string or a non-empty list of strings');
    const second = texts(body.text_2, 'text_2', 'a string or a non-empty list of strings');
    if (first.length !== 1 && first.length !== second.length) {
      throw bad(`'text_1' has ${first.length} texts and 'text_2' ${second.length}: give one text_1 for all, or as many as text_2`, 'text_1');
    }
    const scored = await scoreAll(server, name, second.map((t, i) => [first.length === 1 ? first[0]! : first[i]!, t]));
    const data = scored.map((s, index) => ({ index, object: 'score', score: relevance(name, s) }));
    return { id: `score-${crypto.randomUUID().replace(/-/g, '')}`, object: 'list', created: Math.floor(Date.now() / 1000), model: name, data, usage: { ...usage(scored), completion_tokens: 0 } };
  });
}

/** `POST /v1/classify`. */
export function classify(server: InferenceServer, req: Request, maxInput: number): Promise<Response> {
  return answer(server, req, maxInput, async (body) => {
    const name = modelOf(server, body);
    const inputs = texts(body.input, 'input', 'a string or a non-empty list of strings');
    const scored = await scoreAll(server, name, inputs.map((t) => [t, undefined]));
    const data = scored.map((s, index) => ({ index, label: s.label, probs: Array.from(s.scores), num_classes: s.scores.length }));
    return { id: `classify-${crypto.randomUUID().replace(/-/g, '')}`, object: 'list', created: Math.floor(Date.now() / 1000), model: name, data, usage: { ...usage(scored), completion_tokens: 0 } };
  });
}
