/**
 * The browser build (`npm run build:browser`): `dist/browser/` holds `tsi.js` (the ESM entry a page
 * imports with `<script type="module">`), `tsi-sw.js` (the Service Worker entry), the demo page, and
 * the chunks and onnxruntime-web wasm they share. It is an app-style multi-entry build rather than
 * Vite's library mode, because library mode inlines `new URL('x.wasm', import.meta.url)` assets as
 * base64 (28 MB of wasm); here ORT's wasm is emitted beside the chunks and found relative to them,
 * so pages need no `wasmPaths`. ORT stays in a chunk of its own (tsi.js imports it dynamically), which
 * is what keeps its pthread workers from starting on the page's entry chunk.
 */

import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export default defineConfig({
  root: here('./runtime-browser'),
  base: './',
  publicDir: false,
  logLevel: 'warn',
  build: {
    outDir: here('./dist/browser'),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 1024,
    rollupOptions: {
      input: {
        tsi: here('./runtime-browser/index.ts'),
        'tsi-sw': here('./runtime-browser/service-worker.ts'),
        demo: here('./runtime-browser/demo.html'),
      },
      preserveEntrySignatures: 'strict',
      output: {
        entryFileNames: '[name].js',
        chunkFileNames: 'chunks/[name]-[hash].js',
        assetFileNames: 'assets/[name]-[hash][extname]',
      },
    },
  },
});
