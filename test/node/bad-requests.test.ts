/**
 * Every kind of bad request gets a 4xx (or Triton's 5xx where Triton uses one) with a message naming
 * the model, tensor and what was expected — and the server keeps serving correct answers afterwards.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODELS, bytesOf, postBinary, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ modelRepositories: [MODELS], maxInputSize: 64 * 1024 });
});
afterAll(async () => s?.stop());

const row = Array.from({ length: 16 }, (_, i) => i);
const DECOMPRESSED = 'Decompressed data size exceeds the maximum allowed value of 65536 bytes. Use --http-max-input-size to increase the limit.';
const good = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: row },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: row },
  ],
};
const infer = (body: unknown, model = 'simple', headers?: Record<string, string>) => postJson(`${s.url}/v2/models/${model}/infer`, body, headers);
const withInput = (i: number, patch: Record<string, unknown>) => ({
  inputs: good.inputs.map((x, j) => (j === i ? { ...x, ...patch } : x)),
});

describe('bad requests', () => {
  const cases: [string, () => Promise<{ status: number; body: any }>, number, RegExp][] = [
    ['unknown model', () => infer(good, 'nope'), 404, /^Request for unknown model: 'nope' is not found$/],
    ['unknown model, unparsable body', () => infer('{"inputs": [', 'nope'), 404, /^Request for unknown model: 'nope' is not found$/],
    ['unknown version', () => postJson(`${s.url}/v2/models/simple/versions/9/infer`, good), 404, /'simple' version 9 is not found/],
    ['wrong shape', () => infer(withInput(0, { shape: [1, 8], data: row.slice(0, 8) })), 400,
      /unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[1,8\]/],
    ['missing batch dimension', () => infer(withInput(0, { shape: [16] })), 400, /Expected \[-1,16\], got \[16\]\. NOTE: Setting a non-zero max_batch_size/],
    ['wrong datatype', () => infer(withInput(1, { datatype: 'FP32' })), 400,
      /inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'/],
    ['element count mismatch', () => infer(withInput(0, { data: row.slice(0, 15) })), 400, /input byte size mismatch for input 'INPUT0' for model 'simple'\. Expected 64, got 60/],
    ['missing input', () => infer({ inputs: [good.inputs[0]] }), 400,
      /expected 2 inputs but got 1 inputs for model 'simple'\. Got input\(s\) \['INPUT0'\], but missing required input\(s\) \['INPUT1'\]/],
    ['unknown input', () => infer({ inputs: [...good.inputs, { name: 'EXTRA', datatype: 'INT32', shape: [1, 16], data: row }] }), 400,
      /unexpected inference input 'EXTRA' for model 'simple'/],
    ['unknown output', () => infer({ ...good, outputs: [{ name: 'OUTPUT9' }] }), 400, /unexpected inference output 'OUTPUT9' for model 'simple'/],
    ['batch over max_batch_size', () => infer({
      inputs: good.inputs.map((x) => ({ ...x, shape: [9, 16], data: Array(9 * 16).fill(1) })),
    }), 400, /inference request batch-size must be <= 8 for 'simple'/],
    ['malformed JSON', () => infer('{"inputs": [', 'simple'), 400, /failed to parse the request JSON buffer/],
    ['non-array inputs', () => infer({ inputs: 3 }), 400, /'inputs'/],
    ['bad datatype name', () => infer(withInput(0, { datatype: 'FLOAT' })), 400, /^input 'INPUT0' for model 'simple': invalid datatype "FLOAT", expected one of BOOL/],
    ['data of the wrong type', () => infer(withInput(0, { data: row.map(String) })), 400, /^input 'INPUT0' for model 'simple': element 0 is "0", expected an integer for datatype INT32$/],
    ['out-of-range integer', () => infer(withInput(0, { data: row.map(() => 2 ** 40) })), 400, /expected a value in \[-2147483648, 2147483647\]/],
    ['both data and binary_data_size', () => infer(withInput(0, { parameters: { binary_data_size: 64 } })), 400,
      /Input 'INPUT0' must set only one of the following fields/],
    ['reserved triton_ parameter', () => infer({ ...good, parameters: { triton_x: 1 } }), 400, /parameter keys starting with 'triton_' are reserved/],
    ['FP16 via JSON', () => postJson(`${s.url}/v2/models/simple/infer`, withInput(0, { datatype: 'FP16' })), 400, /receiving FP16 data via JSON is not supported/],
  ];
  for (const [name, send, status, message] of cases) {
    it(`rejects ${name}`, async () => {
      const r = await send();
      expect(r.status, JSON.stringify(r.body)).toBe(status);
      expect(r.body.error).toMatch(message);
    });
  }

  it('rejects bad binary headers and sizes', async () => {
    const a = bytesOf(Int32Array.from(row));
    const header = {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
    };
    const body = new TextEncoder().encode(JSON.stringify(header));
    for (const [value, msg] of [['abc', /Unable to parse Inference-Header-Content-Length, got: abc/], ['99999', /inference header size should be in range \(0, \d+\), got: 99999/]] as const) {
      const r = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body, headers: { 'Inference-Header-Content-Length': value } });
      expect(r.status).toBe(400);
      expect((await r.json()).error).toMatch(msg);
    }
    const short = await postBinary(`${s.url}/v2/models/simple/infer`, header, [a, a.subarray(0, 32)]);
    expect(short.status).toBe(400);
    expect(short.json.error).toMatch(/unexpected end of binary data for input 'INPUT1'/);
    const extra = await postBinary(`${s.url}/v2/models/simple/infer`, header, [a, a, a]);
    expect(extra.status).toBe(400);
    expect(extra.json.error).toMatch(/unexpected additional input data for model 'simple'/);
    const wrongSize = await postBinary(`${s.url}/v2/models/simple/infer`, {
      inputs: [header.inputs[0], { ...header.inputs[1], parameters: { binary_data_size: 60 } }],
    }, [a, a.subarray(0, 60)]);
    expect(wrongSize.status).toBe(400);
    expect(wrongSize.json.error).toMatch(/input byte size mismatch for input 'INPUT1' for model 'simple'\. Expected 64, got 60/);
    const badStrings = await postBinary(`${s.url}/v2/models/simple_identity/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 1], parameters: { binary_data_size: 6 } }],
    }, [new Uint8Array([200, 0, 0, 0, 65, 66])]);
    expect(badStrings.status).toBe(400);
    expect(badStrings.json.error).toMatch(/BYTES element 0 claims 200 bytes but only 2 remain/);
  });

  it('rejects bodies over --http-max-input-size, also after decompression', async () => {
    const big = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(40000).fill(1) }] });
    const r = await infer(big);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/exceeds the maximum allowed input size of 65536 bytes/);
    const { gzipSync } = await import('node:zlib');
    const bomb = gzipSync(Buffer.from(' '.repeat(1 << 20)));
    const z = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body: bomb, headers: { 'Content-Encoding': 'gzip' } });
    expect(z.status).toBe(400);
    // Triton's DataCompressor text (L0_http test_default_limit_compressed looks for "exceeds the maximum allowed value").
    expect((await z.json()).error).toBe(DECOMPRESSED);
  });

  it("words a raw binary body over the limit as Triton does (EVBufferToRawInput), however it is framed", async () => {
    const RAW = /^Raw input has a byte_size \(\d+ bytes\) that exceeds the maximum allowed value of 65536 bytes\. Use --http-max-input-size to increase the limit\.$/;
    const raw = new Uint8Array(65536 + 64);
    const headers = { 'Inference-Header-Content-Length': '0', 'Content-Type': 'application/octet-stream' };
    const sized = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body: raw, headers });
    expect(sized.status).toBe(400);
    expect((await sized.json()).error).toMatch(RAW);
    // No Content-Length: counted as it arrives.
    const stream = new Blob([raw]).stream();
    const chunked = await fetch(`${s.url}/v2/models/simple/infer`, { method: 'POST', body: stream, headers, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(400);
    expect((await chunked.json()).error).toMatch(RAW);
    const { gzipSync } = await import('node:zlib');
    // Compressed, it is bounded as it is decoded, before anything looks at it (Triton's DecompressBuffer).
    const zipped = await fetch(`${s.url}/v2/models/simple/infer`, {
      method: 'POST', body: gzipSync(Buffer.alloc(1 << 20)), headers: { ...headers, 'Content-Encoding': 'gzip' },
    });
    expect(zipped.status).toBe(400);
    expect((await zipped.json()).error).toBe(DECOMPRESSED);
  });

  it('refuses an oversized chunked body (no Content-Length) and survives clients that hang up mid-body', async () => {
    const { request } = await import('node:http');
    const { connect } = await import('node:net');
    const url = new URL(`${s.url}/v2/models/simple/infer`);
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST' }, (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      for (let i = 0; i < 20; i++) req.write(' '.repeat(8192));
      req.end();
    });
    expect(chunked.status).toBe(400);
    expect(JSON.parse(chunked.body).error).toMatch(/^request JSON size of \d+ bytes exceeds the maximum allowed input size of 65536 bytes/);
    for (let i = 0; i < 20; i++) {
      const sock = connect(Number(url.port), url.hostname);
      await new Promise((r) => sock.once('connect', r));
      sock.write(`POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"inputs": [`);
      sock.destroy();
    }
  });

});

/** Nested `depth` levels deep: [[[...]]] around `inner`. */
const nested = (depth: number, inner = '1') => `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;
const rawBody = (parts: Record<string, string>) =>
  `{${Object.entries(parts).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;
const goodInputs = JSON.stringify(good.inputs);

describe('parameters and tensor descriptions: types and ranges, as Triton checks them', () => {
  const withOutputs = (outputs: unknown) => ({ ...good, outputs });
  const cases: [string, unknown, RegExp][] = [
    ['binary_data_output that is not a boolean', { ...good, parameters: { binary_data_output: 'yes' } },
      /^Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean \(request parameter 'binary_data_output' for model 'simple': expected a boolean, got "yes"\)$/],
    ['an output binary_data that is not a boolean', withOutputs([{ name: 'OUTPUT0', parameters: { binary_data: 'yes' } }]),
      /^Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean \(parameter 'binary_data' of output 'OUTPUT0' for model 'simple': expected a boolean, got "yes"\)$/],
    ['a priority of 1e30', { ...good, parameters: { priority: 1e30 } },
      /^Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer \(request parameter 'priority' for model 'simple': expected an unsigned integer, got 1e\+30\)$/],
    ['a negative priority', { ...good, parameters: { priority: -1 } }, /Unable to parse 'priority': .* got -1\)$/],
    ['a fractional timeout', { ...good, parameters: { timeout: 2.5 } }, /Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer .* got 2\.5\)$/],
    ['a timeout as a string', { ...good, parameters: { timeout: '10' } }, /Unable to parse 'timeout': .* got "10"\)$/],
    ['a sequence_id that is an object', { ...good, parameters: { sequence_id: { a: 1 } } },
      /^Unable to parse 'sequence_id': attempt to access JSON non-string as string \(request parameter 'sequence_id' for model 'simple': expected an unsigned integer or a string, got \{"a":1\}\)$/],
    ['a sequence_start that is a string', { ...good, parameters: { sequence_start: 'true' } }, /^Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean/],
    ['a sequence_end that is a number', { ...good, parameters: { sequence_end: 1 } }, /^Unable to parse 'sequence_end': attempt to access JSON non-boolean as boolean/],
    ['a custom parameter that is an object', { ...good, parameters: { mine: { deep: [1] } } },
      /^parameter 'mine' has invalid type\. It should be either 'int', 'bool', or 'string'\. \(request parameter 'mine' for model 'simple': expected a string, number or boolean, got \{"deep":\[1\]\}\)$/],
    ['parameters that are not an object', { ...good, parameters: [1, 2] }, /^failed to get request params\.: attempt to get members for non-object \(model 'simple': got \[1,2\]\)$/],
    ['a classification that is a string', withOutputs([{ name: 'OUTPUT0', parameters: { classification: '2' } }]),
      /^Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer \(parameter 'classification' of output 'OUTPUT0' for model 'simple'/],
    ['a negative classification', withOutputs([{ name: 'OUTPUT0', parameters: { classification: -3 } }]), /^Unable to set 'classification': .* got -3\)$/],
    // 2^64 is one past uint64 (Triton's AsUInt refuses it; JSON.parse reads 18446744073709551616 as 2 ** 64).
    ['a classification of 2^64', withOutputs([{ name: 'OUTPUT0', parameters: { classification: 2 ** 64 } }]), /^Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer/],
    ['a binary_data_size that is a string', withInput(0, { data: undefined, parameters: { binary_data_size: '64' } }),
      /^Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer \(parameter 'binary_data_size' of input 'INPUT0' for model 'simple'/],
    ['a negative binary_data_size', withInput(0, { data: undefined, parameters: { binary_data_size: -64 } }), /^Unable to parse 'binary_data_size': .* got -64\)$/],
    ['a shared_memory_region that is a number', withInput(0, { data: undefined, parameters: { shared_memory_region: 5, shared_memory_byte_size: 64 } }),
      /^Unable to parse 'shared_memory_region': attempt to access JSON non-string as string \(parameter 'shared_memory_region' of input 'INPUT0' for model 'simple'/],
    ['an id that is not a string', { ...good, id: { a: 1 } }, /^Unable to parse 'id': attempt to access JSON non-string as string \(request for model 'simple': got \{"a":1\}\)$/],
    ['a negative dimension', withInput(0, { shape: [1, -16] }),
      /^Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer \(input 'INPUT0' for model 'simple': expected an array of non-negative integers, got \[1,-16\]\)$/],
    ['a fractional dimension', withInput(0, { shape: [1, 15.5] }), /^Unable to parse 'shape': .* got \[1,15\.5\]\)$/],
    ['a dimension past uint64', withInput(0, { shape: [1, 1e30] }), /^Unable to parse 'shape': .* got \[1,1e\+30\]\)$/],
    ['a shape whose element count overflows int64', withInput(0, { shape: [2 ** 40, 2 ** 40], data: [1] }),
      /^invalid shape for input 'INPUT0': shape \[1099511627776,1099511627776\] causes total element count to exceed maximum size of 9223372036854775807$/],
    ['a datatype that is not a string', withInput(0, { datatype: ['INT32'] }), /^input 'INPUT0' for model 'simple': invalid datatype \["INT32"\], expected one of BOOL, UINT8/],
    ['an INT32 value given as an object', withInput(0, { data: [{ a: 1 }, ...row.slice(1)] }),
      /^input 'INPUT0' for model 'simple': element 0 is \{"a":1\}, expected an integer for datatype INT32$/],
    ['a byte size past int64 (2^62 INT32 elements)', withInput(0, { shape: [2 ** 31, 2 ** 31], data: [1] }),
      /^byte size overflow for input 'INPUT0': element count \(4611686018427387904\) \* data type size \(4\) exceeds maximum allowed size \(9223372036854775807\)$/],
    ['an input given twice', { inputs: [good.inputs[0], good.inputs[0], good.inputs[1]] }, /^\[request id: <id_unknown>\] input 'INPUT0' already exists in request \(model 'simple'\)$/],
    ['an output asked for twice', withOutputs([{ name: 'OUTPUT0' }, { name: 'OUTPUT0' }]), /^\[request id: <id_unknown>\] output 'OUTPUT0' already exists in request \(model 'simple'\)$/],
    ['an output without a name', withOutputs([{ parameters: {} }]), /^Unable to parse 'name': attempt to access JSON non-string as string \(output 0 for model 'simple': got nothing\)$/],
    ['shared memory and classification on one output', withOutputs([{ name: 'OUTPUT0', parameters: { shared_memory_region: 'r', shared_memory_byte_size: 64, classification: 1 } }]),
      /^Output can't set both 'shared_memory_region' and 'classification' \(output 'OUTPUT0' for model 'simple'\)$/],
  ];
  for (const [name, body, message] of cases) {
    it(`answers 400 to ${name}`, async () => {
      const r = await infer(body);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatch(message);
    });
  }

  it('reads a classification of 0 as none, as Triton does', async () => {
    const r = await infer(withOutputs([{ name: 'OUTPUT0', parameters: { classification: 0 } }]));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0]).toMatchObject({ name: 'OUTPUT0', datatype: 'INT32', data: row.map((v) => v * 2) });
  });

  it('still takes every parameter of the right type', async () => {
    const r = await infer({
      ...good, id: 'ok', parameters: { binary_data_output: false, priority: 0, timeout: 1_000_000, custom: 'x', n: 2.5, flag: true },
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: false } }, { name: 'OUTPUT1', parameters: { classification: 2 } }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.outputs[0].data).toEqual(row.map((v) => v * 2));
    expect(r.body.outputs[1]).toMatchObject({ name: 'OUTPUT1', datatype: 'BYTES', shape: [1, 2] });
  });
});

describe('JSON nested deeper than Triton allows', () => {
  it('answers 400 with Triton\'s text for tensor data 10,000 levels deep', async () => {
    const r = await infer(rawBody({ inputs: `[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":${nested(10_000)}},${JSON.stringify(good.inputs[1])}]` }));
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error).toBe(`input 'INPUT0' for model 'simple': JSON nesting depth exceeds maximum allowed limit (100)`);
  });

  it('takes data nested as deep as the limit allows', async () => {
    // 99 arrays around one value: the data array is level 0 and the value level 99, as Triton counts.
    const one = rawBody({ inputs: `[{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"data":${nested(99, '"x"')}}]` });
    const r = await infer(one, 'simple_identity');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const over = await infer(rawBody({ inputs: `[{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"data":${nested(100, '"x"')}}]` }), 'simple_identity');
    expect(over.status).toBe(400);
    expect(over.body.error).toMatch(/JSON nesting depth exceeds maximum allowed limit \(100\)/);
  });

  // A deep value anywhere else is a value of the wrong type, and its message stays short.
  const deep = nested(10_000);
  for (const [where, body] of [
    ['id', rawBody({ id: deep, inputs: goodInputs })],
    ['a request parameter', rawBody({ parameters: `{"priority":${deep}}`, inputs: goodInputs })],
    ['a custom parameter', rawBody({ parameters: `{"mine":${deep}}`, inputs: goodInputs })],
    ['shape', rawBody({ inputs: `[{"name":"INPUT0","datatype":"INT32","shape":${deep},"data":[1]}]` })],
    ['datatype', rawBody({ inputs: `[{"name":"INPUT0","datatype":${deep},"shape":[1,16],"data":[1]}]` })],
    ['name', rawBody({ inputs: `[{"name":${deep},"datatype":"INT32","shape":[1,16],"data":[1]}]` })],
    ['inputs', rawBody({ inputs: `[${deep}]` })],
    ['outputs', rawBody({ inputs: goodInputs, outputs: deep })],
    ['an output parameter', rawBody({ inputs: goodInputs, outputs: `[{"name":"OUTPUT0","parameters":{"binary_data":${deep}}}]` })],
    ['the whole body', deep],
    ['an INT64 value', rawBody({ inputs: `[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[${deep}]}]` })],
  ] as const) {
    it(`answers 400, briefly, to a deep value in ${where}`, async () => {
      const r = await infer(body);
      expect(r.status, JSON.stringify(r.body).slice(0, 500)).toBe(400);
      expect(typeof r.body.error).toBe('string');
      expect(r.body.error.length).toBeGreaterThan(10);
      expect(r.body.error.length).toBeLessThan(400);
    });
  }
});

describe('the server after all of that', () => {
  it('keeps serving correct answers after all of that', async () => {
    const r = await infer(good);
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].data).toEqual(row.map((v) => v * 2));
    expect((await fetch(`${s.url}/v2/health/ready`)).status).toBe(200);
  });
});

describe('logging and trace settings with hostile values', () => {
  it('answers 400, not 500, to a deeply nested value and keeps serving', async () => {
    const { startTestServer, tempRepo } = await import('../helpers/server.js');
    const repo = tempRepo({});
    const s = await startTestServer({ modelRepositories: [repo.path] });
    try {
      const deep = '['.repeat(10_000) + ']'.repeat(10_000);
      for (const [path, body] of [['/v2/logging', `{"log_info": ${deep}}`], ['/v2/logging', `{"log_verbose_level": ${deep}}`], ['/v2/trace/setting', `{"trace_rate": ${deep}}`]] as const) {
        const r = await fetch(`${s.url}${path}`, { method: 'POST', body });
        expect(r.status, `${path} ${body.slice(0, 20)}`).toBe(400);
        expect(((await r.json()) as { error: string }).error.length).toBeGreaterThan(0);
      }
      expect((await fetch(`${s.url}/v2/health/live`)).status).toBe(200);
    } finally {
      await s.stop();
      repo.cleanup();
    }
  });
});
