/**
 * The decoding and prefill workers' intra-op threads, swept: mid_gpt served by one server as several
 * models that differ only in `decode_thread_count` / `prefill_thread_count`, each driven the same way
 * (closed-loop generate_stream streams), the variants alternating over rounds so that a neighbour's
 * load falls on all of them alike. Prints tokens/s and TTFT p50 per variant and round.
 *
 * Run:  npx tsx bench/llm-threads.ts [--streams 8] [--tokens 32] [--requests 2] [--rounds 2] [--threads 1:1,2:1,1:2,2:2]
 */

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { decoderModel } from '../scripts/llm-model.js';
import { drive, MID_GPT, pct, tsiRequest, writeGptFolder } from './llm-common.js';
import { spawnServer, stopServer, tsiServer } from './servers.js';

const { values: args } = parseArgs({
  options: {
    streams: { type: 'string', default: '8' },
    tokens: { type: 'string', default: '32' },
    requests: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '2' },
    threads: { type: 'string', default: '1:1,2:1,1:2,2:2' },
  },
});
const variants = args.threads.split(',').map((v) => v.split(':').map(Number) as [number, number]);
const work = mkdtempSync(join(tmpdir(), 'tsi-bench-threads-'));
const repo = join(work, 'repo');
mkdirSync(repo);
const model = decoderModel(MID_GPT);
const names = variants.map(([d, p]) => `mid_gpt_d${d}_p${p}`);
variants.forEach(([d, p], i) => {
  const dir = join(repo, names[i]!);
  writeGptFolder(dir, MID_GPT, 128 * 2 ** 20, 'KIND_CPU', names[i]!, model);
  const cfg = join(dir, 'config.pbtxt');
  writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('parameters [', `parameters [\n  { key: "decode_thread_count" value: { string_value: "${d}" } },\n  { key: "prefill_thread_count" value: { string_value: "${p}" } },`));
});
const { argv } = tsiServer(repo, work);
const server = await spawnServer(argv, 'tsi');
const streams = Number(args.streams);
const tokens = Number(args.tokens);
console.log(`mid_gpt, ${streams} streams, ${tokens} tokens, ${args.requests} requests a stream; ${availableParallelism()} cores, load average ${loadavg()[0]!.toFixed(1)} (a loaded, shared machine: compare variants within a round)`);
console.log('| round | decode threads | prefill threads | tokens/s | TTFT p50 (ms) |\n|---:|---:|---:|---:|---:|');
try {
  for (const name of names) await drive(streams, (p, f) => tsiRequest(server.port, name, p, tokens, f), 1);
  for (let r = 1; r <= Number(args.rounds); r++) {
    for (const [i, name] of names.entries()) {
      const res = await drive(streams, (p, f) => tsiRequest(server.port, name, p, tokens, f), Number(args.requests));
      console.log(`| ${r} | ${variants[i]![0]} | ${variants[i]![1]} | ${res.tokensPerS.toFixed(0)} | ${pct(res.ttftMs, 50).toFixed(1)} |`);
    }
  }
} finally {
  await stopServer(server.child);
  rmSync(work, { recursive: true, force: true });
}
