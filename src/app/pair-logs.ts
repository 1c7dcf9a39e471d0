import { pipeline } from 'node:stream/promises';
import { PassThrough, Transform, type Readable, type TransformCallback, type Writable } from 'node:stream';
import { ToolError, errorDetail, errorKind } from '../core/errors.js';
import type { LogRecord } from '../core/result.js';
import type { ContainerOutput } from './ports/container-runtime.js';
import { systemClock, type TimerHandle, type Timers } from './ports/clock.js';
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
  readonly nowMs: () => number;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** A log file could not be opened: the pair cannot keep its evidence (harness), whatever the engine did. */
export class LogOpenError extends ToolError {
  constructor(code: string) {
    super(code, `log file could not be opened (${code})`);
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
  /** Bytes the engine gave on this connection (before redaction): the drain's measure of progress. */
  received: number;
  /** The engine's stream ended (what is left is our own writing, fsync and close: never a stall). */
  sourceEnded: boolean;
  /** Bytes the redactor gave on this connection (the engine's copy as the file would hold it). */
  redacted: number;
  /** Bytes of the stream known to be missing from the file, and why; null while none are. */
  gap: LogGap | null;
}

export function withTimeout<T>(
  promise: Promise<T>,
  ms: number,
  timers: Timers = systemClock,
): Promise<T | 'timeout'> {
  let timer: TimerHandle | undefined;
  return Promise.race([
    promise,
    new Promise<'timeout'>((resolve) => {
      timer = timers.setTimer(ms, () => resolve('timeout'));
    }),
  ]).finally(() => timer?.cancel());
}

type PrefixGap = { readonly cause: 'engine_copy_differs' | 'engine_copy_short'; readonly differs_at: number };

/**
 * Checks the first `skip` bytes of a re-read log against the bytes the file already holds (`prefix`, read back from
 * its first byte) and drops them; passes the rest. When the engine's copy differs from the file, or ends before the
 * file's end, the two cannot be joined: nothing more is written and `onGap` says where (the file keeps its prefix).
 */
export class VerifyPrefix extends Transform {
  #left: number;
  #offset = 0;
  #diverged = false;
  #held: Uint8Array = new Uint8Array(0);
  readonly #prefix: AsyncIterator<Uint8Array>;
  constructor(
    skip: number,
    prefix: AsyncIterable<Uint8Array>,
    private readonly onGap: (gap: PrefixGap) => void,
  ) {
    super();
    this.#left = skip;
    this.#prefix = prefix[Symbol.asyncIterator]();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.#check(chunk).then(
      (rest) => done(null, rest),
      (err: unknown) => done(err as Error),
    );
  }

  override _flush(done: TransformCallback): void {
    if (!this.#diverged && this.#left > 0) this.#diverge('engine_copy_short');
    void this.#prefix.return?.();
    done();
  }

  async #check(chunk: Buffer): Promise<Buffer | undefined> {
    if (this.#diverged) return undefined;
    if (this.#left === 0) return chunk;
    let at = 0;
    while (at < chunk.length && this.#left > 0) {
      if (this.#held.length === 0) {
        const next = await this.#prefix.next();
        // The file is shorter than it said when opened (it cannot shrink): treat as a difference, never guess.
        if (next.done === true) return this.#diverge('engine_copy_differs');
        this.#held = next.value;
        continue;
      }
      const n = Math.min(this.#held.length, chunk.length - at, this.#left);
      const ours = chunk.subarray(at, at + n);
      if (Buffer.compare(ours, this.#held.subarray(0, n)) !== 0) {
        let same = 0;
        while (ours[same] === this.#held[same]) same++;
        this.#offset += same;
        return this.#diverge('engine_copy_differs');
      }
      this.#held = this.#held.subarray(n);
      this.#offset += n;
      this.#left -= n;
      at += n;
    }
    if (this.#left === 0) void this.#prefix.return?.();
    return at < chunk.length ? chunk.subarray(at) : undefined;
  }

  #diverge(cause: PrefixGap['cause']): undefined {
    this.#diverged = true;
    this.onGap({ cause, differs_at: this.#offset });
    void this.#prefix.return?.();
    return undefined;
  }
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
    private readonly deps: {
      readonly openLogs: OpenLogs;
      readonly createRedactor: (secrets: readonly string[]) => Transform;
      readonly logger: Logger;
    },
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
    let targets: Readonly<Record<LogStreamName, OpenedLog>>;
    try {
      targets = await this.deps.openLogs(append);
    } catch (err) {
      // Nobody will read these streams now: end them so the engine connection is not left blocked.
      output.stdout.destroy();
      output.stderr.destroy();
      throw new LogOpenError((err as { context?: { errno?: string } }).context?.errno ?? errorKind(err));
    }
    this.#watch(this.#pipe('stdout', output.stdout, targets.stdout, append));
    this.#watch(this.#pipe('stderr', output.stderr, targets.stderr, append));
  }

  #pipe(name: LogStreamName, source: Readable, target: OpenedLog, append: boolean): LogPipe {
    const pipe: LogPipe = {
      name,
      source,
      target,
      failure: null,
      settled: false,
      done: Promise.resolve(),
      received: 0,
      sourceEnded: false,
      redacted: 0,
      gap: null,
    };
    const redactor = this.deps.createRedactor(this.secrets);
    const stages: (Readable | Transform | Writable)[] = [source, redactor];
    // The redactor is deterministic, so the redacted re-read starts with exactly the bytes already kept: checked
    // against the file when it can be read back (an engine copy rotated away or altered is a named gap, never a splice).
    if (append && target.existingBytes > 0) stages.push(this.#prefixStage(pipe, target));
    stages.push(target.stream);
    pipe.done = pipeline(stages)
      .catch((err: unknown) => {
        // A stream the drain cut is a named gap, not a failure of the file.
        if (pipe.gap === null) pipe.failure ??= (err as NodeJS.ErrnoException).code ?? errorKind(err);
      })
      .finally(() => {
        pipe.settled = true;
      });
    // Counted by listening (after the pipeline has piped them: no byte flows before), not by stages of their own:
    // each stage costs a hop per chunk (docs/benchmarks.md, logs).
    source.on('data', (chunk: Uint8Array) => (pipe.received += chunk.byteLength));
    source.once('end', () => (pipe.sourceEnded = true));
    redactor.on('data', (chunk: Uint8Array) => (pipe.redacted += chunk.byteLength));
    this.#pipes.push(pipe);
    return pipe;
  }

  #prefixStage(pipe: LogPipe, target: OpenedLog): Transform {
    if (target.readBack === undefined) return new SkipBytes(target.existingBytes);
    return new VerifyPrefix(target.existingBytes, target.readBack(), (gap) => {
      pipe.gap = { ...gap, engine_bytes: 0 };
      const facts = {
        container: this.containerId(),
        stream: pipe.name,
        cause: gap.cause,
        kept_bytes: target.existingBytes,
        differs_at: gap.differs_at,
      };
      this.deps.logger.warn(
        facts,
        "the engine's copy of the log does not continue the file: later output is not appended",
      );
    });
  }

  #watch(pipe: LogPipe): void {
    void pipe.target.halted?.then((why) => {
      if (why === 'limit_exceeded') this.#limitExceeded ??= pipe.name;
      if (!this.#halt.signal.aborted)
        this.deps.logger.warn(
          { container: this.containerId(), stream: pipe.name, why },
          'log halted: controlled stop',
        );
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
      const output = neverStarted
        ? { stdout: new PassThrough().end(), stderr: new PassThrough().end() }
        : await follow();
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

  /**
   * Before the container is removed (its removal destroys the engine's copy): read both streams to their end and let
   * their files fsync and close. No fixed cut: draining goes on while bytes keep arriving, and stops only when none
   * arrived for `stallMs` or at `untilMs`; a stream cut then is recorded as a gap (`drain_stalled`, `drain_deadline`).
   * Returns once every file is finished.
   */
  async drain(bounds: DrainBounds): Promise<void> {
    const all = Promise.all(this.#pipes.map((p) => p.done));
    let ended = false;
    void all.then(() => (ended = true));
    const progress = (): number => this.#pipes.reduce((sum, p) => sum + p.received, 0);
    let seen = progress();
    let lastProgressMs = bounds.nowMs();
    while (!ended) {
      const tick = new AbortController();
      await Promise.race([all, bounds.sleep(bounds.pollMs, tick.signal)]);
      tick.abort();
      // One turn of the event loop for pending I/O before progress is judged (an injected sleep may not wait at all).
      await new Promise((resolve) => setImmediate(resolve));
      if (ended) break;
      const now = bounds.nowMs();
      if (progress() !== seen) {
        seen = progress();
        lastProgressMs = now;
      }
      // A stall is the engine's: a stream whose source ended is only waiting for its own file's fsync and close.
      const waitingOnEngine = this.#pipes.some((p) => !p.settled && !p.sourceEnded);
      const stalled = waitingOnEngine && now - lastProgressMs >= bounds.stallMs;
      const cause = now >= bounds.untilMs ? 'drain_deadline' : stalled ? 'drain_stalled' : null;
      if (cause !== null) {
        this.#cut(cause, bounds.stallMs);
        // The cut streams end at once (their sources destroyed); a moment for their files to be closed.
        await Promise.race([all, bounds.sleep(bounds.pollMs)]);
        break;
      }
    }
    // Ended streams closed their files (fsync, close) on their own; a cut one is finished here, before the removal.
    await Promise.all(this.#pipes.map((p) => p.target.finish().catch(() => undefined)));
  }

  #cut(cause: 'drain_stalled' | 'drain_deadline', stallMs: number): void {
    for (const p of this.#pipes) {
      if (p.settled) continue; // a stream that ended on its own is complete
      p.gap ??= { cause, engine_bytes: 0 };
      p.source.destroy();
    }
    this.deps.logger.warn(
      { container: this.containerId(), cause, stall_ms: stallMs },
      'log drain stopped before the streams ended: the logs are incomplete',
    );
  }

  /**
   * A followed log (reattach, reconnect) may end before the engine's copy does: seen on engine 20.10 when the
   * container stops while the follow is behind (a 100 MiB stream ended at 89 MiB, no error). Once the container has
   * stopped, its copy is read once more from the first byte (the engine reads a stopped container's log to its end):
   * the whole file is checked against it and what follows is appended. Only after streams that ended on their own,
   * without a gap, a failure or a cap; a read that cannot be opened keeps the old report (and is logged).
   */
  async catchUp(read: () => Promise<ContainerOutput>): Promise<void> {
    if (
      this.#pipes.length === 0 ||
      this.#pipes.some((p) => !p.settled || p.gap !== null || p.failure !== null)
    )
      return;
    const finished = await Promise.all(this.#pipes.map((p) => p.target.finish().catch(() => null)));
    if (finished.some((f) => f === null || f.failure !== null || f.limitExceeded === true)) return;
    const old = this.#pipes.splice(0);
    try {
      await this.connect(await read(), true);
    } catch (err) {
      for (const p of this.#pipes.splice(0)) await p.target.finish().catch(() => undefined);
      this.#pipes.push(...old);
      this.deps.logger.warn(
        { container: this.containerId(), err: errorDetail(err) },
        "the engine's copy of the logs could not be read again after the container stopped",
      );
    }
  }

  /** After the container is gone: give the streams `drainMs` to end, cut the rest, close every file and report. */
  async close(
    drainMs: number,
    containerExisted: boolean,
  ): Promise<{ logs: { stdout: LogRecord; stderr: LogRecord }; failure: string | null }> {
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
  async #report(
    containerExisted: boolean,
  ): Promise<{ logs: { stdout: LogRecord; stderr: LogRecord }; failure: string | null }> {
    const report: { stdout: LogRecord; stderr: LogRecord } = {
      stdout: { bytes: 0, closed: !containerExisted },
      stderr: { bytes: 0, closed: !containerExisted },
    };
    let failure: string | null = null;
    for (const p of this.#pipes) {
      const finished: LogFinish = await p.target
        .finish()
        .catch((err: unknown) => ({ bytes: 0, closed: false, failure: errorKind(err) }));
      const why = p.failure ?? finished.failure;
      report[p.name] = {
        bytes: finished.bytes,
        closed: finished.closed && p.failure === null,
        ...(finished.limitExceeded === true ? { limit_exceeded: true } : {}),
        ...(p.gap !== null ? { incomplete: { ...p.gap, engine_bytes: p.redacted } } : {}),
      };
      if (why !== null) failure ??= `${p.name}: ${why}`;
    }
    return { logs: report, failure };
  }
}
