/**
 * What a request may say about itself, checked by the same rules whichever wire it came over: the
 * types and ranges of the parameters Triton gives a meaning to (on the request, its inputs and its
 * outputs), the reserved `triton_` names, and a tensor's description (datatype name, shape, element
 * count). HTTP's JSON and gRPC's protobuf carry the same values in different clothes — a JSON number,
 * an `int64_param` — so each decoder names the kinds its value could be and asks here; the messages keep
 * the words Triton's frontend uses on that wire (http_server.cc, infer_handler.cc), because clients and
 * tests match on them, and the JSON ones go on to say where the value was and what it was. validateRequest
 * applies the same table to requests that arrive without a wire (in-process calls, generate).
 *
 * Values a client sent are only ever printed through `describeValue`, which never recurses without
 * bound and never prints more than a few dozen characters: a hostile value cannot turn a 400 into a
 * stack overflow, nor an error message into a megabyte.
 */

import { TsiError } from '../errors.js';
import { DATATYPES, type DataType, type Parameters } from '../types.js';

/** The kinds a parameter value can be, as bits: a JSON `5` is an int64, a uint64 and a double at once. */
export const BOOL = 1;
export const INT64 = 2;
export const UINT64 = 4;
export const DOUBLE = 8;
export const STRING = 16;

const TWO_64 = 2 ** 64;
const TWO_63 = 2 ** 63;

/** The kinds a JSON (or in-process) value can be read as; 0 for objects, arrays, null. */
export function jsonKinds(v: unknown): number {
  switch (typeof v) {
    case 'boolean': return BOOL;
    case 'string': return STRING;
    case 'number': {
      if (!Number.isInteger(v)) return Number.isFinite(v) ? DOUBLE : 0;
      // A double at 2**64 is out of uint64's range, as Triton's AsUInt says (a classification of
      // 18446744073709551616 is a 400). 2**64 - 1 is exact only as a bigint: decoders that need it
      // parse unsafe integers exactly.
      let k = DOUBLE;
      if (v >= 0 && v < TWO_64) k |= UINT64;
      if (v >= -TWO_63 && v < TWO_63) k |= INT64;
      return k;
    }
    case 'bigint': {
      // An integer literal read exactly (json-exact.ts) is still a JSON number, as a double would read it.
      let k = DOUBLE;
      if (v >= 0n && v < 1n << 64n) k |= UINT64;
      if (v >= -(1n << 63n) && v < 1n << 63n) k |= INT64;
      return k;
    }
    default: return 0;
  }
}

/** The kind of a gRPC InferParameter, by the oneof member it set (0 when none was set). */
export function protoKind(choice: unknown): number {
  switch (choice) {
    case 'bool_param': return BOOL;
    case 'int64_param': return INT64;
    case 'uint64_param': return UINT64;
    case 'double_param': return DOUBLE;
    case 'string_param': return STRING;
    default: return 0;
  }
}

/** Where a parameter sits, for messages: the request, or one of its tensors. */
export interface ParamSite {
  model: string;
  /** `input 'X'` or `output 'Y'`; absent for request-level parameters. */
  tensor?: string;
}

export interface ParamRule {
  /** Kinds accepted from JSON (HTTP, in-process) and from protobuf (gRPC). */
  json: number;
  grpc: number;
  /** What to send instead, in words. */
  expected: string;
  /** Triton's HTTP message: its prefix and TritonJson's complaint. */
  jsonText: string;
  /** Triton's gRPC message; `{tensor}` is the tensor's name. */
  grpcText: string;
}

const uintRule = (name: string, verb = 'parse'): ParamRule => ({
  json: UINT64, grpc: INT64 | UINT64, expected: 'an unsigned integer',
  jsonText: `Unable to ${verb} '${name}': attempt to access JSON non-unsigned-integer as unsigned-integer`,
  grpcText: `invalid value type for '${name}' parameter, expected int64_param.`,
});
const boolRule = (name: string, verb = 'parse'): ParamRule => ({
  json: BOOL, grpc: BOOL, expected: 'a boolean',
  jsonText: `Unable to ${verb} '${name}': attempt to access JSON non-boolean as boolean`,
  grpcText: `invalid value type for '${name}' parameter, expected bool_param.`,
});
const shmRules = (): Record<string, ParamRule> => ({
  shared_memory_region: {
    json: STRING, grpc: STRING, expected: 'a string',
    jsonText: `Unable to parse 'shared_memory_region': attempt to access JSON non-string as string`,
    grpcText: `invalid value type for 'shared_memory_region' parameter for tensor '{tensor}', expected string_param.`,
  },
  shared_memory_offset: {
    ...uintRule('shared_memory_offset'),
    grpcText: `invalid value type for 'shared_memory_offset' parameter for tensor '{tensor}', expected int64_param.`,
  },
  shared_memory_byte_size: {
    ...uintRule('shared_memory_byte_size'),
    grpcText: `invalid value type for 'shared_memory_byte_size' parameter for tensor '{tensor}', expected int64_param.`,
  },
});

export type ParamRules = Readonly<Record<string, ParamRule>>;

/** The request-level parameters with a meaning (Triton's extension_parameters.md). */
export const REQUEST_PARAMS: ParamRules = {
  sequence_id: {
    json: UINT64 | STRING, grpc: INT64 | UINT64 | STRING, expected: 'an unsigned integer or a string',
    jsonText: `Unable to parse 'sequence_id': attempt to access JSON non-string as string`,
    grpcText: `invalid value type for 'sequence_id' parameter, expected int64_param or string_param.`,
  },
  sequence_start: boolRule('sequence_start'),
  sequence_end: boolRule('sequence_end'),
  priority: { ...uintRule('priority'), grpcText: `invalid value type for 'priority' parameter, expected int64_param or uint64_param.` },
  timeout: uintRule('timeout'),
  binary_data_output: boolRule('binary_data_output'),
};

/** The `triton_` request parameters a gRPC client may send (Triton's TRITON_RESERVED_REQUEST_PARAMS). */
export const TRITON_GRPC_PARAMS: ParamRules = {
  triton_enable_empty_final_response: boolRule('triton_enable_empty_final_response'),
};

export const INPUT_PARAMS: ParamRules = {
  binary_data_size: uintRule('binary_data_size'),
  ...shmRules(),
};

export const OUTPUT_PARAMS: ParamRules = {
  binary_data: boolRule('binary_data'),
  classification: {
    ...uintRule('classification', 'set'),
    grpcText: `invalid value type for 'classification' parameter, expected int64_param`,
  },
  ...shmRules(),
};

/** Any other (custom) parameter: passed on to the backend, if it is a scalar. */
const CUSTOM: ParamRule = {
  json: BOOL | INT64 | DOUBLE | STRING, grpc: BOOL | INT64 | DOUBLE | STRING, expected: 'a string, number or boolean',
  jsonText: `parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'.`,
  grpcText: `invalid value type for '{name}' parameter, expected int64_param, bool_param, or string_param.`,
};

export const RESERVED_PREFIX_MESSAGE = `parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.`;
export const RESERVED_PREFIX_MESSAGE_GRPC =
  `parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: ${Object.keys(TRITON_GRPC_PARAMS).join(' ')}`;

/** The names a forwarded header may not take (Triton's kReservedParameterKeys), besides every `triton_` one. */
const RESERVED_HEADER_NAMES = new Set(['sequence_id', 'sequence_start', 'sequence_end', 'priority', 'timeout', 'headers', 'binary_data_output']);

/**
 * --http-header-forward-pattern / --grpc-header-forward-pattern as Triton reads them: a regular
 * expression matched anywhere in a header's name, case-insensitive unless it starts with `(?-i)`.
 * (Triton's are RE2 patterns; JavaScript's syntax covers what such patterns use.)
 */
export function headerForwardPattern(pattern: string, flag: string): RegExp {
  const sensitive = pattern.startsWith('(?-i)');
  try {
    return new RegExp(sensitive ? pattern.slice(5) : pattern, sensitive ? '' : 'i');
  } catch (err) {
    throw new TsiError('INVALID_ARG', `${flag}: '${pattern}' is not a valid regular expression: ${(err as Error).message}`);
  }
}

/**
 * Adds each header whose name `pattern` matches to the request's parameters, as a string, as Triton
 * forwards them to the model; a match on a reserved name refuses the request with Triton's text.
 */
export function forwardHeaders(pattern: RegExp, headers: Iterable<readonly [string, string]>, request: { parameters?: Parameters }): void {
  for (const [name, value] of headers) {
    if (!pattern.test(name)) continue;
    const lower = name.toLowerCase();
    if (RESERVED_HEADER_NAMES.has(lower) || lower.startsWith('triton_')) {
      throw new TsiError('INVALID_ARG', `Header '${name}' is reserved for Triton usage and cannot be forwarded.`);
    }
    (request.parameters ??= {})[name] = value;
  }
}

const siteText = (name: string, site: ParamSite) =>
  `${site.tensor ? `parameter '${name}' of ${site.tensor}` : `request parameter '${name}'`} for model '${site.model}'`;

/** `name`'s own rule (a key such as `toString` must not find Object.prototype's), else the custom rule. */
const ruleFor = (rules: ParamRules, name: string): ParamRule => (Object.hasOwn(rules, name) ? rules[name]! : CUSTOM);

/**
 * Checks one JSON (or in-process) parameter value against its rule (`ruleFor`); throws INVALID_ARG
 * with Triton's HTTP text followed by what tsi saw.
 */
export function checkJsonParam(rules: ParamRules, name: string, value: unknown, site: ParamSite): void {
  const rule = ruleFor(rules, name);
  if ((jsonKinds(value) & rule.json) !== 0) return;
  throw new TsiError('INVALID_ARG',
    `${rule.jsonText.replace('{name}', name)} (${siteText(name, site)}: expected ${rule.expected}, got ${describeValue(value)})`);
}

/** Checks one gRPC InferParameter's kind (its `parameter_choice`) against its rule; Triton's gRPC text. */
export function checkProtoParam(rules: ParamRules, name: string, choice: unknown, tensor = ''): void {
  const rule = ruleFor(rules, name);
  if ((protoKind(choice) & rule.grpc) !== 0) return;
  throw new TsiError('INVALID_ARG', rule.grpcText.replace('{name}', name).replace('{tensor}', tensor));
}

// ---------------------------------------------------------------------------------------------------
// Tensor descriptions.
// ---------------------------------------------------------------------------------------------------

const DATATYPE_SET: ReadonlySet<string> = new Set(DATATYPES);
const INT64_MAX = '9223372036854775807';

/** A datatype name as sent; throws naming the tensor, the model and the names that exist. */
export function checkDatatype(datatype: unknown, tensor: string, model: string): DataType {
  if (typeof datatype === 'string' && DATATYPE_SET.has(datatype)) return datatype as DataType;
  throw new TsiError('INVALID_ARG',
    `${tensor} for model '${model}': invalid datatype ${describeValue(datatype)}, expected one of ${DATATYPES.join(', ')}`);
}

/**
 * A JSON shape: an array of unsigned integers whose product stays within int64 (Triton's limits, its
 * texts). Returns the element count.
 */
export function checkJsonShape(shape: unknown, input: string, model: string): number {
  if (Array.isArray(shape)) {
    let ok = true;
    for (let i = 0; i < shape.length; i++) {
      const d = shape[i];
      if (!(typeof d === 'number' && Number.isInteger(d) && d >= 0 && d <= TWO_64)) {
        ok = false;
        break;
      }
    }
    if (ok) return checkElementCount(shape as number[], input);
  }
  throw new TsiError('INVALID_ARG',
    `Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer (input '${input}' for model '${model}': expected an array of non-negative integers, got ${describeValue(shape)})`);
}

/**
 * A shape of integers from any wire: Triton's texts for a wildcard (-1) or other negative dimension, and
 * for an element count past int64. Returns the element count.
 */
export function checkShape(shape: readonly number[], input: string, model: string): number {
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i]!;
    if (d === -1) {
      throw new TsiError('INVALID_ARG',
        `All input dimensions should be specified for input '${input}' for model '${model}', got ${shapeText(shape)}`);
    }
    if (!(Number.isInteger(d) && d >= 0)) {
      throw new TsiError('INVALID_ARG',
        `invalid shape for input '${input}': shape ${shapeText(shape)} contains one or more invalid dimensions (model '${model}')`);
    }
  }
  return checkElementCount(shape, input);
}

function checkElementCount(shape: readonly number[], input: string): number {
  let n = 1;
  for (let i = 0; i < shape.length; i++) n *= shape[i]!;
  // 2**63 as a double: past it the count no longer fits Triton's int64.
  if (n >= TWO_63) {
    throw new TsiError('INVALID_ARG',
      `invalid shape for input '${input}': shape ${shapeText(shape)} causes total element count to exceed maximum size of ${INT64_MAX}`);
  }
  return n;
}

/** A shape as Triton prints it, exact for integers past 2**53. */
function shapeText(shape: readonly number[]): string {
  return `[${shape.map((d) => (Number.isSafeInteger(d) ? String(d) : BigInt.asIntN(64, BigInt(Math.trunc(d))).toString())).join(',')}]`;
}

// ---------------------------------------------------------------------------------------------------
// Client values in messages.
// ---------------------------------------------------------------------------------------------------

/** Triton's bound on nested JSON tensor data (HTTP_MAX_JSON_NESTING_DEPTH). */
export const MAX_JSON_DEPTH = 100;
export const JSON_DEPTH_MESSAGE = `JSON nesting depth exceeds maximum allowed limit (${MAX_JSON_DEPTH})`;

/**
 * A client's value for an error message: JSON-like, at most ~60 characters, at most three levels
 * deep, whatever the value holds (no recursion past that, no huge strings).
 */
export function describeValue(v: unknown, budget = 60): string {
  const out: string[] = [];
  let left = budget;
  const put = (s: string) => {
    out.push(s);
    left -= s.length;
  };
  const walk = (x: unknown, depth: number): void => {
    if (left <= 0) return;
    if (typeof x === 'string') put(JSON.stringify(x.length > left ? `${x.slice(0, Math.max(left, 8))}…` : x));
    else if (typeof x === 'number' || typeof x === 'boolean' || typeof x === 'bigint') put(String(x));
    else if (x === null) put('null');
    else if (x === undefined) put('nothing');
    else if (Array.isArray(x)) {
      if (depth >= 3) return put(x.length === 0 ? '[]' : '[…]');
      put('[');
      for (let i = 0; i < x.length; i++) {
        if (left <= 0) return put('…]');
        if (i > 0) put(',');
        walk(x[i], depth + 1);
      }
      put(']');
    } else if (typeof x === 'object') {
      if (depth >= 3) return put('{…}');
      put('{');
      let i = 0;
      for (const k in x as Record<string, unknown>) {
        if (left <= 0) return put('…}');
        if (i++ > 0) put(',');
        put(`${JSON.stringify(k.length > 20 ? `${k.slice(0, 20)}…` : k)}:`);
        walk((x as Record<string, unknown>)[k], depth + 1);
      }
      put('}');
    } else put(typeof x);
  };
  walk(v, 0);
  return out.join('');
}
