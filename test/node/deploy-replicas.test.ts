/**
 * Three `tsi-node serve` replicas behind Debian's HAProxy (bench/replicas.ts): HTTP/1.1 and gRPC (h2)
 * clients send `simple` through it, every answer checked against its own random inputs, while each
 * replica in turn is sent SIGTERM, drains, exits 0 and is started again, as a Kubernetes rolling update
 * does. Zero failed requests with HAProxy retrying nothing (`retries 0`, no retry-on, no redispatch,
 * like kube-proxy): tsi's drain phases alone make the restart lossless (not ready for the drain
 * delay while HAProxy's health checks take it out, then listeners closed and in-flight work drained).
 * Needs `haproxy` (.ci/run installs it; a named skip elsewhere, a failure under CI) and the compiled CLI in dist/.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Haproxy, hasHaproxy, makeRepository, rollingRestart, startReplicas, type Replica } from '../../bench/replica-fleet.js';
import { startLoad } from '../../bench/replica-load.js';
import { describeWith } from '../helpers/capability.js';

const haproxyMissing = hasHaproxy() ? undefined : 'no haproxy on PATH (apt-get install haproxy)';

describeWith(!!process.env.CI, 'HAProxy', haproxyMissing)('3 replicas behind HAProxy, restarted one at a time under load', () => {
  let repo: ReturnType<typeof makeRepository>;
  let replicas: Replica[] = [];
  let h: Haproxy | undefined;

  beforeAll(async () => {
    repo = makeRepository(['simple']);
    // 1 s: four of HAProxy's 250 ms health checks.
    ({ replicas } = await startReplicas(3, repo.path, { drainDelaySecs: 1, exitTimeoutSecs: 30 }));
    h = await Haproxy.start(replicas, { retries: false });
  }, 120_000);

  afterAll(async () => {
    await h?.stop();
    for (const r of replicas) r.kill();
    repo?.cleanup();
  });

  it('loses no request and every answer matches its inputs; each replica exits 0 and comes back', async () => {
    const load = startLoad(h!, { httpClients: 16, grpcClients: 4 });
    await new Promise((r) => setTimeout(r, 500));
    const served: number[] = [];
    const timings = [];
    for (const r of replicas) {
      const before = load.http.ok + load.grpc.ok;
      timings.push(...await rollingRestart([r], h!));
      served.push(load.http.ok + load.grpc.ok - before);
    }
    await new Promise((r) => setTimeout(r, 500));
    const { http, grpc } = await load.finish();
    console.log(`rolling restart: HTTP ${http.requests} requests, gRPC ${grpc.requests}; ` +
      timings.map((t) => `${t.replica} drained in ${t.drainMs.toFixed(0)} ms, ready ${t.startupMs.toFixed(0)} ms after start, UP in HAProxy ${t.backInRotationMs.toFixed(0)} ms later`).join('; '));
    expect(http.failures).toEqual({});
    expect(grpc.failures).toEqual({});
    expect(http.ok).toBe(http.requests);
    expect(grpc.ok).toBe(grpc.requests);
    expect(http.ok).toBeGreaterThan(100);
    expect(grpc.ok).toBeGreaterThan(20);
    // Traffic went on while each replica was away.
    for (const n of served) expect(n).toBeGreaterThan(0);
    for (const t of timings) {
      expect(t.exitCode).toBe(0);
      // Phase a lasted the drain delay: the replica served while HAProxy took it out.
      expect(t.phases!.notReadyMs).toBeGreaterThanOrEqual(1000);
    }
    // Every replica served both frontends' traffic (HAProxy's per-server session totals).
    const csv = (await h!.command('show stat')).trim().split('\n');
    const cols = csv[0]!.replace(/^# /, '').split(',');
    const [px, sv, stot] = ['pxname', 'svname', 'stot'].map((c) => cols.indexOf(c));
    for (const line of csv.slice(1).map((l) => l.split(','))) {
      if (line[sv!]!.startsWith('r')) expect(Number(line[stot!]), `${line[px!]}/${line[sv!]}`).toBeGreaterThan(0);
    }
  }, 180_000);
});
