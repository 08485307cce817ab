/**
 * Replicas behind a real load balancer (issues 15 and 19): N `tsi-node serve` processes behind
 * Debian's HAProxy, an HTTP/1.1 frontend and a gRPC (h2) frontend, servers health-checked on
 * GET /v2/health/ready. Two measurements:
 *  - rolling restarts under load: HTTP and gRPC clients send `simple` through HAProxy, every answer
 *    checked against its own random inputs (OUTPUT0 = a + b, OUTPUT1 = a − b), while each replica in
 *    turn gets SIGTERM, drains in phases (not ready for --drain-delay-secs, listeners closed, in-flight
 *    work drained), exits and is started again, as a Kubernetes rolling update does; with HAProxy
 *    not retrying anything (`retries 0`, no retry-on, no redispatch, like kube-proxy) and retrying,
 *    at each client count; printed: requests, failures by kind, each replica's phases and start-up;
 *  - scale-out: the same closed-loop load on `mlp_batch` with 1, 2 and 3 replicas enabled in
 *    HAProxy, in interleaved rounds. On a 2-core machine this shows the mechanism (requests spread,
 *    every replica batching), not linear scaling: one replica's model instance already takes a core.
 * The drain delay must outlast the balancer's detection (here 250 ms checks, one failure marks a
 * server down); --drain-delay-secs 0 shows what is lost without phase a (listeners closing at SIGTERM).
 *
 * Run:   npm run bench:replicas                            (needs `apt-get install haproxy` and a build: npm run build)
 * Flags: --replicas 3  --clients 16,64 (each count: half HTTP/1.1 keep-alive clients, half gRPC calls)
 *        --restarts 3 (full rolling restarts per mode and client count)  --modes no-retries,retries
 *        --drain-delay-secs 1  --exit-timeout-secs 30
 *        --scale-clients 64  --scale-duration 3 (s)  --rounds 3  --skip-rolling  --skip-scale  --json <file>
 * The processes and HAProxy are bench/replica-fleet.ts, the checked load bench/replica-load.ts;
 * test/node/deploy-replicas.test.ts runs a short rolling restart with their functions.
 */


// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { counts, Haproxy, hasHaproxy, makeRepository, rollingRestart, sleep, startReplicas, type RestartTiming } from './replica-fleet.js';
import { mlpProbes, startLoad, type LoadStats } from './replica-load.js';

const fmt = (s: LoadStats) => `${s.requests} requests, ${s.ok} right, ${s.requests - s.ok} failed${Object.keys(s.failures).length ? ` ${JSON.stringify(s.failures)}` : ''}`;

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      replicas: { type: 'string', default: '3' }, clients: { type: 'string', default: '16,64' },
      restarts: { type: 'string', default: '3' }, modes: { type: 'string', default: 'no-retries,retries' },
      'drain-delay-secs': { type: 'string', default: '1' }, 'exit-timeout-secs': { type: 'string', default: '30' },
      'scale-clients': { type: 'string', default: '64' }, 'scale-duration': { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' },
      'skip-rolling': { type: 'boolean', default: false }, 'skip-scale': { type: 'boolean', default: false }, json: { type: 'string' },
    },
  });
  if (!hasHaproxy()) throw new Error('haproxy is not installed (apt-get install haproxy)');
  const n = Number(a.replicas);
  const shutdown = { drainDelaySecs: Number(a['drain-delay-secs']), exitTimeoutSecs: Number(a['exit-timeout-secs']) };
  const repo = makeRepository(['simple', 'mlp_batch']);
  const { replicas, startupMs } = await startReplicas(n, repo.path, shutdown);
  const results: Record<string, unknown> = { replicas: n, shutdown, startupMs };
  process.stdout.write(`${n} replicas up (start-up ${startupMs.map((x) => x.toFixed(0)).join(', ')} ms), HAProxy ${spawnSync('haproxy', ['-v']).stdout.toString().split('\n')[0]}, ` +
    `--drain-delay-secs=${shutdown.drainDelaySecs} --exit-timeout-secs=${shutdown.exitTimeoutSecs}\n`);
  let h: Haproxy | undefined;
  try {
    if (!a['skip-rolling']) {
      const rolling: Record<string, unknown>[] = [];
      process.stdout.write(`\nrolling restarts: ${a.restarts} full rolling restarts of ${n} replicas per row; each count of clients is half HTTP/1.1 keep-alive clients, half concurrent gRPC calls (4 per h2 connection)\n`);
      process.stdout.write('  HAProxy     clients  seconds  HTTP requests  gRPC requests  failed  mismatched  failures by kind\n');
      const allTimings: RestartTiming[] = [];
      for (const mode of a.modes!.split(',')) {
        h = await Haproxy.start(replicas, { retries: mode === 'retries' });
        for (const clients of a.clients!.split(',').map(Number)) {
          const load = startLoad(h, { httpClients: Math.ceil(clients / 2), grpcClients: Math.floor(clients / 2) });
          await sleep(1000);
          for (let k = 0; k < Number(a.restarts); k++) allTimings.push(...await rollingRestart(replicas, h));
          await sleep(1000);
          const { http, grpc } = await load.finish();
          const failures: Record<string, number> = {};
          for (const [p, st] of [['http', http], ['grpc', grpc]] as const) {
            for (const [kind, c] of Object.entries(st.failures)) failures[`${p}: ${kind}`] = c;
          }
          const failed = http.requests - http.ok + grpc.requests - grpc.ok;
          const mismatched = (http.failures.mismatch ?? 0) + (grpc.failures.mismatch ?? 0);
          process.stdout.write(`  ${mode.padEnd(10)}  ${String(clients).padStart(7)}  ${http.seconds.toFixed(1).padStart(7)}  ${String(http.requests).padStart(13)}  ${String(grpc.requests).padStart(13)}  ${String(failed).padStart(6)}  ${String(mismatched).padStart(10)}  ${Object.keys(failures).length ? JSON.stringify(failures) : '-'}\n`);
          rolling.push({ mode, clients, http, grpc, failed, mismatched });
        }
        process.stdout.write(`  ${mode}: HAProxy took servers out ${JSON.stringify(h.downReasons())}\n`);
        await h.stop();
        h = undefined;
      }
      const exits = [...new Set(allTimings.map((t) => t.exitCode))];
      const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? NaN;
      const range = (xs: number[]) => `${med(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`;
      const ph = allTimings.filter((t) => t.phases).map((t) => t.phases!);
      process.stdout.write(`\n  ${allTimings.length} replica restarts, exit codes ${exits.join(', ')}; median (min-max) ms:\n`);
      process.stdout.write(`    SIGTERM to exit ${range(allTimings.map((t) => t.drainMs))}: not ready while serving ${range(ph.map((p) => p.notReadyMs))}, ` +
        `in-flight drained ${range(ph.map((p) => p.drainedMs))}, models unloaded ${range(ph.map((p) => p.unloadMs))}\n`);
      const outs = allTimings.map((t) => t.outOfRotationMs);
      process.stdout.write(`    SIGTERM to out of rotation in HAProxy ${range(outs.filter((x) => x !== undefined) as number[])}${outs.includes(undefined) ? `, ${outs.filter((x) => x === undefined).length} not before exit` : ''}\n`);
      process.stdout.write(`    start-up to ready ${range(allTimings.map((t) => t.startupMs))}, then UP in HAProxy ${range(allTimings.map((t) => t.backInRotationMs))}\n`);
      for (const r of replicas) {
        const ts = allTimings.filter((t) => t.replica === r.name);
        process.stdout.write(`    ${r.name}: SIGTERM to exit ${ts.map((t) => t.drainMs.toFixed(0)).join(', ')}; start-up ${ts.map((t) => t.startupMs.toFixed(0)).join(', ')}\n`);
      }
      results.rolling = { rows: rolling, timings: allTimings };
    }
    h = await Haproxy.start(replicas, { retries: true });
    if (!a['skip-scale']) {
      const probe = await mlpProbes(replicas[0]!.httpPort);
      const perN: Record<number, number[]> = {};
      const batch: Record<number, number[]> = {};
      const share: Record<number, number[][]> = {};
      const failures: Record<string, number> = {};
      for (let round = 0; round < Number(a.rounds); round++) {
        for (let k = 1; k <= n; k++) {
          await h.enableFirst(replicas, k);
          await sleep(300);
          const load = startLoad(h, { httpClients: Number(a['scale-clients']), grpcClients: 0, model: 'mlp_batch', probe });
          await sleep(500);
          const before = load.http.ok;
          const c0 = await Promise.all(replicas.slice(0, k).map((r) => counts(r, 'mlp_batch')));
          const t0 = performance.now();
          await sleep(Number(a['scale-duration']) * 1000);
          const rps = (load.http.ok - before) / ((performance.now() - t0) / 1000);
          const c1 = await Promise.all(replicas.slice(0, k).map((r) => counts(r, 'mlp_batch')));
          const rows = c1.map((c, i) => c.rows - c0[i]!.rows);
          const total = rows.reduce((x, y) => x + y, 0);
          (batch[k] ??= []).push(total / c1.reduce((x, c, i) => x + c.batches - c0[i]!.batches, 0));
          (share[k] ??= []).push(rows.map((x) => x / total));
          const { http } = await load.finish();
          for (const [kind, c] of Object.entries(http.failures)) failures[kind] = (failures[kind] ?? 0) + c;
          (perN[k] ??= []).push(rps);
        }
      }
      await h.enableFirst(replicas, n);
      const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
      process.stdout.write(`\nscale-out on mlp_batch, ${a['scale-clients']} HTTP clients through HAProxy, ${a.rounds} interleaved rounds of ${a['scale-duration']} s (medians)\n`);
      process.stdout.write('  replicas  req/s  vs 1  mean batch  share of rows per replica  rounds (req/s)\n');
      for (let k = 1; k <= n; k++) {
        const sh = share[k]!.at(-1)!.map((x) => `${(100 * x).toFixed(0)}%`).join('/');
        process.stdout.write(`  ${String(k).padStart(8)}  ${median(perN[k]!).toFixed(0).padStart(5)}  ${(median(perN[k]!) / median(perN[1]!)).toFixed(2)}×  ${median(batch[k]!).toFixed(1).padStart(10)}  ${sh.padStart(25)}  ${perN[k]!.map((x) => x.toFixed(0)).join(', ')}\n`);
      }
      process.stdout.write(`  failed: ${JSON.stringify(failures)}; cores here: ${(await import('node:os')).availableParallelism()}\n`);
      results.scale = { perN, batch, share, failures };
    }
  } finally {
    await h?.stop();
    await Promise.all(replicas.map((r) => r.child && r.child.exitCode === null ? r.stop() : undefined));
    repo.cleanup();
  }
  if (a.json) writeFileSync(a.json, JSON.stringify(results, null, 2));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    process.stderr.write(`${(err as Error).stack}\n`);
    process.exit(1);
  });
}
