import type { Logger } from '../app/ports/logger.js';

/** A Logger that builds the real one (`create`, synchronous) on its first line, once; children share it. */
export function lazyLogger(create: () => Logger): Logger {
  let real: Logger | null = null;
  const get = (): Logger => (real ??= create());
  return {
    info: (fields, message) => get().info(fields, message),
    warn: (fields, message) => get().warn(fields, message),
    error: (fields, message) => get().error(fields, message),
    debug: (fields, message) => get().debug(fields, message),
    child: (bindings) => lazyLogger(() => get().child(bindings)),
  };
}
