/**
 * `/v1/embeddings` and the `embedding` backend, driven by the official `openai` npm client against the
 * real Node server and the default repository's tiny_embed (a BERT-shaped encoder with a WordPiece
 * tokenizer, mean pooling and normalisation): every vector equals running the ONNX file directly in
 * onnxruntime-node and pooling by hand, batched rows equal the same texts alone, base64 decodes to the
 * same floats, `dimensions` truncates and renormalises where the model allows it and is refused where
 * it does not, and Triton's infer API serves the same model (text in as BYTES, FP32 out).
 */

import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import * as ort from 'onnxruntime-node';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
let client: OpenAI;
let session: ort.InferenceSession;
let tokenizer: HfTokenizer;
let extra: string;

const DIR = join(MODELS, 'tiny_embed', '1');
const TEXTS = ['Hello world', 'The cat sat on the mat.', 'a', 'Search queries embed documents fast, and slowly!', 'tensor', 'Zebras? 42 of them', '', 'triton server model text'];

beforeAll(async () => {
  // A copy that keeps full-length vectors only and pools by [CLS]: the refusal and the override.
  extra = await mkdtemp(join(tmpdir(), 'tsi-embed-'));
  await cp(join(MODELS, 'tiny_embed'), join(extra, 'tiny_embed_cls'), { recursive: true });
  const cfg = (await readFile(join(extra, 'tiny_embed_cls', 'config.pbtxt'), 'utf8')).replace('name: "tiny_embed"', 'name: "tiny_embed_cls"');
  await writeFile(join(extra, 'tiny_embed_cls', 'config.pbtxt'), `${cfg}\nparameters [\n  { key: "pooling" value: { string_value: "cls" } },\n  { key: "matryoshka" value: { string_value: "false" } }\n]\n`);
  server = await startTestServer({ modelRepositories: [MODELS, extra], modelControlMode: 'explicit', loadModels: ['tiny_embed', 'tiny_embed_cls', 'simple'] });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  session = await ort.InferenceSession.create(join(DIR, 'model.onnx'));
  tokenizer = new HfTokenizer(JSON.parse(await readFile(join(DIR, 'tokenizer.json'), 'utf8')), JSON.parse(await readFile(join(DIR, 'tokenizer_config.json'), 'utf8')));
}, 60_000);

afterAll(async () => {
  await session?.release();
  await server?.stop();
  if (extra) await rm(extra, { recursive: true, force: true });
});

/** The text run alone through onnxruntime, pooled (mean or [CLS]) and normalised by hand. */
async function reference(text: string, pooling: 'mean' | 'cls' = 'mean'): Promise<{ v: number[]; tokens: number }> {
  const ids = tokenizer.encode(text).ids;
  const t = (a: number[]) => new ort.Tensor('int64', BigInt64Array.from(a.map(BigInt)), [1, a.length]);
  const out = await session.run({ input_ids: t(ids), attention_mask: t(ids.map(() => 1)), token_type_ids: t(ids.map(() => 0)) });
  const h = out.last_hidden_state!.data as Float32Array;
  const d = out.last_hidden_state!.dims[2]!;
  const v = new Array<number>(d).fill(0);
  if (pooling === 'cls') for (let j = 0; j < d; j++) v[j] = h[j]!;
  else for (let i = 0; i < ids.length; i++) for (let j = 0; j < d; j++) v[j]! += h[i * d + j]! / ids.length;
  const n = Math.hypot(...v);
  return { v: v.map((x) => x / n), tokens: ids.length };
}

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(1e-5);
}

describe('/v1/embeddings', () => {
  it('lists the embedding model beside the others it serves', async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toContain('tiny_embed');
    expect(ids).not.toContain('simple');
    expect((await client.models.retrieve('tiny_embed')).id).toBe('tiny_embed');
  });

  it('equals the ONNX model run directly and pooled by hand, batched as alone', async () => {
    const before = (await getJson(`${server.url}/v2/models/tiny_embed/stats`)).body.model_stats[0];
    const res = await client.embeddings.create({ model: 'tiny_embed', input: TEXTS, encoding_format: 'float' });
    expect(res.object).toBe('list');
    expect(res.model).toBe('tiny_embed');
    expect(res.data.map((d) => d.index)).toEqual(TEXTS.map((_, i) => i));
    let tokens = 0;
    for (const [i, text] of TEXTS.entries()) {
      const ref = await reference(text);
      tokens += ref.tokens;
      expectClose(res.data[i]!.embedding, ref.v);
      const alone = await client.embeddings.create({ model: 'tiny_embed', input: text, encoding_format: 'float' });
      expectClose(alone.data[0]!.embedding, res.data[i]!.embedding);
    }
    expect(res.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    const after = (await getJson(`${server.url}/v2/models/tiny_embed/stats`)).body.model_stats[0];
    // The eight texts of the first call were gathered by the dynamic batcher: fewer runs than rows.
    const rows = Number(after.inference_count) - Number(before.inference_count);
    const runs = Number(after.execution_count) - Number(before.execution_count);
    expect(rows).toBe(2 * TEXTS.length);
    expect(runs).toBeLessThan(rows);
  }, 60_000);

  it('sends base64 that decodes to the same floats (the client default and by name)', async () => {
    const floats = await client.embeddings.create({ model: 'tiny_embed', input: TEXTS.slice(0, 3), encoding_format: 'float' });
    // The client asks for base64 when no format is given and decodes it itself.
    const byDefault = await client.embeddings.create({ model: 'tiny_embed', input: TEXTS.slice(0, 3) });
    const raw = await postJson(`${server.url}/v1/embeddings`, { model: 'tiny_embed', input: TEXTS.slice(0, 3), encoding_format: 'base64' });
    expect(raw.status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const b = Buffer.from(raw.body.data[i].embedding as string, 'base64');
      const decoded = new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
      expect(Array.from(decoded)).toEqual(floats.data[i]!.embedding.map((x) => Math.fround(x)));
      expect(byDefault.data[i]!.embedding).toEqual(Array.from(decoded));
    }
  });

  it('truncates to `dimensions` and renormalises where the model allows it', async () => {
    const res = await client.embeddings.create({ model: 'tiny_embed', input: 'Hello world', dimensions: 8, encoding_format: 'float' });
    const full = (await reference('Hello world')).v.slice(0, 8);
    const n = Math.hypot(...full);
    expectClose(res.data[0]!.embedding, full.map((x) => x / n));
    await expect(client.embeddings.create({ model: 'tiny_embed', input: 'x', dimensions: 33 })).rejects.toMatchObject({ status: 400, param: 'dimensions' });
  });

  it('pools by the config parameter and refuses `dimensions` for a model that does not allow it', async () => {
    const res = await client.embeddings.create({ model: 'tiny_embed_cls', input: 'The cat sat', encoding_format: 'float' });
    expectClose(res.data[0]!.embedding, (await reference('The cat sat', 'cls')).v);
    const err = await client.embeddings.create({ model: 'tiny_embed_cls', input: 'x', dimensions: 8 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('dimensions');
    expect((err as Error).message).toMatch(/tiny_embed_cls.*does not support 'dimensions'/);
  });

  it('refuses bad requests the way OpenAI does, and keeps serving', async () => {
    const cases: [unknown, number, string | null][] = [
      [{ model: 'nope', input: 'x' }, 404, null],
      [{ model: 'simple', input: 'x' }, 404, null],
      [{ model: 'tiny_embed' }, 400, 'input'],
      [{ model: 'tiny_embed', input: [] }, 400, 'input'],
      [{ model: 'tiny_embed', input: [[1, 2, 3]] }, 400, 'input'],
      [{ model: 'tiny_embed', input: 'x', encoding_format: 'int8' }, 400, 'encoding_format'],
      [{ model: 'tiny_embed', input: 'x', dimensions: 0 }, 400, 'dimensions'],
      [{ model: 'tiny_embed', input: 'word '.repeat(200) }, 400, null],
    ];
    for (const [body, status, param] of cases) {
      const r = await postJson(`${server.url}/v1/embeddings`, body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(r.body.error.param).toBe(param);
      expect(typeof r.body.error.message).toBe('string');
    }
    const long = await postJson(`${server.url}/v1/embeddings`, { model: 'tiny_embed', input: 'word '.repeat(200) });
    expect(long.body.error.message).toMatch(/tiny_embed.*text_input.*802 tokens.*128/);
    expect((await client.embeddings.create({ model: 'tiny_embed', input: 'still here' })).data).toHaveLength(1);
  });
});

describe('Triton infer API', () => {
  it('takes text as BYTES [n, 1] and returns FP32 [n, dim] equal to the reference', async () => {
    const texts = ['Hello world', 'a much longer document about the cat'];
    const r = await postJson(`${server.url}/v2/models/tiny_embed/infer`, {
      inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [2, 1], data: texts }],
    });
    expect(r.status).toBe(200);
    const emb = r.body.outputs.find((o: { name: string }) => o.name === 'embedding');
    expect(emb.datatype).toBe('FP32');
    expect(emb.shape).toEqual([2, 32]);
    for (const [i, t] of texts.entries()) expectClose(emb.data.slice(i * 32, (i + 1) * 32), (await reference(t)).v);
    const counts = r.body.outputs.find((o: { name: string }) => o.name === 'num_tokens');
    expect(counts.data).toEqual(await Promise.all(texts.map(async (t) => (await reference(t)).tokens)));
  });

  it('auto-completes the config with the embedding inputs and outputs', async () => {
    const cfg = (await getJson(`${server.url}/v2/models/tiny_embed/config`)).body;
    expect(cfg.backend).toBe('embedding');
    expect(cfg.input.map((i: { name: string }) => i.name)).toEqual(['text_input']);
    expect(cfg.output.map((o: { name: string }) => o.name)).toEqual(['embedding', 'num_tokens']);
  });
});
