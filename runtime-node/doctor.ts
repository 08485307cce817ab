/**
 * `tsi-node doctor`: what this machine offers tsi, gathered in one report (printed as tables, or as
 * JSON with --json): versions, NVIDIA GPUs (nvidia-smi), the onnxruntime-node execution providers and
 * whether their libraries are installed, the WebGPU adapters Dawn finds (with the limits that bound
 * model size), whether the CUDA provider can load (installed by `tsi-node gpu install cuda`, and each
 * CUDA 13 library it needs found), and which provider a KIND_GPU instance would get here and why. A
 * missing piece comes with the line that says what to install.
 */

import { createRequire } from 'node:module';
import { TSI_VERSION } from '../core/index.js';
import { findCudaLibraries, loadable, missingSentence, type CudaLibraryScan } from './gpu/cuda-env.js';
import { CUDA_PINS, installedCuda, type CudaInstallRecord } from './gpu/cuda-install.js';
import { adapterLabel, gpuCount, probeWebGpu, providerStatus, queryNvidiaGpus, type NvidiaGpu, type ProviderStatus, type WebGpuProbe } from './gpu/index.js';

const require = createRequire(import.meta.url);

export interface DoctorReport {
  tsi: string;
  node: string;
  platform: string;
  onnxruntimeNode: string;
  nvidia: { gpus: NvidiaGpu[]; error?: string; driverGpus: number };
  providers: ProviderStatus[];
  webgpu: WebGpuProbe;
  /** The CUDA provider: installed where, its libraries, and whether `serve` can use it here. */
  cuda: { usable: boolean; detail: string; installed?: { dir: string; record: CudaInstallRecord }; libraries: CudaLibraryScan };
  /** The provider a KIND_GPU instance gets on this machine, and why the better ones are skipped. */
  kindGpu: { provider: string; adapter?: string; skipped: string[] };
}

function packageVersion(name: string): string {
  try {
    return (require(`${name}/package.json`) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

/** Whether `serve` can run KIND_GPU models on CUDA here, and if not, what is missing and the command that fixes it. */
export function cudaReport(gpus: number): DoctorReport['cuda'] {
  const installed = installedCuda();
  const libraries = findCudaLibraries();
  const libs = libraries.libraryPath.length > 0 ? ` from ${libraries.libraryPath.join(', ')}` : '';
  let detail: string;
  if (process.platform !== 'linux' || process.arch !== 'x64') detail = `the CUDA provider on npm is for Linux x64 only (this is ${process.platform}-${process.arch})`;
  else if (!installed) detail = `provider not installed: tsi-node gpu install cuda${loadable(libraries) ? '' : `; then ${missingSentence(libraries)}`}`;
  else if (!loadable(libraries)) detail = `provider installed (${installed.dir}) but cannot load: ${missingSentence(libraries)}`;
  else if (gpus === 0) detail = `provider and libraries${libs} present, but no NVIDIA GPU found`;
  else {
    const later = libraries.missing.length > 0 ? `; ${missingSentence(libraries)}` : '';
    return { usable: true, detail: `usable: onnxruntime ${installed.record.ortVersion} core and provider in ${installed.dir}, CUDA libraries${libs || ' in the system loader cache'}, ${gpus} GPU(s)${later}`, installed, libraries };
  }
  return { usable: false, detail, installed, libraries };
}

export async function doctorReport(): Promise<DoctorReport> {
  const [nvidia, webgpu] = await Promise.all([queryNvidiaGpus(), probeWebGpu()]);
  const cuda = cudaReport(gpuCount());
  // This process runs tsi's own onnxruntime core; `serve` runs the CUDA one when it can load (cuda-env.ts).
  const providers = providerStatus().map((p) => (p.name === 'cuda' && !p.available && cuda.usable ? { ...p, available: true, detail: cuda.detail } : p));
  const skipped: string[] = [];
  let chosen: { provider: string; adapter?: string } | undefined;
  for (const name of ['cuda', 'webgpu']) {
    const p = providers.find((x) => x.name === name);
    if (!p?.available) {
      skipped.push(`${name}: ${p?.detail ?? 'not in this onnxruntime-node build'}`);
      continue;
    }
    if (name === 'webgpu' && webgpu.packageInstalled && webgpu.adapters.length === 0) {
      skipped.push(`webgpu: ${webgpu.reason}`);
      continue;
    }
    const gpu = name === 'cuda' ? nvidia.gpus[0] : undefined;
    const a = webgpu.adapters[0];
    const named = a?.vendor === 'nvidia' && nvidia.gpus[0] ? `${nvidia.gpus[0].name}, ` : '';
    chosen = { provider: name, adapter: name === 'webgpu' ? (a ? named + adapterLabel(a) : undefined) : gpu?.name };
    break;
  }
  return {
    tsi: TSI_VERSION,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    onnxruntimeNode: packageVersion('onnxruntime-node'),
    nvidia: { ...nvidia, driverGpus: gpuCount() },
    providers,
    webgpu,
    cuda,
    kindGpu: { ...(chosen ?? { provider: 'cpu' }), skipped },
  };
}

/** Triton-style ASCII table. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = '+' + widths.map((w) => '-'.repeat(w + 2)).join('+') + '+';
  const fmt = (r: string[]) => '| ' + r.map((c, i) => c.padEnd(widths[i]!)).join(' | ') + ' |';
  return [line, fmt(headers), line, ...rows.map(fmt), line].join('\n');
}

const bytes = (n: number | undefined) => (n === undefined ? '-' : n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(0)} MiB`);

export function formatDoctor(r: DoctorReport): string {
  const out = [`tsi ${r.tsi}`, `node ${r.node} on ${r.platform}`, `onnxruntime-node ${r.onnxruntimeNode}`, ''];
  if (r.nvidia.gpus.length > 0) {
    out.push('NVIDIA GPUs:', table(['Index', 'Name', 'UUID', 'Memory', 'Driver'], r.nvidia.gpus.map((g) => [
      String(g.index), g.name, g.uuid, bytes(g.memoryTotalBytes), g.driver,
    ])));
  } else out.push(`NVIDIA GPUs: none (${r.nvidia.error ?? 'nvidia-smi lists none'})`);
  out.push('', 'Execution providers (onnxruntime-node):');
  out.push(table(['Provider', 'Available', 'Detail'], r.providers.map((p) => [p.name, p.available ? 'yes' : 'no', p.detail])));
  out.push('');
  if (r.webgpu.adapters.length > 0) {
    out.push('WebGPU adapters (Dawn):');
    out.push(table(['Vendor', 'Architecture', 'Description', 'Max buffer', 'Max storage binding', 'shader-f16'], r.webgpu.adapters.map((a) => [
      a.vendor || '-', `${a.architecture || '-'}${a.fallback ? ' (fallback)' : ''}`, a.description || a.device || '-',
      bytes(a.maxBufferSize), bytes(a.maxStorageBufferBindingSize), a.shaderF16 ? 'yes' : 'no',
    ])));
  } else out.push(`WebGPU adapters: none known: ${r.webgpu.reason}`);
  out.push(`CUDA (onnxruntime ${CUDA_PINS.ortVersion} provider): ${r.cuda.detail}`);
  out.push('');
  const k = r.kindGpu;
  out.push(k.provider === 'cpu'
    ? 'A KIND_GPU instance here runs on the CPU (it still loads, with a warning):'
    : `A KIND_GPU instance here runs on '${k.provider}'${k.adapter ? ` on ${k.adapter}` : ''}.`);
  for (const s of k.skipped) out.push(`  skipped ${s}`);
  out.push('KIND_CPU instances use the CPU provider. KIND_GPU instances try the providers their config names (gpu_execution_accelerator), else CUDA, then WebGPU; then the CPU.');
  return out.join('\n');
}
