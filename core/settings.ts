/**
 * The logging and trace extensions' settings, as the protocol reads and writes them: `/v2/logging` and
 * gRPC LogSettings change the real logger's switches (so a new verbose level takes effect on the next
 * line), and `/v2[/models/{m}]/trace/setting` and gRPC TraceSetting change the TraceManager that decides
 * which requests are traced. Both transports parse into the same update objects here, so validation and
 * error texts (Triton's, word for word where clients match on them) exist once.
 */

import { TsiError } from './errors.js';
import type { Logger } from './types.js';
import type { TraceLevel, TraceManager, TraceSetting, TraceSettingUpdate } from './trace.js';
// Client values in messages go through describeValue: JSON.stringify of a deeply nested one overflows the stack.
import { describeValue } from './protocol/request-params.js';

export interface LogSwitches {
  info: boolean;
  warning: boolean;
  error: boolean;
  verboseLevel: number;
  format: 'default' | 'ISO8601';
}

export interface LogSettingsJson {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  log_format: string;
}

/**
 * Wraps a logger so that the logging extension controls it. A logger from `createLogger` already has
 * `settings` and is used as it is (its own filtering applies); any other logger is filtered here.
 */
export function controllableLogger(log: Logger): Logger & { settings: LogSwitches } {
  const existing = (log as { settings?: LogSwitches }).settings;
  if (existing) return log as Logger & { settings: LogSwitches };
  const settings: LogSwitches = { info: true, warning: true, error: true, verboseLevel: 0, format: 'default' };
  return {
    settings,
    error: (m) => settings.error && log.error(m),
    warn: (m) => settings.warning && log.warn(m),
    info: (m) => settings.info && log.info(m),
    verbose: (lvl, m) => settings.verboseLevel >= lvl && log.verbose(lvl, m),
  };
}

export class LogSettings {
  constructor(private readonly switches: LogSwitches, private readonly file = '') {}

  json(): LogSettingsJson {
    const s = this.switches;
    return {
      log_file: this.file, log_info: s.info, log_warning: s.warning, log_error: s.error,
      log_verbose_level: s.verboseLevel, log_format: s.format,
    };
  }

  /** Applies the given keys (JSON `null` = leave unchanged, as Triton does); unknown keys are ignored. */
  update(u: Record<string, unknown>): LogSettingsJson {
    // Validate everything first so a bad request changes nothing.
    const next = { ...this.switches };
    if (u.log_file !== undefined && u.log_file !== null) {
      throw new TsiError('UNSUPPORTED', 'log file location can not be updated through network protocol');
    }
    for (const [key, field] of [['log_info', 'info'], ['log_warning', 'warning'], ['log_error', 'error']] as const) {
      const v = u[key];
      if (v === undefined || v === null) continue;
      if (typeof v !== 'boolean') throw new TsiError('INVALID_ARG', `expected a boolean for '${key}', got ${describeValue(v)}`);
      next[field] = v;
    }
    const level = u.log_verbose_level;
    if (level !== undefined && level !== null) {
      if (typeof level !== 'number' || !Number.isInteger(level) || level < 0 || level > 0xffffffff) {
        throw new TsiError('INVALID_ARG', `expected an unsigned integer for 'log_verbose_level', got ${describeValue(level)}`);
      }
      next.verboseLevel = level;
    }
    const format = u.log_format;
    if (format !== undefined && format !== null) {
      if (format !== 'default' && format !== 'ISO8601') {
        throw new TsiError('UNAVAILABLE', `invalid argument for --log_format, got: ${typeof format === 'string' && format.length <= 60 ? format : describeValue(format)}`);
      }
      next.format = format;
    }
    Object.assign(this.switches, next);
    return this.json();
  }
}

/**
 * Trace settings as the protocol shows them: every value a string, the level a list. Triton mode adds
 * `log_frequency` and `trace_file`; OpenTelemetry mode adds its own settings (`url`, `resource`,
 * `bsp_*`) instead.
 */
export type TraceSettingsJson = {
  trace_level: string[];
  trace_rate: string;
  trace_count: string;
  trace_mode: string;
} & Record<string, string | string[]>;

const LEVELS = new Set(['OFF', 'TIMESTAMPS', 'TENSORS']);

function parseUint(name: string, s: string, min = 0, max = 0xffffffff): number {
  if (!/^\s*[-+]?\d+\s*$/.test(s)) throw new TsiError('INVALID_ARG', `Unable to parse '${name}', got: ${s}`);
  const n = Number(s);
  if (n < min || n > max) {
    if (name === 'trace_count' && n < min) {
      throw new TsiError('INVALID_ARG', `Unable to parse 'trace_count'. Expecting value >= ${min}, got:${s}`);
    }
    throw new TsiError('INVALID_ARG', `Unable to parse '${name}', value is out of range [ ${min}, ${max} ], got: ${s}`);
  }
  return n;
}

/**
 * Parses a trace update: each key maps to its string value(s), or `null` to clear a model-level
 * override (falling back to the global value). Shared by HTTP (JSON) and gRPC (repeated strings).
 */
export function parseTraceUpdate(u: Record<string, string | string[] | null>): TraceSettingUpdate {
  if ('trace_file' in u) throw new TsiError('UNSUPPORTED', 'trace file location can not be updated through network protocol');
  const out: TraceSettingUpdate = {};
  const one = (k: string): string | null | undefined => {
    const v = u[k];
    if (v === undefined || v === null) return v;
    if (Array.isArray(v)) {
      if (v.length !== 1) throw new TsiError('INVALID_ARG', `expected a single value for '${k}', got ${v.length}`);
      return v[0]!;
    }
    if (typeof v !== 'string') throw new TsiError('INVALID_ARG', `expected a string value for '${k}', got ${describeValue(v)}`);
    return v;
  };
  if ('trace_level' in u) {
    const v = u.trace_level;
    if (v === null) out.level = null;
    else {
      const list = Array.isArray(v) ? v : [v];
      if (!list.every((x) => typeof x === 'string')) throw new TsiError('INVALID_ARG', `'trace_level' must be an array of strings`);
      for (const x of list) {
        if (!LEVELS.has(x)) throw new TsiError('INVALID_ARG', `invalid 'trace_level' value '${x}': expected OFF, TIMESTAMPS or TENSORS`);
      }
      if (list.includes('OFF') && list.length > 1) throw new TsiError('INVALID_ARG', `Expect only one trace level 'OFF' is specified`);
      out.level = list.filter((x) => x !== 'OFF') as TraceLevel[];
    }
  }
  const rate = one('trace_rate');
  if (rate !== undefined) out.rate = rate === null ? null : parseUint('trace_rate', rate);
  const count = one('trace_count');
  if (count !== undefined) out.count = count === null ? null : parseUint('trace_count', count, -1, 0x7fffffff);
  const freq = one('log_frequency');
  if (freq !== undefined) out.logFrequency = freq === null ? null : parseUint('log_frequency', freq);
  return out;
}

export function traceSettingsJson(traces: TraceManager, model?: string): TraceSettingsJson {
  const s = traces.setting(model);
  const out: TraceSettingsJson = {
    trace_level: s.level.length === 0 ? ['OFF'] : [...s.level],
    trace_rate: String(s.rate),
    trace_count: String(s.count),
    trace_mode: s.mode,
  };
  if (s.mode === 'triton') {
    out.log_frequency = String(s.logFrequency);
    out.trace_file = s.file;
  }
  for (const [k, v] of s.modeSettings) {
    // Several `resource=` flags: one key, the pairs joined as OTEL_RESOURCE_ATTRIBUTES writes them.
    out[k] = k in out ? `${out[k] as string},${v}` : v;
  }
  return out;
}

/** The Batch Span Processor's settings: Triton's defaults, each overridable by its OTEL_BSP_* variable. */
const BSP_DEFAULTS: [key: string, env: string, value: string][] = [
  ['bsp_max_queue_size', 'OTEL_BSP_MAX_QUEUE_SIZE', '2048'],
  ['bsp_schedule_delay', 'OTEL_BSP_SCHEDULE_DELAY', '5000'],
  ['bsp_max_export_batch_size', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', '512'],
];

/**
 * tritonserver's `--trace-config [triton|opentelemetry,]<key>=<value>` flags as an initial trace
 * setting: level, rate, count, mode; `triton,` file and log-frequency; `opentelemetry,` url,
 * resource (`key=value`, repeatable) and the bsp_* numbers, whose defaults come from `env`'s
 * OTEL_BSP_* variables as Triton reads them. `level` may repeat (TIMESTAMPS and TENSORS accumulate;
 * OFF clears).
 */
export function parseTraceConfig(specs: readonly string[], env: Readonly<Record<string, string | undefined>> = {}): Partial<TraceSetting> {
  const out: Partial<TraceSetting> = {};
  const otel: [string, string][] = [];
  for (const spec of specs) {
    const m = /^(?:([a-z]+),)?([a-z_-]+)=(.*)$/.exec(spec);
    if (!m) throw new TsiError('INVALID_ARG', `--trace-config expects [triton|opentelemetry,]<setting>=<value>, got '${spec}'`);
    const [, mode, key, value] = m as unknown as [string, string | undefined, string, string];
    if (mode === 'opentelemetry') {
      otel.push(openTelemetrySetting(key, value));
      continue;
    }
    if (mode && mode !== 'triton') throw new TsiError('INVALID_ARG', `--trace-config: unknown trace mode '${mode}' (expected triton or opentelemetry)`);
    switch (key) {
      case 'level': {
        const v = value.toUpperCase();
        if (v === 'OFF') out.level = [];
        else if (v === 'TIMESTAMPS' || v === 'TENSORS') out.level = [...new Set([...(out.level ?? []), v as TraceLevel])];
        else throw new TsiError('INVALID_ARG', `--trace-config: invalid level '${value}', expected OFF, TIMESTAMPS or TENSORS`);
        break;
      }
      case 'rate': out.rate = parseUint('trace_rate', value); break;
      case 'count': out.count = parseUint('trace_count', value, -1, 0x7fffffff); break;
      case 'log-frequency': case 'log_frequency': out.logFrequency = parseUint('log_frequency', value); break;
      case 'file': out.file = value; break;
      case 'mode':
        if (value !== 'triton' && value !== 'opentelemetry') throw new TsiError('INVALID_ARG', `--trace-config: invalid mode '${value}', expected triton or opentelemetry`);
        out.mode = value;
        break;
      default: throw new TsiError('INVALID_ARG', `--trace-config: unknown setting '${key}' (expected level, rate, count, mode, file or log-frequency)`);
    }
  }
  if (out.mode === 'opentelemetry') {
    if (out.level?.includes('TENSORS')) throw new TsiError('INVALID_ARG', `--trace-config: level TENSORS is not supported in opentelemetry mode`);
    for (const [key, name, value] of BSP_DEFAULTS) {
      if (otel.some(([k]) => k === key)) continue;
      const v = env[name] ?? value;
      if (!/^\d+$/.test(v) || Number(v) > 0xffffffff) throw new TsiError('INVALID_ARG', `Bad option: "${name}". ${name}: expected an unsigned integer, got '${v}'`);
      otel.push([key, String(Number(v))]);
    }
    out.modeSettings = otel;
  } else if (otel.length > 0) {
    throw new TsiError('INVALID_ARG', `--trace-config opentelemetry,${otel[0]![0]}=... needs --trace-config mode=opentelemetry`);
  }
  return out;
}

function openTelemetrySetting(key: string, value: string): [string, string] {
  switch (key) {
    case 'url': return [key, value];
    case 'resource':
      if (!/^[^=]+=/.test(value)) throw new TsiError('INVALID_ARG', `--trace-config opentelemetry,resource expects <key>=<value>, got '${value}'`);
      return [key, value];
    case 'bsp_max_queue_size': case 'bsp_schedule_delay': case 'bsp_max_export_batch_size':
      try {
        return [key, String(parseUint(key, value))];
      } catch (err) {
        throw new TsiError('INVALID_ARG', `Bad option: "--trace-config opentelemetry,${key}". ${(err as Error).message}`);
      }
    default:
      throw new TsiError('INVALID_ARG', `--trace-config: unknown opentelemetry setting '${key}' (expected url, resource, bsp_max_queue_size, bsp_schedule_delay or bsp_max_export_batch_size)`);
  }
}

/** tritonserver's trace flags from before `--trace-config`: deprecated aliases of its settings. */
export interface LegacyTraceFlags {
  traceFile?: string;
  /** Repeatable: the levels add up; OFF (or false) turns tracing off. */
  traceLevel?: readonly string[];
  traceRate?: string;
  traceCount?: string;
  traceLogFrequency?: string;
}

/** Per flag: the `--trace-config` spec it stands for, the key that overrides it, and Triton's words. */
const LEGACY_TRACE: [flag: keyof LegacyTraceFlags, name: string, spec: string, replacement: string, overriddenBy: RegExp, what: string][] = [
  ['traceFile', '--trace-file', 'triton,file', 'triton,file=<filepath>', /^triton,file=/, 'file'],
  ['traceLevel', '--trace-level', 'level', 'level=<OFF|TIMESTAMPS|TENSORS>', /^level=/, 'level'],
  ['traceRate', '--trace-rate', 'rate', 'rate=<rate value>', /^rate=/, 'rate value'],
  ['traceCount', '--trace-count', 'count', 'count=<count value>', /^count=/, 'count'],
  ['traceLogFrequency', '--trace-log-frequency', 'triton,log-frequency', 'triton,log-frequency=<log frequency value>', /^triton,log[-_]frequency=/, 'log-frequency'],
];

/** tritonserver's reading of a --trace-level value: MIN and MAX are its older names for TIMESTAMPS. */
function legacyTraceLevel(arg: string): 'OFF' | 'TIMESTAMPS' | 'TENSORS' {
  const a = arg.toLowerCase();
  if (a === 'false' || a === 'off') return 'OFF';
  if (['true', 'on', 'min', 'max', 'timestamps'].includes(a)) return 'TIMESTAMPS';
  if (a === 'tensors') return 'TENSORS';
  throw new TsiError('INVALID_ARG', `invalid value for trace level option: ${a}`);
}

/**
 * The older flags as `--trace-config` specs to put before the given ones (which then win, as in
 * Triton), with tritonserver's warnings: one per deprecated flag used, and one per flag a
 * `--trace-config` setting overrides.
 */
export function legacyTraceSpecs(flags: LegacyTraceFlags, specs: readonly string[]): { specs: string[]; warnings: string[] } {
  const out: string[] = [];
  const warnings: string[] = [];
  for (const [flag, name, spec, replacement, overriddenBy, what] of LEGACY_TRACE) {
    const v = flags[flag];
    if (v === undefined) continue;
    const values = typeof v === 'string' ? [v] : v;
    for (const value of values) {
      warnings.push(`Warning: '${name}' has been deprecated and will be removed in future releases. Please use '--trace-config ${replacement} instead.`);
      out.push(`${spec}=${flag === 'traceLevel' ? legacyTraceLevel(value) : value}`);
    }
    if (specs.some((s) => overriddenBy.test(s))) {
      warnings.push(`Warning: Overriding deprecated '${name}' in favor of provided ${what} in --trace-config!`);
    }
  }
  // An explicit OFF among the levels wins over the others, as tritonserver reads them.
  if (out.includes('level=OFF')) out.push('level=OFF');
  return { specs: out, warnings };
}
