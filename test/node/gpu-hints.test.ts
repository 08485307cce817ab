/**
 * What `doctor` and a KIND_GPU fallback say when Dawn finds no adapter on Linux: the hint is read off
 * the machine's Vulkan files, so these tests lay such files out in a temporary folder and point the
 * loader's variables at them.
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { vulkanHint } from '../../runtime-node/gpu/index.js';

const saved = { ...process.env };
const dir = mkdtempSync(join(tmpdir(), 'tsi-vk-'));
afterEach(() => {
  for (const k of ['VK_DRIVER_FILES', 'VK_ICD_FILENAMES', 'LD_LIBRARY_PATH', 'DISPLAY', 'WAYLAND_DISPLAY']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

describe.runIf(process.platform === 'linux')('the no-adapter hint on Linux', () => {
  it('finds a Vulkan loader on LD_LIBRARY_PATH (one unpacked outside the system folders)', () => {
    writeFileSync(join(dir, 'libvulkan.so.1'), '');
    process.env.LD_LIBRARY_PATH = dir;
    process.env.VK_DRIVER_FILES = join(dir, 'none.json');
    writeFileSync(join(dir, 'none.json'), '{"ICD":{"library_path":"libvulkan_lvp.so"}}');
    expect(vulkanHint()).not.toMatch(/no Vulkan loader/);
  });

  it('names the EGL manifest fix for a headless NVIDIA driver whose manifest loads libGLX_nvidia', () => {
    const icd = join(dir, 'nvidia_icd.json');
    writeFileSync(icd, '{"file_format_version":"1.0.1","ICD":{"library_path":"libGLX_nvidia.so.0","api_version":"1.4.312"}}');
    writeFileSync(join(dir, 'libvulkan.so.1'), '');
    process.env.LD_LIBRARY_PATH = dir;
    process.env.VK_DRIVER_FILES = icd;
    delete process.env.DISPLAY;
    delete process.env.WAYLAND_DISPLAY;
    expect(vulkanHint()).toContain(`the NVIDIA Vulkan driver manifest ${icd} names libGLX_nvidia.so.0`);
    expect(vulkanHint()).toContain('libEGL_nvidia.so.0');
    // With a display, the GLX library can work: the hint is the general one.
    process.env.DISPLAY = ':0';
    expect(vulkanHint()).not.toContain('libEGL_nvidia');
  });
});

process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
