/**
 * A leveled logger in tritonserver's spirit (info/warning/error switches plus a verbose level), writing
 * through an injected sink so Node prints to stderr or a file and the browser to the console. The
 * switches and the format can change at run time (the logging extension).
 *
 * Lines keep tritonserver's layouts, which log collectors parse: `default` is
 * `<L><MMDD> <hh:mm:ss.uuuuuu> <pid> <source>:<line>] <message>` and `ISO8601` is
 * `<YYYY-MM-DDThh:mm:ssZ> <L> <pid> <source>:<line>] <message>`, both in UTC, L one of E, W, I
 * (verbose lines are I, as Triton's). tsi has no C++ source location to give: `<source>:<line>` is
 * the logger's name and 0.
 */

import type { Logger } from './types.js';

export type LogLevel = 'I' | 'W' | 'E' | 'V';
export type LogFormat = 'default' | 'ISO8601';

export interface ConfigurableLogger extends Logger {
  settings: { info: boolean; warning: boolean; error: boolean; verboseLevel: number; format: LogFormat };
}

export interface LoggerOptions {
  /** The process id the lines show (Node: process.pid); default 0. */
  pid?: number;
  /** Where the lines say they come from; default `tsi`. */
  source?: string;
}

/** Wall-clock time with microseconds (Date has milliseconds only). */
function nowMicros(): number {
  const perf = (globalThis as { performance?: { timeOrigin: number; now(): number } }).performance;
  return Math.floor((perf ? perf.timeOrigin + perf.now() : Date.now()) * 1000);
}

/** The part of a line before the message, in tritonserver's layout for `format`. */
export function logPreamble(level: LogLevel, format: LogFormat, micros: number, pid: number, source: string): string {
  const d = new Date(Math.floor(micros / 1000));
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  const letter = level === 'V' ? 'I' : level;
  const time = `${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}`;
  if (format === 'ISO8601') {
    return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())}T${time}Z ${letter} ${pid} ${source}:0] `;
  }
  return `${letter}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())} ${time}.${p(micros % 1_000_000, 6)} ${pid} ${source}:0] `;
}

export function createLogger(sink: (level: LogLevel, line: string) => void, verboseLevel = 0, opts: LoggerOptions = {}): ConfigurableLogger {
  const settings = { info: true, warning: true, error: true, verboseLevel, format: 'default' as LogFormat };
  const pid = opts.pid ?? 0;
  const source = opts.source ?? 'tsi';
  const emit = (level: LogLevel, msg: string) => sink(level, logPreamble(level, settings.format, nowMicros(), pid, source) + msg);
  return {
    settings,
    error: (m) => settings.error && emit('E', m),
    warn: (m) => settings.warning && emit('W', m),
    info: (m) => settings.info && emit('I', m),
    verbose: (lvl, m) => settings.verboseLevel >= lvl && emit('V', m),
  };
}
