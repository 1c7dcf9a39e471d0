import { pipeline } from 'node:stream/promises';
import { PassThrough, type Readable, type Transform, type Writable } from 'node:stream';
import { errorDetail, errorKind } from '../../core/errors.js';
import type { LogRecord } from '../../core/result.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerOutput } from '../ports/container-runtime.js';
import type { Logger } from '../ports/logger.js';
import {
  LogOpenError,
  type DrainBounds,
  type LogFinish,
  type LogPipe,
  type LogStreamName,
  type OpenLogs,
  type OpenedLog,
} from './pair-log-types.js';
import { SkipBytes, VerifyPrefix, withTimeout } from './pair-log-transforms.js';

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
      readonly clock: Clock;
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
    await withTimeout(Promise.all(this.#pipes.map((p) => p.done)), ms, this.deps.clock);
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
    let lastProgressMs = bounds.clock.now().getTime();
    while (!ended) {
      const tick = new AbortController();
      await Promise.race([all, bounds.clock.sleep(bounds.pollMs, tick.signal)]);
      tick.abort();
      // One turn of the event loop for pending I/O before progress is judged (an injected sleep may not wait at all).
      await bounds.clock.nextTurn();
      if (ended) break;
      const now = bounds.clock.now().getTime();
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
        await Promise.race([all, bounds.clock.sleep(bounds.pollMs)]);
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
    if (
      (await withTimeout(Promise.all(this.#pipes.map((p) => p.done)), drainMs, this.deps.clock)) === 'timeout'
    ) {
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
