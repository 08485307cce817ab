/**
 * Triton's JSON form of a model configuration, both ways. Reading (config.json files and the
 * `config` parameter of a load request) follows protobuf JSON: snake_case or lowerCamelCase field
 * names, enums by name (any case, as Triton parses them) or number, 64-bit integers as numbers or
 * strings, null meaning unset, member names quoted or bare identifiers (as protobuf's parser takes
 * them). A small position-keeping JSON reader lets errors name line and column
 * like the text-format parser does.
 *
 * Writing (`modelConfigToJson`, for GET /v2/models/<m>/config) mirrors Triton's ModelConfigToJson:
 * original field names, every primitive, repeated and map field printed even when default, enums by
 * name, 64-bit integers as JSON numbers; unset sub-messages and unset oneof members are left out.
 * Both directions walk the schema, so a field added to the .proto needs no code here.
 */

import {
  attachSource, ConfigError, convertLiteral, defaultValue, EXACT_INTEGERS, keepExactInteger, LiteralError, modelConfigDesc, suggestName,
  type FieldDesc, type Literal, type MessageDesc, type SourcePos,
} from './reflect.js';
import type { ModelConfig } from './model-config.js';
import { putEntry } from '../types.js';

type JsonNode = SourcePos &
  (
    | { kind: 'object'; entries: { key: string; keyPos: SourcePos; value: JsonNode }[] }
    | { kind: 'array'; items: JsonNode[] }
    | { kind: 'string'; value: string }
    | { kind: 'number'; text: string }
    | { kind: 'bool'; value: boolean }
    | { kind: 'null' }
  );

class JsonReader {
  private i = 0;
  private line = 1;
  private col = 1;

  constructor(private readonly src: string, private readonly file: string) {}

  fail(at: SourcePos, detail: string): never {
    throw new ConfigError(`invalid JSON: ${detail}`, { file: this.file, line: at.line, column: at.column });
  }

  private here(): SourcePos {
    return { line: this.line, column: this.col };
  }

  private advance(n: number): void {
    for (let k = 0; k < n; k++) {
      if (this.src[this.i] === '\n') {
        this.line++;
        this.col = 1;
      } else {
        this.col++;
      }
      this.i++;
    }
  }

  private skipSpace(): void {
    while (this.i < this.src.length && ' \t\r\n'.includes(this.src[this.i]!)) this.advance(1);
  }

  private found(): string {
    const c = this.src[this.i];
    return c === undefined ? 'end of input' : `'${c}'`;
  }

  document(): JsonNode {
    const v = this.value();
    this.skipSpace();
    if (this.i < this.src.length) this.fail(this.here(), `unexpected ${this.found()} after the JSON value`);
    return v;
  }

  private value(): JsonNode {
    this.skipSpace();
    const at = this.here();
    const c = this.src[this.i];
    if (c === '{') return this.object(at);
    if (c === '[') return this.array(at);
    if (c === '"') return { ...at, kind: 'string', value: this.string() };
    const rest = this.src.slice(this.i);
    const num = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(rest);
    if (num) {
      this.advance(num[0].length);
      return { ...at, kind: 'number', text: num[0] };
    }
    for (const [word, node] of [['true', true], ['false', false], ['null', null]] as const) {
      if (rest.startsWith(word)) {
        this.advance(word.length);
        return node === null ? { ...at, kind: 'null' } : { ...at, kind: 'bool', value: node };
      }
    }
    return this.fail(at, `expected a value, got ${this.found()}`);
  }

  private object(at: SourcePos): JsonNode {
    this.advance(1);
    const entries: { key: string; keyPos: SourcePos; value: JsonNode }[] = [];
    this.skipSpace();
    if (this.src[this.i] === '}') {
      this.advance(1);
      return { ...at, kind: 'object', entries };
    }
    for (;;) {
      this.skipSpace();
      const keyPos = this.here();
      // protobuf's JSON parser, which Triton reads a load request's config with, also takes a bare
      // identifier as a member name (L0_iterative_sequence writes `direct: {...}`).
      const bare = this.src[this.i] === '"' ? null : /^[A-Za-z_$][A-Za-z0-9_$]*/.exec(this.src.slice(this.i, this.i + 256));
      if (this.src[this.i] !== '"' && !bare) this.fail(keyPos, `expected a member name, got ${this.found()}`);
      let key: string;
      if (bare) {
        key = bare[0];
        this.advance(key.length);
      } else key = this.string();
      this.skipSpace();
      if (this.src[this.i] !== ':') this.fail(this.here(), `expected ':' after member name "${key}", got ${this.found()}`);
      this.advance(1);
      entries.push({ key, keyPos, value: this.value() });
      this.skipSpace();
      const c = this.src[this.i];
      this.advance(1);
      if (c === '}') return { ...at, kind: 'object', entries };
      if (c !== ',') this.fail({ line: this.line, column: this.col - 1 }, `expected ',' or '}' in an object, got ${c === undefined ? 'end of input' : `'${c}'`}`);
    }
  }

  private array(at: SourcePos): JsonNode {
    this.advance(1);
    const items: JsonNode[] = [];
    this.skipSpace();
    if (this.src[this.i] === ']') {
      this.advance(1);
      return { ...at, kind: 'array', items };
    }
    for (;;) {
      items.push(this.value());
      this.skipSpace();
      const c = this.src[this.i];
      this.advance(1);
      if (c === ']') return { ...at, kind: 'array', items };
      if (c !== ',') this.fail({ line: this.line, column: this.col - 1 }, `expected ',' or ']' in an array, got ${c === undefined ? 'end of input' : `'${c}'`}`);
    }
  }

  private string(): string {
    const start = this.here();
    const rest = this.src.slice(this.i);
    const m = /^"((?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)"/.exec(rest);
    if (!m) this.fail(start, 'malformed or unterminated string');
    this.advance(m[0].length);
    return JSON.parse(m[0]) as string;
  }
}

function nodeLiteral(n: JsonNode): Literal {
  switch (n.kind) {
    case 'string': return { kind: 'string', value: n.value, text: n.value };
    case 'number': return { kind: 'number', text: n.text };
    case 'bool': return { kind: 'bool', value: n.value };
    case 'object': return { kind: 'other', text: '{...}' };
    case 'array': return { kind: 'other', text: '[...]' };
    default: return { kind: 'other', text: 'null' };
  }
}

const segment = (path: string, seg: string): string => (seg.startsWith('[') ? path + seg : path ? `${path}.${seg}` : seg);

class JsonConverter {
  readonly positions = new Map<string, SourcePos>();

  constructor(private readonly file: string) {}

  private fail(at: SourcePos, path: string, detail: string): never {
    throw new ConfigError(detail, { file: this.file, line: at.line, column: at.column, fieldPath: path });
  }

  message(node: JsonNode, desc: MessageDesc, path: string): Record<string, unknown> {
    if (node.kind !== 'object') this.fail(node, path, `expected a JSON object for ${desc.fullName}, got ${nodeLiteral(node).kind === 'other' ? '[...]' : 'a scalar'}`);
    const obj: Record<string, unknown> = {};
    const seen = new Map<string, SourcePos>();
    const oneofs = new Map<string, string>();
    for (const { key, keyPos, value } of node.entries) {
      const field = desc.byName.get(key) ?? desc.byJsonName.get(key);
      const fieldPath = segment(path, field?.name ?? key);
      if (!field) {
        const hint = suggestName(key, desc.fields.map((f) => f.name));
        this.fail(keyPos, fieldPath, `unknown field '${key}' in ${desc.fullName}${hint ? ` (did you mean '${hint}'?)` : ''}`);
      }
      const first = seen.get(field.name);
      if (first) this.fail(keyPos, fieldPath, `field '${field.name}' is specified more than once (first at ${first.line}:${first.column})`);
      seen.set(field.name, keyPos);
      this.positions.set(fieldPath, keyPos);
      if (value.kind === 'null') continue;
      if (field.oneof) {
        const other = oneofs.get(field.oneof);
        if (other) this.fail(keyPos, fieldPath, `field '${field.name}' is specified along with '${other}', another member of oneof '${field.oneof}'`);
        oneofs.set(field.oneof, field.name);
      }
      obj[field.name] = this.field(value, field, fieldPath);
      if (!field.map && !field.repeated && field.kind !== 'message') keepExactInteger(obj, field.name, obj[field.name], nodeLiteral(value));
    }
    return obj;
  }

  private field(node: JsonNode, field: FieldDesc, path: string): unknown {
    if (field.map) {
      if (node.kind !== 'object') this.fail(node, path, `expected a JSON object for map field '${field.name}'`);
      const [keyField, valueField] = field.message!().fields as [FieldDesc, FieldDesc];
      const out: Record<string, unknown> = {};
      for (const { key, keyPos, value } of node.entries) {
        const entryPath = `${path}[${JSON.stringify(key)}]`;
        this.positions.set(entryPath, keyPos);
        this.literal({ kind: 'string', value: key, text: key }, keyField, keyPos, entryPath);
        putEntry(out, key, value.kind === 'null' ? defaultValue(valueField) : this.single(value, valueField, entryPath));
      }
      return out;
    }
    if (field.repeated) {
      if (node.kind !== 'array') this.fail(node, path, `expected a JSON array for repeated field '${field.name}'`);
      return node.items.map((item, i) => {
        this.positions.set(`${path}[${i}]`, item);
        return this.single(item, field, `${path}[${i}]`);
      });
    }
    return this.single(node, field, path);
  }

  private single(node: JsonNode, field: FieldDesc, path: string): unknown {
    if (field.kind === 'message') return this.message(node, field.message!(), path);
    return this.literal(nodeLiteral(node), field, node, path);
  }

  private literal(lit: Literal, field: FieldDesc, at: SourcePos, path: string): unknown {
    try {
      return convertLiteral(field, lit, true);
    } catch (err) {
      if (err instanceof LiteralError) this.fail(at, path, err.message);
      throw err;
    }
  }
}

/** Parses Triton's JSON form of a model configuration. `file` only labels errors and positions. */
export function parseConfigJson(text: string, file = 'config.json'): ModelConfig {
  const doc = new JsonReader(text.replace(/^\uFEFF/, ''), file).document();
  const conv = new JsonConverter(file);
  const cfg = conv.message(doc, modelConfigDesc, '') as ModelConfig;
  attachSource(cfg, { file, positions: conv.positions });
  return cfg;
}

// ---------------------------------------------------------------------------------------------
// Printing

function printScalar(field: FieldDesc, v: unknown): unknown {
  if (field.kind === 'enum') {
    return typeof v === 'number' ? (field.enumType!.valuesById[v] ?? v) : v;
  }
  if (typeof v === 'number' && !Number.isFinite(v)) return Number.isNaN(v) ? 'NaN' : v > 0 ? 'Infinity' : '-Infinity';
  if (typeof v === 'bigint') return Number(v);
  return v;
}

/** Marks, in a printed config, a 64-bit value to be written as these digits, unquoted (configJsonText). */
const EXACT_MARK = '\u0000tsi-exact:';

/** How a printed config writes a 64-bit value the file gave past 2^53: from its decimal digits; absent, as the safe number. */
type ExactWriter = ((digits: string) => unknown) | undefined;

function printMessage(desc: MessageDesc, obj: Record<string | symbol, unknown>, exact: ExactWriter): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const texts = exact ? obj[EXACT_INTEGERS] as Record<string, string> | undefined : undefined;
  for (const f of desc.fields) {
    const v = obj[f.name];
    if (f.map) {
      const valueField = f.message!().fields[1]!;
      const m: Record<string, unknown> = {};
      for (const [k, item] of Object.entries((v ?? {}) as Record<string, unknown>)) m[k] = printValue(valueField, item, exact);
      out[f.name] = m;
    } else if (f.repeated) {
      out[f.name] = ((v ?? []) as unknown[]).map((item) => printValue(f, item, exact));
    } else if (v === undefined || v === null) {
      // Unset messages and oneof members are absent in Triton's JSON; primitives print their default.
      if (f.kind !== 'message' && !f.oneof) out[f.name] = defaultValue(f);
    } else if (texts?.[f.name] !== undefined && typeof v === 'number' && Math.abs(v) === Number.MAX_SAFE_INTEGER) {
      out[f.name] = exact!(texts[f.name]);
    } else {
      out[f.name] = printValue(f, v, exact);
    }
  }
  return out;
}

function printValue(field: FieldDesc, v: unknown, exact: ExactWriter): unknown {
  if (field.kind === 'message') return printMessage(field.message!(), (v ?? {}) as Record<string, unknown>, exact);
  return printScalar(field, v ?? defaultValue(field));
}

/**
 * The JSON Triton serves at GET /v2/models/<m>/config (before JSON.stringify); 64-bit values past 2^53
 * as the nearest safe number (configJsonText writes them as the file did).
 */
export function modelConfigToJson(cfg: ModelConfig): Record<string, unknown> {
  return printMessage(modelConfigDesc, cfg as Record<string, unknown>, undefined);
}

/**
 * The config as gRPC's ModelConfig response carries it: modelConfigToJson's, with each 64-bit value the
 * file wrote past 2^53 as its decimal digits (a string), which protobuf's writers encode as the exact
 * uint64/int64 (Triton's clients read 18446744073709551615 back, not 2^53-1).
 */
export function modelConfigToProtoObject(cfg: ModelConfig): Record<string, unknown> {
  return printMessage(modelConfigDesc, cfg as Record<string, unknown>, (digits) => digits);
}

/**
 * GET /v2/models/<m>/config's body: modelConfigToJson's, with each 64-bit value the config file wrote
 * past 2^53 (priority_levels: 18446744073709551615) written with its exact digits, as Triton prints it
 * (L0_config_json). The number tsi works with stays the nearest safe one.
 */
export function configJsonText(cfg: ModelConfig): string {
  const text = JSON.stringify(printMessage(modelConfigDesc, cfg as Record<string, unknown>, (digits) => EXACT_MARK + digits));
  return text.replace(/"\\u0000tsi-exact:(-?\d+)"/g, '$1');
}
