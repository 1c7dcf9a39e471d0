import { writeSync } from 'node:fs';
import type { Logger } from '../app/ports/logger.js';
import { terminalSafe } from '../core/terminal-text.js';

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
 *
 * A line that comes when the logger cannot be built (its first line is often a failure's, when descriptors may be
 * spent) is not lost and throws nothing: its level and message go to stderr as one plain line, without its fields
 * (a message never holds a secret: the Logger port's rule; fields may, and only the real logger masks them). The
 * next line tries to build it again. `now` builds it at once (a long-running process: serve, a supervisor).
 */
export function deferredLogger(level: string, make: () => Logger, now = false): Logger {
  const threshold = Object.hasOwn(LEVEL_VALUES, level) ? LEVEL_VALUES[level] : undefined;
  if (threshold === undefined || now) return make();
  let real: Logger | undefined;
  return deferred(() => (real ??= make()), threshold);
}

/** The one plain line of a log line whose logger could not be built (see above); nothing if stderr refuses it too. */
function plainLine(method: Method, message: string, err: unknown): void {
  const code = typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : 'error';
  try {
    writeSync(
      2,
      `${terminalSafe(`roboguide-eval ${method}: ${message} (our log could not be opened: ${code})`)}\n`,
    );
  } catch {
    // stderr is gone too: nowhere left to say it
  }
}

function deferred(get: () => Logger, threshold: number): Logger {
  const at = (method: Method): Logger[Method] =>
    (LEVEL_VALUES[method] ?? 0) >= threshold
      ? (fields, message) => {
          let logger: Logger;
          try {
            logger = get();
          } catch (err) {
            plainLine(method, message, err);
            return;
          }
          logger[method](fields, message);
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
