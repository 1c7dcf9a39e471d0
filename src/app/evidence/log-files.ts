import { basename } from 'node:path';
import type { Clock } from '../ports/clock.js';
import { failpoint } from '../ports/failpoints.js';
import type { FileHandle, FileSystem } from '../ports/file-system.js';
import type { DirectorySync } from './directory-sync.js';
import { LogSink } from './log-sink.js';
import { attempt, FILE_PERMISSIONS, ignoreFailure, parentRel } from './store-errors.js';

/** How a log file is opened: a new one, or (`append`) the existing one; `limitBytes` caps it. */
export interface LogOpenOptions {
  readonly append?: boolean;
  readonly limitBytes?: number;
  readonly blockBytes?: number;
  /** The timer that writes a held partial block. */
  readonly clock: Pick<Clock, 'setTimer'>;
}

interface OpenedFile {
  readonly rel: string;
  readonly handle: FileHandle;
  readonly initialBytes: number;
}

/**
 * Log files (exclusive create, 0600; with `append` the existing ones, bytes counting from their size), all opened,
 * then their directories fsynced once each; a failure closes those already opened.
 */
export async function openLogFiles<const R extends readonly string[]>(
  fs: FileSystem,
  resolve: (rel: string) => string,
  dirs: DirectorySync,
  rels: R,
  options: LogOpenOptions,
): Promise<{ -readonly [K in keyof R]: LogSink }> {
  const opened: OpenedFile[] = [];
  try {
    for (const rel of rels) opened.push(await openLogFile(fs, resolve(rel), rel, options.append === true));
    await dirs.syncAll(rels.map(parentRel));
  } catch (err) {
    for (const { handle } of opened) await ignoreFailure(() => handle.close());
    throw err;
  }
  const sinks = opened.map(({ rel, handle, initialBytes }): LogSink => {
    failpoint(`log_opened:${basename(rel)}`);
    return new LogSink(handle, {
      clock: options.clock,
      initialBytes,
      ...(options.limitBytes !== undefined ? { limitBytes: options.limitBytes } : {}),
      ...(options.blockBytes !== undefined ? { blockBytes: options.blockBytes } : {}),
    });
  });
  // One sink per path, in order: the tuple type says no more than that.
  return sinks as { -readonly [K in keyof R]: LogSink };
}

async function openLogFile(fs: FileSystem, path: string, rel: string, append: boolean): Promise<OpenedFile> {
  const handle = await attempt('open', rel, 'cannot open log file', () =>
    fs.open(path, append ? 'append' : 'create-exclusive', FILE_PERMISSIONS),
  );
  try {
    const initialBytes = append
      ? (await attempt('lstat', rel, 'cannot inspect log file', () => fs.lstat(path))).sizeBytes
      : 0;
    return { rel, handle, initialBytes };
  } catch (err) {
    await ignoreFailure(() => handle.close());
    throw err;
  }
}
