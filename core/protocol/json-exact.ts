/**
 * JSON with exact 64-bit integers. JSON.parse reads every number as a double, so an INT64 or UINT64
 * value past 2^53 (a hash, an id, 2^63-1) comes back rounded with no error; JSON.stringify cannot
 * write a bigint at all. Triton keeps such values exact, so tsi does too, without slowing the usual
 * request: JSON.parse reads everything first, and only when a place that can hold a 64-bit integer
 * (found by the caller: a 64-bit tensor's data, a parameter) holds an integer past the safe range is
 * the text read again here, where integer literals outside that range become bigints.
 */

import { putEntry } from '../types.js';

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** A double that may have lost digits: an integer past Number.MAX_SAFE_INTEGER. */
export const isUnsafeInteger = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v);

/**
 * Whether `v`, a value or nested arrays, holds an unsafe integer. Nesting past 100 levels is not looked
 * into: tensor data that deep is refused later anyway.
 */
export function hasUnsafeInteger(v: unknown, depth = 0): boolean {
  if (!Array.isArray(v)) return isUnsafeInteger(v);
  if (depth > 100) return false;
  for (let i = 0; i < v.length; i++) {
    const x: unknown = v[i];
    // Safe integers and fractions pass with two comparisons; only the rest are looked at closely.
    if (typeof x === 'number' ? x > MAX_SAFE || x < -MAX_SAFE : Array.isArray(x) && hasUnsafeInteger(x, depth + 1)) {
      if (isUnsafeInteger(x) || Array.isArray(x)) return true;
    }
  }
  return false;
}

/** Whether a value, objects and arrays walked to 100 levels, holds an unsafe integer anywhere. */
function hasUnsafeAnywhere(v: unknown, depth = 0): boolean {
  if (typeof v !== 'object' || v === null) return isUnsafeInteger(v);
  if (depth > 100) return false;
  for (const x of Array.isArray(v) ? v : Object.values(v)) if (hasUnsafeAnywhere(x, depth + 1)) return true;
  return false;
}

/**
 * JSON.parse, read again exactly (parseJsonExact) when any integer in it may have been rounded: for
 * small bodies of any layout, such as the generate extension's flat object.
 */
export function parseJson(text: string): unknown {
  const v: unknown = JSON.parse(text);
  return hasUnsafeAnywhere(v) ? parseJsonExact(text) : v;
}

/** Whether an object's own values (a `parameters` object) hold an unsafe integer. */
export function hasUnsafeValue(obj: unknown): boolean {
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return false;
  for (const k in obj) if (isUnsafeInteger((obj as Record<string, unknown>)[k])) return true;
  return false;
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/**
 * JSON.parse, except that an integer literal (no fraction, no exponent) outside the safe range is a
 * bigint. Keys named `__proto__` are own properties, as JSON.parse makes them. Errors are SyntaxErrors
 * naming the position.
 */
export function parseJsonExact(text: string): unknown {
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} in JSON at position ${i}`);
  };
  const space = () => {
    for (;;) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else return;
    }
  };
  const string = (): string => {
    const start = i;
    i++;
    let escaped = false;
    for (;;) {
      const c = text.charCodeAt(i);
      if (Number.isNaN(c)) fail('Unterminated string');
      if (c === 0x22) break;
      if (c === 0x5c) {
        escaped = true;
        i++;
      }
      i++;
    }
    i++;
    // Escapes and control characters are JSON.parse's to judge.
    return escaped || /[\u0000-\u001f]/.test(text.slice(start + 1, i - 1)) ? (JSON.parse(text.slice(start, i)) as string) : text.slice(start + 1, i - 1);
  };
  const value = (): unknown => {
    space();
    const c = text[i];
    if (c === '{') {
      i++;
      const obj: Record<string, unknown> = {};
      space();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        space();
        if (text[i] !== '"') fail('Expected a property name');
        const key = string();
        space();
        if (text[i] !== ':') fail(`Expected ':'`);
        i++;
        putEntry(obj, key, value());
        space();
        if (text[i] === ',') i++;
        else if (text[i] === '}') {
          i++;
          return obj;
        } else fail(`Expected ',' or '}'`);
      }
    }
    if (c === '[') {
      i++;
      const arr: unknown[] = [];
      space();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value());
        space();
        if (text[i] === ',') i++;
        else if (text[i] === ']') {
          i++;
          return arr;
        } else fail(`Expected ',' or ']'`);
      }
    }
    if (c === '"') return string();
    // NaN and the infinities as Triton's parser takes them (rapidjson's kParseNanAndInfFlag).
    for (const [word, v] of [['true', true], ['false', false], ['null', null], ['NaN', NaN], ['Infinity', Infinity], ['-Infinity', -Infinity],
      ['Inf', Infinity], ['-Inf', -Infinity]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) return fail(`Unexpected token ${JSON.stringify(c ?? 'end')}`);
    i += m[0].length;
    const n = Number(m[0]);
    return m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(n) ? BigInt(m[0]) : n;
  };
  const out = value();
  space();
  if (i !== text.length) fail('Unexpected non-whitespace character after JSON');
  return out;
}

/** JSON.stringify that writes bigints as integer literals (in objects, arrays, or alone). */
export function stringifyJsonExact(v: unknown): string {
  if (typeof v === 'bigint') return String(v);
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined || typeof x === 'function' ? 'null' : stringifyJsonExact(x))).join(',')}]`;
  if (typeof v === 'object' && v !== null && !ArrayBuffer.isView(v)) {
    const parts: string[] = [];
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined || typeof x === 'function') continue;
      parts.push(`${JSON.stringify(k)}:${stringifyJsonExact(x)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(v);
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isWide = (t: Record<string, unknown>) => t.datatype === 'INT64' || t.datatype === 'UINT64';

/**
 * JSON.parse of a v2 infer request or response header (`parameters`, `inputs`, `outputs`), with the
 * data of INT64 and UINT64 tensors and every parameter exact: read again only when one holds an
 * integer JSON.parse may have rounded; everything else stays as JSON.parse read it.
 */
export function parseInferJson(text: string): unknown {
  let h: unknown;
  try {
    h = JSON.parse(text);
  } catch (err) {
    // Triton writes (and reads) NaN, Infinity and -Infinity in tensor data; JSON.parse takes none.
    if (!/NaN|Inf/.test(text)) throw err;
    try {
      return parseJsonExact(text);
    } catch {
      throw err;
    }
  }
  if (!isObj(h) || !lostDigits(h)) return h;
  const exact = parseJsonExact(text) as Record<string, unknown>;
  if (isObj(h.parameters)) h.parameters = exact.parameters;
  for (const key of ['inputs', 'outputs'] as const) {
    const list = h[key];
    if (!Array.isArray(list)) continue;
    const again = exact[key] as Record<string, unknown>[];
    list.forEach((t: unknown, i) => {
      if (!isObj(t)) return;
      if (isObj(t.parameters)) t.parameters = again[i]!.parameters;
      if (isWide(t)) t.data = again[i]!.data;
    });
  }
  return h;
}

function lostDigits(h: Record<string, unknown>): boolean {
  if (hasUnsafeValue(h.parameters)) return true;
  for (const list of [h.inputs, h.outputs]) {
    if (!Array.isArray(list)) continue;
    for (const t of list) if (isObj(t) && (hasUnsafeValue(t.parameters) || (isWide(t) && hasUnsafeInteger(t.data)))) return true;
  }
  return false;
}

/** JSON.stringify at its own speed, and exact (stringifyJsonExact) when the value holds a bigint. */
export function stringifyJson(v: unknown): string {
  try {
    return JSON.stringify(v);
  } catch (err) {
    if (holdsBigint(v)) return stringifyJsonExact(v);
    throw err;
  }
}

/** Whether a value holds a bigint anywhere (then stringifyJsonExact must write it). */
export function holdsBigint(v: unknown): boolean {
  if (typeof v === 'bigint') return true;
  if (typeof v !== 'object' || v === null || ArrayBuffer.isView(v)) return false;
  for (const x of Array.isArray(v) ? v : Object.values(v)) if (holdsBigint(x)) return true;
  return false;
}
