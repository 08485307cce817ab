/**
 * The WebGPU adapters this machine offers, as Dawn (the WebGPU implementation inside both
 * onnxruntime-node's WebGPU execution provider and the `webgpu` npm package) sees them. The optional
 * `webgpu` package names them (vendor, architecture, description, limits); without it tsi can still
 * serve on WebGPU but cannot say on which adapter. The probe runs in a short-lived child process:
 * Dawn writes warnings to stderr and holds a Vulkan instance, neither of which belongs in the server.
 * When there is no adapter, `vulkanHint` says in words what to install.
 */

import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface WebGpuAdapter {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** A software or otherwise fallback adapter (lavapipe, SwiftShader, WARP). */
  fallback: boolean;
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
  shaderF16: boolean;
}

export interface WebGpuProbe {
  /** Distinct adapters, the one Dawn offers for high performance (what ORT's EP takes) first. */
  adapters: WebGpuAdapter[];
  /** Why the list is empty or unknown, in words; undefined when adapters were found. */
  reason?: string;
  /** False when the optional `webgpu` package is not installed (adapters then unknown). */
  packageInstalled: boolean;
}

const require = createRequire(import.meta.url);

// Run by `node --input-type=module -e`: prints one JSON line with what Dawn reports. Dawn hides
// shader-f16 on NVIDIA's Vulkan driver unless the adapter toggle vulkan_enable_f16_on_nvidia is on
// (a conformance guard); onnxruntime's WebGPU provider turns it on for its own Dawn instance
// (microsoft/onnxruntime#24782), so the probe does too and reports what the provider gets.
const PROBE = `
const { create, globals } = await import(process.argv[1]);
Object.assign(globalThis, globals);
const gpu = create(['enable-dawn-features=vulkan_enable_f16_on_nvidia']);
const seen = new Map();
for (const o of [{ powerPreference: 'high-performance' }, { powerPreference: 'low-power' }, { forceFallbackAdapter: true }]) {
  const a = await gpu.requestAdapter(o).catch(() => null);
  if (!a) continue;
  const i = a.info;
  const key = i.vendor + '|' + i.device + '|' + i.description;
  if (seen.has(key)) continue;
  seen.set(key, {
    vendor: i.vendor || '', architecture: i.architecture || '', device: i.device || '', description: i.description || '',
    fallback: i.isFallbackAdapter === true || a.isFallbackAdapter === true,
    maxBufferSize: a.limits.maxBufferSize, maxStorageBufferBindingSize: a.limits.maxStorageBufferBindingSize,
    shaderF16: a.features.has('shader-f16'),
  });
}
process.stdout.write(JSON.stringify([...seen.values()]) + '\\n');
process.exit(0);
`;

let cached: Promise<WebGpuProbe> | undefined;

/** Probes once per process (the answer does not change while the server runs). */
export function probeWebGpu(): Promise<WebGpuProbe> {
  return (cached ??= runProbe());
}

async function runProbe(): Promise<WebGpuProbe> {
  let entry: string;
  try {
    entry = pathToFileURL(require.resolve('webgpu')).href;
  } catch {
    return {
      adapters: [], packageInstalled: false,
      reason: "the optional 'webgpu' package is not installed, so adapters cannot be listed (npm install webgpu); onnxruntime-node's WebGPU provider does not need it",
    };
  }
  const out = await new Promise<{ stdout: string; stderr: string; error?: Error }>((resolve) => {
    execFile(process.execPath, ['--input-type=module', '-e', PROBE, entry], { timeout: 30_000, env: probeEnv() }, (error, stdout, stderr) => {
      resolve({ stdout: String(stdout), stderr: String(stderr), error: error ?? undefined });
    });
  });
  const line = out.stdout.trim().split('\n').pop() ?? '';
  let adapters: WebGpuAdapter[] | undefined;
  try {
    adapters = JSON.parse(line) as WebGpuAdapter[];
  } catch {
    adapters = undefined;
  }
  if (!adapters) {
    const why = out.error?.message.split('\n')[0] ?? 'no answer';
    return { adapters: [], packageInstalled: true, reason: `the WebGPU probe failed (${why}); ${vulkanHint()}` };
  }
  // Prefer hardware: ORT's EP asks for a high-performance adapter, which Dawn gives to a real GPU first.
  adapters.sort((a, b) => Number(a.fallback) - Number(b.fallback));
  return { adapters, packageInstalled: true, reason: adapters.length === 0 ? `no WebGPU adapter: ${vulkanHint()}` : undefined };
}

function probeEnv(): NodeJS.ProcessEnv {
  // Mesa prints an error line on every start without a runtime dir; any writable one will do.
  return process.env.XDG_RUNTIME_DIR ? process.env : { ...process.env, XDG_RUNTIME_DIR: '/tmp' };
}

/** One line: the adapter as it should appear in logs and tables. */
export function adapterLabel(a: WebGpuAdapter): string {
  const what = [a.vendor, a.architecture].filter(Boolean);
  if (a.fallback && a.architecture !== 'software') what.push('fallback');
  return `${a.description || a.device || 'unnamed adapter'}${what.length > 0 ? ` (${what.join(', ')})` : ''}`;
}

const ICD_DIRS = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/usr/local/etc/vulkan/icd.d'];
const LOADER_PATHS = [
  '/usr/lib/x86_64-linux-gnu/libvulkan.so.1', '/usr/lib/aarch64-linux-gnu/libvulkan.so.1', '/usr/lib64/libvulkan.so.1',
  '/usr/lib/libvulkan.so.1', '/lib/x86_64-linux-gnu/libvulkan.so.1', '/usr/local/lib/libvulkan.so.1',
];

const icdsIn = (dir: string) => {
  try {
    return readdirSync(dir).filter((f) => f.endsWith('.json')).map((f) => join(dir, f));
  } catch {
    return [];
  }
};

/** The first NVIDIA ICD manifest among `files` that loads the GLX library (container toolkits mount that one). */
function nvidiaGlxIcd(files: string[]): string | undefined {
  for (const f of [...files, ...icdsIn('/usr/local/nvidia/share/vulkan/icd.d')]) {
    try {
      if (readFileSync(f, 'utf8').includes('libGLX_nvidia')) return f;
    } catch {
      // Unreadable: not the one.
    }
  }
  return undefined;
}

/**
 * What to install when Dawn found no adapter, in words. On Linux Dawn needs the Vulkan loader and
 * an installable client driver (ICD); macOS (Metal) and Windows (D3D12) have what it needs built in.
 */
export function vulkanHint(): string {
  if (process.platform === 'darwin') return 'Dawn uses Metal on macOS; this Mac offers no Metal device to it';
  if (process.platform === 'win32') return 'Dawn uses Direct3D 12 on Windows: install or update the GPU driver';
  if (process.platform !== 'linux') return `WebGPU through Dawn is not known to work on ${process.platform}`;
  const forced = process.env.VK_DRIVER_FILES ?? process.env.VK_ICD_FILENAMES;
  if (forced !== undefined) {
    const missing = forced.split(':').filter((f) => f && !existsSync(f));
    if (missing.length > 0) return `VK_DRIVER_FILES/VK_ICD_FILENAMES names Vulkan driver file(s) that do not exist (${missing.join(', ')}); unset it or point it at a driver's ICD json`;
  }
  const ldDirs = (process.env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  if (![...LOADER_PATHS, ...ldDirs.map((d) => join(d, 'libvulkan.so.1'))].some((p) => existsSync(p))) {
    return 'no Vulkan loader (libvulkan.so.1): install it and a Vulkan driver (Debian/Ubuntu: apt-get install libvulkan1 mesa-vulkan-drivers; NVIDIA: the driver package that ships nvidia_icd.json)';
  }
  const icdFiles = ICD_DIRS.flatMap(icdsIn);
  const icds = icdFiles.map((f) => basename(f));
  if (icds.length === 0 && forced === undefined) {
    return 'the Vulkan loader is installed but no Vulkan driver (ICD) is: install the GPU\'s Vulkan driver (AMD/Intel: mesa-vulkan-drivers; NVIDIA: the driver\'s Vulkan ICD), or Mesa >= 24 for the lavapipe software device (Debian bookworm: from bookworm-backports)';
  }
  const glx = nvidiaGlxIcd([...(forced ?? '').split(':').filter(Boolean), ...icdFiles]);
  if (glx && !process.env.DISPLAY && !process.env.WAYLAND_DISPLAY) {
    return `the NVIDIA Vulkan driver manifest ${glx} names libGLX_nvidia.so.0, whose vkCreateInstance fails without an X server: point VK_DRIVER_FILES at a copy that names libEGL_nvidia.so.0 (sed 's/libGLX_nvidia/libEGL_nvidia/' ${glx} > /etc/nvidia_egl_icd.json; docs/gpu.md)`;
  }
  return `Vulkan driver(s) are installed (${icds.join(', ') || forced}) but none gives Dawn an adapter: it needs Vulkan 1.1 features that Mesa older than 24 lacks (Debian bookworm's lavapipe is 22.3; bookworm-backports has 25), or a GPU driver newer than the one installed`;
}
