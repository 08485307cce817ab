/**
 * NVIDIA GPUs as the driver reports them, read through `nvidia-smi`'s query mode (NVML underneath,
 * the same source Triton's DCGM metrics read), so tsi needs no native binding and works wherever the
 * driver is installed. Used by `tsi-node doctor` and by the GPU metrics. Values the driver does not
 * report for a GPU ("[N/A]", "[Not Supported]") are left undefined.
 */

import { execFile } from 'node:child_process';

export interface NvidiaGpu {
  index: number;
  uuid: string;
  name: string;
  driver: string;
  memoryTotalBytes?: number;
  memoryUsedBytes?: number;
  /** 0.0 - 1.0 */
  utilization?: number;
  powerWatts?: number;
  powerLimitWatts?: number;
  /** Energy the GPU used since the driver loaded, in joules, when the driver reports it. */
  energyJoules?: number;
}

export interface NvidiaQuery {
  gpus: NvidiaGpu[];
  /** Why nothing could be read (no nvidia-smi, no driver), in words. */
  error?: string;
}

const BASE = ['index', 'uuid', 'name', 'driver_version', 'memory.total', 'memory.used', 'utilization.gpu', 'power.draw', 'power.limit'];
const ENERGY = 'total_energy_consumption';
const MIB = 1024 * 1024;

/** Whether this nvidia-smi knows the energy field (older ones refuse the whole query if asked). */
const energySupport = new Map<string, boolean>();

function run(cmd: string, args: string[]): Promise<{ stdout: string; stderr: string; error?: { code?: string | number | null; message: string } }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 10_000 }, (error, stdout, stderr) => resolve({ stdout: String(stdout), stderr: String(stderr), error: error ?? undefined }));
  });
}

const number = (s: string | undefined): number | undefined => {
  if (s === undefined) return undefined;
  const v = Number(s.trim());
  return s.trim() !== '' && Number.isFinite(v) ? v : undefined;
};

/** Every GPU nvidia-smi lists, with its current readings. */
export async function queryNvidiaGpus(cmd = 'nvidia-smi'): Promise<NvidiaQuery> {
  let withEnergy = energySupport.get(cmd) ?? true;
  for (;;) {
    const fields = withEnergy ? [...BASE, ENERGY] : BASE;
    const r = await run(cmd, [`--query-gpu=${fields.join(',')}`, '--format=csv,noheader,nounits']);
    if (r.error) {
      if (r.error.code === 'ENOENT') return { gpus: [], error: `${cmd} not found (no NVIDIA driver installed)` };
      if (withEnergy && /not a valid field|Invalid combination/i.test(r.stdout + r.stderr)) {
        withEnergy = false;
        energySupport.set(cmd, false);
        continue;
      }
      const msg = (r.stdout + r.stderr).trim().split('\n')[0] || r.error.message;
      return { gpus: [], error: `${cmd} failed: ${msg}` };
    }
    energySupport.set(cmd, withEnergy);
    const gpus: NvidiaGpu[] = [];
    for (const line of r.stdout.split('\n')) {
      if (!line.trim()) continue;
      const c = line.split(',').map((s) => s.trim());
      if (c.length < BASE.length) continue;
      const util = number(c[6]);
      const energyMj = withEnergy ? number(c[9]) : undefined;
      gpus.push({
        index: number(c[0]) ?? gpus.length,
        uuid: c[1]!,
        name: c[2]!,
        driver: c[3]!,
        memoryTotalBytes: mib(c[4]),
        memoryUsedBytes: mib(c[5]),
        utilization: util === undefined ? undefined : util / 100,
        powerWatts: number(c[7]),
        powerLimitWatts: number(c[8]),
        // nvidia-smi reports the counter in millijoules.
        energyJoules: energyMj === undefined ? undefined : energyMj / 1000,
      });
    }
    return { gpus };
  }
}

function mib(s: string | undefined): number | undefined {
  const v = number(s);
  return v === undefined ? undefined : v * MIB;
}
