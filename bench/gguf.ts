/**
 * A model folder written by tsi's builder (scripts/llm-families.ts: Llama or Qwen2, `model` or
 * `model_q4`) converted to GGUF v3, the file llama.cpp reads, holding the very same weights, so
 * bench/llm-llamacpp.ts can run llama.cpp beside tsi on them:
 *
 *   fp32 (`model.onnx` + `model.onnx_data`) → F32 tensors, each the ONNX initializer transposed to
 *     llama.cpp's [out, in] rows;
 *   int4 (`model_q4.onnx`, MatMulNBits blocks of 32 along K, zero point 8, fp16-exact scales) → Q4_0,
 *     whose 18-byte block is one fp16 d and 16 bytes of codes, value (q - 8) · d: the same codes and
 *     scales, only the nibbles reordered (MatMulNBits packs elements 2j, 2j+1 in byte j; Q4_0 packs
 *     j and j + 16). A scale fp16 cannot hold exactly is an error, never a silent rounding.
 *     Embeddings and norms stay F32 on both sides.
 *
 * The weights are read back from the ONNX files (a small protobuf walk over the initializers), not
 * regenerated, so whatever the builder wrote is what llama.cpp gets. Llama's q and k rows are permuted
 * per head as llama.cpp's converter does (convert_hf_to_gguf.py): the builder's RoPE rotates halves
 * (dimension i with i + hd/2, as Hugging Face's Llama does) while llama.cpp's `llama` architecture
 * rotates adjacent pairs (2i with 2i+1); Qwen2 is rotated by halves on both sides (llama.cpp's NeoX
 * mode), so it is not permuted. The tokenizer comes from the folder's tokenizer.json: a
 * SentencePiece-style BPE with byte fallback (Llama 2's) becomes `tokenizer.ggml.model = llama`
 * (pieces, scores ranking the merges by id, token types), a byte-level BPE (Qwen's) becomes `gpt2`
 * with its merges; the vocabulary is padded to the model's vocab size as the converter pads it.
 *
 * GGUF v3: "GGUF", version, tensor count, metadata count, the metadata key/values, the tensor infos
 * (name, dims innermost first, type, offset), padding to 32 bytes, then each tensor at its offset.
 */

import { closeSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';

// ---------------------------------------------------------------- ONNX initializers (read back)

interface Initializer { dims: number[]; type: number; data: Uint8Array }

/** Protobuf's varint at `at`: value and next offset (Number arithmetic: offsets pass 2^32). */
function varint(b: Uint8Array, at: number): [number, number] {
  let v = 0, mul = 1;
  for (;;) {
    const byte = b[at++]!;
    v += (byte & 0x7f) * mul;
    if (byte < 0x80) return [v, at];
    mul *= 128;
  }
}

/** Each field of one message: number, wire type, and its varint value or bytes. */
function* fields(b: Uint8Array): Generator<{ field: number; wire: number; value: number; bytes: Uint8Array }> {
  let at = 0;
  while (at < b.length) {
    const [key, next] = varint(b, at);
    at = next;
    const field = Math.floor(key / 8), wire = key & 7;
    if (wire === 0) {
      const [value, n] = varint(b, at);
      at = n;
      yield { field, wire, value, bytes: b.subarray(0, 0) };
    } else if (wire === 2) {
      const [len, n] = varint(b, at);
      yield { field, wire, value: len, bytes: b.subarray(n, n + len) };
      at = n + len;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`ONNX protobuf: wire type ${wire} at byte ${at}`);
  }
}

/**
 * The initializers of `<dir>/onnx/<variant>.onnx` by name: dims, ONNX data type and bytes (external
 * data read from the file the initializer names).
 */
export function onnxInitializers(dir: string, variant: string): Map<string, Initializer> {
  const model = readFileSync(join(dir, 'onnx', `${variant}.onnx`));
  const out = new Map<string, Initializer>();
  const fds = new Map<string, number>();
  try {
    for (const g of fields(model)) {
      if (g.field !== 7 || g.wire !== 2) continue; // ModelProto.graph
      for (const t of fields(g.bytes)) {
        if (t.field !== 5 || t.wire !== 2) continue; // GraphProto.initializer
        const dims: number[] = [];
        let name = '', type = 0, raw: Uint8Array | undefined;
        const ext: Record<string, string> = {};
        for (const f of fields(t.bytes)) {
          if (f.field === 1 && f.wire === 0) dims.push(f.value);
          else if (f.field === 1) for (let at = 0; at < f.bytes.length;) { const [v, n] = varint(f.bytes, at); dims.push(v); at = n; }
          else if (f.field === 2) type = f.value;
          else if (f.field === 8) name = Buffer.from(f.bytes).toString('utf8');
          else if (f.field === 9) raw = f.bytes;
          else if (f.field === 13) {
            let k = '', v = '';
            for (const e of fields(f.bytes)) (e.field === 1 ? (k = Buffer.from(e.bytes).toString()) : (v = Buffer.from(e.bytes).toString()));
            ext[k] = v;
          }
        }
        if (!raw && ext.location) {
          let fd = fds.get(ext.location);
          if (fd === undefined) fds.set(ext.location, (fd = openSync(join(dir, 'onnx', ext.location), 'r')));
          raw = new Uint8Array(Number(ext.length));
          readSync(fd, raw, 0, raw.length, Number(ext.offset ?? 0));
        }
        out.set(name, { dims, type, data: raw ?? new Uint8Array(0) });
      }
    }
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
  return out;
}

// ---------------------------------------------------------------- GGUF writing

const GGML_F32 = 0, GGML_Q4_0 = 2;
const T = { u32: 4, i32: 5, f32: 6, bool: 7, str: 8, arr: 9 } as const;
type Meta = [key: string, type: 'u32' | 'i32' | 'f32' | 'bool' | 'str', value: number | boolean | string]
  | [key: string, type: 'arr', elem: 'str' | 'f32' | 'i32', values: readonly (string | number)[]];

interface GgufTensor {
  name: string;
  /** ggml order: the innermost (contiguous) dimension first. */
  ne: number[];
  type: typeof GGML_F32 | typeof GGML_Q4_0;
  /** The tensor's bytes, made when written (a 30-layer model is not held twice in memory). */
  bytes: () => Uint8Array;
}

const ALIGN = 32;

/** A little-endian byte buffer that grows. */
class Bytes {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
      next.set(this.buf.subarray(0, this.length));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }
  // room() may grow the buffer, so it runs before the view is read.
  u32(v: number) { const at = this.room(4); this.view.setUint32(at, v, true); }
  i32(v: number) { const at = this.room(4); this.view.setInt32(at, v, true); }
  u64(v: number) { const at = this.room(8); this.view.setBigUint64(at, BigInt(v), true); }
  f32(v: number) { const at = this.room(4); this.view.setFloat32(at, v, true); }
  u8(v: number) { const at = this.room(1); this.buf[at] = v; }
  str(s: string) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    const at = this.room(b.length);
    this.buf.set(b, at);
  }
  done(): Uint8Array { return this.buf.subarray(0, this.length); }
}

/** Writes a GGUF v3 file: metadata, tensor infos, then each tensor's bytes at its aligned offset. */
export function writeGguf(path: string, meta: Meta[], tensors: GgufTensor[]): void {
  const h = new Bytes();
  h.u32(0x46554747); // "GGUF"
  h.u32(3);
  h.u64(tensors.length);
  h.u64(meta.length);
  const scalar = (type: 'u32' | 'i32' | 'f32' | 'bool' | 'str', v: number | boolean | string) => {
    if (type === 'u32') h.u32(v as number);
    else if (type === 'i32') h.i32(v as number);
    else if (type === 'f32') h.f32(v as number);
    else if (type === 'bool') h.u8(v ? 1 : 0);
    else h.str(v as string);
  };
  for (const m of meta) {
    h.str(m[0]);
    h.u32(T[m[1]]);
    if (m[1] === 'arr') {
      h.u32(T[m[2]]);
      h.u64(m[3].length);
      for (const v of m[3]) scalar(m[2], v);
    } else scalar(m[1], m[2]);
  }
  const size = (t: GgufTensor) => {
    const n = t.ne.reduce((a, b) => a * b, 1);
    return t.type === GGML_F32 ? n * 4 : (n / 32) * 18;
  };
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    h.str(t.name);
    h.u32(t.ne.length);
    for (const d of t.ne) h.u64(d);
    h.u32(t.type);
    h.u64(offset);
    offsets.push(offset);
    offset += Math.ceil(size(t) / ALIGN) * ALIGN;
  }
  const fd = openSync(path, 'w');
  try {
    const header = h.done();
    writeSync(fd, header);
    const dataStart = Math.ceil(header.length / ALIGN) * ALIGN;
    tensors.forEach((t, i) => {
      const b = t.bytes();
      if (b.length !== size(t)) throw new Error(`GGUF: ${t.name} has ${b.length} bytes, its shape wants ${size(t)}`);
      writeSync(fd, b, 0, b.length, dataStart + offsets[i]!);
    });
    // The last tensor's padding, so the file ends on the alignment as llama.cpp's own writer leaves it.
    writeSync(fd, new Uint8Array(1), 0, 1, dataStart + offset - 1);
  } finally {
    closeSync(fd);
  }
}

// ---------------------------------------------------------------- the conversion

/** float32 → IEEE half bits, for scales checked to be exact (so no rounding case is needed). */
function exactHalf(v: number, name: string): number {
  const f = new Float32Array([v]);
  const x = new Uint32Array(f.buffer)[0]!;
  const sign = (x >>> 16) & 0x8000, e = ((x >>> 23) & 0xff) - 127, m = x & 0x7fffff;
  let h: number;
  if (v === 0) h = sign;
  else if (e >= -14 && e <= 15 && (m & 0x1fff) === 0) h = sign | ((e + 15) << 10) | (m >>> 13);
  else if (e < -14 && e >= -24 && ((m | 0x800000) & ((1 << (-1 - e)) - 1)) === 0) h = sign | ((m | 0x800000) >>> (-1 - e));
  else throw new Error(`GGUF Q4_0: ${name} has a scale (${v}) fp16 cannot hold exactly; the builder writes fp16-exact scales`);
  return h;
}

/** Rows of a [K, N] (x @ W) float matrix as [N, K] (llama.cpp's rows are output features). */
function transposeF32(data: Uint8Array, K: number, N: number): Float32Array {
  const src = new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  const out = new Float32Array(K * N);
  for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) out[n * K + k] = src[k * N + n]!;
  return out;
}

/** MatMulNBits B [N, K/32, 16] + scales [N·K/32] → Q4_0 rows: per block an fp16 d, then 16 code bytes. */
function q4Blocks(b: Uint8Array, scales: Float32Array, K: number, N: number, name: string): Uint8Array {
  const blocks = K / 32;
  const out = new Uint8Array(N * blocks * 18);
  const view = new DataView(out.buffer);
  for (let i = 0; i < N * blocks; i++) {
    view.setUint16(i * 18, exactHalf(scales[i]!, name), true);
    const src = i * 16;
    const code = (e: number) => ((e & 1) ? b[src + (e >> 1)]! >> 4 : b[src + (e >> 1)]! & 15);
    for (let j = 0; j < 16; j++) out[i * 18 + 2 + j] = code(j) | (code(j + 16) << 4);
  }
  return out;
}

/** Reorders rows (each `rowBytes` long) per head: row h·hd + s·hd/2 + i goes to h·hd + 2i + s. */
function permuteRows(rows: Uint8Array, heads: number, hd: number, rowBytes: number): Uint8Array {
  const out = new Uint8Array(rows.length);
  for (let h = 0; h < heads; h++)
    for (let s = 0; s < 2; s++)
      for (let i = 0; i < hd / 2; i++) {
        const from = (h * hd + s * (hd / 2) + i) * rowBytes, to = (h * hd + 2 * i + s) * rowBytes;
        out.set(rows.subarray(from, from + rowBytes), to);
      }
  return out;
}

const asBytes = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

interface HfConfig {
  model_type: string; vocab_size: number; hidden_size: number; intermediate_size: number; num_hidden_layers: number;
  num_attention_heads: number; num_key_value_heads: number; head_dim?: number; max_position_embeddings: number;
  rms_norm_eps: number; rope_theta: number; bos_token_id: number; eos_token_id: number; tie_word_embeddings?: boolean;
}

interface TokenizerJson {
  model: { type: string; vocab: Record<string, number>; merges?: (string | [string, string])[]; byte_fallback?: boolean };
  added_tokens?: { id: number; content: string; special: boolean }[];
}

/** The tokenizer's GGUF metadata from tokenizer.json, its vocabulary padded to `vocab` entries. */
function tokenizerMeta(tok: TokenizerJson, cfg: HfConfig): Meta[] {
  const V = cfg.vocab_size;
  const pieces: string[] = new Array(V);
  const types: number[] = new Array(V).fill(1); // NORMAL
  const scores: number[] = new Array(V).fill(0);
  for (const [piece, id] of Object.entries(tok.model.vocab)) if (id < V) pieces[id] = piece;
  for (const a of tok.added_tokens ?? []) if (a.id < V) { pieces[a.id] = a.content; types[a.id] = a.special ? 3 : 4; } // CONTROL / USER_DEFINED
  for (let i = 0; i < V; i++) if (pieces[i] === undefined) { pieces[i] = `[PAD${i}]`; types[i] = 5; } // UNUSED, as the converter pads
  const ids: Meta[] = [['tokenizer.ggml.bos_token_id', 'u32', cfg.bos_token_id], ['tokenizer.ggml.eos_token_id', 'u32', cfg.eos_token_id]];
  if (tok.model.byte_fallback) {
    // SentencePiece (Llama 2): ids follow the merge order, so -id ranks merges as its scores do.
    for (let i = 0; i < V; i++) {
      if (/^<0x[0-9A-F]{2}>$/.test(pieces[i]!)) types[i] = 6; // BYTE
      else if (types[i] === 1) scores[i] = -i;
    }
    const unk = tok.model.vocab['<unk>'];
    if (unk !== undefined) types[unk] = 2; // UNKNOWN
    return [
      ['tokenizer.ggml.model', 'str', 'llama'], ['tokenizer.ggml.tokens', 'arr', 'str', pieces],
      ['tokenizer.ggml.scores', 'arr', 'f32', scores], ['tokenizer.ggml.token_type', 'arr', 'i32', types], ...ids,
      ...(unk !== undefined ? [['tokenizer.ggml.unknown_token_id', 'u32', unk] as Meta] : []),
      ['tokenizer.ggml.add_bos_token', 'bool', true], ['tokenizer.ggml.add_eos_token', 'bool', false],
    ];
  }
  const merges = (tok.model.merges ?? []).map((m) => (typeof m === 'string' ? m : m.join(' ')));
  return [
    ['tokenizer.ggml.model', 'str', 'gpt2'], ['tokenizer.ggml.pre', 'str', cfg.model_type === 'qwen2' ? 'qwen2' : 'default'],
    ['tokenizer.ggml.tokens', 'arr', 'str', pieces], ['tokenizer.ggml.token_type', 'arr', 'i32', types],
    ['tokenizer.ggml.merges', 'arr', 'str', merges], ...ids, ['tokenizer.ggml.add_bos_token', 'bool', false],
  ];
}

/**
 * Converts `<dir>` (a builder folder: config.json, tokenizer.json, onnx/<variant>.onnx) to a GGUF
 * file at `out`: F32 from `model`, Q4_0 from `model_q4`.
 */
export function folderToGguf(dir: string, variant: 'model' | 'model_q4', out: string): void {
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as HfConfig;
  if (cfg.model_type !== 'llama' && cfg.model_type !== 'qwen2') throw new Error(`GGUF: ${dir} is a '${cfg.model_type}' model; only llama and qwen2 convert`);
  const arch = cfg.model_type;
  const tok = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as TokenizerJson;
  const init = onnxInitializers(dir, variant);
  const get = (name: string) => {
    const t = init.get(name);
    if (!t) throw new Error(`GGUF: ${dir}/onnx/${variant}.onnx has no initializer '${name}'`);
    return t;
  };
  const D = cfg.hidden_size, H = cfg.num_attention_heads, KVH = cfg.num_key_value_heads, hd = cfg.head_dim ?? D / H;
  const q4 = variant === 'model_q4';
  const tensors: GgufTensor[] = [];
  const f32Tensor = (name: string, from: string, ne: number[]) => tensors.push({ name, ne, type: GGML_F32, bytes: () => get(from).data });
  /** A linear layer's weight [K in, N out], rows permuted per head for Llama's q and k. */
  const linear = (name: string, from: string, K: number, N: number, ropeHeads?: number) => {
    const permute = (rows: Uint8Array, rowBytes: number) => (ropeHeads && arch === 'llama' ? permuteRows(rows, ropeHeads, hd, rowBytes) : rows);
    if (q4) {
      tensors.push({
        name, ne: [K, N], type: GGML_Q4_0,
        bytes: () => {
          const s = get(`${from}.weight_scales`).data;
          const scales = new Float32Array(s.buffer.slice(s.byteOffset, s.byteOffset + s.byteLength));
          return permute(q4Blocks(get(`${from}.weight_Q4`).data, scales, K, N, from), (K / 32) * 18);
        },
      });
    } else tensors.push({ name, ne: [K, N], type: GGML_F32, bytes: () => permute(asBytes(transposeF32(get(`${from}.weight`).data, K, N)), K * 4) });
  };
  f32Tensor('token_embd.weight', 'model.embed_tokens.weight', [D, cfg.vocab_size]);
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `model.layers.${l}`, b = `blk.${l}`;
    f32Tensor(`${b}.attn_norm.weight`, `${p}.input_layernorm.weight`, [D]);
    linear(`${b}.attn_q.weight`, `${p}.self_attn.q_proj`, D, H * hd, H);
    linear(`${b}.attn_k.weight`, `${p}.self_attn.k_proj`, D, KVH * hd, KVH);
    linear(`${b}.attn_v.weight`, `${p}.self_attn.v_proj`, D, KVH * hd);
    if (arch === 'qwen2') for (const [x, n] of [['q', H], ['k', KVH], ['v', KVH]] as const) f32Tensor(`${b}.attn_${x}.bias`, `${p}.self_attn.${x}_proj.bias`, [n * hd]);
    linear(`${b}.attn_output.weight`, `${p}.self_attn.o_proj`, H * hd, D);
    f32Tensor(`${b}.ffn_norm.weight`, `${p}.post_attention_layernorm.weight`, [D]);
    linear(`${b}.ffn_gate.weight`, `${p}.mlp.gate_proj`, D, cfg.intermediate_size);
    linear(`${b}.ffn_up.weight`, `${p}.mlp.up_proj`, D, cfg.intermediate_size);
    linear(`${b}.ffn_down.weight`, `${p}.mlp.down_proj`, cfg.intermediate_size, D);
  }
  f32Tensor('output_norm.weight', 'model.norm.weight', [D]);
  linear('output.weight', 'lm_head', D, cfg.vocab_size);
  const meta: Meta[] = [
    ['general.architecture', 'str', arch], ['general.name', 'str', `tsi builder ${arch} (${variant})`],
    ['general.file_type', 'u32', q4 ? 2 : 0], ['general.alignment', 'u32', ALIGN],
    [`${arch}.context_length`, 'u32', cfg.max_position_embeddings], [`${arch}.embedding_length`, 'u32', D],
    [`${arch}.block_count`, 'u32', cfg.num_hidden_layers], [`${arch}.feed_forward_length`, 'u32', cfg.intermediate_size],
    [`${arch}.attention.head_count`, 'u32', H], [`${arch}.attention.head_count_kv`, 'u32', KVH],
    [`${arch}.attention.key_length`, 'u32', hd], [`${arch}.attention.value_length`, 'u32', hd],
    [`${arch}.rope.dimension_count`, 'u32', hd], [`${arch}.rope.freq_base`, 'f32', cfg.rope_theta],
    [`${arch}.attention.layer_norm_rms_epsilon`, 'f32', cfg.rms_norm_eps], [`${arch}.vocab_size`, 'u32', cfg.vocab_size],
    ...tokenizerMeta(tok, cfg),
  ];
  writeGguf(out, meta, tensors);
}
