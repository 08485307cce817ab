/**
 * The v2 response encoding's pieces: the JSON header's UTF-8 length (sent as
 * Inference-Header-Content-Length, counted without encoding it) and the parts joined into one body.
 */

import { describe, expect, it } from 'vitest';
import { bodyBytes, encodeInferResponse, utf8Length } from '../../core/v2-codec.js';
import { concatBytes, fromBytes } from '../../core/tensor.js';

describe('v2 response encoding', () => {
  it('counts UTF-8 bytes as TextEncoder writes them', () => {
    const enc = new TextEncoder();
    for (const s of ['', 'plain ascii', 'café', 'ß€', '模型', 'emoji 🙂 and 𝄞', '\u007f\u0080\u07ff\u0800\uffff', JSON.stringify({ id: 'Ωmega 💡', x: '\u00e9' })]) {
      expect([s, utf8Length(s)]).toEqual([s, enc.encode(s).byteLength]);
    }
  });

  it('sends the JSON header then each binary output, and says where the header ends', () => {
    const out = new Float32Array([1.5, -2, 3]);
    const enc = encodeInferResponse(
      { id: 'réq-1', model_name: 'm', model_version: '1', outputs: [{ name: 'Y', datatype: 'FP32', shape: [3], data: out }] },
      { binaryDefault: true, binary: new Map() },
    );
    expect(enc.contentType).toBe('application/octet-stream');
    const body = bodyBytes(enc.parts);
    const head = JSON.parse(new TextDecoder().decode(body.subarray(0, enc.headerLength)));
    expect(head.id).toBe('réq-1');
    expect(head.outputs[0].parameters.binary_data_size).toBe(12);
    expect([...new Float32Array(body.slice(enc.headerLength).buffer)]).toEqual([1.5, -2, 3]);
  });
});

describe('joining a received body', () => {
  it('puts the binary part on an 8-byte boundary, so its first tensor is a view and not a copy', () => {
    for (const headerLength of [0, 1, 5, 7, 8, 231]) {
      const header = new Uint8Array(headerLength).fill(0x20);
      const data = Float64Array.from([1.5, -2, 3]);
      const bytes = new Uint8Array(data.buffer);
      // As a socket delivers it: pieces cut anywhere.
      const whole = concatBytes([header, bytes]);
      const parts = [whole.subarray(0, 3), whole.subarray(3, headerLength + 5), whole.subarray(headerLength + 5)];
      const body = concatBytes(parts, headerLength);
      expect(Buffer.from(body).equals(Buffer.from(whole))).toBe(true);
      expect((body.byteOffset + headerLength) % 8).toBe(0);
      const t = fromBytes('FP64', body.subarray(headerLength)) as Float64Array;
      expect(t.buffer).toBe(body.buffer);
      expect([...t]).toEqual([1.5, -2, 3]);
    }
  });
});
