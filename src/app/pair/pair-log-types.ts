// The types of a pair's log streams (targets, opened files, the drain's bounds, a pipe) and the log-open error.
import type { Readable, Writable } from 'node:stream';
import { ToolError } from '../../core/errors.js';
import type { LogRecord } from '../../core/result.js';
import type { Clock } from '../ports/clock.js';

export type LogStreamName = 'stdout' | 'stderr';

/** What a log sink reports once it is finished. */
export interface LogFinish {
  readonly bytes: number;
  readonly closed: boolean;
  readonly failure: string | null;
  readonly limitExceeded?: boolean;
}

/** A sink for one container stream: bytes reach disk as they arrive; `finish` reports what was kept. */
export interface LogTarget {
  readonly stream: Writable;
  finish(): Promise<LogFinish>;
  /**
   * Settles when the pair must be stopped for this log's sake: its cap was reached (`limit_exceeded`), or the
   * file cannot take more bytes (`write_failed`, e.g. ENOSPC). Absent or never settling: no such stop.
   */
  readonly halted?: Promise<'limit_exceeded' | 'write_failed'>;
}

/**
 * A log file opened for the pair. `existingBytes`: what it holds already (a reattach appends). `readBack`, when given,
 * reads those bytes back from the first one: a reattach then checks that the engine's copy starts with exactly them
 * before it appends anything (without it the prefix is skipped unchecked, e.g. a file already at its cap).
 */
export type OpenedLog = LogTarget & {
  readonly existingBytes: number;
  readonly readBack?: () => AsyncIterable<Uint8Array>;
};

/**
 * Opens both log files together (their folder fsynced once: docs/spec.md §4 "Durability"); `append` when
 * reattaching (the files hold a prefix already). Fails whole: a file that cannot be opened leaves none open.
 */
export type OpenLogs = (append: boolean) => Promise<Readonly<Record<LogStreamName, OpenedLog>>>;

/** Why bytes of a stream are missing from its file (docs/spec.md 6.6); recorded as `logs.<stream>.incomplete`. */
export type LogGap = NonNullable<LogRecord['incomplete']>;

/** How the logs are drained before the container is removed: until both streams end, bounded by progress and time. */
export interface DrainBounds {
  /** Cut when no byte arrived for this long. */
  readonly stallMs: number;
  /** Cut at this instant (epoch ms) whatever the progress. */
  readonly untilMs: number;
  /** How often progress is looked at. */
  readonly pollMs: number;
  /** The time read, the waits between the looks, and the turn of the event loop before each. */
  readonly clock: Clock;
}

/** A log file could not be opened: the pair cannot keep its evidence (harness), whatever the engine did. */
export class LogOpenError extends ToolError {
  constructor(code: string) {
    super(code, `log file could not be opened (${code})`);
  }
}

export interface LogPipe {
  readonly name: LogStreamName;
  readonly source: Readable;
  done: Promise<void>;
  readonly target: LogTarget;
  /** Why the stream stopped early (a pipeline error, or cut after the drain deadline), if it did. */
  failure: string | null;
  settled: boolean;
  /** Bytes the engine gave on this connection (before redaction): the drain's measure of progress. */
  received: number;
  /** The engine's stream ended (what is left is our own writing, fsync and close: never a stall). */
  sourceEnded: boolean;
  /** Bytes the redactor gave on this connection (the engine's copy as the file would hold it). */
  redacted: number;
  /** Bytes of the stream known to be missing from the file, and why; null while none are. */
  gap: LogGap | null;
}
