/**
 * A leveled logger in tritonserver's spirit (info/warning/error switches plus a verbose level), writing
 * through an injected sink so Node prints to stderr and the browser to the console. The verbose level
 * can change at run time (the logging extension).
 */

import type { Logger } from './types.js';

export type LogLevel = 'I' | 'W' | 'E' | 'V';

export interface ConfigurableLogger extends Logger {
  settings: { info: boolean; warning: boolean; error: boolean; verboseLevel: number; format: 'default' | 'ISO8601' };
}

export function createLogger(sink: (level: LogLevel, line: string) => void, verboseLevel = 0): ConfigurableLogger {
  const settings = { info: true, warning: true, error: true, verboseLevel, format: 'default' as 'default' | 'ISO8601' };
  const stamp = () => {
    const d = new Date();
    if (settings.format === 'ISO8601') return d.toISOString();
    const p = (n: number, w = 2) => String(n).padStart(w, '0');
    return `${p(d.getMonth() + 1)}${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  };
  const emit = (level: LogLevel, msg: string) => sink(level, `${level}${stamp()} ${msg}`);
  return {
    settings,
    error: (m) => settings.error && emit('E', m),
    warn: (m) => settings.warning && emit('W', m),
    info: (m) => settings.info && emit('I', m),
    verbose: (lvl, m) => settings.verboseLevel >= lvl && emit('V', m),
  };
}
