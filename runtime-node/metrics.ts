/**
 * The Node runtime's part of `/metrics`: a listener of its own (`--metrics-port`, default 8002,
 * `GET /metrics`) serving the server's MetricsRegistry (core/metrics.ts), and the host families only
 * Node can read, registered into that same registry: Triton's CPU gauges (Linux /proc where available)
 * and the process_* / nodejs_* families. Those last are prom-client's default metrics (event-loop lag,
 * GC, heap spaces, handles), bridged family by family: prom-client reads them, the registry renders them.
 */

import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { listenOn } from './http/server.js';
import { cpus, freemem, totalmem } from 'node:os';
import { Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { MetricSample, MetricSource, MetricType, MetricsRegistry } from '../core/index.js';

export interface MetricsOptions {
  /** nv_cpu_* gauges (tritonserver's --allow-cpu-metrics). */
  cpuMetrics?: boolean;
  /** prom-client's process_* and nodejs_* metrics. */
  processMetrics?: boolean;
}

/** Registers the host families (CPU gauges, process metrics) into the server's registry. */
export function registerHostMetrics(registry: MetricsRegistry, opts: MetricsOptions = {}): void {
  if (opts.cpuMetrics !== false) cpuGauges(registry);
  if (opts.processMetrics !== false) processMetrics(registry);
}

/** Aggregate CPU busy/total jiffies (os.cpus() times are cumulative since boot). */
function cpuTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const c of cpus()) {
    const t = c.times;
    busy += t.user + t.nice + t.sys + t.irq;
    total += t.user + t.nice + t.sys + t.irq + t.idle;
  }
  return { busy, total };
}

function memoryUsed(): number {
  try {
    // MemAvailable is what Triton uses: total minus memory the kernel could hand out now.
    const info = readFileSync('/proc/meminfo', 'utf8');
    const total = Number(/^MemTotal:\s+(\d+)/m.exec(info)?.[1]) * 1024;
    const avail = Number(/^MemAvailable:\s+(\d+)/m.exec(info)?.[1]) * 1024;
    if (Number.isFinite(total) && Number.isFinite(avail)) return total - avail;
  } catch {
    /* not Linux */
  }
  return totalmem() - freemem();
}

function cpuGauges(registry: MetricsRegistry): void {
  const gauge = (name: string, help: string, value: () => number) =>
    registry.register({ name, help, type: 'gauge', samples: () => [{ labels: {}, value: value() }] });
  let last = cpuTimes();
  gauge('nv_cpu_utilization', 'CPU utilization rate [0.0 - 1.0]', () => {
    const now = cpuTimes();
    const dt = now.total - last.total;
    // Between two scrapes; on the first, or if no time passed, since boot.
    const v = dt > 0 ? (now.busy - last.busy) / dt : (now.total > 0 ? now.busy / now.total : 0);
    if (dt > 0) last = now;
    return v;
  });
  gauge('nv_cpu_memory_total_bytes', 'CPU total memory (RAM), in bytes', () => totalmem());
  gauge('nv_cpu_memory_used_bytes', 'CPU used memory (RAM), in bytes', () => memoryUsed());
}

/** prom-client's default metrics, each family read by prom-client before a scrape and rendered by the registry. */
function processMetrics(registry: MetricsRegistry): void {
  const prom = new Registry();
  collectDefaultMetrics({ register: prom });
  for (const metric of prom.getMetricsAsArray()) {
    // Typed as MetricObject (a numeric enum for `type`, no get()); at run time each is a Metric whose type is the text.
    const m = metric as unknown as { name: string; help: string; type: MetricType; get(): Promise<MetricObjectWithValues<MetricValue<string>>> };
    let read: MetricSample[] = [];
    const source: MetricSource = {
      name: m.name, help: m.help, type: m.type,
      async refresh() {
        read = ((await m.get()).values ?? []).map((v) => ({
          // Some of prom-client's label values are numbers (nodejs_version_info's major, minor, patch).
          name: (v as { metricName?: string }).metricName, labels: Object.fromEntries(Object.entries(v.labels).map(([k, l]) => [k, String(l)])), value: v.value,
        }));
      },
      samples: () => read,
    };
    registry.register(source);
  }
}

export interface MetricsListener {
  port: number;
  address: string;
  close(): Promise<void>;
}

/** Serves `GET /metrics` (Triton's `/metrics/?`); other paths 404, other methods 405. */
export async function listenMetrics(registry: MetricsRegistry, port: number, address: string): Promise<MetricsListener> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (!/^\/metrics\/?$/.test(path)) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"Not Found"}');
      return;
    }
    if (req.method !== 'GET') {
      res.writeHead(405, { 'Content-Type': 'application/json' }).end('{"error":"Method Not Allowed"}');
      return;
    }
    registry.scrape().then(
      (text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text),
      (err) => res.writeHead(500, { 'Content-Type': 'application/json' }).end(JSON.stringify({ error: String(err) })),
    );
  });
  const info = await listenOn(server, port, address);
  return {
    port: info.port,
    address: info.address,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
