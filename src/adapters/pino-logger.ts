import { createRequire } from 'node:module';
import type Pino from 'pino';
import type { Logger } from '../app/ports/logger.js';
import { pinoRedactionOptions } from './log-redaction.js';

/**
 * The tool's own JSON log. Resolved secret values and `authorization` fields are masked before a line is
 * formatted, so they never reach the file.
 */
export function createFileLogger(
  path: string,
  secrets: readonly string[],
  bindings: Record<string, unknown> = {},
): Logger & { flush(): void } {
  // Required here, not imported at the top: a module that only might make a file logger (the process roots) does not
  // load pino with it (issue 39, start-up).
  const pino = createRequire(import.meta.url)('pino') as typeof Pino;
  const destination = pino.destination({ dest: path, sync: true, mkdir: true, mode: 0o600 });
  const logger = pino(
    { level: process.env['ROBOGUIDE_LOG_LEVEL'] ?? 'info', base: bindings, ...pinoRedactionOptions(secrets) },
    destination,
  );
  return Object.assign(logger as unknown as Logger, { flush: () => destination.flushSync() });
}
