/**
 * What tracing costs: requests/s on `simple` (HTTP JSON, 4 keep-alive connections, closed loop) with
 * tracing off, in Triton mode (a trace file) and in OpenTelemetry mode (OTLP/HTTP protobuf through the
 * batch span processor to a collector that answers at once), each at trace rate 1 (every request
 * traced) and rate 1000 (Triton's default), printed as ratios against tracing off measured in the
 * same run: requests per second, and the server process's CPU time per request (from /proc, so Linux
 * only), which is what tracing adds and what a shared machine's load skews least. Each server is its own child process running the compiled build (dist/, what
 * `tsi-node serve` runs); the collector is a plain HTTP sink in this process.
 *
 *   npm run build && npm run bench:tracing -- [--seconds 2] [--rounds 3] [--markdown]
 */

import './markdown.js';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildRequest, runLoad, type LoadResult } from './load.js';
import { markdownTable } from './markdown.js';
import { spawnServer, stopServer } from './servers.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : def;
};
const SECONDS = arg('--seconds', 2);
const CONNECTIONS = 4;

const work = mkdtempSync(join(tmpdir(), 'tsi-bench-tracing-'));
const entry = join(work, 'server.mjs');
writeFileSync(entry, `import { startServer } from ${JSON.stringify(pathToFileURL(join(ROOT, 'dist', 'runtime-node', 'index.js')).href)};
import { parseTraceConfig } from ${JSON.stringify(pathToFileURL(join(ROOT, 'dist', 'core', 'index.js')).href)};
const specs = JSON.parse(process.argv[2]);
const s = await startServer({
  modelRepositories: [${JSON.stringify(join(ROOT, 'models'))}], modelControlMode: 'explicit', loadModels: ['simple'],
  httpPort: 0, httpAddress: '127.0.0.1', logVerbose: 0, trace: parseTraceConfig(specs, process.env),
});
process.stdout.write('PORT ' + s.http.port + '\\n');
process.on('SIGTERM', () => void s.stop(5000).then(() => process.exit(0)));
`);

// The collector: takes every export and answers 200 with an empty ExportTraceServiceResponse.
let exports = 0;
const collector = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end();
  });
});
await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
const otlpUrl = `http://127.0.0.1:${(collector.address() as { port: number }).port}/v1/traces`;

const body = new TextEncoder().encode(JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) },
  ],
}));
const request = buildRequest('/v2/models/simple/infer', { 'Content-Type': 'application/json' }, body);

const configs: [label: string, specs: string[]][] = [
  ['tracing off', []],
  ['triton, rate 1000', ['level=TIMESTAMPS', 'rate=1000', `triton,file=${join(work, 'trace.json')}`, 'triton,log-frequency=1000']],
  ['triton, rate 1', ['level=TIMESTAMPS', 'rate=1', `triton,file=${join(work, 'trace.json')}`, 'triton,log-frequency=1000']],
  ['opentelemetry, rate 1000', ['mode=opentelemetry', 'level=TIMESTAMPS', 'rate=1000', `opentelemetry,url=${otlpUrl}`]],
  ['opentelemetry, rate 1', ['mode=opentelemetry', 'level=TIMESTAMPS', 'rate=1', `opentelemetry,url=${otlpUrl}`]],
];

/** CPU seconds (user + system) a process has used so far, from /proc (Linux). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the command; in clock ticks (100/s).
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** Requests `simple` has answered, by the statistics extension. */
async function served(port: number): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/simple/stats`);
  const j = (await r.json()) as { model_stats: { inference_stats: { success: { count: number } } }[] };
  return j.model_stats[0]!.inference_stats.success.count;
}

// All servers up at once (idle ones cost nothing), measured in interleaved rounds so that a change in
// the machine's load (it is shared) falls on every configuration alike; each keeps its median round.
const ROUNDS = arg('--rounds', 3);
const rounds = new Map<string, LoadResult[]>(configs.map(([label]) => [label, []]));
// The server's CPU time per answered request, over every round: what tracing costs the server,
// which a shared machine's load does not skew the way it skews requests per second.
const cpu = new Map<string, { seconds: number; requests: number }>(configs.map(([label]) => [label, { seconds: 0, requests: 0 }]));
const servers: { label: string; child: Awaited<ReturnType<typeof spawnServer>>['child']; port: number }[] = [];
try {
  for (const [label, specs] of configs) servers.push({ label, ...(await spawnServer([entry, JSON.stringify(specs)], label)) });
  for (let k = 0; k < ROUNDS; k++) {
    for (const { label, port, child } of servers) {
      const [c0, n0] = [cpuSeconds(child.pid!), await served(port)];
      const r = await runLoad({ port, request, connections: CONNECTIONS, durationMs: SECONDS * 1000, warmupMs: 500 });
      const c = cpu.get(label)!;
      // Warm-up included on both sides: the server's own count of the requests it answered.
      c.seconds += cpuSeconds(child.pid!) - c0;
      c.requests += (await served(port)) - n0;
      rounds.get(label)!.push(r);
      console.log(`round ${k + 1}: ${label.padEnd(26)} ${r.rps.toFixed(0).padStart(7)} req/s  p50 ${r.p50Ms.toFixed(2)} ms  p99 ${r.p99Ms.toFixed(2)} ms  errors ${r.errors}`);
    }
  }
} finally {
  await Promise.all(servers.map((s) => stopServer(s.child)));
  collector.close();
  rmSync(work, { recursive: true, force: true });
}
const results: [string, LoadResult][] = configs.map(([label]) => {
  const rs = [...rounds.get(label)!].sort((a, b) => a.rps - b.rps);
  return [label, rs[Math.floor(rs.length / 2)]!];
});
const base = results[0]![1].rps;
const cpuUs = (label: string) => (cpu.get(label)!.seconds / cpu.get(label)!.requests) * 1e6;
const baseCpu = cpuUs(configs[0]![0]);
console.log(`\nsimple over HTTP JSON, ${CONNECTIONS} connections, median of ${ROUNDS} interleaved rounds of ${SECONDS} s; ratios against tracing off in the same run; ${exports} OTLP exports received`);
for (const [label, r] of results) {
  console.log(`${label.padEnd(26)} ${r.rps.toFixed(0).padStart(7)} req/s (x${(r.rps / base).toFixed(2)})  server CPU ${cpuUs(label).toFixed(0)} µs/request (x${(cpuUs(label) / baseCpu).toFixed(2)})`);
}
markdownTable('Tracing overhead (`simple`, HTTP JSON)', [
  ['tracing', 'req/s (median round)', 'ratio to off', 'server CPU µs/request', 'CPU ratio to off', 'p50 ms', 'p99 ms', 'errors'],
  ...results.map(([label, r]) => [
    label, r.rps.toFixed(0), (r.rps / base).toFixed(2), cpuUs(label).toFixed(0), (cpuUs(label) / baseCpu).toFixed(2), r.p50Ms.toFixed(2), r.p99Ms.toFixed(2), r.errors,
  ]),
]);
