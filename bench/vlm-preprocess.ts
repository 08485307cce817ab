/**
 * Image preprocessing for a SmolVLM folder, from the image's bytes to pixel_values: tsi's
 * `Idefics3Processor.prepare` (PNG decode, sharp's lanczos3 resize computed in JavaScript
 * (core/vision/vips-resize.ts), rescale / normalise, the bilinear split into frames, SHA-256 of the
 * bytes) against transformers.js's `AutoProcessor` on the same files (sharp's native decode and
 * resize, then its JavaScript steps), with SmolVLM-256M's preprocessor config (`size.longest_edge`
 * 2048, frames of 512, splitting on). Images: a 640×480 PNG (enlarged to 2048×1536, 13 frames) and a
 * 4032×3024 PNG (a phone photo's size: reduced to 2048×1536). Also the resize alone against sharp's.
 * Each side runs once untimed, then they alternate over `--rounds` rounds so that load from
 * elsewhere falls on both alike; the table gives the median ms per image and tsi / transformers.js.
 * Both run in the bench's thread (the server runs tsi's in its image pool, off the request thread).
 *
 * Run:  npx tsx bench/vlm-preprocess.ts [--rounds 5] [--markdown]
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import { machine, markdownTable } from './markdown.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { AutoProcessor, RawImage, env } from '@huggingface/transformers';
import sharp from 'sharp';
import { Idefics3Processor, resizeLanczos3 } from '../core/vision/index.js';
import { writeVlmFolder } from '../scripts/vlm-model.js';
import { encodePng } from '../test/helpers/png.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '5' } } });
const rounds = Number(args.rounds);

const SMOLVLM = {
  image_processor_type: 'Idefics3ImageProcessor', processor_class: 'Idefics3Processor', do_convert_rgb: true, do_resize: true,
  size: { longest_edge: 2048 }, resample: 1, do_rescale: true, rescale_factor: 1 / 255, do_normalize: true,
  image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5], do_pad: true, do_image_splitting: true, max_image_size: { longest_edge: 512 },
};

function photo(w: number, h: number): Uint8Array {
  const d = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) for (let c = 0; c < 3; c++) d[(y * w + x) * 3 + c] = (128 + 100 * Math.sin(x * (c + 1) * 0.013 + y * 0.011) + ((x * 7919 + y * 104729) % 17)) & 255;
  return d;
}

const root = await mkdtemp(join(tmpdir(), 'tsi-vlm-bench-'));
await writeVlmFolder(join(root, 'smolvlm'));
await writeFile(join(root, 'smolvlm', 'preprocessor_config.json'), JSON.stringify(SMOLVLM));
await writeFile(join(root, 'smolvlm', 'processor_config.json'), JSON.stringify({ image_seq_len: 64, processor_class: 'Idefics3Processor' }));
env.allowRemoteModels = false;
env.localModelPath = root + '/';
const theirs = await AutoProcessor.from_pretrained('smolvlm');
const ours = new Idefics3Processor(SMOLVLM, { image_seq_len: 64 }, { image_token_id: 2048 }, 'smolvlm');

const images = [[640, 480], [4032, 3024]].map(([w, h]) => ({ name: `${w}×${h} PNG`, w: w!, h: h!, rgb: photo(w!, h!) })).map((i) => ({ ...i, png: encodePng(i.w, i.h, 3, i.rgb) }));

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
async function time(run: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await run();
  return performance.now() - t0;
}

const rows: (string | number)[][] = [['what', 'image', 'tsi ms', 'transformers.js / sharp ms', 'tsi / them']];
console.log(`machine: ${machine()}; ${rounds} rounds, median ms per image`);
for (const img of images) {
  const cases: [string, () => Promise<unknown>, () => Promise<unknown>][] = [
    ['pixel_values from the bytes', () => ours.prepare(img.png, 'image'), async () => theirs('<image>x', [await RawImage.fromBlob(new Blob([img.png as Uint8Array<ArrayBuffer>]))])],
    ['the resize alone (to 2048×1536)', async () => resizeLanczos3({ data: img.rgb, width: img.w, height: img.h, channels: 3 }, 2048, 1536),
      () => sharp(img.rgb, { raw: { width: img.w, height: img.h, channels: 3 } }).resize({ width: 2048, height: 1536, fit: 'fill', kernel: 'lanczos3' }).raw().toBuffer()],
  ];
  for (const [what, tsi, ref] of cases) {
    await tsi();
    await ref();
    const a: number[] = [], b: number[] = [];
    for (let r = 0; r < rounds; r++) {
      a.push(await time(tsi));
      b.push(await time(ref));
    }
    const [ma, mb] = [median(a), median(b)];
    console.log(`${what.padEnd(34)} ${img.name.padEnd(14)} tsi ${ma.toFixed(0).padStart(6)} ms   reference ${mb.toFixed(0).padStart(6)} ms   ${(ma / mb).toFixed(2)}x`);
    rows.push([what, img.name, ma.toFixed(0), mb.toFixed(0), `${(ma / mb).toFixed(2)}x`]);
  }
}
markdownTable('SmolVLM-256M preprocessing: tsi (JavaScript) vs transformers.js in Node (sharp, native)', rows);
await rm(root, { recursive: true, force: true });
