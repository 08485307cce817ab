/**
 * The HTTP client (`tsi-node/client`) inside real headless Chromium, calling the real Node server
 * across origins (CORS): the bundle must load without any Node module, the binary tensor extension must
 * survive the browser's fetch (the Inference-Header-Content-Length header has to be exposed), request
 * gzip goes through the page's CompressionStream, generate_stream through its stream readers, and
 * errors keep the server's status and message.
 */

import { describe, expect, inject, it } from 'vitest';
import { HttpClient, InferenceServerError } from '../../client/index.js';

const URL_ = inject('nodeUrl');
const a = Int32Array.from({ length: 16 }, (_, i) => i);
const b = Int32Array.from({ length: 16 }, () => 5);
const inputs = [{ name: 'INPUT0', shape: [1, 16], data: a }, { name: 'INPUT1', shape: [1, 16], data: b }];

describe('HttpClient in Chromium', () => {
  it('runs in a real page', () => {
    expect(typeof document.createElement).toBe('function');
    expect(navigator.userAgent).toMatch(/Chrome/);
  });

  it('checks health and reads metadata and config', async () => {
    const c = new HttpClient(URL_);
    expect(await c.isServerLive()).toBe(true);
    expect(await c.isServerReady()).toBe(true);
    expect(await c.isModelReady('simple')).toBe(true);
    expect(await c.isModelReady('no_such_model')).toBe(false);
    expect((await c.getServerMetadata()).extensions).toContain('binary_tensor_data');
    expect((await c.getModelMetadata('simple')).inputs[0]).toEqual({ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] });
    expect((await c.getModelConfig('simple')).max_batch_size).toBe(8);
  });

  it('infers with binary tensors, with JSON, and with gzip-compressed requests', async () => {
    for (const c of [
      new HttpClient(URL_),
      new HttpClient({ url: URL_, binaryInputs: false, binaryOutputs: false }),
      new HttpClient({ url: URL_, requestCompression: 'gzip', responseCompression: 'gzip' }),
    ]) {
      const r = await c.infer('simple', inputs, { id: 'page' });
      expect(r.id).toBe('page');
      expect(r.data('OUTPUT0')).toBeInstanceOf(Int32Array);
      expect(Array.from(r.data<Int32Array>('OUTPUT0'))).toEqual(Array.from(a, (x) => x + 5));
      expect(Array.from(r.data<Int32Array>('OUTPUT1'))).toEqual(Array.from(a, (x) => x - 5));
    }
  });

  it('sends strings, asks for classification, and keeps sequences apart', async () => {
    const c = new HttpClient(URL_);
    const s = await c.infer('simple_string', [
      { name: 'INPUT0', shape: [1, 16], data: Array.from(a, String) },
      { name: 'INPUT1', shape: [1, 16], data: Array.from(b, String) },
    ]);
    expect(s.strings('OUTPUT0')).toEqual(Array.from(a, (x) => String(x + 5)));
    const img = new Float32Array(768);
    const cls = await c.infer('image_classifier', [{ name: 'image', shape: [1, 3, 16, 16], data: img }], { outputs: [{ name: 'scores', classification: 2 }] });
    expect(cls.strings('scores')).toHaveLength(2);
    expect(cls.strings('scores')[0]).toMatch(/^-?[\d.e-]+:\d+:\w+$/);
    const step = (id: string, v: number, start: boolean, end: boolean) =>
      c.infer('simple_sequence_state', [{ name: 'INPUT', shape: [1, 1], data: new Int32Array([v]) }], { sequenceId: id, sequenceStart: start, sequenceEnd: end })
        .then((r) => r.data<Int32Array>('OUTPUT')[0]);
    expect(await step('page-seq', 4, true, false)).toBe(4);
    expect(await step('page-seq', 6, false, true)).toBe(10);
  });

  it('streams generate_stream events and reads statistics', async () => {
    const c = new HttpClient(URL_);
    const events = [];
    for await (const ev of c.generateStream('simple', { INPUT0: Array.from(a), INPUT1: Array.from(b) })) events.push(ev);
    expect(events).toHaveLength(1);
    expect(events[0]!.OUTPUT0).toEqual(Array.from(a, (x) => x + 5));
    const [stats] = await c.getInferenceStatistics('simple');
    expect(stats!.inference_stats.success.count).toBeGreaterThan(0);
  });

  it("surfaces the server's status and message as InferenceServerError", async () => {
    const c = new HttpClient(URL_);
    const bad = await c.infer('simple', [{ name: 'INPUT0', shape: [1, 4], data: new Int32Array(4) }, inputs[1]!]).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(InferenceServerError);
    expect((bad as InferenceServerError).status).toBe(400);
    expect((bad as InferenceServerError).message).toContain("unexpected shape for input 'INPUT0' for model 'simple'");
    const missing = await c.getModelMetadata('no_such_model').catch((e: unknown) => e);
    expect((missing as InferenceServerError).status).toBe(404);
    expect((missing as InferenceServerError).message).toBe("Request for unknown model: 'no_such_model' is not found");
  });
});
