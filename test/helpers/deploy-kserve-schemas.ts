/**
 * Writes deploy/kserve/crd-schemas.json, the schemas test/node/deploy-manifests.test.ts checks the
 * KServe objects against: the `openAPIV3Schema` of KServe's ServingRuntime and InferenceService CRDs
 * (their storage versions) exactly as KServe publishes them, less the `description` texts, with
 * identical subtrees of more than 400 characters (the container and pod schemas KServe repeats for
 * every predictor framework) stored once under `$defs` and referenced, which takes 700 kB to 80 kB
 * and changes nothing a validator sees. Run it on a KServe checkout at the release to pin:
 *   npx tsx test/helpers/deploy-kserve-schemas.ts <kserve checkout> <version, e.g. v0.20.0>
 */

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const CRDS = ['servingruntimes', 'inferenceservices'];
const MIN_SHARED = 400;

/** Drops `description` keys and sorts object keys, so equal subtrees print equal. */
function strip(o: Json): Json {
  if (Array.isArray(o)) return o.map(strip);
  if (o === null || typeof o !== 'object') return o;
  const r: { [k: string]: Json } = {};
  for (const k of Object.keys(o).sort()) if (k !== 'description') r[k] = strip(o[k]!);
  return r;
}

/** The sub-schemas of a schema node: the values of `properties`, `items`, `additionalProperties`, `*Of`. */
function children(o: { [k: string]: Json }): { [k: string]: Json }[] {
  const out: Json[] = [];
  const props = o.properties;
  if (props && typeof props === 'object' && !Array.isArray(props)) out.push(...Object.values(props));
  for (const k of ['items', 'additionalProperties', 'not']) if (o[k] !== undefined) out.push(o[k]!);
  for (const k of ['allOf', 'anyOf', 'oneOf']) if (Array.isArray(o[k])) out.push(...(o[k] as Json[]));
  return out.filter((x): x is { [k: string]: Json } => x !== null && typeof x === 'object' && !Array.isArray(x));
}

/**
 * Replaces every schema node that occurs more than once (and is big) with a `$ref` to one copy.
 * Only schema positions are shared, never a `properties` map or a `required` list.
 */
function share(roots: Record<string, Json>): { roots: Record<string, Json>; defs: Record<string, Json> } {
  const seen = new Map<string, number>();
  const count = (o: { [k: string]: Json }): void => {
    const s = JSON.stringify(o);
    if (s.length > MIN_SHARED) seen.set(s, (seen.get(s) ?? 0) + 1);
    children(o).forEach(count);
  };
  Object.values(roots).forEach((r) => count(r as { [k: string]: Json }));
  const defs: Record<string, Json> = {};
  const names = new Map<string, string>();
  const rewrite = (o: { [k: string]: Json }, isDef: boolean): Json => {
    const s = JSON.stringify(o);
    if (!isDef && s.length > MIN_SHARED && seen.get(s)! > 1) {
      let name = names.get(s);
      if (!name) {
        name = `s${names.size}`;
        names.set(s, name);
        defs[name] = rewrite(o, true);
      }
      return { $ref: `#/$defs/${name}` };
    }
    const sub = (x: Json): Json => (x !== null && typeof x === 'object' && !Array.isArray(x) ? rewrite(x, false) : x);
    const r: { [k: string]: Json } = { ...o };
    if (o.properties && typeof o.properties === 'object' && !Array.isArray(o.properties)) {
      r.properties = Object.fromEntries(Object.entries(o.properties).map(([k, v]) => [k, sub(v)]));
    }
    for (const k of ['items', 'additionalProperties', 'not']) if (o[k] !== undefined) r[k] = sub(o[k]!);
    for (const k of ['allOf', 'anyOf', 'oneOf']) if (Array.isArray(o[k])) r[k] = (o[k] as Json[]).map(sub);
    return r;
  };
  return { roots: Object.fromEntries(Object.entries(roots).map(([k, v]) => [k, rewrite(v as { [k: string]: Json }, false)])), defs };
}

const [checkout, version] = process.argv.slice(2);
if (!checkout || !version) {
  process.stderr.write('usage: npx tsx test/helpers/deploy-kserve-schemas.ts <kserve checkout> <version>\n');
  process.exit(1);
}
const kinds: Record<string, { apiVersion: string; crd: string }> = {};
const roots: Record<string, Json> = {};
for (const name of CRDS) {
  const file = `config/crd/full/serving.kserve.io_${name}.yaml`;
  const crd = parse(readFileSync(join(checkout, file), 'utf8'));
  const v = crd.spec.versions.find((x: { storage: boolean }) => x.storage);
  kinds[crd.spec.names.kind] = { apiVersion: `${crd.spec.group}/${v.name}`, crd: file };
  roots[crd.spec.names.kind] = strip(v.schema.openAPIV3Schema);
}
const shared = share(roots);
const out = {
  source: `KServe ${version} (github.com/kserve/kserve), openAPIV3Schema of the storage versions, descriptions removed, repeated subtrees under $defs; written by test/helpers/deploy-kserve-schemas.ts`,
  kserveVersion: version,
  kinds: Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, { ...v, schema: shared.roots[k] }])),
  $defs: shared.defs,
};
const target = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'deploy', 'kserve', 'crd-schemas.json');
writeFileSync(target, JSON.stringify(out) + '\n');
process.stdout.write(`wrote ${target}: ${Object.keys(kinds).join(', ')}, ${Object.keys(shared.defs).length} shared subtrees\n`);
