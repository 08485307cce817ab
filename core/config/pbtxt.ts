/**
 * A parser for the protobuf text format (config.pbtxt), driven by the ModelConfig schema rather than
 * by generated classes, so it yields the same plain snake_case object as the JSON parser and runs in
 * browsers. It follows what Triton's C++ TextFormat parser accepts: `#` comments, `:` optional before
 * messages, `{}` or `<>` braces, `[a, b]` lists or repeated entries, map fields as repeated
 * `{ key: .. value: .. }` entries, enum names or numbers, both quote kinds with C escapes and adjacent
 * string concatenation, and `,` or `;` between fields.
 *
 * Errors are ConfigErrors naming file, line, column (1-based) and the field path, with a
 * suggestion for misspelt field and enum names.
 */

import {
  attachSource, ConfigError, convertLiteral, defaultValue, expectedWhat, keepExactInteger, LiteralError, modelConfigDesc,
  suggestName,
  type FieldDesc, type Literal, type MessageDesc, type SourcePos,
} from './reflect.js';
import type { ModelConfig } from './model-config.js';
import { putEntry } from '../types.js';

type TokenKind = 'ident' | 'number' | 'string' | 'symbol' | 'other' | 'eof';

interface Token extends SourcePos {
  kind: TokenKind;
  /** Source text (for strings: the decoded value is in `value`). */
  text: string;
  value?: string;
}

const SYMBOLS = '{}<>[]:,;-/';
const STOP = new Set([...' \t\r\n\f\v', ...'{}<>[]:,;#"\'']);

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

class Lexer {
  private i = 0;
  private line = 1;
  private col = 1;
  private peeked: Token | undefined;

  constructor(private readonly src: string, private readonly file: string) {}

  peek(): Token {
    return (this.peeked ??= this.scan());
  }

  next(): Token {
    const t = this.peek();
    this.peeked = undefined;
    return t;
  }

  fail(at: SourcePos, detail: string, fieldPath = ''): never {
    throw new ConfigError(detail, { file: this.file, line: at.line, column: at.column, fieldPath });
  }

  private advance(n = 1): void {
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

  private scan(): Token {
    const s = this.src;
    for (;;) {
      const c = s[this.i];
      if (c === undefined) return { kind: 'eof', text: '', line: this.line, column: this.col };
      if (c === '#') {
        while (this.i < s.length && s[this.i] !== '\n') this.advance();
      } else if (/\s/.test(c)) {
        this.advance();
      } else {
        break;
      }
    }
    const start = { line: this.line, column: this.col };
    const c = s[this.i]!;
    const rest = s.slice(this.i);
    if (c === '"' || c === "'") return { ...start, ...this.scanString(c) };
    let m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(rest);
    let kind: TokenKind = 'ident';
    if (!m) {
      m = /^(0[xX][0-9a-fA-F]+|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[fF]?)/.exec(rest);
      kind = 'number';
    }
    if (m && !(kind === 'number' && rest.length > m[0].length && !STOP.has(rest[m[0].length]!) && !SYMBOLS.includes(rest[m[0].length]!))) {
      this.advance(m[0].length);
      return { ...start, kind, text: m[0] };
    }
    if (SYMBOLS.includes(c)) {
      this.advance();
      return { ...start, kind: 'symbol', text: c };
    }
    // Anything else up to a delimiter, so that `max_batch_size: $MAX` reports the whole word.
    let j = this.i;
    while (j < s.length && !STOP.has(s[j]!)) j++;
    const text = s.slice(this.i, Math.max(j, this.i + 1));
    this.advance(text.length);
    return { ...start, kind: 'other', text };
  }

  private scanString(quote: string): { kind: TokenKind; text: string; value: string } {
    const s = this.src;
    const begin = { line: this.line, column: this.col };
    const startIdx = this.i;
    this.advance();
    const bytes: number[] = [];
    const pushText = (t: string): void => {
      for (const b of utf8.encode(t)) bytes.push(b);
    };
    for (;;) {
      const c = s[this.i];
      if (c === undefined || c === '\n') this.fail(begin, 'unterminated string literal');
      if (c === quote) {
        this.advance();
        break;
      }
      if (c !== '\\') {
        const cp = s.codePointAt(this.i)!;
        const ch = String.fromCodePoint(cp);
        pushText(ch);
        this.advance(ch.length);
        continue;
      }
      const escAt = { line: this.line, column: this.col };
      const e = s[this.i + 1];
      const simple: Record<string, number> = {
        n: 10, t: 9, r: 13, a: 7, b: 8, f: 12, v: 11, '\\': 92, "'": 39, '"': 34, '?': 63,
      };
      if (e !== undefined && e in simple) {
        bytes.push(simple[e]!);
        this.advance(2);
        continue;
      }
      const tail = s.slice(this.i + 1);
      let m: RegExpExecArray | null;
      if ((m = /^[0-7]{1,3}/.exec(tail))) {
        bytes.push(parseInt(m[0], 8) & 0xff);
      } else if ((m = /^[xX]([0-9a-fA-F]{1,2})/.exec(tail))) {
        bytes.push(parseInt(m[1]!, 16));
      } else if ((m = /^u([0-9a-fA-F]{4})|^U([0-9a-fA-F]{8})/.exec(tail))) {
        pushText(String.fromCodePoint(parseInt(m[1] ?? m[2]!, 16)));
      } else {
        this.fail(escAt, `invalid escape sequence '\\${e ?? ''}' in string literal`);
      }
      this.advance(1 + m[0].length);
    }
    return { kind: 'string', text: s.slice(startIdx, this.i), value: fromUtf8.decode(new Uint8Array(bytes)) };
  }
}

/** Field paths as segments: `.name` or `[i]` / `["key"]`. */
function joinPath(segs: readonly string[]): string {
  return segs.map((s, i) => (s.startsWith('[') || i === 0 ? s : `.${s}`)).join('');
}

const pos = (p: SourcePos): SourcePos => ({ line: p.line, column: p.column });

function describe(t: Token): string {
  return t.kind === 'eof' ? 'end of file' : `'${t.text}'`;
}

class Parser {
  readonly positions = new Map<string, SourcePos>();

  constructor(private readonly lx: Lexer) {}

  parseMessage(desc: MessageDesc, path: string[], close: { sym: string; open: Token; what: string } | null): Record<string, unknown> {
    const obj: Record<string, unknown> = {};
    const seen = new Map<string, SourcePos>();
    const oneofs = new Map<string, string>();
    for (;;) {
      const t = this.lx.peek();
      if (close && t.kind === 'symbol' && t.text === close.sym) {
        this.lx.next();
        return obj;
      }
      if (t.kind === 'eof') {
        if (!close) return obj;
        this.lx.fail(t, `unexpected end of file: expected '${close.sym}' to close ${close.what} opened at ${close.open.line}:${close.open.column}`, joinPath(path));
      }
      if (t.kind === 'symbol' && t.text === '[') {
        this.lx.fail(t, 'extension and Any fields are not supported in a model configuration', joinPath(path));
      }
      if (t.kind !== 'ident') {
        this.lx.fail(t, `expected a field name, got ${describe(t)}`, joinPath(path));
      }
      this.lx.next();
      const field = desc.byName.get(t.text);
      const fieldPath = [...path, ...(desc.isMapEntry && t.text === 'value' ? [] : [t.text])];
      if (!field) {
        const hint = suggestName(t.text, desc.fields.map((f) => f.name));
        const tail = hint ? ` (did you mean '${hint}'?)` : '';
        this.lx.fail(t, `unknown field '${t.text}' in ${desc.fullName}${tail}`, joinPath([...path, t.text]));
      }
      if (!field.repeated) {
        const first = seen.get(field.name);
        if (first) {
          this.lx.fail(t, `non-repeated field '${field.name}' is specified multiple times (first at ${first.line}:${first.column})`, joinPath(fieldPath));
        }
        seen.set(field.name, t);
      }
      if (field.oneof) {
        const other = oneofs.get(field.oneof);
        if (other && other !== field.name) {
          this.lx.fail(t, `field '${field.name}' is specified along with '${other}', another member of oneof '${field.oneof}'`, joinPath(fieldPath));
        }
        oneofs.set(field.oneof, field.name);
      }
      if (!this.positions.has(joinPath(fieldPath))) this.positions.set(joinPath(fieldPath), pos(t));
      this.parseField(obj, field, fieldPath, t);
      if (desc.isMapEntry && field.name === 'key' && typeof obj.key !== 'object') {
        path[path.length - 1] = `[${JSON.stringify(String(obj.key))}]`;
      }
      const sep = this.lx.peek();
      if (sep.kind === 'symbol' && (sep.text === ',' || sep.text === ';')) this.lx.next();
    }
  }

  private parseField(obj: Record<string, unknown>, field: FieldDesc, path: string[], nameTok: Token): void {
    const isMessage = field.kind === 'message';
    let t = this.lx.peek();
    if (t.kind === 'symbol' && t.text === ':') {
      this.lx.next();
      t = this.lx.peek();
    } else if (!isMessage) {
      this.lx.fail(t, `expected ':' after field name '${field.name}', got ${describe(t)}`, joinPath(path));
    }
    if (t.kind === 'symbol' && t.text === '[') {
      if (!field.repeated) {
        this.lx.fail(t, `field '${field.name}' is not repeated, so it cannot take a list`, joinPath(path));
      }
      this.lx.next();
      if (this.eat(']')) return this.ensureList(obj, field);
      for (;;) {
        this.parseOne(obj, field, path, nameTok);
        const sep = this.lx.next();
        if (sep.kind === 'symbol' && sep.text === ']') return;
        if (!(sep.kind === 'symbol' && sep.text === ',')) {
          this.lx.fail(sep, `expected ',' or ']' in the list of '${field.name}', got ${describe(sep)}`, joinPath(path));
        }
      }
    }
    this.parseOne(obj, field, path, nameTok);
  }

  private eat(sym: string): boolean {
    const t = this.lx.peek();
    if (t.kind === 'symbol' && t.text === sym) {
      this.lx.next();
      return true;
    }
    return false;
  }

  private ensureList(obj: Record<string, unknown>, field: FieldDesc): void {
    if (field.map) obj[field.name] ??= {};
    else obj[field.name] ??= [];
  }

  /** One value of `field`: a message in braces or a scalar, appended when the field repeats. */
  private parseOne(obj: Record<string, unknown>, field: FieldDesc, path: string[], nameTok: Token): void {
    this.ensureList(obj, field);
    if (field.kind === 'message') {
      const open = this.lx.next();
      if (!(open.kind === 'symbol' && (open.text === '{' || open.text === '<'))) {
        this.lx.fail(open, `expected '{' to start ${expectedWhat(field)}, got ${describe(open)}`, joinPath(path));
      }
      const close = { sym: open.text === '{' ? '}' : '>', open, what: `'${field.name}'` };
      if (field.map) {
        const map = obj[field.name] as Record<string, unknown>;
        const entryPath = [...path, `[${Object.keys(map).length}]`];
        const entry = this.parseMessage(field.message!(), entryPath, close);
        const [keyField, valueField] = field.message!().fields as [FieldDesc, FieldDesc];
        const key = String(entry.key ?? defaultValue(keyField));
        putEntry(map, key, entry.value ?? defaultValue(valueField));
        this.positions.set(joinPath([...path, `[${JSON.stringify(key)}]`]), pos(nameTok));
        return;
      }
      const list = field.repeated ? (obj[field.name] as unknown[]) : undefined;
      const itemPath = list ? [...path, `[${list.length}]`] : path;
      if (list) this.positions.set(joinPath(itemPath), pos(open));
      const value = this.parseMessage(field.message!(), itemPath, close);
      if (list) list.push(value);
      else obj[field.name] = value;
      return;
    }
    const list = field.repeated ? (obj[field.name] as unknown[]) : undefined;
    const valuePath = list ? [...path, `[${list.length}]`] : path;
    const [lit, at] = this.readLiteral();
    let value: unknown;
    try {
      value = convertLiteral(field, lit, false);
    } catch (err) {
      if (err instanceof LiteralError) this.lx.fail(at, err.message, joinPath(valuePath));
      throw err;
    }
    if (list) {
      this.positions.set(joinPath(valuePath), pos(at));
      list.push(value);
    } else {
      obj[field.name] = value;
      keepExactInteger(obj, field.name, value, lit);
    }
  }

  private readLiteral(): [Literal, SourcePos] {
    const t = this.lx.next();
    if (t.kind === 'symbol' && t.text === '-') {
      const n = this.lx.peek();
      if (n.kind === 'number' || n.kind === 'ident') {
        this.lx.next();
        return [{ kind: n.kind, text: `-${n.text}` }, t];
      }
      return [{ kind: 'other', text: '-' }, t];
    }
    if (t.kind === 'string') {
      let value = t.value!;
      let text = t.text;
      // Adjacent literals concatenate, as in C.
      while (this.lx.peek().kind === 'string') {
        const more = this.lx.next();
        value += more.value!;
        text += ` ${more.text}`;
      }
      return [{ kind: 'string', value, text }, t];
    }
    if (t.kind === 'number' || t.kind === 'ident') return [{ kind: t.kind, text: t.text }, t];
    return [{ kind: 'other', text: t.kind === 'eof' ? 'end of file' : t.text }, t];
  }
}

/**
 * Parses config.pbtxt text into a ModelConfig (snake_case keys, enum names, maps as plain objects).
 * `file` only labels errors and positions.
 */
export function parsePbtxt(text: string, file = 'config.pbtxt'): ModelConfig {
  const lexer = new Lexer(text.replace(/^\uFEFF/, ''), file);
  const parser = new Parser(lexer);
  const cfg = parser.parseMessage(modelConfigDesc, [], null) as ModelConfig;
  attachSource(cfg, { file, positions: parser.positions });
  return cfg;
}

/**
 * Writes a ModelConfig as config.pbtxt text in Triton's own layout (`dims: [ 16 ]`, `input [ {…} ]`,
 * map entries as `parameters { key: "…" value { … } }`), fields in the .proto's order, with `comments`
 * as `#` lines on top. parsePbtxt reads it back to the same object; fields not in model_config.proto
 * are left out. Empty messages are kept (`dynamic_batching { }` turns batching on).
 */
export function formatPbtxt(cfg: ModelConfig, comments: readonly string[] = []): string {
  const out = comments.flatMap((c) => c.split('\n')).map((c) => (c ? `# ${c}` : '#'));
  writeMessage(cfg as Record<string, unknown>, modelConfigDesc, 0, out);
  return out.join('\n') + '\n';
}

function writeMessage(obj: Record<string, unknown>, desc: MessageDesc, depth: number, out: string[]): void {
  const ind = '  '.repeat(depth);
  for (const f of desc.fields) {
    const v = obj[f.name];
    if (v === undefined || v === null) continue;
    if (f.map) {
      const entry = f.message!();
      const valueField = entry.byName.get('value')!;
      for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
        out.push(`${ind}${f.name} {`, `${ind}  key: ${JSON.stringify(k)}`);
        if (valueField.kind === 'message') {
          out.push(`${ind}  value {`);
          writeMessage(val as Record<string, unknown>, valueField.message!(), depth + 2, out);
          out.push(`${ind}  }`);
        } else out.push(`${ind}  value: ${literalText(valueField, val)}`);
        out.push(`${ind}}`);
      }
    } else if (f.repeated) {
      const items = v as unknown[];
      if (items.length === 0) continue;
      if (f.kind === 'message') {
        out.push(`${ind}${f.name} [`);
        items.forEach((m, i) => {
          out.push(`${ind}  {`);
          writeMessage(m as Record<string, unknown>, f.message!(), depth + 2, out);
          out.push(`${ind}  }${i < items.length - 1 ? ',' : ''}`);
        });
        out.push(`${ind}]`);
      } else out.push(`${ind}${f.name}: [ ${items.map((x) => literalText(f, x)).join(', ')} ]`);
    } else if (f.kind === 'message') {
      out.push(`${ind}${f.name} {`);
      writeMessage(v as Record<string, unknown>, f.message!(), depth + 1, out);
      out.push(`${ind}}`);
    } else out.push(`${ind}${f.name}: ${literalText(f, v)}`);
  }
}

function literalText(f: FieldDesc, v: unknown): string {
  if (f.kind === 'enum') return String(v);
  if (f.scalar === 'string' || f.scalar === 'bytes') return JSON.stringify(String(v));
  return String(v);
}
