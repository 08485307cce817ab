/**
 * Cross-encoder reranking throughput: pairs per second for one query against 100 passages, tsi's
 * `/v1/rerank` (the real Node server in this process, over HTTP: each pair its own request, gathered
 * by the dynamic batcher into the model's batches of up to 64, run on onnxruntime-node in the model's
 * worker thread) against transformers.js in process on the same folder
 * (AutoTokenizer + AutoModelForSequenceClassification on onnx/model.onnx, the 100 pairs as one padded
 * batch, sigmoid applied), for the default repository's tiny_rerank (BERT-style) and tiny_rerank_xlmr
 * (XLM-R-style). Both sides first run twice untimed; then each is timed for `--seconds` per round,
 * alternating over `--rounds` short rounds so that load from elsewhere on the machine falls on both
 * alike. The ratio is tsi / transformers.js.
 *
 * Run:  npx tsx bench/rerank.ts [--seconds 1] [--rounds 6] [--passages 100] [--markdown]
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import { machine, markdownTable } from './markdown.js';
import { cp, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { AutoModelForSequenceClassification, AutoTokenizer, env } from '@huggingface/transformers';
import { createLogger } from '../core/index.js';
import { startServer } from '../runtime-node/index.js';
import { MODELS } from '../test/helpers/server.js';

const { values: args } = parseArgs({ options: { seconds: { type: 'string', default: '1' }, rounds: { type: 'string', default: '6' }, passages: { type: 'string', default: '100' } } });
const seconds = Number(args.seconds);
const rounds = Number(args.rounds);
const count = Number(args.passages);

const WORDS = ['the', 'cat', 'sat', 'on', 'mat', 'model', 'server', 'batches', 'requests', 'search', 'query', 'document', 'tensor', 'fast', 'slow', 'token', 'vector', 'and', 'of', 'a'];
/** Passages of 6-30 words, the same every run. */
const passages = Array.from({ length: count }, (_, i) => Array.from({ length: 6 + ((i * 7) % 25) }, (_, j) => WORDS[(i * 31 + j * 17) % WORDS.length]).join(' '));
const query = 'where did the cat sit on the mat?';

const root = await mkdtemp(join(tmpdir(), 'tsi-rerank-bench-'));
const MODELS_USED = ['tiny_rerank', 'tiny_rerank_xlmr'];
for (const m of MODELS_USED) {
  await mkdir(join(root, m, 'onnx'), { recursive: true });
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) await cp(join(MODELS, m, '1', f), join(root, m, f));
  await cp(join(MODELS, m, '1', 'model.onnx'), join(root, m, 'onnx', 'model.onnx'));
}
env.localModelPath = `${root}/`;
env.allowRemoteModels = false;

const server = await startServer({
  modelRepositories: [MODELS], httpPort: 0, httpAddress: '127.0.0.1', modelControlMode: 'explicit', loadModels: MODELS_USED, log: createLogger(() => {}),
});
const url = `http://127.0.0.1:${server.http!.port}`;

/** Runs `once` repeatedly for `seconds`; returns pairs per second. */
async function timed(once: () => Promise<unknown>): Promise<number> {
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    await once();
    n++;
  }
  return (n * count) / ((performance.now() - t0) / 1000);
}

const rows: (string | number)[][] = [['model', 'tsi /v1/rerank (pairs/s)', 'transformers.js (pairs/s)', 'ratio']];
console.log(`rerank: 1 query × ${count} passages, ${seconds} s per side per round, ${rounds} rounds; ${machine()}`);
try {
  for (const m of MODELS_USED) {
    const tok = await AutoTokenizer.from_pretrained(m);
    const model = await AutoModelForSequenceClassification.from_pretrained(m, { dtype: 'fp32' });
    const viaTsi = async () => {
      const r = await fetch(`${url}/v1/rerank`, { method: 'POST', body: JSON.stringify({ model: m, query, documents: passages, return_documents: false }) });
      const body = (await r.json()) as { results: unknown[] };
      if (body.results.length !== count) throw new Error(`tsi answered ${JSON.stringify(body).slice(0, 200)}`);
    };
    const viaTj = async () => {
      const inputs = tok(passages.map(() => query), { text_pair: passages, padding: true, truncation: true });
      const logits = (await model(inputs)).logits.data as Float32Array;
      return Array.from(logits, (x) => 1 / (1 + Math.exp(-x)));
    };
    for (let i = 0; i < 2; i++) {
      await viaTsi();
      await viaTj();
    }
    let a = 0;
    let b = 0;
    for (let round = 0; round < rounds; round++) {
      a += await timed(viaTsi);
      b += await timed(viaTj);
    }
    a /= rounds;
    b /= rounds;
    rows.push([m, a.toFixed(0), b.toFixed(0), `${(a / b).toFixed(2)}×`]);
    console.log(`${m.padEnd(18)} tsi ${a.toFixed(0).padStart(7)} pairs/s   transformers.js ${b.toFixed(0).padStart(7)} pairs/s   ratio ${(a / b).toFixed(2)}×`);
    await model.dispose();
  }
  markdownTable(`1 query × ${count} passages, pairs per second (higher is better)`, rows);
} finally {
  await server.stop(5000);
  await rm(root, { recursive: true, force: true });
}
