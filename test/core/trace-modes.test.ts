/**
 * Core's side of the two trace modes, without a transport: `--trace-config` parsing (mode, the
 * `opentelemetry,` settings and their OTEL_BSP_* defaults, Triton's refusals), the settings JSON each
 * mode shows, sampling in OpenTelemetry mode (a client context is traced whatever rate and count say,
 * and takes nothing from count), and the trace tree a child (an ensemble step, a BLS call) hangs on
 * its parent, which is handed over only when every part of it is done.
 */

import { describe, expect, it } from 'vitest';
import { TraceManager, parseTraceConfig, traceContextOf, traceSettingsJson, type Trace, type TraceExporter } from '../../core/index.js';
import { FakeClock } from '../helpers/fake-backend.js';

const CONTEXT = { traceparent: '00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01' };

function otelManager(specs: string[]) {
  const exported: Trace[] = [];
  const exporter: TraceExporter = { export: (t) => void exported.push(t), flush: async () => {} };
  const clock = new FakeClock();
  const m = new TraceManager(parseTraceConfig(['mode=opentelemetry', 'level=TIMESTAMPS', ...specs]), clock, undefined, undefined, exporter);
  return { m, exported, clock };
}

describe('--trace-config', () => {
  it('takes the mode and the opentelemetry settings, with the OTEL_BSP_* variables as defaults', () => {
    const s = parseTraceConfig(['mode=opentelemetry', 'opentelemetry,url=localhost:4318/v1/traces', 'opentelemetry,resource=a=b=c', 'opentelemetry,bsp_schedule_delay=20'], {
      OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_SCHEDULE_DELAY: '7',
    });
    expect(s.mode).toBe('opentelemetry');
    expect(s.modeSettings).toEqual([
      ['url', 'localhost:4318/v1/traces'], ['resource', 'a=b=c'], ['bsp_schedule_delay', '20'],
      ['bsp_max_queue_size', '100'], ['bsp_max_export_batch_size', '512'],
    ]);
  });

  it('refuses what Triton refuses, naming the setting', () => {
    const bad = (specs: string[], env = {}) => () => parseTraceConfig(specs, env);
    expect(bad(['mode=jaeger'])).toThrow("invalid mode 'jaeger', expected triton or opentelemetry");
    expect(bad(['mode=opentelemetry', 'opentelemetry,bsp_max_queue_size=lots'])).toThrow("Bad option: \"--trace-config opentelemetry,bsp_max_queue_size\". Unable to parse 'bsp_max_queue_size', got: lots");
    expect(bad(['mode=opentelemetry', 'opentelemetry,endpoint=x'])).toThrow("unknown opentelemetry setting 'endpoint'");
    expect(bad(['mode=opentelemetry', 'opentelemetry,resource=novalue'])).toThrow('opentelemetry,resource expects <key>=<value>');
    expect(bad(['mode=opentelemetry'], { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '-1' })).toThrow('Bad option: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE". OTEL_BSP_MAX_EXPORT_BATCH_SIZE: expected an unsigned integer, got \'-1\'');
    expect(bad(['mode=opentelemetry', 'level=TENSORS'])).toThrow('level TENSORS is not supported in opentelemetry mode');
    expect(bad(['opentelemetry,url=http://x'])).toThrow('needs --trace-config mode=opentelemetry');
    expect(bad(['zipkin,url=http://x'])).toThrow("unknown trace mode 'zipkin'");
  });
});

describe('the settings each mode shows', () => {
  it('Triton mode: file and log frequency; OpenTelemetry mode: its own settings instead', () => {
    const clock = new FakeClock();
    expect(traceSettingsJson(new TraceManager(parseTraceConfig(['triton,file=/tmp/t.json']), clock))).toEqual({
      trace_level: ['OFF'], trace_rate: '1000', trace_count: '-1', trace_mode: 'triton', log_frequency: '0', trace_file: '/tmp/t.json',
    });
    const { m } = otelManager(['opentelemetry,resource=a=1', 'opentelemetry,resource=b=2']);
    expect(traceSettingsJson(m)).toEqual({
      trace_level: ['TIMESTAMPS'], trace_rate: '1000', trace_count: '-1', trace_mode: 'opentelemetry', resource: 'a=1,b=2',
      bsp_max_queue_size: '2048', bsp_schedule_delay: '5000', bsp_max_export_batch_size: '512',
    });
  });
});

describe('sampling in OpenTelemetry mode', () => {
  it('traces every request with a client context, whatever rate and count say, and takes nothing from count', () => {
    const { m } = otelManager(['rate=2', 'count=1']);
    expect(m.sample('simple')).toBeUndefined(); // Triton samples the 2nd of every 2 (counting from 1)
    expect(m.sample('simple')).toBeDefined(); // count 1 → 0
    expect([m.sample('simple'), m.sample('simple'), m.sample('simple')].every((t) => t === undefined)).toBe(true);
    const t = m.sample('simple', undefined, CONTEXT)!;
    expect(t.context).toEqual(CONTEXT);
    expect(m.setting().count).toBe(0);
    m.update(undefined, { rate: 0 });
    expect(m.sample('simple')).toBeUndefined();
    expect(m.sample('simple', undefined, CONTEXT)).toBeDefined();
  });

  it('reads the context from headers, ignoring a malformed traceparent', () => {
    const h = (o: Record<string, string>) => (k: string) => o[k];
    expect(traceContextOf(h({ traceparent: CONTEXT.traceparent, tracestate: 'v=1' }))).toEqual({ ...CONTEXT, tracestate: 'v=1' });
    expect(traceContextOf(h({ traceparent: '00-zz-1-01' }))).toBeUndefined();
    expect(traceContextOf(h({ traceparent: `00-${'0'.repeat(32)}-b7ad6b7169242424-01` }))).toBeUndefined();
    expect(traceContextOf(h({}))).toBeUndefined();
  });
});

describe('trace trees', () => {
  it('hands a trace over once the transport, every execution and every child are done', () => {
    const { m, exported } = otelManager(['rate=1']);
    const top = m.sample('ens', { name: 'HTTP_RECV_START', ns: 1 })!;
    const step = top.spawn('simple');
    step.computeStart();
    top.finish();
    expect(exported).toHaveLength(0);
    step.requestEnd();
    expect(exported).toHaveLength(0);
    step.computeEnd();
    expect(exported).toEqual([top]);
    expect(top.children).toEqual([step]);
    expect(step.parentId).toBe(top.id);
    expect(step.stamps.map((s) => s.name)).toEqual(['REQUEST_END']);
  });

  it('writes children as Triton does in its trace file: their own records, with parent_id', () => {
    const { m } = otelManager([]);
    const top = m.sample('ens', undefined, CONTEXT)!;
    top.spawn('simple').requestEnd('boom');
    const [head, , childHead] = top.records() as Record<string, unknown>[];
    expect(head).toMatchObject({ id: top.id, model_name: 'ens' });
    expect(childHead).toMatchObject({ model_name: 'simple', parent_id: top.id });
    expect(top.children[0]!.error).toBe('boom');
  });
});
