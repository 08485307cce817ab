/**
 * Which Chromium the browser tests drive and with which flags, shared by the vitest browser project
 * and the playwright-core tests. `--enable-unsafe-webgpu` is the one flag that gives headless Chromium
 * a WebGPU adapter here (SwiftShader; see the reference note on the browser probe).
 */

export const CHROMIUM = process.env.TSI_CHROMIUM ?? '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--no-sandbox', '--no-first-run', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--disable-quic', '--enable-unsafe-webgpu',
];
