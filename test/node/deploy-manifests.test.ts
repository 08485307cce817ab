/**
 * deploy/ checked offline (no cluster, no container engine): every Kubernetes object against
 * Kubernetes v1.33.0's OpenAPI schemas with unknown fields refused, the PodMonitor against the
 * Prometheus Operator's CRDs, the KServe objects against KServe v0.20.0's CRD schemas
 * (test/helpers/deploy-manifests.ts); then what no schema knows: the objects point at each other
 * (selectors, named ports, the HPA's metrics and the adapter's rules), every tsi command line in them
 * is one `tsi-node serve` accepts, the metrics they scale on exist on a real server's /metrics, the
 * grace period covers the drain, the variants change only what they say; and the Dockerfile passes
 * dockerfile-utils' linter and builds what the manifests run.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { validate as lintDockerfile, ValidationSeverity } from 'dockerfile-utils';
import { parse as parseYaml } from 'yaml';
import { parseServeArgs as parseTsiArgs } from '../helpers/cli.js';
import { differingPaths, kserveSchemas, KUBERNETES_VERSION, readManifests, schemaErrors, unknownFieldErrors, where, type Manifest } from '../helpers/deploy-manifests.js';
import { MODELS, ROOT, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const all = readManifests(['deploy/kubernetes', 'deploy/kserve']);
const objects = all.filter((m) => m.doc.apiVersion);
const one = (file: string, kind?: string): Manifest => {
  const m = objects.find((x) => x.file === file && (!kind || x.doc.kind === kind));
  if (!m) throw new Error(`no ${kind ?? 'object'} in ${file}`);
  return m;
};
const deployment = one('deploy/kubernetes/deployment.yaml').doc;
const gpu = one('deploy/kubernetes/variants/gpu.yaml').doc;
const modelImage = one('deploy/kubernetes/variants/model-image.yaml').doc;
const service = one('deploy/kubernetes/service.yaml', 'Service').doc;
const hpa = one('deploy/kubernetes/autoscaling/hpa.yaml').doc;
const podMonitor = one('deploy/kubernetes/autoscaling/podmonitor.yaml').doc;
const pdb = one('deploy/kubernetes/pdb.yaml').doc;
const pvc = one('deploy/kubernetes/models-pvc.yaml').doc;
const runtime = one('deploy/kserve/servingruntime.yaml').doc;
const isvc = one('deploy/kserve/inferenceservice.yaml').doc;
const adapter = parseYaml(readFileSync(join(ROOT, 'deploy/kubernetes/autoscaling/prometheus-adapter-values.yaml'), 'utf8'));
const dockerfile = readFileSync(join(ROOT, 'deploy/Dockerfile'), 'utf8');

const container = (d: any) => d.spec.template.spec.containers.find((c: any) => c.name === 'tsi');
const selects = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

describe(`deploy/ manifests against Kubernetes ${KUBERNETES_VERSION} and KServe ${kserveSchemas().kserveVersion}`, () => {
  it('finds the objects it expects, and nothing that is not a Kubernetes object but the adapter values', () => {
    expect(objects.map((m) => `${m.doc.apiVersion} ${m.doc.kind}`).sort()).toEqual([
      'apps/v1 Deployment', 'apps/v1 Deployment', 'apps/v1 Deployment',
      'autoscaling/v2 HorizontalPodAutoscaler',
      'monitoring.coreos.com/v1 PodMonitor',
      'policy/v1 PodDisruptionBudget',
      'serving.kserve.io/v1alpha1 ServingRuntime',
      'serving.kserve.io/v1beta1 InferenceService',
      'v1 PersistentVolumeClaim',
      'v1 Service', 'v1 Service',
    ]);
    expect(all.filter((m) => !m.doc.apiVersion).map((m) => m.file)).toEqual(['deploy/kubernetes/autoscaling/prometheus-adapter-values.yaml']);
  });

  it('every object passes its schema', async () => {
    const failures: string[] = [];
    for (const m of objects) for (const e of await schemaErrors(m)) failures.push(`${where(m)}: ${e}`);
    expect(failures).toEqual([]);
  });

  it('no object has a field its API does not know', () => {
    const failures = [...unknownFieldErrors(objects)].flatMap(([m, errs]) => errs.map((e) => `${where(m)}: ${e}`));
    expect(failures).toEqual([]);
  });

  it('the validators are not vacuous: typos, wrong types and missing fields are caught', async () => {
    const broken = (m: Manifest, edit: (d: any) => void): Manifest => {
      const doc = structuredClone(m.doc);
      edit(doc);
      return { ...m, doc };
    };
    const dep = one('deploy/kubernetes/deployment.yaml');
    const typo = broken(dep, (d) => (container(d).readinessProbe.periodSecond = 3));
    const wrongType = broken(dep, (d) => (d.spec.replicas = 'two'));
    const noSelector = broken(dep, (d) => delete d.spec.selector);
    const isvcTypo = broken(one('deploy/kserve/inferenceservice.yaml'), (d) => (d.spec.predictor.model.storageURI = d.spec.predictor.model.storageUri));
    const runtimeTypo = broken(one('deploy/kserve/servingruntime.yaml'), (d) => (d.spec.containers[0].readinesProbe = {}));
    const monitorTypo = broken(one('deploy/kubernetes/autoscaling/podmonitor.yaml'), (d) => (d.spec.podMetricsEndpoints[0].interval = 15));
    const unknown = unknownFieldErrors([typo]);
    expect(unknown.get(typo)!.join('\n')).toMatch(/periodSecond\W+ does not exist in type 'IProbe'/);
    expect((await schemaErrors(wrongType)).join('\n')).toMatch(/replicas must be integer/);
    expect((await schemaErrors(noSelector)).join('\n')).toMatch(/selector/);
    expect((await schemaErrors(isvcTypo)).join('\n')).toMatch(/additional properties: 'storageURI'/);
    expect((await schemaErrors(runtimeTypo)).join('\n')).toMatch(/additional properties: 'readinesProbe'/);
    expect((await schemaErrors(monitorTypo)).join('\n')).toMatch(/interval/);
  });

  it('the Service, PDB and PodMonitor select the Deployment\'s pods, by ports it names', () => {
    const labels = deployment.spec.template.metadata.labels;
    expect(selects(deployment.spec.selector.matchLabels, labels)).toBe(true);
    const ports = new Map(container(deployment).ports.map((p: any) => [p.name, p.containerPort]));
    expect([...ports.keys()].sort()).toEqual(['grpc', 'http', 'metrics']);
    for (const s of objects.filter((m) => m.doc.kind === 'Service').map((m) => m.doc)) {
      expect(selects(s.spec.selector, labels), s.metadata.name).toBe(true);
      for (const p of s.spec.ports) expect(ports.has(p.targetPort), `${s.metadata.name} ${p.name}`).toBe(true);
    }
    expect(selects(pdb.spec.selector.matchLabels, labels)).toBe(true);
    expect(selects(podMonitor.spec.selector.matchLabels, labels)).toBe(true);
    expect(ports.has(podMonitor.spec.podMetricsEndpoints[0].port)).toBe(true);
    const c = container(deployment);
    for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe]) expect(ports.get(probe.httpGet.port)).toBe(8000);
    expect(c.readinessProbe.httpGet.path).toBe('/v2/health/ready');
    expect(c.startupProbe.httpGet.path).toBe('/v2/health/ready');
    expect(c.livenessProbe.httpGet.path).toBe('/v2/health/live');
    const models = c.volumeMounts.find((v: any) => v.mountPath === '/models');
    const volume = deployment.spec.template.spec.volumes.find((v: any) => v.name === models.name);
    expect(volume.persistentVolumeClaim.claimName).toBe(pvc.metadata.name);
    expect(hpa.spec.scaleTargetRef).toMatchObject({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name });
    expect(hpa.spec.minReplicas).toBeGreaterThan(pdb.spec.maxUnavailable);
  });

  it('every tsi command line is one tsi-node serve accepts, on the ports the objects use', async () => {
    const dep = await parseTsiArgs(container(deployment).args);
    expect(dep).toMatchObject({ modelRepository: ['/models'], httpPort: 8000, grpcPort: 8001, metricsPort: 8002 });
    for (const v of [gpu, modelImage]) expect(container(v).args).toEqual(container(deployment).args);
    const rt = runtime.spec.containers[0];
    const kserve = await parseTsiArgs(rt.args);
    expect(kserve).toMatchObject({ modelRepository: ['/mnt/models'], httpPort: 8080, grpcPort: 9000, metricsPort: 8002 });
    expect(rt.readinessProbe.httpGet).toEqual({ path: '/v2/health/ready', port: kserve.httpPort });
    expect(runtime.spec.annotations['prometheus.kserve.io/port']).toBe(String(kserve.metricsPort));
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile.split(/^FROM .* AS runtime$/m)[1]!)![1]!;
    expect(await parseTsiArgs(JSON.parse(cmd))).toMatchObject({ modelRepository: ['/models'], httpPort: 8000 });
    await expect(parseTsiArgs(['serve', '--model-repositry=/models'])).rejects.toThrow(/unknown option/);
  });

  it('needs no preStop hook: the grace period covers the drain delay and the drain (--exit-timeout-secs)', async () => {
    for (const d of [deployment, gpu, modelImage]) {
      const o = await parseTsiArgs(container(d).args);
      expect(container(d).lifecycle?.preStop).toBeUndefined();
      // tsi's own phase a stands in for the preStop sleep, so it must be on.
      expect(o.drainDelaySecs).toBeGreaterThan(0);
      expect(d.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(o.drainDelaySecs + o.exitTimeoutSecs);
    }
  });

  it('the variants differ from deployment.yaml only in what they are for', () => {
    const spec = 'spec.template.spec';
    expect(differingPaths(deployment, gpu).sort()).toEqual([
      `${spec}.containers[0].env`,
      `${spec}.containers[0].resources.limits.nvidia.com/gpu`,
      `${spec}.tolerations`,
    ].sort());
    expect(container(gpu).env).toContainEqual({ name: 'NVIDIA_DRIVER_CAPABILITIES', value: expect.stringMatching(/(^|,)graphics(,|$)/) });
    expect(differingPaths(deployment, modelImage).sort()).toEqual([`${spec}.initContainers`, `${spec}.volumes[0].emptyDir`, `${spec}.volumes[0].persistentVolumeClaim`].sort());
    const init = modelImage.spec.template.spec.initContainers[0];
    expect(init.volumeMounts[0].name).toBe('models');
    expect(init.command.at(-1)).toBe(init.volumeMounts[0].mountPath + '/');
  });

  describe('autoscaling on tsi\'s metrics', () => {
    let server: TestServer;
    let repo: { path: string; cleanup: () => void };
    let exposition = '';
    beforeAll(async () => {
      repo = tempRepo({ 'simple/config.pbtxt': readFileSync(join(MODELS, 'simple', 'config.pbtxt'), 'utf8') });
      mkdirSync(join(repo.path, 'simple', '1'));
      copyFileSync(join(MODELS, 'simple', '1', 'model.onnx'), join(repo.path, 'simple', '1', 'model.onnx'));
      server = await startTestServer({ modelRepositories: [repo.path], metricsPort: 0, metricsAddress: '127.0.0.1', gpuMetrics: false });
      const body = { inputs: ['INPUT0', 'INPUT1'].map((name) => ({ name, datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(1) })) };
      expect((await fetch(`${server.url}/v2/models/simple/infer`, { method: 'POST', body: JSON.stringify(body) })).status).toBe(200);
      exposition = await (await fetch(`http://127.0.0.1:${server.metrics!.port}/metrics`)).text();
    });
    afterAll(async () => {
      await server?.stop(1000);
      repo?.cleanup();
    });

    it('the HPA scales on per-pod metrics the adapter rules make', () => {
      const names = adapter.rules.custom.map((r: any) => r.name.as);
      expect(adapter.rules.default).toBe(false);
      for (const m of hpa.spec.metrics) {
        expect(m.type).toBe('Pods');
        expect(names).toContain(m.pods.metric.name);
        expect(Number(m.pods.target.averageValue)).toBeGreaterThan(0);
      }
    });

    it('each rule is a complete adapter rule over metrics a real tsi exports, of the kind its query needs', () => {
      const types = new Map([...exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
      for (const rule of adapter.rules.custom) {
        expect(Object.keys(rule).sort()).toEqual(['metricsQuery', 'name', 'resources', 'seriesQuery']);
        expect(rule.resources.overrides).toEqual({ namespace: { resource: 'namespace' }, pod: { resource: 'pod' } });
        const series = /^(\w+)\{/.exec(rule.seriesQuery)![1]!;
        expect(new RegExp(rule.name.matches).test(series)).toBe(true);
        expect(rule.metricsQuery).toContain('<<.LabelMatchers>>');
        expect(rule.metricsQuery).toContain('by (<<.GroupBy>>)');
        let depth = 0;
        for (const ch of rule.metricsQuery as string) {
          depth += ch === '(' ? 1 : ch === ')' ? -1 : 0;
          expect(depth).toBeGreaterThanOrEqual(0);
        }
        expect(depth).toBe(0);
        for (const [, fn, metric] of (rule.metricsQuery as string).matchAll(/(rate|avg_over_time)\((\w+)\{/g)) {
          expect(types.get(metric!), `${metric} on /metrics`).toBe(fn === 'rate' ? 'counter' : 'gauge');
          expect(exposition).toMatch(new RegExp(`^${metric}\\{[^}]*model="simple"`, 'm'));
        }
      }
    });
  });

  it('KServe: the InferenceService runs on the tsi runtime, whose repository is KServe\'s /mnt/models', () => {
    const model = isvc.spec.predictor.model;
    expect(model.runtime).toBe(runtime.metadata.name);
    expect(runtime.spec.supportedModelFormats.map((f: any) => f.name)).toContain(model.modelFormat.name);
    expect(runtime.spec.protocolVersions).toEqual(['v2', 'grpc-v2']);
    expect(model.protocolVersion).toBe('v2');
    expect(model.storageUri).toBe(`pvc://${pvc.metadata.name}`);
    expect(runtime.spec.containers[0].name).toBe('kserve-container');
  });
});

describe('deploy/Dockerfile', () => {
  const stages = dockerfile.split(/^(?=FROM )/m).slice(1);
  const runtimeStage = stages.find((s) => /^FROM \S+ AS runtime$/m.test(s))!;

  it('passes dockerfile-utils\' linter with every check an error', () => {
    const strict = Object.fromEntries(['deprecatedMaintainer', 'directiveCasing', 'emptyContinuationLine', 'instructionCasing', 'instructionCmdMultiple',
      'instructionEntrypointMultiple', 'instructionHealthcheckMultiple', 'instructionJSONInSingleQuotes', 'instructionWorkdirRelative'].map((k) => [k, ValidationSeverity.ERROR]));
    const problems = lintDockerfile(dockerfile, strict).map((d) => `line ${d.range.start.line + 1}: ${d.message}`);
    expect(problems).toEqual([]);
  });

  it('runs as Triton\'s image does, slim and non-root, with the GPU notes in place', () => {
    expect(stages.at(-1)).toBe(runtimeStage);
    expect(runtimeStage).toMatch(/^FROM node:\$\{NODE_VERSION\}-bookworm-slim AS runtime$/m);
    expect(dockerfile).toMatch(/^ARG NODE_VERSION=20$/m);
    expect(runtimeStage).toMatch(/^USER 1000:1000$/m);
    expect(runtimeStage).toMatch(/^EXPOSE 8000 8001 8002$/m);
    expect(runtimeStage).toMatch(/^HEALTHCHECK .*\n.*127\.0\.0\.1:8000\/v2\/health\/ready/m);
    expect(runtimeStage).toMatch(/^ENTRYPOINT \["\/usr\/bin\/tini", "--", "node", "\/opt\/tsi\/bin\/tsi-node\.js"\]$/m);
    expect(runtimeStage).toMatch(/install -y --no-install-recommends libvulkan1 tini/);
    expect(runtimeStage).toMatch(/NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics/);
    expect(dockerfile).toMatch(/ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules\/onnxruntime-node\/script\/install\.js/);
    // The Deployment's securityContext and the image agree on the user.
    expect(deployment.spec.template.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
  });

  it('copies only what exists and what .dockerignore lets into the context', () => {
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    for (const must of ['node_modules', 'dist', '.git', 'models']) expect(ignore).toContain(must);
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1]!.split(/\s+/));
    expect(sources.length).toBeGreaterThan(5);
    for (const src of sources) {
      expect(existsSync(join(ROOT, src)), src).toBe(true);
      expect(ignore.some((p) => p === src || p === src.split('/')[0]), `${src} is in .dockerignore`).toBe(false);
    }
    // What the runtime stage runs was built: bin/ needs dist/runtime-node/cli.js, which tsc writes from runtime-node/cli.ts.
    expect(readFileSync(join(ROOT, 'bin', 'tsi-node.js'), 'utf8')).toContain('../dist/runtime-node/cli.js');
  });
});
