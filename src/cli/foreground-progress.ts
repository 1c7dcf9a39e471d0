/**
 * `e1-batch start --foreground` (issue 40 item 4): what the operator sees while the supervisor runs in this process.
 * Progress: a line on stderr whenever status.json (written by the supervisor at every pair's start and end) shows
 * another set of running pairs or another count of finished ones. Ctrl-C: what the first signal does (a stop: no new
 * pair; the running ones finish), the second (a terminate: the running pairs' controlled stop) and the third (their
 * stop budget cut short: SIGKILL now), and the exit
 * status a shell expects of a command stopped by a signal (128 + its number: 130 for SIGINT, 143 for SIGTERM).
 * Reads only; the supervisor's own handlers act on the signals.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { constants } from 'node:os';

const POLL_MS = 1_000;

interface StatusView {
  readonly state?: string;
  readonly counts?: Readonly<Record<string, number>>;
  readonly running?: readonly { readonly job_id: string }[];
}

const FAILED = ['infrastructure_failure', 'fatal', 'provider_stop', 'harness_failure'] as const;

/** One progress line of a status.json, or null when it cannot be read (not written yet, mid-rename). */
export function progressLine(status: StatusView): string | null {
  const c = status.counts;
  if (c === undefined) return null;
  const failed = FAILED.reduce((sum, k) => sum + (c[k] ?? 0), 0);
  const finished = (c['completed'] ?? 0) + failed;
  const running = (status.running ?? []).map((r) => r.job_id);
  return `progress: ${finished}/${c['total'] ?? 0} finished (${c['completed'] ?? 0} completed, ${failed} failed); running: ${running.length === 0 ? 'none' : running.join(', ')}`;
}

export interface ForegroundWatch {
  /** The signal that interrupted the batch, if any. */
  readonly signal: () => NodeJS.Signals | null;
  /** The exit status for that signal (128 + its number), or null. */
  readonly exitCode: () => number | null;
  stop(): Promise<void>;
}

export function watchForeground(
  output: string,
  bin: string,
  write: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): ForegroundWatch {
  let received: NodeJS.Signals | null = null;
  let count = 0;
  const onSignal = (signal: NodeJS.Signals): void => {
    count += 1;
    received ??= signal;
    if (count === 1)
      write(
        `${signal}: stopping the batch: no new pair starts; the running pairs finish and are archived. ` +
          `Press Ctrl-C again to stop them now (SIGTERM, then their stop budget). Later: \`${bin} e1-batch resume --output ${output}\``,
      );
    else if (count === 2)
      write(
        `${signal} again: terminating the running pairs (SIGTERM, then their stop budget); ` +
          `press Ctrl-C once more to kill them now`,
      );
    else if (count === 3)
      write(
        `${signal} a third time: killing the running pairs now (SIGKILL); their evidence is still collected…`,
      );
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let last = '';
  const poll = async (): Promise<void> => {
    const text = await readFile(join(output, 'status.json'), 'utf8').catch(() => null);
    if (text === null) return;
    let line: string | null;
    try {
      line = progressLine(JSON.parse(text) as StatusView);
    } catch {
      return; // a torn read cannot happen (atomic writes); anything else: the next poll
    }
    if (line !== null && line !== last) {
      last = line;
      write(line);
    }
  };
  write(
    `supervising in the foreground (Ctrl-C: stop the batch; twice: terminate its running pairs; three times: kill them now)`,
  );
  let polling = Promise.resolve();
  const timer = setInterval(() => {
    polling = polling.then(poll);
  }, POLL_MS);
  return {
    signal: () => received,
    exitCode: () => (received === null ? null : 128 + (constants.signals[received] ?? 0)),
    stop: async () => {
      clearInterval(timer);
      await polling;
      await poll();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
