/**
 * Shared by the browser tests (and usable from Node): deterministic v2 JSON requests for every model
 * of the default repository, the bad requests whose error texts must match the Node server's, and a
 * comparison of two v2 JSON responses that allows float rounding differences between execution
 * providers but nothing else (names, datatypes, shapes, strings and classification labels exact).
 */

export interface V2Request {
  /** Path under the server, e.g. `/v2/models/simple/infer`. */
  path: string;
  method?: 'GET' | 'POST';
  /** JSON body (object) or raw text. */
  body?: unknown;
}

/** mulberry32: the same numbers in every runtime. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const floats = (n: number, seed: number) => {
  const r = rng(seed);
  return Array.from({ length: n }, () => Math.fround(r() * 2 - 1));
};
export const ints = (n: number, seed: number, lo = -50, hi = 50) => {
  const r = rng(seed);
  return Array.from({ length: n }, () => lo + Math.floor(r() * (hi - lo)));
};

const infer = (model: string, body: unknown): V2Request => ({ path: `/v2/models/${model}/infer`, method: 'POST', body });
const input = (name: string, datatype: string, shape: number[], data: unknown[]) => ({ name, datatype, shape, data });

/** One or more requests per default model, sent in order (sequence models depend on it). */
export function modelCases(seqBase = 1000): Record<string, V2Request[]> {
  const seq = (model: string, id: number, values: number[]) => values.map((v, i) => infer(model, {
    parameters: { sequence_id: id, sequence_start: i === 0, sequence_end: i === values.length - 1 },
    inputs: [input('INPUT', 'INT32', [1, 1], [v])],
  }));
  return {
    simple: [infer('simple', { inputs: [input('INPUT0', 'INT32', [2, 16], ints(32, 1)), input('INPUT1', 'INT32', [2, 16], ints(32, 2))] })],
    add_sub: [infer('add_sub', { inputs: [input('INPUT0', 'FP32', [2, 16], floats(32, 3)), input('INPUT1', 'FP32', [2, 16], floats(32, 4))] })],
    simple_string: [infer('simple_string', {
      inputs: [input('INPUT0', 'BYTES', [1, 16], ints(16, 5).map(String)), input('INPUT1', 'BYTES', [1, 16], ints(16, 6).map(String))],
    })],
    simple_identity: [infer('simple_identity', { inputs: [input('INPUT0', 'BYTES', [2, 3], ['a', 'héllo', '', 'x y', '☃', '0'])] })],
    image_classifier: [
      infer('image_classifier', { inputs: [input('image', 'FP32', [2, 3, 16, 16], floats(2 * 768, 7))] }),
      infer('image_classifier', {
        inputs: [input('image', 'FP32', [1, 3, 16, 16], floats(768, 8))],
        outputs: [{ name: 'scores', parameters: { classification: 3 } }],
      }),
    ],
    autocomplete_add: [infer('autocomplete_add', { inputs: [input('A', 'FP32', [3, 4], floats(12, 9)), input('B', 'FP32', [3, 4], floats(12, 10))] })],
    simple_sequence: seq('simple_sequence', seqBase + 1, [3, 4, -2]),
    simple_dyna_sequence: seq('simple_dyna_sequence', seqBase + 2, [5, 6]),
    mlp_batch: [infer('mlp_batch', { inputs: [input('INPUT', 'FP32', [2, 1024], floats(2048, 11))] })],
    // Half a second of 16 kHz samples (a WAV file as BYTES does not travel in JSON), with timestamps.
    whisper: [infer('whisper', { inputs: [input('audio_pcm', 'FP32', [1, 8000], floats(8000, 12))], parameters: { timestamps: true } })],
  };
}

interface IoMeta { name: string; datatype: string; shape: number[] }

/**
 * A request for any model, from its metadata and config (models without a hand-written case): batch
 * 2 where the model batches (1 for a sequence model), 3 for other variable dims, deterministic values
 * of each datatype, and sequence flags for a one-request sequence where the model is stateful.
 */
export function genericCase(meta: { name: string; inputs: IoMeta[] }, config: any, seqId: number): V2Request {
  // The sequence batcher takes one row per request.
  const batch = config.sequence_batching ? Math.min(1, config.max_batch_size ?? 0) : Math.min(2, config.max_batch_size ?? 0);
  const inputs = meta.inputs.map((io, k) => {
    const shape = io.shape.map((d, i) => (d >= 0 ? d : i === 0 && batch > 0 ? batch : 3));
    const n = shape.reduce((a, b) => a * b, 1);
    const dt = io.datatype;
    const data = dt === 'BYTES' ? ints(n, 20 + k, 0, 100).map(String)
      : dt === 'BOOL' ? ints(n, 20 + k, 0, 2).map((v) => v === 1)
        : dt.startsWith('FP') ? floats(n, 20 + k)
          : ints(n, 20 + k, dt.startsWith('UINT') ? 0 : -50, dt.startsWith('UINT') ? 100 : 50);
    return input(io.name, dt, shape, data);
  });
  const body: Record<string, unknown> = { inputs };
  // A string CORRID control takes string ids (an integer id is refused, as Triton refuses it); the
  // string dyna_sequence model reads an integer from them.
  const stringIds = (config.sequence_batching?.control_input ?? []).some((c: any) =>
    (c.control ?? []).some((k: any) => k.kind === 'CONTROL_SEQUENCE_CORRID' && k.data_type === 'TYPE_STRING'));
  if (config.sequence_batching) body.parameters = { sequence_id: stringIds ? String(seqId) : seqId, sequence_start: true, sequence_end: true };
  return infer(meta.name, body);
}

/** Requests the server must refuse, with Triton's texts; the page must answer them byte for byte alike. */
export const BAD_REQUESTS: Record<string, V2Request> = {
  'unknown model': infer('nope', { inputs: [] }),
  'wrong datatype': infer('simple', { inputs: [input('INPUT0', 'FP32', [1, 16], floats(16, 1)), input('INPUT1', 'INT32', [1, 16], ints(16, 1))] }),
  'wrong shape': infer('simple', { inputs: [input('INPUT0', 'INT32', [1, 15], ints(15, 1)), input('INPUT1', 'INT32', [1, 15], ints(15, 1))] }),
  'no batch dimension': infer('simple', { inputs: [input('INPUT0', 'INT32', [16], ints(16, 1)), input('INPUT1', 'INT32', [16], ints(16, 1))] }),
  'missing input': infer('simple', { inputs: [input('INPUT0', 'INT32', [1, 16], ints(16, 1))] }),
  'unexpected input': infer('simple', {
    inputs: [input('INPUT0', 'INT32', [1, 16], ints(16, 1)), input('INPUT1', 'INT32', [1, 16], ints(16, 1)), input('EXTRA', 'INT32', [1, 1], [1])],
  }),
  'unknown output': infer('simple', {
    inputs: [input('INPUT0', 'INT32', [1, 16], ints(16, 1)), input('INPUT1', 'INT32', [1, 16], ints(16, 1))], outputs: [{ name: 'OUTPUT9' }],
  }),
  'batch too large': infer('simple', { inputs: [input('INPUT0', 'INT32', [9, 16], ints(144, 1)), input('INPUT1', 'INT32', [9, 16], ints(144, 1))] }),
  'element count mismatch': infer('simple', { inputs: [input('INPUT0', 'INT32', [1, 16], ints(15, 1)), input('INPUT1', 'INT32', [1, 16], ints(16, 1))] }),
  'bad element type': infer('add_sub', { inputs: [input('INPUT0', 'FP32', [1, 16], Array(16).fill('x')), input('INPUT1', 'FP32', [1, 16], floats(16, 1))] }),
  'invalid JSON': { path: '/v2/models/simple/infer', method: 'POST', body: '{"inputs": [' },
  'sequence without an id': infer('simple_sequence', { inputs: [input('INPUT', 'INT32', [1, 1], [1])] }),
  'unknown version': { path: '/v2/models/simple/versions/7/ready' },
  'unknown model metadata': { path: '/v2/models/nope' },
  'wrong method': { path: '/v2/models/simple/infer', method: 'GET' },
};

export function requestInit(r: V2Request): RequestInit {
  const method = r.method ?? 'GET';
  if (r.body === undefined) return { method };
  return { method, body: typeof r.body === 'string' ? r.body : JSON.stringify(r.body), headers: { 'Content-Type': 'application/json' } };
}

/** `null` when equal within tolerance, else the first difference in words. */
export function compareResponses(a: any, b: any, tol = 1e-4): string | null {
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return JSON.stringify(a) === JSON.stringify(b) ? null : `${JSON.stringify(a)} != ${JSON.stringify(b)}`;
  const { outputs: ao, ...arest } = a;
  const { outputs: bo, ...brest } = b;
  if (JSON.stringify(arest) !== JSON.stringify(brest)) return `headers differ: ${JSON.stringify(arest)} != ${JSON.stringify(brest)}`;
  if (!Array.isArray(ao) || !Array.isArray(bo) || ao.length !== bo.length) return `output count ${ao?.length} != ${bo?.length}`;
  const byName = new Map(bo.map((o: any) => [o.name, o]));
  for (const x of ao) {
    const y: any = byName.get(x.name);
    if (!y) return `output ${x.name} missing`;
    if (x.datatype !== y.datatype || JSON.stringify(x.shape) !== JSON.stringify(y.shape)) {
      return `output ${x.name}: ${x.datatype}${JSON.stringify(x.shape)} != ${y.datatype}${JSON.stringify(y.shape)}`;
    }
    if (x.data.length !== y.data.length) return `output ${x.name}: ${x.data.length} != ${y.data.length} elements`;
    for (let i = 0; i < x.data.length; i++) {
      const u = x.data[i];
      const v = y.data[i];
      if (typeof u === 'number' && typeof v === 'number') {
        if (Math.abs(u - v) > tol * Math.max(1, Math.abs(u))) return `output ${x.name}[${i}]: ${u} != ${v}`;
      } else if (typeof u === 'string' && /^-?[0-9.]+:\d+(:.*)?$/.test(u)) {
        // classification "score:index:label": index and label exact, score within tolerance
        const [su, ...ru] = u.split(':');
        const [sv, ...rv] = String(v).split(':');
        if (ru.join(':') !== rv.join(':') || Math.abs(Number(su) - Number(sv)) > tol) return `output ${x.name}[${i}]: ${u} != ${v}`;
      } else if (u !== v) return `output ${x.name}[${i}]: ${JSON.stringify(u)} != ${JSON.stringify(v)}`;
    }
  }
  return null;
}

type Obj = Record<string, any>;

const jsonPost = (body: Obj): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });

/** POSTs `body` as JSON to `base + path` (the Node server) and reads the JSON answer. */
export async function nodeJson(base: string, path: string, body: Obj): Promise<{ status: number; body: Obj }> {
  const r = await fetch(`${base}${path}`, jsonPost(body));
  return { status: r.status, body: await r.json() };
}

/** The same through a page server's `fetch`. */
export async function pageJson(s: { fetch(path: string, init?: RequestInit): Promise<Response> }, path: string, body: Obj): Promise<{ status: number; body: Obj }> {
  const r = await s.fetch(path, jsonPost(body));
  return { status: r.status, body: await r.json() };
}
