/**
 * Reads an ONNX model's graph inputs and outputs (names, element types, dims) straight from the
 * protobuf, without creating an inference session: auto-complete and config checks then cost
 * milliseconds and never block the event loop on a model load. Only the few fields needed are
 * declared, so initializer weights are skipped by the decoder instead of copied.
 */

import protobuf from 'protobufjs';
import type { ModelIoInfo } from '../../core/index.js';

const SCHEMA = `
syntax = "proto3";
package onnxinfo;
message Dim { oneof value { int64 dim_value = 1; string dim_param = 2; } }
message Shape { repeated Dim dim = 1; }
message TensorType { int32 elem_type = 1; Shape shape = 2; }
message Type { TensorType tensor_type = 1; }
message ValueInfo { string name = 1; Type type = 2; }
message Initializer { string name = 8; }
message Node { repeated string input = 1; repeated string output = 2; string op_type = 4; string domain = 7; }
message Graph { repeated Node node = 1; repeated Initializer initializer = 5; repeated ValueInfo input = 11; repeated ValueInfo output = 12; }
message Model { int64 ir_version = 1; Graph graph = 7; }
`;

const ELEM_TYPES: Record<number, string> = {
  1: 'float32', 2: 'uint8', 3: 'int8', 4: 'uint16', 5: 'int16', 6: 'int32', 7: 'int64', 8: 'string',
  9: 'bool', 10: 'float16', 11: 'float64', 12: 'uint32', 13: 'uint64', 16: 'bfloat16',
};

let modelType: protobuf.Type | undefined;

interface DecodedValueInfo {
  name: string;
  type?: { tensorType?: { elemType?: number; shape?: { dim?: DecodedDim[] } } };
}

interface DecodedDim {
  /** The oneof's case: protobufjs reads an absent int64 as 0 from the prototype, so presence is asked here. */
  value?: 'dimValue' | 'dimParam';
  dimValue?: number | { toNumber(): number };
  dimParam?: string;
}

interface DecodedNode { input?: string[]; output?: string[]; opType?: string; domain?: string }

/**
 * onnxruntime merges what its shape inference knows into a graph output's declared shape: a symbolic
 * dim the inference fixes is reported fixed by the session, and Triton compares the config with that.
 * This does the one case qa's models rely on (an output copied by Identity from a graph input, as in
 * gen_qa_ragged_models' batch_item: declared [-1, -1], reported [-1, 2]), walking Identity chains back.
 */
function refineFromIdentity(shape: (number | string)[], output: string, nodes: DecodedNode[], inputs: Map<string, (number | string)[]>): (number | string)[] {
  let name = output;
  for (let hops = 0; hops < nodes.length; hops++) {
    const node = nodes.find((n) => n.output?.includes(name));
    if (!node || node.opType !== 'Identity' || (node.domain && node.domain !== 'ai.onnx')) break;
    name = node.input?.[0] ?? '';
    const source = inputs.get(name);
    if (!source) continue;
    if (source.length !== shape.length) break;
    return shape.map((d, i) => (typeof d === 'number' && d >= 0) || typeof source[i] !== 'number' || (source[i] as number) < 0 ? d : source[i]!);
  }
  return shape;
}

export function readOnnxIo(bytes: Uint8Array): ModelIoInfo {
  modelType ??= protobuf.parse(SCHEMA).root.lookupType('onnxinfo.Model');
  const model = modelType.decode(bytes) as unknown as { graph?: { node?: DecodedNode[]; initializer?: { name: string }[]; input?: DecodedValueInfo[]; output?: DecodedValueInfo[] } };
  const g = model.graph ?? {};
  // Older exporters list initializers among the inputs; they are not real inputs.
  const inits = new Set((g.initializer ?? []).map((i) => i.name));
  const conv = (v: DecodedValueInfo) => {
    const tt = v.type?.tensorType;
    const datatype = ELEM_TYPES[tt?.elemType ?? 0] ?? `unsupported(${tt?.elemType ?? 'non-tensor'})`;
    // A dimension with neither field set is unknown (dynamic to onnxruntime and Triton), not 0.
    const shape = (tt?.shape?.dim ?? []).map((d): number | string => {
      if (d.value === 'dimParam' && d.dimParam) return d.dimParam;
      if (d.value !== 'dimValue' || d.dimValue === undefined) return -1;
      return typeof d.dimValue === 'number' ? d.dimValue : d.dimValue.toNumber();
    });
    return { name: v.name, datatype, shape };
  };
  const inputs = (g.input ?? []).filter((i) => !inits.has(i.name)).map(conv);
  const byName = new Map(inputs.map((i) => [i.name, i.shape]));
  return {
    inputs,
    outputs: (g.output ?? []).map(conv).map((o) => ({ ...o, shape: refineFromIdentity(o.shape, o.name, g.node ?? [], byName) })),
    ops: [...new Set((g.node ?? []).map((n) => (n.domain && n.domain !== 'ai.onnx' ? `${n.domain}:${n.opType}` : n.opType ?? '')))],
  };
}
