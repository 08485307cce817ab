// rag: retrieval-augmented generation through BLS (see config.pbtxt). Each request streams: the
// question is embedded (tiny_embed), the shipped passages' vectors searched by cosine similarity
// (they are unit length, so a dot product), the top_k reranked by the cross-encoder (tiny_rerank, all
// pairs in one request), and tiny_gpt's answer to a prompt holding the best top_n passages forwarded
// token by token. Requests are handled concurrently (execute does not wait for a stream to end), so
// their model calls meet in those models' batchers.

const EMBED = 'tiny_embed';
const RERANK = 'tiny_rerank';
const GENERATE = 'tiny_gpt';

/** The prompt the generator answers: the kept passages as context, then the question. */
export function prompt(question, passages) {
  return `Context:\n${passages.map((p) => `- ${p}`).join('\n')}\nQuestion: ${question}\nAnswer:`;
}

const int = (v, fallback, name) => {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`rag: parameter '${name}' must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
};

export default class Rag {
  async initialize(args) {
    this.server = args.server;
    this.passages = JSON.parse(await args.readText('1/passages.json'));
  }

  /** The texts' unit vectors from the embedding model, one request for all of them. */
  async embed(texts) {
    const r = await this.server.infer({
      model_name: EMBED,
      inputs: { text_input: { datatype: 'BYTES', shape: [texts.length, 1], data: texts } },
      outputs: ['embedding'],
    });
    const e = r.outputs.embedding;
    const dim = e.shape[e.shape.length - 1];
    return texts.map((_, i) => e.data.subarray(i * dim, (i + 1) * dim));
  }

  /** The index: built on the first request, when the models it calls are surely loaded. */
  index() {
    this.vectors ??= this.embed(this.passages).catch((err) => {
      this.vectors = undefined;
      throw err;
    });
    return this.vectors;
  }

  execute(requests) {
    for (const request of requests) void this.answer(request);
  }

  async answer(request) {
    const sender = request.responseSender();
    try {
      const question = request.input('text_input').data[0];
      const p = request.parameters;
      const topK = Math.min(int(p.top_k, 4, 'top_k'), this.passages.length);
      const topN = Math.min(int(p.top_n, 2, 'top_n'), topK);
      const maxTokens = int(p.max_tokens, 32, 'max_tokens');
      const [vectors, [q]] = await Promise.all([this.index(), this.embed([question])]);
      const dot = (v) => v.reduce((s, x, i) => s + x * q[i], 0);
      const retrieved = vectors.map((v, i) => ({ i, cos: dot(v) })).sort((a, b) => b.cos - a.cos || a.i - b.i).slice(0, topK);
      const scored = await this.server.infer({
        model_name: RERANK,
        inputs: {
          text_input: { datatype: 'BYTES', shape: [topK, 1], data: retrieved.map(() => question) },
          text_pair: { datatype: 'BYTES', shape: [topK, 1], data: retrieved.map((r) => this.passages[r.i]) },
        },
        outputs: ['scores'],
      });
      const scores = scored.outputs.scores.data;
      const kept = retrieved.map((r, k) => ({ ...r, score: scores[k] })).sort((a, b) => b.score - a.score || a.i - b.i).slice(0, topN);
      const passages = kept.map((r) => this.passages[r.i]);
      sender.send({ outputs: { passages: { shape: [topN], data: passages }, relevance: { shape: [topN], data: Float32Array.from(kept.map((r) => r.score)) } } });
      await this.server.inferStream({
        model_name: GENERATE,
        inputs: { text_input: [prompt(question, passages)], stream: [true], exclude_input_in_output: [true] },
        parameters: { max_tokens: maxTokens },
      }, (r) => {
        const text = r.outputs.text_output;
        if (text) sender.send({ outputs: { text_output: { shape: [text.data.length], data: text.data } } });
      });
      sender.send(null, true);
    } catch (err) {
      sender.send(err, true);
    }
  }
}
