/**
 * The browser benchmark (issue 6): in-page tsi against raw onnxruntime-web `session.run` on the same
 * model, in one headless Chromium page, both on wasm with the same ORT module, session options and
 * thread count — so the ratios isolate what tsi adds (validation, queueing, batching, splitting).
 *   1. batch 1, one call at a time       tsi `server.infer` vs raw `run`       target ≥ 0.95
 *   2. batch 32, one call at a time      same, on [32,1024] inputs             target ≥ 0.95
 *   3. 32 concurrent batch-1 calls       tsi batches them (dynamic batching)
 *                                        vs raw running them one by one        target ≥ 2×
 *      and its ceiling: raw batch 32 vs the same 32 raw calls one by one (no server can beat it)
 *   4. 32 concurrent batch-1 calls on the small image_classifier (per-call cost mostly fixed
 *      overhead; served with max_batch_size 32 and dynamic batching), batched by tsi, vs raw one by one
 *                                                                          target ≥ 2×
 * Model: `mlp_batch` (4 × Gemm 1024×1024 + Relu), where batching pays on wasm: a batch-1 run streams
 * all 16 MB of weights for one row, a batch-32 run reuses them for 32. tsi serves it twice from
 * memory: as shipped (dynamic_batching with max_queue_delay 200 µs) and with a delay of 0, the
 * setting for one caller at a time (a lone request then never waits for company).
 * Within a round the contenders alternate in short blocks (rotating order), so load drifts on a shared
 * host hit them alike. Printed: median throughputs over rounds, and the median of the per-round ratios.
 *
 * Run:  npm run bench:browser   (builds nothing: run `npm run build` once first)
 * Flags: --rounds <n> (7)  --calls <n> batch-1 calls per round (100)  --threads <n> (1; >1 serves
 *        the page cross-origin isolated)  --json <file>
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { chromiumMissing, launchChromium, startStaticSite, within } from '../test/browser/static-server.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '7' },
    calls: { type: 'string', default: '100' },
    threads: { type: 'string', default: '1' },
    json: { type: 'string' },
  },
});
const rounds = Number(args.rounds);
const calls = Number(args.calls);
const threads = Number(args.threads);

const PAGE = `<!doctype html><meta charset="utf-8"><title>tsi bench</title>
<script type="module">
  import { createServer, loadOrt } from './tsi/tsi.js';
  const base = new URL('./models/mlp_batch/', location.href);
  const [config, model] = await Promise.all([
    fetch(new URL('config.pbtxt', base)).then((r) => r.text()),
    fetch(new URL('1/model.onnx', base)).then((r) => r.arrayBuffer()).then((b) => new Uint8Array(b)),
  ]);
  const small = new URL('./models/image_classifier/', location.href);
  const [smallConfig, smallModel] = await Promise.all([
    fetch(new URL('config.pbtxt', small)).then((r) => r.text()),
    fetch(new URL('1/model.onnx', small)).then((r) => r.arrayBuffer()).then((b) => new Uint8Array(b)),
  ]);
  const nodelay = config.replace('name: "mlp_batch"', 'name: "mlp_nodelay"').replace(/max_queue_delay_microseconds:\\s*\\d+/, 'max_queue_delay_microseconds: 0');
  const server = await createServer({
    repository: {
      'mlp_batch/config.pbtxt': config, 'mlp_batch/1/model.onnx': model, 'mlp_nodelay/config.pbtxt': nodelay, 'mlp_nodelay/1/model.onnx': model,
      'image_classifier/config.pbtxt': smallConfig.replace(/label_filename:.*\\n/, ''), 'image_classifier/1/model.onnx': smallModel,
      // The same small model with dynamic batching, for concurrent calls on a model whose cost per call
      // is mostly fixed overhead (the common case batching pays for; mlp_batch is compute-bound).
      'image_batching/config.pbtxt': smallConfig.replace(/label_filename:.*\\n/, '').replace('name: "image_classifier"', 'name: "image_batching"')
        .replace(/max_batch_size:\\s*\\d+/, 'max_batch_size: 32') + '\\ndynamic_batching { max_queue_delay_microseconds: 0 }\\n',
      'image_batching/1/model.onnx': smallModel,
    },
    numThreads: ${threads}, device: 'wasm',
  });
  const ort = await loadOrt();
  const session = await ort.InferenceSession.create(model.slice(), { executionProviders: ['wasm'], graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  const smallSession = await ort.InferenceSession.create(smallModel.slice(), { executionProviders: ['wasm'], graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  const image = Float32Array.from({ length: 768 }, (_, i) => Math.cos(i));
  const images = Array.from({ length: 32 }, (_, k) => Float32Array.from({ length: 768 }, (_, i) => Math.cos(i + k)));
  const images32 = new Float32Array(32 * 768);
  images.forEach((x, k) => images32.set(x, k * 768));
  const rawImage = (x, b) => smallSession.run({ image: new ort.Tensor('float32', x, [b, 3, 16, 16]) });
  const rows = (n, seed) => Float32Array.from({ length: n * 1024 }, (_, i) => Math.sin(i * 0.37 + seed));
  const one = rows(1, 1);
  const big = rows(32, 2);
  const singles = Array.from({ length: 32 }, (_, i) => rows(1, 10 + i));
  const raw = (x, b) => session.run({ INPUT: new ort.Tensor('float32', x, [b, 1024]) });
  const tsi = (model, x) => server.infer({ model, inputs: { INPUT: x } });
  const time = async (f) => { const t = performance.now(); await f(); return performance.now() - t; };
  const stats = (m) => server.stats(m).model_stats[0];
  // Agree first: tsi and raw must give the same numbers.
  const a = (await raw(big, 32)).OUTPUT.data;
  const b = (await tsi('mlp_nodelay', big)).OUTPUT;
  let maxDiff = 0;
  for (let i = 0; i < a.length; i++) maxDiff = Math.max(maxDiff, Math.abs(a[i] - b[i]));
  // The machine's load drifts (CI hosts are shared), so the contenders alternate in short blocks, in
  // a rotating order, and each one's time is summed over its own calls only. Blocks, not single
  // calls: each contender owns a session with 16 MB of weights, and alternating call by call would
  // measure cache misses instead of tsi.
  const interleave = async (n, block, fns) => {
    const keys = Object.keys(fns);
    const sums = Object.fromEntries(keys.map((k) => [k, 0]));
    for (let i = 0; i < n; i += block) {
      for (let j = 0; j < keys.length; j++) {
        const k = keys[(i / block + j) % keys.length];
        sums[k] += await time(async () => { for (let c = 0; c < Math.min(block, n - i); c++) await fns[k](); });
      }
    }
    return sums;
  };
  window.bench = {
    maxDiff, threads: server.environment.numThreads, isolated: crossOriginIsolated,
    async round(calls) {
      const n32 = Math.max(3, Math.round(calls / 16));
      const executions = { mlp_batch: 0, mlp_nodelay: 0, image_batching: 0 };
      const concurrent = (m) => async () => {
        const before = stats(m).execution_count;
        await Promise.all(singles.map((x) => tsi(m, x)));
        executions[m] += stats(m).execution_count - before;
      };
      const r = {
        ...(await interleave(calls, 8, {
          rawB1: () => raw(one, 1), tsiB1: () => tsi('mlp_nodelay', one), tsiB1Shipped: () => tsi('mlp_batch', one),
        })),
        ...(await interleave(calls, 8, {
          rawSmall: () => smallSession.run({ image: new ort.Tensor('float32', image, [1, 3, 16, 16]) }),
          tsiSmall: () => server.infer({ model: 'image_classifier', inputs: { image } }),
        })),
        ...(await interleave(n32, 1, { rawB32: () => raw(big, 32), tsiB32: () => tsi('mlp_nodelay', big) })),
        ...(await interleave(n32, 1, {
          rawUnbatched32: async () => { for (const x of singles) await raw(x, 1); },
          tsiConcurrent32_mlp_batch: concurrent('mlp_batch'),
          tsiConcurrent32_mlp_nodelay: concurrent('mlp_nodelay'),
        })),
        ...(await interleave(n32 * 4, 1, {
          rawSmallUnbatched32: async () => { for (const x of images) await rawImage(x, 1); },
          rawSmallB32: () => rawImage(images32, 32),
          tsiSmallConcurrent32: async () => {
            const before = stats('image_batching').execution_count;
            await Promise.all(images.map((x) => server.infer({ model: 'image_batching', inputs: { image: x } })));
            executions.image_batching += stats('image_batching').execution_count - before;
          },
        })),
      };
      return {
        ...r, n32, executions_mlp_batch: executions.mlp_batch / n32, executions_mlp_nodelay: executions.mlp_nodelay / n32,
        executions_image_batching: executions.image_batching / (n32 * 4),
      };
    },
  };
</script>`;

const missing = chromiumMissing();
if (missing) {
  console.error(`bench:browser cannot run: ${missing}`);
  process.exit(1);
}

const site = await startStaticSite({ '/bench.html': { body: PAGE, isolated: threads > 1 } });
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
  await page.goto(`${site.url}/bench.html`);
  await within(120_000, page.waitForFunction(() => (window as any).bench, null, { timeout: 120_000 }), 'bench page start');
  const info = await page.evaluate(() => {
    const b = (window as any).bench;
    return { maxDiff: b.maxDiff as number, threads: b.threads as number, isolated: b.isolated as boolean };
  });
  console.log(`chromium ${browser.version()}, wasm threads ${info.threads} (isolated: ${info.isolated}); tsi vs raw max |diff| ${info.maxDiff.toExponential(1)}`);
  if (info.maxDiff > 1e-4) throw new Error('tsi and raw onnxruntime-web disagree');
  await within(300_000, page.evaluate((c) => (window as any).bench.round(c), Math.max(5, Math.round(calls / 5))), 'warm-up round');
  const results: Record<string, number>[] = [];
  for (let r = 0; r < rounds; r++) {
    results.push(await within(300_000, page.evaluate((c) => (window as any).bench.round(c), calls), `round ${r + 1}`));
    process.stderr.write('.');
  }
  process.stderr.write('\n');
  const med = (k: string) => {
    const xs = results.map((x) => x[k]!).sort((a, b) => a - b);
    return xs[Math.floor(xs.length / 2)]!;
  };
  const n32 = results[0]!.n32!;
  /** Median over rounds of raw time / tsi time (tsi's throughput relative to raw's). */
  const ratio = (rawKey: string, tsiKey: string) => {
    const xs = results.map((x) => x[rawKey]! / x[tsiKey]!).sort((a, b) => a - b);
    return xs[Math.floor(xs.length / 2)]!;
  };
  const rows: [string, number, number, number, string][] = [
    // [what, raw calls/s, tsi calls/s, ratio, target]
    ['batch 1, sequential (delay 0)', calls / med('rawB1') * 1e3, calls / med('tsiB1') * 1e3, ratio('rawB1', 'tsiB1'), '>= 0.95'],
    ['batch 1, sequential (shipped config, delay 200 us)', calls / med('rawB1') * 1e3, calls / med('tsiB1Shipped') * 1e3, ratio('rawB1', 'tsiB1Shipped'), '(info)'],
    ['batch 1, sequential, image_classifier (small: per-call overhead)', calls / med('rawSmall') * 1e3, calls / med('tsiSmall') * 1e3, ratio('rawSmall', 'tsiSmall'), '(info)'],
    ['batch 32, sequential (rows/s)', n32 * 32 / med('rawB32') * 1e3, n32 * 32 / med('tsiB32') * 1e3, ratio('rawB32', 'tsiB32'), '>= 0.95'],
    ['32 concurrent b1: tsi batched (shipped) vs raw unbatched', n32 * 32 / med('rawUnbatched32') * 1e3, n32 * 32 / med('tsiConcurrent32_mlp_batch') * 1e3,
      ratio('rawUnbatched32', 'tsiConcurrent32_mlp_batch'), '>= 2'],
    ['32 concurrent b1: tsi batched (delay 0) vs raw unbatched', n32 * 32 / med('rawUnbatched32') * 1e3, n32 * 32 / med('tsiConcurrent32_mlp_nodelay') * 1e3,
      ratio('rawUnbatched32', 'tsiConcurrent32_mlp_nodelay'), '>= 2'],
    // The most batching can give on this CPU: how much faster 32 rows go as one raw batch than as 32
    // raw calls. When the model's 16 MB of weights stay in cache, batch-1 calls are cheap and this
    // ceiling drops below 2 (the target is then out of reach for any server).
    ['ceiling: raw batch 32 vs raw unbatched', n32 * 32 / med('rawUnbatched32') * 1e3, n32 * 32 / med('rawB32') * 1e3,
      ratio('rawUnbatched32', 'rawB32'), '(info)'],
    ['32 concurrent b1, image_classifier: tsi batched vs raw unbatched', n32 * 128 / med('rawSmallUnbatched32') * 1e3,
      n32 * 128 / med('tsiSmallConcurrent32') * 1e3, ratio('rawSmallUnbatched32', 'tsiSmallConcurrent32'), '>= 2'],
    ['ceiling (image_classifier): raw batch 32 vs raw unbatched', n32 * 128 / med('rawSmallUnbatched32') * 1e3, n32 * 128 / med('rawSmallB32') * 1e3,
      ratio('rawSmallUnbatched32', 'rawSmallB32'), '(info)'],
  ];
  const w = Math.max(...rows.map((r) => r[0].length));
  console.log(`${'mlp_batch on wasm'.padEnd(w)}  ${'raw/s'.padStart(9)}  ${'tsi/s'.padStart(9)}  ${'tsi/raw'.padStart(7)}  target`);
  for (const [what, raw, tsi, ratio, target] of rows) {
    console.log(`${what.padEnd(w)}  ${raw.toFixed(1).padStart(9)}  ${tsi.toFixed(1).padStart(9)}  ${ratio.toFixed(2).padStart(7)}  ${target}`);
  }
  console.log(`executions for 32 concurrent calls (median): shipped ${med('executions_mlp_batch')}, delay 0 ${med('executions_mlp_nodelay')}; for 32 on image_classifier ${med('executions_image_batching')}; ${rounds} rounds of ${calls} batch-1 calls`);
  if (args.json) writeFileSync(args.json, JSON.stringify({ info, rounds: results, rows }, null, 2));
} finally {
  await browser.close();
  await site.close();
}
