/**
 * Schema reflection shared by the config parsers (text format in pbtxt.ts, JSON in json.ts)
 * and the JSON printer: a small descriptor layer over the protobufjs reflection of
 * `inference.ModelConfig` (map entries become ordinary two-field messages, so every walker handles
 * maps, repeated fields and oneofs one way), the conversion of literal values to their field types,
 * "did you mean" suggestions, and ConfigError, the error every config step throws.
 *
 * Parsed configs remember where each field came from (file, line, column by field path) in a
 * WeakMap, so that later semantic checks can point into the file without the plain objects carrying
 * positions around.
 */

import protobuf from 'protobufjs/light.js';
import { TsiError } from '../errors.js';
import { modelConfigSchema } from './model-config-schema.js';

export interface SourcePos {
  line: number;
  column: number;
}

export interface ConfigErrorWhere {
  file?: string;
  line?: number;
  column?: number;
  /** e.g. `input[1].data_type` or `parameters["k"].string_value`; empty for the whole config. */
  fieldPath?: string;
}

/**
 * A configuration error. `detail` is the bare reason (Triton's own wording where Triton has one);
 * `message` prefixes it with the location: `config.pbtxt:12:5: error at input[1].data_type: ...`.
 */
export class ConfigError extends TsiError {
  readonly file?: string;
  readonly line?: number;
  readonly column?: number;
  readonly fieldPath: string;
  readonly detail: string;

  constructor(detail: string, where: ConfigErrorWhere = {}) {
    super('INVALID_ARG', formatConfigError(detail, where));
    this.name = 'ConfigError';
    this.detail = detail;
    this.fieldPath = where.fieldPath ?? '';
    if (where.file !== undefined) this.file = where.file;
    if (where.line !== undefined) this.line = where.line;
    if (where.column !== undefined) this.column = where.column;
  }
}

function formatConfigError(detail: string, w: ConfigErrorWhere): string {
  let loc = w.file ?? '';
  if (w.line !== undefined) loc += `${loc ? ':' : ''}${w.line}:${w.column ?? 1}`;
  const at = w.fieldPath ? `error at ${w.fieldPath}` : 'error';
  return loc ? `${loc}: ${at}: ${detail}` : w.fieldPath ? `${at}: ${detail}` : detail;
}

// ---------------------------------------------------------------------------------------------
// Where parsed fields came from

export interface ConfigSource {
  file: string;
  /** Position of each field (its name token or JSON key) by field path. */
  positions: Map<string, SourcePos>;
}

const sources = new WeakMap<object, ConfigSource>();

export function attachSource(cfg: object, source: ConfigSource): void {
  sources.set(cfg, source);
}

/** Lets a derived config (normalised, auto-completed) point into the same file as its origin. */
export function inheritSource(derived: object, origin: object): void {
  const s = sources.get(origin);
  if (s) sources.set(derived, s);
}

export function sourceOf(cfg: object): ConfigSource | undefined {
  return sources.get(cfg);
}

/** A ConfigError located at `fieldPath`, or at its nearest ancestor the file mentions. */
export function errorAt(cfg: object, fieldPath: string, detail: string): ConfigError {
  const src = sources.get(cfg);
  if (!src) return new ConfigError(detail, { fieldPath });
  let p = fieldPath;
  while (p) {
    const pos = src.positions.get(p);
    if (pos) return new ConfigError(detail, { file: src.file, ...pos, fieldPath });
    p = parentPath(p);
  }
  return new ConfigError(detail, { file: src.file, fieldPath });
}

function parentPath(p: string): string {
  const m = /(\.[A-Za-z0-9_]+|\[[^\]]*\])$/.exec(p);
  return m ? p.slice(0, m.index) : '';
}

// ---------------------------------------------------------------------------------------------
// Descriptors

export type ScalarType =
  | 'double' | 'float' | 'int32' | 'uint32' | 'sint32' | 'fixed32' | 'sfixed32'
  | 'int64' | 'uint64' | 'sint64' | 'fixed64' | 'sfixed64' | 'bool' | 'string' | 'bytes';

export interface FieldDesc {
  name: string;
  /** protobuf JSON name (lowerCamelCase), also accepted when parsing JSON. */
  jsonName: string;
  kind: 'scalar' | 'enum' | 'message';
  scalar?: ScalarType;
  enumType?: protobuf.Enum;
  /** For message fields and map fields (the entry message). */
  message?: () => MessageDesc;
  repeated: boolean;
  /** Map fields: `message` is the synthetic entry with `key` and `value`. */
  map: boolean;
  oneof?: string;
}

export interface MessageDesc {
  fullName: string;
  fields: FieldDesc[];
  byName: Map<string, FieldDesc>;
  byJsonName: Map<string, FieldDesc>;
  isMapEntry: boolean;
}

const root = protobuf.Root.fromJSON(modelConfigSchema as unknown as protobuf.INamespace);
root.resolveAll();

const messageCache = new Map<protobuf.Type, MessageDesc>();

export const modelConfigDesc: MessageDesc = describeType(root.lookupType('inference.ModelConfig'));

export function lookupEnum(name: string): protobuf.Enum {
  return root.lookupEnum(name);
}

function toJsonName(name: string): string {
  return name.replace(/_(.)/g, (_, c: string) => c.toUpperCase());
}

function describeType(t: protobuf.Type): MessageDesc {
  const cached = messageCache.get(t);
  if (cached) return cached;
  const desc: MessageDesc = {
    fullName: t.fullName.replace(/^\./, ''),
    fields: [],
    byName: new Map(),
    byJsonName: new Map(),
    isMapEntry: false,
  };
  messageCache.set(t, desc);
  for (const f of t.fieldsArray) {
    f.resolve();
    const fd = f.map ? describeMapField(f as unknown as protobuf.MapField, desc.fullName) : describeField(f);
    if (f.partOf) fd.oneof = f.partOf.name;
    desc.fields.push(fd);
    desc.byName.set(fd.name, fd);
    desc.byJsonName.set(fd.jsonName, fd);
  }
  return desc;
}

function describeField(f: protobuf.Field | protobuf.MapField, asName = f.name, repeated = f.repeated): FieldDesc {
  const base = { name: asName, jsonName: toJsonName(asName), repeated, map: false };
  const rt = f.resolvedType;
  if (rt instanceof protobuf.Type) return { ...base, kind: 'message', message: () => describeType(rt) };
  if (rt instanceof protobuf.Enum) return { ...base, kind: 'enum', enumType: rt };
  return { ...base, kind: 'scalar', scalar: f.type as ScalarType };
}

function describeMapField(f: protobuf.MapField, owner: string): FieldDesc {
  const entry: MessageDesc = {
    fullName: `${owner}.${f.name}Entry`,
    fields: [
      { name: 'key', jsonName: 'key', kind: 'scalar', scalar: f.keyType as ScalarType, repeated: false, map: false },
      describeField(f, 'value', false),
    ],
    byName: new Map(),
    byJsonName: new Map(),
    isMapEntry: true,
  };
  for (const fd of entry.fields) {
    entry.byName.set(fd.name, fd);
    entry.byJsonName.set(fd.jsonName, fd);
  }
  return { name: f.name, jsonName: toJsonName(f.name), kind: 'message', message: () => entry, repeated: true, map: true };
}

/** The value a proto3 field has when unset, as it appears in our plain objects and in JSON. */
export function defaultValue(f: FieldDesc): unknown {
  if (f.map) return {};
  if (f.repeated) return [];
  if (f.kind === 'message') return {};
  if (f.kind === 'enum') return f.enumType!.valuesById[0] ?? 0;
  if (f.scalar === 'bool') return false;
  if (f.scalar === 'string' || f.scalar === 'bytes') return '';
  return 0;
}

/** Words for "what this field takes", used in type-mismatch messages. */
export function expectedWhat(f: FieldDesc): string {
  if (f.kind === 'message') return `a message (${f.message!().fullName})`;
  if (f.kind === 'enum') return `a value of ${f.enumType!.fullName.replace(/^\./, '')}`;
  switch (f.scalar) {
    case 'bool': return 'true or false';
    case 'string': case 'bytes': return 'a string';
    case 'float': case 'double': return 'a number';
    default: return 'an integer';
  }
}

// ---------------------------------------------------------------------------------------------
// Literal conversion

/** A literal as a parser saw it, before it is checked against the field's type. */
export type Literal =
  | { kind: 'number'; text: string }
  | { kind: 'ident'; text: string }
  | { kind: 'string'; value: string; text: string }
  | { kind: 'bool'; value: boolean }
  | { kind: 'other'; text: string };

/** Thrown by `convertLiteral`; the parser adds the position and field path. */
export class LiteralError extends Error {}

const INT_RANGES: Record<string, [number, number]> = {
  int32: [-(2 ** 31), 2 ** 31 - 1], sint32: [-(2 ** 31), 2 ** 31 - 1], sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1], fixed32: [0, 2 ** 32 - 1],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  sint64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  sfixed64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  uint64: [0, Number.MAX_SAFE_INTEGER], fixed64: [0, Number.MAX_SAFE_INTEGER],
};

/** The full ranges of the 64-bit types, which INT_RANGES cuts at what a number holds exactly. */
const WIDE_RANGES: Record<string, [bigint, bigint]> = {
  int64: [-(2n ** 63n), 2n ** 63n - 1n], sint64: [-(2n ** 63n), 2n ** 63n - 1n], sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n], fixed64: [0n, 2n ** 64n - 1n],
};

/** An integer literal's exact value (decimal or 0x hex), or undefined. */
function bigIntText(text: string): bigint | undefined {
  const m = /^(-?)(0[xX][0-9a-fA-F]+|[1-9][0-9]*)$/.exec(text);
  if (!m) return undefined;
  const mag = BigInt(m[2]!);
  return m[1] ? -mag : mag;
}

/**
 * Where a config object keeps the exact decimal text of a 64-bit field it holds as ±(2^53-1) (Triton's
 * configs write UINT64_MAX for "no limit"): under this symbol, by field name, so that GET /config
 * prints the value as written, as Triton does. Symbol-keyed, so spreads of the object keep it and
 * JSON.stringify does not see it.
 */
export const EXACT_INTEGERS = Symbol('exact 64-bit integer texts');

/**
 * A deep copy of a parsed config for a pipeline step to change: its source (inheritSource) and exact
 * 64-bit texts (EXACT_INTEGERS, which structuredClone drops as it drops every symbol key) come along.
 */
export function cloneConfig<T extends object>(cfg: T): T {
  const out = structuredClone(cfg);
  inheritSource(out, cfg);
  copyExactIntegers(cfg, out);
  return out;
}

function copyExactIntegers(from: unknown, to: unknown): void {
  if (typeof from !== 'object' || from === null || typeof to !== 'object' || to === null) return;
  const texts = (from as Record<symbol, unknown>)[EXACT_INTEGERS];
  if (texts) (to as Record<symbol, unknown>)[EXACT_INTEGERS] = { ...texts as object };
  for (const [k, v] of Object.entries(from)) if (typeof v === 'object') copyExactIntegers(v, (to as Record<string, unknown>)[k]);
}

/** Records `lit`'s exact value on `obj` when `value` is what convertLiteral made of a wider one. */
export function keepExactInteger(obj: Record<string | symbol, unknown>, name: string, value: unknown, lit: Literal): void {
  if (typeof value !== 'number' || Math.abs(value) !== Number.MAX_SAFE_INTEGER) return;
  const exact = bigIntText(lit.kind === 'string' ? lit.value.trim() : lit.kind === 'bool' ? '' : lit.text);
  if (exact === undefined || exact === BigInt(value)) return;
  ((obj[EXACT_INTEGERS] ??= {}) as Record<string, string>)[name] = exact.toString();
}

function shown(lit: Literal): string {
  if (lit.kind === 'bool') return String(lit.value);
  return `'${lit.text}'`;
}

/** Parses an integer literal of the text format (decimal, 0x hex, leading-0 octal), or undefined. */
function parseIntText(text: string): number | undefined {
  const m = /^(-?)(?:0[xX]([0-9a-fA-F]+)|0([0-7]*)|([1-9][0-9]*))$/.exec(text);
  if (!m) return undefined;
  const mag = m[2] !== undefined ? parseInt(m[2], 16) : m[3] !== undefined ? (m[3] ? parseInt(m[3], 8) : 0) : Number(m[4]);
  return m[1] ? -mag : mag;
}

/**
 * Converts a literal to the JS value of a scalar or enum field: numbers for every integer and float
 * type (int64 included), booleans, strings, and enum *names*. `json` selects protobuf-JSON rules
 * (integers may be quoted, enums match case-insensitively) instead of the text format's.
 */
export function convertLiteral(f: FieldDesc, lit: Literal, json: boolean): unknown {
  if (f.kind === 'enum') return convertEnum(f.enumType!, lit, json);
  const t = f.scalar!;
  if (t === 'string' || t === 'bytes') {
    if (lit.kind === 'string') return lit.value;
    throw new LiteralError(`expected a string, got ${shown(lit)}`);
  }
  if (t === 'bool') {
    if (lit.kind === 'bool') return lit.value;
    if (!json && (lit.kind === 'ident' || lit.kind === 'number')) {
      if (['true', 'True', 't', '1'].includes(lit.text)) return true;
      if (['false', 'False', 'f', '0'].includes(lit.text)) return false;
    }
    throw new LiteralError(`expected true or false, got ${shown(lit)}`);
  }
  if (t === 'float' || t === 'double') {
    const v = parseFloatLiteral(lit, json);
    if (v === undefined) throw new LiteralError(`expected a number, got ${shown(lit)}`);
    return v;
  }
  let v: number | undefined;
  if (lit.kind === 'number') v = json ? jsonInteger(lit.text) : parseIntText(lit.text);
  else if (json && lit.kind === 'string') v = jsonInteger(lit.value.trim());
  // config.pbtxt errors keep the words of protobuf's text-format parser, which Triton reports (its qa
  // greps for them: L0_simple_ensemble's invalid max_inflight_requests), with tsi's detail after them.
  if (v === undefined) throw new LiteralError(json ? `expected an integer, got ${shown(lit)}` : `Expected integer, got: ${lit.kind === 'bool' ? lit.value : lit.text}`);
  const [lo, hi] = INT_RANGES[t] ?? [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER];
  // A 64-bit value past 2^53 that its type holds (Triton's tests write UINT64_MAX for "no limit") reads
  // as the nearest safe number: the same thing for the counts, sizes and durations such fields hold.
  const wide = WIDE_RANGES[t];
  if (wide && (v < lo || v > hi)) {
    const exact = bigIntText(lit.kind === 'string' ? lit.value.trim() : lit.kind === 'bool' ? '' : lit.text);
    if (exact !== undefined && exact >= wide[0] && exact <= wide[1]) return exact < 0n ? lo : hi;
  }
  if (v < lo || v > hi) {
    const why = hi === Number.MAX_SAFE_INTEGER ? ' (tsi keeps 64-bit integers as JavaScript numbers)' : '';
    const detail = `value ${v} is out of range for ${t}${why}`;
    if (json) throw new LiteralError(detail);
    // protobuf reads a '-' where an unsigned integer goes as a token it did not expect.
    throw new LiteralError(`${v < 0 && lo === 0 ? 'Expected integer, got: -' : `Integer out of range (${lit.kind === 'bool' ? v : lit.text})`}; ${detail}`);
  }
  return v;
}

function jsonInteger(text: string): number | undefined {
  if (!/^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(text)) return undefined;
  const v = Number(text);
  return Number.isInteger(v) ? v : undefined;
}

function parseFloatLiteral(lit: Literal, json: boolean): number | undefined {
  let text: string;
  if (lit.kind === 'number' || lit.kind === 'ident') text = lit.text;
  else if (json && lit.kind === 'string') text = lit.value;
  else return undefined;
  const neg = text.startsWith('-');
  const body = neg ? text.slice(1) : text;
  const special = body.toLowerCase();
  if (json ? body === 'Infinity' : special === 'inf' || special === 'infinity') return neg ? -Infinity : Infinity;
  if (json ? body === 'NaN' : special === 'nan') return NaN;
  if (!json && /^0[xX]/.test(body)) return parseIntText(text);
  const m = /^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?([fF]?)$/.exec(body);
  if (!m || (json && m[3])) return undefined;
  const v = Number(body.replace(/[fF]$/, ''));
  return neg ? -v : v;
}

function convertEnum(e: protobuf.Enum, lit: Literal, json: boolean): string {
  const enumName = e.fullName.replace(/^\./, '');
  const byNumber = (n: number): string => {
    const name = e.valuesById[n];
    if (name === undefined) throw new LiteralError(`unknown enum number ${n} for ${enumName}`);
    return name;
  };
  if (lit.kind === 'number') {
    const n = json ? jsonInteger(lit.text) : parseIntText(lit.text);
    if (n !== undefined) return byNumber(n);
  }
  const text = lit.kind === 'ident' ? lit.text : json && lit.kind === 'string' ? lit.value : undefined;
  if (text === undefined) throw new LiteralError(`expected a value of ${enumName}, got ${shown(lit)}`);
  if (Object.prototype.hasOwnProperty.call(e.values, text)) return text;
  const names = Object.keys(e.values);
  if (json) {
    // Triton parses JSON configs with case-insensitive enum names.
    const ci = names.find((n) => n.toLowerCase() === text.toLowerCase());
    if (ci) return ci;
  }
  const hint = suggestEnumValue(text, names);
  const tail = hint ? ` (did you mean '${hint}'?)` : names.length <= 16 ? ` (expected one of ${names.join(', ')})` : '';
  throw new LiteralError(`unknown enum value '${text}'${tail}`);
}

// ---------------------------------------------------------------------------------------------
// Suggestions

export function levenshtein(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j]!;
      prev[j] = Math.min(up + 1, prev[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length]!;
}

const squash = (s: string): string => s.toLowerCase().replace(/_/g, '');

/** The candidate nearest to `name` (same words in another case or spelling first), if any is close. */
export function suggestName(name: string, candidates: readonly string[]): string | undefined {
  const exactish = candidates.find((c) => squash(c) === squash(name));
  if (exactish) return exactish;
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = levenshtein(name.toLowerCase(), c.toLowerCase());
    if (d < bestD) {
      best = c;
      bestD = d;
    }
  }
  if (bestD <= Math.max(2, Math.ceil(name.length * 0.4))) return best;
  // A truncated or extended name, as in `max_batch` for `max_batch_size`.
  const low = name.toLowerCase();
  const related = candidates.filter((c) => {
    const lc = c.toLowerCase();
    return Math.min(lc.length, low.length) >= 3 && (lc.startsWith(low) || low.startsWith(lc));
  });
  return related.sort((a, b) => Math.abs(a.length - name.length) - Math.abs(b.length - name.length))[0];
}

// Spellings people bring from numpy, ONNX or the wire protocol, mapped to the config's words.
const ENUM_SYNONYMS: [RegExp, string][] = [
  [/FLOAT32$|FLOAT$|SINGLE$/, 'FP32'], [/FLOAT16$|HALF$/, 'FP16'], [/FLOAT64$|DOUBLE$/, 'FP64'],
  [/BFLOAT16$/, 'BF16'], [/BYTES$|STR$/, 'STRING'], [/BOOLEAN$/, 'BOOL'],
];

function suggestEnumValue(text: string, names: string[]): string | undefined {
  const upper = text.toUpperCase();
  for (const [re, word] of ENUM_SYNONYMS) {
    const candidate = upper.replace(re, word);
    if (re.test(upper) && names.includes(candidate)) return candidate;
  }
  // A missing prefix, as in `data_type: FP32` or `kind: GPU`.
  const prefixed = names.find((n) => n.endsWith(`_${upper}`));
  if (prefixed) return prefixed;
  return suggestName(text, names);
}
