/**
 * Structured output's grammars: a JSON schema (or OpenAI's `response_format`, or a forced tool call)
 * compiled to the node tree grammar.ts's automaton walks, with each node's shortest JSON text (what
 * keeps an answer closable). Keywords a node cannot enforce are refused by name, never ignored.
 */

import { TsiError } from '../errors.js';
import { grammarError, type Cfg } from './grammar-cfg.js';

type Json = Record<string, any>;

/** A compiled schema. */
export type GNode =
  | { k: 'any' }
  | { k: 'anyobject' }
  | { k: 'object'; props: { lit: string; node: GNode; required: boolean }[] }
  | { k: 'array'; items: GNode; min: number; max: number }
  | { k: 'string'; min: number; max: number }
  | { k: 'number'; integer: boolean }
  | { k: 'literal'; options: string[] }
  | { k: 'union'; options: GNode[] }
  /** One of several fixed openings, each followed by its own value and closing (a tool call per function). */
  | { k: 'choice'; options: { lit: string; node: GNode; tail: string }[] }
  /** A regular expression, a GBNF grammar or a list of choices (grammar-cfg.ts). */
  | { k: 'cfg'; cfg: Cfg }
  /**
   * vLLM's structural_tag: free text in which a trigger opens a tag (its begin, a JSON value, its
   * end), free text again after it; `open`: per trigger, the tags it opens, as the rest of their begin.
   */
  | { k: 'tags'; open: { trigger: string; tags: Extract<GNode, { k: 'choice' }> }[]; atLeastOne: boolean; stopAfterFirst: boolean };

/** Longest key written for a schema-less object, and digits of an integer part (keeps it exact in a double). */
export const FREE_KEY_MAX = 32;
export const INT_DIGITS_MAX = 15;

const REFUSED = ['pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'patternProperties',
  'allOf', 'not', 'if', 'then', 'else', 'oneOf', 'minProperties', 'maxProperties', 'prefixItems', 'contains', 'dependentRequired',
  'dependentSchemas', 'propertyNames', 'unevaluatedProperties', 'unevaluatedItems'];

const bad = (msg: string) => new TsiError('INVALID_ARG', msg);

/** A JSON schema as a grammar node; keywords it cannot enforce are refused by name. */
export function compileSchema(schema: unknown, root: Json = schema as Json, path = '#', refs = new Map<string, GNode>()): GNode {
  if (schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0)) return { k: 'any' };
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) throw bad(`the JSON schema at ${path} must be an object`);
  const s = schema as Json;
  for (const k of REFUSED) {
    if (s[k] !== undefined && !(k === 'uniqueItems')) throw bad(`the JSON schema keyword '${k}' (at ${path}) is not supported in structured output`);
  }
  if (s.uniqueItems === true) throw bad(`the JSON schema keyword 'uniqueItems' (at ${path}) is not supported in structured output`);
  if (typeof s.$ref === 'string') {
    const hit = refs.get(s.$ref);
    if (hit) return hit;
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(s.$ref);
    const target = m ? root?.[m[1]!]?.[m[2]!] : undefined;
    if (!target) throw bad(`the JSON schema's $ref '${s.$ref}' (at ${path}) does not name an entry of #/$defs or #/definitions`);
    // A placeholder first, filled in place, so recursive schemas compile.
    const node = { k: 'any' } as GNode;
    refs.set(s.$ref, node);
    Object.assign(node, compileSchema(target, root, s.$ref, refs));
    return node;
  }
  if (s.const !== undefined) return { k: 'literal', options: [JSON.stringify(s.const)] };
  if (Array.isArray(s.enum)) {
    if (s.enum.length === 0) throw bad(`the JSON schema's enum at ${path} is empty`);
    return { k: 'literal', options: s.enum.map((v: unknown) => JSON.stringify(v)) };
  }
  if (Array.isArray(s.anyOf)) return union(s.anyOf.map((x: unknown, i: number) => compileSchema(x, root, `${path}/anyOf/${i}`, refs)), path);
  if (Array.isArray(s.type)) return union(s.type.map((t: unknown) => compileSchema({ ...s, type: t }, root, path, refs)), path);
  const type = s.type ?? (s.properties ? 'object' : s.items ? 'array' : undefined);
  switch (type) {
    case undefined: return { k: 'any' };
    case 'object': {
      const props = Object.entries((s.properties ?? {}) as Json);
      if (props.length === 0) return { k: 'anyobject' };
      const required = new Set(Array.isArray(s.required) ? s.required : []);
      return {
        k: 'object',
        props: props.map(([key, sub]) => ({ lit: `${JSON.stringify(key)}:`, node: compileSchema(sub, root, `${path}/properties/${key}`, refs), required: required.has(key) })),
      };
    }
    case 'array': return { k: 'array', items: compileSchema(s.items ?? {}, root, `${path}/items`, refs), min: s.minItems ?? 0, max: s.maxItems ?? Infinity };
    case 'string': return { k: 'string', min: s.minLength ?? 0, max: s.maxLength ?? Infinity };
    case 'number': return { k: 'number', integer: false };
    case 'integer': return { k: 'number', integer: true };
    case 'boolean': return { k: 'literal', options: ['true', 'false'] };
    case 'null': return { k: 'literal', options: ['null'] };
    default: throw bad(`the JSON schema type ${JSON.stringify(type)} at ${path} is not one of object, array, string, number, integer, boolean, null`);
  }
}

/** Alternatives told apart by their first character (that is what keeps the matcher deterministic). */
function union(options: GNode[], path: string): GNode {
  const seen = new Set<string>();
  for (const o of options) {
    const first = firstChars(o);
    for (const c of first) {
      if (seen.has(c)) throw bad(`the JSON schema's alternatives at ${path} can start alike ('${c}'); alternatives of different types are supported`);
      seen.add(c);
    }
  }
  return { k: 'union', options };
}

export function firstChars(n: GNode): string[] {
  switch (n.k) {
    case 'any': return ['{', '[', '"', '-', ...'0123456789', 't', 'f', 'n'];
    case 'anyobject': case 'object': return ['{'];
    case 'array': return ['['];
    case 'string': return ['"'];
    case 'number': return ['-', ...'0123456789'];
    case 'literal': return [...new Set(n.options.map((o) => o[0]!))];
    case 'union': return n.options.flatMap(firstChars);
    case 'choice': return [...new Set(n.options.map((o) => o.lit[0]!))];
    // Never an alternative of a JSON schema's union.
    case 'cfg': case 'tags': return [];
  }
}

/** The fewest characters a value of `n` takes (memoised; a schema that recurses through a required field counts as long). */
const minMemo = new WeakMap<GNode, number>();
export function minLen(n: GNode): number {
  const hit = minMemo.get(n);
  if (hit !== undefined) return hit;
  minMemo.set(n, 1e6);
  let v: number;
  switch (n.k) {
    case 'any': v = 1; break;
    case 'anyobject': v = 2; break;
    case 'object': v = 1 + requiredLen(n.props, 0); break;
    case 'array': v = 2 + n.min * minLen(n.items) + Math.max(n.min - 1, 0); break;
    case 'string': v = 2 + n.min; break;
    case 'number': v = 1; break;
    case 'literal': v = Math.min(...n.options.map((o) => o.length)); break;
    case 'union': v = Math.min(...n.options.map(minLen)); break;
    case 'choice': v = Math.min(...n.options.map((o) => o.lit.length + minLen(o.node) + o.tail.length)); break;
    case 'cfg': v = n.cfg.start.min; break;
    case 'tags': v = n.atLeastOne ? Math.min(...n.open.map((o) => o.trigger.length + minLen(o.tags))) : 0; break;
  }
  minMemo.set(n, v);
  return v;
}

export type Prop = { lit: string; node: GNode; required: boolean };

/** Characters of the required properties from `i` on, with their commas, and the closing brace. */
export function requiredLen(props: Prop[], i: number): number {
  let n = 0;
  let count = 0;
  for (let j = i; j < props.length; j++) if (props[j]!.required) {
    n += props[j]!.lit.length + minLen(props[j]!.node);
    count++;
  }
  return n + Math.max(count - 1, 0) + 1;
}

export const hasRequired = (props: Prop[], i: number) => props.slice(i).some((p) => p.required);

/** The keys that may come next: any property from i up to (and including) the first required one. */
export function keyCandidates(props: Prop[], i: number): number[] {
  const keys: number[] = [];
  for (let j = i; j < props.length; j++) {
    keys.push(j);
    if (props[j]!.required) break;
  }
  return keys;
}

/**
 * A forced tool call: one of the functions, as `{"name":"<name>","<argsKey>":<its parameters>}`
 * (tools.ts gives the format of the model's tool-call parser).
 */
export function toolCallGrammar(spec: Json): GNode {
  const fns = spec.functions;
  if (!Array.isArray(fns) || fns.length === 0) throw bad(`'guided_tool_call' must name at least one function`);
  return {
    k: 'choice',
    options: fns.map((f: Json, i: number) => ({
      lit: `{"name":${JSON.stringify(String(f.name))},${JSON.stringify(String(spec.argsKey ?? 'arguments'))}:`,
      node: compileSchema(f.parameters ?? { type: 'object' }, f.parameters, `#/functions/${i}/parameters`),
      tail: '}',
    })),
  };
}

/** OpenAI's `response_format` (or generate's `response_format` / `guided_json`) as a grammar root. */
export function responseFormatGrammar(format: unknown): GNode | undefined {
  if (format === undefined || format === null) return undefined;
  if (typeof format !== 'object' || Array.isArray(format)) throw bad(`'response_format' must be an object such as {"type": "json_object"}`);
  const f = format as Json;
  switch (f.type) {
    case 'text': return undefined;
    case 'json_object': return { k: 'anyobject' };
    case 'json_schema': {
      const schema = f.json_schema?.schema;
      if (typeof schema !== 'object' || schema === null) throw bad(`'response_format.json_schema.schema' must be a JSON schema object`);
      return compileSchema(schema);
    }
    // vLLM's: the tag spec is the format object itself.
    case 'structural_tag': return structuralTagGrammar('response_format', f);
    default: throw bad(`'response_format' type ${JSON.stringify(f.type)} is not supported: 'text', 'json_object', 'json_schema' or 'structural_tag'`);
  }
}

/**
 * vLLM's structural_tag (as JSON text or an object), in either of the shapes vLLM takes: its first
 * `{"type": "structural_tag", "structures": [{begin, schema, end}], "triggers": [...]}`, or xgrammar's
 * `{"type": "structural_tag", "format": {"type": "triggered_tags", "triggers", "tags": [{begin,
 * content: {"type": "json_schema", json_schema}, end}], at_least_one, stop_after_first}}`. Each tag's
 * begin starts with a trigger; triggers that contain one another, and begins one of which starts
 * another, are refused (which tag a text opens would be ambiguous).
 */
export function structuralTagGrammar(field: string, v: unknown): GNode {
  let spec = v;
  if (typeof spec === 'string') {
    try {
      spec = JSON.parse(spec);
    } catch {
      throw grammarError(field, 'must be a structural tag (an object, or its JSON text)');
    }
  }
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) throw grammarError(field, 'must be a structural tag (an object, or its JSON text)');
  const st = spec as Json;
  let triggers: unknown;
  let tags: { begin: unknown; schema: unknown; end: unknown; at: string }[];
  let atLeastOne = false;
  let stopAfterFirst = false;
  if (st.structures !== undefined) {
    if (!Array.isArray(st.structures)) throw grammarError(field, "'structures' must be a list of {begin, schema, end}");
    triggers = st.triggers;
    tags = st.structures.map((x: Json, i: number) => ({ begin: x?.begin, schema: x?.schema, end: x?.end, at: `structures[${i}]` }));
  } else if (typeof st.format === 'object' && st.format !== null) {
    const f = st.format as Json;
    if (f.type !== 'triggered_tags') throw grammarError(field, `format type ${JSON.stringify(f.type)} is not supported ('triggered_tags' is, and the 'structures' + 'triggers' form)`);
    if (!Array.isArray(f.tags)) throw grammarError(field, "'format.tags' must be a list of {begin, content, end}");
    triggers = f.triggers;
    atLeastOne = f.at_least_one === true;
    stopAfterFirst = f.stop_after_first === true;
    tags = f.tags.map((x: Json, i: number) => {
      const at = `format.tags[${i}]`;
      if (x?.content?.type !== 'json_schema') throw grammarError(field, `${at}.content type ${JSON.stringify(x?.content?.type)} is not supported ('json_schema' is)`);
      return { begin: x.begin, schema: x.content.json_schema, end: x.end, at };
    });
  } else throw grammarError(field, "must have 'structures' and 'triggers', or a 'format' of type 'triggered_tags'");
  if (!Array.isArray(triggers) || triggers.length === 0 || triggers.some((t) => typeof t !== 'string' || t === '')) throw grammarError(field, "'triggers' must be a non-empty list of non-empty strings");
  const trig = triggers as string[];
  for (const a of trig) for (const b of trig) if (a !== b && b.includes(a)) throw grammarError(field, `trigger ${JSON.stringify(a)} is part of trigger ${JSON.stringify(b)}`);
  if (tags.length === 0) throw grammarError(field, 'must have at least one tag');
  const compiled = tags.map((t) => {
    if (typeof t.begin !== 'string' || typeof t.end !== 'string') throw grammarError(field, `${t.at} must have string 'begin' and 'end'`);
    const trigger = trig.find((x) => (t.begin as string).startsWith(x));
    if (trigger === undefined) throw grammarError(field, `${t.at}.begin ${JSON.stringify(t.begin)} starts with none of the triggers`);
    if (typeof t.schema !== 'object' || t.schema === null) throw grammarError(field, `${t.at} must have a JSON schema object`);
    let node: GNode;
    try {
      node = compileSchema(t.schema, t.schema as Json, `#/${t.at}`);
    } catch (err) {
      throw grammarError(field, (err as Error).message);
    }
    return { begin: t.begin, end: t.end, trigger, node };
  });
  for (const a of compiled) for (const b of compiled) if (a !== b && b.begin.startsWith(a.begin)) throw grammarError(field, `tag begin ${JSON.stringify(a.begin)} also starts tag begin ${JSON.stringify(b.begin)}`);
  const open = trig.map((trigger) => ({
    trigger,
    tags: { k: 'choice' as const, options: compiled.filter((t) => t.trigger === trigger).map((t) => ({ lit: t.begin.slice(trigger.length), node: t.node, tail: t.end })) },
  })).filter((o) => o.tags.options.length > 0);
  // A trigger that opens no tag would only forbid its own text: refused, as a mistake.
  if (open.length < trig.length) throw grammarError(field, `trigger ${JSON.stringify(trig.find((t) => !open.some((o) => o.trigger === t)))} opens no tag (no begin starts with it)`);
  return { k: 'tags', open, atLeastOne, stopAfterFirst };
}
