import type { Logger } from '../app/ports/logger.js';

/** pino's numbers for the levels it knows (its `levels.values`, and `silent`). */
const LEVEL_VALUES: Readonly<Record<string, number>> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: Number.POSITIVE_INFINITY,
};

type Method = 'debug' | 'info' | 'warn' | 'error';

/**
 * A logger at `level` that builds the real one (`make`) on the first line it lets through, and never for lines below
 * the level (issue 39: loading pino is about 17 ms of a short command's start, and a `pair run` that goes well logs
 * nothing at `warn`). The same lines reach the same logger as when it is built at once; children are built from it on
 * their own first line. A level pino does not know is handed to `make` at once, so it is refused where it was.
 */
export function deferredLogger(level: string, make: () => Logger): Logger {
  const threshold = LEVEL_VALUES[level];
  if (threshold === undefined) return make();
  let real: Logger | undefined;
  return deferred(() => (real ??= make()), threshold);
}

function deferred(get: () => Logger, threshold: number): Logger {
  const at = (method: Method): Logger[Method] =>
    (LEVEL_VALUES[method] ?? 0) >= threshold
      ? (fields, message) => {
          get()[method](fields, message);
        }
      : () => undefined;
  return {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: (bindings) => {
      let child: Logger | undefined;
      return deferred(() => (child ??= get().child(bindings)), threshold);
    },
  };
}
