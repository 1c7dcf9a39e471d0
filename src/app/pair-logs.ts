import { pipeline } from 'node:stream/promises';
import { PassThrough, Transform, type Readable, type TransformCallback, type Writable } from 'node:stream';
import { errorKind } from '../core/errors.js';
import type { LogRecord } from '../core/result.js';
import type { ContainerOutput } from './ports/container-runtime.js';
import type { Logger } from './ports/logger.js';

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

/** Opens a log file; `append` when reattaching (the file holds a prefix already). */
export type OpenLog = (stream: LogStreamName, append: boolean) => Promise<LogTarget & { readonly existingBytes: number }>;

/** A log file could not be opened: the pair cannot keep its evidence (harness), whatever the engine did. */
export class LogOpenError extends Error {
  constructor(readonly code: string) {
    super(`log file could not be opened (${code})`);
  }
}

interface LogPipe {
  readonly name: LogStreamName;
  readonly source: Readable;
  done: Promise<void>;
  readonly target: LogTarget;
  /** Why the stream stopped early (a pipeline error, or cut after the drain deadline), if it did. */
  failure: string | null;
  settled: boolean;
}

export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Drops the first `skip` bytes: the part of a re-read log that is already on disk. */
class SkipBytes extends Transform {
  #left: number;
  constructor(skip: number) {
    super();
    this.#left = skip;
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    if (this.#left >= chunk.length) {
      this.#left -= chunk.length;
      done();
      return;
    }
    const rest = this.#left > 0 ? chunk.subarray(this.#left) : chunk;
    this.#left = 0;
    done(null, rest);
  }
}

/**
 * The pair's two log streams, from the engine through the redactor into their files. A log that reaches its cap (or
 * cannot be written) aborts `halt`: the lifecycle stops the pair the controlled way, like `stop --terminate`.
 */
export class PairLogs {
  readonly #pipes: LogPipe[] = [];
  readonly #halt = new AbortController();
  #limitExceeded: LogStreamName | null = null;

  constructor(
    private readonly deps: { readonly openLog: OpenLog; readonly createRedactor: (secrets: readonly string[]) => Transform; readonly logger: Logger },
    private readonly secrets: readonly string[],
    private readonly containerId: () => string | null,
  ) {}

  /** Aborted when a log halted the pair. */
  get halt(): AbortSignal {
    return this.#halt.signal;
  }

  /** The stream whose log reached its cap, or null. */
  get limitExceeded(): LogStreamName | null {
    return this.#limitExceeded;
  }

  /** Streams both outputs into their files; throws LogOpenError when a file cannot be opened. */
  async connect(output: ContainerOutput, append: boolean): Promise<void> {
    for (const [name, source] of [['stdout', output.stdout], ['stderr', output.stderr]] as const) {
      let target: LogTarget & { readonly existingBytes: number };
      try {
        target = await this.deps.openLog(name, append);
      } catch (err) {
        // Nobody will read these streams now: end them so the engine connection is not left blocked.
        output.stdout.destroy();
        output.stderr.destroy();
        throw new LogOpenError((err as { context?: { errno?: string } }).context?.errno ?? errorKind(err));
      }
      this.#watch(this.#pipe(name, source, target, append));
    }
  }

  #pipe(name: LogStreamName, source: Readable, target: LogTarget & { readonly existingBytes: number }, append: boolean): LogPipe {
    const stages: (Readable | Transform | Writable)[] = [source, this.deps.createRedactor(this.secrets)];
    // The redactor is deterministic, so the redacted re-read starts with exactly the bytes already kept.
    if (append && target.existingBytes > 0) stages.push(new SkipBytes(target.existingBytes));
    stages.push(target.stream);
    const pipe: LogPipe = { name, source, target, failure: null, settled: false, done: Promise.resolve() };
    pipe.done = pipeline(stages)
      .catch((err: unknown) => {
        pipe.failure ??= (err as NodeJS.ErrnoException).code ?? errorKind(err);
      })
      .finally(() => {
        pipe.settled = true;
      });
    this.#pipes.push(pipe);
    return pipe;
  }

  #watch(pipe: LogPipe): void {
    void pipe.target.halted?.then((why) => {
      if (why === 'limit_exceeded') this.#limitExceeded ??= pipe.name;
      if (!this.#halt.signal.aborted) this.deps.logger.warn({ container: this.containerId(), stream: pipe.name, why }, 'log halted: controlled stop');
      this.#halt.abort();
    });
  }

  /** Waits up to `ms` for both streams to end (they normally end with the container's output). */
  async settle(ms: number): Promise<void> {
    await withTimeout(Promise.all(this.#pipes.map((p) => p.done)), ms);
  }

  /**
   * The engine went away and cannot give these streams again (no container, or no engine): a stream it cut is its
   * loss, not a failed write of ours.
   */
  forgiveCut(): void {
    for (const p of this.#pipes) if (p.settled) p.failure = null;
  }

  /**
   * The engine is back after a loss: if it cut the log streams, close those files and follow the container's log
   * again from the first byte, skipping what is already on disk (as a resume does). A write failure of the old
   * files is kept in the new pipe's place so it is not forgotten. Throws when the log cannot be followed again.
   */
  async reconnect(follow: () => Promise<ContainerOutput>, neverStarted: boolean): Promise<void> {
    // Streams the engine cut end within moments of its going away; ones still flowing after a second were not cut.
    await this.settle(1_000);
    if (this.#pipes.length > 0 && !this.#pipes.every((p) => p.settled)) return;
    const old = this.#pipes.splice(0);
    const writeFailures = new Map<string, string>();
    for (const p of old) {
      const finished = await p.target.finish().catch((err: unknown) => ({ failure: errorKind(err) }));
      if (finished.failure !== null) writeFailures.set(p.name, finished.failure);
    }
    try {
      const output = neverStarted ? { stdout: new PassThrough().end(), stderr: new PassThrough().end() } : await follow();
      await this.connect(output, true);
    } catch (err) {
      // Not reconnected: keep the old pipes (their files are finished, their reports stand: bytes kept, a cap reached,
      // the cut stream's failure) so result.json still tells what was written.
      for (const p of this.#pipes.splice(0)) await p.target.finish().catch(() => undefined);
      this.#pipes.push(...old);
      throw err;
    }
    for (const p of this.#pipes) p.failure = writeFailures.get(p.name) ?? null;
  }

  /** After the container is gone: give the streams `drainMs` to end, cut the rest, close every file and report. */
  async close(drainMs: number, containerExisted: boolean): Promise<{ logs: { stdout: LogRecord; stderr: LogRecord }; failure: string | null }> {
    if ((await withTimeout(Promise.all(this.#pipes.map((p) => p.done)), drainMs)) === 'timeout') {
      for (const p of this.#pipes) {
        if (p.settled) continue; // a stream that ended on its own is complete
        p.failure ??= 'cut after the drain deadline';
        p.source.destroy();
      }
      await this.settle(1_000);
    }
    return this.#report(containerExisted);
  }

  /** Close every log file and report it; a stream cut short or never opened is not a closed log. */
  async #report(containerExisted: boolean): Promise<{ logs: { stdout: LogRecord; stderr: LogRecord }; failure: string | null }> {
    const report = { stdout: { bytes: 0, closed: !containerExisted }, stderr: { bytes: 0, closed: !containerExisted } };
    let failure: string | null = null;
    for (const p of this.#pipes) {
      const finished: LogFinish = await p.target.finish().catch((err: unknown) => ({ bytes: 0, closed: false, failure: errorKind(err) }));
      const why = p.failure ?? finished.failure;
      report[p.name] = {
        bytes: finished.bytes,
        closed: finished.closed && p.failure === null,
        ...(finished.limitExceeded === true ? { limit_exceeded: true } : {}),
      };
      if (why !== null) failure ??= `${p.name}: ${why}`;
    }
    return { logs: report, failure };
  }
}
