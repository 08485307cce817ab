/**
 * MetricsRegistry, the one registry every /metrics family lives in: scrape-time sources beside stored
 * families in one rendering, empty families shown or hidden, asynchronous readers refreshed by
 * scrape(), one family per name, and Triton's custom metrics API sharing the registry's families.
 */

import { describe, expect, it } from 'vitest';
import { CustomMetrics, MetricsRegistry, TsiError, type MetricSample } from '../../core/index.js';

describe('MetricsRegistry', () => {
  it('renders scrape-time and stored families together, in registration order', () => {
    const r = new MetricsRegistry();
    let n = 1;
    r.register({ name: 'reads_total', help: 'Reads\\seen', type: 'counter', samples: () => [{ labels: { disk: 'a"b' }, value: n }] });
    const g = r.family('depth', 'Queue depth', 'gauge').metric({ q: 'x' });
    g.set(4);
    r.register({
      name: 'latency_seconds', help: 'Latency', type: 'summary',
      samples: (): MetricSample[] => [
        { labels: { quantile: '0.5' }, value: 0.25 },
        { name: 'latency_seconds_sum', labels: {}, value: 3 },
        { name: 'latency_seconds_count', labels: {}, value: 12 },
      ],
    });
    n = 7;
    expect(r.render()).toBe([
      '# HELP reads_total Reads\\\\seen',
      '# TYPE reads_total counter',
      'reads_total{disk="a\\"b"} 7',
      '# HELP depth Queue depth',
      '# TYPE depth gauge',
      'depth{q="x"} 4',
      '# HELP latency_seconds Latency',
      '# TYPE latency_seconds summary',
      'latency_seconds{quantile="0.5"} 0.25',
      'latency_seconds_sum 3',
      'latency_seconds_count 12',
      '',
    ].join('\n'));
  });

  it('keeps an empty family\'s HELP and TYPE unless it hides when empty, and takes an unregistered one off', () => {
    const r = new MetricsRegistry();
    const off = r.register({ name: 'shown', help: 'h', type: 'counter', samples: () => [] });
    r.register({ name: 'hidden', help: 'h', type: 'gauge', hideWhenEmpty: true, samples: () => [] });
    r.family('stored', 'h', 'counter');
    expect(r.render()).toBe('# HELP shown h\n# TYPE shown counter\n');
    off();
    expect(r.render()).toBe('');
    expect(r.size).toBe(2);
  });

  it('lets asynchronous readers refresh before scrape() renders', async () => {
    const r = new MetricsRegistry();
    let read = 0;
    r.register({
      name: 'slow_gauge', help: 'h', type: 'gauge',
      refresh: async () => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        read = 42;
      },
      samples: () => [{ labels: {}, value: read }],
    });
    expect(r.render()).toContain('slow_gauge 0');
    expect(await r.scrape()).toContain('slow_gauge 42');
  });

  it('holds one family per name', () => {
    const r = new MetricsRegistry();
    r.register({ name: 'taken', help: 'h', type: 'gauge', samples: () => [] });
    expect(() => r.register({ name: 'taken', help: 'h', type: 'gauge', samples: () => [] })).toThrow(/already registered/);
    expect(() => r.family('taken', 'h', 'gauge')).toThrow(TsiError);
    expect(() => r.register({ name: 'bad-name', help: 'h', type: 'gauge', samples: () => [] })).toThrow(/invalid metric family name/);
    r.family('shared', 'h', 'histogram');
    expect(() => r.family('shared', 'h', 'counter')).toThrow(/already exists as a histogram, not a counter/);
  });

  it("shares stored families with Triton's custom metrics API over the same registry", () => {
    const r = new MetricsRegistry();
    const own = r.family('tokens_total', 'Tokens', 'counter').metric({ model: 'm' });
    const custom = new CustomMetrics(r).family('tokens_total', 'Tokens', 'COUNTER').metric({ model: 'm' });
    own.increment(2);
    custom.increment(3);
    expect(own.value()).toBe(5);
    expect(r.render()).toContain('tokens_total{model="m"} 5');
    expect(() => new CustomMetrics(r).family('nv_gpu_utilization', 'x', 'GAUGE')).toThrow(/reserved/);
  });
});
