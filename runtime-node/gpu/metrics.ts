/**
 * Triton's GPU metrics (`nv_gpu_utilization`, `nv_gpu_memory_total_bytes`, `nv_gpu_memory_used_bytes`,
 * `nv_gpu_power_usage`, `nv_gpu_power_limit`, `nv_energy_consumption`, label `gpu_uuid`) for NVIDIA
 * GPUs, polled every `--metrics-interval-ms` as Triton polls DCGM, and registered into the server's
 * MetricsRegistry as families read from the last reading at scrape time (off the page until there is one). Energy is the driver's own counter when it reports one, else power integrated over
 * the polls; either way it counts from the server's start. Absent where there is no NVIDIA GPU.
 */

import type { Logger, MetricsRegistry } from '../../core/index.js';
import { queryNvidiaGpus, type NvidiaGpu } from './nvidia.js';

const FAMILIES: { name: string; help: string; type: 'gauge' | 'counter'; value: (g: NvidiaGpu, energy: number) => number | undefined }[] = [
  { name: 'nv_gpu_utilization', type: 'gauge', help: 'GPU utilization rate [0.0 - 1.0)', value: (g) => g.utilization },
  { name: 'nv_gpu_memory_total_bytes', type: 'gauge', help: 'GPU total memory, in bytes', value: (g) => g.memoryTotalBytes },
  { name: 'nv_gpu_memory_used_bytes', type: 'gauge', help: 'GPU used memory, in bytes', value: (g) => g.memoryUsedBytes },
  { name: 'nv_gpu_power_usage', type: 'gauge', help: 'GPU power usage in watts', value: (g) => g.powerWatts },
  { name: 'nv_gpu_power_limit', type: 'gauge', help: 'GPU power management limit in watts', value: (g) => g.powerLimitWatts },
  { name: 'nv_energy_consumption', type: 'counter', help: 'GPU energy consumption in joules since the Triton Server started', value: (_g, e) => e },
];

export interface GpuMetricsOptions {
  intervalMs: number;
  log: Logger;
  /** The nvidia-smi to run (tests point it at a stand-in). */
  command?: string;
}

export class GpuMetrics {
  private last: NvidiaGpu[] = [];
  /** Joules since start, per GPU uuid, and what the integration needs. */
  private readonly energy = new Map<string, { joules: number; base?: number; lastMs: number; lastWatts?: number }>();
  private timer?: ReturnType<typeof setInterval>;
  private polling = false;

  constructor(private readonly opts: GpuMetricsOptions) {}

  /** Takes the first reading; false (and no polling) when there is no NVIDIA GPU to report on. */
  async start(): Promise<boolean> {
    const ok = await this.poll();
    if (!ok || this.last.length === 0) return false;
    this.timer = setInterval(() => void this.poll(), Math.max(100, this.opts.intervalMs));
    this.timer.unref();
    return true;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  get gpus(): readonly NvidiaGpu[] {
    return this.last;
  }

  private async poll(): Promise<boolean> {
    if (this.polling) return true;
    this.polling = true;
    try {
      const r = await queryNvidiaGpus(this.opts.command);
      if (r.error) {
        this.opts.log.verbose(1, `GPU metrics: ${r.error}`);
        return false;
      }
      const now = Date.now();
      for (const g of r.gpus) this.account(g, now);
      this.last = r.gpus;
      return true;
    } finally {
      this.polling = false;
    }
  }

  private account(g: NvidiaGpu, now: number): void {
    let e = this.energy.get(g.uuid);
    if (!e) {
      e = { joules: 0, base: g.energyJoules, lastMs: now, lastWatts: g.powerWatts };
      this.energy.set(g.uuid, e);
      return;
    }
    if (g.energyJoules !== undefined && e.base !== undefined) {
      e.joules = Math.max(e.joules, g.energyJoules - e.base);
    } else if (g.powerWatts !== undefined) {
      const watts = e.lastWatts === undefined ? g.powerWatts : (g.powerWatts + e.lastWatts) / 2;
      e.joules += (watts * (now - e.lastMs)) / 1000;
    }
    e.lastMs = now;
    e.lastWatts = g.powerWatts;
  }

  /** Registers the GPU families: a GPU's series are there while it reports the value. */
  register(registry: MetricsRegistry): void {
    for (const f of FAMILIES) {
      registry.register({
        name: f.name, help: f.help, type: f.type, hideWhenEmpty: true,
        samples: () => this.last.flatMap((g) => {
          const value = f.value(g, this.energy.get(g.uuid)?.joules ?? 0);
          return value === undefined ? [] : [{ labels: { gpu_uuid: g.uuid }, value }];
        }),
      });
    }
  }
}
