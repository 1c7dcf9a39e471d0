import { ExitCode, RoboguideError } from '../core/errors.js';
import { terminalSafe } from '../core/terminal-text.js';

/**
 * How our own diagnostics reach stderr (issue 40: `pair run` mixed raw pino JSON lines into its human output).
 * `ROBOGUIDE_LOG_FORMAT=json` or `text` decides; unset, a terminal gets text and anything else (a pipe, a file, a
 * supervisor's log) the JSON lines as before.
 */
export type StderrLogFormat = 'json' | 'text';

export function stderrLogFormat(setting: string | undefined, stderrIsTerminal: boolean): StderrLogFormat {
  if (setting === 'json' || setting === 'text') return setting;
  if (setting !== undefined && setting !== '')
    throw new RoboguideError(
      'E_USAGE',
      `ROBOGUIDE_LOG_FORMAT must be "json" or "text" (not ${JSON.stringify(setting)})`,
      {
        exitCode: ExitCode.invalidInput,
      },
    );
  return stderrIsTerminal ? 'text' : 'json';
}

const LEVELS: Readonly<Record<number, string>> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warning',
  50: 'error',
  60: 'fatal',
};
const LEFT_OUT = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'v']);

/**
 * One pino line (already masked by the logger's hook) as one human line: `warning: message (job pair-1, …)`, made
 * inert for a terminal. A line that is not JSON is passed on as it is, made inert.
 */
export function humanLogLine(line: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return terminalSafe(line.endsWith('\n') ? line : `${line}\n`);
  }
  const level = LEVELS[Number(record.level)] ?? String(record.level);
  const fields = Object.entries(record)
    .filter(([key]) => !LEFT_OUT.has(key))
    .map(([key, value]) => `${key} ${typeof value === 'string' ? value : JSON.stringify(value)}`);
  const message = typeof record.msg === 'string' ? record.msg : '';
  return `${terminalSafe(`${level}: ${message}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`)}\n`;
}

/**
 * The destination of our stderr logger when ROBOGUIDE_LOG_FORMAT (or a terminal) asks for text: each line written to
 * stderr as `humanLogLine` does; null for pino's JSON lines on fd 2.
 */
export function humanLogDestination(
  setting: string | undefined = process.env['ROBOGUIDE_LOG_FORMAT'],
  out: { write(text: string): unknown; readonly isTTY?: boolean } = process.stderr,
): { write(line: string): void } | null {
  if (stderrLogFormat(setting, out.isTTY === true) === 'json') return null;
  return {
    write(line: string): void {
      out.write(humanLogLine(line));
    },
  };
}
