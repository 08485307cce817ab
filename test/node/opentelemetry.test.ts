/**
 * OpenTelemetry tracing (`--trace-config mode=opentelemetry`) on the real server, exporting to a real
 * OTLP/HTTP receiver that decodes the protobuf with the official schema: the settings the trace
 * protocol shows, Triton's span tree and attributes for a plain model, an ensemble and a Python BLS
 * model, the client's `traceparent` continued over HTTP and gRPC, rate and count honoured for
 * untraced requests and ignored for propagated ones, an error's span status, the identity backend's
 * custom activities as spans of their own (L0_trace's custom_identity_int32), and a collector that
 * is down or slow costing no inference and holding at most the queue's bound.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTraceConfig } from '../../core/index.js';
import { describeWith } from '../helpers/capability.js';
import { grpcClient, int32Raw, streamAll, type GrpcTestClient } from '../helpers/grpc.js';
import { otlpProtoMissing, spanTree, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { startPythonServer } from '../helpers/python-server.js';
import { MODELS, getJson, postJson, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const CI = !!process.env.CI;
const describeOtel = describeWith(CI, 'the OpenTelemetry .proto files', otlpProtoMissing);

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01';
const io = (dims: string) =>
  `input [{ name: "INPUT0" data_type: TYPE_INT32 dims: ${dims} }, { name: "INPUT1" data_type: TYPE_INT32 dims: ${dims} }]\n` +
  `output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: ${dims} }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: ${dims} }]\n`;
const ENSEMBLE = `name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n${io('[16]')}ensemble_scheduling { step [{ model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }] }\n`;
// Triton's qa bls_simple, reduced: one BLS call to `simple`, traced as this request's child.
const BLS_PY = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            pb_utils.Logger.log_info("trace context " + str(request.trace().get_context()))
            r = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0", "OUTPUT1"], trace=request.trace(),
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"), pb_utils.get_input_tensor_by_name(request, "INPUT1")])
            resp = r.exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            out.append(pb_utils.InferenceResponse(output_tensors=resp.output_tensors()))
        return out
`;
// The same in JavaScript (tsi's own backend), calling the ensemble: request.trace() passed as `trace`.
const BLS_JS = `export default class {
  initialize(args) { this.server = args.server; }
  async execute(requests) {
    return Promise.all(requests.map(async (r) => {
      const inputs = { INPUT0: { data: r.input('INPUT0').data, shape: [1, 16] }, INPUT1: { data: r.input('INPUT1').data, shape: [1, 16] } };
      const resp = await this.server.infer({ model_name: 'ens', inputs, trace: r.trace() });
      return { outputs: { OUTPUT0: resp.outputs.OUTPUT0.data, OUTPUT1: resp.outputs.OUTPUT1.data } };
    }));
  }
}
`;
// L0_trace's custom_identity_int32 (renamed: the default repository has one; its execute delay shortened): six nested custom spans, every third with a single activity.
const CUSTOM_IDENTITY = `name: "traced_identity"\nbackend: "identity"\nmax_batch_size: 1024
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]\noutput [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
instance_group [{ kind: KIND_CPU }]\nparameters [{ key: "execute_delay_ms" value: { string_value: "20" } }, { key: "enable_custom_tracing" value: { string_value: "true" } },
  { key: "nested_span_count" value: { string_value: "6" } }, { key: "single_activity_frequency" value: { string_value: "3" } }]\n`;
const body = (id?: string) => ({
  ...(id ? { id } : {}),
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
  ],
});
const grpcInfer = (model: string) => ({
  model_name: model,
  inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] }],
  raw_input_contents: [int32Raw(Array.from({ length: 16 }, (_, i) => i)), int32Raw(Array(16).fill(1))],
});

/** The spans of each trace received, by trace id, in the order their root spans arrived. */
function traces(spans: readonly ReceivedSpan[]): ReceivedSpan[][] {
  const by = new Map<string, ReceivedSpan[]>();
  for (const s of spans) {
    let list = by.get(s.traceId);
    if (!list) by.set(s.traceId, (list = []));
    list.push(s);
  }
  return [...by.values()];
}
const rootOf = (t: readonly ReceivedSpan[]) => t.find((s) => s.name === 'InferRequest')!;
const names = (s: ReceivedSpan) => s.events.map((e) => e.name);

describeOtel('OpenTelemetry mode', () => {
  let rx: OtlpReceiver;
  let s: TestServer;
  let repo: ReturnType<typeof tempRepo>;
  let grpc: GrpcTestClient;
  /**
   * Sends what the batch processor holds, until `roots` more requests' spans have arrived (a trace is
   * handed over when its request's last part ends, which may follow the answer by a moment), and
   * returns the spans received since the last call.
   */
  let seen = 0;
  const collect = async (roots = 1) => {
    const arrived = () => rx.spans.slice(seen).filter((x) => x.name === 'InferRequest').length;
    await expect.poll(async () => {
      await s.extensions.traces.flush();
      return arrived();
    }, { timeout: 10_000 }).toBeGreaterThanOrEqual(roots);
    const out = rx.spans.slice(seen);
    seen = rx.spans.length;
    return out;
  };

  beforeAll(async () => {
    rx = await startOtlpReceiver();
    repo = tempRepo({
      'ens/config.pbtxt': ENSEMBLE,
      'ens/1/.keep': '',
      'bls/config.pbtxt': `name: "bls"\nbackend: "python"\nmax_batch_size: 0\n${io('[1, 16]')}`,
      'bls/1/model.py': BLS_PY,
      'bls_js/config.pbtxt': `name: "bls_js"\nbackend: "javascript"\nmax_batch_size: 0\n${io('[1, 16]')}`,
      'bls_js/1/model.js': BLS_JS,
      'traced_identity/config.pbtxt': CUSTOM_IDENTITY,
      'traced_identity/1/.keep': '',
    });
    s = await startPythonServer({
      modelRepositories: [MODELS, repo.path], modelControlMode: 'explicit', loadModels: ['simple', 'ens', 'bls', 'bls_js', 'tiny_gpt', 'traced_identity'], grpcPort: 0, grpcAddress: '127.0.0.1',
      trace: parseTraceConfig([
        'mode=opentelemetry', 'level=TIMESTAMPS', 'rate=1', `opentelemetry,url=${rx.url}`,
        'opentelemetry,resource=test.key=test.value', 'opentelemetry,resource=service.name=test_triton', 'opentelemetry,bsp_schedule_delay=20',
      ], { OTEL_BSP_MAX_QUEUE_SIZE: '4096' }),
    });
    grpc = grpcClient(`127.0.0.1:${s.grpc!.port}`);
  });
  afterAll(async () => {
    grpc?.close();
    await s?.stop();
    await rx?.close();
    repo?.cleanup();
  });

  it('shows the mode and its settings in the trace protocol, as Triton does', async () => {
    const g = (await getJson(`${s.url}/v2/trace/setting`)).body;
    expect(g).toEqual({
      trace_level: ['TIMESTAMPS'], trace_rate: '1', trace_count: '-1', trace_mode: 'opentelemetry', url: rx.url,
      resource: 'test.key=test.value,service.name=test_triton', bsp_schedule_delay: '20', bsp_max_queue_size: '4096', bsp_max_export_batch_size: '512',
    });
    expect((await getJson(`${s.url}/v2/models/simple/trace/setting`)).body).toEqual(g);
    const r = await grpc.call('TraceSetting', { model_name: 'simple' });
    expect(r.settings.trace_mode.value).toEqual(['opentelemetry']);
    expect(r.settings.bsp_max_export_batch_size.value).toEqual(['512']);
    expect(r.settings.trace_file).toBeUndefined();
  });

  it('traces a plain model as InferRequest > simple > compute, with Triton\'s events and attributes', async () => {
    expect((await postJson(`${s.url}/v2/models/simple/infer`, body('plain-1'))).status).toBe(200);
    const got = traces(await collect());
    expect(got).toHaveLength(1);
    const t = got[0]!;
    expect(t).toHaveLength(3);
    expect(spanTree(t)).toEqual({ InferRequest: ['simple'], simple: ['compute'] });
    const root = rootOf(t);
    expect(root.parentSpanId).toBe('');
    expect(root.resource).toMatchObject({ 'service.name': 'test_triton', 'test.key': 'test.value' });
    expect(names(root)).toEqual(['HTTP_RECV_START', 'HTTP_RECV_END', 'INFER_RESPONSE_COMPLETE', 'HTTP_SEND_START', 'HTTP_SEND_END']);
    const model = t.find((x) => x.name === 'simple')!;
    expect(names(model)).toEqual(['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
    expect(model.attributes).toMatchObject({
      'triton.model_name': 'simple', 'triton.model_version': 1, 'triton.trace_parent_id': 0, 'triton.request_id': 'plain-1',
    });
    const compute = t.find((x) => x.name === 'compute')!;
    expect(names(compute)).toEqual(['COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END']);
    // Nested in time too: the compute runs inside the model span, which runs inside the request.
    expect(compute.startTimeUnixNano >= model.startTimeUnixNano && compute.endTimeUnixNano <= model.endTimeUnixNano).toBe(true);
    expect(model.startTimeUnixNano >= root.startTimeUnixNano && model.endTimeUnixNano <= root.endTimeUnixNano).toBe(true);
    // Wall-clock times: within a minute of now.
    expect(Math.abs(Number(root.startTimeUnixNano / 1_000_000n) - Date.now())).toBeLessThan(60_000);
  });

  it('nests an ensemble step under the ensemble, with the ensemble\'s trace as its parent id', async () => {
    expect((await postJson(`${s.url}/v2/models/ens/infer`, body())).status).toBe(200);
    const [t] = traces(await collect());
    expect(t).toHaveLength(4);
    expect(spanTree(t!)).toEqual({ InferRequest: ['ens'], ens: ['simple'], simple: ['compute'] });
    const ens = t!.find((x) => x.name === 'ens')!;
    const step = t!.find((x) => x.name === 'simple')!;
    expect(step.attributes['triton.trace_parent_id']).toBe(ens.attributes['triton.trace_id']);
    expect(names(ens)).toEqual(['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
  });

  it('traces a Python model\'s BLS call (trace=request.trace()) as a model and compute span under it', async () => {
    const r = await postJson(`${s.url}/v2/models/bls/infer`, body());
    expect(r.status).toBe(200);
    expect(r.body.outputs[0].data).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
    const [t] = traces(await collect());
    expect(t).toHaveLength(5);
    expect(spanTree(t!)).toEqual({ InferRequest: ['bls'], bls: ['compute', 'simple'], simple: ['compute'] });
    // The model was told its own span's context while it ran (Triton's get_context()).
    const model = t!.find((x) => x.name === 'bls')!;
    const told = s.logs.map((l) => /trace context (\{.*\})/.exec(l)?.[1]).filter(Boolean).at(-1)!;
    expect(JSON.parse(told)).toEqual({ traceparent: `00-${model.traceId}-${model.spanId}-01` });
  });

  it('traces a JavaScript model\'s BLS call to an ensemble down to the ensemble\'s step', async () => {
    const r = await postJson(`${s.url}/v2/models/bls_js/infer`, body());
    expect(r.status).toBe(200);
    expect(r.body.outputs[1].data).toEqual(Array.from({ length: 16 }, (_, i) => i - 1));
    const [t] = traces(await collect());
    expect(t).toHaveLength(6);
    expect(spanTree(t!)).toEqual({ InferRequest: ['bls_js'], bls_js: ['compute', 'ens'], ens: ['simple'], simple: ['compute'] });
  });

  it('makes the identity backend\'s custom activities spans of their own, nested and timed as reported', async () => {
    const r = await postJson(`${s.url}/v2/models/traced_identity/infer`, { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 1], data: [4] }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const [t] = traces(await collect());
    // What L0_trace's opentelemetry_unittest expects of this model: ten spans, nested so.
    expect(t).toHaveLength(10);
    expect(spanTree(t!)).toEqual({
      InferRequest: ['traced_identity'], traced_identity: ['CUSTOM_ACTIVITY', 'CUSTOM_ACTIVITY0', 'compute'],
      CUSTOM_ACTIVITY0: ['CUSTOM_ACTIVITY1'], CUSTOM_ACTIVITY1: ['CUSTOM_ACTIVITY2'], CUSTOM_ACTIVITY2: ['CUSTOM_ACTIVITY3'],
      CUSTOM_ACTIVITY3: ['CUSTOM_ACTIVITY4'], CUSTOM_ACTIVITY4: ['CUSTOM_ACTIVITY5'],
    });
    const span = (n: string) => t!.find((x) => x.name === n)!;
    // The single activity outside any custom span is the model span's; the root keeps only the transport's.
    expect(names(span('traced_identity'))).toEqual(['REQUEST_START', 'QUEUE_START', 'CUSTOM_SINGLE_ACTIVITY', 'REQUEST_END']);
    expect(names(rootOf(t!))).toEqual(['HTTP_RECV_START', 'HTTP_RECV_END', 'INFER_RESPONSE_COMPLETE', 'HTTP_SEND_START', 'HTTP_SEND_END']);
    expect(names(span('CUSTOM_ACTIVITY'))).toEqual(['CUSTOM_ACTIVITY_START', 'CUSTOM_ACTIVITY_END']);
    for (let i = 0; i < 6; i++) {
      const single = i % 3 === 0 ? ['CUSTOM_SINGLE_ACTIVITY'] : [];
      expect(names(span(`CUSTOM_ACTIVITY${i}`))).toEqual([`CUSTOM_ACTIVITY${i}_START`, ...single, `CUSTOM_ACTIVITY${i}_END`]);
    }
    for (const x of t!.filter((y) => y.name.startsWith('CUSTOM_ACTIVITY'))) {
      expect(x.kind).toBe(2); // SERVER, as Triton makes every span
      expect(x.attributes).toEqual({});
      // The span runs from its START to its END activity.
      expect(x.startTimeUnixNano).toBe(x.events[0]!.timeUnixNano);
      expect(x.endTimeUnixNano).toBe(x.events.at(-1)!.timeUnixNano);
    }
    // Timed as reported: CUSTOM_ACTIVITY's 100 ms pause, then the nest, each inside its parent, all inside the model span.
    const ms = (x: ReceivedSpan) => Number(x.endTimeUnixNano - x.startTimeUnixNano) / 1e6;
    expect(ms(span('CUSTOM_ACTIVITY'))).toBeGreaterThanOrEqual(90);
    expect(span('CUSTOM_ACTIVITY').endTimeUnixNano <= span('CUSTOM_ACTIVITY0').startTimeUnixNano).toBe(true);
    expect(ms(span('CUSTOM_ACTIVITY5'))).toBeGreaterThanOrEqual(90);
    for (let i = 1; i < 6; i++) {
      const [inner, outer] = [span(`CUSTOM_ACTIVITY${i}`), span(`CUSTOM_ACTIVITY${i - 1}`)];
      expect(inner.startTimeUnixNano >= outer.startTimeUnixNano && inner.endTimeUnixNano <= outer.endTimeUnixNano).toBe(true);
    }
    const model = span('traced_identity');
    expect(span('CUSTOM_ACTIVITY').startTimeUnixNano >= model.startTimeUnixNano && span('CUSTOM_ACTIVITY0').endTimeUnixNano <= model.endTimeUnixNano).toBe(true);
  });

  it('continues the client\'s trace from traceparent over HTTP, gRPC and a gRPC stream', async () => {
    const [, traceId, parentSpan] = TRACEPARENT.split('-');
    expect((await postJson(`${s.url}/v2/models/simple/infer`, body(), { traceparent: TRACEPARENT, tracestate: 'vendor=1' })).status).toBe(200);
    await grpc.call('ModelInfer', grpcInfer('ens'), { traceparent: TRACEPARENT });
    const streamed = await streamAll(grpc, [grpcInfer('simple')], { traceparent: TRACEPARENT });
    expect(streamed[0]!.error_message).toBe('');
    const got = traces(await collect(3));
    // One client trace: every server span shares its id, each request's root a child of the client's span.
    expect(got).toHaveLength(1);
    const roots = got[0]!.filter((x) => x.name === 'InferRequest');
    expect(roots).toHaveLength(3);
    for (const r of roots) {
      expect(r.traceId).toBe(traceId);
      expect(r.parentSpanId).toBe(parentSpan);
    }
    expect(roots.map((r) => names(r)[0]).sort()).toEqual(['GRPC_WAITREAD_START', 'GRPC_WAITREAD_START', 'HTTP_RECV_START']);
    // gRPC roots carry Triton's read and send activities, unary and streamed alike.
    for (const r of roots.filter((x) => names(x)[0] === 'GRPC_WAITREAD_START')) {
      expect(names(r)).toEqual(expect.arrayContaining(['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', 'GRPC_SEND_START', 'GRPC_SEND_END']));
    }
  });

  it('traces an OpenAI chat stream with the GenAI conventions: model, token usage, first token', async () => {
    const [, traceId, parentSpan] = TRACEPARENT.split('-');
    const res = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', traceparent: TRACEPARENT },
      body: JSON.stringify({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
    const usage = events.at(-1)!.usage;
    expect(usage.completion_tokens).toBe(5);
    const [t] = traces(await collect());
    const root = rootOf(t!);
    expect(root.traceId).toBe(traceId);
    expect(root.parentSpanId).toBe(parentSpan);
    expect(root.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'tiny_gpt', 'gen_ai.request.max_tokens': 5,
      'gen_ai.usage.input_tokens': usage.prompt_tokens, 'gen_ai.usage.output_tokens': 5, 'gen_ai.response.id': events[0].id,
    });
    expect(root.attributes['gen_ai.latency.time_to_first_token']).toBeGreaterThan(0);
    expect(names(root)).toEqual(['HTTP_RECV_START', 'HTTP_RECV_END', 'FIRST_TOKEN', 'HTTP_SEND_END']);
    expect(spanTree(t!).InferRequest).toEqual(['tiny_gpt']);
    const model = t!.find((x) => x.name === 'tiny_gpt')!;
    expect(names(model)).toEqual(['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
  });

  it('traces Triton\'s generate_stream like infer', async () => {
    const res = await fetch(`${s.url}/v2/models/tiny_gpt/generate_stream`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text_input: 'hello', max_tokens: 3 }),
    });
    expect(res.status).toBe(200);
    expect((await res.text()).match(/^data: /gm)!.length).toBeGreaterThanOrEqual(1);
    const [t] = traces(await collect());
    expect(spanTree(t!)).toEqual({ InferRequest: ['tiny_gpt'] });
    expect(names(rootOf(t!))).toEqual(['HTTP_RECV_START', 'HTTP_RECV_END', 'HTTP_SEND_END']);
  });

  it('honours rate and count for requests without a context, and traces every propagated one', async () => {
    expect((await postJson(`${s.url}/v2/trace/setting`, { trace_rate: '3', trace_count: '2' })).status).toBe(200);
    for (let i = 0; i < 9; i++) expect((await postJson(`${s.url}/v2/models/simple/infer`, body())).status).toBe(200);
    // Every third request is sampled (Triton counts from 1); after two the count is spent.
    expect(traces(await collect(2))).toHaveLength(2);
    expect((await getJson(`${s.url}/v2/trace/setting`)).body.trace_count).toBe('0');
    for (let i = 0; i < 4; i++) {
      const parent = `00-${String(i + 1).padStart(32, '0')}-${'1'.repeat(16)}-01`;
      expect((await postJson(`${s.url}/v2/models/simple/infer`, body(), { traceparent: parent })).status).toBe(200);
      expect((await postJson(`${s.url}/v2/models/simple/infer`, body())).status).toBe(200);
    }
    const got = traces(await collect(4));
    expect(got).toHaveLength(4);
    for (const t of got) expect(rootOf(t).parentSpanId).toBe('1'.repeat(16));
    // Propagated requests took nothing from the count.
    expect((await getJson(`${s.url}/v2/trace/setting`)).body.trace_count).toBe('0');
    await postJson(`${s.url}/v2/trace/setting`, { trace_rate: '1', trace_count: '-1' });
  });

  it('marks a failed request\'s spans with an error status', async () => {
    const bad = body();
    bad.inputs[0]!.shape = [1, 15];
    const r = await postJson(`${s.url}/v2/models/simple/infer`, bad);
    expect(r.status).toBe(400);
    const [t] = traces(await collect());
    const model = t!.find((x) => x.name === 'simple')!;
    expect(model.status.code).toBe(2);
    expect(model.status.message).toBe(r.body.error);
    expect(rootOf(t!).status).toEqual({ code: 2, message: r.body.error });
  });
});

describeOtel('OpenTelemetry mode with a collector that is down or slow', () => {
  it('answers every request while the collector is down, and logs the failed export', async () => {
    const rx = await startOtlpReceiver();
    const url = rx.url;
    await rx.close();
    // The exporter retries a refused export until this runs out (read when it is made).
    process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT = '500';
    const s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      trace: parseTraceConfig(['mode=opentelemetry', 'level=TIMESTAMPS', 'rate=1', `opentelemetry,url=${url}`, 'opentelemetry,bsp_schedule_delay=10']),
    });
    delete process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT;
    try {
      for (let i = 0; i < 10; i++) expect((await postJson(`${s.url}/v2/models/simple/infer`, body())).status).toBe(200);
      await s.extensions.traces.flush();
      expect(s.logs.some((l) => /^E.* opentelemetry: connect ECONNREFUSED /.test(l))).toBe(true);
    } finally {
      await s.stop();
    }
  });

  it('holds at most bsp_max_queue_size spans for a collector that never answers, and logs how many it dropped', async () => {
    const rx = await startOtlpReceiver();
    rx.hold();
    // Long enough that the held export is still hanging when the test lets it go (read when the exporter is made).
    process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT = '60000';
    const s = await startTestServer({
      modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'],
      trace: parseTraceConfig([
        'mode=opentelemetry', 'level=TIMESTAMPS', 'rate=1', `opentelemetry,url=${rx.url}`,
        'opentelemetry,bsp_max_queue_size=4', 'opentelemetry,bsp_max_export_batch_size=2', 'opentelemetry,bsp_schedule_delay=10',
      ]),
    });
    delete process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT;
    try {
      // 20 requests, 60 spans: the first batch (2) goes out and hangs, the queue fills at 4, 54 are dropped.
      for (let i = 0; i < 20; i++) expect((await postJson(`${s.url}/v2/models/simple/infer`, body())).status).toBe(200);
      expect(rx.spans).toHaveLength(0);
      // The collector comes back: the hung export ends and the queue drains, 6 spans in all.
      rx.release();
      await expect.poll(() => rx.spans.length, { timeout: 20_000 }).toBe(6);
      // The next span finds room: the processor says how many it dropped meanwhile.
      expect((await postJson(`${s.url}/v2/models/simple/infer`, body())).status).toBe(200);
      await expect.poll(() => s.logs.find((l) => l.includes('because maxQueueSize reached')), { timeout: 10_000 }).toContain('Dropped 54 spans');
    } finally {
      rx.release();
      await s.stop();
      await rx.close();
    }
  });
});
