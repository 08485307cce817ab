/**
 * A small ONNX model builder, so the default model repository and test fixtures can be made from
 * TypeScript without Python or the 23 MB `onnx-proto` package. It holds a hand-written proto3 subset
 * of upstream `onnx.proto` (same field numbers, so ONNX Runtime reads the bytes as usual), a tiny
 * graph-building API (typed inputs/outputs with symbolic dims, typed-array initializers stored as
 * `raw_data`, nodes with attributes) and a seeded mulberry32 PRNG so generated weights are
 * byte-for-byte deterministic. Models default to IR version 8 and opset 13.
 *
 * It is runtime code too (runtime-node/llm/device-kv.ts builds the small graphs that move KV rows on
 * the device with it), so it lives in graph/, beside neither runtime: pure TypeScript, nothing of
 * Node (test/core/purity.test.ts), imported by the runtimes, scripts/, bench/ and tests.
 */
import protobuf from 'protobufjs';

// proto3 packs repeated scalars while upstream (proto2) does not; protobuf parsers must accept both.
const ONNX_SUBSET_PROTO = `
syntax = "proto3";
package onnx;

message AttributeProto {
  enum AttributeType {
    UNDEFINED = 0; FLOAT = 1; INT = 2; STRING = 3; TENSOR = 4; GRAPH = 5;
    FLOATS = 6; INTS = 7; STRINGS = 8; TENSORS = 9; GRAPHS = 10;
  }
  string name = 1;
  float f = 2;
  int64 i = 3;
  bytes s = 4;
  TensorProto t = 5;
  GraphProto g = 6;
  repeated float floats = 7;
  repeated int64 ints = 8;
  repeated bytes strings = 9;
  repeated TensorProto tensors = 10;
  repeated GraphProto graphs = 11;
  string doc_string = 13;
  AttributeType type = 20;
}

message ValueInfoProto {
  string name = 1;
  TypeProto type = 2;
  string doc_string = 3;
}

message NodeProto {
  repeated string input = 1;
  repeated string output = 2;
  string name = 3;
  string op_type = 4;
  string domain = 7;
  repeated AttributeProto attribute = 5;
  string doc_string = 6;
}

message StringStringEntryProto {
  string key = 1;
  string value = 2;
}

message OperatorSetIdProto {
  string domain = 1;
  int64 version = 2;
}

message ModelProto {
  int64 ir_version = 1;
  repeated OperatorSetIdProto opset_import = 8;
  string producer_name = 2;
  string producer_version = 3;
  string domain = 4;
  int64 model_version = 5;
  string doc_string = 6;
  GraphProto graph = 7;
  repeated StringStringEntryProto metadata_props = 14;
}

message GraphProto {
  repeated NodeProto node = 1;
  string name = 2;
  repeated TensorProto initializer = 5;
  string doc_string = 10;
  repeated ValueInfoProto input = 11;
  repeated ValueInfoProto output = 12;
  repeated ValueInfoProto value_info = 13;
}

message TensorProto {
  repeated int64 dims = 1;
  int32 data_type = 2;
  repeated float float_data = 4;
  repeated int32 int32_data = 5;
  repeated bytes string_data = 6;
  repeated int64 int64_data = 7;
  string name = 8;
  string doc_string = 12;
  bytes raw_data = 9;
  repeated double double_data = 10;
  repeated uint64 uint64_data = 11;
  repeated StringStringEntryProto external_data = 13;
  int32 data_location = 14;
}

message TensorShapeProto {
  message Dimension {
    oneof value {
      int64 dim_value = 1;
      string dim_param = 2;
    }
    string denotation = 3;
  }
  repeated Dimension dim = 1;
}

message TypeProto {
  message Tensor {
    int32 elem_type = 1;
    TensorShapeProto shape = 2;
  }
  oneof value {
    Tensor tensor_type = 1;
  }
  string denotation = 6;
}
`;

/** ONNX `TensorProto.DataType` codes for the element types ONNX Runtime supports on CPU. */
export const ElemType = {
  FLOAT: 1, UINT8: 2, INT8: 3, UINT16: 4, INT16: 5, INT32: 6, INT64: 7, STRING: 8,
  BOOL: 9, FLOAT16: 10, DOUBLE: 11, UINT32: 12, UINT64: 13, BFLOAT16: 16,
} as const;
export type ElemTypeName = keyof typeof ElemType;

/**
 * A dimension: a fixed size, a symbolic name (`'batch'`) that any size matches, or `null` for a
 * dimension written with neither field set (legal ONNX, dynamic to onnxruntime; Triton's example
 * models leave their batch dimension so).
 */
export type Dim = number | string | null;

/** Initializer contents. BOOL uses Uint8Array and FLOAT16/BFLOAT16 use Uint16Array (raw bits). */
export type TensorData =
  | Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array
  | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | readonly string[];

export interface TensorSpec { name?: string; elemType: ElemTypeName; dims: readonly number[]; data: TensorData }

/** A float attribute; a plain JS number is written as INT when it is an integer, so floats must say so. */
export interface FloatAttr { readonly float: number }
export const attrFloat = (v: number): FloatAttr => ({ float: v });

export type AttrValue = number | FloatAttr | string | readonly number[] | Float32Array | readonly string[] | TensorSpec;

export interface ValueInfoSpec { name: string; elemType: ElemTypeName; shape: readonly Dim[] }
export interface NodeSpec {
  opType: string; inputs: readonly string[]; outputs: readonly string[];
  attrs?: Record<string, AttrValue>; name?: string; domain?: string;
}
export interface ModelSpec {
  graphName: string;
  inputs: readonly ValueInfoSpec[];
  outputs: readonly ValueInfoSpec[];
  nodes: readonly NodeSpec[];
  initializers?: readonly (TensorSpec & { name: string })[];
  opset?: number;
  irVersion?: number;
  docString?: string;
  metadata?: Record<string, string>;
}

let cachedRoot: protobuf.Root | undefined;
function modelType(): protobuf.Type {
  // keepCase keeps upstream snake_case field names (the default would camelCase them).
  cachedRoot ??= protobuf.parse(ONNX_SUBSET_PROTO, { keepCase: true }).root;
  return cachedRoot.lookupType('onnx.ModelProto');
}

const IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const utf8 = new TextEncoder();

function tensorProto(t: TensorSpec, name: string): Record<string, unknown> {
  const out: Record<string, unknown> = { name, dims: [...t.dims], data_type: ElemType[t.elemType] };
  const count = t.dims.reduce((a, b) => a * b, 1);
  if (t.data.length !== count) {
    throw new Error(`initializer ${name}: ${t.data.length} values for dims [${t.dims.join(',')}]`);
  }
  if (t.elemType === 'STRING') {
    if (!Array.isArray(t.data)) throw new Error(`initializer ${name}: STRING data must be string[]`);
    // raw_data is not allowed for strings; they go in string_data as UTF-8 bytes.
    out.string_data = (t.data as readonly string[]).map((s) => utf8.encode(s));
    return out;
  }
  if (Array.isArray(t.data)) throw new Error(`initializer ${name}: ${t.elemType} data must be a typed array`);
  if (!IS_LITTLE_ENDIAN) throw new Error('raw_data must be little-endian; this host is big-endian');
  const view = t.data as Exclude<TensorData, readonly string[]>;
  out.raw_data = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  return out;
}

function attributeProto(name: string, v: AttrValue): Record<string, unknown> {
  if (typeof v === 'number') {
    return Number.isInteger(v) ? { name, type: 2, i: v } : { name, type: 1, f: v };
  }
  if (typeof v === 'string') return { name, type: 3, s: utf8.encode(v) };
  if (v instanceof Float32Array) return { name, type: 6, floats: Array.from(v) };
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x === 'string')) return { name, type: 8, strings: v.map((s: string) => utf8.encode(s)) };
    return { name, type: 7, ints: [...(v as number[])] };
  }
  if ('float' in v) return { name, type: 1, f: v.float };
  if ('elemType' in v) return { name, type: 4, t: tensorProto(v, v.name ?? name) };
  throw new Error(`attribute ${name}: unsupported value`);
}

function valueInfo(v: ValueInfoSpec): Record<string, unknown> {
  const dim = v.shape.map((d) => (d === null ? {} : typeof d === 'number' ? { dim_value: d } : { dim_param: d }));
  return { name: v.name, type: { tensor_type: { elem_type: ElemType[v.elemType], shape: { dim } } } };
}

/**
 * Moves initializers of at least `threshold` bytes out of the model into one external data file
 * (`location`, beside the model), as exporters do past protobuf's 2 GB limit: each tensor then names
 * the file, its offset (64-byte aligned) and length.
 */
function externalize(tensors: Record<string, any>[], location: string, threshold: number): Uint8Array {
  const parts: Uint8Array[] = [];
  let offset = 0;
  for (const t of tensors) {
    const raw = t.raw_data as Uint8Array | undefined;
    if (!raw || raw.byteLength < threshold) continue;
    const pad = (64 - (offset % 64)) % 64;
    if (pad > 0) parts.push(new Uint8Array(pad));
    offset += pad;
    t.external_data = [{ key: 'location', value: location }, { key: 'offset', value: String(offset) }, { key: 'length', value: String(raw.byteLength) }];
    t.data_location = 1;
    delete t.raw_data;
    parts.push(raw);
    offset += raw.byteLength;
  }
  const out = new Uint8Array(offset);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** Serialises a model description to ONNX protobuf bytes (deterministic for equal input). */
export function encodeModel(spec: ModelSpec): Uint8Array {
  return encodeModelParts(spec).model;
}

/**
 * The model's bytes, and with `external` its large initializers' bytes for the data file it names
 * (`model.onnx_data` beside `model.onnx`, the Optimum / onnx-community layout).
 */
export function encodeModelParts(spec: ModelSpec, external?: { location: string; threshold?: number }): { model: Uint8Array; data?: Uint8Array } {
  const Model = modelType();
  const initializer = (spec.initializers ?? []).map((t) => tensorProto(t, t.name));
  const data = external ? externalize(initializer, external.location, external.threshold ?? 1024) : undefined;
  // Nodes of other domains (com.microsoft's MatMulNBits...) need their opset imported.
  const domains = [...new Set(spec.nodes.map((n) => n.domain ?? '').filter((d) => d !== ''))];
  const msg = Model.fromObject({
    ir_version: spec.irVersion ?? 8,
    opset_import: [{ domain: '', version: spec.opset ?? 13 }, ...domains.map((domain) => ({ domain, version: 1 }))],
    producer_name: 'tsi-onnx-builder',
    producer_version: '1',
    model_version: 1,
    doc_string: spec.docString ?? '',
    metadata_props: Object.entries(spec.metadata ?? {}).map(([key, value]) => ({ key, value })),
    graph: {
      name: spec.graphName,
      node: spec.nodes.map((n, i) => ({
        name: n.name ?? `${n.opType.toLowerCase()}_${i}`,
        op_type: n.opType,
        domain: n.domain ?? '',
        input: [...n.inputs],
        output: [...n.outputs],
        attribute: Object.entries(n.attrs ?? {}).map(([k, v]) => attributeProto(k, v)),
      })),
      initializer,
      input: spec.inputs.map(valueInfo),
      output: spec.outputs.map(valueInfo),
    },
  });
  return { model: Model.encode(msg).finish(), data };
}

/** Decodes model bytes back to a plain object (snake_case fields, int64 as strings), for tests. */
export function decodeModel(bytes: Uint8Array): Record<string, unknown> {
  const Model = modelType();
  return Model.toObject(Model.decode(bytes), { longs: String, bytes: Array, defaults: false });
}

/**
 * The decoded message itself (snake_case fields; int64 as numbers or Longs; `raw_data` as views of
 * `bytes`, not copies), for readers of large models such as plain-decoder.ts.
 */
export function decodeModelMessage(bytes: Uint8Array): OnnxModelMessage {
  return modelType().decode(bytes) as unknown as OnnxModelMessage;
}
type Int64 = number | { toNumber(): number };
export interface OnnxTensorMessage {
  name: string; dims: Int64[]; data_type: number; raw_data?: Uint8Array; float_data?: number[]; int64_data?: Int64[]; int32_data?: number[];
  external_data?: { key: string; value: string }[]; data_location?: number;
}
export interface OnnxAttributeMessage { name: string; type: number; f?: number; i?: Int64; s?: Uint8Array; t?: OnnxTensorMessage; ints?: Int64[]; floats?: number[] }
export interface OnnxNodeMessage { input: string[]; output: string[]; name?: string; op_type: string; domain?: string; attribute: OnnxAttributeMessage[] }
export interface OnnxValueInfoMessage { name: string; type?: { tensor_type?: { elem_type?: number; shape?: { dim?: { dim_value?: Int64; dim_param?: string }[] } } } }
export interface OnnxModelMessage {
  graph: { node: OnnxNodeMessage[]; initializer: OnnxTensorMessage[]; input: OnnxValueInfoMessage[]; output: OnnxValueInfoMessage[] };
}
/** An int64 field as protobufjs gives it (a number, or a Long where long.js is present) as a number. */
export const int64 = (v: Int64 | undefined): number => (v === undefined ? 0 : typeof v === 'number' ? v : v.toNumber());

/**
 * The same model with the first dimension of every graph input and output that names one (`'batch'`)
 * left unset instead, the way Triton's example models are written.
 */
export function unsetBatchDims(bytes: Uint8Array): Uint8Array {
  const Model = modelType();
  const m = Model.toObject(Model.decode(bytes)) as { graph?: { input?: ValueInfoObject[]; output?: ValueInfoObject[] } };
  for (const v of [...(m.graph?.input ?? []), ...(m.graph?.output ?? [])]) {
    const dims = v.type?.tensor_type?.shape?.dim;
    if (dims?.[0]?.dim_param) dims[0] = {};
  }
  return Model.encode(Model.fromObject(m)).finish();
}
interface ValueInfoObject { type?: { tensor_type?: { shape?: { dim?: { dim_param?: string }[] } } } }

/**
 * Builds a graph step by step. `op` returns its (generated) output name so chains read naturally:
 * `g.op('Relu', [g.op('Gemm', [x, w, b], { transB: 1 })])`.
 */
export class GraphBuilder {
  private readonly inputs: ValueInfoSpec[] = [];
  private readonly outputs: ValueInfoSpec[] = [];
  private readonly nodes: NodeSpec[] = [];
  private readonly inits: (TensorSpec & { name: string })[] = [];
  private counter = 0;

  constructor(readonly graphName: string, private readonly opts: { opset?: number; docString?: string } = {}) {}

  input(name: string, elemType: ElemTypeName, shape: readonly Dim[]): string {
    this.inputs.push({ name, elemType, shape });
    return name;
  }

  output(name: string, elemType: ElemTypeName, shape: readonly Dim[]): string {
    this.outputs.push({ name, elemType, shape });
    return name;
  }

  initializer(name: string, elemType: ElemTypeName, dims: readonly number[], data: TensorData): string {
    this.inits.push({ name, elemType, dims, data });
    return name;
  }

  node(opType: string, inputs: readonly string[], outputs: readonly string[], attrs?: Record<string, AttrValue>, domain?: string): void {
    this.nodes.push({ opType, inputs, outputs, attrs, domain });
  }

  /** Adds a single-output node; its output is `out` or a fresh `<op>_<n>` name. */
  op(opType: string, inputs: readonly string[], attrs?: Record<string, AttrValue>, out?: string, domain?: string): string {
    const name = out ?? `${opType.toLowerCase()}_out_${this.counter++}`;
    this.node(opType, inputs, [name], attrs, domain);
    return name;
  }

  spec(): ModelSpec {
    return {
      graphName: this.graphName, inputs: this.inputs, outputs: this.outputs, nodes: this.nodes,
      initializers: this.inits, opset: this.opts.opset, docString: this.opts.docString,
    };
  }

  encode(): Uint8Array {
    return encodeModel(this.spec());
  }
}

/** mulberry32: a tiny, fast 32-bit seeded PRNG (floats in [0, 1)); core's, which seeds LLM sampling too. */
export { seededRandom as mulberry32 } from '../core/llm/sampling.js';

/** Fills `out` with uniform values in [lo, hi) from mulberry32(seed); the loop is inlined for speed. */
export function fillUniform<T extends Float32Array | Float64Array>(out: T, seed: number, lo: number, hi: number): T {
  let a = seed >>> 0;
  const scale = (hi - lo) / 4294967296;
  for (let i = 0; i < out.length; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = lo + ((t ^ (t >>> 14)) >>> 0) * scale;
  }
  return out;
}
