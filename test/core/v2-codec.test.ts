/**
 * The v2 response encoding's pieces: the JSON header's UTF-8 length (sent as
 * Inference-Header-Content-Length, counted without encoding it) and the parts joined into one body;
 * and parameter or map keys a client or config chose that collide with what every object inherits.
 */

import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../core/config/pipeline.js';
import type { ModelConfig } from '../../core/config/model-config.js';
import { validateRequest } from '../../core/request.js';
import { bodyBytes, decodeInferRequest, encodeInferResponse, utf8Length } from '../../core/protocol/v2-codec.js';
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

describe('parameter keys named like what every object inherits', () => {
  it('are the client\'s own parameters, kept and passed on, on the request and on its tensors', () => {
    const config = {
      name: 'm', max_batch_size: 0,
      input: [{ name: 'I', data_type: 'TYPE_INT32', dims: [1] }], output: [{ name: 'X', data_type: 'TYPE_INT32', dims: [1] }],
    } as ModelConfig;
    // Written as text: a JS literal's `__proto__:` would set the prototype, not send a key.
    const body = '{"parameters":{"toString":"t","__proto__":"p","constructor":1,"hasOwnProperty":true,"valueOf":2.5},'
      + '"inputs":[{"name":"I","datatype":"INT32","shape":[1],"data":[3],"parameters":{"__proto__":"q","toString":7}}],'
      + '"outputs":[{"name":"X","parameters":{"toString":"o","__proto__":{"nested":1}}}]}';
    const { request } = decodeInferRequest(new TextEncoder().encode(body), undefined, 'm', undefined, () => config);
    const expected = [['toString', 't'], ['__proto__', 'p'], ['constructor', 1], ['hasOwnProperty', true], ['valueOf', 2.5]];
    expect(Object.entries(request.parameters!)).toEqual(expected);
    expect(Object.getPrototypeOf(request.parameters)).toBe(Object.prototype);
    expect(Object.entries(request.inputs[0]!.parameters!)).toEqual([['__proto__', 'q'], ['toString', 7]]);
    // An output keeps only what tsi acts on (classification); the others were checked and accepted.
    expect(request.outputs).toEqual([{ name: 'X', parameters: {} }]);
    const pending = validateRequest(request, { modelName: 'm', config, sink: () => {} });
    expect(Object.entries(pending.parameters)).toEqual(expected);
    expect(JSON.parse(JSON.stringify(pending.parameters))).toEqual(JSON.parse('{"toString":"t","__proto__":"p","constructor":1,"hasOwnProperty":true,"valueOf":2.5}'));
  });

  it('are checked by the custom rule, not by a function found on the prototype', () => {
    const config = { name: 'm', max_batch_size: 0, input: [], output: [] } as ModelConfig;
    const decode = (json: string) => () => decodeInferRequest(new TextEncoder().encode(json), undefined, 'm', undefined, () => config);
    expect(decode('{"inputs":[],"parameters":{"toString":[1]}}')).toThrow(/parameter 'toString' has invalid type.*request parameter 'toString' for model 'm'/);
    expect(decode('{"inputs":[],"parameters":{"__proto__":{}}}')).toThrow(/parameter '__proto__' has invalid type/);
  });

  it('are sent back as the model gave them, in the JSON header of a response', () => {
    const parameters = JSON.parse('{"__proto__":"p","toString":5,"big":0}');
    parameters.big = 7n;
    const enc = encodeInferResponse({ model_name: 'm', model_version: '1', parameters, outputs: [] }, { binaryDefault: false, binary: new Map() });
    const head = new TextDecoder().decode(bodyBytes(enc.parts));
    expect(head).toContain('"parameters":{"__proto__":"p","toString":5,"big":7}');
  });
});

describe('config maps keyed like what every object inherits', () => {
  it('keep a `__proto__` or `toString` key as an entry', () => {
    const cfg = parseModelConfig([
      'name: "m"', 'backend: "onnxruntime"',
      'parameters { key: "__proto__" value: { string_value: "a" } }',
      'parameters { key: "toString" value: { string_value: "b" } }',
    ].join('\n'), 'm/config.pbtxt');
    expect(Object.entries(cfg.parameters!)).toEqual([['__proto__', { string_value: 'a' }], ['toString', { string_value: 'b' }]]);
    expect(Object.getPrototypeOf(cfg.parameters)).toBe(Object.prototype);
  });
});
