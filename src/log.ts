/**
 * The daemon's log: what every part writes its lines to. It imports nothing of src/, so the store and the upstream
 * take it from here without reaching into the services the daemon is made of (context.ts).
 */

export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
  debug(msg: string): void;
}

/** The levels of the config's `logLevel`. */
export type LogLevel = 'info' | 'debug' | 'silent';

export function makeLogger(level: LogLevel): Logger {
  const line = (lvl: string, msg: string): void => {
    process.stderr.write(`${new Date().toISOString()} ${lvl} ${msg}\n`);
  };
  return {
    info: (m) => {
      if (level !== 'silent') line('info', m);
    },
    warn: (m) => {
      if (level !== 'silent') line('warn', m);
    },
    error: (m) => line('error', m),
    debug: (m) => {
      if (level === 'debug') line('debug', m);
    },
  };
}
