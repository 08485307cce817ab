/**
 * Offline validation of deploy/'s Kubernetes and KServe manifests, for test/node/deploy-manifests.test.ts.
 * Three validators, because each catches what the others miss:
 *  - schemas: `kubernetes-models` (Kubernetes v1.33.0's OpenAPI schemas, compiled to ajv validators
 *    and shipped in the npm package) and `@kubernetes-models/prometheus-operator` (the Prometheus
 *    Operator's v0.65.1 CRDs) check types, required fields, enums and formats;
 *  - unknown fields: those schemas, like the OpenAPI they come from, accept any extra field, where a
 *    real API server (kubectl's default --validate=strict) refuses it. The same packages' TypeScript
 *    declarations do not: every object is type-checked as an object literal of its kind's interface,
 *    and TypeScript's excess-property check names any field that is not in the API (`periodSecond`);
 *  - KServe: its CRDs' own openAPIV3Schema (deploy/kserve/crd-schemas.json, KServe v0.20.0, written
 *    by deploy-kserve-schemas.ts) through ajv, made strict the way the API server prunes: an object
 *    with listed properties and no x-kubernetes-preserve-unknown-fields refuses others.
 * CEL rules (x-kubernetes-validations) and admission webhooks need a cluster and are not run.
 */

import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';
import { Ajv } from 'ajv';
import { ROOT } from './server.js';

export const KUBERNETES_VERSION = 'v1.33.0';
export const PROMETHEUS_OPERATOR_CRDS = 'v0.65.1';

export interface Manifest {
  /** Path relative to the repository root. */
  file: string;
  /** Index of the document in its file. */
  index: number;
  doc: any;
}

export const where = (m: Manifest) => `${m.file}#${m.index} (${m.doc?.kind} ${m.doc?.metadata?.name})`;

/** Every YAML document under the given folders (recursively), or in the given files. */
export function readManifests(paths: string[]): Manifest[] {
  const files: string[] = [];
  const walk = (p: string) => {
    if (statSync(p).isDirectory()) for (const n of readdirSync(p).sort()) walk(join(p, n));
    else if (/\.ya?ml$/.test(p)) files.push(p);
  };
  paths.forEach((p) => walk(join(ROOT, p)));
  const out: Manifest[] = [];
  for (const f of files) {
    const docs = parseAllDocuments(readFileSync(f, 'utf8'), { uniqueKeys: true });
    docs.forEach((d, index) => {
      const errors = [...d.errors, ...d.warnings];
      if (errors.length) throw new Error(`${relative(ROOT, f)}#${index}: ${errors.map((e) => e.message).join('; ')}`);
      const doc = d.toJS();
      if (doc !== null && doc !== undefined) out.push({ file: relative(ROOT, f), index, doc });
    });
  }
  return out;
}

/** The npm module and interface name that model an apiVersion/kind, or undefined for KServe and non-objects. */
function modelOf(apiVersion: string, kind: string): { module: string; type: string } | undefined {
  if (apiVersion === 'monitoring.coreos.com/v1') return { module: '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1', type: `I${kind}` };
  if (apiVersion.startsWith('serving.kserve.io/')) return undefined;
  return { module: `kubernetes-models/${apiVersion}`, type: `I${kind}` };
}

const isKserve = (m: Manifest) => String(m.doc.apiVersion).startsWith('serving.kserve.io/');

/** Schema errors of a Kubernetes, Prometheus Operator or KServe object (empty when valid). */
export async function schemaErrors(m: Manifest): Promise<string[]> {
  if (typeof m.doc?.apiVersion !== 'string' || typeof m.doc?.kind !== 'string') return ['not a Kubernetes object (no apiVersion and kind)'];
  if (isKserve(m)) return kserveErrors(m);
  const model = modelOf(m.doc.apiVersion, m.doc.kind);
  if (!model) return [`no schema for ${m.doc.apiVersion} ${m.doc.kind}`];
  let mod: Record<string, any>;
  try {
    mod = await import(model.module);
  } catch {
    return [`unknown apiVersion ${m.doc.apiVersion}`];
  }
  const Model = mod[m.doc.kind];
  if (typeof Model !== 'function') return [`unknown kind ${m.doc.kind} in ${m.doc.apiVersion}`];
  try {
    new Model(m.doc).validate();
    return [];
  } catch (err) {
    return [(err as Error).message];
  }
}

/**
 * Fields that the API does not have, found by type-checking each object as a TypeScript object
 * literal of its kind's interface (KServe objects: their metadata as ObjectMeta; their specs are
 * checked by kserveErrors). One program for all, about two seconds.
 */
export function unknownFieldErrors(manifests: Manifest[]): Map<Manifest, string[]> {
  const imports = new Map<string, Set<string>>();
  const use = (module: string, type: string) => {
    if (!imports.has(module)) imports.set(module, new Set());
    imports.get(module)!.add(type);
    return type;
  };
  const body: string[] = [];
  const lines: { from: number; m: Manifest }[] = [];
  let line = 0;
  for (const m of manifests) {
    const model = modelOf(m.doc.apiVersion, m.doc.kind);
    const [type, value] = model
      ? [use(model.module, model.type), m.doc]
      : [use('@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta', 'IObjectMeta'), m.doc.metadata];
    const text = `export const m${lines.length}: ${type} = ${JSON.stringify(value, null, 2)};\n`;
    lines.push({ from: line, m });
    body.push(text);
    line += text.split('\n').length - 1;
  }
  const head = [...imports].map(([mod, types]) => `import type { ${[...types].join(', ')} } from '${mod}';\n`);
  const source = head.join('') + body.join('');
  const offset = head.length;
  const fileName = join(ROOT, '__deploy_manifests__.ts');
  const options: ts.CompilerOptions = {
    strict: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile;
  host.getSourceFile = (name, lang, ...rest) =>
    name === fileName ? ts.createSourceFile(name, source, lang) : getSourceFile.call(host, name, lang, ...rest);
  const fileExists = host.fileExists;
  host.fileExists = (name) => name === fileName || fileExists.call(host, name);
  const program = ts.createProgram([fileName], options, host);
  const out = new Map<Manifest, string[]>(manifests.map((m) => [m, []]));
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, ' ');
    if (!d.file || d.file.fileName !== fileName || d.start === undefined) {
      out.get(manifests[0]!)!.push(`type check: ${text}`);
      continue;
    }
    const at = d.file.getLineAndCharacterOfPosition(d.start).line - offset;
    const owner = [...lines].reverse().find((l) => l.from <= at) ?? lines[0]!;
    const snippet = source.split('\n')[at + offset]?.trim();
    out.get(owner.m)!.push(`${text} (at ${snippet})`);
  }
  return out;
}

// ---- KServe: CRD structural schemas as strict JSON Schema ----

type Schema = Record<string, any>;

/** A CRD structural schema as JSON Schema: int-or-string, and unknown fields refused as the API server prunes them. */
export function strictCrdSchema(s: Schema): Schema {
  if (Array.isArray(s)) return s.map(strictCrdSchema);
  if (s === null || typeof s !== 'object') return s;
  const out: Schema = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-')) continue;
    if (k === 'properties' || k === '$defs') out[k] = Object.fromEntries(Object.entries(v as Schema).map(([p, ps]) => [p, strictCrdSchema(ps)]));
    else if (typeof v === 'object' && v !== null) out[k] = strictCrdSchema(v);
    else out[k] = v;
  }
  if (s['x-kubernetes-int-or-string']) {
    delete out.type;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (s.properties && s.additionalProperties === undefined && !s['x-kubernetes-preserve-unknown-fields']) out.additionalProperties = false;
  return out;
}

let kserveValidators: Map<string, { apiVersion: string; validate: ReturnType<Ajv['compile']> }> | undefined;

export function kserveSchemas(): { kserveVersion: string; kinds: Record<string, { apiVersion: string; schema: Schema }> } {
  return JSON.parse(readFileSync(join(ROOT, 'deploy', 'kserve', 'crd-schemas.json'), 'utf8'));
}

function kserveErrors(m: Manifest): string[] {
  if (!kserveValidators) {
    const file = JSON.parse(readFileSync(join(ROOT, 'deploy', 'kserve', 'crd-schemas.json'), 'utf8'));
    const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
    const defs = strictCrdSchema(file.$defs);
    kserveValidators = new Map();
    for (const [kind, k] of Object.entries<any>(file.kinds)) {
      kserveValidators.set(kind, { apiVersion: k.apiVersion, validate: ajv.compile({ ...strictCrdSchema(k.schema), $defs: defs }) });
    }
  }
  const v = kserveValidators.get(m.doc.kind);
  if (!v) return [`no KServe schema for kind ${m.doc.kind}`];
  if (v.apiVersion !== m.doc.apiVersion) return [`${m.doc.kind} is served as ${v.apiVersion}, not ${m.doc.apiVersion}`];
  if (v.validate(m.doc)) return [];
  return (v.validate.errors ?? []).map((e) =>
    `${e.instancePath || '/'} ${e.message}${e.keyword === 'additionalProperties' ? `: '${(e.params as { additionalProperty: string }).additionalProperty}'` : ''}`);
}

/** Paths (a.b[0].c) where two JSON values differ; arrays are compared index by index. */
export function differingPaths(a: unknown, b: unknown, path = ''): string[] {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null;
  if (!isObj(a) || !isObj(b) || Array.isArray(a) !== Array.isArray(b)) return [path];
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].flatMap((k) => differingPaths(a[k], b[k], Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k));
}
