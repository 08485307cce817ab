/**
 * Reads a Llama-shaped decoder (Llama, Qwen2, SmolLM, Mistral...) out of a plain graph — as Optimum
 * exports it, attention from plain operators and each layer's cache `concat(past, new)` — so that
 * fused-decoder.ts can write the same model in onnxruntime-genai's fused layout, which onnxruntime's CPU
 * kernels run ~2× faster per int4 step (docs/llm.md, "Two export layouts").
 *
 * Recognition follows edges, not names (real exports name tensors `onnx::MatMul_123`): from
 * `input_ids`' embedding Gather, each layer is an RMSNorm whose output feeds three projections; the
 * one whose path reaches `concat(past_key_values.i.key, ·)` is k, `.value` v, the one reaching the
 * QK MatMul q; the scores pass a scale and a mask into Softmax, then the PV MatMul, o_proj, the residual
 * Add, the post-attention RMSNorm, gate/up (gate through SiLU), down and the residual Add; then the
 * final norm and lm_head. Each path between two anchors may hold only the operators that move data
 * (Reshape, Transpose...) and rotary's (Mul, Add, Neg, Split/Slice, Concat): anything else — a norm on
 * q/k, a scale on q, a bias that is not a constant, fp16 weights, zero points in float — makes the
 * reader give up with a reason, and the caller serves the graph as it is. Projections are float32
 * MatMul or int4 MatMulNBits; RoPE's inverse frequencies are read from the constant its Cos/Sin are
 * computed from. What it cannot see (a sliding window, a rotary that is not rotate-half) the caller
 * checks by running both graphs (runtime-node/llm/plain-rewrite.ts).
 */
import type { DecoderLayerWeights, DecoderWeights, Linear } from './fused-decoder.js';
import { decodeModelMessage, int64, type OnnxNodeMessage, type OnnxTensorMessage } from './onnx-builder.js';

export type PlainDecoderRead =
  | { ok: true; weights: DecoderWeights; summary: string }
  | { ok: false; reason: string };

class NotRecognised extends Error {}
function need<T>(v: T | undefined | null | false, reason: string): T {
  if (v === undefined || v === null || v === false) throw new NotRecognised(reason);
  return v;
}

const FLOAT = 1, UINT8 = 2, INT64 = 7, INT32 = 6;
/** Operators that only move data (followed from their data input, index 0). */
const MOVES = new Set(['Reshape', 'Transpose', 'Unsqueeze', 'Squeeze', 'Identity', 'Expand', 'Tile', 'Split', 'Slice']);
/** Rotary's arithmetic on q and k (rotate-half: x·cos + concat(−x2, x1)·sin). */
const ROTARY = new Set(['Mul', 'Add', 'Neg', 'Concat']);

/** The graph's edges, constants and the weights' bytes. */
class Graph {
  readonly producer = new Map<string, OnnxNodeMessage>();
  readonly consumers = new Map<string, OnnxNodeMessage[]>();
  readonly consts = new Map<string, OnnxTensorMessage>();
  readonly inputs = new Set<string>();
  readonly outputs = new Set<string>();
  /** Each graph input's dims: a size, or the symbol's name. */
  readonly inputDims = new Map<string, (number | string)[]>();
  readonly nodes: OnnxNodeMessage[];

  constructor(bytes: Uint8Array, private readonly external?: (location: string) => Uint8Array) {
    const g = decodeModelMessage(bytes).graph;
    this.nodes = g.node;
    for (const t of g.initializer) this.consts.set(t.name, t);
    for (const i of g.input) {
      if (this.consts.has(i.name)) continue;
      this.inputs.add(i.name);
      this.inputDims.set(i.name, (i.type?.tensor_type?.shape?.dim ?? []).map((d) => (d.dim_value !== undefined && int64(d.dim_value) > 0 ? int64(d.dim_value) : d.dim_param ?? '?')));
    }
    for (const o of g.output) this.outputs.add(o.name);
    for (const n of g.node) {
      if (n.op_type === 'Constant' && n.attribute[0]?.t) this.consts.set(n.output[0]!, n.attribute[0].t);
      else if (n.op_type === 'Constant') {
        const a = n.attribute[0];
        if (a?.name === 'value_float') this.consts.set(n.output[0]!, { name: n.output[0]!, dims: [], data_type: FLOAT, float_data: [a.f ?? 0] });
        if (a?.name === 'value_int') this.consts.set(n.output[0]!, { name: n.output[0]!, dims: [], data_type: INT64, int64_data: [a.i ?? 0] });
      }
      for (const o of n.output) this.producer.set(o, n);
      n.input.forEach((i) => { if (i) this.consumers.set(i, [...(this.consumers.get(i) ?? []), n]); });
    }
  }

  users(name: string): OnnxNodeMessage[] { return this.consumers.get(name) ?? []; }

  /** The constant `name` holds (through Identity), or undefined. */
  constant(name: string): OnnxTensorMessage | undefined {
    const p = this.producer.get(name);
    if (p?.op_type === 'Identity') return this.constant(p.input[0]!);
    return this.consts.get(name);
  }

  private bytes(t: OnnxTensorMessage): Uint8Array | undefined {
    if (t.data_location === 1) {
      const at = (k: string) => t.external_data?.find((e) => e.key === k)?.value;
      const file = need(this.external, `tensor ${t.name} is in external data and none was given`)(need(at('location'), `tensor ${t.name}: no location`));
      const offset = Number(at('offset') ?? 0);
      const length = Number(at('length') ?? file.byteLength - offset);
      return Uint8Array.prototype.slice.call(file, offset, offset + length);
    }
    return t.raw_data && t.raw_data.byteLength > 0 ? Uint8Array.prototype.slice.call(t.raw_data) : undefined;
  }

  dims(t: OnnxTensorMessage): number[] { return t.dims.map(int64); }

  floats(name: string): Float32Array | undefined {
    const t = this.constant(name);
    if (!t || t.data_type !== FLOAT) return undefined;
    const b = this.bytes(t);
    return b ? new Float32Array(b.buffer, 0, b.byteLength / 4) : Float32Array.from(t.float_data ?? []);
  }

  uint8(name: string): Uint8Array | undefined {
    const t = this.constant(name);
    return t?.data_type === UINT8 ? this.bytes(t) : undefined;
  }

  /** A one-element constant as a number (float or integer), else undefined. */
  scalar(name: string): number | undefined {
    const t = this.constant(name);
    if (!t || this.dims(t).reduce((a, b) => a * b, 1) !== 1) return undefined;
    if (t.data_type === FLOAT) return this.floats(name)![0];
    const b = this.bytes(t);
    if (t.data_type === INT64) return b ? Number(new BigInt64Array(b.buffer, 0, 1)[0]) : int64(t.int64_data?.[0]);
    if (t.data_type === INT32) return b ? new Int32Array(b.buffer, 0, 1)[0] : t.int32_data?.[0];
    return undefined;
  }

  attr(n: OnnxNodeMessage, name: string): number | undefined {
    const a = n.attribute.find((x) => x.name === name);
    return a === undefined ? undefined : a.type === 1 ? a.f : int64(a.i);
  }

  /** Every tensor computed from `from` (forward), through any operator. */
  reach(from: Iterable<string>): Set<string> {
    const seen = new Set<string>(), todo = [...from];
    while (todo.length > 0) {
      const t = todo.pop()!;
      if (seen.has(t)) continue;
      seen.add(t);
      for (const n of this.users(t)) todo.push(...n.output);
    }
    return seen;
  }
}

/** One projection (MatMul with a constant weight, or int4 MatMulNBits) with its constant bias, if any. */
interface Projection { node: OnnxNodeMessage; linear: Linear; out: string }

function projection(g: Graph, n: OnnxNodeMessage): Projection | undefined {
  let linear: Linear;
  if (n.op_type === 'MatMul' && !n.domain) {
    const wt = g.constant(n.input[1]!);
    if (!wt) {
      const cast = g.producer.get(n.input[1]!);
      if (cast?.op_type === 'Cast' && g.constant(cast.input[0]!)) throw new NotRecognised(`${n.name || n.output[0]}: fp16 weights (only float32 and int4 are rewritten)`);
      return undefined;
    }
    const dims = g.dims(wt);
    if (dims.length !== 2) return undefined;
    linear = { kind: 'float', K: dims[0]!, N: dims[1]!, w: need(g.floats(n.input[1]!), `${wt.name}: weights that are not float32`) };
  } else if (n.op_type === 'MatMulNBits' && n.domain === 'com.microsoft') {
    const [K, N, bits, blockSize] = ['K', 'N', 'bits', 'block_size'].map((a) => g.attr(n, a));
    need(bits === 4, `${n.name}: MatMulNBits of ${bits} bits (int4 is rewritten)`);
    need(n.input.slice(4).every((i) => !i), `${n.name}: MatMulNBits with g_idx or a bias input`);
    const scales = need(g.floats(n.input[2]!), `${n.name}: scales that are not float32 constants`);
    const zp = n.input[3] ? need(g.uint8(n.input[3]), `${n.name}: zero points that are not packed uint8`) : undefined;
    linear = { kind: 'int4', K: K!, N: N!, blockSize: blockSize!, accuracyLevel: g.attr(n, 'accuracy_level'), b: need(g.uint8(n.input[1]!), `${n.name}: weights that are not constant`), scales, zeroPoints: zp };
  } else return undefined;
  let out = n.output[0]!;
  const after = g.users(out);
  if (after.length === 1 && after[0]!.op_type === 'Add') {
    const other = after[0]!.input.find((i) => i !== out)!;
    const bias = g.floats(other);
    if (bias && bias.length === linear.N) {
      linear.bias = bias;
      out = after[0]!.output[0]!;
    }
  }
  return { node: n, linear, out };
}

/** RMSNorm of `x` (x · 1/√(mean(x²) + eps) · w, in the forms exporters write it): its output, weight and eps. */
function rmsNorm(g: Graph, x: string, where: string): { out: string; weight: Float32Array; eps: number } {
  for (const sq of g.users(x)) {
    const squares = (sq.op_type === 'Pow' && sq.input[0] === x && g.scalar(sq.input[1]!) === 2) || (sq.op_type === 'Mul' && sq.input[0] === x && sq.input[1] === x);
    if (!squares) continue;
    const only = (t: string, op: string) => need(g.users(t).length === 1 && g.users(t)[0]!.op_type === op && g.users(t)[0], `${where}: RMSNorm's ${op} not found`);
    const mean = only(sq.output[0]!, 'ReduceMean');
    const add = only(mean.output[0]!, 'Add');
    const eps = need(g.scalar(add.input.find((i) => i !== mean.output[0])!), `${where}: RMSNorm's epsilon is not a constant`);
    const sqrt = only(add.output[0]!, 'Sqrt');
    const after = need(g.users(sqrt.output[0]!).length === 1 && g.users(sqrt.output[0]!)[0], `${where}: RMSNorm's 1/√ not found`);
    let normed: string | undefined;
    if (after.op_type === 'Div' && after.input[0] === x) normed = after.output[0];
    else if (after.op_type === 'Reciprocal' || (after.op_type === 'Div' && g.scalar(after.input[0]!) === 1)) {
      const inv = after.output[0]!;
      normed = g.users(inv).find((n) => n.op_type === 'Mul' && n.input.includes(x))?.output[0];
    }
    const scaled = g.users(need(normed, `${where}: RMSNorm's x · 1/√ not found`)).filter((n) => n.op_type === 'Mul');
    need(scaled.length === 1, `${where}: RMSNorm's weight not found`);
    const weight = need(g.floats(scaled[0]!.input.find((i) => i !== normed)!), `${where}: RMSNorm's weight is not a float32 constant (Gemma's 1 + w is not rewritten)`);
    return { out: scaled[0]!.output[0]!, weight, eps };
  }
  throw new NotRecognised(`${where}: no RMSNorm (x², mean, √, weight) found`);
}

/**
 * The nodes reached forward from `from` through `pass` operators (data operators only from their
 * input 0), until `stop` says a node ends the path. Any other operator met: not recognised.
 */
function walk(g: Graph, from: string, pass: Set<string>, stop: (n: OnnxNodeMessage) => boolean, where: string): { ends: OnnxNodeMessage[]; passed: OnnxNodeMessage[] } {
  const ends = new Set<OnnxNodeMessage>(), passed = new Set<OnnxNodeMessage>(), seen = new Set<string>();
  const todo = [from];
  while (todo.length > 0) {
    const t = todo.pop()!;
    if (seen.has(t)) continue;
    seen.add(t);
    for (const n of g.users(t)) {
      if (n.op_type === 'Shape') continue;
      if (stop(n)) { ends.add(n); continue; }
      if (MOVES.has(n.op_type) && n.input[0] !== t) continue;
      need(pass.has(n.op_type) || MOVES.has(n.op_type), `${where}: ${n.op_type} (${n.name || n.output[0]}) where only data moves and rotary were expected`);
      passed.add(n);
      todo.push(...n.output);
    }
  }
  return { ends: [...ends], passed: [...passed] };
}

/** RoPE's inverse frequencies: the constant of headDim/2 (or headDim, halves equal) its Cos is computed from. */
function ropeFrequencies(g: Graph, hd: number): { invFreq: Float32Array; tables: Set<string> } {
  const coses = g.nodes.filter((n) => n.op_type === 'Cos' || n.op_type === 'Sin');
  need(coses.length > 0, 'no Cos/Sin for the rotary (a precomputed cos/sin table is not rewritten)');
  let found: Float32Array | undefined;
  for (const c of coses) {
    const seen = new Set<string>(), todo = [c.input[0]!];
    let positions = false;
    const freqs: Float32Array[] = [];
    while (todo.length > 0) {
      const t = todo.pop()!;
      if (seen.has(t)) continue;
      seen.add(t);
      if (t === 'position_ids') positions = true;
      const f = g.constant(t) && g.floats(t);
      if (f && (f.length === hd / 2 || f.length === hd)) freqs.push(f);
      const p = g.producer.get(t);
      if (p && !g.constant(t)) todo.push(...p.input.filter(Boolean));
    }
    need(positions, `the rotary's ${c.op_type} is not computed from position_ids`);
    need(freqs.length === 1, `the rotary's ${c.op_type}: ${freqs.length} candidate frequency constants`);
    let f = freqs[0]!;
    if (f.length === hd) {
      need(f.subarray(0, hd / 2).every((v, i) => v === f[i + hd / 2]), 'the rotary\'s frequencies are not rotate-half (halves differ)');
      f = f.slice(0, hd / 2);
    }
    if (found) need(found.every((v, i) => v === f[i]), 'the layers\' rotaries use different frequencies');
    found = f;
  }
  return { invFreq: found!, tables: g.reach(coses.map((c) => c.output[0]!)) };
}

/**
 * The weights of the plain decoder `model` (its external data through `external`), or why it is not
 * one this reader knows. `context`: the positions the fused graph's rotary tables will cover.
 */
export function readPlainDecoder(model: Uint8Array, opts: { external?: (location: string) => Uint8Array; context: number }): PlainDecoderRead {
  try {
    return readGraph(new Graph(model, opts.external), opts.context);
  } catch (e) {
    if (e instanceof NotRecognised) return { ok: false, reason: e.message };
    throw e;
  }
}

function readGraph(g: Graph, context: number): PlainDecoderRead {
  need(g.inputs.has('input_ids') && g.inputs.has('position_ids') && g.inputs.has('attention_mask'), 'inputs are not input_ids, attention_mask and position_ids');
  need(g.outputs.has('logits'), 'no logits output');
  const gather = g.users('input_ids').find((n) => n.op_type === 'Gather');
  const cast = gather && g.producer.get(gather.input[0]!);
  need(!(cast?.op_type === 'Cast' && g.constant(cast.input[0]!)), 'fp16 weights (only float32 and int4 are rewritten)');
  const embedAt = need(g.users('input_ids').find((n) => n.op_type === 'Gather' && g.constant(n.input[0]!)), 'input_ids do not index an embedding table');
  const embedT = g.constant(embedAt.input[0]!)!;
  const [V, D] = g.dims(embedT) as [number, number];
  const embed = need(g.floats(embedAt.input[0]!), 'the embedding table is not float32');
  const pastInputs = [...g.inputs].filter((n) => /^past_key_values\.\d+\.key$/.test(n));
  const L = pastInputs.length;
  need(L > 0, 'no past_key_values inputs');
  const pastInfo = g.inputDims.get('past_key_values.0.key') ?? [];
  need(pastInfo.length === 4 && typeof pastInfo[1] === 'number' && typeof pastInfo[3] === 'number', 'past_key_values.0.key does not name its KV heads and head size');
  const [KVH, hd] = [pastInfo[1] as number, pastInfo[3] as number];
  const { invFreq, tables } = ropeFrequencies(g, hd);
  const isPast = (n: OnnxNodeMessage, l: number, kind: 'key' | 'value') => n.op_type === 'Concat' && n.input[0] === `past_key_values.${l}.${kind}`;
  let x = embedAt.output[0]!;
  const layers: DecoderLayerWeights[] = [];
  const epsilons = new Set<number>();
  let heads = 0;
  for (let l = 0; l < L; l++) {
    const where = `layer ${l}`;
    const n1 = rmsNorm(g, x, `${where} input norm`);
    epsilons.add(n1.eps);
    const projs = g.users(n1.out).map((n) => projection(g, n)).filter((p): p is Projection => p !== undefined);
    need(projs.length === 3, `${where}: ${projs.length} projections read the input norm (q, k and v expected)`);
    const roles: Partial<Record<'q' | 'k' | 'v', Projection>> = {};
    let qk: OnnxNodeMessage | undefined, keys: OnnxNodeMessage | undefined, values: OnnxNodeMessage | undefined;
    for (const p of projs) {
      const path = walk(g, p.out, ROTARY, (n) => n.op_type === 'MatMul' || isPast(n, l, 'key') || isPast(n, l, 'value'), `${where} q/k/v`);
      need(path.ends.length === 1, `${where}: a projection of the input norm leads to ${path.ends.length} attention inputs`);
      const end = path.ends[0]!;
      const rotary = path.passed.filter((n) => n.op_type === 'Mul' && n.input.some((i) => tables.has(i))).length;
      need(!path.passed.some((n) => (n.op_type === 'Mul' || n.op_type === 'Add') && n.input.some((i) => g.scalar(i) !== undefined)), `${where}: a constant scale or shift on q, k or v`);
      const role = isPast(end, l, 'key') ? 'k' : isPast(end, l, 'value') ? 'v' : 'q';
      need(!roles[role], `${where}: two projections read as ${role}`);
      need(role === 'v' ? rotary === 0 : rotary >= 2, `${where}: ${role} ${role === 'v' ? 'rotated' : 'without the rotary'}`);
      roles[role] = p;
      if (role === 'q') qk = end; else if (role === 'k') keys = end; else values = end;
    }
    const [q, k, v] = [need(roles.q, `${where}: no q`), need(roles.k, `${where}: no k`), need(roles.v, `${where}: no v`)];
    need(k.linear.N === KVH * hd && v.linear.N === KVH * hd && q.linear.N % hd === 0, `${where}: projections' widths do not match ${KVH} KV heads × ${hd}`);
    heads = q.linear.N / hd;
    // The keys reach the QK MatMul, the scores pass a constant scale and the mask into Softmax.
    const keyEnds = walk(g, keys!.output[0]!, new Set(), (n) => n.op_type === 'MatMul', `${where} keys`).ends;
    need(keyEnds.length === 1 && keyEnds[0] === qk, `${where}: the keys do not meet q in one MatMul`);
    let scale = 1;
    const scores = walk(g, qk!.output[0]!, new Set(['Mul', 'Div', 'Where', 'Add']), (n) => n.op_type === 'Softmax', `${where} scores`);
    for (const n of scores.passed) {
      const c = n.input.map((i) => g.scalar(i)).find((s) => s !== undefined);
      if (n.op_type === 'Mul') scale *= need(c, `${where}: the scores multiplied by a non-constant`);
      if (n.op_type === 'Div') scale /= need(c, `${where}: the scores divided by a non-constant`);
    }
    need(Math.abs(scale * Math.sqrt(hd) - 1) < 1e-4, `${where}: attention scale ${Number(scale.toPrecision(4))}, not 1/√${hd}`);
    need(scores.ends.length === 1, `${where}: the scores do not end in one Softmax`);
    const softmax = scores.ends[0]!;
    need([-1, 3].includes(g.attr(softmax, 'axis') ?? -1), `${where}: Softmax over another axis than the keys'`);
    const pv = walk(g, softmax.output[0]!, new Set(['Cast']), (n) => n.op_type === 'MatMul', `${where} probabilities`).ends;
    const valueEnds = walk(g, values!.output[0]!, new Set(), (n) => n.op_type === 'MatMul', `${where} values`).ends;
    need(pv.length === 1 && valueEnds.length === 1 && pv[0] === valueEnds[0], `${where}: the probabilities do not meet the values in one MatMul`);
    const oEnd = walk(g, pv[0]!.output[0]!, new Set(), (n) => n.op_type === 'MatMul' || n.op_type === 'MatMulNBits', `${where} attention output`).ends;
    const o = need(oEnd.length === 1 && projection(g, oEnd[0]!), `${where}: no o_proj`);
    const x2 = residual(g, o.out, x, `${where} attention`);
    const n2 = rmsNorm(g, x2, `${where} post-attention norm`);
    epsilons.add(n2.eps);
    const mlp = g.users(n2.out).map((n) => projection(g, n)).filter((p): p is Projection => p !== undefined);
    need(mlp.length === 2, `${where}: ${mlp.length} projections read the post-attention norm (gate and up expected)`);
    const silu = (p: Projection) => {
      const sig = g.users(p.out).find((n) => n.op_type === 'Sigmoid');
      return sig && g.users(p.out).find((n) => n.op_type === 'Mul' && n.input.includes(sig.output[0]!));
    };
    const gate = need(mlp.find((p) => silu(p)), `${where}: no gate through SiLU (x · sigmoid(x))`);
    const up = mlp.find((p) => p !== gate)!;
    const act = silu(gate)!.output[0]!;
    const prod = need(g.users(act).find((n) => n.op_type === 'Mul' && n.input.includes(up.out)), `${where}: SiLU(gate) · up not found`);
    const down = need(g.users(prod.output[0]!).map((n) => projection(g, n)).find(Boolean), `${where}: no down projection`);
    x = residual(g, down.out, x2, `${where} MLP`);
    layers.push({ inputNorm: n1.weight, q: q.linear, k: k.linear, v: v.linear, o: o.linear, postNorm: n2.weight, gate: gate.linear, up: up.linear, down: down.linear });
  }
  const final = rmsNorm(g, x, 'final norm');
  epsilons.add(final.eps);
  need(epsilons.size === 1, `the norms use ${epsilons.size} epsilons`);
  const head = need(g.users(final.out).map((n) => projection(g, n)).find(Boolean), 'no lm_head after the final norm');
  const logits = head.out === 'logits' || g.users(head.out).some((n) => n.op_type === 'Identity' && n.output[0] === 'logits');
  need(logits, 'lm_head does not give the logits');
  need(head.linear.N === V && D === final.weight.length, 'lm_head\'s width is not the vocabulary');
  const kinds = new Set([...layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]), head.linear].map((p) => p.kind));
  return {
    ok: true,
    weights: { heads, kvHeads: KVH, headDim: hd, eps: [...epsilons][0]!, embed, invFreq, context, layers, finalNorm: final.weight, lmHead: head.linear, activation: 'silu' },
    summary: `${L} layers, ${heads} heads / ${KVH} KV heads × ${hd}, ${[...kinds].join(' and ')} weights`,
  };
}

/** x + branch: the residual Add of a branch's output and the stream it leaves from. */
function residual(g: Graph, branch: string, x: string, where: string): string {
  const add = g.users(branch).find((n) => n.op_type === 'Add' && n.input.includes(x));
  return need(add, `${where}: the branch is not added back to the residual stream`).output[0]!;
}
