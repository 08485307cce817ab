/**
 * Speech recognition throughput: seconds of audio transcribed per wall-clock second, tsi's
 * `/v1/audio/transcriptions` (the real Node server in this process, over HTTP, multipart uploads of
 * WAV files; concurrent uploads gathered by the dynamic batcher into shared encoder batches, their
 * windows decoded on the llm engine's in-flight batching, on onnxruntime-node in the model's worker
 * threads) against transformers.js's
 * `automatic-speech-recognition` pipeline in process on the same folder (the default repository's
 * tiny Whisper, greedy, no timestamps), one clip after another as a script would call it. Clips are
 * seeded chirps of 5-15 s, the same every run. With more clips than concurrent uploads, an upload
 * starts as another ends, and its window joins the decode batch running (the table says how many rows
 * a decode step held, in how many model runs: rows of different cache lengths run apart, and how many
 * windows joined a running batch). At each concurrency both sides first run once untimed;
 * then they alternate over `--rounds` rounds, each transcribing the same `--clips` clips, so that load
 * from elsewhere on the machine falls on both alike. The ratio is tsi / transformers.js.
 *
 * Run:  npx tsx bench/whisper.ts [--clips 8] [--rounds 2] [--concurrency 1,8] [--markdown]
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import { machine, markdownTable } from './markdown.js';
import { parseArgs } from 'node:util';
import { env, pipeline } from '@huggingface/transformers';
import { createLogger } from '../core/index.js';
import { encodeWav, SAMPLE_RATE } from '../core/speech/audio.js';
import { startServer } from '../runtime-node/index.js';
import { MODELS } from '../test/helpers/server.js';
import { chirp } from '../test/helpers/audio.js';

const { values: args } = parseArgs({ options: { clips: { type: 'string', default: '8' }, rounds: { type: 'string', default: '2' }, concurrency: { type: 'string', default: '1,8' } } });
const count = Number(args.clips);
const rounds = Number(args.rounds);
const levels = args.concurrency.split(',').map(Number);

const clips = Array.from({ length: count }, (_, i) => chirp(5 + ((i * 7) % 11), i + 1));
const wavs = clips.map((x) => encodeWav(x));
const audioSeconds = clips.reduce((s, x) => s + x.length / SAMPLE_RATE, 0);

env.localModelPath = `${MODELS}/`;
env.allowRemoteModels = false;
const asr = await pipeline('automatic-speech-recognition', 'whisper/1', { dtype: 'fp32' });
const server = await startServer({
  modelRepositories: [MODELS], httpPort: 0, httpAddress: '127.0.0.1', modelControlMode: 'explicit', loadModels: ['whisper'], log: createLogger(() => {}),
});
const url = `http://127.0.0.1:${server.http!.port}`;

async function viaTsi(wav: Uint8Array): Promise<string> {
  const form = new FormData();
  form.set('model', 'whisper');
  form.set('file', new Blob([wav as BlobPart]), 'clip.wav');
  const r = await fetch(`${url}/v1/audio/transcriptions`, { method: 'POST', body: form });
  if (r.status !== 200) throw new Error(`tsi answered ${r.status}: ${await r.text()}`);
  return ((await r.json()) as { text: string }).text;
}

/** Every clip through tsi, `concurrency` uploads in flight; audio seconds per second. */
async function tsiRound(concurrency: number): Promise<number> {
  const t0 = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < wavs.length) await viaTsi(wavs[next++]!);
  }));
  return audioSeconds / ((performance.now() - t0) / 1000);
}

/** Every clip through the pipeline, one after another; audio seconds per second. */
async function tjRound(): Promise<number> {
  const t0 = performance.now();
  for (const x of clips) await asr(x);
  return audioSeconds / ((performance.now() - t0) / 1000);
}

/** The decoder's in-flight batching since `before`: rows per decode step, model runs per step, windows that joined. */
async function decoding(before?: Record<string, number>): Promise<Record<string, number>> {
  const s = ((await (await fetch(`${url}/v2/models/whisper/stats`)).json()) as any).model_stats[0].whisper_stats as Record<string, number>;
  if (!before) return s;
  const d = (k: string) => s[k]! - before[k]!;
  return { rows: d('decode_rows') / Math.max(1, d('decode_steps')), runs: (d('decoder_runs') - d('prefill_steps')) / Math.max(1, d('decode_steps')), joined: d('joined_sequences'), windows: d('windows') };
}

const rows: (string | number)[][] = [['concurrent uploads', 'tsi (audio s/s)', 'transformers.js (audio s/s)', 'ratio', 'tsi decode step: rows / model runs', 'windows that joined a running batch']];
console.log(`whisper: ${count} clips, ${audioSeconds.toFixed(0)} s of audio, ${rounds} rounds; ${machine()}`);
try {
  // transformers.js runs one clip at a time whatever the concurrency: measured at each level for the side-by-side load.
  for (const c of levels) {
    await tsiRound(c);
    await asr(clips[0]!);
    let a = 0;
    let b = 0;
    const before = await decoding();
    for (let round = 0; round < rounds; round++) {
      a += await tsiRound(c);
      b += await tjRound();
    }
    a /= rounds;
    b /= rounds;
    const dec = await decoding(before);
    rows.push([c, a.toFixed(1), b.toFixed(1), `${(a / b).toFixed(2)}×`, `${dec.rows!.toFixed(1)} / ${dec.runs!.toFixed(1)}`, `${dec.joined} of ${dec.windows}`]);
    console.log(`${String(c).padStart(3)} at once   tsi ${a.toFixed(1).padStart(7)} audio s/s   transformers.js ${b.toFixed(1).padStart(7)} audio s/s   ratio ${(a / b).toFixed(2)}×   decode step: ${dec.rows!.toFixed(1)} rows in ${dec.runs!.toFixed(1)} runs, ${dec.joined} of ${dec.windows} windows joined a running batch`);
  }
  markdownTable(`tiny Whisper, ${count} clips of 5-15 s (${audioSeconds.toFixed(0)} s), greedy, no timestamps: audio seconds transcribed per second (higher is better)`, rows);
} finally {
  await server.stop(5000);
  await asr.dispose();
}
