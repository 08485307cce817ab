/**
 * Reads an ONNX model's graph inputs and outputs (names, element types, dims) straight from the
 * protobuf bytes, for Triton-style auto-complete in the browser, and the external data files its
 * weights live in (which onnxruntime-web cannot read by itself: it is handed their bytes). The Node runtime uses protobufjs for
 * this; here a ~100-line wire-format walker does the same job so the browser bundle carries no
 * protobuf library and never copies the weights (initializers are skipped by length, not decoded).
 */

import type { ModelIoInfo } from '../core/index.js';

const ELEM_TYPES: Record<number, string> = {
  1: 'float32', 2: 'uint8', 3: 'int8', 4: 'uint16', 5: 'int16', 6: 'int32', 7: 'int64', 8: 'string',
  9: 'bool', 10: 'float16', 11: 'float64', 12: 'uint32', 13: 'uint64', 16: 'bfloat16',
};

/** One protobuf message as a cursor over its bytes. */
class Reader {
  pos: number;
  constructor(readonly buf: Uint8Array, start = 0, readonly end = buf.byteLength) {
    this.pos = start;
  }

  done(): boolean {
    return this.pos >= this.end;
  }

  varint(): number {
    // Dims and enums fit in 53 bits; larger varints (never seen in IO descriptions) lose precision only.
    let result = 0;
    let scale = 1;
    for (;;) {
      if (this.pos >= this.end) throw new Error('truncated varint');
      const b = this.buf[this.pos++]!;
      result += (b & 0x7f) * scale;
      if (b < 0x80) return result;
      scale *= 128;
    }
  }

  /** The next field: its number, wire type, and for length-delimited fields a sub-reader. */
  field(): { no: number; wire: number; sub?: Reader; value?: number } {
    const key = this.varint();
    const no = Math.floor(key / 8);
    const wire = key & 7;
    switch (wire) {
      case 0: return { no, wire, value: this.varint() };
      case 1: this.pos += 8; return { no, wire };
      case 5: this.pos += 4; return { no, wire };
      case 2: {
        const len = this.varint();
        const sub = new Reader(this.buf, this.pos, this.pos + len);
        this.pos += len;
        if (this.pos > this.end) throw new Error('truncated field');
        return { no, wire, sub };
      }
      default: throw new Error(`unsupported protobuf wire type ${wire}`);
    }
  }

  string(): string {
    return new TextDecoder().decode(this.buf.subarray(this.pos, this.end));
  }
}

type Io = ModelIoInfo['inputs'][number];

function valueInfo(r: Reader): Io {
  let name = '';
  let elemType = 0;
  let shape: (number | string)[] = [];
  while (!r.done()) {
    const f = r.field();
    if (f.no === 1 && f.sub) name = f.sub.string();
    else if (f.no === 2 && f.sub) {
      // TypeProto.tensor_type (1) → elem_type (1), shape (2) → dim (1) → dim_value (1) | dim_param (2)
      while (!f.sub.done()) {
        const t = f.sub.field();
        if (t.no !== 1 || !t.sub) continue;
        while (!t.sub.done()) {
          const tt = t.sub.field();
          if (tt.no === 1 && tt.value !== undefined) elemType = tt.value;
          else if (tt.no === 2 && tt.sub) {
            shape = [];
            while (!tt.sub.done()) {
              const d = tt.sub.field();
              if (d.no !== 1 || !d.sub) continue;
              let dim: number | string = -1;
              while (!d.sub.done()) {
                const dv = d.sub.field();
                if (dv.no === 1 && dv.value !== undefined) dim = dv.value;
                else if (dv.no === 2 && dv.sub) dim = dv.sub.string();
              }
              shape.push(dim);
            }
          }
        }
      }
    }
  }
  return { name, datatype: ELEM_TYPES[elemType] ?? `unsupported(${elemType || 'non-tensor'})`, shape };
}

/** Name field (8) of a TensorProto, without touching its data. */
function initializerName(r: Reader): string {
  while (!r.done()) {
    const f = r.field();
    if (f.no === 8 && f.sub) return f.sub.string();
  }
  return '';
}

/** The fields of ModelProto.graph (7). */
function* graphFields(bytes: Uint8Array): Generator<ReturnType<Reader['field']>> {
  const model = new Reader(bytes);
  while (!model.done()) {
    const f = model.field();
    if (f.no !== 7 || !f.sub) continue;
    while (!f.sub.done()) yield f.sub.field();
  }
}

/** A NodeProto's op_type (4), prefixed by its domain (7) outside the ONNX domain. */
function nodeOp(r: Reader): string {
  let op = '';
  let domain = '';
  while (!r.done()) {
    const f = r.field();
    if (f.no === 4 && f.sub) op = f.sub.string();
    else if (f.no === 7 && f.sub) domain = f.sub.string();
  }
  return domain && domain !== 'ai.onnx' ? `${domain}:${op}` : op;
}

/** GraphProto.node (1: the operator types used), initializer (5), input (11), output (12). */
export function readOnnxIo(bytes: Uint8Array): ModelIoInfo {
  const inputs: Io[] = [];
  const outputs: Io[] = [];
  const inits = new Set<string>();
  const ops = new Set<string>();
  for (const gf of graphFields(bytes)) {
    if (!gf.sub) continue;
    if (gf.no === 1) ops.add(nodeOp(gf.sub));
    else if (gf.no === 5) inits.add(initializerName(gf.sub));
    else if (gf.no === 11) inputs.push(valueInfo(gf.sub));
    else if (gf.no === 12) outputs.push(valueInfo(gf.sub));
  }
  // Older exporters list initializers among the inputs; they are not real inputs.
  return { inputs: inputs.filter((i) => !inits.has(i.name)), outputs, ops: [...ops] };
}

/**
 * The files an ONNX model keeps its weights in beside it (TensorProto.external_data (13), key
 * `location`), in order of first use: `model.onnx_data`, or `_1`, `_2`... when an export is split.
 */
export function externalDataFiles(bytes: Uint8Array): string[] {
  const out = new Set<string>();
  for (const gf of graphFields(bytes)) {
    if (gf.no !== 5 || !gf.sub) continue;
    while (!gf.sub.done()) {
      const tf = gf.sub.field();
      if (tf.no !== 13 || !tf.sub) continue;
      // StringStringEntryProto: key (1), value (2).
      let key = '';
      let value = '';
      while (!tf.sub.done()) {
        const e = tf.sub.field();
        if (e.no === 1 && e.sub) key = e.sub.string();
        else if (e.no === 2 && e.sub) value = e.sub.string();
      }
      if (key === 'location' && value) out.add(value);
    }
  }
  return [...out];
}
