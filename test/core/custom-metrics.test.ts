/**
 * CustomMetrics, the store behind models' own metric families (Triton's pb_utils.MetricFamily): sharing
 * by name and labels, reference counts, what each kind allows, and the Prometheus text it renders.
 */

import { describe, expect, it } from 'vitest';
import { CustomMetrics, TsiError } from '../../core/index.js';

describe('CustomMetrics', () => {
  it('renders counters, gauges and histograms in the exposition format', () => {
    const m = new CustomMetrics();
    const c = m.family('requests_total', 'Requests seen', 'COUNTER').metric({ model: 'a', version: '1' });
    c.increment(2);
    c.increment(3);
    const g = m.family('queue_depth', 'Depth\nof the queue', 'GAUGE').metric({ q: 'x"y' });
    g.set(7);
    g.increment(-2);
    const h = m.family('latency_ms', 'Latency', 'HISTOGRAM').metric({ model: 'a' }, [1, 5, 10]);
    for (const v of [0.5, 3, 3, 12]) h.observe(v);
    expect(c.value()).toBe(5);
    expect(g.value()).toBe(5);
    expect(m.exposition()).toBe([
      '# HELP requests_total Requests seen',
      '# TYPE requests_total counter',
      'requests_total{model="a",version="1"} 5',
      '# HELP queue_depth Depth\\nof the queue',
      '# TYPE queue_depth gauge',
      'queue_depth{q="x\\"y"} 5',
      '# HELP latency_ms Latency',
      '# TYPE latency_ms histogram',
      'latency_ms_bucket{model="a",le="1"} 1',
      'latency_ms_bucket{model="a",le="5"} 3',
      'latency_ms_bucket{model="a",le="10"} 3',
      'latency_ms_bucket{model="a",le="+Inf"} 4',
      'latency_ms_sum{model="a"} 18.5',
      'latency_ms_count{model="a"} 4',
      '',
    ].join('\n'));
  });

  it('shares a family by name and a metric by labels, and removes them with the last release', () => {
    const m = new CustomMetrics();
    const f1 = m.family('shared', 'one', 'COUNTER');
    const f2 = m.family('shared', 'one', 'COUNTER');
    const a = f1.metric({ b: '2', a: '1' });
    const b = f2.metric({ a: '1', b: '2' });
    a.increment(1);
    b.increment(1);
    expect(a.value()).toBe(2);
    a.release();
    expect(m.exposition()).toContain('shared{b="2",a="1"} 2');
    b.release();
    expect(m.exposition()).toBe('');
    f1.release();
    expect(m.size).toBe(1);
    f2.release();
    expect(m.size).toBe(0);
  });

  it('refuses what each kind cannot do, reserved names and conflicting kinds', () => {
    const m = new CustomMetrics();
    const counter = m.family('c', '', 'COUNTER').metric();
    expect(() => counter.increment(-1)).toThrow(/can only increase/);
    expect(() => counter.set(1)).toThrow(/set\(\) is for gauges/);
    expect(() => counter.observe(1)).toThrow(/observe\(\) is for histograms/);
    const hist = m.family('h', '', 'HISTOGRAM');
    expect(() => hist.metric({})).toThrow(/give its buckets/);
    expect(() => hist.metric({}, [5, 1])).toThrow(/increasing/);
    expect(() => hist.metric({}, [1, 2]).value()).toThrow(/value\(\) is for counters and gauges/);
    expect(() => m.family('c', '', 'GAUGE')).toThrow(TsiError);
    expect(() => m.family('nv_inference_count', '', 'COUNTER')).toThrow(/reserved/);
    expect(() => m.family('bad name', '', 'COUNTER')).toThrow(/invalid metric family name/);
    expect(() => m.family('g', '', 'GAUGE').metric({ 'bad-label': 'x' })).toThrow(/invalid label name/);
  });
});
